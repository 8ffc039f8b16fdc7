"""Checkpoint files against independent checks: the manifest's sizes and sha256 from hashlib,
every damage ``verify_checkpoint`` must name, the rotation's default, a crash's leftover
temporary directory, a run directory that does not exist yet, old checkpoints without tensors,
and a tampered optimizer file that must not unpickle code. Each test here was written against a
surviving mutant of ``checkpoints.py`` (docs/testing.md, "Mutation testing")."""

from __future__ import annotations

import hashlib
import json
import pickle

import pytest
import torch

from cast_core.checkpoints import (
    checkpoint_dirs,
    find_intact_checkpoint,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
    step_of,
    verify_checkpoint,
)
from cast_core.testing.fakes import FakePolicy


def saved(run, step: int, **kw):
    policy = FakePolicy()
    opt = torch.optim.SGD(policy.trainable_parameters(), lr=0.1)
    return save_checkpoint(run, step, policy, opt, {"note": "x"}, **kw), policy, opt


def test_manifest_records_every_file_with_its_true_size_and_sha256(tmp_path):
    path, _, _ = saved(tmp_path / "run", 1, tensors={"ema.0": torch.ones(3)})
    files = json.loads((path / "manifest.json").read_text())["files"]
    on_disk = sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.is_file() and p.name != "manifest.json")
    assert sorted(files) == on_disk and "state.json" in files and "optimizer.pt" in files
    for name, want in files.items():
        data = (path / name).read_bytes()
        assert want == {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}, name


def test_verify_names_each_damage(tmp_path):
    path, _, _ = saved(tmp_path / "run", 5)
    assert verify_checkpoint(path) is None
    (path / "optimizer.pt").write_bytes((path / "optimizer.pt").read_bytes()[:-1])
    assert (
        verify_checkpoint(path) == f"optimizer.pt has {(path / 'optimizer.pt').stat().st_size} bytes, "
        f"the manifest says {(path / 'optimizer.pt').stat().st_size + 1}"
    )
    path2, _, _ = saved(tmp_path / "run2", 5)
    state = json.loads((path2 / "state.json").read_text())
    state["step"] = 4
    (path2 / "state.json").write_text(json.dumps(state))
    assert verify_checkpoint(path2) == "state.json says step 4"
    (path2 / "state.json").write_text("{")
    assert verify_checkpoint(path2) == "state.json is unreadable (JSONDecodeError)"
    (path2 / "state.json").unlink()
    assert verify_checkpoint(path2) == "state.json is missing"
    path3, _, _ = saved(tmp_path / "run3", 5)
    (path3 / "manifest.json").write_text("[")
    assert verify_checkpoint(path3) == "manifest.json is unreadable (JSONDecodeError)"


def test_find_intact_walks_back_and_step_of_reads_the_name(tmp_path):
    run = tmp_path / "run"
    for step in (1, 2, 3):
        saved(run, step)
    newest = run / "checkpoints" / "step-00003"
    (newest / "state.json").write_text("{")
    intact, skipped = find_intact_checkpoint(run)
    assert step_of(intact) == 2 and step_of(newest) == 3
    assert skipped == [(newest, "state.json is unreadable (JSONDecodeError)")]


def test_only_final_step_directories_with_state_count(tmp_path):
    run = tmp_path / "run"
    assert latest_checkpoint(run) is None
    (run / "checkpoints").mkdir(parents=True)
    assert latest_checkpoint(run) is None, "an empty checkpoints/ holds no checkpoint"
    saved(run, 1)
    leftover = run / "checkpoints" / ".step-00002.tmp"
    leftover.mkdir()
    (leftover / "state.json").write_text("{}")  # a crash between state.json and the rename
    (run / "checkpoints" / "step-00003").mkdir()  # no state.json
    assert [p.name for p in checkpoint_dirs(run)] == ["step-00001"]


def test_default_rotation_keeps_three_and_a_crash_leftover_is_replaced(tmp_path):
    run = tmp_path / "not" / "yet" / "there"
    for step in range(1, 6):
        saved(run, step)
    assert [p.name for p in checkpoint_dirs(run)] == ["step-00003", "step-00004", "step-00005"]
    stale = run / "checkpoints" / ".step-00006.tmp"
    stale.mkdir()
    (stale / "junk").write_text("half-written")
    path, _, _ = saved(run, 6)
    assert not stale.exists() and not (path / "junk").exists() and verify_checkpoint(path) is None
    again, _, _ = saved(run, 6)  # re-saving a step replaces it whole
    assert verify_checkpoint(again) is None


def test_load_returns_tensors_and_refuses_code(tmp_path):
    path, policy, opt = saved(tmp_path / "run", 1, tensors={"ema.0": torch.arange(3.0)})
    state, tensors = load_checkpoint(path, policy, opt)
    assert state["step"] == 1 and torch.equal(tensors["ema.0"], torch.arange(3.0))
    blob = torch.load(path / "optimizer.pt", weights_only=True)
    del blob["tensors"]  # a checkpoint from before tensors were stored
    torch.save(blob, path / "optimizer.pt")
    assert load_checkpoint(path, policy, opt)[1] == {}
    torch.save(
        {"optimizer": opt.state_dict(), "tensors": {}, "payload": pickle.loads(pickle.dumps(Evil()))},
        path / "optimizer.pt",
    )
    with pytest.raises(pickle.UnpicklingError):
        load_checkpoint(path, policy, opt)
    (path / "state.json").unlink()
    with pytest.raises(FileNotFoundError, match=r"is not a complete checkpoint \(no state.json\)"):
        load_checkpoint(path, policy, opt)


class Evil:
    """Stands for any object a tampered file could carry: a weights-only load refuses it."""

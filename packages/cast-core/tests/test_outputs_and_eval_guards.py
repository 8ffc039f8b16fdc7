"""Outputs on a full or read-only disk, results that could not be written where asked, eval
results compared only with results measured the same way, `cast report`'s own inputs, and the
image files `cast score` reads (16-bit, float, animated)."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from PIL import Image

from cast_core.checkpoints import CheckpointWriteError, checkpoint_dirs, verify_checkpoint
from cast_core.cli import cli
from cast_core.commands.inputs import load_image
from cast_core.commands.output import ResultNotWritten, save_result
from cast_core.errors import InputError
from cast_core.report import write_report
from cast_core.run_dir import WriteError, read_metrics, write_atomic
from tests.test_trainer import fake_config, quiet

from cast_core.trainer import Trainer

ENOSPC = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def files_in(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def half_then_full(path: Path) -> None:
    """A writer that gets some bytes out before the disk fills up."""
    Path(path).write_bytes(b"x" * 100)
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


# == write_atomic: the one way cast writes a file it must not leave half-written ==================
def test_a_full_disk_leaves_no_partial_file_and_names_path_and_space(tmp_path):
    target = tmp_path / "out" / "report.html"
    with pytest.raises(WriteError, match=rf"^cannot write {target}: no space left on device \(.*free\)$"):
        write_atomic(target, half_then_full)
    assert files_in(tmp_path) == []


def test_a_full_disk_keeps_the_previous_file_whole(tmp_path, monkeypatch):
    target = tmp_path / "report.html"
    target.write_text("the old report")

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(WriteError, match=r"no space left on device \(needs about 2.0 KB, .* free\)"):
        write_atomic(target, "y" * 2048)
    monkeypatch.undo()
    assert target.read_text() == "the old report" and files_in(tmp_path) == ["report.html"]


def test_a_read_only_disk_says_read_only(tmp_path):
    def read_only(path):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))

    with pytest.raises(WriteError, match=r"cannot write .*x.json: read-only file system$"):
        write_atomic(tmp_path / "x.json", read_only)


def test_torch_save_wording_counts_as_full_only_when_the_disk_is_nearly_full(tmp_path, monkeypatch):
    import shutil

    def torch_like(path):
        Path(path).write_bytes(b"partial")
        raise RuntimeError("[enforce fail at inline_container.cc:778] . PytorchStreamWriter failed writing file data/0")

    monkeypatch.setattr(shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10 << 20, 10 << 20, 1000))
    with pytest.raises(WriteError, match="no space left on device"):
        write_atomic(tmp_path / "o.pt", torch_like)
    monkeypatch.setattr(shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10 << 30, 1 << 30, 9 << 30))
    with pytest.raises(RuntimeError, match="PytorchStreamWriter"):  # plenty of room: not the disk, a bug
        write_atomic(tmp_path / "o.pt", torch_like)
    assert files_in(tmp_path) == []


# == results that cannot be written where asked: saved elsewhere, and the command fails =============
def test_save_result_keeps_a_copy_and_raises_naming_both(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "full").mkdir()

    def write(path):
        if Path(path).parent.name == "full":
            half_then_full(path)
        Path(path).write_text('{"gm": 0.5}')

    with pytest.raises(ResultNotWritten) as caught:
        save_result(str(tmp_path / "full" / "r.json"), write)
    message = str(caught.value)
    assert f"could not write {tmp_path / 'full' / 'r.json'} (no space left on device" in message
    spare = Path(message.rsplit("the result is saved at ", 1)[1])
    assert spare.parent == tmp_path and json.loads(spare.read_text()) == {"gm": 0.5}
    assert files_in(tmp_path / "full") == []


def test_emit_json_prints_before_it_fails_so_stdout_keeps_the_result(tmp_path, monkeypatch, capsys):
    """`cast compare --json --out FULL`: the JSON reaches stdout, then the command fails."""
    from cast_core.commands.output import emit_json

    monkeypatch.chdir(tmp_path)
    (tmp_path / "full").mkdir()
    full_disk_under(monkeypatch, tmp_path / "full")
    with pytest.raises(ResultNotWritten, match="the result is saved at"):
        emit_json({"gm": 0.25}, str(tmp_path / "full" / "c.json"), True)
    assert json.loads(capsys.readouterr().out) == {"gm": 0.25}


@pytest.fixture
def prompts_file(tmp_path):
    path = tmp_path / "prompts.txt"
    path.write_text("a red circle\na blue square\ntwo green triangles\n")
    return path


def eval_args(prompts_file, *more):
    return ["eval", "--policy", "fake", "--prompts", str(prompts_file), "--decomposer", "fake", "-k", "2",
            "--steps", "2", "--scorer", "left-brightness", *more]  # fmt: skip


def full_disk_under(monkeypatch, folder: Path):
    """Every atomic write into ``folder`` fails as on a full disk; elsewhere writes work."""
    import cast_core.run_dir as run_dir

    real = run_dir.write_atomic

    def write_atomic(path, data, needed=None):
        if Path(path).parent == folder:
            return real(path, half_then_full)
        return real(path, data, needed)

    monkeypatch.setattr(run_dir, "write_atomic", write_atomic)


def test_eval_that_cannot_write_its_out_prints_the_result_and_exits_1(tmp_path, monkeypatch, prompts_file):
    monkeypatch.chdir(tmp_path)
    full = tmp_path / "full"
    full.mkdir()
    full_disk_under(monkeypatch, full)
    out = CliRunner().invoke(cli, eval_args(prompts_file, "--out", str(full / "r.json")))
    assert out.exit_code == 1, out.output
    assert "GM " in out.output  # the finished evaluation is still reported
    error = [line for line in out.output.splitlines() if line.startswith("Error:")]
    assert len(error) == 1 and f"could not write {full / 'r.json'} (no space left on device" in error[0]
    spare = Path(error[0].rsplit("saved at ", 1)[1])
    assert json.loads(spare.read_text())["images"] == 6 and files_in(full) == []


def test_sample_that_cannot_write_its_image_exits_1_naming_the_copy(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    full = tmp_path / "full"
    full.mkdir()
    full_disk_under(monkeypatch, full)
    out = CliRunner().invoke(
        cli, ["sample", "--policy", "fake", "-p", "a cat", "--steps", "2", "-o", str(full / "x.png")]
    )
    assert out.exit_code == 1 and "the result is saved at" in out.output, out.output
    assert Image.open(out.output.rsplit("saved at ", 1)[1].strip()).size[0] > 0 and files_in(full) == []


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_an_out_path_that_no_file_can_be_created_in_is_refused_before_the_work(prompts_file):
    out = CliRunner().invoke(cli, eval_args(prompts_file, "--out", "/proc/x.json"))
    assert out.exit_code == 2 and "/proc/x.json cannot be written" in out.output, out.output
    assert "sampling" not in out.output


# == --baseline: only results judged the same way ====================================================
def test_eval_records_its_judge_and_refuses_a_baseline_judged_otherwise(tmp_path, prompts_file):
    base = tmp_path / "base.json"
    assert CliRunner().invoke(cli, eval_args(prompts_file, "--out", str(base))).exit_code == 0
    record = json.loads(base.read_text())
    assert {k: record[k] for k in ("policy", "scorer", "decomposer", "scorer_kwargs", "decomposer_kwargs")} == {
        "policy": "fake",
        "scorer": "left-brightness",
        "decomposer": "fake",
        "scorer_kwargs": {},
        "decomposer_kwargs": {},
    }
    assert record["suite"] == str(prompts_file)
    args = eval_args(prompts_file, "--baseline", str(base))
    other = [a if a != "left-brightness" else "constant" for a in args]
    out = CliRunner().invoke(cli, other)
    errors = [line for line in out.output.splitlines() if line.startswith("Error")]
    assert out.exit_code == 2 and len(errors) == 1, out.output
    assert "measured differently: scorer 'left-brightness' there, 'constant' here" in errors[0]
    out = CliRunner().invoke(cli, [*other, "--set", "scorer_kwargs.value=0.5"])
    assert "scorer_kwargs {} there, {'value': 0.5} here" in out.output
    same = CliRunner().invoke(cli, args)
    assert same.exit_code == 0 and "paired difference" in same.output and "warning" not in same.output


def test_an_old_baseline_without_the_record_is_compared_with_a_warning(tmp_path, prompts_file):
    base = tmp_path / "base.json"
    CliRunner().invoke(cli, eval_args(prompts_file, "--out", str(base)))
    old = {k: v for k, v in json.loads(base.read_text()).items() if k not in ("decomposer", "scorer_kwargs")}
    base.write_text(json.dumps(old))
    out = CliRunner().invoke(cli, eval_args(prompts_file, "--baseline", str(base)))
    assert out.exit_code == 0, out.output
    warnings = [line for line in out.stderr.splitlines() if line.startswith("warning")]
    assert (
        len(warnings) == 1 and "does not record its scorer_kwargs, decomposer (written by an older cast)" in warnings[0]
    )


def test_compare_evaluations_refuses_results_of_different_judges():
    from cast_core.comparison import compare_evaluations

    one = {"gm": 0.5, "am": 0.5, "by_skill": {}, "by_atom_count": {}, "images": 4, "prompts": 2,
           "per_prompt_gm": [0.4, 0.6], "per_prompt_skill": [{}, {}], "scorer": "a"}  # fmt: skip
    with pytest.raises(ValueError, match="scorer 'a' there, 'b' here"):
        compare_evaluations([0], [one], [{**one, "scorer": "b"}])
    assert compare_evaluations([0], [one], [dict(one)])["per_seed"][0]["gm_difference"]["delta"] == 0


# == cast train on a full disk: one line, the run resumable =========================================
def test_a_checkpoint_that_does_not_fit_stops_the_run_resumable(tmp_path, monkeypatch):
    run = tmp_path / "run"
    cfg = fake_config(steps=4, checkpoint_every=2, sample_every=0)
    real = torch.save

    def save(obj, path, *a, **k):
        if "step-00004" in str(path):
            half_then_full(path)
        return real(obj, path, *a, **k)

    monkeypatch.setattr(torch, "save", save)
    with pytest.raises(CheckpointWriteError) as caught:
        Trainer(cfg, run, log=quiet).run()
    assert str(caught.value) == (
        f"cannot write checkpoint {run / 'checkpoints' / 'step-00004'}: no space left on device "
        + str(caught.value).split("no space left on device ", 1)[1]
    )
    assert "needs about" in str(caught.value) and "resume from step-00002" in str(caught.value)
    assert [p.name for p in (run / "checkpoints").iterdir()] == ["step-00002"]  # no half checkpoint
    assert verify_checkpoint(run / "checkpoints" / "step-00002") is None
    monkeypatch.undo()
    Trainer(fake_config(steps=4, checkpoint_every=2, sample_every=0), run, resume=True, log=quiet).run()
    assert [p.name for p in checkpoint_dirs(run)] == ["step-00002", "step-00004"]
    assert [r["step"] for r in read_metrics(run / "metrics.jsonl")] == [1, 2, 3, 4]


def test_metrics_that_cannot_be_appended_are_one_line(tmp_path):
    from cast_core.run_dir import RunDirectory

    class FullDisk:
        def write(self, text):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        def close(self):
            pass

    with pytest.raises(WriteError, match=rf"cannot write {tmp_path / 'metrics.jsonl'}: no space left.*resume"):
        with RunDirectory(tmp_path).open_metrics() as f:
            f.file = FullDisk()  # the disk fills up after the file was opened
            f.write("{}\n")


# == cast report ======================================================================================
def test_report_refuses_a_directory_that_holds_no_run(tmp_path):
    with pytest.raises(InputError, match=rf"^{tmp_path} is not a run directory \(no config.toml, metrics.jsonl"):
        write_report(tmp_path)
    assert files_in(tmp_path) == []
    out = CliRunner().invoke(cli, ["report", str(tmp_path)])
    assert out.exit_code == 1 and out.output.count("Error:") == 1


def test_report_skips_a_metric_that_is_not_a_number_naming_its_line(tmp_path):
    rows = [{"step": 1, "reward_gm": 0.2}, {"step": 2, "reward_gm": "high"}, {"step": 3, "reward_gm": 0.4}]
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + '\n{"step": "x"}\n')
    heard = []
    html = write_report(tmp_path, warn=heard.append).read_text()
    assert heard == [
        f'warning: {tmp_path / "metrics.jsonl"}:2: reward_gm is "high", not a number; that value is skipped',
        f'warning: {tmp_path / "metrics.jsonl"}:4: step is "x", not a number; the line is skipped',
    ]
    assert "reward GM" in html and "3 steps logged" in html


def test_report_on_a_full_disk_leaves_no_empty_report(tmp_path, monkeypatch):
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "reward_gm": 0.2}\n')
    (tmp_path / "report.html").write_text("previous report")
    full_disk_under(monkeypatch, tmp_path)
    out = CliRunner().invoke(cli, ["report", str(tmp_path)])
    assert out.exit_code == 1 and f"Error: cannot write {tmp_path / 'report.html'}: no space left" in out.output
    assert (tmp_path / "report.html").read_text() == "previous report"
    assert files_in(tmp_path) == ["metrics.jsonl", "report.html"]


# == cast score: heatmaps on a full disk, image files read right =====================================
def test_score_heatmaps_on_a_full_disk_leave_no_empty_png(tmp_path, monkeypatch):
    Image.new("RGB", (16, 16), "white").save(tmp_path / "a.png")
    maps = tmp_path / "maps"
    maps.mkdir()

    def full_save(self, fp, *a, **k):
        half_then_full(fp)

    monkeypatch.setattr(Image.Image, "save", full_save)
    out = CliRunner().invoke(
        cli, ["score", str(tmp_path / "a.png"), "-p", "a cat", "-d", "fake", "-s", "constant", "--heatmaps", str(maps)]
    )
    assert out.exit_code == 1 and f"Error: cannot write {maps / 'a.heatmaps.png'}: no space left" in out.output
    assert files_in(maps) == []


GRADIENT = np.linspace(0.0, 1.0, 16 * 16, dtype=np.float64).reshape(16, 16)


@pytest.mark.parametrize(
    "name, array",
    [
        ("g16.png", (GRADIENT * 65535).round().astype(np.uint16)),
        ("g32.tif", (GRADIENT * 65535).round().astype(np.int32)),
        ("f01.tif", GRADIENT.astype(np.float32)),
        ("f255.tif", (GRADIENT * 255).astype(np.float32)),
    ],
)
def test_deep_and_float_grey_images_are_scaled_not_clipped(tmp_path, name, array):
    Image.fromarray(array).save(tmp_path / name)
    image = load_image(tmp_path / name)
    assert image.shape == (3, 16, 16)
    assert torch.allclose(image[0], torch.from_numpy(GRADIENT).float(), atol=1 / 255)
    assert torch.equal(image[0], image[2])


def test_float_images_of_unknown_range_and_animations_are_refused(tmp_path):
    Image.fromarray((GRADIENT * 9 - 3).astype(np.float32)).save(tmp_path / "odd.tif")
    with pytest.raises(InputError, match=r"odd.tif is a F image with values from -3 to 6"):
        load_image(tmp_path / "odd.tif")
    nan = GRADIENT.astype(np.float32)
    nan[0, 0] = np.nan
    Image.fromarray(nan).save(tmp_path / "nan.tif")
    with pytest.raises(InputError, match="NaN or infinite"):
        load_image(tmp_path / "nan.tif")
    frames = [Image.new("RGB", (8, 8), c) for c in ("red", "blue", "white")]
    frames[0].save(tmp_path / "a.gif", save_all=True, append_images=frames[1:])
    with pytest.raises(InputError, match=r"^\S*a.gif holds 3 frames"):
        load_image(tmp_path / "a.gif")
    frames[0].save(tmp_path / "one.gif")
    assert load_image(tmp_path / "one.gif").shape == (3, 8, 8)


def test_a_run_directory_on_a_read_only_disk_is_one_line(tmp_path, monkeypatch):
    from cast_core.run_dir import RunDirectory

    def read_only(self, *args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(self))

    monkeypatch.setattr(Path, "mkdir", read_only)
    with pytest.raises(WriteError, match=rf"^cannot write {tmp_path / 'run' / 'samples'}: read-only file system$"):
        RunDirectory(tmp_path / "run").create({"steps": 1})
    with pytest.raises(WriteError, match=rf"^cannot write {tmp_path / 'run' / '.lock'}: read-only file system$"):
        RunDirectory(tmp_path / "run").lock()

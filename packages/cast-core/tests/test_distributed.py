"""Multi-process training on the fake policy (torchrun, gloo on the CPU, 127.0.0.1): two
processes give what one gives — advantages, windows, weights — only rank 0 writes, a group split
across ranks is judged whole, and a killed two-process run resumes to the uninterrupted adapter."""

import json
import os
import re
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from cast_core.checkpoints import latest_checkpoint
from cast_core.launch import free_port
from cast_core.testing.fakes import fake_run_args

HERE = Path(__file__).parent


def torchrun(n: int, *args: str, **popen) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        "1",
        "--nproc_per_node",
        str(n),
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(free_port()),
        *args,
    ]


def run_workers(tmp_path, n: int, overrides: dict, name: str, run: str | None = None) -> list[dict]:
    """Train in ``tmp_path/name`` (or resume ``tmp_path/run``) with ``n`` processes. A fresh run
    whose rank died of SIGABRT is run once more in a new directory (the gloo teardown fault of
    :func:`launch`); a resumed run, or any other failure, fails at once."""
    for attempt in range(1 if run else 2):
        label = name if attempt == 0 else f"{name}-retry"
        out = tmp_path / f"{label}-out"
        out.mkdir()
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        args = [str(tmp_path / (run or label)), str(out), json.dumps(overrides), "resume" if run else "fresh"]
        try:
            launch(torchrun(n, str(HERE / "dist_worker.py"), *args), env)
        except RankAborted as abort:
            if run or attempt == 1:
                raise AssertionError(f"a rank aborted{' twice' if attempt else ''}: {abort}") from None
            warnings.warn(f"a rank died of SIGABRT; {n}-process run retried once:\n{abort}")
            continue
        return [json.loads((out / f"rank{r}.json").read_text()) for r in range(n)]
    raise AssertionError("unreachable")


def by_id(records: list[dict], step: int, key: str) -> dict:
    out = {}
    for rec in records:
        s = rec["steps"][step]
        for i, v in zip(s["ids"], s[key]):
            out[tuple(i)] = v
    return out


@pytest.mark.parametrize(
    "overrides",
    [{}, {"micro_batch_size": 2, "heatmap_source": "x0", "window_start": 1}],
    ids=["plain", "micro-batches+x0-maps"],
)
def test_two_processes_train_as_one(tmp_path, overrides):
    one = run_workers(tmp_path, 1, overrides, "one")
    two = run_workers(tmp_path, 2, overrides, "two")
    assert [r["world"] for r in two] == [2, 2]
    # the scene graphs are decomposed once, on rank 0, and shared: each prompt once in the whole run
    assert two[1]["decomposed"] == [] and len(two[0]["decomposed"]) == len(set(two[0]["decomposed"])) > 0
    # 12 samples a step: rank 0 holds (0,0)..(1,1), rank 1 (1,2)..(2,3) — group 1 is split
    assert two[0]["steps"][0]["ids"][-1] == [1, 1] and two[1]["steps"][0]["ids"][0] == [1, 2]
    for step in range(3):
        a1, a2 = by_id(one, step, "advantages"), by_id(two, step, "advantages")
        assert a1.keys() == a2.keys() and len(a1) == 12
        for k in a1:  # the split group's advantages are the whole group's (a group judged in halves
            # would differ by O(1); float32 kernels that depend on the batch shape move a z-score by
            # ~2e-5 on some CPUs, so the tolerance is 1e-4, not the images' 1e-5)
            torch.testing.assert_close(torch.tensor(a2[k]), torch.tensor(a1[k]), atol=1e-4, rtol=1e-4)
        i1, i2 = by_id(one, step, "images"), by_id(two, step, "images")
        for k in i1:  # per-sample noise: the same image on whichever rank draws it
            torch.testing.assert_close(torch.tensor(i2[k]), torch.tensor(i1[k]), atol=1e-5, rtol=1e-5)
        assert two[0]["steps"][step]["window"] == two[1]["steps"][step]["window"] == one[0]["steps"][step]["window"]
    for p1, p2a, p2b in zip(one[0]["adapter"], two[0]["adapter"], two[1]["adapter"]):
        assert torch.equal(torch.tensor(p2a), torch.tensor(p2b))  # ranks hold the same weights
        torch.testing.assert_close(torch.tensor(p2a), torch.tensor(p1), atol=1e-5, rtol=1e-4)
    assert two[0]["last"]["reward_gm"] == pytest.approx(one[0]["last"]["reward_gm"], abs=1e-6)
    assert two[0]["last"]["loss"] == pytest.approx(one[0]["last"]["loss"], abs=1e-6)
    assert two[0]["writes"] == ["config"] + ["checkpoint"] * 3 and two[1]["writes"] == []
    # the prompts are encoded once in the whole run, shared out between the processes
    assert sorted(two[0]["encoded"] + two[1]["encoded"]) == sorted(set(one[0]["encoded"])) == sorted(PROMPTS)
    assert two[0]["encoded"] and two[1]["encoded"]


PROMPTS = ["a red circle", "a blue square", "two green triangles"]  # dist_worker's training prompts


FSDP = {"ema": 0.9, "micro_batch_size": 2, "max_grad_norm": 0.003}  # EMA, accumulation and clipping on


def assert_close_lists(a: list, b: list, **tol) -> None:
    for x, y in zip(a, b, strict=True):
        torch.testing.assert_close(torch.tensor(x), torch.tensor(y), **tol)


def test_fsdp2_on_two_processes_trains_as_one_unsharded_process(tmp_path):
    """Each process holds half of every weight (frozen bf16-able base and float32 adapter alike);
    the update, the clipped global norm, the EMA and the checkpoint are the unsharded run's.
    ``sharding = "auto"`` (the backbone recipes') shards over two processes and not on one."""
    one = run_workers(tmp_path, 1, {**FSDP, "probe_window": True, "sharding": "auto"}, "one")
    two = run_workers(tmp_path, 2, {**FSDP, "probe_window": True, "sharding": "auto"}, "two")
    assert [r["sharded"] for r in two] == [True, True] and one[0]["sharded"] is False
    # a window measurement runs forward passes, collectives once sharded: every process measures
    assert [r["window_measurements"] for r in two] == [1, 1] and two[0]["steps"][0]["window"] == [1, 3]
    for step in range(3):
        a1, a2 = by_id(one, step, "advantages"), by_id(two, step, "advantages")
        assert a1.keys() == a2.keys()
        for k in a1:
            torch.testing.assert_close(torch.tensor(a2[k]), torch.tensor(a1[k]), atol=1e-5, rtol=1e-5)
    assert two[0]["adapter"] == two[1]["adapter"]
    assert_close_lists(two[0]["adapter"], one[0]["adapter"], atol=1e-5, rtol=1e-4)
    assert_close_lists(two[0]["ema"], one[0]["ema"], atol=1e-5, rtol=1e-4)
    assert one[0]["last"]["grad_norm"] > FSDP["max_grad_norm"]  # clipping was active
    assert two[0]["last"]["grad_norm"] == pytest.approx(one[0]["last"]["grad_norm"], rel=1e-4)
    assert two[0]["writes"] == ["config"] + ["checkpoint"] * 3 and two[1]["writes"] == []
    # the checkpoint holds whole tensors, loadable by an unsharded run
    a, b = adapter(tmp_path / "two"), adapter(tmp_path / "one")
    assert {k: v.shape for k, v in a.items()} == {k: v.shape for k, v in b.items()}
    opt = torch.load(latest_checkpoint(tmp_path / "two") / "optimizer.pt", weights_only=True)
    assert [tuple(s["exp_avg"].shape) for s in opt["optimizer"]["state"].values()] == [
        tuple(v.shape) for v in b.values()
    ]


@pytest.mark.slow  # four processes on two cores: ~1 minute
def test_fsdp2_on_four_processes_where_some_slices_are_empty(tmp_path):
    """The LoRA A matrix has 2 rows: over 4 processes two of them hold an empty slice of it
    (FSDP2 pads), and the run must still train as one process does."""
    overrides = {**FSDP, "prompts_per_step": 2, "group_size": 4}
    one = run_workers(tmp_path, 1, overrides, "one")
    four = run_workers(tmp_path, 4, {**overrides, "sharding": "fsdp2"}, "four")
    assert all(r["sharded"] for r in four) and all(r["adapter"] == four[0]["adapter"] for r in four)
    assert_close_lists(four[0]["adapter"], one[0]["adapter"], atol=1e-5, rtol=1e-4)
    assert_close_lists(four[0]["ema"], one[0]["ema"], atol=1e-5, rtol=1e-4)


@pytest.mark.slow  # four processes on two cores: ~1 minute
def test_four_processes_encode_each_prompt_once_before_offloading(tmp_path):
    """With the text encoder offloaded after pre-encoding, every process needs every prompt: each
    encodes its share (three prompts over four processes: one each, one process none) and the
    rows are gathered; the run trains as one process does."""
    overrides = {"offload_text_encoder": True, "prompts_per_step": 3, "group_size": 4}
    one = run_workers(tmp_path, 1, overrides, "one")
    four = run_workers(tmp_path, 4, overrides, "four")
    encoded = [p for r in four for p in r["encoded"]]
    assert sorted(encoded) == sorted(one[0]["encoded"]) == sorted(PROMPTS), [r["encoded"] for r in four]
    assert sorted(len(r["encoded"]) for r in four) == [0, 1, 1, 1]
    assert all(r["adapter"] == four[0]["adapter"] for r in four)
    assert_close_lists(four[0]["adapter"], one[0]["adapter"], atol=1e-5, rtol=1e-4)


def test_fsdp2_resume_is_bit_identical_and_loads_on_another_process_count(tmp_path):
    straight = run_workers(tmp_path, 2, {**FSDP, "sharding": "fsdp2"}, "straight")
    run_workers(tmp_path, 2, {**FSDP, "sharding": "fsdp2", "steps": 2}, "cut")
    resumed = run_workers(tmp_path, 2, {**FSDP, "sharding": "fsdp2"}, "resumed", run="cut")
    assert len(resumed[0]["steps"]) == 1  # only step 3 was trained after the resume
    assert resumed[0]["adapter"] == straight[0]["adapter"]  # optimizer slices and EMA restored exactly
    assert resumed[0]["ema"] == straight[0]["ema"]
    run_workers(tmp_path, 2, {**FSDP, "sharding": "fsdp2", "steps": 2}, "cut1")
    single = run_workers(tmp_path, 1, FSDP, "single", run="cut1")  # sharded checkpoint, unsharded resume
    assert_close_lists(single[0]["adapter"], straight[0]["adapter"], atol=1e-5, rtol=1e-4)
    assert_close_lists(single[0]["ema"], straight[0]["ema"], atol=1e-5, rtol=1e-4)


def cast_train(n: int, *args: str) -> list[str]:
    return [sys.executable, "-m", "cast_core.cli", "train", *args, "--num-processes", str(n)]


TRAIN_ARGS = [
    *fake_run_args(
        prompts=PROMPTS,
        group_size=4,
        prompts_per_step=2,
        num_steps=6,
        window_size=3,
        lr=0.05,
        clip_range=0.2,
        checkpoint_every=1,
        sample_every=0,
    ),
    "--steps",
    "40",
]


def adapter(run: Path) -> dict:
    return load_file(str(latest_checkpoint(run) / "adapter" / "adapter.safetensors"))


class RankAborted(Exception):
    """A rank died of SIGABRT (see the test below)."""


def launch(cmd: list[str], env: dict) -> subprocess.CompletedProcess:
    """Run a launch; a rank killed by SIGABRT raises :class:`RankAborted`, any other failure fails."""
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    if done.returncode != 0 and ("SIGABRT" in done.stderr or re.search(r"exitcode\s*:\s*-6", done.stderr)):
        raise RankAborted(done.stderr[-3000:])
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_sigkill_of_a_two_process_run_then_resume_matches_the_uninterrupted_run(tmp_path):
    """One retry, for one known fault only: a rank of a 2-process gloo launch died of SIGABRT
    once, in a full `make test` of session 12 (cause not found; not seen in the 7 reruns then,
    nor in 25 short 2-process runs and 3 runs of this test in session 13; docs/testing.md). A
    retry runs the whole scenario again in fresh directories; a wrong adapter, a failed resume
    or any other error fails at once."""
    for attempt in range(2):
        try:
            return sigkill_then_resume(tmp_path / f"attempt-{attempt}")
        except RankAborted as abort:
            if attempt == 1:
                raise AssertionError(f"a rank aborted twice: {abort}") from None
            warnings.warn(f"a rank died of SIGABRT; scenario retried once:\n{abort}")


def sigkill_then_resume(tmp_path: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    done = launch(cast_train(2, *TRAIN_ARGS, "--out", str(straight)), env)
    assert "run directory:" in done.stdout and done.stdout.count("run directory:") == 1  # rank 0 speaks
    proc = subprocess.Popen(
        cast_train(2, *TRAIN_ARGS, "--out", str(killed)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
    )
    deadline = time.time() + 120
    while time.time() < deadline and not (killed / "checkpoints" / "step-00008").exists():
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)  # the launcher and both ranks, mid-run
    proc.wait()
    at_kill = latest_checkpoint(killed)
    assert at_kill is not None and int(at_kill.name[5:]) < 40, "the run finished before it could be killed"
    launch(cast_train(2, "--resume", str(killed)), env)
    a, b = adapter(straight), adapter(killed)
    assert latest_checkpoint(killed).name == "step-00040"
    assert all(torch.equal(a[k], b[k]) for k in a), {k: float((a[k] - b[k]).abs().max()) for k in a}
    # a different process count resumes too (same samples; float tolerance: other batch kernels)
    one = tmp_path / "one"
    launch(cast_train(1, *TRAIN_ARGS[:-1], "20", "--out", str(one)), env)
    launch(cast_train(2, "--resume", str(one), "--steps", "40"), env)
    c = adapter(one)
    for k in a:
        torch.testing.assert_close(c[k], a[k], atol=1e-4, rtol=1e-3)


def test_uneven_shares_are_refused_with_the_fix(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    args = [a if a != "prompts_per_step=2" else "prompts_per_step=1" for a in TRAIN_ARGS]
    args = [a if a != "group_size=4" else "group_size=3" for a in args]
    out = subprocess.run(cast_train(2, *args, "--out", str(tmp_path / "r")), capture_output=True, text=True, env=env)
    assert out.returncode != 0
    assert "3 samples per step cannot be shared equally by 2 processes" in out.stderr


@pytest.mark.parametrize("objective", ["nft", pytest.param("awm", marks=pytest.mark.slow)])
def test_forward_objectives_under_fsdp2_train_as_one_unsharded_process(tmp_path, objective):
    """The old policy (nft) and the KL-EMA (awm) are swapped into sharded parameters slice by
    slice; with KL to the reference, EMA, micro-batches and clipping on, two FSDP2 processes
    give the one-process adapter and EMA, and the checkpoint holds whole old-policy tensors."""
    settings = {**FSDP, "objective": objective, "beta": 0.01, "heatmap_source": "final", "sharding": "fsdp2"}
    one = run_workers(tmp_path, 1, {**settings, "sharding": "accelerate"}, "one")
    two = run_workers(tmp_path, 2, settings, "two")
    assert [r["sharded"] for r in two] == [True, True]
    assert_close_lists(two[0]["adapter"], one[0]["adapter"], atol=1e-5, rtol=1e-4)
    assert_close_lists(two[0]["ema"], one[0]["ema"], atol=1e-5, rtol=1e-4)
    assert two[0]["last"]["kl"] == pytest.approx(one[0]["last"]["kl"], rel=1e-4) and one[0]["last"]["kl"] > 0
    saved = torch.load(latest_checkpoint(tmp_path / "two") / "optimizer.pt", weights_only=True)["tensors"]
    alone = torch.load(latest_checkpoint(tmp_path / "one") / "optimizer.pt", weights_only=True)["tensors"]
    olds = sorted(k for k in alone if k.startswith("objective."))
    assert olds and sorted(k for k in saved if k.startswith("objective.")) == olds
    for k in olds:
        torch.testing.assert_close(saved[k], alone[k], atol=1e-5, rtol=1e-4)


@pytest.mark.slow  # five launches' worth of processes on two cores: ~1 minute
def test_four_processes_train_as_one(tmp_path):
    """The guarantee docs/distributed.md states: the same seed and global batch give the same
    training on 1 and 4 processes (plain data parallel, no sharding). Each sample's noise is
    drawn from its own (step, group, member) key, so which rank draws an image does not matter;
    12 samples over 4 ranks splits every group of 4 across two ranks, so each group must also
    be judged whole."""
    one = run_workers(tmp_path, 1, {}, "one")
    four = run_workers(tmp_path, 4, {}, "four")
    assert [r["world"] for r in four] == [4] * 4
    for step in range(3):
        a1, a4 = by_id(one, step, "advantages"), by_id(four, step, "advantages")
        assert a1.keys() == a4.keys() and len(a1) == 12
        for k in a1:
            torch.testing.assert_close(torch.tensor(a4[k]), torch.tensor(a1[k]), atol=1e-4, rtol=1e-4)
        i1, i4 = by_id(one, step, "images"), by_id(four, step, "images")
        for k in i1:
            torch.testing.assert_close(torch.tensor(i4[k]), torch.tensor(i1[k]), atol=1e-5, rtol=1e-5)
    assert all(r["adapter"] == four[0]["adapter"] for r in four)  # the ranks hold the same weights
    assert_close_lists(four[0]["adapter"], one[0]["adapter"], atol=1e-5, rtol=1e-4)
    assert four[0]["last"]["reward_gm"] == pytest.approx(one[0]["last"]["reward_gm"], abs=1e-6)
    assert four[0]["writes"] == ["config"] + ["checkpoint"] * 3 and all(r["writes"] == [] for r in four[1:])

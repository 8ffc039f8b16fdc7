"""FSDP2 on a real backbone layout: two CPU processes (gloo), each holding a slice of every
FLUX.2 block, train exactly as one unsharded process does, and the gathered checkpoint is the
same diffusers LoRA file."""

import os
import warnings

import pytest

from safetensors.torch import load_file

from cast_core.checkpoints import latest_checkpoint
from conftest import tiny_pipeline

ARGS = [
    "--plugin",
    "cast",
    "--policy",
    "flux2",
    "--scorer",
    "left-brightness",
    "--decomposer",
    "fake",
    "--projector",
    "spatial",
    "--steps",
    "2",
    "--set",
    "window=none",
    "--set",
    "window_start=1",
    "--set",
    "window_size=2",
    "--set",
    "num_steps=4",
    "--set",
    "group_size=4",
    "--set",
    "prompts_per_step=1",
    "--set",
    'prompts=["a red cat", "a blue dog"]',
    "--set",
    "image_size=[32, 32]",
    "--set",
    "lr=0.05",
    "--set",
    "clip_range=0.2",
    "--set",
    "sample_every=0",
    "--set",
    "checkpoint_every=2",
    "--set",
    "adam_eps=1e-3",
    "--set",
    "policy_kwargs.image_size=[32, 32]",
    "--set",
    "policy_kwargs.lora_rank=4",
]


def cast_train(*args, processes=1):
    import subprocess
    import sys

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [
        sys.executable,
        "-c",
        "from cast_core.cli import main; main()",
        "train",
        *args,
        "--num-processes",
        str(processes),
    ]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)


def test_two_sharded_processes_train_as_one(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tiny_pipeline("flux2").save_pretrained(tmp_path / "model")
    path = ["--set", f"policy_kwargs.path={tmp_path / 'model'}"]
    one = cast_train(*ARGS, *path, "--out", str(tmp_path / "one"))
    assert one.returncode == 0, one.stderr[-3000:]
    two = cast_train(*ARGS, *path, "--set", 'sharding="fsdp2"', "--out", str(tmp_path / "two"), processes=2)
    assert two.returncode == 0, two.stderr[-3000:]
    a = load_file(str(latest_checkpoint(tmp_path / "one") / "adapter" / "pytorch_lora_weights.safetensors"))
    b = load_file(str(latest_checkpoint(tmp_path / "two") / "adapter" / "pytorch_lora_weights.safetensors"))
    assert a.keys() == b.keys() and len(a) > 0
    moved = max(float(v.abs().max()) for k, v in a.items() if "lora_B" in k)
    assert moved > 1e-3  # the adapter was really trained
    # adam_eps = 1e-3: with Adam's default 1e-8 an element whose gradient is ~0 (every lora_A at
    # the first step, where B = 0) is updated by lr·g/|g|, so summation-order noise of the
    # reduce-scatter would decide its sign; a larger eps keeps the comparison well conditioned
    for key in a:
        assert a[key].shape == b[key].shape  # full tensors, not one process's slice
        assert float((a[key] - b[key]).abs().max()) <= 1e-5, key


def _first_step_adapters(tmp_path, processes):
    """The adapter after one step, loaded the plain way (every process a full copy, sliced in
    prepare) and sharded at load (meta device, each process reads its own rows)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tiny_pipeline("flux2").save_pretrained(tmp_path / "model")
    common = [*ARGS, "--set", f"policy_kwargs.path={tmp_path / 'model'}", "--set", 'sharding="fsdp2"']
    common += ["--steps", "1", "--set", "checkpoint_every=1"]
    out = {}
    for name, load_sharded in (("plain", "false"), ("sharded", "true")):
        run = cast_train(
            *common,
            "--set",
            f"policy_kwargs.load_sharded={load_sharded}",
            "--out",
            str(tmp_path / name),
            processes=processes,
        )
        assert run.returncode == 0, run.stderr[-3000:]
        assert ("loading: sharded" in run.stderr) == (load_sharded == "true")
        out[name] = load_file(str(latest_checkpoint(tmp_path / name) / "adapter" / "pytorch_lora_weights.safetensors"))
    return out["plain"], out["sharded"]


def _assert_same_first_step(plain, sharded):
    assert plain.keys() == sharded.keys() and len(plain) > 0
    assert max(float(v.abs().max()) for k, v in plain.items() if "lora_B" in k) > 1e-4  # one real step
    for key in plain:
        assert plain[key].shape == sharded[key].shape
        assert float((plain[key] - sharded[key]).abs().max()) <= 1e-6, key


def test_loading_sharded_gives_the_plain_paths_first_step_on_two_processes(tmp_path):
    _assert_same_first_step(*_first_step_adapters(tmp_path, 2))


@pytest.mark.slow
def test_loading_sharded_gives_the_plain_paths_first_step_on_four_processes(tmp_path):
    _assert_same_first_step(*_first_step_adapters(tmp_path, 4))

"""benchmarks/gpu_check.py stays runnable without a GPU: its CPU smoke mode plans the tiny klein
architecture, builds the same subject for real and runs the plan's phase code on it."""

from __future__ import annotations

import json
import sys

import pytest
from conftest import load_benchmark


@pytest.mark.slow
def test_the_gpu_check_runs_its_phases_beside_the_plan_on_the_cpu(tmp_path, monkeypatch):
    script = load_benchmark("gpu_check")
    out = tmp_path / "gpu_check.json"
    monkeypatch.setenv("CAST_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(sys, "argv", ["gpu_check.py", "--cpu-smoke", "--no-compile", "--json", str(out)])
    script.main()
    result = json.loads(out.read_text())["klein-tiny"]
    assert result["architecture"] == "flux2-klein-tiny" and result["device"] == "cpu"
    for phase in ("sample", "decode", "train"):
        got = result["eager"][phase]
        assert got["planned_bytes"] > 0 and got["seconds"] > 0 and got["batch"] >= 1
        assert got["peak_bytes"] is None  # no CUDA allocator to read on the CPU

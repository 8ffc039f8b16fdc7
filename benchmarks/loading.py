"""Host memory of loading a FLUX.2-architecture pipeline on 1, 2 and 4 processes under FSDP2:
today's plain path (every process loads the whole pipeline, ``prepare`` then slices it) beside
the sharded path (``load_sharded``: each process builds the transformer on the meta device and
reads only its own rows of each weight), in one run.

The model is a random FLUX.2 pipeline saved with ``save_pretrained``: diffusers' real
``Flux2Transformer2DModel`` at FLUX.2-dev's block layout scaled down (4 double + 16 single blocks,
12 heads × 128 = hidden 1536, float32: about 3 GB on disk), with the tiny test pipeline's text
encoder and VAE (a few MB: the real encoder is the subject of docs/distributed.md, not of this
measurement). It is built once, outside the repository (``--model-dir``).

What is counted: the proportional set size (``pss``) of each worker, sampled every 20 ms by this
process with psutil. Pages of the safetensors file that several workers map at once are shared
page cache, and PSS divides them among the processes that map them (RSS would count them once
per process). The baseline is the same number of workers that only ``import torch`` and join
the process group; the ``imports`` row adds importing the policy module (measured: nothing
more, diffusers imports lazily). The target (issue 39): the peak of the sum over the workers
≤ 1.3 × one copy of the pipeline + the baseline's sum. The loading path itself costs about
0.2 GiB per process beyond the weights (model classes, peft, the small components): a fixed cost
that is nothing next to FLUX.2-dev's 60 GiB but 0.4 copies of a 1.5 GB model on 4 processes, so
the model here is 3 GB.

Resumable: each (path, processes) result is written to the JSON as soon as it is measured and
skipped on the next run (``--fresh`` measures again).

Run: ``python benchmarks/loading.py [--processes 1 2 4] [--json benchmarks/results/loading.json]``
after ``make install`` (about five minutes on two cores).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path

DEFAULT_MODEL_DIR = Path.home() / ".cache" / "cast-bench" / "loading-flux2-3gb"
PATHS = ("baseline", "imports", "plain", "sharded")


def build_model(directory: Path) -> None:
    """A random FLUX.2-architecture pipeline of about 3 GB, written by save_pretrained."""
    import torch
    from diffusers import Flux2Transformer2DModel

    from cast_backbones.tiny import tiny_flux2_pipeline

    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pipe = tiny_flux2_pipeline(0)
        pipe.transformer = Flux2Transformer2DModel(
            patch_size=1,
            in_channels=4,
            num_layers=4,
            num_single_layers=16,
            attention_head_dim=128,
            num_attention_heads=12,
            joint_attention_dim=pipe.transformer.config.joint_attention_dim,
            timestep_guidance_channels=256,
            axes_dims_rope=(32, 32, 32, 32),
            guidance_embeds=True,
        )
        tmp = directory.with_name(directory.name + ".partial")
        pipe.save_pretrained(tmp)
    tmp.rename(directory)


def pipeline_bytes(directory: Path) -> dict[str, int]:
    """Bytes of each component's weights (the safetensors files: one copy in memory, float32)."""
    return {
        part: sum(f.stat().st_size for f in (directory / part).glob("*.safetensors"))
        for part in ("transformer", "text_encoder", "vae")
    }


def worker(path: str, model_dir: str) -> None:
    """One process of a measured launch: join the group, load (or not), wait for the others."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    if path == "imports":
        import cast_backbones.flux2  # noqa: F401 - what loading costs before any weight is read
    elif path != "baseline":
        from types import SimpleNamespace

        from cast_backbones.flux2 import Flux2Policy

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.manual_seed(0)
            policy = Flux2Policy(model_dir, load_sharded=(path == "sharded"), image_size=(32, 32), lora_rank=4)
            policy.prepare(SimpleNamespace(device=torch.device("cpu")), sharding="fsdp2")
    dist.barrier()
    time.sleep(0.3)  # let the sampler see the settled state
    dist.barrier()
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(path: str, processes: int, model_dir: Path) -> dict:
    """Start ``processes`` workers, sample their PSS until they exit, return the peaks in bytes."""
    import psutil

    port = _free_port()
    procs = []
    for rank in range(processes):
        env = {
            **os.environ,
            "RANK": str(rank),
            "WORLD_SIZE": str(processes),
            "LOCAL_RANK": str(rank),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "OMP_NUM_THREADS": "1",
        }
        command = [sys.executable, __file__, "--worker", path, "--model-dir", str(model_dir)]
        procs.append(subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True))
    handles = [psutil.Process(p.pid) for p in procs]
    peaks = [0] * processes
    peak_sum = 0
    start = time.perf_counter()

    def pss(handle) -> int:
        try:
            return handle.memory_full_info().pss
        except (psutil.NoSuchProcess, psutil.AccessDenied, FileNotFoundError):
            return 0

    while any(p.poll() is None for p in procs):
        now = [pss(h) for h in handles]
        peaks = [max(a, b) for a, b in zip(peaks, now)]
        peak_sum = max(peak_sum, sum(now))
        time.sleep(0.02)
    errors = [p.stderr.read()[-2000:] for p in procs if p.returncode != 0]
    if errors:
        raise RuntimeError(f"{path} on {processes} process(es) failed:\n{errors[0]}")
    return {"per_process": peaks, "sum": peak_sum, "seconds": round(time.perf_counter() - start, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--model-dir", type=Path, default=DEFAULT_MODEL_DIR)
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/loading.json"))
    parser.add_argument("--fresh", action="store_true", help="measure again what the JSON already holds")
    parser.add_argument("--worker", choices=PATHS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, str(args.model_dir))
        return
    if not args.model_dir.is_dir():
        print(f"building the random FLUX.2-architecture pipeline in {args.model_dir} …", file=sys.stderr)
        args.model_dir.parent.mkdir(parents=True, exist_ok=True)
        build_model(args.model_dir)
    parts = pipeline_bytes(args.model_dir)
    copy = sum(parts.values())
    result = json.loads(args.json.read_text()) if args.json.is_file() and not args.fresh else {}
    result.update({"one_copy_bytes": copy, "component_bytes": parts, "target": "sum <= 1.3 * one copy + baseline"})
    runs = result.setdefault("runs", {})
    gib = 2**30
    for n in args.processes:
        for path in PATHS:
            key = f"{path}-{n}"
            if key not in runs:
                runs[key] = launch(path, n, args.model_dir)
                args.json.parent.mkdir(parents=True, exist_ok=True)
                args.json.write_text(json.dumps(result, indent=1) + "\n")  # resumable: after every launch
        base = runs[f"baseline-{n}"]["sum"]
        imports = runs[f"imports-{n}"]["sum"] - base
        for path in ("plain", "sharded"):
            run = runs[f"{path}-{n}"]
            run["ratio_to_one_copy"] = round((run["sum"] - base) / copy, 3)
            run["meets_target"] = run["sum"] <= 1.3 * copy + base
        print(
            f"{n} process(es): one copy {copy / gib:.2f} GiB, baseline {base / gib:.2f} GiB, "
            f"libraries' imports {imports / gib:.2f} GiB | "
            + " | ".join(
                f"{p}: sum {runs[f'{p}-{n}']['sum'] / gib:.2f} GiB, largest process "
                f"{max(runs[f'{p}-{n}']['per_process']) / gib:.2f} GiB, "
                f"(sum - baseline) / copy = {runs[f'{p}-{n}']['ratio_to_one_copy']:.2f}"
                f"{'' if runs[f'{p}-{n}']['meets_target'] else ' (misses the target)'}"
                for p in ("plain", "sharded")
            )
        )
    args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()

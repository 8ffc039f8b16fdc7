"""Atoms per second of the soft-tifa judge, side by side: one forward pass per question, all
questions batched as whole sequences, and each image's prefix encoded once (KV cache), with and
without heatmaps — on the tiny random Qwen3-VL (cast_rewards.tiny_vlm), this CPU.

The remote scorer's overhead: the same judge through ``cast serve-scorer`` on loopback vs local.

The tiny judge's vision tower is as small as its language model, so the ratios say what the
batching and the prefix cache save in *calls and sequence length*; on the real 8B judge, whose
image prefix (256 tokens at 512²) is most of each sequence, the prefix cache saves more.

Run: ``python benchmarks/judge_throughput.py [--repeats N] [--json FILE]`` after ``make install``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch


def main() -> None:
    from cast_rewards.soft_tifa import SoftTifaScorer
    from cast_rewards.template import TemplateDecomposer
    from cast_rewards.tiny_vlm import tiny_qwen3_vl

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--images", type=int, default=8)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--json", dest="json_path")
    a = ap.parse_args()
    model, processor = tiny_qwen3_vl(max_pixels=a.size * a.size)
    graph = TemplateDecomposer().decompose("two red circles left of a blue square")
    graphs = [graph] * a.images
    images = torch.rand(a.images, 3, a.size, a.size, generator=torch.Generator().manual_seed(0))
    atoms = len(graph.atoms) * a.images
    setups = {
        "one_question_per_call": dict(batch_size=1, prefix_reuse=False),
        "batched_whole_sequences": dict(batch_size=64, prefix_reuse=False),
        "prefix_once_per_image": dict(batch_size=64, prefix_reuse=True),
    }
    judges = {k: SoftTifaScorer(None, model=model, processor=processor, device="cpu", **v) for k, v in setups.items()}
    results = {}
    for heatmaps in (False, True):
        times: dict[str, list[float]] = {k: [] for k in judges}
        for judge in judges.values():  # warm-up
            judge.score(images, graphs, heatmaps=heatmaps)
        for _ in range(a.repeats):
            for name, judge in judges.items():
                t = time.perf_counter()
                judge.score(images, graphs, heatmaps=heatmaps)
                times[name].append(time.perf_counter() - t)
        med = {k: statistics.median(v) for k, v in times.items()}
        base = med["one_question_per_call"]
        key = "with_heatmaps" if heatmaps else "scores_only"
        results[key] = {k: {"seconds": v, "atoms_per_s": atoms / v, "speedup": base / v} for k, v in med.items()}
        print(f"{key}: {atoms} atoms ({a.images} images of {a.size}x{a.size}), medians of {a.repeats}:")
        for k, v in results[key].items():
            print(f"  {k:26s} {v['atoms_per_s']:8.1f} atoms/s  {v['speedup']:.2f}x one-per-call")
    results["remote"] = remote_overhead(model, processor, images, graphs, a.repeats)
    r = results["remote"]
    print(
        f"remote (cast serve-scorer on 127.0.0.1) vs local, same judge and batch with heatmaps: "
        f"local {r['local_s'] * 1e3:.0f} ms, remote {r['remote_s'] * 1e3:.0f} ms, ratio {r['ratio']:.3f}"
    )
    if a.json_path:
        with open(a.json_path, "w") as f:
            json.dump({"atoms": atoms, "images": a.images, "size": a.size, **results}, f, indent=2)


def remote_overhead(model, processor, images, graphs, repeats: int) -> dict:
    """The same soft-tifa judge scored locally and through ``cast serve-scorer`` on loopback
    (the server loads the judge saved to a temporary directory), interleaved."""
    import json as _json
    import subprocess
    import sys
    import tempfile
    import urllib.request

    from cast_core.launch import free_port
    from cast_rewards.remote import RemoteScorer
    from cast_rewards.soft_tifa import SoftTifaScorer

    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        processor.save_pretrained(tmp)
        port = free_port()
        size = int(images.shape[-1]) ** 2
        server = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from cast_core.cli import main; main()",
                "serve-scorer",
                "--scorer",
                "soft-tifa",
                "--port",
                str(port),
                "--set",
                f"scorer_kwargs.path={tmp}",
                "--set",
                'scorer_kwargs.device="cpu"',
                "--set",
                f"scorer_kwargs.max_pixels={size}",
            ],
            stderr=subprocess.DEVNULL,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            for _ in range(600):
                try:
                    with urllib.request.urlopen(f"{url}/health", timeout=1) as r:
                        if _json.loads(r.read())["status"] == "ok":
                            break
                except OSError:
                    time.sleep(0.1)
            local = SoftTifaScorer(tmp, device="cpu", max_pixels=size)
            remote = RemoteScorer(url)
            times: dict[str, list[float]] = {"local": [], "remote": []}
            for judge in (local, remote):
                judge.score(images, graphs, heatmaps=True)
            for _ in range(repeats):
                for name, judge in (("local", local), ("remote", remote)):
                    t = time.perf_counter()
                    judge.score(images, graphs, heatmaps=True)
                    times[name].append(time.perf_counter() - t)
        finally:
            server.kill()
            server.wait()
    lo, re_ = statistics.median(times["local"]), statistics.median(times["remote"])
    return {"local_s": lo, "remote_s": re_, "ratio": re_ / lo}


if __name__ == "__main__":
    main()

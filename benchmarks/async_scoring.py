"""Steps per second with ``async_scoring`` on and off, side by side, when the judge takes as long
as sampling (issue 41, part C). Target: async ≥ 1.6× the synchronous steps per second.

The policy is the shapes world's (real sampling and updates on the CPU). The judge is the
``sleeping`` scorer (``left-brightness`` verdicts after a sleep per image: a judge that leaves the
CPU to the sampler, as a GPU judge or a remote one does), its sleep calibrated so that judging a
step's images takes as long as sampling them. Two judges are measured:

* ``local`` — the sleeping scorer in the training process (the worker thread);
* ``remote`` — the same scorer behind ``cast serve-scorer`` on loopback, through the ``remote``
  scorer (HTTP, safetensors on the wire).

Sampling takes ``--num-steps`` denoising steps (default 28, as FLUX; the window is 2 steps). The
update needs the scores, so no overlap can hide it; the gain is bounded by
``(S + J + R) / (S + J/k + R)`` (sampling S, judging J, the rest R — the update and the step's
bookkeeping —, k chunks), which the results print beside the measured ratio. For each judge,
two trainers with one configuration but ``async_scoring`` take turns, one step each, ``--steps``
measured steps apiece after one warm-up step (so drift of the machine hits both).
Each step samples ``--prompts`` groups of ``--group`` images in chunks of one group
(``sample_batch_size = group``); with k chunks the overlap can give at most about 2k/(k+1)
(before the update's own time, which no overlap hides). Printed and written (``--json``,
default benchmarks/results/async-scoring.json): sampling, judge and step times, the ratio, and
whether the two trainers' adapters are still equal bit for bit at the end (they must be).

Run: ``python benchmarks/async_scoring.py [--steps 6] [--prompts 8] [--group 4] [--num-steps 28]``; a few minutes
on 2 cores. Each judge's result is saved as soon as it is measured, and a rerun skips the judges
already in ``--json`` (``--fresh`` starts over), so an interrupted run resumes.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import torch

RESULT = Path(__file__).resolve().parent / "results" / "async-scoring.json"


def _config(scorer: str, scorer_kwargs: dict, args, async_scoring: bool):
    from cast_core.config import build_config, toml_value

    sets = {
        "steps": 10_000,
        "prompts_per_step": args.prompts,
        "group_size": args.group,
        "sample_batch_size": args.group,
        "num_steps": args.num_steps,
        "window_start": args.num_steps * 6 // 10,
        "window_size": 2,
        "heatmap_source": "final",  # every scorer call overlaps (x̂0 maps are scored after sampling)
        "sample_every": 0,
        "checkpoint_every": 10_000,
        "async_scoring": async_scoring,
        "scorer_kwargs": scorer_kwargs,
    }
    components = {"window": "none", "scorer": scorer}
    if args.policy == "fake":  # cast-core's tiny linear policy: sampling and update both cheap
        components.update(policy="fake", decomposer="fake")
        sets["prompts"] = [f"prompt {i}" for i in range(args.prompts)]
    return build_config(
        recipe="shapes" if args.policy == "shapes" else "cast",
        components=components,
        sets=[f"{k}={toml_value(v)}" for k, v in sets.items()],
        log=lambda m: None,
    )


def _sampling_seconds(args, work: Path) -> float:
    """Median time to sample one step's images (no judge), over 3 steps after a warm-up."""
    from cast_core.trainer import Trainer

    trainer = Trainer(_config("sleeping", {}, args, False), work / "calibrate", log=lambda m: None)
    times = []
    for step in range(4):
        prompts = trainer.pick_prompts(step)
        start = time.perf_counter()
        trainer.rollout(prompts, trainer.window_for(step, prompts), step)
        times.append(time.perf_counter() - start)
    trainer.close()
    return statistics.median(times[1:])


def _timed(update, into: list[float]):
    def timed(*args, **kwargs):
        start = time.perf_counter()
        try:
            return update(*args, **kwargs)
        finally:
            into.append(time.perf_counter() - start)

    return timed


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(per_image: float) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "cast_core.cli", "serve-scorer", "--scorer", "sleeping", "--port", str(port),
         "--max-wait-ms", "0", "--set", f"scorer_kwargs.per_image={per_image}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            urllib.request.urlopen(url + "/health", timeout=1).read()
            return proc, url
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("cast serve-scorer did not answer /health within 60 s")


def _measure(name: str, scorer: str, kwargs: dict, args, work: Path) -> dict:
    from cast_core.trainer import Trainer

    trainers = {
        mode: Trainer(_config(scorer, kwargs, args, mode == "async"), work / f"{name}-{mode}", log=lambda m: None)
        for mode in ("sync", "async")
    }
    times: dict[str, list[float]] = {"sync": [], "async": []}
    updates: dict[str, list[float]] = {"sync": [], "async": []}
    for mode, trainer in trainers.items():  # time each update: the part no overlap can touch
        trainer.update = _timed(trainer.update, updates[mode])
    waits: list[float] = []
    for step in range(args.steps + 1):
        for mode, trainer in trainers.items():
            start = time.perf_counter()
            metrics = trainer.train_step()
            if step:  # the first step of each is a warm-up
                times[mode].append(time.perf_counter() - start)
            else:
                updates[mode].clear()
                if mode == "async":
                    waits.append(metrics["judge_wait_s"])
        print(f"  {name} step {step}: " + ", ".join(f"{m} {t[-1]:.2f}s" for m, t in times.items() if t), flush=True)
    equal = all(torch.equal(p, q) for p, q in zip(trainers["sync"].params, trainers["async"].params))
    for trainer in trainers.values():
        trainer.close()
    sync_s, async_s = statistics.median(times["sync"]), statistics.median(times["async"])
    before = {m: statistics.median(t - u for t, u in zip(times[m], updates[m])) for m in times}
    return {
        "update_s_measured": {m: statistics.median(updates[m]) for m in updates},
        "sample_and_judge_s": before,
        "sample_and_judge_speedup": before["sync"] / before["async"],
        "judge": name,
        "sync_step_s": {"median": sync_s, "min": min(times["sync"]), "max": max(times["sync"])},
        "async_step_s": {"median": async_s, "min": min(times["async"]), "max": max(times["async"])},
        "async_judge_wait_s_median": statistics.median(waits),
        "speedup": sync_s / async_s,
        "adapters_equal": equal,
    }


def _derive(row: dict, sampling_s: float, judge_s: float, k: int) -> None:
    """What the step times say: the rest of the synchronous step (less sampling and judging: the
    update and the step's bookkeeping, which no overlap can hide), the most an overlap inside a
    step can give with that rest, ``(S + J + R) / (S + J/k + R)``, and the share of the judge's
    time the overlap hid."""
    sync_s, async_s = row["sync_step_s"]["median"], row["async_step_s"]["median"]
    rest = max(0.0, sync_s - sampling_s - judge_s)
    row["rest_s"] = rest
    row["bound"] = (sampling_s + judge_s + rest) / (sampling_s + judge_s / k + rest)
    row["judge_hidden_fraction"] = (sync_s - async_s) / judge_s


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=6, help="measured steps per mode and judge")
    parser.add_argument("--prompts", type=int, default=8, help="groups per step (= sampling chunks)")
    parser.add_argument("--group", type=int, default=4, help="images per group (= one chunk)")
    parser.add_argument(
        "--num-steps",
        type=int,
        default=28,
        help="denoising steps (28, as FLUX: the update's 2 window steps then cost what they cost a real run, "
        "relative to sampling; the shapes recipe's 10 make the update as long as sampling and judging together)",
    )
    parser.add_argument(
        "--policy",
        choices=("shapes", "fake"),
        default="shapes",
        help="shapes (real sampling and updates) or fake (too small to time: steps of milliseconds)",
    )
    parser.add_argument("--json", type=Path, default=RESULT)
    parser.add_argument("--fresh", action="store_true", help="measure every judge again")
    args = parser.parse_args(argv)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    done = {} if args.fresh or not args.json.exists() else json.loads(args.json.read_text())
    with tempfile.TemporaryDirectory(prefix="cast-async-bench-") as tmp:
        work = Path(tmp)
        if "sampling_s" not in done:
            done.update(
                {
                    "sampling_s": _sampling_seconds(args, work),
                    "setup": {
                        "policy": args.policy,
                        "prompts_per_step": args.prompts,
                        "group_size": args.group,
                        "sample_batch_size": args.group,
                        "num_steps": args.num_steps,
                        "window_size": 2,
                        "measured_steps": args.steps,
                        "threads": torch.get_num_threads(),
                    },
                    "results": {},
                }
            )
        images = args.prompts * args.group
        per_image = done["sampling_s"] / images
        done["judge_s"] = per_image * images
        sleep_ms = per_image * 1e3
        print(f"sampling a step's {images} images: {done['sampling_s']:.2f} s; judge sleeps {sleep_ms:.1f} ms an image")
        k = args.prompts
        done["ideal_speedup_without_update"] = 2 * k / (k + 1)
        for name in ("local", "remote"):
            if name in done["results"]:
                print(f"{name}: measured already ({done['results'][name]['speedup']:.2f}x); --fresh to redo")
                continue
            server = None
            try:
                if name == "local":
                    row = _measure(name, "sleeping", {"per_image": per_image}, args, work)
                else:
                    server, url = _serve(per_image)
                    row = _measure(name, "remote", {"url": url}, args, work)
            finally:
                if server is not None:
                    server.terminate()
                    server.wait(timeout=30)
            done["results"][name] = row
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(done, indent=2) + "\n")
    print(
        f"\n{'judge':8} {'sync s/step':>12} {'async s/step':>13} {'speedup':>8} {'rest s':>9} "
        f"{'bound':>6} {'judge hidden':>13}  adapters equal"
    )
    for name, row in done["results"].items():
        _derive(row, done["sampling_s"], done["judge_s"], k)
        print(
            f"{name:8} {row['sync_step_s']['median']:12.2f} {row['async_step_s']['median']:13.2f} "
            f"{row['speedup']:7.2f}x {row['rest_s']:9.2f} {row['bound']:5.2f}x "
            f"{row['judge_hidden_fraction']:12.0%}  {row['adapters_equal']}"
        )
        if "sample_and_judge_speedup" in row:
            phase = row["sample_and_judge_s"]
            print(
                f"{'':8} sampling + judging alone (each step less its timed update): sync {phase['sync']:.2f} s, "
                f"async {phase['async']:.2f} s = {row['sample_and_judge_speedup']:.2f}x"
            )
    args.json.write_text(json.dumps(done, indent=2) + "\n")
    ok = all(r["adapters_equal"] and r["speedup"] >= 1.6 for r in done["results"].values())
    print(f"target >= 1.6x with equal adapters: {'met' if ok else 'NOT met'}")
    return 0 if all(r["adapters_equal"] for r in done["results"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())

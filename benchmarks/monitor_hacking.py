"""The monitor catches reward hacking on the shapes world (issue 41, part B).

A shapes run trains on ``shapes-colour`` — a deliberately hackable reward: the share of red pixels,
whatever the prompt asks — while the monitor watches the exact ``shapes-oracle`` on held-out
prompts (``monitor_scorers``) with the rule "the oracle's held-out GM fell more than 0.1 below the
base policy's while the training reward rose, at 2 evaluations in a row". The run must end on that
rule, with a checkpoint and its one-line reason, before ``--steps``.

Settings are the shapes recipe's except the scorer, a fixed early window (steps 1..2, maps from the
final image: colours and sizes are decided early; a first try with the recipe's measured window,
steps 6..7, moved the held-out colour share by nothing in 60 steps, since the objects are drawn
by then), ``prompts_per_step = 2`` (half the images a step, to fit a session on 2 cores) and
``lr = 3e-4`` (so that the hack shows within a few hundred steps). Resumable: a rerun continues
the run in ``--out`` (default ~/.cache/cast-bench/monitor-hacking) with ``cast train --resume``.
The result — the stop step, the reason, the monitor's first and last rows — goes to ``--json``
(default benchmarks/results/monitor-hacking.json), the report to the run's report.html.

Run: ``python benchmarks/monitor_hacking.py [--steps 400]``; 15-30 min on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

RESULT = Path(__file__).resolve().parent / "results" / "monitor-hacking.json"
RULE = '[{metric = "shapes-oracle", drop = 0.1, while_rising = "reward_gm", patience = 2}]'
SETS = [
    "window_kwargs.start=1",  # with --window fixed: colours and sizes are decided early, so the hack
    "window_kwargs.size=2",  # needs an early window (the recipe's measured steps 6..7 come too late)
    'heatmap_source="final"',  # x̂0 before step 1 is a blur; the maps come from the final image
    "prompts_per_step=2",
    "lr=3e-4",
    "monitor_every=20",
    'monitor_prompts="suite:heldout"',
    "monitor_size=16",
    "monitor_group_size=4",
    'monitor_scorers=[{name = "shapes-oracle"}]',
    f"monitor_stop_if={RULE}",
    "checkpoint_every=20",
    "sample_every=20",
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--out", type=Path, default=Path.home() / ".cache" / "cast-bench" / "monitor-hacking")
    parser.add_argument("--json", type=Path, default=RESULT)
    args = parser.parse_args(argv)
    cast = [sys.executable, "-m", "cast_core.cli", "train"]
    if (args.out / "checkpoints").is_dir():
        cmd = [*cast, "--resume", str(args.out), "--steps", str(args.steps)]
    else:
        cmd = [
            *cast,
            "--recipe",
            "shapes",
            "--scorer",
            "shapes-colour",
            "--window",
            "fixed",
            "--steps",
            str(args.steps),
            "--out",
            str(args.out),
        ]
        for item in SETS:
            cmd += ["--set", item]
    done = subprocess.run(cmd, capture_output=True, text=True)
    sys.stderr.write(done.stderr[-2000:])
    if not (args.out / "monitor.jsonl").exists():
        return done.returncode or 1
    rows = [json.loads(line) for line in (args.out / "monitor.jsonl").read_text().splitlines() if line.strip()]
    stop = next((line for line in done.stderr.splitlines() if line.startswith("monitor: stopped at step")), None)
    result = {
        "exit_code": done.returncode,
        "tripped": done.returncode == 3,
        "stop_line": stop,
        "steps_trained": rows[-1]["step"] if rows else 0,
        "max_steps": args.steps,
        "rule": RULE,
        "settings": ["--recipe shapes", "--scorer shapes-colour", "--window fixed", *SETS],
        "monitor_first": rows[0] if rows else None,
        "monitor_last": rows[-1] if rows else None,
        "oracle_curve": [(r["step"], r.get("monitor/shapes-oracle")) for r in rows],
        "colour_curve": [(r["step"], r.get("monitor/shapes-colour")) for r in rows],
        "train_reward_curve": [(r["step"], r.get("train/reward_gm")) for r in rows],
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    subprocess.run([sys.executable, "-m", "cast_core.cli", "report", str(args.out)], capture_output=True)
    print(json.dumps({k: result[k] for k in ("tripped", "stop_line", "steps_trained")}, indent=2))
    return 0 if result["tripped"] else 1


if __name__ == "__main__":
    sys.exit(main())

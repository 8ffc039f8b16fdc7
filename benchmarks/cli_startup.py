"""CLI start-up cost, measured side by side in one run.

Every `cast` call loads every plugin, so start-up is a contract (the foundation issue asks for
`cast --help` under 1.5 s on a 2-core machine). We time fresh interpreters, median of N runs, and
print each command against the bare interpreter and against `import torch` (what a careless
plugin would add). Run: `make bench` or `python benchmarks/cli_startup.py [--runs N] [--json F]`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

CASES = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "cast --help": [sys.executable, "-c", "from cast_core.cli import main; main(['--help'])"],
    "cast plugins --json": [sys.executable, "-c", "from cast_core.cli import main; main(['plugins', '--json'])"],
    "python -c 'import torch'": [sys.executable, "-c", "import torch"],
}
TARGET_S = 1.5


def time_command(cmd: list[str], runs: int) -> float:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--json", dest="json_path", help="also write the results here")
    args = parser.parse_args()

    results = {name: time_command(cmd, args.runs) for name, cmd in CASES.items()}
    base, torch_s = results["python -c pass"], results["python -c 'import torch'"]
    print(f"{'command':28s} {'median s':>9s} {'x python':>9s} {'x torch import':>15s}")
    for name, sec in results.items():
        print(f"{name:28s} {sec:9.3f} {sec / base:9.2f} {sec / torch_s:15.2f}")
    ok = results["cast --help"] < TARGET_S
    print(f"\ncast --help: {results['cast --help']:.3f} s (target < {TARGET_S} s): {'OK' if ok else 'TOO SLOW'}")
    if args.json_path:
        with open(args.json_path, "w") as f:
            json.dump({"runs": args.runs, "median_s": results, "target_s": TARGET_S, "ok": ok}, f, indent=2)
    if not ok:
        sys.exit(1)


if __name__ == "__main__":
    main()

#!/usr/bin/env bash
# The evidence benchmark (README, "CAST vs Flow-GRPO at 12,800 images"): base vs flow-grpo vs cast,
# three training seeds each; then the judge-resolution ablation (the full degradation, grid + blur +
# 20 % noise) and the estimator-only flow-grpo-cast-window at three training seeds, and the extra
# rows (grid only, grid + blur, the learned judge) at one training seed each. Every step resumes:
# run this script again after a crash or a stopped session and it continues where it stopped;
# finished runs are never redone.
#   bash benchmarks/evidence.sh [OUT]          (default ~/.cache/cast/bench-12800)
# About 20-60 min per run on 2 CPU cores, by machine (longer at one thread); the last line adds
# seeds 1 and 2 of every extra row.
set -euo pipefail
OUT=${1:-$HOME/.cache/cast/bench-12800}
CAST=${CAST:-$(dirname "$0")/../.venv/bin/cast}
"$CAST" bench --out "$OUT"                                   # flow-grpo, cast x training seeds 0, 1, 2
one_seed() { for m in "$@"; do "$CAST" bench --out "$OUT" --seeds 1 --method flow-grpo --method cast --method "$m"; done; }
one_seed cast-learned-judge cast-judge-grid-blur-noise cast-judge-grid
# the ablation (grid + blur + 20 % noise) at three training seeds before the extra rows
"$CAST" bench --out "$OUT" --method flow-grpo --method cast --method cast-judge-grid-blur-noise
# the estimator alone in CAST's window: at seed 0 it matched cast's gain, so three seeds next
"$CAST" bench --out "$OUT" --method flow-grpo --method cast --method flow-grpo-cast-window
one_seed cast-judge-grid-blur
"$CAST" bench --out "$OUT" --method flow-grpo --method cast --method cast-judge-grid \
  --method cast-judge-grid-blur-noise --method flow-grpo-cast-window --method cast-judge-grid-blur \
  --method cast-learned-judge
# issue 40: the forward-process objectives beside flow-grpo and cast, three training seeds each
# (the flow-grpo / cast runs are the finished ones above; seed-major, so one seed of every new
# row comes first)
"$CAST" bench --out "$OUT" --method flow-grpo --method cast --method nft --method cast-nft --method awm \
  --method cast-awm

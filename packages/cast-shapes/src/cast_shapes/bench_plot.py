"""The bench's figure: paired gain over the base per metric (GM, then each skill), one bar per
method with ±1 s.e. whiskers — the table at a glance, where a reader sees at once which skills
a method moves and whether the bars clear zero."""

from __future__ import annotations

import math
from pathlib import Path

COLOURS = [
    (200, 40, 40),
    (40, 90, 200),
    (40, 150, 60),
    (150, 60, 180),
    (220, 140, 20),
    (90, 90, 90),
    (30, 160, 170),
    (170, 110, 60),
]


def nice_ticks(lo: float, hi: float, target: int = 4) -> list[float]:
    """Axis ticks at multiples of a 1, 2 or 5 × 10^k step, so that 0 is one of them whenever it
    lies in ``[lo, hi]`` (evenly spaced raw values put a "+0.002" next to the zero line)."""
    raw = (hi - lo) / target
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step)
    return [round(k * step, 12) for k in range(first, math.floor(hi / step) + 1)]


def plot_gains(path: Path, summary: dict) -> None:
    from PIL import Image, ImageDraw

    from cast_shapes.bench_stats import METRICS_ORDER

    gains = summary["gains"]
    methods = list(gains)
    metrics = [k for k in METRICS_ORDER if any(k in g for g in gains.values())]
    W, H, pad, top = 120 + 110 * max(1, len(metrics)), 420, 60, 30 + 14 * len(methods)
    img = Image.new("RGB", (W, H), "white")
    d = ImageDraw.Draw(img)
    vals = [
        v
        for g in gains.values()
        for k in metrics
        if k in g
        for v in (g[k]["gain"] - g[k]["se"], g[k]["gain"] + g[k]["se"])
    ]
    lo, hi = min([0.0, *vals]), max([0.0, *vals])
    span = (hi - lo) or 0.01
    lo, hi = lo - 0.1 * span, hi + 0.1 * span
    sy = lambda y: top + (hi - y) / (hi - lo) * (H - pad - top)  # noqa: E731
    d.line([(pad, sy(0)), (W - 10, sy(0))], fill=(0, 0, 0))
    d.line([(pad, top), (pad, H - pad)], fill=(0, 0, 0))
    for y in nice_ticks(lo, hi):
        d.line([(pad - 4, sy(y)), (pad, sy(y))], fill=(0, 0, 0))
        d.text((4, sy(y) - 6), f"{y:+.3f}" if y else "0", fill=(80, 80, 80))
    group_w = (W - pad - 20) / max(1, len(metrics))
    bar_w = max(4.0, (group_w - 20) / max(1, len(methods)))
    for j, k in enumerate(metrics):
        x0 = pad + 10 + j * group_w
        d.text((x0 + group_w / 2 - 20, H - pad + 8), k, fill=(0, 0, 0))
        for i, m in enumerate(methods):
            if k not in gains[m]:
                continue
            g, col = gains[m][k], COLOURS[i % len(COLOURS)]
            bx = x0 + i * bar_w
            d.rectangle([bx, min(sy(0), sy(g["gain"])), bx + bar_w - 3, max(sy(0), sy(g["gain"]))], fill=col)
            cx = bx + (bar_w - 3) / 2
            d.line([(cx, sy(g["gain"] - g["se"])), (cx, sy(g["gain"] + g["se"]))], fill=(0, 0, 0), width=1)
    for i, m in enumerate(methods):
        d.rectangle([pad + 10, 8 + 14 * i, pad + 20, 18 + 14 * i], fill=COLOURS[i % len(COLOURS)])
        d.text((pad + 26, 7 + 14 * i), m, fill=(0, 0, 0))
    d.text(
        (pad + 10, H - 22), f"paired gain over the base on {summary['plan']['eval_suite']} (±1 s.e.)", fill=(0, 0, 0)
    )
    img.save(path)

"""``window.png``: the measured curve and the chosen window, drawn with Pillow.

Two panels over the schedule's steps. Top: the mean similarity of ``x̂0`` to the final image with
a ±1 std band over the calibration set. Bottom: the signed curvature of the normalised smoothed
curve (negative = the rise flattens). In both, the window is shaded and the formation point is a
vertical line. Pillow only — matplotlib is not a dependency — so the drawing is plain on purpose.
"""

from __future__ import annotations

import math
from typing import Sequence

from PIL import Image, ImageDraw, ImageFont

WIDTH, HEIGHT = 760, 560
MARGIN_L, MARGIN_R, MARGIN_T, MARGIN_B = 70, 20, 48, 40
GAP = 46
CURVE, BAND, WINDOW, KNEE, AXIS, GRID = (
    (30, 80, 200),
    (190, 205, 240),
    (255, 228, 190),
    (200, 30, 30),
    (40, 40, 40),
    (225, 225, 225),
)
TRUTH = (20, 140, 40)
COMMITMENT = (40, 90, 200)


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = min((m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw), default=raw)
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step + 1e-9) + 1)]


class _Panel:
    """One axes box mapping (step, value) to pixels."""

    def __init__(self, draw: ImageDraw.ImageDraw, box: tuple[int, int, int, int], steps: int, lo: float, hi: float):
        self.draw, self.box, self.steps = draw, box, steps
        pad = 0.05 * (hi - lo) if hi > lo else 0.5
        self.lo, self.hi = lo - pad, hi + pad

    def x(self, step: float) -> float:
        x0, _, x1, _ = self.box
        return x0 + (step + 0.5) / self.steps * (x1 - x0)

    def y(self, value: float) -> float:
        _, y0, _, y1 = self.box
        return y1 - (value - self.lo) / (self.hi - self.lo) * (y1 - y0)

    def frame(self, title: str, font) -> None:
        x0, y0, x1, y1 = self.box
        for t in _ticks(self.lo, self.hi):
            yy = self.y(t)
            self.draw.line([(x0, yy), (x1, yy)], fill=GRID)
            self.draw.text((x0 - 6, yy), f"{t:.3g}", fill=AXIS, font=font, anchor="rm")
        every = max(1, math.ceil(self.steps / 20))
        for s in range(0, self.steps, every):
            self.draw.line([(self.x(s), y1), (self.x(s), y1 + 4)], fill=AXIS)
            self.draw.text((self.x(s), y1 + 6), str(s), fill=AXIS, font=font, anchor="mt")
        self.draw.rectangle(self.box, outline=AXIS)
        self.draw.text((x0, y0 - 6), title, fill=AXIS, font=font, anchor="lb")

    def shade(self, start: int, end: int) -> None:
        _, y0, _, y1 = self.box
        self.draw.rectangle([self.x(start - 0.5), y0 + 1, self.x(end - 0.5), y1 - 1], fill=WINDOW)

    def vline(self, step: float, colour=KNEE, phase: int = 0) -> None:
        _, y0, _, y1 = self.box
        xx, y = self.x(step), y0 + phase
        while y < y1:  # dashed
            self.draw.line([(xx, y), (xx, min(y + 6, y1))], fill=colour, width=2)
            y += 10

    def hline(self, value: float, colour=KNEE) -> None:
        x0, _, x1, _ = self.box
        yy, x = self.y(value), x0
        while x < x1:  # dotted
            self.draw.line([(x, yy), (min(x + 3, x1), yy)], fill=colour, width=1)
            x += 7

    def polyline(self, values: Sequence[float], colour, width: int = 2) -> None:
        pts = [(self.x(i), self.y(v)) for i, v in enumerate(values)]
        if len(pts) > 1:
            self.draw.line(pts, fill=colour, width=width)
        for px, py in pts:
            self.draw.ellipse([px - 3, py - 3, px + 3, py + 3], fill=colour)


def draw_window_plot(
    mean: Sequence[float],
    std: Sequence[float],
    curvature: Sequence[float],
    *,
    window_start: int,
    window_size: int,
    knee_step: int,
    title: str = "",
    subtitle: str = "",
    truth_step: int | None = None,
    commitment_step: int | None = None,
    level_value: float | None = None,
) -> Image.Image:
    """The two-panel figure described in the module docstring; ``truth_step`` (a ground-truth
    formation step from an atom judge, if measured) is drawn as a green dashed line, the causal
    ``commitment_step`` (if measured) as a blue one, and ``level_value`` (the settle rule's level
    in the curve's own cosine units) as a red dotted horizontal line."""
    steps = len(mean)
    img = Image.new("RGB", (WIDTH, HEIGHT), "white")
    draw = ImageDraw.Draw(img)
    try:
        font = ImageFont.load_default(size=12)
    except TypeError:  # Pillow < 10.1: the fixed bitmap font
        font = ImageFont.load_default()
    panel_h = (HEIGHT - MARGIN_T - MARGIN_B - GAP) // 2
    left, right = MARGIN_L, WIDTH - MARGIN_R
    top_box = (left, MARGIN_T + 14, right, MARGIN_T + panel_h)
    bottom_box = (left, MARGIN_T + panel_h + GAP, right, MARGIN_T + 2 * panel_h + GAP - 14)

    upper = [m + s for m, s in zip(mean, std)]
    lower = [m - s for m, s in zip(mean, std)]
    top = _Panel(draw, top_box, steps, min(lower), max(max(upper), 1.0))
    top.shade(window_start, window_start + window_size)
    band = [(top.x(i), top.y(v)) for i, v in enumerate(upper)] + [
        (top.x(i), top.y(v)) for i, v in reversed(list(enumerate(lower)))
    ]
    if steps > 1:
        draw.polygon(band, fill=BAND)
    top.frame("similarity of the step's x0 estimate to the final image (cosine; mean +/- std)", font)
    top.polyline(mean, CURVE)
    if truth_step is not None:
        top.vline(truth_step, TRUTH, phase=5)
    if commitment_step is not None:
        top.vline(commitment_step, COMMITMENT, phase=3)
    top.vline(knee_step)
    if level_value is not None:
        top.hline(level_value)

    kappa = list(curvature)
    bottom = _Panel(draw, bottom_box, steps, min(min(kappa), 0.0), max(max(kappa), 0.0))
    bottom.shade(window_start, window_start + window_size)
    bottom.frame("curvature of the normalised smoothed curve (negative: the rise flattens)", font)
    draw.line([(left, bottom.y(0.0)), (right, bottom.y(0.0))], fill=AXIS)
    bottom.polyline(kappa, (90, 90, 90))
    bottom.vline(knee_step)

    draw.text((left, 8), title, fill=AXIS, font=font)
    draw.text((left, 22), subtitle, fill=AXIS, font=font)
    legend = (
        f"window: steps {window_start}..{window_start + window_size - 1} (shaded)   "
        f"formation point: step {knee_step} (red dashes)"
    )
    if truth_step is not None:
        legend += f"   judge's formation step: {truth_step} (green)"
    if commitment_step is not None:
        legend += f"   commitment: {commitment_step} (blue)"
    if level_value is not None:
        legend += "   settle level (dotted)"
    draw.text((left, HEIGHT - 16), legend, fill=AXIS, font=font)
    draw.text((right, HEIGHT - 30), "step", fill=AXIS, font=font, anchor="ra")
    return img

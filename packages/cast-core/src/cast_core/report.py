"""``report.html`` for a run directory: curves, sample grids and evaluation tables in one file.

Self-contained (charts are inline SVG, pictures are base64 PNGs) so it can be opened from a
laptop, attached to an issue or archived next to the checkpoints.
"""

from __future__ import annotations

import base64
import html
import json
import math
from pathlib import Path
from typing import Callable

CURVES = (
    ("reward_gm", "reward GM (prompt level)"),
    ("reward_am", "reward AM (atom level)"),
    ("loss", "policy loss"),
    ("clip_fraction", "clip fraction"),
    ("saturated_fraction", "saturated atoms"),
)


def _chart(every: list[tuple[float, float]], title: str, draw, width: int = 420, height: int = 180) -> str:
    """An SVG chart of the points ``every`` spans: title, axis labels, and what ``draw(sx, sy)``
    returns (the curves, in the chart's coordinates)."""
    if len(every) < 2:
        return f"<p>{html.escape(title)}: not enough points</p>"
    x0, x1 = min(p[0] for p in every), max(p[0] for p in every)
    y0, y1 = min(p[1] for p in every), max(p[1] for p in every)
    y1 = y1 if y1 > y0 else y0 + 1e-9
    pad = 36

    def sx(x):
        return pad + (x - x0) / ((x1 - x0) or 1) * (width - pad - 8)

    def sy(y):
        return height - 22 - (y - y0) / (y1 - y0) * (height - 40)

    return (
        f'<svg width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg" style="background:#fafafa">'
        f'<text x="{pad}" y="14" font-size="12">{html.escape(title)}</text>'
        + draw(sx, sy)
        + f'<text x="2" y="{sy(y1) + 4:.0f}" font-size="10">{y1:.3g}</text>'
        f'<text x="2" y="{sy(y0):.0f}" font-size="10">{y0:.3g}</text>'
        f'<text x="{pad}" y="{height - 6}" font-size="10">step {x0:g}</text>'
        f'<text x="{width - 70}" y="{height - 6}" font-size="10">step {x1:g}</text></svg>'
    )


def _finite(xs: list[float], ys: list) -> list[tuple[float, float]]:
    return [(x, y) for x, y in zip(xs, ys) if y is not None and math.isfinite(y)]


def _svg_line(xs: list[float], ys: list[float], title: str) -> str:
    """One curve, raw and as a moving average (the trend through the noise)."""
    pts = _finite(xs, ys)
    k = max(1, len(pts) // 20)
    smooth = [
        (pts[i][0], sum(p[1] for p in pts[max(0, i - k) : i + 1]) / len(pts[max(0, i - k) : i + 1]))
        for i in range(len(pts))
    ]

    def draw(sx, sy):
        raw = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
        trend = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in smooth)
        return (
            f'<polyline points="{raw}" fill="none" stroke="#9ab" stroke-width="1"/>'
            f'<polyline points="{trend}" fill="none" stroke="#c33" stroke-width="2"/>'
        )

    return _chart(pts, title, draw)


_COLOURS = ("#c33", "#36c", "#393", "#c93", "#939", "#399", "#666")


def _svg_lines(series: dict[str, tuple[list[float], list]], title: str, width: int = 420) -> str:
    """Several curves on one chart (``label -> (steps, values)``), one colour each, with a legend:
    each scorer's reward, or the monitor beside the training reward."""
    drawn = {label: _finite(xs, ys) for label, (xs, ys) in series.items()}
    drawn = {label: pts for label, pts in drawn.items() if pts}

    def draw(sx, sy):
        out = []
        for i, (label, pts) in enumerate(drawn.items()):
            colour = _COLOURS[i % len(_COLOURS)]
            if len(pts) == 1:
                out.append(f'<circle cx="{sx(pts[0][0]):.1f}" cy="{sy(pts[0][1]):.1f}" r="3" fill="{colour}"/>')
            else:
                coords = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
                out.append(f'<polyline points="{coords}" fill="none" stroke="{colour}" stroke-width="1.5"/>')
            out.append(
                f'<text x="{width - 150}" y="{14 + 12 * i}" font-size="10" fill="{colour}">{html.escape(label)}</text>'
            )
        return "".join(out)

    return _chart([p for pts in drawn.values() for p in pts], title, draw, width)


def _per_scorer_charts(metrics: list[dict]) -> str:
    """One chart per reward statistic with a curve per scorer (``reward_gm/LABEL`` …), in a run
    that lists several scorers; nothing otherwise."""
    out = []
    for key, title in (("reward_gm", "reward GM per scorer"), ("reward_am", "reward AM per scorer")):
        labels = sorted({k.split("/", 1)[1] for m in metrics for k in m if k.startswith(key + "/")})
        if labels:
            series = {
                label: ([m["step"] for m in metrics], [_number(m.get(f"{key}/{label}")) for m in metrics])
                for label in labels
            }
            out.append(_svg_lines(series, title))
    return "".join(out)


def _monitor_charts(run: Path, metrics: list[dict], warn: Callable[[str], None] | None) -> str:
    """The monitor beside the training reward: each scorer's reward on the held-out monitor prompts
    with the training reward GM on one chart, then KL, diversity, saturation and contrast."""
    from cast_core.run_dir import read_metrics

    path = run / "monitor.jsonl"
    rows = [r for r in read_metrics(path, warn) if _number(r.get("step")) is not None] if path.exists() else []
    if not rows:
        return ""
    steps = [r["step"] for r in rows]
    rewards = sorted({k for r in rows for k in r if k.startswith("monitor/")} - set(MONITOR_STATS))
    series = {k.removeprefix("monitor/") + " (held-out)": (steps, [_number(r.get(k)) for r in rows]) for k in rewards}
    if metrics:
        series["training reward GM"] = ([m["step"] for m in metrics], [_number(m.get("reward_gm")) for m in metrics])
    out = [_svg_lines(series, "monitor: held-out rewards beside the training reward")]
    for key, title in MONITOR_STATS.items():
        if any(key in r for r in rows):
            out.append(_svg_lines({title: (steps, [_number(r.get(key)) for r in rows])}, f"monitor: {title}"))
    return "<h2>Monitor (held-out prompts, same noise every time)</h2><div>" + "".join(out) + "</div>"


MONITOR_STATS = {
    "monitor/kl": "KL to the reference",
    "monitor/diversity": "diversity within a prompt",
    "monitor/saturation": "saturation",
    "monitor/contrast": "contrast",
}


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _img(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    return (
        f'<img src="data:image/png;base64,{data}" title="{html.escape(path.name)}" '
        'style="image-rendering:pixelated;max-width:100%">'
    )


def _eval_table(evals: dict[str, dict]) -> str:
    names = list(evals)
    rows = [
        ("GM (prompt level)", [evals[n]["gm"] for n in names]),
        ("AM (atom level)", [evals[n]["am"] for n in names]),
    ]
    keys = sorted({k for n in names for k in evals[n].get("by_atom_count", {})}, key=int)
    rows += [(f"GM, {k} atoms", [evals[n]["by_atom_count"].get(k) for n in names]) for k in keys]
    skills = sorted({k for n in names for k in evals[n].get("by_skill", {})})
    rows += [(f"AM, {s}", [evals[n]["by_skill"].get(s) for n in names]) for s in skills]
    head = "".join(f"<th>{html.escape(n)}</th>" for n in names)
    body = "".join(
        "<tr><td>"
        + html.escape(label)
        + "</td>"
        + "".join(f"<td>{v:.3f}</td>" if v is not None else "<td>–</td>" for v in vals)
        + "</tr>"
        for label, vals in rows
    )
    return f"<table><tr><th></th>{head}</tr>{body}</table>"


def _skill_table(diffs: dict) -> str:
    from cast_core.evaluation import paired_verdict

    rows = "".join(
        f"<tr><td>{html.escape(k)}</td><td>{d['delta']:+.3f} ± {d['se']:.3f}</td><td>{d['prompts']}</td>"
        f"<td>{d['z']:.1f}</td><td style='text-align:left'>{paired_verdict(d['z'])}</td></tr>"
        for k, d in diffs.items()
    )
    return f"<table><tr><th>skill</th><th>difference</th><th>prompts</th><th>z</th><th>verdict</th></tr>{rows}</table>"


def _upgrade_comparison(comparison: dict) -> dict | None:
    """``comparison.json`` in :data:`cast_core.comparison.LAYOUT`, or None for a layout this
    version does not know. A demo run from before the layout had a name (pooled difference at the
    top, per seed only its GM difference) becomes the parts of the layout the report shows, so
    its report can be rebuilt."""
    from cast_core.comparison import LAYOUT

    if comparison.get("layout") == LAYOUT:
        return comparison
    if "layout" in comparison or "gm_difference" not in comparison:
        return None
    over = comparison.get("over_seeds")
    return {
        "seeds": comparison.get("seeds"),
        "per_seed": comparison.get("per_seed") or [],
        "pooled": {
            "gm_difference": comparison["gm_difference"],
            "skill_differences": comparison.get("skill_differences") or {},
        },
        "over_seeds": {"gm": over} if over else None,
    }


def _comparison_html(raw: dict, warn: Callable[[str], None] | None) -> str:
    from cast_core.evaluation import paired_verdict

    comparison = _upgrade_comparison(raw)
    if comparison is None:
        why = f"comparison.json has layout {raw.get('layout', 'unknown')!r}, which this version of cast cannot read"
        if warn:
            warn(why)
        return f"<p>No paired difference shown: {html.escape(why)}.</p>"
    pooled = comparison["pooled"]
    d = pooled["gm_difference"]
    seeds = comparison.get("seeds")
    pooled_seeds = f", evaluation seeds {', '.join(map(str, seeds))} pooled" if seeds and len(seeds) > 1 else ""
    parts = [
        f"<p>Paired GM difference (trained − base, same prompts and noise): <b>{d['delta']:+.3f} ± "
        f"{d['se']:.3f}</b> (standard error over {d['prompts']} prompts{pooled_seeds}, z = {d['z']:.1f}): "
        f"{paired_verdict(d['z'])}.</p>"
    ]
    if comparison["per_seed"]:
        parts.append(
            "<p>Per evaluation seed: "
            + ", ".join(
                f"{r['seed']}: {r['gm_difference']['delta']:+.3f} ± {r['gm_difference']['se']:.3f}"
                for r in comparison["per_seed"]
            )
            + "</p>"
        )
    if comparison["over_seeds"]:
        o = comparison["over_seeds"]["gm"]
        parts.append(
            f"<p>Mean over the {o['n']} seeds: {o['delta']:+.3f} ± {o['se']:.3f} (standard error "
            f"over seeds, z = {o['z']:.1f}): {paired_verdict(o['z'])}.</p>"
        )
    if pooled["skill_differences"]:
        parts.append(
            "<p>By skill (mean atom score, trained − base, over the prompts with that skill):</p>"
            + _skill_table(pooled["skill_differences"])
        )
    return "".join(parts)


def _numbers_only(path: Path, rows: list[dict], warn: Callable[[str], None] | None) -> list[dict]:
    """The metric rows with every plotted value a number (or null): a hand-edited
    ``"reward_gm": "high"`` is dropped with a warning naming its line, instead of a traceback
    halfway through the report. A row whose step is not a number is dropped whole."""
    plotted = ("step", *(key for key, _ in CURVES))

    def wrong(row: dict) -> list[str]:
        return [
            k
            for k in plotted
            if (k == "step" and "step" not in row)
            or (row.get(k) is not None and (isinstance(row[k], bool) or not isinstance(row[k], (int, float))))
        ]

    if not any(wrong(row) for row in rows):
        return rows
    numbered = []  # (line number, row): the rows read_metrics kept, found again with their lines
    for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict):
            numbered.append((number, row))
    out = []
    for number, row in numbered:
        dropped = wrong(row)
        for k in dropped:
            if warn:
                shown = json.dumps(row.get(k))[:40] if k in row else "missing"
                warn(
                    f"warning: {path}:{number}: {k} is {shown}, not a number; "
                    + ("the line is skipped" if k == "step" else "that value is skipped")
                )
        if "step" not in dropped:
            out.append({k: v for k, v in row.items() if k not in dropped})
    return out


def _read_json(path: Path, warn: Callable[[str], None] | None, need: tuple[str, ...] = ()) -> dict | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        data, why = None, f"not readable JSON ({type(err).__name__})"
    else:
        missing = [k for k in need if not isinstance(data, dict) or not isinstance(data.get(k), (int, float))]
        why = f"no numeric {', '.join(missing)}" if missing else None
    if why is None:
        return data
    if warn:
        warn(f"warning: {path} is skipped: {why}")
    return None


def _refuse_non_run(run: Path) -> None:
    """A report is written into the directory it describes; one that holds no run (no
    config.toml, metrics.jsonl or evaluation results) gets nothing, not an empty report.html."""
    from cast_core.errors import InputError

    if not run.is_dir():
        raise InputError(f"{run} is not a directory; give a run directory written by `cast train --out`")
    shows = [run / "config.toml", run / "metrics.jsonl", *run.glob("eval-*.json")]
    if not any(p.is_file() for p in shows):
        raise InputError(
            f"{run} is not a run directory (no config.toml, metrics.jsonl or eval-*.json); give the directory "
            "`cast train --out` or `cast shapes demo --out` wrote"
        )


def write_report(run_dir: str | Path, warn: Callable[[str], None] | None = None) -> Path:
    """Build ``run_dir/report.html`` from metrics.jsonl, samples/, eval-*.json, comparison.json
    and grid PNGs (``warn`` hears about unreadable metric lines and values, which are skipped, and
    about a comparison.json whose layout it cannot read). The page is written atomically: a full
    or read-only disk is a one-line :class:`~cast_core.run_dir.WriteError` and leaves no empty file."""
    run = Path(run_dir)
    from cast_core.config import read_config_text
    from cast_core.run_dir import read_metrics, write_atomic

    _refuse_non_run(run)
    metrics = _numbers_only(run / "metrics.jsonl", read_metrics(run / "metrics.jsonl", warn), warn)
    parts = [f"<h1>cast run: {html.escape(run.name)}</h1>"]
    if (run / "config.toml").exists():
        parts.append(
            "<details><summary>configuration</summary>"
            f"<pre>{html.escape(read_config_text(run / 'config.toml'))}</pre></details>"
        )
    evals = {p.stem.removeprefix("eval-"): _read_json(p, warn, ("gm", "am")) for p in sorted(run.glob("eval-*.json"))}
    evals = {k: v for k, v in evals.items() if v is not None}
    if evals:
        suite = next(iter(evals.values())).get("suite", "")
        parts.append(f"<h2>Evaluation on {html.escape(str(suite))}</h2>" + _eval_table(evals))
        comparison = _read_json(run / "comparison.json", warn) if (run / "comparison.json").exists() else None
        if isinstance(comparison, dict):
            parts.append(_comparison_html(comparison, warn))
    grids = sorted(run.glob("grid-*.png"))
    if grids:
        parts.append("<h2>Before / after (same prompts, same seeds; + pass, − fail per atom)</h2>")
        parts += [f"<h3>{html.escape(g.stem.removeprefix('grid-'))}</h3>{_img(g)}" for g in grids]
    if metrics:
        steps = [m["step"] for m in metrics]
        parts.append(
            "<h2>Training curves</h2><div>"
            + "".join(
                _svg_line(steps, [m.get(key) for m in metrics], title)
                for key, title in CURVES
                if any(key in m for m in metrics)
            )
            + _per_scorer_charts(metrics)
            + "</div>"
        )
    parts.append(_monitor_charts(run, metrics, warn))
    if metrics:
        last = metrics[-1]
        parts.append(
            f"<p>{len(metrics)} steps logged; {last.get('images_sampled', '?')} images sampled; "
            f"skipped updates {last.get('skipped_updates', 0)}, scorer failures {last.get('scorer_failures', 0)}.</p>"
        )
    samples = sorted((run / "samples").glob("step-*.png")) if (run / "samples").is_dir() else []
    if samples:
        shown = (
            samples
            if len(samples) <= 4
            else [samples[0], samples[len(samples) // 3], samples[2 * len(samples) // 3], samples[-1]]
        )
        parts.append(
            "<h2>Training samples (first prompt of the step; top: images, bottom: advantage map, red +, blue −)</h2>"
        )
        parts += [f"<h3>{s.stem}</h3>{_img(s)}" for s in shown]
    style = (
        "body{font-family:sans-serif;max-width:1100px;margin:2em auto}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}svg{margin:4px}"
    )
    return write_atomic(
        run / "report.html",
        "<!doctype html><html><head><meta charset='utf-8'><title>cast report</title>"
        f"<style>{style}</style></head><body>{''.join(parts)}</body></html>",
    )

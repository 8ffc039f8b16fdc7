"""``cast signal``: which sampling steps carry reward signal for this policy, scorer and projector
(:mod:`cast_core.gradient_signal`) — a check on a window before spending a training run on it."""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

import click


@click.command("signal")
@click.option(
    "--recipe",
    "--plugin",
    "recipe",
    help="Recipe to start from (default: shapes, else cast); --plugin is its older name.",
)
@click.option("--policy", help="Policy component (overrides the recipe).")
@click.option("--scorer", help="Atom scorer component.")
@click.option("--projector", help="Advantage projector component.")
@click.option("--config", "config_file", type=click.Path(dir_okay=False), help="TOML file of config keys.")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override one config key (repeatable).")
@click.option(
    "--batches",
    default=8,
    show_default=True,
    type=click.IntRange(2, 1000),
    help="Independent batches (each prompts_per_step × group_size images).",
)
@click.option(
    "--window-steps",
    metavar="START:SIZE",
    callback=lambda ctx, param, value: _window(value),
    help="Instead of per step: the whole-window gradient of a training step with this window "
    "(and the config's group_noise / noise_block), compared across batches.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--out", type=click.Path(file_okay=False), help="Write signal.json and signal.png here.")
def signal_command(recipe, policy, scorer, projector, config_file, sets, batches, window_steps, as_json, out):
    """Per sampling step, the mean pairwise cosine between policy gradients of independent
    batches (SDE exploration on every step). Steps whose noise changes the reward share a
    gradient direction (cosine > 0); the others give noise (cosine ≈ 0)."""
    from cast_core.config import build_config
    from cast_core.gradient_signal import step_signal
    from cast_core.trainer import Trainer

    cfg = build_config(
        recipe=recipe,
        components={"policy": policy, "scorer": scorer, "projector": projector},
        config_file=config_file,
        sets=sets,
    )
    if window_steps is not None:
        _window_command(cfg, window_steps, batches, as_json, out)
        return
    with tempfile.TemporaryDirectory() as scratch:
        trainer = Trainer(cfg, Path(scratch) / "run", log=lambda msg: None)
        done = lambda i, n: click.echo(f"batch {i}/{n}", err=True)  # noqa: E731
        result = step_signal(trainer, batches, progress=done)
    data = {
        "policy": cfg.policy,
        "scorer": cfg.scorer,
        "projector": cfg.projector,
        "num_steps": cfg.num_steps,
        "eta": cfg.eta,
        **result.as_dict(),
    }
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "signal.json").write_text(json.dumps(data, indent=2))
        plot_signal(data).save(Path(out) / "signal.png")
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    click.echo(
        f"{cfg.policy} · {cfg.scorer} · {cfg.projector} · {cfg.num_steps} steps · η {cfg.eta:g} · "
        f"{batches} batches × {result.images_per_batch} images"
    )
    click.echo(f"{'step':>4}  {'cosine':>8}  {'± se':>7}  {'|grad|':>8}")
    for t, (c, se, g) in enumerate(zip(result.cosine, result.cosine_sem, result.grad_norm)):
        mark = "  signal" if t in data["signal_steps"] else ""
        click.echo(f"{t:>4}  {c:>+8.4f}  {se:>7.4f}  {g:>8.4f}{mark}")
    click.echo(
        f"noise floor 1/sqrt(#params) = {result.noise_floor:.4f}; steps with signal: {data['signal_steps'] or 'none'}"
    )


def _window(value: str | None):
    """``"2:2"`` -> ``Window(2, 2)``; a clear usage error otherwise."""
    from cast_core.types import Window

    if value is None:
        return None
    try:
        start, size = (int(part) for part in value.split(":"))
        if size < 1:
            raise ValueError
        return Window(start, size)
    except ValueError:
        raise click.BadParameter(
            f"{value!r} is not START:SIZE with integers START >= 0 and SIZE >= 1, e.g. 2:2", param_hint="--window-steps"
        ) from None


def _window_command(cfg, window, batches: int, as_json: bool, out) -> None:
    from cast_core.gradient_signal import window_signal
    from cast_core.trainer import Trainer

    try:
        window.check_fits(cfg.num_steps)
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint="--window-steps") from None
    with tempfile.TemporaryDirectory() as scratch:
        trainer = Trainer(cfg, Path(scratch) / "run", log=lambda msg: None)
        done = lambda i, n: click.echo(f"batch {i}/{n}", err=True)  # noqa: E731
        result = window_signal(trainer, window, batches, progress=done)
    data = {
        "policy": cfg.policy,
        "scorer": cfg.scorer,
        "projector": cfg.projector,
        "num_steps": cfg.num_steps,
        "eta": cfg.eta,
        "group_noise": cfg.group_noise,
        "noise_block": cfg.noise_block,
        "heatmap_source": cfg.heatmap_source,
        **result,
    }
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "window-signal.json").write_text(json.dumps(data, indent=2))
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    click.echo(
        f"{cfg.policy} · {cfg.scorer} · {cfg.projector} · window {window.start}..{window.end - 1} of "
        f"{cfg.num_steps} · η {cfg.eta:g} · group_noise {cfg.group_noise} · noise_block {cfg.noise_block} · "
        f"{batches} batches × {result['images_per_batch']} images"
    )
    c, se = result["cosine"], result["cosine_sem"]
    verdict = "signal" if c > 3 * max(se, result["noise_floor"]) else "not distinguishable from noise (< 3 s.e.)"
    click.echo(f"whole-window gradient cosine {c:+.4f} ± {se:.4f}  |grad| {result['grad_norm']:.4f}  → {verdict}")


def plot_signal(data: dict, width: int = 520, height: int = 260):
    """Bars of the per-step cosine with ±1 se whiskers and the noise floor as a dashed band."""
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (width, height), "white")
    d = ImageDraw.Draw(img)
    left, right, top, bottom = 48, width - 12, 24, height - 30
    cos, sem = data["cosine"], [s if s is not None and math.isfinite(s) else 0.0 for s in data["cosine_sem"]]
    hi = max([c + s for c, s in zip(cos, sem)] + [3 * data["noise_floor"], 1e-6])
    lo = min([c - s for c, s in zip(cos, sem)] + [-3 * data["noise_floor"], 0.0])
    y = lambda v: bottom - (v - lo) / (hi - lo) * (bottom - top)  # noqa: E731
    n = len(cos)
    slot = (right - left) / max(n, 1)
    floor = data["noise_floor"]
    for x0 in range(left, right, 8):
        d.line([(x0, y(floor)), (x0 + 4, y(floor))], fill=(150, 150, 150))
        d.line([(x0, y(-floor)), (x0 + 4, y(-floor))], fill=(150, 150, 150))
    d.line([(left, y(0)), (right, y(0))], fill="black")
    for t, (c, s) in enumerate(zip(cos, sem)):
        x0, x1 = left + t * slot + slot * 0.2, left + (t + 1) * slot - slot * 0.2
        colour = (40, 110, 200) if t in data.get("signal_steps", []) else (170, 190, 215)
        d.rectangle([x0, min(y(c), y(0)), x1, max(y(c), y(0))], fill=colour)
        xm = (x0 + x1) / 2
        d.line([(xm, y(c - s)), (xm, y(c + s))], fill="black")
        d.text((xm - 3, bottom + 6), str(t), fill="black")
    d.text((left, 4), "gradient agreement across batches per step (cosine); dashed: ±noise floor", fill="black")
    d.text((4, y(hi) - 4), f"{hi:.3f}", fill="black")
    d.text((4, y(lo) - 8), f"{lo:.3f}", fill="black")
    d.text((right - 40, bottom + 16), "step", fill="black")
    return img

"""``cast window``: measure a policy's structure-formation window and show how it was chosen.

Prints the window (or its JSON with ``--json``) and writes ``window.json`` (window, formation
point, reason, curve, curvature) and ``window.png`` (:mod:`cast_windows.plot`) into ``--out``.
Calibration prompts: ``--prompts FILE``, ``--suite S``, else the policy's own
``calibration_prompts``, else :data:`DEFAULT_PROMPTS`. With ``--truth-scorer`` it also measures
the ground-truth formation step from atom verdicts (:mod:`cast_windows.validation`) on the same
prompts and seeds, and reports whether the knee is within one step of it — the shapes-world
validation is ``cast window --policy shapes --embedder shapes-layout --truth-scorer shapes-oracle``
at ``--steps 10`` and ``--steps 20``. Heavy imports happen inside the command.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import click

from cast_core.errors import CastError

#: cast_windows.knee.METHODS, spelled out so that `cast --help` does not import numpy (a test keeps them equal)
KNEE_METHODS = ("kneedle", "curvature", "settle")

#: Generic compositional prompts (objects, counts, colours, positions) used when neither the
#: user nor the policy names a calibration set. The window is a property of the model's
#: trajectory, not of particular prompts; these just exercise the usual kinds of structure.
DEFAULT_PROMPTS = (
    "a photo of a red apple on a table",
    "two dogs running on a beach",
    "a blue car to the left of a tree",
    "a cat sitting on a wooden chair",
    "three yellow balloons in a clear sky",
    "a green vase next to a white cup",
    "a person riding a bicycle down a street",
    "a bowl of oranges above a stack of books",
)


def resolve_suite(spec: str) -> list[str]:
    """Prompts of ``--suite``: a prompt suite registered by any plugin (``cast plugins`` lists
    them; the shapes world registers its suites this way), or ``module:callable`` returning a list
    of prompts. No plugin is imported by name, so cast-windows depends on none of them."""
    if ":" in spec:
        module, _, attr = spec.partition(":")
        try:
            prompts = getattr(importlib.import_module(module), attr)()
        except (ImportError, AttributeError) as err:
            raise CastError(f"--suite {spec!r}: cannot load {spec}: {err}") from None
        prompts = [str(p) for p in prompts]
        if not prompts:
            raise CastError(f"--suite {spec!r} returned no prompts")
        return prompts
    from cast_core.registry import get_prompt_suite

    return get_prompt_suite(spec)


def parse_options(pairs: tuple[str, ...], flag: str) -> dict:
    """``KEY=VALUE`` pairs as keyword arguments; values are parsed as JSON when they can be
    (``size=8``, ``center=false``, ``seeds=[0,1]``) and kept as strings otherwise."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint=flag)
        try:
            out[key.strip()] = json.loads(value)
        except ValueError:
            out[key.strip()] = value
    return out


def _seeds(text: str) -> list[int]:
    from cast_core.seeding import parse_seed_list  # cast-core's one seed syntax (ranges too)

    return parse_seed_list(text, "--seeds")


@click.command("window")
@click.option("--policy", required=True, help="Policy component (e.g. fake, shapes, flux2).")
@click.option("--policy-opt", multiple=True, metavar="KEY=VALUE", help="Keyword argument for the policy (repeatable).")
@click.option(
    "--embedder",
    help="Embedder component (pixels, clip, shapes-scene, ...). Default: the policy's "
    "own choice (its window_defaults), else pixels.",
)
@click.option(
    "--embedder-opt",
    multiple=True,
    metavar="KEY=VALUE",
    help="Keyword argument for the embedder, e.g. pretrained=/path/to/clip.bin (repeatable).",
)
@click.option("--prompts", "prompt_file", type=click.Path(dir_okay=False), help="Calibration prompts, one a line.")
@click.option(
    "--suite", help="Calibration suite: a registered prompt suite (e.g. the shapes world's) or module:callable."
)
@click.option(
    "--steps", default=10, show_default=True, type=click.IntRange(1, 1000), help="Denoising steps of the schedule."
)
@click.option(
    "--num-prompts",
    default=8,
    show_default=True,
    type=click.IntRange(1, 100000),
    help="Calibration prompts used (N spread over the list).",
)
@click.option(
    "--seeds",
    default="0,1",
    show_default=True,
    callback=lambda ctx, param, value: _seeds(value),  # before the policy loads
    help="Noise seeds per prompt: a list and/or ranges, e.g. 0,1,5 or 0-4 or 0-4,777 (each 0 or more, below 2**63).",
)
@click.option(
    "--window-size", type=click.IntRange(1, 1000), help="Window length ending at the knee (default: steps 0..knee)."
)
@click.option(
    "--method",
    type=click.Choice(KNEE_METHODS),
    help="Formation-point rule (cast_windows.knee). Default: the policy's window_defaults, else kneedle.",
)
@click.option(
    "--level",
    type=click.FloatRange(0, 1, min_open=True),
    help="For --method settle: the normalised "
    "similarity the curve must stay above (default: the policy's window_defaults, else 0.9).",
)
@click.option(
    "--batch-size", default=8, show_default=True, type=click.IntRange(1, 4096), help="Images sampled at once."
)
@click.option("--cache-dir", type=click.Path(file_okay=False), help="Curve cache (default ~/.cache/cast/windows).")
@click.option("--no-cache", is_flag=True, help="Measure again; neither read nor write the cache.")
@click.option(
    "--truth-scorer", help="Also measure the ground-truth formation step with this atom scorer (e.g. shapes-oracle)."
)
@click.option("--truth-decomposer", default="template", show_default=True, help="Decomposer for --truth-scorer.")
@click.option(
    "--truth-threshold",
    default=0.9,
    show_default=True,
    type=click.FloatRange(0, 1),
    help="Settled fraction for the ground truth.",
)
@click.option(
    "--commitment",
    is_flag=True,
    help="With --truth-scorer: also measure the causal commitment step "
    "(SDE noise from step t on no longer changes the verdicts).",
)
@click.option(
    "--eta", default=0.7, show_default=True, type=click.FloatRange(0, None), help="SDE noise level for --commitment."
)
@click.option(
    "--out",
    "-o",
    default=".",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Directory for window.json and window.png.",
)
@click.option("--json", "as_json", is_flag=True, help="Print window.json to stdout instead of a summary.")
def window_command(
    policy,
    policy_opt,
    embedder,
    embedder_opt,
    prompt_file,
    suite,
    steps,
    num_prompts,
    seeds,
    window_size,
    method,
    level,
    batch_size,
    cache_dir,
    no_cache,
    truth_scorer,
    truth_decomposer,
    truth_threshold,
    commitment,
    eta,
    out,
    as_json,
):
    """Measure where POLICY's samples form their structure and print the SDE window CAST would use."""
    import warnings

    from cast_core.protocols import Calibrated, WindowHints
    from cast_core.registry import get_policy
    from cast_windows.clip_curvature import ClipCurvatureSelector
    from cast_windows.knee import FlatCurveWarning
    from cast_windows.plot import draw_window_plot

    if prompt_file and suite:
        raise click.UsageError("give --prompts or --suite, not both")
    pol = get_policy(policy, **parse_options(policy_opt, "--policy-opt"))
    defaults = dict((pol.window_defaults if isinstance(pol, WindowHints) else None) or {})
    embedder = embedder or defaults.get("embedder", "pixels")
    method = method or defaults.get("method", "kneedle")
    level = level or defaults.get("level", 0.9)
    if prompt_file:
        from cast_core.prompts import read_prompt_file

        prompts, source = [p for _, p in read_prompt_file(prompt_file)], f"file {prompt_file}"
    elif suite:
        prompts, source = resolve_suite(suite), f"suite {suite}"
    elif isinstance(pol, Calibrated) and pol.calibration_prompts:
        prompts, source = list(pol.calibration_prompts), f"the {policy} policy's calibration prompts"
    else:
        prompts, source = list(DEFAULT_PROMPTS), "cast-windows' default prompts"
    selector = ClipCurvatureSelector(
        embedder,
        embedder_kwargs=parse_options(embedder_opt, "--embedder-opt"),
        calibration_prompts=prompts,
        num_prompts=num_prompts,
        seeds=seeds,
        window_size=window_size,
        method=method,
        level=level,
        batch_size=batch_size,
        cache_dir=cache_dir,
        use_cache=not no_cache,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", FlatCurveWarning)
        window = selector.select(pol, prompts, steps)
    for w in caught:  # the fallback is news for the user: one clean line; anything else as usual
        if issubclass(w.category, FlatCurveWarning):
            click.echo(f"cast window: warning: {w.message}", err=True)
        else:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    d = dict(window.diagnostics)
    record = {
        "window": {"start": window.start, "size": window.size, "steps": list(window.steps)},
        "formation_step": d["knee_step"],
        "reason": d["reason"],
        "fallback": d["fallback"],
        "policy": policy,
        "embedder": embedder,
        "num_steps": steps,
        "prompts_source": source,
        "diagnostics": d,
    }
    if truth_scorer:
        from cast_core.registry import get_atom_decomposer, get_atom_scorer
        from cast_windows.validation import verdict_agreement

        truth = verdict_agreement(
            pol,
            d["calibration_prompts"],
            get_atom_scorer(truth_scorer),
            get_atom_decomposer(truth_decomposer),
            num_steps=steps,
            seeds=d["seeds"],
            batch_size=batch_size,
            threshold=truth_threshold,
        )
        record["truth"] = {
            **truth.to_dict(),
            "scorer": truth_scorer,
            "decomposer": truth_decomposer,
            "within_one_step": _within_one_step(truth.step, d["knee_step"]),
        }
        if commitment:
            from cast_windows.validation import commitment as measure_commitment

            c = measure_commitment(
                pol,
                d["calibration_prompts"],
                get_atom_scorer(truth_scorer),
                get_atom_decomposer(truth_decomposer),
                num_steps=steps,
                seeds=d["seeds"],
                batch_size=batch_size,
                eta=eta,
                threshold=truth_threshold,
            )
            record["commitment"] = {**c.to_dict(), "within_one_step": _within_one_step(c.step, d["knee_step"])}
    elif commitment:
        raise click.UsageError("--commitment needs --truth-scorer (the judge whose verdicts it compares)")
    target = Path(out)
    target.mkdir(parents=True, exist_ok=True)
    (target / "window.json").write_text(json.dumps(record, indent=2) + "\n")
    draw_window_plot(
        d["curve_mean"],
        d["curve_std"],
        d["curvature"],
        window_start=window.start,
        window_size=window.size,
        knee_step=d["knee_step"],
        title=f"cast window: policy {policy}, embedder {embedder}, {steps} steps, {d['samples']} samples ({source})",
        subtitle=d["reason"],
        truth_step=record["truth"]["step"] if "truth" in record else None,
        commitment_step=record["commitment"]["step"] if "commitment" in record else None,
        level_value=_level_value(d, level) if method == "settle" else None,
    ).save(target / "window.png")
    if as_json:
        click.echo(json.dumps(record, indent=2))
        return
    last = window.end - 1
    click.echo(f"window: steps {window.start}..{last} (start {window.start}, size {window.size}) of {steps}")
    click.echo(f"formation point: step {d['knee_step']} — {d['reason']}")
    if "truth" in record:
        t = record["truth"]
        click.echo(
            f"{truth_scorer} formation step: {t['step']} (verdicts settled for >= {truth_threshold:.0%} of samples "
            f"from there on); within one step of the formation point: {'yes' if t['within_one_step'] else 'NO'}; "
            f"per-atom: step {t['atom_step']}"
        )
    if "commitment" in record:
        c = record["commitment"]
        click.echo(
            f"commitment step: {c['step']} (SDE noise, eta {c['eta']:g}, from there on keeps every verdict of >= "
            f"{truth_threshold:.0%} of samples); within one step of the formation point: "
            f"{'yes' if c['within_one_step'] else 'NO'}; "
            f"per-atom: step {c['atom_step']}"
        )
    click.echo(
        f"measured on {d['samples']} samples from {source}; embedder {d['embedder']}"
        + (" (cached)" if d["cached"] else "")
    )
    click.echo(f"wrote {target / 'window.json'} and {target / 'window.png'}")


def _level_value(d: dict, level: float) -> float:
    """The settle level in the curve's cosine units: the normalisation undone on the smoothed curve."""
    lo, hi = min(d["smoothed"]), max(d["smoothed"])
    return lo + level * (hi - lo)


def _within_one_step(truth_step: int | None, knee_step: int) -> bool:
    return truth_step is not None and abs(truth_step - knee_step) <= 1

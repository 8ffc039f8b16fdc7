"""``cast compare``: base vs trained, paired, over several evaluation seeds."""

from __future__ import annotations

import hashlib

import click

from cast_core.commands.inputs import policy_opt_option
from cast_core.commands.output import check_output, emit_json


def _seed_list(ctx, param, value: str) -> list[int]:
    from cast_core.seeding import parse_seed_list

    return parse_seed_list(value, "--seeds", minimum=2)


@click.command("compare")
@click.option("--policy", required=True, help="Policy component.")
@click.option(
    "--adapter",
    required=True,
    type=click.Path(file_okay=False, exists=True),
    help="The trained adapter directory (e.g. RUN/checkpoints/step-00200/adapter).",
)
@click.option(
    "--base-adapter",
    type=click.Path(file_okay=False, exists=True),
    help="Compare against this adapter instead of the bare policy.",
)
@click.option("--suite", help="Registered prompt suite (see `cast plugins`).")
@click.option("--prompts", "prompt_file", type=click.Path(dir_okay=False), help="File with one prompt a line.")
@click.option("--images-per-prompt", "-k", default=4, show_default=True, type=click.IntRange(1, 1000))
@click.option("--steps", default=10, show_default=True, type=click.IntRange(1, 1000), help="Sampling steps.")
@click.option(
    "--seeds",
    default="0,1,2,3,777",
    show_default=True,
    callback=_seed_list,
    help="Evaluation seeds: a list and/or ranges, e.g. 0,1,5 or 0-4 or 0-4,777 (at least two; each is "
    "0 or more and below 2**63); each seed draws the same noise for both models.",
)
@click.option("--scorer", default="shapes-oracle", show_default=True, help="Atom scorer.")
@click.option("--decomposer", default="template", show_default=True, help="Decomposer.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--out", type=click.Path(dir_okay=False), help="Also write the JSON result here.")
@policy_opt_option
def compare_command(
    policy,
    adapter,
    base_adapter,
    suite,
    prompt_file,
    images_per_prompt,
    steps,
    seeds,
    scorer,
    decomposer,
    as_json,
    out,
    policy_opts,
):
    """Evaluate the base and the trained model with each seed (same prompts and noise for both)
    and report the paired GM difference per seed and its mean over seeds, with the standard
    error over seeds, overall and per skill. One seed's error over prompts does not cover how
    much the seed itself moves a difference; the mean over seeds is the number to quote."""
    from cast_core.commands.inputs import load_adapter_option, policy_kwargs
    from cast_core.progress import progress_bar
    from cast_core.prompts import read_prompt_file
    from cast_core.comparison import compare_over_seeds
    from cast_core.evaluation import paired_verdict
    from cast_core.registry import get_atom_decomposer, get_atom_scorer, get_policy, get_prompt_suite

    if bool(suite) == bool(prompt_file):
        raise click.UsageError("give exactly one of --suite or --prompts")
    check_output(out, "--out")
    prompts = get_prompt_suite(suite) if suite else [p for _, p in read_prompt_file(prompt_file)]
    if len(prompts) < 2:
        raise click.UsageError(
            f"{suite or prompt_file} has {len(prompts)} prompt; a paired difference needs at least 2"
        )
    kwargs = policy_kwargs(policy_opts)
    before, after = get_policy(policy, **kwargs), get_policy(policy, **kwargs)
    if base_adapter:
        load_adapter_option(before, base_adapter, "--base-adapter")
    load_adapter_option(after, adapter)
    judge, dec = get_atom_scorer(scorer), get_atom_decomposer(decomposer)
    total = 2 * len(seeds) * len(prompts) * images_per_prompt
    with progress_bar(f"{len(seeds)} seeds x 2 models: images sampled and scored", total) as progress:
        result = compare_over_seeds(
            before,
            after,
            prompts,
            judge,
            dec,
            seeds=seeds,
            images_per_prompt=images_per_prompt,
            num_steps=steps,
            progress=progress,
        )
    result.update(
        {
            "policy": policy,
            "adapter": adapter,
            "base_adapter": base_adapter,
            "suite": suite or prompt_file,
            "steps": steps,
            "prompts_digest": hashlib.sha256("\n".join(prompts).encode()).hexdigest()[:16],
        }
    )
    if emit_json(result, out, as_json):
        return
    base_name = base_adapter or f"{policy} (no adapter)"
    click.echo(
        f"{adapter} vs {base_name} on {result['suite']}: {len(prompts)} prompts x {images_per_prompt} images per seed"
    )
    click.echo(f"{'seed':>6}  {'base GM':>8}  {'trained GM':>10}  paired GM difference (± s.e. over prompts)")
    for row in result["per_seed"]:
        d = row["gm_difference"]
        click.echo(
            f"{row['seed']:>6}  {row['base']['gm']:8.3f}  {row['trained']['gm']:10.3f}  "
            f"{d['delta']:+.3f} ± {d['se']:.3f}"
        )
    s = result["over_seeds"]
    click.echo(
        f"mean over {len(seeds)} seeds: GM {s['base_gm']:.3f} -> {s['trained_gm']:.3f}, "
        f"{s['gm']['delta']:+.3f} ± {s['gm']['se']:.3f} (s.e. over seeds): {paired_verdict(s['gm']['z'])}"
    )
    click.echo("  by skill: " + "  ".join(f"{k} {d['delta']:+.3f} ± {d['se']:.3f}" for k, d in s["skills"].items()))

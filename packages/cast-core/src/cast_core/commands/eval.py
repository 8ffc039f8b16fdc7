"""``cast eval``: GenEval 2-style evaluation of a policy (optionally with an adapter)."""

from __future__ import annotations

import json

import click


@click.command("eval")
@click.option("--policy", required=True, help="Policy component.")
@click.option("--adapter", type=click.Path(file_okay=False, exists=True), help="Adapter directory to load.")
@click.option("--suite", help="Registered prompt suite (see `cast plugins`).")
@click.option("--prompts", "prompt_file", type=click.Path(dir_okay=False), help="File with one prompt a line.")
@click.option("--images-per-prompt", "-k", default=4, show_default=True, type=click.IntRange(1, 1000))
@click.option("--steps", default=10, show_default=True, type=click.IntRange(1, 1000), help="Sampling steps.")
@click.option("--seed", default=0, show_default=True)
@click.option("--scorer", default="shapes-oracle", show_default=True, help="Atom scorer.")
@click.option("--decomposer", default="template", show_default=True, help="Decomposer.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--out", type=click.Path(dir_okay=False), help="Also write the JSON result here.")
@click.option("--grid", type=click.Path(dir_okay=False), help="Also draw the first prompts' images with verdicts here.")
def eval_command(policy, adapter, suite, prompt_file, images_per_prompt, steps, seed, scorer, decomposer, as_json, out, grid):
    """Sample every prompt K times with the ODE sampler and report Soft-TIFA AM/GM overall,
    by atom count and by skill."""
    from cast_core.commands.inputs import read_prompt_file
    from cast_core.evaluation import evaluate
    from cast_core.registry import get_atom_decomposer, get_atom_scorer, get_policy, get_prompt_suite

    if bool(suite) == bool(prompt_file):
        raise click.UsageError("give exactly one of --suite or --prompts")
    prompts = get_prompt_suite(suite) if suite else [p for _, p in read_prompt_file(prompt_file)]
    pol = get_policy(policy)
    if adapter:
        pol.load_adapter(adapter)
    judge, dec = get_atom_scorer(scorer), get_atom_decomposer(decomposer)
    result = evaluate(pol, prompts, judge, dec, images_per_prompt=images_per_prompt, num_steps=steps, seed=seed)
    if grid:
        from cast_core.evaluation import verdict_grid

        verdict_grid(pol, prompts[:6], judge, dec, images_per_prompt=min(images_per_prompt, 6), num_steps=steps, seed=seed).save(grid)
    result.update({"policy": policy, "adapter": adapter, "suite": suite or prompt_file, "steps": steps, "seed": seed})
    if out:
        with open(out, "w") as f:
            json.dump(result, f, indent=2)
    if as_json:
        click.echo(json.dumps(result, indent=2))
        return
    click.echo(f"{policy}{' + ' + adapter if adapter else ''} on {result['suite']}: "
               f"GM {result['gm']:.3f}  AM {result['am']:.3f}  ({result['images']} images)")
    click.echo("  by atom count (GM): " + "  ".join(f"{k}: {v:.3f}" for k, v in result["by_atom_count"].items()))
    click.echo("  by skill (AM):      " + "  ".join(f"{k}: {v:.3f}" for k, v in result["by_skill"].items()))

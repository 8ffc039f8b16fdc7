"""``cast eval``: GenEval 2-style evaluation of a policy (optionally with an adapter)."""

from __future__ import annotations

import hashlib
import json

import click

from cast_core.commands.inputs import policy_opt_option, seed_option
from cast_core.commands.output import Outputs, check_output, emit_json


@click.command("eval")
@click.option("--policy", required=True, help="Policy component.")
@click.option("--adapter", type=click.Path(file_okay=False, exists=True), help="Adapter directory to load.")
@click.option("--suite", help="Registered prompt suite (see `cast plugins`).")
@click.option("--prompts", "prompt_file", type=click.Path(dir_okay=False), help="File with one prompt a line.")
@click.option("--images-per-prompt", "-k", default=4, show_default=True, type=click.IntRange(1, 1000))
@click.option("--steps", default=10, show_default=True, type=click.IntRange(1, 1000), help="Sampling steps.")
@click.option(
    "--seed",
    default="0",
    show_default=True,
    callback=seed_option,  # checked before the policy loads
    help="Noise seed: one integer, 0 or more and below 2**63.",
)
@click.option(
    "--benchmark",
    type=click.Choice(["geneval2"]),
    help="A benchmark's own prompts and atoms: geneval2 reads --data geneval2_data.jsonl (its questions, "
    "its atom counts) and defaults to the soft-tifa judge; the table is GenEval 2's layout.",
)
@click.option("--data", "data_file", type=click.Path(dir_okay=False), help="The benchmark's data file (--benchmark).")
@click.option("--scorer", help="Atom scorer (default: shapes-oracle; soft-tifa with --benchmark geneval2).")
@click.option("--decomposer", default="template", show_default=True, help="Decomposer (not with --benchmark).")
@click.option(
    "--set",
    "sets",
    multiple=True,
    metavar="TABLE.KEY=VALUE",
    help="policy_kwargs. / scorer_kwargs. / decomposer_kwargs.KEY=VALUE (repeatable), e.g. scorer_kwargs.path=DIR.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--out", type=click.Path(dir_okay=False), help="Also write the JSON result here.")
@click.option("--grid", type=click.Path(dir_okay=False), help="Also draw the first prompts' images with verdicts here.")
@click.option(
    "--baseline",
    type=click.Path(dir_okay=False, exists=True),
    help="A previous `cast eval --out` JSON (same prompts, seed, steps, K): report the paired "
    "difference to it, overall (GM) and per skill.",
)
@policy_opt_option
def eval_command(
    policy,
    adapter,
    suite,
    prompt_file,
    images_per_prompt,
    steps,
    seed,
    benchmark,
    data_file,
    scorer,
    decomposer,
    sets,
    as_json,
    out,
    grid,
    baseline,
    policy_opts,
):
    """Sample every prompt K times with the ODE sampler and report Soft-TIFA AM/GM overall,
    by atom count and by skill."""
    from cast_core.commands.inputs import load_adapter_option, policy_kwargs, split_sets
    from cast_core.config import dotted_kwargs
    from cast_core.prompts import read_prompt_file
    from cast_core.evaluation import evaluate, paired_difference, paired_skill_differences
    from cast_core.registry import get_atom_decomposer, get_atom_scorer, get_policy, get_prompt_suite
    from cast_core.run_dir import jsonable_tree

    tables = split_sets(sets, ("policy_kwargs", "scorer_kwargs", "decomposer_kwargs"))
    check_output(out, "--out")  # before the minutes of sampling, not after
    check_output(grid, "--grid", image=True)
    atomicity = None
    if benchmark:
        if suite or prompt_file or not data_file:
            raise click.UsageError(
                f"--benchmark {benchmark} takes its prompts from --data FILE (and no --suite/--prompts)"
            )
        dec = get_atom_decomposer(
            benchmark, data=data_file, **dotted_kwargs(tables["decomposer_kwargs"], "decomposer_kwargs")
        )
        prompts, atomicity = dec.prompts, (lambda p: dec.record(p).atom_count)
        scorer = scorer or "soft-tifa"
    else:
        if bool(suite) == bool(prompt_file):
            raise click.UsageError("give exactly one of --suite or --prompts")
        prompts = get_prompt_suite(suite) if suite else [p for _, p in read_prompt_file(prompt_file)]
        dec = get_atom_decomposer(decomposer, **dotted_kwargs(tables["decomposer_kwargs"], "decomposer_kwargs"))
        scorer = scorer or "shapes-oracle"
    digest = hashlib.sha256("\n".join(prompts).encode()).hexdigest()[:16]
    pol_kwargs = policy_kwargs(policy_opts, tables["policy_kwargs"])
    record = jsonable_tree(
        {
            "policy": policy,
            "policy_kwargs": pol_kwargs,
            "adapter": adapter,
            "suite": suite or prompt_file or f"{benchmark}:{data_file}",
            "steps": steps,
            "seed": seed,
            "prompts_digest": digest,
            "scorer": scorer,
            "scorer_kwargs": dotted_kwargs(tables["scorer_kwargs"], "scorer_kwargs"),
            "decomposer": benchmark or decomposer,
            "decomposer_kwargs": dotted_kwargs(tables["decomposer_kwargs"], "decomposer_kwargs"),
        }
    )
    base = _read_baseline(baseline, record, len(prompts), images_per_prompt) if baseline else None
    pol = get_policy(policy, **pol_kwargs)
    if adapter:
        load_adapter_option(pol, adapter)
    judge = get_atom_scorer(scorer, **dotted_kwargs(tables["scorer_kwargs"], "scorer_kwargs"))
    from cast_core.progress import progress_bar

    with progress_bar("sampling and scoring", len(prompts) * images_per_prompt) as progress:
        result = evaluate(
            pol,
            prompts,
            judge,
            dec,
            images_per_prompt=images_per_prompt,
            num_steps=steps,
            seed=seed,
            progress=progress,
            atomicity=atomicity,
        )
    result.update(record)
    if base is not None:
        result["vs_baseline"] = {
            "file": baseline,
            "gm_difference": paired_difference(base, result),
            "skill_differences": paired_skill_differences(base, result),
        }
    outputs = Outputs()  # a file that cannot be written is saved elsewhere; exit 1 after the report
    printed = emit_json(result, out, as_json, outputs)  # the result is safe on disk before the grid's extra sampling
    if grid:
        from cast_core.evaluation import verdict_grid

        picture = verdict_grid(
            pol, prompts[:6], judge, dec, images_per_prompt=min(images_per_prompt, 6), num_steps=steps, seed=seed
        )
        outputs.save(grid, picture.save)
    if not printed:
        _print_result(result, benchmark, baseline, base)
    outputs.finish()


def _print_result(result: dict, benchmark: str | None, baseline: str | None, base: dict | None) -> None:
    from cast_core.evaluation import difference_line

    policy, adapter = result["policy"], result["adapter"]
    if benchmark == "geneval2":
        _geneval2_table(result)
    click.echo(
        f"{policy}{' + ' + adapter if adapter else ''} on {result['suite']}: "
        f"GM {result['gm']:.3f}  AM {result['am']:.3f}  ({result['images']} images)"
    )
    click.echo("  by atom count (GM): " + "  ".join(f"{k}: {v:.3f}" for k, v in result["by_atom_count"].items()))
    click.echo("  by skill (AM):      " + "  ".join(f"{k}: {v:.3f}" for k, v in result["by_skill"].items()))
    if base is not None:
        vs = result["vs_baseline"]
        click.echo(f"paired difference to {baseline} (same prompts and noise):")
        click.echo("  " + difference_line("GM", vs["gm_difference"]))
        for skill, d in vs["skill_differences"].items():
            click.echo("  " + difference_line(skill, d))


def _geneval2_table(result: dict) -> None:
    """GenEval 2's own layout (soft_tifa_analysis.py): Soft-TIFA AM per skill and GM per
    atomicity, as percentages."""
    skills = ("object", "attribute", "count", "position", "verb")
    click.echo(
        "Soft-TIFA AM by skill (%):  "
        + "  ".join(f"{k} {100 * result['by_skill'][k]:.1f}" if k in result["by_skill"] else f"{k} -" for k in skills)
    )
    click.echo(
        "Soft-TIFA GM by atomicity (%): "
        + "  ".join(
            f"{k}: {100 * v:.1f}" for k, v in sorted(result["by_atom_count"].items(), key=lambda kv: int(kv[0]))
        )
    )


def _read_baseline(path: str, record: dict, n_prompts: int, k: int) -> dict:
    """The baseline JSON, refused early (before any sampling) unless it can be paired with this
    evaluation: a comparison with other prompts or other starting noise has no paired error, and
    one with another judge (scorer, decomposer or their settings) measures the judges, not the
    policy. A baseline written before results recorded their judge is compared with a warning."""
    from cast_core.evaluation import unlike_evaluations

    digest, seed, steps = record["prompts_digest"], record["seed"], record["steps"]
    try:
        with open(path) as f:
            base = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise click.BadParameter(
            f"{path} is not a readable JSON file ({e}); pass a file written by `cast eval --out`",
            param_hint="--baseline",
        ) from None
    if not isinstance(base, dict) or "per_prompt_skill" not in base or "per_prompt_gm" not in base:
        raise click.BadParameter(
            f"{path} has no per_prompt_gm/per_prompt_skill; re-run its evaluation with "
            "`cast eval ... --out FILE` from this version of cast",
            param_hint="--baseline",
        )
    problems = [
        f"{name} {base.get(key)!r} there, {ours!r} here"
        for name, key, ours in (("prompts", "prompts", n_prompts), ("seed", "seed", seed), ("steps", "steps", steps))
        if base.get(key) != ours
    ]
    if base.get("prompts") == n_prompts and base.get("prompts_digest", digest) != digest:
        problems.append("other prompts (prompts_digest differs)")
    if base.get("images") != n_prompts * k:
        problems.append(f"{base.get('images')!r} images there, {n_prompts * k} here (--images-per-prompt {k})")
    if problems:
        raise click.BadParameter(
            f"{path} cannot be paired with this evaluation: {'; '.join(problems)}. "
            "Evaluate with the baseline's suite, --seed, --steps and -k.",
            param_hint="--baseline",
        )
    unlike, unrecorded = unlike_evaluations(base, record)
    if unlike:
        raise click.BadParameter(
            f"{path} was measured differently: {'; '.join(unlike)}. Evaluate with the baseline's "
            "--policy, --scorer, --decomposer and --set values, or re-evaluate the baseline with these",
            param_hint="--baseline",
        )
    if unrecorded:
        click.echo(
            f"warning: {path} does not record its {', '.join(unrecorded)} (written by an older cast); "
            "comparing anyway, so make sure it was judged the same way",
            err=True,
        )
    return base

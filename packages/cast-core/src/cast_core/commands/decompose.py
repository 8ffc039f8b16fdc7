"""``cast decompose``: prompts to Causal Scene Graphs (docs/design.md §3.1 JSON, one object a line)."""

from __future__ import annotations

import json

import click

DEFAULT_DECOMPOSER = "template"


@click.command("decompose")
@click.argument("prompts", nargs=-1)
@click.option(
    "--file", "prompt_file", type=click.Path(dir_okay=False), help="A file with one prompt a line ('#' comments)."
)
@click.option("--decomposer", "-d", default=DEFAULT_DECOMPOSER, show_default=True, help="Registered decomposer name.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON Lines: one scene graph object a prompt.")
@click.option(
    "--stats",
    is_flag=True,
    help="Print only a summary: how each prompt was decomposed (template / llm / prompt-level / refused, "
    "for decomposers that record it), atoms per prompt and atom kinds.",
)
@click.option(
    "--set",
    "sets",
    multiple=True,
    metavar="decomposer_kwargs.KEY=VALUE",
    help="Decomposer factory argument, e.g. decomposer_kwargs.llm_path=MODEL (repeatable).",
)
def decompose_command(
    prompts: tuple[str, ...],
    prompt_file: str | None,
    decomposer: str,
    as_json: bool,
    stats: bool,
    sets: tuple[str, ...],
) -> None:
    """Decompose PROMPTS (and/or --file) into scene graphs of verifiable atoms.

    Every prompt is attempted; failures are reported on stderr with their file and line, and
    the exit code is 1 if any prompt failed.
    """
    import warnings
    from collections import Counter

    from cast_core.config import dotted_kwargs
    from cast_core.prompts import read_prompt_file
    from cast_core.protocols import DecompositionStats
    from cast_core.errors import CastError
    from cast_core.registry import get_atom_decomposer

    items = [(f"argument {i}", p) for i, p in enumerate(prompts, 1)]
    if prompt_file:
        items += read_prompt_file(prompt_file)
    if not items:
        raise click.UsageError("give at least one PROMPT or --file")
    dec = get_atom_decomposer(decomposer, **dotted_kwargs(sets, "decomposer_kwargs"))
    failed = 0
    paths: Counter = Counter()
    kinds: Counter = Counter()
    atoms_per_prompt: list[int] = []
    for where, prompt in items:
        try:
            with warnings.catch_warnings():
                if stats:  # the summary counts the fall-throughs; no warning per prompt
                    warnings.simplefilter("ignore")
                graph = dec.decompose(prompt)
        except CastError as err:
            failed += 1
            paths["refused"] += 1
            if not stats:
                click.echo(f"Error: {where}: {err}", err=True)
            continue
        paths[(dec.path_of(prompt) if isinstance(dec, DecompositionStats) else None) or decomposer] += 1
        kinds.update(a.kind for a in graph.atoms)
        atoms_per_prompt.append(len(graph.atoms))
        if stats:
            continue
        if as_json:
            click.echo(json.dumps(graph.to_dict()))
        else:
            _print_tree(graph)
    if stats:
        _print_stats(len(items), paths, kinds, atoms_per_prompt, as_json)
        return
    if failed:
        raise SystemExit(1)


def _print_stats(n: int, paths, kinds, atoms_per_prompt: list[int], as_json: bool) -> None:
    mean = sum(atoms_per_prompt) / len(atoms_per_prompt) if atoms_per_prompt else 0.0
    summary = {"prompts": n, "paths": dict(paths), "atoms_per_prompt": round(mean, 3), "atom_kinds": dict(kinds)}
    if as_json:
        click.echo(json.dumps(summary))
        return
    click.echo(f"{n} prompts: " + ", ".join(f"{k} {v} ({100 * v / n:.0f}%)" for k, v in paths.most_common()))
    click.echo(
        f"atoms per decomposed prompt: {mean:.2f}; kinds: " + ", ".join(f"{k} {v}" for k, v in kinds.most_common())
    )


def _print_tree(graph) -> None:
    click.echo(graph.prompt)
    for atom in graph.topological_order():
        depth = 1 if not atom.parents else 2
        label = atom.question or f"{atom.kind} {atom.value if atom.value is not None else ''}".strip()
        parents = f"  (needs {', '.join(atom.parents)})" if atom.parents else ""
        click.echo(f"{'  ' * depth}{atom.id} [{atom.kind}] {label}{parents}")

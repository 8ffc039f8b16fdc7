"""``cast decompose``: prompts to Causal Scene Graphs (DESIGN §3.1 JSON, one object a line)."""

from __future__ import annotations

import json

import click

DEFAULT_DECOMPOSER = "template"


@click.command("decompose")
@click.argument("prompts", nargs=-1)
@click.option("--file", "prompt_file", type=click.Path(dir_okay=False), help="A file with one prompt a line ('#' comments).")
@click.option("--decomposer", "-d", default=DEFAULT_DECOMPOSER, show_default=True, help="Registered decomposer name.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON Lines: one scene graph object a prompt.")
def decompose_command(prompts: tuple[str, ...], prompt_file: str | None, decomposer: str, as_json: bool) -> None:
    """Decompose PROMPTS (and/or --file) into scene graphs of verifiable atoms.

    Every prompt is attempted; failures are reported on stderr with their file and line, and
    the exit code is 1 if any prompt failed.
    """
    from cast_core.commands.inputs import read_prompt_file
    from cast_core.errors import CastError
    from cast_core.registry import get_atom_decomposer

    items = [(f"argument {i}", p) for i, p in enumerate(prompts, 1)]
    if prompt_file:
        items += read_prompt_file(prompt_file)
    if not items:
        raise click.UsageError("give at least one PROMPT or --file")
    dec = get_atom_decomposer(decomposer)
    failed = 0
    for where, prompt in items:
        try:
            graph = dec.decompose(prompt)
        except CastError as err:
            failed += 1
            click.echo(f"Error: {where}: {err}", err=True)
            continue
        if as_json:
            click.echo(json.dumps(graph.to_dict()))
        else:
            _print_tree(graph)
    if failed:
        raise SystemExit(1)


def _print_tree(graph) -> None:
    click.echo(graph.prompt)
    for atom in graph.topological_order():
        depth = 1 if not atom.parents else 2
        label = atom.question or f"{atom.kind} {atom.value if atom.value is not None else ''}".strip()
        parents = f"  (needs {', '.join(atom.parents)})" if atom.parents else ""
        click.echo(f"{'  ' * depth}{atom.id} [{atom.kind}] {label}{parents}")

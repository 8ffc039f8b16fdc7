"""``cast shapes ...``: look inside the shapes world from the command line.

``render`` draws world prompts to PNG files (ground-truth images to try ``cast score`` on);
``suites`` lists the fixed prompt suites; ``suite NAME`` prints one. Command bodies import the
world lazily so ``cast --help`` stays light.
"""

from __future__ import annotations

from pathlib import Path

import click


@click.group("shapes")
def shapes_group() -> None:
    """The built-in shapes world: render prompts, list prompt suites."""


@shapes_group.command("render")
@click.argument("prompts", nargs=-1, required=True)
@click.option("--out", "-o", required=True, type=click.Path(), help="Output PNG (one prompt) or directory.")
@click.option("--seed", default=0, show_default=True, help="Layout seed (each prompt uses seed, seed+1, ...).")
def render_command(prompts: tuple[str, ...], out: str, seed: int) -> None:
    """Render world PROMPTS (e.g. "two red circles left of a blue square") as 32x32 PNGs."""
    from PIL import Image

    from cast_shapes.grammar import PromptError, parse_prompt
    from cast_shapes.render import render
    from cast_shapes.world import LayoutError, sample_layout

    target = Path(out)
    many = len(prompts) > 1 or target.suffix.lower() != ".png"
    if many:
        target.mkdir(parents=True, exist_ok=True)
    for i, prompt in enumerate(prompts):
        try:
            layout = sample_layout(parse_prompt(prompt), seed + i)
        except (PromptError, LayoutError) as err:
            raise click.ClickException(str(err)) from None
        path = target / f"{i:03d}-{'-'.join(prompt.lower().replace(',', '').split())}.png" if many else target
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(render(layout).transpose(1, 2, 0)).save(path)
        click.echo(str(path))


@shapes_group.command("suites")
def suites_command() -> None:
    """List the prompt suites with their sizes and digests."""
    from cast_shapes.suites import SUITE_NAMES, suite, suite_digest

    for name in SUITE_NAMES:
        click.echo(f"{name:14s} {len(suite(name)):4d} prompts  sha256 {suite_digest(name)[:12]}")


@shapes_group.command("suite")
@click.argument("name")
def suite_command(name: str) -> None:
    """Print the prompts of suite NAME, one a line (feed to --file / --prompts)."""
    from cast_shapes.suites import SUITE_NAMES, suite

    if name not in SUITE_NAMES:
        raise click.ClickException(f"unknown suite {name!r}; suites: {', '.join(SUITE_NAMES)}")
    for prompt in suite(name):
        click.echo(prompt)


@shapes_group.command("pretrain")
@click.option("--workdir", type=click.Path(file_okay=False), help="Resumable state (default ~/.cache/cast/shapes-pretrain).")
@click.option("--steps", default=None, type=int, help="Train until this many steps in total (default: 20000).")
@click.option("--threads", type=int, help="torch threads.")
@click.option("--export", "export_path", type=click.Path(dir_okay=False), help="Write the EMA weights here afterwards.")
def pretrain_command(workdir, steps, threads, export_path):
    """Pretrain the shapes network from scratch (resumable: run again to continue).

    The shipped weights were produced by this command with the default settings and seed 0;
    see the package's MODEL_CARD.md for the step count and wall time.
    """
    from cast_shapes.pretrain import main

    argv = []
    if workdir:
        argv += ["--workdir", workdir]
    if steps is not None:
        argv += ["--steps", str(steps)]
    if threads:
        argv += ["--threads", str(threads)]
    if export_path:
        argv += ["--export", export_path]
    main(argv)

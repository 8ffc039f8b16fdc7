"""``cast score``: judge image files against a prompt, atom by atom."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Protocol, runtime_checkable

import click

DEFAULT_SCORER = "shapes-oracle"
DEFAULT_DECOMPOSER = "template"


@runtime_checkable
class NamesImageCaveats(Protocol):
    """A scorer that can tell when an image file is not what it judges exactly (shapes-oracle:
    an exact shapes-world render). Only ``cast score`` asks, for files a user brought; training
    and ``cast eval`` score the policy's own images and are not asked."""

    def image_caveat(self, image) -> str | None: ...


@click.command("score")
@click.argument("images", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--prompt", "-p", required=True, help="The prompt the images should show.")
@click.option("--scorer", "-s", default=DEFAULT_SCORER, show_default=True, help="Registered atom scorer.")
@click.option("--decomposer", "-d", default=DEFAULT_DECOMPOSER, show_default=True, help="Registered decomposer.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per image (JSON Lines).")
@click.option(
    "--heatmaps", "heatmap_dir", type=click.Path(file_okay=False), help="Write per-atom heatmap overlays here."
)
@click.option(
    "--set",
    "sets",
    multiple=True,
    metavar="TABLE.KEY=VALUE",
    help="scorer_kwargs.KEY=VALUE or decomposer_kwargs.KEY=VALUE, the training config's spelling "
    "(e.g. scorer_kwargs.path=DIR; repeatable).",
)
def score_command(images, prompt, scorer, decomposer, as_json, heatmap_dir, sets) -> None:
    """Score IMAGES against --prompt: per-atom scores, their AM (atom level) and GM (prompt level)."""
    import torch

    from cast_core.aggregate import arithmetic_mean, geometric_mean
    from cast_core.commands.inputs import load_image, split_sets
    from cast_core.config import dotted_kwargs
    from cast_core.registry import get_atom_decomposer, get_atom_scorer

    tables = split_sets(sets, ("scorer_kwargs", "decomposer_kwargs"))
    graph = get_atom_decomposer(
        decomposer, **dotted_kwargs(tables["decomposer_kwargs"], "decomposer_kwargs")
    ).decompose(prompt)
    judge = get_atom_scorer(scorer, **dotted_kwargs(tables["scorer_kwargs"], "scorer_kwargs"))
    want_maps = heatmap_dir is not None
    written: set[str] = set()  # a.png and b/a.png both give maps: the second must not overwrite the first
    caveat_told = not isinstance(judge, NamesImageCaveats)
    for path in images:
        image = load_image(path)
        if not caveat_told and (caveat := judge.image_caveat(image)):
            click.echo(f"warning: {path}: {caveat}", err=True)  # once a run: the first such file names the problem
            caveat_told = True
        out = judge.score(image[None], [graph], heatmaps=want_maps)
        scores = [float(s) for s in out.scores[0]]
        record = {
            "image": str(path),
            "prompt": prompt,
            "atoms": [
                {"id": a.id, "kind": a.kind, "question": a.question, "score": round(s, 6)}
                for a, s in zip(graph.atoms, scores)
            ],
            "am": round(arithmetic_mean(scores), 6),
            "gm": round(geometric_mean(scores), 6),
        }
        if want_maps:
            from cast_core.viz import heatmap_grid, save_picture

            target = _unique(Path(heatmap_dir), Path(path).stem, written)
            save_picture(heatmap_grid(image, out.heatmaps[0], graph, torch.tensor(scores)), target)
            record["heatmaps"] = str(target)
        if as_json:
            click.echo(json.dumps(record))
        else:
            _print_record(record)


def _unique(directory: Path, stem: str, written: set[str]) -> Path:
    name, n = f"{stem}.heatmaps.png", 1
    while name in written:
        n += 1
        name = f"{stem}-{n}.heatmaps.png"
    written.add(name)
    return directory / name


def _print_record(record: dict) -> None:
    click.echo(f"{record['image']}: GM {record['gm']:.3f}  AM {record['am']:.3f}")
    for atom in record["atoms"]:
        mark = "PASS" if atom["score"] >= 0.5 else "FAIL"
        click.echo(f"  {mark} {atom['score']:.3f}  {atom['id']} [{atom['kind']}] {atom['question'] or ''}")
    if "heatmaps" in record:
        click.echo(f"  heatmaps: {record['heatmaps']}")

"""The learned shapes judge measured against the oracle (issue 26): answer accuracy per atom kind,
calibration of the soft score, and where its heatmaps point, for each choice in soft-tifa's
heatmap recipe (layer band, sink removal, baseline division) against a uniform map.

Every held-out scene (``heldout`` split: compositions the judge never saw) is asked its own
prompt's atoms and a distractor prompt's atoms, through cast-rewards' ``soft-tifa`` unchanged.
The oracle's verdicts are the truth; the oracle's masks (the pixels of the objects each atom is
about) are where a map should point.

* accuracy: the soft score >= 0.5 agrees with the oracle's verdict (count: the number is right);
* calibration: truth frequency per soft-score decile, and the expected calibration error;
* pointing, on atoms whose mask is not empty: the share of heatmap mass inside the mask, and the
  pointing game (the map's peak pixel inside the mask). A uniform map's share is the mask's area;
  the ceiling row is the oracle's mask itself pooled to the judge's 4 × 4 token grid.

Run: ``python benchmarks/shapes_judge.py --judge DIR [--scenes N] [--json FILE] [--figure PNG]``;
the figure puts the oracle's mask beside the judge's map for a few atoms of four scenes.
``--curve CURVE_JSON PNG`` only draws a training curve (benchmarks/results/shapes-judge-training.json).
"""

from __future__ import annotations

import argparse
import json
import math
import random

import numpy as np
import torch

RECIPES = {  # soft-tifa keyword arguments: the recipe choice each row changes
    "default (layers 0.5-0.85, sinks, baseline)": {},
    "no sink removal": {"sink_factor": math.inf},
    "no baseline division": {"baseline_question": None},
    "all layers": {"heatmap_layers": (0.0, 1.0)},
    # the judge's text model has 4 layers: one row per layer (the default band is layers 2-3)
    **{f"layer {i} only": {"heatmap_layers": (i / 3, i / 3)} for i in range(4)},
}


def scenes(n: int, seed: int = 4321):
    """``(image float [3, H, W], [(graph, own)], layout)`` for ``n`` held-out scenes."""
    from cast_shapes.grammar import scene_to_graph
    from cast_shapes.render import render
    from cast_shapes.suites import sample_scene_in_split
    from cast_shapes.world import sample_layout

    rng = random.Random(seed)
    for _ in range(n):
        scene = sample_scene_in_split(rng, "heldout", rng.randint(4, 8))
        layout = sample_layout(scene, rng)
        distractor = sample_scene_in_split(rng, "heldout")
        yield (
            torch.from_numpy(render(layout)).float() / 255,
            [(scene_to_graph(scene), True), (scene_to_graph(distractor), False)],
            layout,
        )


def oracle(graph, layout):
    """Per atom: (truth, mask [H, W] bool)."""
    from cast_shapes.judge_data import atom_mask
    from cast_shapes.render import object_masks
    from cast_shapes.semantics import detections_from_layout, evaluate

    masks = object_masks(layout)
    return [
        (r.score >= 1 - 1e-9 if atom.kind == "count" else r.verdict, atom_mask(r, masks))
        for atom, r in zip(graph.atoms, evaluate(graph, detections_from_layout(layout)))
    ]


def measure(judge: str, n_scenes: int) -> dict:
    from transformers import AutoProcessor, Qwen3VLForConditionalGeneration

    from cast_rewards.soft_tifa import SoftTifaScorer

    # loaded once: the recipe rows differ only in how the same attention becomes a map
    model = Qwen3VLForConditionalGeneration.from_pretrained(judge, dtype=torch.float32)
    processor = AutoProcessor.from_pretrained(judge)
    data = list(scenes(n_scenes))
    truth = [[oracle(g, layout) for g, _ in graphs] for _, graphs, layout in data]
    result: dict = {
        "judge": judge,
        "scenes": n_scenes,
        "recipes": {},
        "oracle_on_token_grid": _oracle_grid(data, truth),
    }
    for name, kwargs in RECIPES.items():
        scorer = SoftTifaScorer(model=model, processor=processor, device="cpu", **kwargs)
        acc: dict[str, list[bool]] = {}
        calib: list[tuple[float, bool]] = []
        inside: dict[str, list[float]] = {}
        hit: dict[str, list[bool]] = {}
        uniform: dict[str, list[float]] = {}
        for (image, graphs, _), oracles in zip(data, truth):
            for (graph, own), atoms in zip(graphs, oracles):
                out = scorer.score(image[None], [graph], heatmaps=True)
                for atom, s, h, (t, mask) in zip(graph.atoms, out.scores[0].tolist(), out.heatmaps[0], atoms):
                    acc.setdefault(atom.kind, []).append((s >= 0.5) == t)
                    calib.append((s, t))
                    if own and mask.any():
                        h = h.clamp_min(0).numpy()
                        inside.setdefault(atom.kind, []).append(float((h * mask).sum() / max(h.sum(), 1e-12)))
                        peak = np.unravel_index(int(h.argmax()), h.shape)
                        hit.setdefault(atom.kind, []).append(bool(mask[peak]))
                        uniform.setdefault(atom.kind, []).append(float(mask.mean()))
        bins = []
        for b in range(10):
            part = [(s, t) for s, t in calib if min(int(s * 10), 9) == b]  # deciles; a score of 1 is in the last
            if part:
                bins.append(
                    {
                        "bin": b,
                        "n": len(part),
                        "mean_score": float(np.mean([s for s, _ in part])),
                        "truth_rate": float(np.mean([t for _, t in part])),
                    }
                )
        ece = sum(x["n"] * abs(x["mean_score"] - x["truth_rate"]) for x in bins) / max(1, len(calib))
        result["recipes"][name] = {
            "accuracy": {k: float(np.mean(v)) for k, v in sorted(acc.items())},
            "calibration": bins,
            "ece": ece,
            "mass_inside": {k: float(np.mean(v)) for k, v in sorted(inside.items())},
            "pointing_game": {k: float(np.mean(v)) for k, v in sorted(hit.items())},
            "uniform_mass_inside": {k: float(np.mean(v)) for k, v in sorted(uniform.items())},
        }
    return result


def _oracle_grid(data, truth, grid: int = 4) -> dict:
    """The ceiling for a judge that points through a ``grid`` × ``grid`` token grid: the oracle's
    own mask average-pooled to that grid, then brought to pixels the way soft-tifa brings the
    judge's token maps (bilinear, corners not aligned), and scored like the judge's maps."""
    inside: dict[str, list[float]] = {}
    hit: dict[str, list[bool]] = {}
    for (image, graphs, _), oracles in zip(data, truth):
        graph, atoms = graphs[0][0], oracles[0]  # own prompt: the atoms whose masks are pointed at
        for atom, (_, mask) in zip(graph.atoms, atoms):
            if mask.any():
                cells = torch.nn.functional.avg_pool2d(
                    torch.from_numpy(mask[None, None].astype(np.float32)), mask.shape[0] // grid
                )
                h = torch.nn.functional.interpolate(cells, size=mask.shape, mode="bilinear", align_corners=False)[
                    0, 0
                ].numpy()
                inside.setdefault(atom.kind, []).append(float((h * mask).sum() / h.sum()))
                hit.setdefault(atom.kind, []).append(bool(mask[np.unravel_index(int(h.argmax()), h.shape)]))
    return {
        "mass_inside": {k: float(np.mean(v)) for k, v in sorted(inside.items())},
        "pointing_game": {k: float(np.mean(v)) for k, v in sorted(hit.items())},
    }


def figure(judge: str, path: str, n_scenes: int = 4, scale: int = 4) -> None:
    """Rows of held-out scenes; per own object/attribute/relation atom, the oracle's mask beside
    the judge's map (default recipe), under the image, with the atom's question and score."""
    from PIL import Image, ImageDraw

    from cast_rewards.soft_tifa import SoftTifaScorer

    scorer = SoftTifaScorer(path=judge, device="cpu", torch_dtype=torch.float32)
    rows = []
    for image, graphs, layout in scenes(n_scenes, seed=99):
        graph = graphs[0][0]
        out = scorer.score(image[None], [graph], heatmaps=True)
        atoms = [
            (a, s, h, m)
            for a, s, h, (_, m) in zip(graph.atoms, out.scores[0].tolist(), out.heatmaps[0], oracle(graph, layout))
            if m.any() and a.kind != "count"
        ][:4]
        rows.append((image, graph.prompt, atoms))
    cell = 32 * scale
    width = cell * (1 + 2 * max(len(a) for _, _, a in rows)) + 8
    canvas = Image.new("RGB", (width, len(rows) * (cell + 30)), "white")
    d = ImageDraw.Draw(canvas)

    def tile(arr):
        return Image.fromarray(arr).resize((cell, cell), Image.NEAREST)

    for r, (image, prompt, atoms) in enumerate(rows):
        y = r * (cell + 30)
        d.text((2, y + 2), prompt[:110], fill=(0, 0, 0))
        canvas.paste(tile((image.permute(1, 2, 0).numpy() * 255).astype(np.uint8)), (0, y + 14))
        for k, (atom, score, heat, mask) in enumerate(atoms):
            x = cell * (1 + 2 * k) + 4
            canvas.paste(tile((mask * 255).astype(np.uint8)), (x, y + 14))
            h = heat.clamp_min(0).numpy()
            canvas.paste(tile((h / max(h.max(), 1e-12) * 255).astype(np.uint8)), (x + cell, y + 14))
            d.text((x, y + 14 + cell), f"{atom.id} {atom.kind} {score:.2f}", fill=(0, 0, 160))
    canvas.save(path)


def curve_figure(curve: list[dict], path: str, prior: dict | None = None, decay_from: int | None = None) -> None:
    """Held-out accuracy per atom kind against training step, one line per kind, with the 0.9
    target, (dashed) each kind's always-the-commonest-answer prior and where the learning rate
    began to decay."""
    from PIL import Image, ImageDraw

    colours = {"object": (200, 40, 40), "attribute": (40, 90, 200), "relation": (40, 150, 60), "count": (150, 60, 180)}
    W, H, left, bottom, top = 640, 360, 50, 40, 20
    img = Image.new("RGB", (W, H), "white")
    d = ImageDraw.Draw(img)
    x_max = max(c["step"] for c in curve)
    sx = lambda x: left + x / x_max * (W - left - 120)  # noqa: E731
    sy = lambda y: top + (1 - y) * (H - top - bottom)  # noqa: E731
    for y in (0.0, 0.25, 0.5, 0.75, 0.9, 1.0):
        d.line([(left, sy(y)), (W - 120, sy(y))], fill=(150, 150, 150) if y == 0.9 else (230, 230, 230))
        d.text((8, sy(y) - 6), f"{y:.2f}", fill=(0, 0, 0))
    for x in range(0, x_max + 1, 5000):
        d.text((sx(x) - 12, H - bottom + 6), f"{x}", fill=(0, 0, 0))
    d.text((W // 2 - 60, H - 18), "training step (64 examples each)", fill=(0, 0, 0))
    if decay_from:
        d.line([(sx(decay_from), top), (sx(decay_from), H - bottom)], fill=(120, 120, 120))
        d.text((sx(decay_from) + 3, H - bottom - 14), "lr decay", fill=(90, 90, 90))
    for k, (kind, colour) in enumerate(colours.items()):
        pts = [(sx(c["step"]), sy(c[kind])) for c in curve if kind in c]
        d.line(pts, fill=colour, width=2)
        if prior and kind in prior:
            for x in range(left, W - 120, 12):
                d.line([(x, sy(prior[kind])), (x + 6, sy(prior[kind]))], fill=colour)
        d.text((W - 110, top + 16 * k), f"{kind} {curve[-1][kind]:.3f}", fill=colour)
    d.text((W - 110, top + 70), "dashed: prior", fill=(0, 0, 0))
    img.save(path)


def table(result: dict) -> str:
    lines = [f"judge {result['judge']}, {result['scenes']} held-out scenes (own + distractor prompts)"]
    first = next(iter(result["recipes"].values()))
    lines.append(
        "answer accuracy: "
        + "  ".join(f"{k} {v:.3f}" for k, v in first["accuracy"].items())
        + f"  (ECE {first['ece']:.3f})"
    )
    kinds = list(first["mass_inside"])
    lines.append(f"{'heatmap recipe':44s} " + " ".join(f"{k + ' in/peak':>22s}" for k in kinds))
    lines.append(
        f"{'uniform map':44s} " + " ".join(f"{first['uniform_mass_inside'][k]:>13.3f} {'-':>8s}" for k in kinds)
    )
    ceiling = result["oracle_on_token_grid"]
    lines.append(
        f"{'oracle mask pooled to the 4x4 token grid':44s} "
        + " ".join(f"{ceiling['mass_inside'][k]:>13.3f} {ceiling['pointing_game'][k]:>8.3f}" for k in kinds)
    )
    for name, r in result["recipes"].items():
        lines.append(
            f"{name:44s} " + " ".join(f"{r['mass_inside'][k]:>13.3f} {r['pointing_game'][k]:>8.3f}" for k in kinds)
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--judge", help="the exported judge directory (cast shapes train-judge --export)")
    ap.add_argument("--scenes", type=int, default=200)
    ap.add_argument("--json", help="write the result here")
    ap.add_argument("--figure", help="draw oracle masks beside the judge's maps here (PNG)")
    ap.add_argument(
        "--curve",
        nargs=2,
        metavar=("CURVE_JSON", "PNG"),
        help="only draw a training curve ({'curve': [{step, kind: accuracy}], 'prior': {...}}) and exit",
    )
    args = ap.parse_args()
    if args.curve:
        with open(args.curve[0]) as f:
            data = json.load(f)
        curve_figure(data["curve"], args.curve[1], data.get("prior"), data.get("decay_from"))
        return
    if not args.judge:
        ap.error("--judge DIR is required (the exported judge directory)")
    result = measure(args.judge, args.scenes)
    print(table(result))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    if args.figure:
        figure(args.judge, args.figure)


if __name__ == "__main__":
    main()

"""docs/figures/rewards-heatmaps.png: what the two judges' heatmaps look like on one shapes-world
scene — the shapes oracle's exact object masks beside the soft-tifa maps of the *tiny random*
Qwen3-VL. The tiny judge has random weights, so its maps show the mechanics (one map per atom,
on the image grid, peak 1) and not where a trained judge would look.

Run: ``python docs/figures/make_rewards_figure.py`` after ``make install`` (seconds).
"""

from pathlib import Path

import torch
from PIL import Image, ImageDraw


def main() -> None:
    from cast_core.viz import heatmap_grid
    from cast_rewards.soft_tifa import SoftTifaScorer
    from cast_rewards.template import TemplateDecomposer
    from cast_rewards.tiny_vlm import tiny_qwen3_vl
    from cast_shapes.grammar import parse_prompt
    from cast_shapes.oracle import ShapesOracleScorer
    from cast_shapes.render import render
    from cast_shapes.world import sample_layout

    prompt = "two red circles left of a blue square"
    image = torch.from_numpy(render(sample_layout(parse_prompt(prompt), 0))).float() / 255.0
    graph = TemplateDecomposer().decompose(prompt)
    model, processor = tiny_qwen3_vl(max_pixels=64 * 64)
    rows = []
    for name, judge in (
        ("shapes-oracle (exact masks)", ShapesOracleScorer()),
        (
            "soft-tifa, tiny random Qwen3-VL (mechanics only)",
            SoftTifaScorer(None, model=model, processor=processor, device="cpu"),
        ),
    ):
        out = judge.score(image[None], [graph], heatmaps=True)
        grid = heatmap_grid(image, out.heatmaps[0], graph, out.scores[0])
        label = Image.new("RGB", (grid.width, 18), "white")
        ImageDraw.Draw(label).text((4, 3), name, fill="black")
        rows += [label, grid]
    canvas = Image.new("RGB", (max(r.width for r in rows), sum(r.height for r in rows)), "white")
    y = 0
    for r in rows:
        canvas.paste(r, (0, y))
        y += r.height
    target = Path(__file__).with_name("rewards-heatmaps.png")
    canvas.save(target)
    print(target)


if __name__ == "__main__":
    main()

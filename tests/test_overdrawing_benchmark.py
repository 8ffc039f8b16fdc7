"""benchmarks/overdrawing.py counts what it says: drawn, unclaimed and missing objects and count
errors, checked on ground-truth renders of known scenes (the oracle perceives them exactly)."""

from __future__ import annotations


import pytest
import torch
from conftest import load_benchmark


def load_script():
    return load_benchmark("overdrawing")


def test_counts_on_renders_of_known_scenes(monkeypatch):
    from cast_shapes.grammar import parse_prompt
    from cast_shapes.render import render_float
    from cast_shapes.world import sample_layout

    # what the "policy" draws for each prompt it is asked for
    drawn = {
        "a red circle": "a red circle and a blue square",  # one object no atom asks for
        "two red circles": "a red circle",  # one too few
        "a red circle and a green triangle": "a red circle",  # the triangle missing
        "a blue square": "three blue squares",  # two too many
        "three green triangles": "two green triangles and a blue triangle",  # one in the wrong colour
    }

    def fake_images(policy, prompts, *, num_steps, generator):
        return torch.stack(
            [torch.from_numpy(render_float(sample_layout(parse_prompt(drawn[p]), seed=0))) for p in prompts]
        )

    monkeypatch.setattr("cast_core.evaluation.ode_images", fake_images)
    row = load_script().count_objects(None, list(drawn), images_per_prompt=2, num_steps=1, seed=0, batch_size=3)
    assert row["images"] == 10
    assert row["objects_per_image"] == pytest.approx((2 + 1 + 1 + 3 + 3) / 5)
    assert row["unclaimed_per_image"] == pytest.approx(1 / 5)
    assert row["missing_entity_share"] == pytest.approx(round(1 / 6, 3))  # 6 entities per 5 images, one missing
    # count atoms per image: 1 + 1 + 2 (the triangle's count atom: 0 drawn, asked 1) + 1 + 1
    assert row["count_error_share"] == {
        "-3": 0.0,
        "-2": 0.0,
        "-1": round(2 / 6, 3),
        "0": 0.5,
        "1": 0.0,
        "2": round(1 / 6, 3),
        "3": 0.0,
    }
    # coloured entities drawn: 1 + 1 + 1 (the green triangle is missing) + 1 + 1, with 1 + 1 + 1 + 3 + 3
    # members; only the blue triangle is off-colour
    assert row["offcolour_member_share"] == pytest.approx(round(1 / 9, 3))
    assert row["offcolour_entity_share"] == pytest.approx(1 / 5)

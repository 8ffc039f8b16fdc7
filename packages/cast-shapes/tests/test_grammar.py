"""Prompts and scene graphs of the world's grammar."""

import random
import re

import pytest

from cast_core.scene_graph import SceneGraph
from cast_shapes.grammar import (
    MAX_ATOMS,
    MIN_ATOMS,
    PromptError,
    graph_for_prompt,
    parse_prompt,
    prompt_for,
    questions,
    sample_scene,
    scene_to_graph,
    structures,
)
from cast_core.testing.contract import DESIGN_EXAMPLE, DESIGN_QUESTIONS
from cast_shapes.world import ObjectSpec, Relation, Scene


def test_design_example_gives_exactly_the_design_json_plus_questions():
    scene = Scene((ObjectSpec("circle", "red", 2), ObjectSpec("square", "blue", 1)), (Relation(0, "left of", 1),))
    assert prompt_for(scene) == DESIGN_EXAMPLE["prompt"]
    data = scene_to_graph(scene).to_dict()
    assert [a.pop("question") for a in data["atoms"]] == DESIGN_QUESTIONS
    assert data == DESIGN_EXAMPLE
    assert graph_for_prompt(DESIGN_EXAMPLE["prompt"]) == scene_to_graph(scene)
    g = SceneGraph.from_dict(DESIGN_EXAMPLE)
    assert g.to_dict() == DESIGN_EXAMPLE


@pytest.mark.parametrize(
    "scene, prompt",
    [
        (Scene((ObjectSpec("triangle", "green"),)), "a green triangle"),
        (
            Scene((ObjectSpec("square", "yellow", 3), ObjectSpec("circle", "purple"))),
            "three yellow squares and a purple circle",
        ),
        (
            Scene((ObjectSpec("circle", "red"), ObjectSpec("triangle", "blue", 2)), (Relation(0, "above", 1),)),
            "a red circle above two blue triangles",
        ),
        (Scene((ObjectSpec("circle", "orange"),)), "an orange circle"),
        (Scene((ObjectSpec("square", None, 4),)), "four squares"),
        (
            Scene((ObjectSpec("circle"), ObjectSpec("square"), ObjectSpec("triangle"))),
            "a circle, a square and a triangle",
        ),
        (
            Scene((ObjectSpec("circle"), ObjectSpec("square"), ObjectSpec("triangle")), (Relation(0, "below", 1),)),
            "a circle below a square and a triangle",
        ),
        (
            Scene((ObjectSpec("circle"), ObjectSpec("square"), ObjectSpec("triangle")), (Relation(1, "right of", 2),)),
            "a circle and a square right of a triangle",
        ),
        (
            Scene(
                (ObjectSpec("circle", "red"), ObjectSpec("square"), ObjectSpec("circle", "blue", 2)),
                (Relation(0, "left of", 1), Relation(1, "above", 2)),
            ),
            "a red circle left of a square above two blue circles",
        ),
    ],
)
def test_prompt_wording_and_parsing(scene, prompt):
    assert prompt_for(scene) == prompt
    assert parse_prompt(prompt) == scene
    assert parse_prompt(prompt.upper().replace(" ", "  ") + ".") == scene


def test_questions_follow_geneval2_templates():
    q = questions(parse_prompt("a green triangle below three circles"))
    assert q == [
        "Are there any triangles in the image?",
        "How many triangles are in the image?",
        "Is the triangle green?",
        "Are there any circles in the image?",
        "How many circles are in the image?",
        "Is the triangle below the circles?",
    ]


def test_chain_relations_attach_to_the_entity_before():
    g = graph_for_prompt("a circle left of two squares below a red triangle")
    rels = [(a.entity, a.value, a.other, a.parents) for a in g.atoms if a.kind == "relation"]
    assert rels == [("e1", "left of", "e2", ("a1", "a3")), ("e2", "below", "e3", ("a3", "a5"))]


@pytest.mark.parametrize(
    "text, span",
    [
        ("a pink circle", "pink circle"),
        ("two circle", "circle"),
        ("a circles", "circles"),
        ("a circle next to a square", "next to a"),
        ("a circle and", "(end of prompt)"),
        ("circle", "circle"),
        ("a circle; a square", ";"),
    ],
)
def test_parse_errors_name_the_span(text, span):
    with pytest.raises(PromptError, match=re.escape(repr(span))):
        parse_prompt(text)


def test_atom_counts_cover_two_to_eight():
    assert [len(structures(k)) > 0 for k in range(MIN_ATOMS, MAX_ATOMS + 1)] == [True] * 7
    assert structures(1) == [] and structures(9) == []
    rng = random.Random(0)
    for k in range(MIN_ATOMS, MAX_ATOMS + 1):
        for _ in range(40):
            scene = sample_scene(rng, k)
            g = scene_to_graph(scene)
            assert len(g.atoms) == k == scene.atom_count
            assert not scene.problems()
            kinds = [a.kind for a in g.atoms]
            assert kinds.count("object") == kinds.count("count") == len(scene.entities)
    with pytest.raises(ValueError, match="2..8"):
        sample_scene(rng, 9)


def test_round_trip_scene_prompt_graph():
    rng = random.Random(1)
    for _ in range(300):
        scene = sample_scene(rng)
        prompt = prompt_for(scene)
        assert parse_prompt(prompt) == scene
        g = scene_to_graph(scene)
        assert g.prompt == prompt and SceneGraph.from_json(g.to_json()) == g
        assert all(a.question for a in g.atoms)
        assert [e.id for e in g.entities] == [f"e{i + 1}" for i in range(len(scene.entities))]
        assert [a.id for a in g.atoms] == [f"a{i + 1}" for i in range(len(g.atoms))]
        first_rel = next((i for i, a in enumerate(g.atoms) if a.kind == "relation"), len(g.atoms))
        assert all(a.kind == "relation" for a in g.atoms[first_rel:])


def test_sampler_is_seeded():
    a = [prompt_for(sample_scene(random.Random(5))) for _ in range(3)]
    assert len(set(a)) == 1
    assert len({prompt_for(sample_scene(random.Random(s))) for s in range(30)}) > 20

"""The learned judge's examples: every answer is the world's truth, masks cover the atom's
objects, scenes stay in their split, and the stream is reproducible."""

import itertools
import random

import numpy as np

from cast_shapes.grammar import parse_prompt, scene_to_graph
from cast_shapes.judge_data import ANSWERS, NUMBER_ANSWERS, example_stream, heldout_examples, scene_examples
from cast_shapes.render import object_masks
from cast_shapes.suites import is_heldout
from cast_shapes.world import sample_layout


def test_own_questions_are_true_and_counts_are_the_prompt_s():
    rng = random.Random(5)
    for _ in range(40):
        examples = scene_examples(rng, "train", rng.randint(2, 8))
        own = [e for e in examples if e.own]
        graph = scene_to_graph(parse_prompt(own[0].prompt))
        assert [e.question for e in own] == [a.question for a in graph.atoms]
        for e, atom in zip(own, graph.atoms):
            want = NUMBER_ANSWERS[atom.value] if atom.kind == "count" else "Yes"
            assert e.answer == want, (e.prompt, e.question, e.answer)


def test_distractor_questions_have_both_answers_and_all_answers_are_known():
    ex = list(itertools.islice(example_stream(0), 3000))
    assert {e.answer for e in ex} <= set(ANSWERS)
    for kind in ("object", "attribute", "relation"):
        answers = {e.answer for e in ex if not e.own and e.kind == kind}
        assert answers == {"Yes", "No"}, (kind, answers)
    assert "Zero" in {e.answer for e in ex if e.kind == "count"}


def test_masks_are_the_entity_s_objects():
    rng = random.Random(2)
    examples = scene_examples(rng, "train", 6)
    # replay the same draw to get the layout back
    rng2 = random.Random(2)
    from cast_shapes.suites import sample_scene_in_split

    scene = sample_scene_in_split(rng2, "train", 6)
    layout = sample_layout(scene, rng2)
    masks = object_masks(layout).astype(bool)
    own_objects = [e for e in examples if e.own and e.kind == "object"]
    for k, e in enumerate(own_objects):
        members = [i for i, p in enumerate(layout) if p.entity == k]
        assert np.array_equal(e.mask, np.any(masks[members], axis=0))
    assert all(e.mask.any() for e in own_objects)


def test_splits_and_reproducibility():
    train = list(itertools.islice(example_stream(3), 500))
    assert not any(is_heldout(e.prompt) for e in train)
    held = heldout_examples(30)
    assert all(is_heldout(e.prompt) for e in held)
    again = heldout_examples(30)
    assert [(e.prompt, e.question, e.answer) for e in held] == [(e.prompt, e.question, e.answer) for e in again]

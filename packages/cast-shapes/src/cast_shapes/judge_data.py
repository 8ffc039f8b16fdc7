"""Training and test examples for the learned shapes judge (issue 26): an image of the world, one
atom's question, the oracle's answer and the pixels the atom is about.

Why the oracle: the world's renderer and :func:`cast_shapes.semantics.ground_truth` give the
exact verdict of every atom on every layout, so a judge trained on these examples learns the
same questions Soft-TIFA asks a real VLM, with answers that are never wrong, and its heatmaps can
be scored against exact masks.

Each scene contributes its own graph's questions (answers mostly "Yes") and the questions of a
second, independent scene's graph asked about the same image (answers mostly "No", or another
number): the judge must look, not learn that every question is true. Count questions are
answered with the number of objects the oracle assigns to the entity, as a capitalised word
("Two"; "Zero" when there are none), the form Soft-TIFA accepts first. Scenes come from one
split only (``train`` for training, ``heldout`` for measuring), so the judge is tested on
compositions it never saw.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

from cast_shapes.render import object_masks, render
from cast_shapes.semantics import detections_from_layout, evaluate, pools
from cast_shapes.suites import sample_scene_in_split
from cast_shapes.world import IMAGE_SIZE, sample_layout

SUFFIX = " Answer in one word."  # what soft-tifa appends to every question
NUMBER_ANSWERS = {0: "Zero", 1: "One", 2: "Two", 3: "Three", 4: "Four", 5: "Five", 6: "Six", 7: "Seven", 8: "Eight"}
ANSWERS = ("Yes", "No", *NUMBER_ANSWERS.values())


@dataclass(frozen=True)
class JudgeExample:
    image: np.ndarray  # [3, H, W] uint8, the rendered scene
    prompt: str  # the prompt the image was rendered from
    question: str  # the atom's question, without SUFFIX
    answer: str  # one of ANSWERS
    kind: str  # object / count / attribute / relation
    own: bool  # the question comes from the image's own prompt
    mask: np.ndarray  # [H, W] bool: the pixels the atom is about (all False when nothing to point at)


def _answer(atom, result, members) -> str:
    if atom.kind == "count":
        n = len(members or ())
        return NUMBER_ANSWERS.get(n, NUMBER_ANSWERS[max(NUMBER_ANSWERS)])
    return "Yes" if result.verdict else "No"


def atom_mask(result, object_masks: np.ndarray, size: int = IMAGE_SIZE) -> np.ndarray:
    """The pixels of the objects an atom's result is about (all False when there are none)."""
    m = np.zeros((size, size), dtype=bool)
    for i in result.members or ():
        m |= object_masks[i].astype(bool)
    return m


def scene_examples(rng: random.Random, split: str = "train", atoms: int | None = None) -> list[JudgeExample]:
    """The examples of one random scene of ``split``: its own questions and a distractor's."""
    from cast_shapes.grammar import prompt_for, scene_to_graph

    scene = sample_scene_in_split(rng, split, atoms)
    layout = sample_layout(scene, rng)
    image = render(layout)
    prompt = prompt_for(scene)
    detections = detections_from_layout(layout)
    masks = object_masks(layout)
    out = []
    for own, graph in ((True, scene_to_graph(scene)), (False, scene_to_graph(sample_scene_in_split(rng, split)))):
        results = evaluate(graph, detections, (IMAGE_SIZE, IMAGE_SIZE))
        pool = pools(graph, detections)
        for atom, result in zip(graph.atoms, results):
            out.append(
                JudgeExample(
                    image,
                    prompt,
                    atom.question,
                    _answer(atom, result, pool.get(atom.entity)),
                    atom.kind,
                    own,
                    atom_mask(result, masks),
                )
            )
    return out


def example_stream(seed: int, split: str = "train"):
    """An endless, seeded stream of examples (scene after scene, 2..8 atoms uniformly)."""
    rng = random.Random(seed)
    while True:
        yield from scene_examples(rng, split, rng.randint(2, 8))


def heldout_examples(n_scenes: int = 300, seed: int = 1234, split: str = "heldout") -> list[JudgeExample]:
    """A fixed set of held-out examples (scenes of 4..8 atoms: a held-out scene has two entities) to
    measure the judge on."""
    rng = random.Random(seed)
    return [e for _ in range(n_scenes) for e in scene_examples(rng, split, rng.randint(4, 8))]

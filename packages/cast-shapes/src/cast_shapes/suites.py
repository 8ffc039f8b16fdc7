"""Fixed prompt suites of the shapes world, and the train / held-out split.

**Split.** Every world prompt is either *training* or *held-out*, decided by a pure function of
what the prompt means (:func:`split_key`): its entities and its relations, with "B right of A"
read as "A left of B" and "B below A" as "A above B", sorted — so rewording or reordering a prompt
cannot move it across the split. A prompt with two or more entities is held out when the first 8
bytes of ``sha256(split_key)`` (as a fraction of 2**64) fall below :data:`HELDOUT_FRACTION`.
Single-entity prompts ("three red circles") are always training prompts: they are the
vocabulary itself, and the held-out split tests *composition*. Pretraining data and RL training
prompts must be drawn with :func:`sample_scene_in_split` / filtered with :func:`is_heldout`.

**Suites** (deterministic across processes and machines: seeds come from sha256 of the suite
name, and only Python's ``random.Random`` is used, never ``hash()``):

=================  ==========================================================================
``single``         all 21 one-object prompts ("a circle", "a red circle", ...), fixed order
``atoms-k``        training prompts with exactly k atoms, k = 2..8: 64 each, except
                   ``atoms-2`` (only 12 such prompts exist: a colourless shape and a count)
``train``          training prompts for RL: up to 128 per atom count 2..8 (660: the world has
                   only 12, 72 and 64 training prompts with 2, 3 and 4 atoms)
``train-hard``     the ``train`` prompts with >= 5 atoms (512): RL prompts matched to the
                   benchmark's difficulty, where most of the reward signal is
``heldout``        held-out prompts: 24 per atom count 5..8, and all 14 with 4 atoms (110)
``heldout-hard``   the ``heldout`` prompts with >= 5 atoms (96): the *validation* suite, on
                   which configurations (the demo's, the bench's) were chosen
``heldout-test``   other held-out compositions with >= 5 atoms, drawn with another seed: 48 per
                   atom count 5..8 (192), none meaning the same as a ``heldout`` prompt (same
                   :func:`split_key`) or as each other. The *test* suite: no configuration choice
                   looks at it, and the bench's published numbers come from it
=================  ==========================================================================

Sizes and contents are pinned by sha256 digests in the tests (:func:`suite_digest`): a suite that
changes makes earlier numbers incomparable, so it must change on purpose.
"""

from __future__ import annotations

import hashlib
import random
from functools import lru_cache

from cast_shapes.grammar import PromptError, parse_prompt, prompt_for, sample_scene
from cast_shapes.world import COLOURS, OPPOSITE, SHAPES, ObjectSpec, Scene

HELDOUT_FRACTION = 0.25
SPLITS = ("train", "heldout")
ATOM_SUITE_SIZE = 64
TRAIN_PER_ATOMS = 128
HELDOUT_PER_ATOMS = 24
HARD_MIN_ATOMS = 5
TEST_PER_ATOMS = 48
SUITE_NAMES: tuple[str, ...] = (
    "single",
    *(f"atoms-{k}" for k in range(2, 9)),
    "train",
    "train-hard",
    "heldout",
    "heldout-hard",
    "heldout-test",
)


def _entity_key(e: ObjectSpec) -> str:
    return f"{e.count}:{e.colour or '-'}:{e.shape}"


def split_key(scene: Scene) -> str:
    """What a scene means, independent of wording and order (the input of the split hash)."""
    names = [_entity_key(e) for e in scene.entities]
    rels = []
    for r in scene.relations:
        s, rel, o = names[r.subject_index], r.relation, names[r.object_index]
        if rel in ("right of", "below"):
            s, rel, o = o, OPPOSITE[rel], s
        rels.append(f"{s} {rel} {o}")
    return "entities=" + ";".join(sorted(names)) + "|relations=" + ";".join(sorted(rels))


def _fraction(text: str) -> float:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") / 2.0**64


def scene_split(scene: Scene) -> str:
    """``"heldout"`` or ``"train"``."""
    if len(scene.entities) >= 2 and _fraction(split_key(scene)) < HELDOUT_FRACTION:
        return "heldout"
    return "train"


def is_heldout(prompt: str) -> bool:
    """True for a held-out world prompt. Text outside the world's grammar is never held out
    (it is not a world prompt), so a filter built on this never rejects foreign prompts."""
    try:
        scene = parse_prompt(prompt)
    except PromptError:
        return False
    return scene_split(scene) == "heldout"


def sample_scene_in_split(
    rng: random.Random, split: str = "train", atoms: int | None = None, max_tries: int = 10_000
) -> Scene:
    """A random scene (as :func:`cast_shapes.grammar.sample_scene`) from one split only."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; splits: {', '.join(SPLITS)}")
    for _ in range(max_tries):
        scene = sample_scene(rng, atoms)
        if scene_split(scene) == split:
            return scene
    raise ValueError(f"no {split} scene with {atoms} atoms found in {max_tries} draws")


def _seeded(tag: str) -> random.Random:
    return random.Random(int.from_bytes(hashlib.sha256(f"cast-shapes suite {tag}".encode()).digest()[:8], "big"))


def _draw(split: str, atoms: int, n: int, tag: str) -> list[str]:
    """Up to ``n`` distinct prompts of one split and atom count, in a fixed pseudo-random order."""
    rng = _seeded(f"{tag}/{atoms}")
    seen: dict[str, None] = {}
    for _ in range(200 * n):
        if len(seen) >= n:
            break
        scene = sample_scene(rng, atoms)
        if scene_split(scene) == split:
            seen.setdefault(prompt_for(scene))
    return list(seen)


def _draw_test(atoms: int) -> list[str]:
    """``heldout-test``'s prompts with ``atoms`` atoms: held-out compositions that mean something
    no ``heldout`` prompt (and no earlier test prompt) means, so rewording cannot leak validation
    prompts into the test suite."""
    taken = {split_key(parse_prompt(p)) for p in _suite("heldout")}
    rng = _seeded(f"heldout-test/{atoms}")
    out: list[str] = []
    for _ in range(200 * TEST_PER_ATOMS):
        if len(out) >= TEST_PER_ATOMS:
            break
        scene = sample_scene(rng, atoms)
        key = split_key(scene)
        if scene_split(scene) == "heldout" and key not in taken:
            taken.add(key)
            out.append(prompt_for(scene))
    return out


@lru_cache(maxsize=None)
def _suite(name: str) -> tuple[str, ...]:
    if name == "single":
        return tuple(
            prompt_for(Scene((ObjectSpec(shape, colour, 1),))) for shape in SHAPES for colour in (None, *COLOURS)
        )
    if name.startswith("atoms-") and name in SUITE_NAMES:
        return tuple(_draw("train", int(name[6:]), ATOM_SUITE_SIZE, name))
    if name == "train":
        return tuple(p for k in range(2, 9) for p in _draw("train", k, TRAIN_PER_ATOMS, "train"))
    if name == "train-hard":
        return tuple(p for p in _suite("train") if parse_prompt(p).atom_count >= HARD_MIN_ATOMS)
    if name == "heldout":
        return tuple(p for k in range(4, 9) for p in _draw("heldout", k, HELDOUT_PER_ATOMS, "heldout"))
    if name == "heldout-hard":
        return tuple(p for p in _suite("heldout") if parse_prompt(p).atom_count >= HARD_MIN_ATOMS)
    if name == "heldout-test":
        return tuple(p for k in range(HARD_MIN_ATOMS, 9) for p in _draw_test(k))
    raise ValueError(f"unknown suite {name!r}; suites: {', '.join(SUITE_NAMES)}")


def suite(name: str) -> list[str]:
    """The prompts of a named suite (a fresh list; the suite itself never changes)."""
    return list(_suite(name))


def suite_digest(name: str) -> str:
    """sha256 of a suite's prompts, to pin suites in tests and record them next to results."""
    return hashlib.sha256("\n".join(_suite(name)).encode()).hexdigest()


def train_prompts() -> list[str]:
    """The RL training prompts (the ``train`` suite) — what the ``shapes`` recipe trains on."""
    return suite("train")


def train_hard_prompts() -> list[str]:
    """The ``train-hard`` suite: training prompts with >= 5 atoms."""
    return suite("train-hard")

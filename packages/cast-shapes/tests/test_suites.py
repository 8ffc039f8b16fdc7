"""Prompt suites: fixed, deterministic, sized, and train / held-out disjoint by construction."""

import os
import random
import subprocess
import sys

import pytest

from cast_shapes.grammar import parse_prompt, prompt_for, sample_scene
from cast_shapes.suites import (
    HARD_MIN_ATOMS,
    SUITE_NAMES,
    is_heldout,
    sample_scene_in_split,
    scene_split,
    split_key,
    suite,
    suite_digest,
)
from cast_shapes.world import (
    IMAGE_SIZE,
    OPPOSITE,
    ObjectSpec,
    Relation,
    Scene,
    group_centre,
    relation_offset,
    sample_layout,
)

PINNED = {
    "single": "af2a620531894c88d52539cfee9759d91bb36e02058dfb0870e38185dc63b8c0",
    "atoms-2": "0aca9096159a5fc51426b9d08766253f3551498dd67a156d0c2f41aa96b69b59",
    "atoms-3": "2079a75c85f26f70fe17d4a856af59d58fcd752e34fca3f37d982ade280b7d46",
    "atoms-4": "8511831df5c2e5cd902c179fe014efbfc00027fa0feedc9d38da1a33223e0668",
    "atoms-5": "d3355b955a97e196f06419f744cccfca4a90517fa6a1c08522538391c1b45d85",
    "atoms-6": "90059c57f9356d2dd434fb88a5d4e1a5f3dda744e6898c0c0415e803f67eb8d5",
    "atoms-7": "7a2c9c318a090556dfcf5523e394d6d4f3f569e0aa8b6a06b2a557cf1911e130",
    "atoms-8": "3d84346c682675addfc664cb9422f2868ef4ba5513071f09e21815336dce19bf",
    "train": "885cb06d2ac453026a176b0be67e755dce3474a4f80ae1163278bd9f5caed6e5",
    "train-hard": "72610e2fef55ab73271ef952fd8db26ea027cfc0d5cf11fb008461ea0bbe3800",
    "heldout": "609381aea5b5ab40bab68035263eb0664c6814ae48f65c56a201bcfaaf067325",
    "heldout-hard": "de9ee03789f41149b72540e6f56eb4559e46dcd91cb557709f2cbbe0b8fa6582",
    "heldout-test": "a880d2f221bbac3ff4e1cac8dc33d899d1f131364869b683e9b52b771107cee6",
}

SIZES = {
    "single": 21,
    "atoms-2": 12,
    "train": 660,
    "train-hard": 512,
    "heldout": 110,
    "heldout-hard": 96,
    "heldout-test": 192,
    **{f"atoms-{k}": 64 for k in range(3, 9)},
}


def test_suites_are_pinned():
    """A changed suite makes published numbers incomparable: change PINNED only on purpose."""
    assert {n: suite_digest(n) for n in SUITE_NAMES} == PINNED


def test_suite_sizes_and_contents():
    for name in SUITE_NAMES:
        prompts = suite(name)
        assert len(prompts) == SIZES[name] == len(set(prompts)), name
        atoms = {parse_prompt(p).atom_count for p in prompts}
        if name.startswith("atoms-"):
            assert atoms == {int(name[6:])}
    assert {parse_prompt(p).atom_count for p in suite("heldout-hard")} == set(range(HARD_MIN_ATOMS, 9))
    assert set(suite("heldout-hard")) <= set(suite("heldout"))
    assert {parse_prompt(p).atom_count for p in suite("train-hard")} == set(range(HARD_MIN_ATOMS, 9))
    assert set(suite("train-hard")) <= set(suite("train"))
    assert all(len(parse_prompt(p).entities) == 1 and parse_prompt(p).n_objects == 1 for p in suite("single"))
    with pytest.raises(ValueError, match="heldout-hard"):
        suite("nope")


def test_train_and_heldout_are_disjoint():
    train = {n: suite(n) for n in SUITE_NAMES if n.startswith(("train", "single", "atoms-"))}
    held = suite("heldout") + suite("heldout-hard") + suite("heldout-test")
    assert all(is_heldout(p) for p in held)
    for name, prompts in train.items():
        assert not any(is_heldout(p) for p in prompts), name
        assert not set(prompts) & set(held), name


def test_test_suite_shares_no_meaning_with_validation():
    """heldout-test must be compositions no configuration choice looked at: none means what a
    heldout prompt means (the split key ignores wording and order), and none repeats another."""
    validation = {split_key(parse_prompt(p)) for p in suite("heldout")}
    test = [split_key(parse_prompt(p)) for p in suite("heldout-test")]
    assert len(set(test)) == len(test) == 192
    assert not set(test) & validation
    counts = {k: sum(parse_prompt(p).atom_count == k for p in suite("heldout-test")) for k in range(5, 9)}
    assert counts == {5: 48, 6: 48, 7: 48, 8: 48}


def test_split_ignores_wording_and_order():
    a = Scene((ObjectSpec("circle", "red", 2), ObjectSpec("square", None, 1)), (Relation(0, "left of", 1),))
    b = Scene((ObjectSpec("square", None, 1), ObjectSpec("circle", "red", 2)), (Relation(0, "right of", 1),))
    assert split_key(a) == split_key(b)
    c = Scene((ObjectSpec("circle", "red", 2), ObjectSpec("square", None, 1)))
    d = Scene((ObjectSpec("square", None, 1), ObjectSpec("circle", "red", 2)))
    assert split_key(c) == split_key(d) != split_key(a)
    rng = random.Random(0)
    for _ in range(300):
        s = sample_scene(rng)
        assert is_heldout(prompt_for(s)) == (scene_split(s) == "heldout")
        if len(s.entities) == 2:
            rev = Scene(s.entities[::-1], tuple(Relation(0, OPPOSITE[r.relation], 1) for r in s.relations))
            assert scene_split(rev) == scene_split(s)


def test_heldout_fraction_and_single_objects():
    rng = random.Random(1)
    multi = [s for s in (sample_scene(rng) for _ in range(2000)) if len(s.entities) >= 2]
    frac = sum(scene_split(s) == "heldout" for s in multi) / len(multi)
    assert 0.18 < frac < 0.32, frac
    assert not any(is_heldout(p) for p in suite("single") + suite("atoms-2") + suite("atoms-3"))
    assert not is_heldout("a purple dragon")  # not a world prompt, never held out


def test_split_samplers_stay_in_their_split():
    rng = random.Random(2)
    for split in ("train", "heldout"):
        for k in (5, 8):
            s = sample_scene_in_split(rng, split, k)
            assert scene_split(s) == split and s.atom_count == k


def test_suites_are_deterministic_across_processes():
    code = "from cast_shapes.suites import suite_digest as d; print(d('train'), d('heldout'))"
    runs = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": str(seed)},
        ).stdout
        for seed in (1, 2)
    }
    assert runs == {f"{suite_digest('train')} {suite_digest('heldout')}\n"}


def test_every_suite_prompt_can_be_laid_out():
    """Every prompt's scene gets a layout with the right objects, inside the canvas, without
    overlaps, and with every relation holding."""
    for prompt in sorted(set(suite("train")) | set(suite("heldout"))):
        scene = parse_prompt(prompt)
        layout = sample_layout(scene, 0)
        assert len(layout) == scene.n_objects, prompt
        for i, entity in enumerate(scene.entities):
            members = [p for p in layout if p.entity == i]
            assert len(members) == entity.count and all(p.shape == entity.shape for p in members), prompt
            assert entity.colour is None or all(p.colour == entity.colour for p in members), prompt
        boxes = [p.box for p in layout]
        assert all(0 <= x0 and 0 <= y0 and x1 <= IMAGE_SIZE and y1 <= IMAGE_SIZE for x0, y0, x1, y1 in boxes), prompt
        for a in range(len(boxes)):
            for b in range(a + 1, len(boxes)):
                (ax0, ay0, ax1, ay1), (bx0, by0, bx1, by1) = boxes[a], boxes[b]
                assert ax1 <= bx0 or bx1 <= ax0 or ay1 <= by0 or by1 <= ay0, (prompt, boxes[a], boxes[b])
        for r in scene.relations:
            offset = relation_offset(
                r.relation, group_centre(layout, r.subject_index), group_centre(layout, r.object_index)
            )
            assert offset > 0, (prompt, r)

"""Training prompts for the backbone recipes: compositional prompts in GenEval's six templates
(one object, two objects, counting, colour, position, colour attribution) over single-word
COCO object names, drawn with a fixed seed.

Why generated, not shipped: GenEval's and GenEval 2's own prompt lists are what a trained model
is *evaluated* on; training on them would make every published number a training-set number.
These share the grammar (so the ``template`` decomposer reads every one of them, checked in
tests/test_backbone_prompts.py) but are drawn independently. Pass your own with
``--set prompts=FILE`` (one prompt a line).
"""

from __future__ import annotations

import random

__all__ = ["train_prompts", "OBJECTS", "COLORS", "RELATIONS"]

# single-word COCO classes with their plurals (multi-word names such as "traffic light" and
# irregular plurals the decomposer would have to guess are left out)
OBJECTS = {
    "bicycle": "bicycles",
    "car": "cars",
    "motorcycle": "motorcycles",
    "airplane": "airplanes",
    "train": "trains",
    "truck": "trucks",
    "boat": "boats",
    "bench": "benches",
    "bird": "birds",
    "cat": "cats",
    "dog": "dogs",
    "horse": "horses",
    "cow": "cows",
    "elephant": "elephants",
    "bear": "bears",
    "zebra": "zebras",
    "giraffe": "giraffes",
    "backpack": "backpacks",
    "umbrella": "umbrellas",
    "handbag": "handbags",
    "tie": "ties",
    "suitcase": "suitcases",
    "frisbee": "frisbees",
    "kite": "kites",
    "skateboard": "skateboards",
    "surfboard": "surfboards",
    "bottle": "bottles",
    "cup": "cups",
    "fork": "forks",
    "spoon": "spoons",
    "bowl": "bowls",
    "banana": "bananas",
    "apple": "apples",
    "sandwich": "sandwiches",
    "orange": "oranges",
    "broccoli": "broccoli",
    "carrot": "carrots",
    "pizza": "pizzas",
    "donut": "donuts",
    "cake": "cakes",
    "chair": "chairs",
    "couch": "couches",
    "bed": "beds",
    "toilet": "toilets",
    "tv": "tvs",
    "laptop": "laptops",
    "remote": "remotes",
    "keyboard": "keyboards",
    "microwave": "microwaves",
    "oven": "ovens",
    "toaster": "toasters",
    "sink": "sinks",
    "refrigerator": "refrigerators",
    "book": "books",
    "clock": "clocks",
    "vase": "vases",
    "scissors": "scissors",
    "toothbrush": "toothbrushes",
}
COLORS = ("red", "orange", "yellow", "green", "blue", "purple", "pink", "brown", "black", "white")
RELATIONS = ("left of", "right of", "above", "below")
_COUNTS = ("two", "three", "four")


def _article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def _one(rng: random.Random, color: str | None = None, noun: str | None = None) -> str:
    noun = noun or rng.choice(sorted(OBJECTS))
    words = f"{color} {noun}" if color else noun
    return f"{_article(words)} {words}"


def _two(rng: random.Random, colors: tuple[str | None, str | None] = (None, None)) -> tuple[str, str]:
    """Two objects of different kinds: two of one noun make ambiguous count and attribute questions."""
    a, b = rng.sample(sorted(OBJECTS), 2)
    return _one(rng, colors[0], a), _one(rng, colors[1], b)


def _prompt(rng: random.Random, task: str) -> str:
    if task == "single_object":
        return f"a photo of {_one(rng)}"
    if task == "two_object":
        a, b = _two(rng)
        return f"a photo of {a} and {b}"
    if task == "counting":
        noun = rng.choice(sorted(n for n, p in OBJECTS.items() if p != n))
        return f"a photo of {rng.choice(_COUNTS)} {OBJECTS[noun]}"
    if task == "colors":
        return f"a photo of {_one(rng, rng.choice(COLORS))}"
    if task == "position":
        a, b = _two(rng)
        return f"a photo of {a} {rng.choice(RELATIONS)} {b}"
    a, b = _two(rng, tuple(rng.sample(COLORS, 2)))
    return f"a photo of {a} and {b}"


TASKS = ("single_object", "two_object", "counting", "colors", "position", "color_attr")


def train_prompts(n: int = 600, seed: int = 2026) -> list[str]:
    """``n`` distinct prompts, the six tasks in turn (``module:callable`` for the recipes)."""
    rng = random.Random(seed)
    out: dict[str, None] = {}
    i = 0
    while len(out) < n:
        out.setdefault(_prompt(rng, TASKS[i % len(TASKS)]))
        i += 1
        if i > 100 * n:  # pragma: no cover - the grammar has far more than n prompts
            raise RuntimeError(f"could not draw {n} distinct prompts")
    return list(out)

"""The shapes world: its vocabulary, what a scene is, and where its objects go.

Everything about the world that other modules must agree on lives here — image size, background,
palette, shapes, counts, relations — so the renderer, the prompt grammar and the oracle cannot
drift apart. A *scene* (:class:`Scene`) is what a prompt says: entities (shape, optional colour,
count) and spatial relations between them. A *layout* (a tuple of :class:`Placed`) is one concrete
arrangement of that scene on the canvas, drawn by :func:`sample_layout`.

Layout rules, chosen so the oracle can verify every atom exactly from pixels:

* every object is a ``size x size`` box on integer pixel coordinates, at least :data:`BORDER`
  pixels from the image edge and at least :data:`GAP` background pixels away from every other
  object's box — so objects never touch, even after a mild blur, and counting is unambiguous;
* a relation "A left of B" holds between the *group centres* (mean box centre of all of A's
  objects vs all of B's) with at least :data:`RELATION_MIN_OFFSET` pixels to spare along that axis,
  so a true relation is never a coin flip for the verifier;
* an entity without a colour gets a random colour per object, but never a colour that another
  entity with the same noun claims (that is what tells "a circle" from "a red circle" apart when
  both are circles; see :mod:`cast_shapes.semantics`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Sequence

IMAGE_SIZE = 32
"""Images are ``IMAGE_SIZE x IMAGE_SIZE`` RGB. Small on purpose: the world's policy is pretrained
from scratch on a 2-core CPU, and 32 px still fits six separated 7-10 px shapes."""

BACKGROUND: tuple[int, int, int] = (255, 255, 255)
"""Plain white. Every palette colour is >= 230/255 (Euclidean RGB) away from it — farther than
from black (>= 170) — so "object or background" is the most robust decision the oracle makes,
and it stays robust when blur mixes an object's edge with the background."""

PALETTE: dict[str, tuple[int, int, int]] = {
    "red": (225, 20, 30),
    "green": (20, 170, 60),
    "blue": (30, 80, 235),
    "yellow": (250, 225, 25),
    "purple": (150, 40, 200),
    "orange": (255, 128, 0),
}
"""Colour name -> RGB (0-255). Chosen for separation: the closest pair (yellow/orange) is 100/255
apart, then red/orange 116, blue/purple 131; all others > 180. Orange is the hard colour, as in
the real world: it sits between red and yellow."""

COLOURS: tuple[str, ...] = tuple(PALETTE)

SHAPES: tuple[str, ...] = ("circle", "square", "triangle")
"""Nouns of the world (singular lemmas). Triangles point up (apex at the top centre)."""

COUNTS: tuple[int, ...] = (1, 2, 3, 4)
"""How many objects one entity may ask for."""

RELATIONS: tuple[str, ...] = ("left of", "right of", "above", "below")
"""Spatial relations, judged on group centres (image y grows downwards)."""

OPPOSITE: dict[str, str] = {"left of": "right of", "right of": "left of", "above": "below", "below": "above"}

MIN_SIZE, MAX_SIZE = 7, 10
"""Object box side in pixels. Crowded scenes use the small end (see :func:`size_range`)."""

MAX_OBJECTS = 6
"""Most objects one scene may hold; more do not reliably fit 32 px with the gaps below."""

GAP = 2
"""Minimum background pixels between two objects' boxes (Chebyshev), so they never touch."""

BORDER = 1
"""Minimum background pixels between an object and the image edge."""

RELATION_MIN_OFFSET = 4.0
"""Pixels by which a sampled relation must hold between group centres (1/8 of the image)."""


class LayoutError(ValueError):
    """A scene could not be laid out (too many or too large objects, or unsatisfiable relations)."""


@dataclass(frozen=True)
class ObjectSpec:
    """One entity of a scene: ``count`` objects of ``shape``; ``colour`` None = unspecified."""

    shape: str
    colour: str | None = None
    count: int = 1


@dataclass(frozen=True)
class Relation:
    """``entities[subject_index]`` is ``relation`` ``entities[object_index]`` ("left of", ...)."""

    subject_index: int
    relation: str
    object_index: int


@dataclass(frozen=True)
class Scene:
    """What a prompt asks for: entities in prompt order and the relations between them."""

    entities: tuple[ObjectSpec, ...]
    relations: tuple[Relation, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "entities", tuple(self.entities))
        object.__setattr__(self, "relations", tuple(self.relations))

    @property
    def n_objects(self) -> int:
        return sum(e.count for e in self.entities)

    @property
    def atom_count(self) -> int:
        """Atoms of its scene graph: object + count per entity, + colour, + one per relation."""
        return 2 * len(self.entities) + sum(e.colour is not None for e in self.entities) + len(self.relations)

    def problems(self) -> list[str]:
        """Why this scene is not a valid scene of the world (empty list when it is)."""
        out: list[str] = []
        if not self.entities:
            out.append("a scene needs at least one entity")
        for i, e in enumerate(self.entities):
            if e.shape not in SHAPES:
                out.append(f"entity {i}: unknown shape {e.shape!r} (shapes: {', '.join(SHAPES)})")
            if e.colour is not None and e.colour not in PALETTE:
                out.append(f"entity {i}: unknown colour {e.colour!r} (colours: {', '.join(COLOURS)})")
            if e.count not in COUNTS:
                out.append(f"entity {i}: count {e.count!r} outside {COUNTS[0]}..{COUNTS[-1]}")
        for i, a in enumerate(self.entities):
            for j in range(i + 1, len(self.entities)):
                b = self.entities[j]
                if a.shape == b.shape and (a.colour is None or b.colour is None or a.colour == b.colour):
                    out.append(
                        f"entities {i} and {j} are both {a.shape}s; two entities with one noun need "
                        f"two different colours, or nobody can tell which objects are which"
                    )
        n = len(self.entities)
        for r in self.relations:
            if r.relation not in RELATIONS:
                out.append(f"unknown relation {r.relation!r} (relations: {', '.join(RELATIONS)})")
            if not (0 <= r.subject_index < n and 0 <= r.object_index < n) or r.subject_index == r.object_index:
                out.append(f"relation {r} must link two different entities among 0..{n - 1}")
        if self.n_objects > MAX_OBJECTS:
            out.append(f"{self.n_objects} objects; at most {MAX_OBJECTS} fit a {IMAGE_SIZE} px image")
        return out

    def validate(self) -> "Scene":
        problems = self.problems()
        if problems:
            raise ValueError(f"invalid scene {self}: " + "; ".join(problems))
        return self


@dataclass(frozen=True)
class Placed:
    """One object on the canvas: a ``size x size`` box centred on ``(cx, cy)`` (pixels, x to the
    right, y down; the box's corners are integers) belonging to scene entity ``entity``."""

    shape: str
    colour: str
    cx: float
    cy: float
    size: int
    entity: int

    @property
    def box(self) -> tuple[int, int, int, int]:
        """``(x0, y0, x1, y1)``, end-exclusive pixel bounds."""
        x0, y0 = int(round(self.cx - self.size / 2)), int(round(self.cy - self.size / 2))
        return x0, y0, x0 + self.size, y0 + self.size


def size_range(n_objects: int) -> tuple[int, int]:
    """Box sides to draw from, inclusive: the more objects, the smaller, so they all fit."""
    if n_objects <= 2:
        return 8, MAX_SIZE
    if n_objects <= 4:
        return MIN_SIZE, 9
    return MIN_SIZE, 8


def group_centre(layout: Sequence[Placed], entity: int) -> tuple[float, float]:
    members = [p for p in layout if p.entity == entity]
    return sum(p.cx for p in members) / len(members), sum(p.cy for p in members) / len(members)


def relation_offset(relation: str, subject: tuple[float, float], other: tuple[float, float]) -> float:
    """Signed pixels by which ``subject relation other`` holds (negative: it does not)."""
    (sx, sy), (ox, oy) = subject, other
    return {"left of": ox - sx, "right of": sx - ox, "above": oy - sy, "below": sy - oy}[relation]


def _rng(seed: int | random.Random | None) -> random.Random:
    return seed if isinstance(seed, random.Random) else random.Random(seed)


def sample_layout(
    scene: Scene,
    seed: int | random.Random | None = None,
    *,
    image_size: int = IMAGE_SIZE,
    max_tries: int = 300,
) -> tuple[Placed, ...]:
    """Place every object of ``scene`` without overlap so that its relations hold.

    Rejection sampling: boxes go down one by one at random free spots; then assignments of boxes
    to entities (as drawn, then shuffled), each also mirrored in x and/or y, are tried until every
    relation holds, before starting over. Deterministic for a given seed. Raises :class:`LayoutError`
    after ``max_tries`` attempts, naming the scene.
    """
    scene.validate()
    rng = _rng(seed)
    lo, hi = size_range(scene.n_objects)
    claimed: dict[str, set[str]] = {}
    for e in scene.entities:
        if e.colour is not None:
            claimed.setdefault(e.shape, set()).add(e.colour)
    entity_of = [ei for ei, e in enumerate(scene.entities) for _ in range(e.count)]
    for _ in range(max_tries):
        boxes: list[tuple[int, int, int]] = []  # x0, y0, size
        for _k in entity_of:
            s = rng.randint(lo, hi)
            spot = _free_spot(rng, boxes, s, image_size)
            if spot is None:
                break
            boxes.append((spot[0], spot[1], s))
        if len(boxes) < len(entity_of):
            continue
        layout = _assign(scene, boxes, entity_of, rng, image_size)
        if layout is None:
            continue
        placed = []
        for (x0, y0, s), ei in layout:
            e = scene.entities[ei]
            colour = e.colour
            if colour is None:
                allowed = [c for c in COLOURS if c not in claimed.get(e.shape, set())]
                colour = rng.choice(allowed)
            placed.append(Placed(e.shape, colour, x0 + s / 2, y0 + s / 2, s, ei))
        return tuple(placed)
    raise LayoutError(
        f"could not lay out {scene} on a {image_size} px canvas in {max_tries} tries "
        f"({scene.n_objects} objects of {lo}-{hi} px, gap {GAP}, relations need "
        f"{RELATION_MIN_OFFSET:g} px); use fewer objects or relations"
    )


def _free_spot(rng: random.Random, boxes, s: int, image_size: int, attempts: int = 60):
    top = image_size - BORDER - s
    if top < BORDER:
        return None
    for _ in range(attempts):
        x0, y0 = rng.randint(BORDER, top), rng.randint(BORDER, top)
        if all(
            x0 >= bx + bs + GAP or bx >= x0 + s + GAP or y0 >= by + bs + GAP or by >= y0 + s + GAP
            for bx, by, bs in boxes
        ):
            return x0, y0
    return None


def _assign(scene: Scene, boxes, entity_of, rng: random.Random, image_size: int, shuffles: int = 40):
    """Pair free boxes with entities so every relation holds: the boxes as drawn, then shuffled
    assignments, each also mirrored in x and/or y (both keep the boxes disjoint). None if none
    of these works."""
    if not scene.relations:
        return list(zip(boxes, entity_of))
    order = list(range(len(boxes)))
    for attempt in range(shuffles):
        if attempt:
            rng.shuffle(order)
        for flip_x in (False, True):
            for flip_y in (False, True):
                cand = [
                    (image_size - x0 - s if flip_x else x0, image_size - y0 - s if flip_y else y0, s)
                    for x0, y0, s in (boxes[i] for i in order)
                ]
                placed = [Placed("", "", x0 + s / 2, y0 + s / 2, s, ei) for (x0, y0, s), ei in zip(cand, entity_of)]
                if all(
                    relation_offset(
                        r.relation, group_centre(placed, r.subject_index), group_centre(placed, r.object_index)
                    )
                    >= RELATION_MIN_OFFSET
                    for r in scene.relations
                ):
                    return list(zip(cand, entity_of))
    return None


def with_entity(scene: Scene, index: int, **changes) -> Scene:
    """A copy of ``scene`` with entity ``index`` changed (e.g. ``count=3``) — for counterfactuals."""
    entities = list(scene.entities)
    entities[index] = replace(entities[index], **changes)
    return Scene(tuple(entities), scene.relations)

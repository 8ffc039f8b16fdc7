"""What each atom of a scene graph means in the shapes world, given the objects in an image.

This module is the single definition of truth for the world. It takes *detections* — objects with
a shape, a colour and a position — and a scene graph, and returns a soft score per atom plus the
objects the atom is about. The oracle (:mod:`cast_shapes.oracle`) feeds it detections found in
pixels; :func:`detections_from_layout` feeds it the exact objects of a rendered layout, which is
the ground truth the oracle's accuracy is measured against. Keeping the semantics in one place
means that test measures perception only, and the semantics are pinned by their own tests.

Binding — which objects an entity refers to (its *pool*):

* with only one entity per noun: every object of that shape. Colour is *not* used to bind, so
  each atom answers its own GenEval 2 question and failures stay separate: for "two red circles"
  and an image of two blue circles, ``object`` ("Are there any circles?") and ``count`` ("How many
  circles?") pass and only ``attribute`` ("Are the circles red?") fails;
* when several entities share a noun, colour is what tells them apart, so it becomes part of the
  identity: an entity with a colour refers to the objects of its shape *and* colour ("a red
  circle left of a blue circle": e1 = the red circles), and one without a colour to the objects of
  its shape whose colour no same-noun entity claims. An off-colour circle then counts for no
  coloured entity instead of for all of them: a green circle where the red one should be fails
  e1 (its object is missing) and leaves e2 ("the blue circles") untouched.

Atoms (``d`` = detections, ``P`` = the entity's pool, ``n = |P|``):

* ``object``: ``max`` over the detections the entity may refer to (any shape) of their evidence
  for the noun (1.0 for an exact object; the oracle's shape confidence otherwise), 0 with none.
* ``count`` (target ``k``): ``exp(-|n - k|)`` — 1 when exact, 0.37 one off, 0.14 two off. With
  too few objects (``n < k``) the atom points at nothing (a flat heatmap): the failure is an object
  that is not there, and pointing at the objects that are would blame the correct ones. (Measured
  effect on RL: small — docs/shapes-rl.md.)
* ``attribute`` (colour ``c``): ``f ** g`` where ``f`` is the fraction of ``P`` that is ``c`` and
  ``g = ln 0.5 / ln(1 - 1/(2n))``, which puts the 0.5 verdict line half-way between "all but one"
  and "all": the verdict means "are *the* circles red" (all of them) while the score still grows
  with each correct object. 0 when ``P`` is empty.
* ``relation`` (``A rel B``): on the group centres (mean box centre) of both pools, the offset
  ``d`` along the relation's axis in units of the image side, scored
  ``sigmoid((d - RELATION_MARGIN) / RELATION_SOFTNESS)``: a relation must hold by more than
  :data:`RELATION_MARGIN` (1.6 px at 32 px) to pass. 0 if either pool is empty.

Vocabulary outside the world scores 0 with no objects (a flat heatmap) instead of raising:
unknown nouns (all atoms of that entity and its relations), attribute values that are not palette
colours, relation phrases not in :data:`RELATION_SYNONYMS`. Plural nouns ("circles") are read as
their singular. A ``count`` atom whose target is 0 passes when the pool is empty.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from cast_core.scene_graph import SceneGraph

from cast_shapes.world import IMAGE_SIZE, PALETTE, SHAPES, Placed

RELATION_MARGIN = 0.05
"""A relation passes when the group centres differ by more than this fraction of the image side."""

RELATION_SOFTNESS = 0.03
"""Width of the relation sigmoid, as a fraction of the image side (about 1 px at 32 px)."""

RELATION_SYNONYMS: dict[str, str] = {
    "left of": "left of",
    "to the left of": "left of",
    "on the left of": "left of",
    "right of": "right of",
    "to the right of": "right of",
    "on the right of": "right of",
    "above": "above",
    "over": "above",
    "on top of": "above",
    "below": "below",
    "under": "below",
    "beneath": "below",
    "underneath": "below",
}
"""Relation phrases the world can judge -> the canonical one; anything else scores 0."""


@dataclass(frozen=True)
class Detection:
    """One object seen in an image. ``shape_evidence[s]`` in [0, 1] says how much it looks like
    shape ``s`` (>= 0.5 exactly when ``shape == s``); ``shape`` is None for a blob that is no
    shape. ``cx, cy`` is its bounding-box centre in pixels. ``mask`` (optional, bool ``[H, W]``)
    is where it is, for heatmaps."""

    shape: str | None
    colour: str | None
    cx: float
    cy: float
    shape_evidence: Mapping[str, float] = field(default_factory=dict)
    mask: Any = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class AtomResult:
    """Score of one atom and the detections (indices) it is about; ``None`` = nothing to point
    at (a missing object or unknown vocabulary), which becomes a flat heatmap."""

    score: float
    members: tuple[int, ...] | None

    @property
    def verdict(self) -> bool:
        return self.score >= 0.5


def normalise_noun(noun: str) -> str:
    noun = noun.strip().lower()
    if noun not in SHAPES and noun.endswith("s") and noun[:-1] in SHAPES:
        noun = noun[:-1]
    return noun


def entity_colours(graph: SceneGraph) -> dict[str, str]:
    """Entity id -> its palette colour, from the graph's attribute atoms (if exactly one)."""
    found: dict[str, set[str]] = {}
    for a in graph.atoms:
        if a.kind == "attribute" and isinstance(a.value, str) and a.value.strip().lower() in PALETTE:
            found.setdefault(a.entity, set()).add(a.value.strip().lower())
    return {e: next(iter(cs)) for e, cs in found.items() if len(cs) == 1}


def pools(graph: SceneGraph, detections: Sequence[Detection]) -> dict[str, tuple[int, ...] | None]:
    """Entity id -> indices of the detections it refers to (None for an unknown noun)."""
    colours = entity_colours(graph)
    nouns = {e.id: normalise_noun(e.noun) for e in graph.entities}
    out: dict[str, tuple[int, ...] | None] = {}
    for e in graph.entities:
        noun = nouns[e.id]
        if noun not in SHAPES:
            out[e.id] = None
            continue
        admits = _colour_filter(e.id, nouns, colours)
        out[e.id] = tuple(i for i, d in enumerate(detections) if d.shape == noun and admits(d.colour))
    return out


def _colour_filter(eid: str, nouns: Mapping[str, str], colours: Mapping[str, str]):
    """Which detection colours entity ``eid`` can refer to (see the binding rules above)."""
    shared = [other for other in nouns if other != eid and nouns[other] == nouns[eid]]
    if not shared:
        return lambda colour: True
    own = colours.get(eid)
    if own is not None:
        return lambda colour: colour == own
    claimed = {colours[o] for o in shared if o in colours}
    return lambda colour: colour not in claimed


COUNT_MAPS = ("all", "surplus")


def evaluate(
    graph: SceneGraph,
    detections: Sequence[Detection],
    image_size: tuple[int, int] = (IMAGE_SIZE, IMAGE_SIZE),
    count_maps: str = "all",
) -> list[AtomResult]:
    """Score every atom of ``graph`` against ``detections`` (aligned with ``graph.atoms``).

    ``count_maps`` only changes what a ``count`` atom with too many objects points at: all of the
    entity's objects (``"all"``, the default) or only the ``n - k`` surplus ones, those with the
    least evidence for the noun, later detections first on ties (``"surplus"``). Why: with
    ``"all"`` the count atom's blame lands on the correct objects too, where the object and
    relation atoms put their credit. Measured, ``"surplus"`` does not curb over-drawing: runs
    with it draw more objects, not fewer (docs/shapes-rl.md)."""
    if count_maps not in COUNT_MAPS:
        raise ValueError(f"count_maps must be one of {COUNT_MAPS}, got {count_maps!r}")
    h, w = image_size
    pool = pools(graph, detections)
    colours = entity_colours(graph)
    nouns = {e.id: normalise_noun(e.noun) for e in graph.entities}
    out: list[AtomResult] = []
    for a in graph.atoms:
        members = pool.get(a.entity)
        if members is None:  # unknown noun
            out.append(AtomResult(0.0, None))
            continue
        flat = members or None
        if a.kind == "object":
            admits = _colour_filter(a.entity, nouns, colours)
            ev = [d.shape_evidence.get(nouns[a.entity], 0.0) for d in detections if admits(d.colour)]
            out.append(AtomResult(float(max(ev, default=0.0)), flat))
        elif a.kind == "count":
            target = a.value if isinstance(a.value, int) else 0
            # too few: what is wrong is an object that is *not* there, so the judge has nowhere
            # to point — the drawn objects are right, and blaming them teaches under-drawing
            about = flat if len(members) >= target else None
            if count_maps == "surplus" and len(members) > target:
                by_evidence = sorted(
                    members, key=lambda i: (detections[i].shape_evidence.get(nouns[a.entity], 0.0), -i)
                )
                about = tuple(sorted(by_evidence[: len(members) - target]))
            out.append(AtomResult(math.exp(-abs(len(members) - target)), about))
        elif a.kind == "attribute":
            colour = a.value.strip().lower() if isinstance(a.value, str) else None
            if colour not in PALETTE or not members:
                out.append(AtomResult(0.0, flat))
                continue
            n = len(members)
            frac = sum(detections[i].colour == colour for i in members) / n
            gamma = 1.0 if n == 1 else math.log(0.5) / math.log(1 - 1 / (2 * n))
            out.append(AtomResult(frac**gamma, flat))
        elif a.kind == "relation":
            relation = RELATION_SYNONYMS.get(str(a.value).strip().lower())
            others = pool.get(a.other or "")
            if relation is None or not members or not others:
                out.append(AtomResult(0.0, None))  # an end is missing: nothing to point at
                continue
            s = _centre(detections, members)
            o = _centre(detections, others)
            offset = {
                "left of": (o[0] - s[0]) / w,
                "right of": (s[0] - o[0]) / w,
                "above": (o[1] - s[1]) / h,
                "below": (s[1] - o[1]) / h,
            }[relation]
            score = _sigmoid((offset - RELATION_MARGIN) / RELATION_SOFTNESS)
            out.append(AtomResult(score, tuple(sorted(set(members) | set(others)))))
        else:  # a kind the world has no test for
            out.append(AtomResult(0.0, None))
    return out


def _centre(detections: Sequence[Detection], idx: Sequence[int]) -> tuple[float, float]:
    return (sum(detections[i].cx for i in idx) / len(idx), sum(detections[i].cy for i in idx) / len(idx))


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


def detections_from_layout(layout: Sequence[Placed]) -> list[Detection]:
    """The exact objects of a layout as detections (evidence 1 for the true shape, 0 else)."""
    return [Detection(p.shape, p.colour, p.cx, p.cy, {s: float(s == p.shape) for s in SHAPES}) for p in layout]


def ground_truth(
    graph: SceneGraph, layout: Sequence[Placed], image_size: tuple[int, int] = (IMAGE_SIZE, IMAGE_SIZE)
) -> list[AtomResult]:
    """The exact atom results for a layout (what a perfect perception would give)."""
    return evaluate(graph, detections_from_layout(layout), image_size)

"""The world's prompt grammar: scenes <-> GenEval 2-style prompts, and scenes -> scene graphs.

Grammar (every world prompt, and nothing else, parses)::

    prompt    := entity (connector entity)*          at most 3 entities
    entity    := number [colour] shape[s]            "a red circle", "three squares"
    number    := a | an | two | three | four          ("an" only before a vowel: "an orange ...")
    connector := "and" | "," | relation              "left of" | "right of" | "above" | "below"

A relation connector links the entity just before it to the entity just after it, which is how
docs/design.md §3.1 (and GenEval 2) read chains: "A left of B above C" is (A left of B), (B above C).
Three entities joined only by "and" are written "A, B and C".

:func:`scene_to_graph` builds the docs/design.md §3.1 scene graph straight from the scene (no parsing,
so the world never depends on a decomposer): per entity in prompt order its ``object``, ``count``
and (when a colour is given) ``attribute`` atoms, then one ``relation`` atom per relation, each
with its GenEval 2 question. Atom counts run 2 (one colourless entity) to 8.
"""

from __future__ import annotations

import random
import re
from typing import Iterable

from cast_core.scene_graph import Atom, Entity, SceneGraph

from cast_shapes.world import COLOURS, COUNTS, MAX_OBJECTS, RELATIONS, SHAPES, ObjectSpec, Relation, Scene

NUMBER_WORDS: dict[int, str] = {1: "a", 2: "two", 3: "three", 4: "four"}
_WORD_NUMBERS: dict[str, int] = {"a": 1, "an": 1, "two": 2, "three": 3, "four": 4}
MAX_ENTITIES = 3
MIN_ATOMS, MAX_ATOMS = 2, 8


class PromptError(ValueError):
    """Text that is not a prompt of the shapes world; the message names the span."""


# -- scene -> text ------------------------------------------------------------------------------
def plural(noun: str, count: int) -> str:
    return noun if count == 1 else noun + "s"


def entity_phrase(e: ObjectSpec) -> str:
    """ "two red circles", "an orange square", "a triangle"."""
    words = [e.colour, plural(e.shape, e.count)] if e.colour else [plural(e.shape, e.count)]
    number = NUMBER_WORDS[e.count]
    if number == "a" and words[0][0] in "aeiou":
        number = "an"
    return " ".join([number, *words])


def _connectors(scene: Scene) -> list[str]:
    """The word(s) between entity i and i+1: a relation phrase or "and" (checks the chain form)."""
    n = len(scene.entities)
    conns = ["and"] * (n - 1)
    for r in scene.relations:
        if r.object_index != r.subject_index + 1 or not 0 <= r.subject_index < n - 1:
            raise PromptError(f"relation {r} cannot be worded: a prompt relates each entity to the one right after it")
        if conns[r.subject_index] != "and":
            raise PromptError(f"two relations between entities {r.subject_index} and {r.object_index}")
        conns[r.subject_index] = r.relation
    return conns


def prompt_for(scene: Scene) -> str:
    """The canonical prompt of a scene: "two red circles left of a blue square"."""
    conns = _connectors(scene)
    text = entity_phrase(scene.entities[0])
    for i, (conn, e) in enumerate(zip(conns, scene.entities[1:])):
        later_and = "and" in conns[i + 1 :]
        sep = ", " if conn == "and" and later_and else f" {conn} "
        text += sep + entity_phrase(e)
    return text


# -- text -> scene ------------------------------------------------------------------------------
_TOKEN = re.compile(r",|[a-z]+")


def canonical_prompt(text: str) -> str:
    """Lower case, single spaces, no space before commas, no trailing period."""
    text = " ".join(text.lower().strip().rstrip(".").split())
    return text.replace(" ,", ",")


def parse_prompt(text: str) -> Scene:
    """The scene a world prompt describes. Strict: raises :class:`PromptError` naming the first
    span it cannot read (this is the world's own grammar, not an open-vocabulary decomposer)."""
    canon = canonical_prompt(text)
    if re.search(r"[^a-z, ]", canon):
        bad = re.search(r"[^a-z, ]+", canon).group(0)
        raise PromptError(f"{text!r}: unexpected characters {bad!r}")
    tokens = _TOKEN.findall(canon)
    pos = 0

    def where() -> str:
        return " ".join(tokens[pos : pos + 3]) or "(end of prompt)"

    def entity() -> ObjectSpec:
        nonlocal pos
        if pos >= len(tokens) or tokens[pos] not in _WORD_NUMBERS:
            raise PromptError(f"{text!r}: expected a number word (a, an, two, three, four) at {where()!r}")
        count = _WORD_NUMBERS[tokens[pos]]
        pos += 1
        colour = None
        if pos < len(tokens) and tokens[pos] in COLOURS:
            colour = tokens[pos]
            pos += 1
        word = tokens[pos] if pos < len(tokens) else ""
        noun = word[:-1] if count > 1 and word.endswith("s") else word
        if noun not in SHAPES or (count == 1) != (word == noun):
            want = "/".join(plural(s, count) for s in SHAPES)
            raise PromptError(f"{text!r}: expected {'a colour or ' if colour is None else ''}{want} at {where()!r}")
        pos += 1
        return ObjectSpec(noun, colour, count)

    entities = [entity()]
    relations: list[Relation] = []
    while pos < len(tokens):
        if tokens[pos] in (",", "and"):
            pos += 1
        else:
            for rel in RELATIONS:
                words = rel.split()
                if tokens[pos : pos + len(words)] == words:
                    relations.append(Relation(len(entities) - 1, rel, len(entities)))
                    pos += len(words)
                    break
            else:
                raise PromptError(
                    f"{text!r}: expected 'and', ',' or a relation ({', '.join(RELATIONS)}) at {where()!r}"
                )
        entities.append(entity())
    return Scene(tuple(entities), tuple(relations))


# -- scene -> scene graph -----------------------------------------------------------------------
def questions(scene: Scene) -> list[str]:
    """GenEval 2 questions of every atom, in :func:`scene_to_graph`'s atom order."""
    return [a.question for a in scene_to_graph(scene).atoms]


def _the(e: ObjectSpec) -> str:
    return f"the {plural(e.shape, e.count)}"


def scene_to_graph(scene: Scene, prompt: str | None = None) -> SceneGraph:
    """The docs/design.md §3.1 scene graph of ``scene`` (with questions), validated.

    Questions use GenEval 2's templates verbatim, without colours ("Are the circles left of the
    square?"), also when two entities share a noun; the oracle resolves which objects each
    entity means (see :mod:`cast_shapes.semantics`).
    """
    prompt = prompt_for(scene) if prompt is None else prompt
    entities = [Entity(f"e{i + 1}", e.shape, e.count) for i, e in enumerate(scene.entities)]
    atoms: list[Atom] = []
    object_atom: dict[int, str] = {}

    def new_id() -> str:
        return f"a{len(atoms) + 1}"

    for i, e in enumerate(scene.entities):
        eid, many = f"e{i + 1}", plural(e.shape, 2)
        obj = new_id()
        object_atom[i] = obj
        atoms.append(Atom(obj, "object", eid, (), question=f"Are there any {many} in the image?"))
        atoms.append(Atom(new_id(), "count", eid, (obj,), value=e.count, question=f"How many {many} are in the image?"))
        if e.colour is not None:
            q = f"Is the {e.shape} {e.colour}?" if e.count == 1 else f"Are the {many} {e.colour}?"
            atoms.append(Atom(new_id(), "attribute", eid, (obj,), value=e.colour, question=q))
    for r in scene.relations:
        s, o = scene.entities[r.subject_index], scene.entities[r.object_index]
        verb = "Is" if s.count == 1 else "Are"
        atoms.append(
            Atom(
                new_id(),
                "relation",
                f"e{r.subject_index + 1}",
                (object_atom[r.subject_index], object_atom[r.object_index]),
                value=r.relation,
                other=f"e{r.object_index + 1}",
                skill="position",
                question=f"{verb} {_the(s)} {r.relation} {_the(o)}?",
            )
        )
    return SceneGraph(prompt, tuple(entities), tuple(atoms)).validate()


def graph_for_prompt(prompt: str) -> SceneGraph:
    """Parse a world prompt and build its graph; ``graph.prompt`` is ``prompt`` as given."""
    return scene_to_graph(parse_prompt(prompt), prompt)


# -- random prompts -----------------------------------------------------------------------------
def structures(atoms: int) -> list[tuple[int, int, int]]:
    """``(entities, colours, relations)`` combinations with exactly ``atoms`` atoms (the world's
    prompts stop at ``MAX_ATOMS``, though three entities could hold up to 10)."""
    out: list[tuple[int, int, int]] = []
    if not MIN_ATOMS <= atoms <= MAX_ATOMS:
        return out
    for n in range(1, MAX_ENTITIES + 1):
        for c in range(n + 1):
            r = atoms - 2 * n - c
            if 0 <= r <= n - 1:
                out.append((n, c, r))
    return out


def sample_scene(
    rng: random.Random | int | None = None,
    atoms: int | None = None,
    *,
    max_objects: int = MAX_OBJECTS,
    counts: Iterable[int] = COUNTS,
    max_tries: int = 1000,
) -> Scene:
    """A random valid scene with ``atoms`` atoms (uniform in 2..8 when None).

    The structure (entities, colours, relations) is drawn uniformly among those giving that atom
    count, then shapes, colours, counts and relations uniformly, rejecting scenes that break the
    world's rules (:meth:`Scene.problems`) or hold more than ``max_objects`` objects.
    """
    rng = rng if isinstance(rng, random.Random) else random.Random(rng)
    if atoms is None:
        atoms = rng.randint(MIN_ATOMS, MAX_ATOMS)
    options = structures(atoms)
    if not options:
        raise ValueError(f"no world prompt has {atoms} atoms; atom counts run {MIN_ATOMS}..{MAX_ATOMS}")
    counts = tuple(counts)
    for _ in range(max_tries):
        n, c, r = rng.choice(options)
        coloured = set(rng.sample(range(n), c))
        entities = tuple(
            ObjectSpec(rng.choice(SHAPES), rng.choice(COLOURS) if i in coloured else None, rng.choice(counts))
            for i in range(n)
        )
        gaps = sorted(rng.sample(range(n - 1), r))
        relations = tuple(Relation(g, rng.choice(RELATIONS), g + 1) for g in gaps)
        scene = Scene(entities, relations)
        if scene.n_objects <= max_objects and not scene.problems():
            return scene
    raise ValueError(f"could not sample a valid scene with {atoms} atoms and <= {max_objects} objects")

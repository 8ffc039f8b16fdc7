"""The Causal Scene Graph: a prompt broken into verifiable atoms with parent links.

This module owns the stable JSON contract of docs/design.md §3.1 (what `cast decompose --json` prints and
what every decomposer returns) and its validation. Validation is strict and names the offending
atom, because a silently wrong graph turns into silently wrong advantages much later.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from cast_core.errors import SceneGraphError

ATOM_KINDS = ("object", "count", "attribute", "relation")
RELATION_SKILLS = ("position", "verb")

_ENTITY_KEYS = {"id", "noun", "count"}
_ATOM_KEYS = {"id", "kind", "entity", "value", "other", "skill", "parents", "question"}
_GRAPH_KEYS = {"prompt", "entities", "atoms"}


@dataclass(frozen=True)
class Entity:
    """A thing the prompt talks about: ``Entity("e1", "circle", 2)`` for "two circles"."""

    id: str
    noun: str
    count: int = 1

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "noun": self.noun, "count": self.count}


@dataclass(frozen=True)
class Atom:
    """One independently verifiable claim about the image.

    ``value`` holds the count (int) of a count atom, the adjective of an attribute atom and the
    relation phrase of a relation atom; ``other`` is a relation's second entity.
    """

    id: str
    kind: str
    entity: str
    parents: tuple[str, ...] = ()
    value: Any = None
    other: str | None = None
    skill: str | None = None
    question: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "kind": self.kind, "entity": self.entity}
        for key in ("value", "other", "skill"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        out["parents"] = list(self.parents)
        if self.question is not None:
            out["question"] = self.question
        return out


@dataclass(frozen=True)
class SceneGraph:
    """Atoms and entities of one prompt. Construct freely, then call :meth:`validate`
    (``from_dict`` / ``from_json`` validate for you)."""

    prompt: str
    entities: tuple[Entity, ...] = ()
    atoms: tuple[Atom, ...] = ()
    _index: dict[str, Atom] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "entities", tuple(self.entities))
        object.__setattr__(self, "atoms", tuple(self.atoms))
        self._index.update({a.id: a for a in self.atoms})

    # -- access -----------------------------------------------------------------------------
    def atom(self, atom_id: str) -> Atom:
        try:
            return self._index[atom_id]
        except KeyError:
            raise SceneGraphError(
                f"no atom {atom_id!r} in the graph of {self.prompt!r}; atoms are {', '.join(self.atom_ids) or '(none)'}"
            ) from None

    @property
    def atom_ids(self) -> list[str]:
        return [a.id for a in self.atoms]

    def entity(self, entity_id: str) -> Entity:
        for e in self.entities:
            if e.id == entity_id:
                return e
        raise SceneGraphError(f"no entity {entity_id!r} in the graph of {self.prompt!r}")

    def parent_indices(self) -> list[list[int]]:
        """Parents as positions in ``atoms`` — the form the advantage maths consumes."""
        pos = {a.id: i for i, a in enumerate(self.atoms)}
        return [[pos[p] for p in a.parents] for a in self.atoms]

    def topological_order(self) -> list[Atom]:
        """Atoms with every parent before its children (stable w.r.t. the stored order)."""
        self.validate()
        done: set[str] = set()
        order: list[Atom] = []

        def visit(a: Atom) -> None:
            if a.id in done:
                return
            for p in a.parents:
                visit(self._index[p])
            done.add(a.id)
            order.append(a)

        for a in self.atoms:
            visit(a)
        return order

    # -- validation -------------------------------------------------------------------------
    def validate(self) -> "SceneGraph":
        """Check ids, kinds, references and acyclicity; raise :class:`SceneGraphError` naming
        the first offending atom. Returns ``self`` so it can be chained."""
        where = f"scene graph of {self.prompt!r}"
        entity_ids: set[str] = set()
        for e in self.entities:
            if not isinstance(e.id, str) or not e.id:
                raise SceneGraphError(f"{where}: entity with empty or non-string id {e.id!r}")
            if e.id in entity_ids:
                raise SceneGraphError(f"{where}: entity id {e.id!r} is used twice")
            entity_ids.add(e.id)
            if not isinstance(e.noun, str) or not e.noun.strip():
                raise SceneGraphError(f"{where}: entity {e.id!r} has no noun")
            if not _is_count(e.count):
                raise SceneGraphError(f"{where}: entity {e.id!r} has count {e.count!r}; expected an integer >= 0")

        atom_ids: set[str] = set()
        for a in self.atoms:
            if not isinstance(a.id, str) or not a.id:
                raise SceneGraphError(f"{where}: atom with empty or non-string id {a.id!r}")
            if a.id in atom_ids:
                raise SceneGraphError(f"{where}: atom id {a.id!r} is used twice")
            if a.id in entity_ids:
                raise SceneGraphError(f"{where}: atom id {a.id!r} is also an entity id")
            atom_ids.add(a.id)

        for a in self.atoms:
            self._validate_atom(a, entity_ids, atom_ids, where)
        self._check_acyclic(where)
        return self

    def _validate_atom(self, a: Atom, entity_ids: set[str], atom_ids: set[str], where: str) -> None:
        name = f"{where}: atom {a.id!r}"
        if a.kind not in ATOM_KINDS:
            raise SceneGraphError(f"{name} has kind {a.kind!r}; expected one of {', '.join(ATOM_KINDS)}")
        if a.entity not in entity_ids:
            raise SceneGraphError(
                f"{name} refers to entity {a.entity!r}, which does not exist "
                f"(entities: {', '.join(sorted(entity_ids)) or 'none'})"
            )
        for p in a.parents:
            if p not in atom_ids:
                raise SceneGraphError(
                    f"{name} has parent {p!r}, which does not exist (atoms: {', '.join(self.atom_ids)})"
                )
            if p == a.id:
                raise SceneGraphError(f"{name} lists itself as its parent")
        if a.kind == "count" and not _is_count(a.value):
            raise SceneGraphError(f"{name} is a count atom with value {a.value!r}; expected an integer >= 0")
        if a.kind in ("attribute", "relation") and (not isinstance(a.value, str) or not a.value):
            raise SceneGraphError(f"{name} is a {a.kind} atom without a text value")
        if a.kind == "relation":
            if a.other not in entity_ids:
                raise SceneGraphError(f"{name} is a relation whose 'other' entity {a.other!r} does not exist")
            if a.skill not in RELATION_SKILLS:
                raise SceneGraphError(
                    f"{name} is a relation with skill {a.skill!r}; expected one of {', '.join(RELATION_SKILLS)}"
                )
        elif a.other is not None or a.skill is not None:
            raise SceneGraphError(f"{name} is a {a.kind} atom; only relations take 'other'/'skill'")

    def _check_acyclic(self, where: str) -> None:
        state: dict[str, int] = {}  # 1 = on the current path, 2 = finished
        for root in self.atoms:
            if state.get(root.id):
                continue
            stack: list[tuple[str, int]] = [(root.id, 0)]
            path: list[str] = []
            while stack:
                node, i = stack.pop()
                if i == 0:
                    state[node] = 1
                    path.append(node)
                parents = self._index[node].parents
                if i < len(parents):
                    stack.append((node, i + 1))
                    nxt = parents[i]
                    if state.get(nxt) == 1:
                        cycle = path[path.index(nxt) :] + [nxt]
                        raise SceneGraphError(
                            f"{where}: atoms form a cycle through parent links: "
                            f"{' -> '.join(cycle)} (atom {nxt!r} is its own ancestor)"
                        )
                    if not state.get(nxt):
                        stack.append((nxt, 0))
                else:
                    state[node] = 2
                    path.pop()

    # -- JSON -------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "prompt": self.prompt,
            "entities": [e.to_dict() for e in self.entities],
            "atoms": [a.to_dict() for a in self.atoms],
        }

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "SceneGraph":
        """Parse and validate the docs/design.md §3.1 form; unknown keys are errors (they are typos)."""
        if not isinstance(data, Mapping):
            raise SceneGraphError(f"a scene graph must be a JSON object, got {type(data).__name__}")
        _no_unknown_keys(data, _GRAPH_KEYS, "scene graph")
        prompt = data.get("prompt")
        if not isinstance(prompt, str):
            raise SceneGraphError("scene graph: 'prompt' must be a string")
        entities = []
        for i, e in enumerate(_list(data, "entities", prompt)):
            if not isinstance(e, Mapping):
                raise SceneGraphError(f"scene graph of {prompt!r}: entities[{i}] is not an object")
            _no_unknown_keys(e, _ENTITY_KEYS, f"entity {e.get('id', i)!r} of {prompt!r}")
            entities.append(Entity(id=e.get("id"), noun=e.get("noun"), count=e.get("count", 1)))
        atoms = []
        for i, a in enumerate(_list(data, "atoms", prompt)):
            if not isinstance(a, Mapping):
                raise SceneGraphError(f"scene graph of {prompt!r}: atoms[{i}] is not an object")
            label = f"atom {a.get('id', i)!r} of {prompt!r}"
            _no_unknown_keys(a, _ATOM_KEYS, label)
            parents = a.get("parents", [])
            if not isinstance(parents, list) or not all(isinstance(p, str) for p in parents):
                raise SceneGraphError(f"{label}: 'parents' must be a list of atom ids")
            atoms.append(
                Atom(
                    id=a.get("id"),
                    kind=a.get("kind"),
                    entity=a.get("entity"),
                    parents=tuple(parents),
                    value=a.get("value"),
                    other=a.get("other"),
                    skill=a.get("skill"),
                    question=a.get("question"),
                )
            )
        return cls(prompt=prompt, entities=tuple(entities), atoms=tuple(atoms)).validate()

    @classmethod
    def from_json(cls, text: str) -> "SceneGraph":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise SceneGraphError(
                f"scene graph JSON is invalid at line {err.lineno}, column {err.colno}: {err.msg}"
            ) from None
        return cls.from_dict(data)


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _list(data: Mapping[str, Any], key: str, prompt: str) -> Iterable[Any]:
    value = data.get(key, [])
    if not isinstance(value, list):
        raise SceneGraphError(f"scene graph of {prompt!r}: {key!r} must be a list")
    return value


def _no_unknown_keys(obj: Mapping[str, Any], allowed: set[str], label: str) -> None:
    unknown = sorted(set(obj) - allowed)
    if unknown:
        raise SceneGraphError(
            f"{label}: unknown field(s) {', '.join(map(repr, unknown))}; allowed: {', '.join(sorted(allowed))}"
        )


def prompt_level_graph(prompt: str) -> SceneGraph:
    """One atom for the whole prompt, asked as VQAScore asks it: the graph a prompt-level scorer
    (pickscore, clip-score) scores, and the ``auto`` decomposer's last resort."""
    text = " ".join(prompt.split())
    return SceneGraph(
        prompt=prompt,
        entities=(Entity(id="e1", noun="scene", count=1),),
        atoms=(Atom(id="a1", kind="object", entity="e1", question=f'Does this image show "{text}"?'),),
    ).validate()

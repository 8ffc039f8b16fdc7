"""Turn parsed noun phrases and relations into the docs/design.md §3.1 scene graph.

Kept apart from any one parser so every decomposer (template, a GenEval 2 file reader, an LLM)
numbers ids, orders atoms, links parents and words questions identically; a scorer or a cached
graph file can then rely on ``a2`` meaning the same thing whichever decomposer made it.

The layout (docs/design.md §3.1):

- entities ``e1``, ``e2`` … in the order given;
- atoms ``a1``, ``a2`` …: for each entity its ``object`` atom, its ``count`` atom (always, also for
  a count of one), then one ``attribute`` atom per attribute in the order given; after all
  entities, one ``relation`` atom per relation in the order given;
- parents: a count or attribute atom depends on its entity's object atom; a relation atom on the
  object atoms of both its ends (subject first);
- every atom carries its GenEval 2 question (:mod:`cast_rewards.questions`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from cast_core.scene_graph import Atom, Entity, SceneGraph

from cast_rewards.questions import (
    attribute_question,
    count_question,
    object_question,
    relation_question,
)


@dataclass(frozen=True)
class NounPhrase:
    """``two big red circles`` → ``NounPhrase("circle", 2, ("big", "red"))`` (noun as a lemma)."""

    noun: str
    count: int
    attributes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Relation:
    """``subject`` and ``other`` index the noun-phrase list; ``phrase`` is the canonical form."""

    subject: int
    phrase: str
    other: int
    skill: str  # "position" or "verb"


@dataclass
class _Numberer:
    """Hands out ``a1``, ``a2`` … in the order atoms are created."""

    atoms: list[Atom] = field(default_factory=list)

    def add(self, **kw) -> str:
        atom_id = f"a{len(self.atoms) + 1}"
        self.atoms.append(Atom(id=atom_id, **kw))
        return atom_id


def build_graph(prompt: str, phrases: Sequence[NounPhrase], relations: Sequence[Relation] = ()) -> SceneGraph:
    """The validated scene graph of ``prompt`` with the layout described in the module docstring."""
    entities = tuple(Entity(id=f"e{i + 1}", noun=np.noun, count=np.count) for i, np in enumerate(phrases))
    out = _Numberer()
    object_ids: list[str] = []
    for ent, np in zip(entities, phrases):
        obj = out.add(kind="object", entity=ent.id, question=object_question(np.noun))
        object_ids.append(obj)
        out.add(
            kind="count",
            entity=ent.id,
            parents=(obj,),
            value=np.count,
            question=count_question(np.noun),
        )
        for attr in np.attributes:
            out.add(
                kind="attribute",
                entity=ent.id,
                parents=(obj,),
                value=attr,
                question=attribute_question(np.noun, np.count, attr),
            )
    for rel in relations:
        subj, other = phrases[rel.subject], phrases[rel.other]
        out.add(
            kind="relation",
            entity=entities[rel.subject].id,
            parents=(object_ids[rel.subject], object_ids[rel.other]),
            value=rel.phrase,
            other=entities[rel.other].id,
            skill=rel.skill,
            question=relation_question(subj.noun, subj.count, rel.phrase, other.noun, other.count),
        )
    return SceneGraph(prompt=prompt, entities=entities, atoms=tuple(out.atoms)).validate()

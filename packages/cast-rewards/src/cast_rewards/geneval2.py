"""The ``geneval2`` decomposer: GenEval 2's own atoms, read from a user-supplied copy of its
``geneval2_data.jsonl`` (CC BY-NC 4.0: cast does not ship it), as docs/design.md §3.1 scene graphs.

Each line holds ``prompt``, ``atom_count``, ``vqa_list`` (``[question, answer]`` pairs) and
``skills`` (one per pair). GenEval 2 asks, per object and in this order, ``How many {objs} are in
the image?`` (count), ``Is/Are the {obj} {attr}?`` (attribute), ``Are there any {objs} in the
image?`` (object), then ``Is/Are the {A} {relation} the {B}?`` (position / verb). The file has no
parent field; the order implies one, as DSG's dependencies would: an object's existence atom is the
parent of its count and attribute atoms, and a relation's parents are both ends' existence atoms.

Atoms keep the file's order and its original questions, so scores line up with GenEval 2's own
lists. A count question opens a new entity; attribute and existence questions belong to the entity
opened last and must name it; a relation names its two ends by noun (an error if two objects share
it); relation phrases are stored in the template decomposer's canonical form; every non-count
question must be answered Yes. A line that does not follow these templates is an error naming the
file, the line and the question.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cast_core.errors import ConfigError, InputError
from cast_core.scene_graph import Atom, Entity, SceneGraph
from cast_rewards.errors import SceneGraphError
from cast_rewards.inflection import singularize
from cast_rewards.lexicon import COUNT_WORDS

__all__ = ["GenEval2Decomposer", "GenEval2Record", "MissingDataError", "read_geneval2", "graph_from_record"]


class MissingDataError(InputError, FileNotFoundError):
    """The GenEval 2 file is not there (a ``FileNotFoundError`` too, for callers that catch that)."""


NUMBERS = {w: n for w, n in COUNT_WORDS.items() if w not in ("a", "an")} | {"zero": 0}  # GenEval 2's answer words
SKILLS = ("object", "count", "attribute", "position", "verb")

_COUNT = re.compile(r"^how many (?P<noun>.+?) are (?:there )?in the image\?$", re.I)
_EXISTS = re.compile(r"^(?:are|is) there (?:any|a|an) (?P<noun>.+?) in the image\?$", re.I)
_RELATION = re.compile(r"^(?:is|are) the (?P<a>.+?) (?P<rel>{rels}) the (?P<b>.+?)\?$", re.I)
_ATTRIBUTE = re.compile(r"^(?:is|are) the (?P<noun>.+) (?P<attr>[\w-]+)\?$", re.I)


@dataclass(frozen=True)
class GenEval2Record:
    """One line of the file: where it came from and what it says."""

    prompt: str
    atom_count: int
    vqa: tuple[tuple[str, str], ...]
    skills: tuple[str, ...]
    source: str  # "file:line"


def read_geneval2(path: str | Path) -> list[GenEval2Record]:
    path = Path(path)
    if not path.is_file():
        raise MissingDataError(
            f"GenEval 2 data {path} {'is a directory' if path.is_dir() else 'does not exist'}; download "
            "geneval2_data.jsonl from facebookresearch/GenEval2 (its licence forbids cast shipping it)"
        )
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:  # a binary file (a zip, a parquet, a model) given as the JSONL
        raise SceneGraphError(
            f"{path} is not a text file (byte {err.start} is not UTF-8); the geneval2 decomposer reads "
            "geneval2_data.jsonl, one JSON object a line"
        ) from None
    records = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as err:
            raise SceneGraphError(f"{where}: not valid JSON ({err.msg} at column {err.colno})") from None
        if not isinstance(raw, dict):
            raise SceneGraphError(f"{where}: a GenEval 2 line is a JSON object, not {type(raw).__name__}")
        missing = [k for k in ("prompt", "atom_count", "vqa_list", "skills") if k not in raw]
        if missing:
            raise SceneGraphError(
                f"{where}: missing key(s) {', '.join(missing)}; a GenEval 2 line has prompt, "
                "atom_count, vqa_list and skills"
            )
        pairs, skills = raw["vqa_list"], raw["skills"]
        if (
            not isinstance(pairs, list)
            or not all(isinstance(p, list) and len(p) == 2 for p in pairs)
            or not isinstance(skills, list)
            or isinstance(raw["atom_count"], bool)
            or not isinstance(raw["atom_count"], int)
        ):
            raise SceneGraphError(
                f"{where}: vqa_list must be [question, answer] pairs, skills a list and atom_count a number"
            )
        vqa = tuple((str(q), str(a)) for q, a in pairs)
        skills = tuple(str(s) for s in skills)
        if len(skills) != len(vqa):
            raise SceneGraphError(f"{where}: {len(vqa)} questions but {len(skills)} skills")
        bad = [s for s in skills if s not in SKILLS]
        if bad:
            raise SceneGraphError(f"{where}: unknown skill {bad[0]!r}; expected one of {', '.join(SKILLS)}")
        records.append(GenEval2Record(str(raw["prompt"]), int(raw["atom_count"]), vqa, skills, where))
    return records


def _noun(phrase: str) -> str:
    words = phrase.strip().lower().split()
    return " ".join(words[:-1] + [singularize(words[-1])]) if words else ""


def graph_from_record(record: GenEval2Record, relations: tuple[str, ...]) -> SceneGraph:
    from cast_rewards.lexicon import SPATIAL_PHRASES

    canonical = dict(SPATIAL_PHRASES)  # "to the left of" is stored as "left of", as the template decomposer does
    rel_pattern = re.compile(
        _RELATION.pattern.format(rels="|".join(re.escape(r) for r in sorted(relations, key=len, reverse=True))), re.I
    )
    entities: list[dict[str, Any]] = []
    atoms: list[dict[str, Any]] = []

    def fail(question: str, why: str) -> SceneGraphError:
        return SceneGraphError(f"{record.source}: question {question!r}: {why}")

    def current(question: str, noun: str) -> dict[str, Any]:
        """The object opened last, which must be the one the question names."""
        if not entities:
            raise fail(question, "comes before any 'How many …' question, so its object is unknown")
        if entities[-1]["noun"] != _noun(noun):
            raise fail(
                question,
                f"names {noun!r} but follows the questions about {entities[-1]['noun']!r}; "
                "GenEval 2 asks count, attributes and existence of one object in a row",
            )
        return entities[-1]

    def by_noun(noun: str, question: str) -> dict[str, Any]:
        matches = [e for e in entities if e["noun"] == _noun(noun)]
        if len(matches) > 1:
            raise fail(question, f"two objects are called {_noun(noun)!r}, so the relation's end is ambiguous")
        if not matches:
            raise fail(question, f"names {noun!r}, which no 'How many …' question introduced")
        return matches[0]

    for n, ((question, answer), skill) in enumerate(zip(record.vqa, record.skills), 1):
        aid = f"a{n}"
        if skill != "count" and answer.strip().lower() != "yes":
            raise fail(question, f"is answered {answer!r}; GenEval 2's {skill} questions are answered Yes")
        if skill == "count":
            m = _COUNT.match(question)
            if not m or answer.lower() not in NUMBERS:
                raise fail(
                    question, f"expected 'How many … are in the image?' answered by a number word, got {answer!r}"
                )
            entity = {
                "id": f"e{len(entities) + 1}",
                "noun": _noun(m["noun"]),
                "count": NUMBERS[answer.lower()],
                "exists": None,
                "children": [],
            }
            entities.append(entity)
            atoms.append(
                {"id": aid, "kind": "count", "entity": entity["id"], "value": entity["count"], "question": question}
            )
            entity["children"].append(len(atoms) - 1)
        elif skill == "object":
            m = _EXISTS.match(question)
            if not m:
                raise fail(question, "expected 'Are there any … in the image?'")
            entity = current(question, m["noun"])
            entity["exists"] = aid
            atoms.append({"id": aid, "kind": "object", "entity": entity["id"], "question": question})
        elif skill == "attribute":
            m = _ATTRIBUTE.match(question)
            if not m:
                raise fail(question, "expected 'Is/Are the … {attribute}?'")
            entity = current(question, m["noun"])
            atoms.append(
                {
                    "id": aid,
                    "kind": "attribute",
                    "entity": entity["id"],
                    "value": m["attr"].lower(),
                    "question": question,
                }
            )
            entity["children"].append(len(atoms) - 1)
        else:  # position / verb
            m = rel_pattern.match(question)
            if not m:
                raise fail(
                    question,
                    f"expected 'Is/Are the A {{relation}} the B?' with a relation among {', '.join(relations)}",
                )
            a, b = by_noun(m["a"], question), by_noun(m["b"], question)
            atoms.append(
                {
                    "id": aid,
                    "kind": "relation",
                    "entity": a["id"],
                    "other": b["id"],
                    "skill": skill,
                    "value": canonical.get(m["rel"].lower(), m["rel"].lower()),
                    "question": question,
                    "ends": (a, b),
                }
            )
    for e in entities:
        if e["exists"] is None:
            raise SceneGraphError(
                f"{record.source}: object {e['noun']!r} has no 'Are there any …' question, so its "
                "count and attributes have no parent"
            )
        for i in e["children"]:
            atoms[i]["parents"] = (e["exists"],)
    for atom in atoms:
        if "ends" in atom:
            a, b = atom.pop("ends")
            atom["parents"] = tuple(dict.fromkeys((a["exists"], b["exists"])))
    graph = SceneGraph(
        prompt=record.prompt,
        entities=tuple(Entity(id=e["id"], noun=e["noun"], count=e["count"]) for e in entities),
        atoms=tuple(Atom(**atom) for atom in atoms),
    )
    return graph.validate()


class GenEval2Decomposer:
    """Scene graphs of the prompts in ``data`` (a GenEval 2 JSONL file): ``decompose(prompt)``
    returns that prompt's graph and refuses a prompt the file does not hold."""

    def __init__(self, data: str | Path | None = None, relations: tuple[str, ...] | None = None):
        if data is None:
            raise ConfigError(
                "the geneval2 decomposer needs data= (geneval2_data.jsonl; e.g. --set "
                "decomposer_kwargs.data=FILE or cast eval --benchmark geneval2 --data FILE)"
            )
        from cast_rewards.lexicon import SPATIAL_PHRASES, VERB_PHRASES

        self.data = Path(data)
        self.relations = tuple(relations) if relations else (*SPATIAL_PHRASES, *VERB_PHRASES)
        self.records = {r.prompt: r for r in read_geneval2(self.data)}
        self._graphs: dict[str, SceneGraph] = {}

    @property
    def prompts(self) -> list[str]:
        return list(self.records)

    def record(self, prompt: str) -> GenEval2Record:
        if prompt not in self.records:
            raise SceneGraphError(
                f"prompt {prompt!r} is not in {self.data}; the geneval2 decomposer reads only "
                "that file's prompts (use the template decomposer for others)"
            )
        return self.records[prompt]

    def decompose(self, prompt: str) -> SceneGraph:
        if prompt not in self._graphs:
            self._graphs[prompt] = graph_from_record(self.record(prompt), self.relations)
        return self._graphs[prompt]

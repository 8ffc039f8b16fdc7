"""The closed word lists of the template grammar: count words, relation phrases, separators.

Everything else in a prompt is open vocabulary (any adjective, any noun), so these lists are what
decides where a noun phrase ends and a relation begins. They are data, kept apart from the parser,
so a user can see and extend exactly what is understood.

- **Count words**: ``a``/``an`` and ``one`` … ``ten`` (:data:`COUNT_WORDS`).
- **Spatial phrases** (skill ``position``), each with the canonical form stored in the graph
  (:data:`SPATIAL_PHRASES`): left of, to the left of → ``left of``; right of, to the right of →
  ``right of``; above; below; on top of; under; in front of; behind; next to; near.
- **Verb phrases** (skill ``verb``, stored as written, :data:`VERB_PHRASES`): GenEval 2's three
  (playing with, chasing, jumping over) and a few common ones.

:class:`Lexicon` adds user phrases on top of these defaults and matches phrases in a token stream,
longest phrase first (so "to the left of" wins over a user phrase "to").

Noun number (plural ↔ singular lemma) lives in :mod:`cast_rewards.inflection` and is re-exported
here for convenience.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence, Union

from cast_rewards.errors import LexiconError
from cast_rewards.inflection import pluralize, singularize

__all__ = [
    "COUNT_WORDS",
    "SPATIAL_PHRASES",
    "VERB_PHRASES",
    "SEPARATOR_WORDS",
    "Lexicon",
    "RelationMatch",
    "PhraseSpec",
    "singularize",
    "pluralize",
]

COUNT_WORDS: dict[str, int] = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
}

SPATIAL_PHRASES: dict[str, str] = {
    "left of": "left of",
    "to the left of": "left of",
    "right of": "right of",
    "to the right of": "right of",
    "above": "above",
    "below": "below",
    "on top of": "on top of",
    "under": "under",
    "in front of": "in front of",
    "behind": "behind",
    "next to": "next to",
    "near": "near",
}

VERB_PHRASES: tuple[str, ...] = (
    "playing with",
    "chasing",
    "jumping over",
    "holding",
    "riding",
    "eating",
    "carrying",
    "pushing",
    "pulling",
    "looking at",
    "sitting on",
    "standing on",
    "following",
    "watching",
    "hugging",
)

# Words that join clauses; "," is a separator token of its own.
SEPARATOR_WORDS = frozenset({"and"})

# What a user may pass for extra phrases: phrases (stored as written) or phrase -> canonical form.
PhraseSpec = Union[Iterable[str], Mapping[str, str], str, None]

_WORD = re.compile(r"^[^\W_]+(?:['’-][^\W_]+)*$")


@dataclass(frozen=True)
class RelationMatch:
    """A relation phrase found in a token stream: ``length`` tokens long, stored as ``canonical``."""

    phrase: str
    canonical: str
    skill: str  # "position" or "verb"
    length: int


def _normalise(phrase: str, what: str) -> tuple[str, ...]:
    if not isinstance(phrase, str):
        raise LexiconError(f"{what} phrase {phrase!r} is not a string")
    words = tuple(phrase.lower().split())
    if not words:
        raise LexiconError(f"{what} phrase {phrase!r} is empty")
    for w in words:
        if not _WORD.match(w):
            raise LexiconError(
                f"{what} phrase {phrase!r} has the word {w!r}; phrases are plain words "
                f"(letters, digits, inner hyphens or apostrophes) separated by spaces"
            )
        if w in COUNT_WORDS or w in SEPARATOR_WORDS:
            raise LexiconError(
                f"{what} phrase {phrase!r} contains {w!r}, which the grammar reads as a "
                f"{'count word' if w in COUNT_WORDS else 'separator'}"
            )
    return words


def _as_mapping(spec: PhraseSpec, what: str) -> dict[str, str]:
    if spec is None:
        return {}
    if isinstance(spec, str):  # a lone phrase, not an iterable of characters
        return {spec: spec}
    if isinstance(spec, Mapping):
        return dict(spec)
    try:
        return {p: p for p in spec}
    except TypeError:
        raise LexiconError(
            f"{what} phrases must be a list of phrases or a mapping phrase -> canonical form, got {type(spec).__name__}"
        ) from None


class Lexicon:
    """Count words plus the relation phrases a parser recognises.

    ``verbs`` and ``relations`` *extend* the defaults (:data:`VERB_PHRASES`,
    :data:`SPATIAL_PHRASES`). Each is a list of phrases (the canonical form is the phrase itself)
    or a mapping phrase → canonical form, e.g. ``relations={"beside": "next to"}``. A phrase that
    is already known with a different skill or canonical form is an error, not a silent override.
    """

    def __init__(
        self, verbs: PhraseSpec = None, relations: PhraseSpec = None, attributes: Iterable[str] | None = None
    ) -> None:
        from cast_rewards.noun_phrases import ATTRIBUTES

        #: words read as attribute atoms (cast_rewards.noun_phrases.ATTRIBUTES plus ``attributes``)
        self.attributes = ATTRIBUTES | {str(a).lower() for a in (attributes or ())}
        self._phrases: dict[tuple[str, ...], RelationMatch] = {}
        for phrase, canonical in SPATIAL_PHRASES.items():
            self._add(phrase, canonical, "position", "spatial")
        for phrase in VERB_PHRASES:
            self._add(phrase, phrase, "verb", "verb")
        for phrase, canonical in _as_mapping(relations, "spatial").items():
            self._add(phrase, canonical, "position", "spatial")
        for phrase, canonical in _as_mapping(verbs, "verb").items():
            self._add(phrase, canonical, "verb", "verb")
        self._max_len = max(len(k) for k in self._phrases)

    def _add(self, phrase: str, canonical: str, skill: str, what: str) -> None:
        words = _normalise(phrase, what)
        canon = " ".join(_normalise(canonical, what))
        match = RelationMatch(" ".join(words), canon, skill, len(words))
        known = self._phrases.get(words)
        if known is not None and (known.canonical, known.skill) != (canon, skill):
            raise LexiconError(
                f"{what} phrase {match.phrase!r} is already known as a {known.skill} relation "
                f"{known.canonical!r}; cannot also make it a {skill} relation {canon!r}"
            )
        self._phrases[words] = match

    # -- queries ------------------------------------------------------------------------------
    @staticmethod
    def count(word: str) -> int | None:
        """The number a count word stands for (``"an"`` → 1), or None."""
        return COUNT_WORDS.get(word)

    @staticmethod
    def is_separator(word: str) -> bool:
        return word in SEPARATOR_WORDS

    def match_relation(self, words: Sequence[str], start: int) -> RelationMatch | None:
        """The longest relation phrase starting at ``words[start]``, or None."""
        for n in range(min(self._max_len, len(words) - start), 0, -1):
            hit = self._phrases.get(tuple(words[start : start + n]))
            if hit is not None:
                return hit
        return None

    def phrases(self, skill: str | None = None) -> dict[str, str]:
        """Known phrases → canonical form, optionally only those of one ``skill``."""
        return {m.phrase: m.canonical for m in self._phrases.values() if skill in (None, m.skill)}

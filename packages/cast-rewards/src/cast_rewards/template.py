"""The ``template`` decomposer: GenEval 2-style prompts → docs/design.md §3.1 scene graphs, by grammar.

Prompts of GenEval 2 and of the shapes world are filled templates ("five candles under three
croissants to the right of a green flower"), so a small deterministic grammar decomposes them
exactly, with no model and no network. Anything outside the grammar is an error that names the
span it could not read — a silently wrong graph would become silently wrong rewards.

Accepted grammar (matching is case-insensitive; the graph keeps the prompt string unchanged)::

    prompt    := [prefix] chain (separator chain)* [suffix] ["."]
    prefix    := "there is" | "there are" | "a photo of" | "a picture of" | "an image of"
    suffix    := "in the image" | "in the picture"
    separator := "," | "and" | "," "and"
    chain     := phrase (relation phrase)*
    phrase    := count (attribute | modifier)* noun   (attribute: the lexicon's; see below)
    count     := "a" | "an" | "one" | "two" | … | "ten"
    relation  := a spatial or verb phrase of the lexicon

- A noun phrase is a count word followed by one or more words, read strictly
  (:mod:`cast_rewards.noun_phrases`): a word of the attribute lexicon (colour, material, size,
  shape, texture, pattern) is an attribute; any other modifier is part of a compound noun with the
  last word ("two big shiny red sport bikes" → noun ``sport bike``, count 2, attributes big, shiny,
  red); "a cup of X" is one container noun; known multiword nouns ("hot air balloon") stay whole;
  function words, possessives, pronouns, -ing verb forms, degree words before an attribute and
  mass nouns are refused, naming the word — an atom is never made of a word whose role is unknown.
  A noun phrase ends at a comma, "and", a relation phrase, another count word or the end. A
  repeated attribute is kept once. ``distinct_nouns=True`` also refuses two objects with one noun.
- The noun is stored as its singular lemma: when the count is above one it is singularized
  (``circles`` → ``circle``, ``mice`` → ``mouse``, ``sheep`` → ``sheep``); with a count of one
  it is kept as written (lower-cased), so singular nouns ending in -s ("glass", "bus") survive.
- A relation is a phrase of the :class:`~cast_rewards.lexicon.Lexicon`: the spatial phrases left
  of, to the left of, right of, to the right of, above, below, on top of, under, in front of,
  behind, next to, near (skill ``position``, stored in canonical form, "to the left of" → "left
  of"), and verb phrases such as playing with, chasing, jumping over (skill ``verb``); more can be
  passed to the constructor. The longest phrase at a position wins.
- A relation links the noun phrase just before it with the one just after it, so a chain
  "A rel1 B rel2 C" reads as (A rel1 B) and (B rel2 C). A separator ends the chain: in
  "A left of B and C", C is a separate entity with no relation; "A rel B, C rel D" has two.
- Every noun phrase is its own entity, even if the same noun appears twice.
- Only words, commas and a final period are understood; other punctuation, digits as counts,
  "the", "and" inside a noun phrase ("a big and red circle"), or a noun phrase without a count word
  are errors (:class:`~cast_rewards.errors.PromptParseError`, a ``SceneGraphError``).

Multi-word nouns are not recognised: "a traffic light" is the noun ``light`` with the attribute
``traffic``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

from cast_core.errors import SceneGraphError
from cast_core.scene_graph import SceneGraph

from cast_rewards.errors import PromptParseError, cut
from cast_rewards.graphs import NounPhrase, Relation, build_graph
from cast_rewards.lexicon import Lexicon, PhraseSpec, RelationMatch
from cast_rewards.noun_phrases import UnplacedWord, read_noun_phrase

__all__ = ["TemplateDecomposer", "parse_prompt", "Token", "tokenize"]

PREFIXES: tuple[tuple[str, ...], ...] = (
    ("there", "is"),
    ("there", "are"),
    ("a", "photo", "of"),
    ("a", "picture", "of"),
    ("an", "image", "of"),
)
SUFFIXES: tuple[tuple[str, ...], ...] = (("in", "the", "image"), ("in", "the", "picture"))

_COUNTS_HINT = "a, an, one, two, … ten"
_TOKEN = re.compile(
    r"(?P<space>\s+)|(?P<word>[^\W_]+(?:['’-][^\W_]+)*)|(?P<comma>,)|(?P<period>\.)|(?P<other>.)",
    re.S,
)


@dataclass(frozen=True)
class Token:
    """A word or comma of the prompt, lower-cased, with its character span in the original."""

    text: str
    kind: str  # "word" or "comma"
    start: int
    end: int


def tokenize(prompt: str) -> list[Token]:
    """Words and commas of ``prompt``; a final period is dropped, any other symbol is an error."""
    tokens: list[Token] = []
    for m in _TOKEN.finditer(prompt):
        kind = m.lastgroup
        if kind == "space":
            continue
        if kind == "period":
            if prompt[m.end() :].strip():
                raise PromptParseError(
                    prompt,
                    m.start(),
                    m.end(),
                    "a period is only allowed at the end of the prompt; separate clauses with ',' or 'and'",
                )
            continue
        if kind == "other":
            raise PromptParseError(
                prompt,
                m.start(),
                m.end(),
                f"unexpected character {m.group()!r}; only words, commas and a final period are understood",
            )
        tokens.append(Token(m.group().lower(), kind, m.start(), m.end()))
    return tokens


class _Parser:
    """Recursive-descent reader over the tokens of one prompt (see the module docstring)."""

    def __init__(self, prompt: str, lexicon: Lexicon) -> None:
        self.prompt = prompt
        self.lex = lexicon
        self.tokens = tokenize(prompt)
        self.words = [t.text if t.kind == "word" else "," for t in self.tokens]
        self.pos = 0
        self.end = len(self.tokens)
        self.phrases: list[NounPhrase] = []
        self.relations: list[Relation] = []
        self._phrase_starts: list[int] = []  # first token of each noun phrase
        self._prefix: tuple[int, int] | None = None  # token span of a leading "there is" etc.

    # -- helpers ------------------------------------------------------------------------------
    def _fail(self, first: int, last: int, reason: str) -> PromptParseError:
        return PromptParseError(self.prompt, self.tokens[first].start, self.tokens[last].end, reason)

    def _text(self, first: int, last: int) -> str:
        return self.prompt[self.tokens[first].start : self.tokens[last].end]

    def _is_word(self, i: int) -> bool:
        return self.tokens[i].kind == "word"

    def _is_separator(self, i: int) -> bool:
        return not self._is_word(i) or self.lex.is_separator(self.words[i])

    def _relation_at(self, i: int) -> RelationMatch | None:
        """The relation phrase starting at token ``i`` (not reaching into a stripped suffix)."""
        if i >= self.end or not self._is_word(i):
            return None
        return self.lex.match_relation(self.words[: self.end], i)

    def _is_open_word(self, i: int) -> bool:
        """A word that can belong to a noun phrase after its count word."""
        return (
            self._is_word(i)
            and self.lex.count(self.words[i]) is None
            and not self.lex.is_separator(self.words[i])
            and self._relation_at(i) is None
        )

    def _open_run(self, i: int) -> int:
        """Index of the last token of the run of open words starting at ``i``."""
        j = i
        while j + 1 < self.end and self._is_open_word(j + 1):
            j += 1
        return j

    # -- grammar ------------------------------------------------------------------------------
    def parse(self) -> tuple[list[NounPhrase], list[Relation]]:
        if not self.tokens:
            raise PromptParseError(
                self.prompt,
                0,
                len(self.prompt),
                "the prompt is empty; expected at least one noun phrase such as 'a red circle'",
            )
        self._strip_prefix_and_suffix()
        after = self._prefix
        while True:
            last = self._noun_phrase(after)
            while self.pos < self.end:
                rel = self._relation_at(self.pos)
                if rel is None:
                    break
                rel_span = (self.pos, self.pos + rel.length - 1)
                self.pos += rel.length
                other = self._noun_phrase(rel_span)
                self.relations.append(Relation(last, rel.canonical, other, rel.skill))
                last = other
            if self.pos == self.end:
                return self.phrases, self.relations
            if not self._is_separator(self.pos):
                # A noun phrase stops early only at a count word: two phrases are run together.
                start = self._phrase_starts[-1]
                raise self._fail(
                    start,
                    self.pos,
                    f"expected ',', 'and' or a relation phrase between "
                    f"{self._text(start, self.pos - 1)!r} and {self.words[self.pos]!r}",
                )
            sep_first = self.pos
            if self.words[self.pos] == "," and self.words[self.pos + 1 : self.pos + 2] == ["and"]:
                self.pos += 1
            self.pos += 1
            after = (sep_first, self.pos - 1)

    def _strip_prefix_and_suffix(self) -> None:
        for prefix in PREFIXES:
            if tuple(self.words[: len(prefix)]) == prefix:
                self._prefix = (0, len(prefix) - 1)
                self.pos = len(prefix)
                break
        for suffix in SUFFIXES:
            if self.end - len(suffix) > self.pos and tuple(self.words[-len(suffix) :]) == suffix:
                self.end -= len(suffix)
                break

    def _noun_phrase(self, after: tuple[int, int] | None) -> int:
        """Read one noun phrase at ``self.pos``; return its index. ``after`` is the token span
        before it (prefix, relation or separator), used to word errors."""
        i = self.pos
        if i == self.end:
            assert after is not None  # an empty prompt was refused before
            what = self._text(*after)
            found = "the end of the prompt"
            if self.end < len(self.tokens):  # only a stripped "in the image" follows
                found = repr(self._text(i, len(self.tokens) - 1))
            raise self._fail(*after, f"expected a noun phrase after {what!r}, found {found}")
        count = self.lex.count(self.words[i]) if self._is_word(i) else None
        if count is None:
            raise self._no_count_word(i, after)
        first = i
        self.pos = i + 1
        while self.pos < self.end and self._is_open_word(self.pos):
            self.pos += 1
        if self.pos == first + 1:
            if self.pos >= self.end:
                last, found = first, "the end of the prompt"
            else:
                rel = self._relation_at(self.pos)
                last = min(self.pos + (rel.length if rel else 1), self.end) - 1
                found = self._describe(self.pos)
            raise self._fail(
                first,
                last,
                f"expected a noun after the count word {self.words[first]!r}, found {found}",
            )
        try:
            read = read_noun_phrase(self.words[first + 1 : self.pos], count, self.lex.attributes)
        except UnplacedWord as err:
            k = first + 1 + err.index
            raise self._fail(
                k,
                k,
                f"cannot place {self.words[k]!r} in the noun phrase {cut(self._text(first, self.pos - 1))!r}: {err}",
            ) from None
        self.phrases.append(NounPhrase(read.noun, count, read.attributes))
        self._phrase_starts.append(first)
        return len(self.phrases) - 1

    def _describe(self, i: int) -> str:
        """How to name token ``i`` in an error message."""
        rel = self._relation_at(i)
        if rel is not None:
            return f"the relation {rel.phrase!r}"
        return repr(self.words[i])

    def _no_count_word(self, i: int, after: tuple[int, int] | None) -> PromptParseError:
        """The error for a noun phrase that does not start with a count word."""
        if self._is_separator(i) or not self._is_open_word(i):
            # a separator or a relation phrase where a noun phrase should be
            rel = self._relation_at(i)
            last = i + rel.length - 1 if rel is not None else i
            if after is None:
                where = f"before the relation {rel.phrase!r}" if rel is not None else f"before {self.words[i]!r}"
                return self._fail(i, last, f"expected a noun phrase {where}")
            return self._fail(
                after[0],
                last,
                f"expected a noun phrase after {self._text(*after)!r}, found {self._describe(i)}",
            )
        run_end = self._open_run(i)
        hint = ""
        if self.words[i].isdigit():
            hint = "; write numbers as words"
        reason = f"a noun phrase must start with a count word ({_COUNTS_HINT}), found {self._text(i, run_end)!r}{hint}"
        if after is None:
            return self._fail(i, run_end, f"expected a noun phrase: {reason}")
        return self._fail(after[0], run_end, f"expected a noun phrase after {self._text(*after)!r}: {reason}")


def parse_prompt(prompt: str, lexicon: Lexicon | None = None) -> tuple[list[NounPhrase], list[Relation]]:
    """The noun phrases and relations of ``prompt``.

    Raises :class:`PromptParseError` for text outside the grammar, ``SceneGraphError`` for a
    prompt that is not a string.
    """
    if not isinstance(prompt, str):
        raise SceneGraphError(f"a prompt must be a string, got {type(prompt).__name__}: {prompt!r}")
    return _Parser(prompt, lexicon or Lexicon()).parse()


class TemplateDecomposer:
    """Decompose GenEval 2-style prompts by grammar (see the module docstring for what is read).

    ``verbs`` and ``relations`` add verb and spatial phrases to the defaults: a list of phrases,
    or a mapping phrase → canonical form (``relations={"beside": "next to"}``).
    """

    name = "template"

    def __init__(
        self,
        verbs: PhraseSpec = None,
        relations: PhraseSpec = None,
        attributes: Iterable[str] | None = None,
        distinct_nouns: bool = False,
    ) -> None:
        self.lexicon = Lexicon(verbs=verbs, relations=relations, attributes=attributes)
        self.distinct_nouns = bool(distinct_nouns)

    def decompose(self, prompt: str) -> SceneGraph:
        """The docs/design.md §3.1 scene graph of ``prompt``, with GenEval 2 questions on every atom.

        With ``distinct_nouns`` a prompt naming two objects by the same noun ("a red box next to a
        blue box") is refused: its count questions ("How many boxes…?" → one, twice) and
        attribute questions ("Is the box red?") cannot tell the two apart. The shapes world keeps
        the default (its oracle scores such atoms by object), the ``auto`` decomposer refuses."""
        phrases, relations = parse_prompt(prompt, self.lexicon)
        if self.distinct_nouns:
            nouns = [p.noun for p in phrases]
            twice = next((n for n in nouns if nouns.count(n) > 1), None)
            if twice is not None:
                raise SceneGraphError(
                    f"prompt {cut(prompt)!r} names two objects {twice!r}: GenEval-style count and "
                    "attribute questions cannot tell them apart"
                )
        return build_graph(prompt, phrases, relations)

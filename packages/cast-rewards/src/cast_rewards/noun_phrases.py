"""What the words of one noun phrase mean, read strictly: an atom only for a word whose role is known.

Why strict: on human-written prompts an open reading ("every word before the noun is an
attribute") asked judges "Is the pho of?" and "Is the bear teddy?" — noise that becomes atom
advantages. So, between the count word and the noun:

* a word of :data:`ATTRIBUTES` (colour, material, size, shape, texture, pattern — GenEval 2's
  eighteen and the common rest) is an attribute atom;
* a function word (:data:`FUNCTION_WORDS`: articles, pronouns, possessives, prepositions,
  auxiliaries, negation) or a verb form ending in -ing is refused, naming the word — it
  signals a clause the grammar cannot read ("a man with a puppet", "a goat wearing headphones");
* any other word is part of a compound noun with the head ("teddy bear", "sport bike", "monarch
  butterfly", "fire hydrant"): one entity, asked about as a whole, never as an attribute;
* "a bowl / cup / pair / glass … of X" is one container noun ("bowl of pho"), counted by the
  container;
* a multiword noun of :data:`COMPOUND_NOUNS` ("hot air balloon") stays whole even where its
  first word is an attribute word, and a degree word before an attribute ("half empty") is
  refused: the attribute atom would assert more than the prompt says.

The head noun (the last word, or the container) is singularized when the count is above one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from cast_rewards.inflection import singularize

__all__ = [
    "ATTRIBUTES",
    "FUNCTION_WORDS",
    "CONTAINERS",
    "COMPOUND_NOUNS",
    "DEGREE_WORDS",
    "ING_NOUNS",
    "ReadPhrase",
    "UnplacedWord",
    "read_noun_phrase",
]

COLOURS = (
    "red",
    "orange",
    "yellow",
    "green",
    "blue",
    "purple",
    "pink",
    "brown",
    "black",
    "white",
    "gray",
    "grey",
    "silver",
    "gold",
    "golden",
    "beige",
    "violet",
    "turquoise",
    "cyan",
    "magenta",
    "maroon",
    "navy",
    "teal",
)
MATERIALS = (
    "glass",
    "metal",
    "metallic",
    "stone",
    "plastic",
    "wooden",
    "wood",
    "paper",
    "leather",
    "ceramic",
    "marble",
    "steel",
    "iron",
    "copper",
    "brass",
    "cotton",
    "wool",
    "woolen",
    "silk",
    "rubber",
    "concrete",
    "golden",
    "crystal",
    "clay",
    "cardboard",
    "denim",
    "velvet",
)
SIZES = (
    "big",
    "small",
    "large",
    "tiny",
    "huge",
    "little",
    "tall",
    "short",
    "long",
    "giant",
    "miniature",
    "thin",
    "thick",
    "wide",
    "narrow",
    "fat",
)
SHAPES = (
    "round",
    "square",
    "triangular",
    "rectangular",
    "circular",
    "oval",
    "spherical",
    "cubic",
    "flat",
    "curved",
    "pointed",
    "sharp",
    "blunt",
    "straight",
    "twisted",
)
TEXTURES = (
    "sparkling",
    "checkered",
    "striped",
    "spotted",
    "shiny",
    "matte",
    "fluffy",
    "furry",
    "smooth",
    "rough",
    "wet",
    "dry",
    "glossy",
    "transparent",
    "translucent",
    "dotted",
    "plaid",
    "polka-dot",
    "rusty",
    "dirty",
    "clean",
    "old",
    "new",
    "broken",
    "empty",
    "full",
    "bright",
    "dark",
    "pale",
    "hairy",
    "fuzzy",
    "soft",
    "hard",
    "hot",
    "cold",
    "frozen",
    "wrinkled",
    "glowing",
    "colorful",
    "colourful",
)

#: words that are an attribute atom when they stand between a count word and a noun
ATTRIBUTES = frozenset(COLOURS + MATERIALS + SIZES + SHAPES + TEXTURES)

#: words that never belong to a noun phrase: their presence means a clause the grammar cannot read
FUNCTION_WORDS = frozenset(
    """
the this that these those some any each every another other others all both either neither such no not none
it its itself they them their theirs themselves he him his himself she her hers herself we us our ours you your
yours i me my mine one's someone something anyone anything everyone everything nobody nothing
of with without in into inside on onto at from to for by about across through around against along among amid
between beneath beside besides beyond during except off out over past per since than till toward towards until
up upon down via within
is are was were be been being am has have had having do does did will would shall should can could may might must
or but nor so yet if then because while although though as like unlike very too also just only even still
here there where when how why what which who whom whose
""".split()
)

#: words that grade an attribute ("half empty", "slightly open"): the attribute atom would assert
#: more than the prompt does, so a degree word before an attribute is refused
DEGREE_WORDS = frozenset(
    """
half partly partially fully completely slightly mostly almost nearly barely extremely really quite rather
somewhat
""".split()
)

#: nouns that take "of X" as their content ("a bowl of pho", "two cups of coffee")
CONTAINERS = frozenset(
    """
bowl cup glass mug pair plate box bottle jar piece slice bunch group stack pile basket bag bucket can carton
pack packet pot tray set herd flock school swarm crowd team row line handful sheet loaf bar bouquet vase glassful
""".split()
)


#: multiword nouns whose first words would otherwise read as attributes or modifiers ("hot" is an
#: attribute, "hot air balloon" a thing): matched at the end of a phrase, longest first
COMPOUND_NOUNS = frozenset(
    tuple(c.split())
    for c in """
hot air balloon|hot dog|fire hydrant|teddy bear|ice cream|traffic light|stop sign|cell phone|tennis racket
baseball bat|baseball glove|parking meter|wine glass|hair drier|hair dryer|dining table|potted plant|sports ball
toy car|coffee mug|coffee cup|tea cup|fire truck|police car|school bus|golf ball|soccer ball|tennis ball
polar bear|brown bear|black bear|red panda|guinea pig|sea lion|sea turtle|gold fish|hot sauce|green bean
red wine|white wine|black hole|blue jay|french fries|light bulb|yellow jacket|white board|black board
""".replace("\n", "|").split("|")
    if c.strip()
)

#: mass nouns: "a fog" has no count a judge could check ("How many fogs…?"), so the grammar refuses
#: them as counted objects (inside a container, "a glass of water", they are fine)
MASS_NOUNS = frozenset(
    """
fog mist smoke steam water sand snow rain air light fire grass milk juice coffee tea wine beer soup rice
sugar salt flour dust mud ice oil honey music information advice furniture luggage hair wood metal
""".split()
)

#: nouns ending in -ing that are things, not verbs
ING_NOUNS = frozenset(
    """
building painting ceiling pudding wedding clothing evening morning earring ring king wing swing spring string
sling thing icing frosting stuffing dumpling sibling duckling seedling railing awning cling herring
""".split()
)


class UnplacedWord(ValueError):
    """A word of the phrase that the grammar cannot give a role: ``index`` into the words."""

    def __init__(self, index: int, reason: str):
        super().__init__(reason)
        self.index = index


@dataclass(frozen=True)
class ReadPhrase:
    noun: str
    attributes: tuple[str, ...]


def read_noun_phrase(words: list[str], count: int, attributes: Iterable[str] = ATTRIBUTES) -> ReadPhrase:
    """Noun and attributes of the words after a count word (see the module docstring); raises
    :class:`UnplacedWord` for a word the grammar refuses."""
    attributes = frozenset(attributes)
    if "of" in words:  # a container phrase, or a clause
        k = words.index("of")
        if 0 < k < len(words) - 1 and (words[k - 1] in CONTAINERS or singularize(words[k - 1]) in CONTAINERS):
            head = singularize(words[k - 1]) if count != 1 else words[k - 1]
            content = words[k + 1 :]
            for i, w in enumerate(content):
                _check_word(w, k + 1 + i, attributes, as_head=i == len(content) - 1)
            before = _read(words[: k - 1], attributes)
            return ReadPhrase(" ".join([*before.compound, head, "of", *content]), before.attributes)
    for size in (3, 2):  # a known multiword noun at the end stays whole
        tail = tuple(words[-size:])
        if len(words) >= size and (tail in COMPOUND_NOUNS or (*tail[:-1], singularize(tail[-1])) in COMPOUND_NOUNS):
            head = " ".join([*tail[:-1], tail[-1] if count == 1 else singularize(tail[-1])])
            before = _read(words[:-size], attributes)
            return ReadPhrase(" ".join([*before.compound, head]), before.attributes)
    head_word = words[-1]
    _check_word(head_word, len(words) - 1, attributes, as_head=True)
    if head_word in MASS_NOUNS:
        raise UnplacedWord(len(words) - 1, f"{head_word!r} is a mass noun: a count of it cannot be checked")
    head = head_word if count == 1 else singularize(head_word)
    before = _read(words[:-1], attributes)
    return ReadPhrase(" ".join([*before.compound, head]), before.attributes)


def _check_word(word: str, index: int, attributes: frozenset, as_head: bool = False) -> None:
    """Refuse a word no noun phrase can hold: a function word, a possessive, a verb form."""
    if word in FUNCTION_WORDS:
        what = "a noun" if as_head else "an attribute or part of a noun"
        raise UnplacedWord(
            index,
            f"{word!r} is a function word, not {what}; the template grammar reads "
            "'count attributes noun' phrases joined by relation phrases",
        )
    if word.endswith(("'s", "’s", "s'")):
        raise UnplacedWord(index, f"{word!r} is a possessive; the template grammar has no possessives")
    if word.endswith("ing") and len(word) > 4 and word not in attributes and word not in ING_NOUNS:
        raise UnplacedWord(
            index,
            f"{word!r} looks like a verb; name it as a relation phrase "
            "(TemplateDecomposer(verbs=[...])) or use the llm decomposer",
        )


@dataclass(frozen=True)
class _Modifiers:
    attributes: tuple[str, ...]
    compound: tuple[str, ...]


def _read(words: list[str], attributes: frozenset) -> _Modifiers:
    attrs: list[str] = []
    compound: list[str] = []
    for i, w in enumerate(words):
        _check_word(w, i, attributes)
        if w in DEGREE_WORDS and i + 1 < len(words) and words[i + 1] in attributes:
            raise UnplacedWord(
                i,
                f"{w!r} grades the attribute {words[i + 1]!r}; an atom {words[i + 1]!r} would "
                "assert more than the prompt says",
            )
        if w in attributes:
            if w not in attrs:
                attrs.append(w)
        else:
            compound.append(w)
    return _Modifiers(tuple(attrs), tuple(compound))

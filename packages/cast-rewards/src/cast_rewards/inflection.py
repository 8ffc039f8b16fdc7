"""English noun number: plural → singular lemma (:func:`singularize`) and back (:func:`pluralize`).

Why here and not a dependency: the scene graph stores nouns as singular lemmas (docs/design.md §3.1), and
GenEval 2's question templates need the plural again ("How many circles …?"). Prompts of this kind
use a few hundred everyday nouns, so a small irregulars table plus suffix rules covers them and
keeps cast-rewards free of NLP dependencies (and deterministic across versions of such libraries).

Both functions work on a single lower-case word (the decomposer lower-cases before calling them).
Rules are applied in this order:

1. invariant nouns (sheep, fish, deer, …) are returned unchanged, also as the head of a compound
   ("goldfish");
2. an irregulars table (mice ↔ mouse, people ↔ person, children ↔ child, geese ↔ goose, leaves ↔
   leaf, knives ↔ knife, cacti ↔ cactus, …); the human/animal heads among them also match as the
   end of a compound ("snowmen" → "snowman", "grandchildren" → "grandchild");
3. suffix rules: -sses → -ss, -uses → -us (but -ouses → -ouse), -xes/-ches/-shes/-zzes → drop -es,
   -ies → -y (unless the singular ends in -ie: cookies → cookie), -oes → -o (but shoes, toes,
   canoes …), otherwise drop a final -s; a word already ending in -ss, -us or -is, or not ending
   in -s at all, is left alone ("glass", "cactus", "circle").

:func:`singularize` is only meant for words that are plural (the decomposer calls it when the count
is above one); applied to a singular noun ending in -s it may over-strip ("gas" → "ga"), which is
why the decomposer keeps the noun of a count-one phrase as written.
"""

from __future__ import annotations

# Nouns whose plural is the singular.
INVARIANT_NOUNS: frozenset[str] = frozenset(
    {
        "sheep",
        "fish",
        "deer",
        "moose",
        "bison",
        "salmon",
        "trout",
        "shrimp",
        "squid",
        "cod",
        "swine",
        "aircraft",
        "spacecraft",
        "hovercraft",
        "series",
        "species",
        "offspring",
    }
)

# Irregular singular -> plural (the f/fe -> ves nouns live here too: -ves is too ambiguous to
# rule on, compare "gloves", "doves", "olives").
IRREGULAR_PLURALS: dict[str, str] = {
    "man": "men",
    "woman": "women",
    "child": "children",
    "person": "people",
    "mouse": "mice",
    "goose": "geese",
    "tooth": "teeth",
    "foot": "feet",
    "ox": "oxen",
    "die": "dice",
    "cactus": "cacti",
    "fungus": "fungi",
    "larva": "larvae",
    "antenna": "antennae",
    "leaf": "leaves",
    "knife": "knives",
    "wolf": "wolves",
    "half": "halves",
    "shelf": "shelves",
    "loaf": "loaves",
    "calf": "calves",
    "scarf": "scarves",
    "wife": "wives",
    "life": "lives",
    "thief": "thieves",
    "elf": "elves",
    "hoof": "hooves",
    "dwarf": "dwarves",
    "wharf": "wharves",
    "sheaf": "sheaves",
    "quiz": "quizzes",
    "gas": "gases",
    "canvas": "canvases",
    "atlas": "atlases",
    "iris": "irises",
    "lens": "lenses",
    "bias": "biases",
    "stomach": "stomachs",
    "monarch": "monarchs",
    "epoch": "epochs",
}

# Irregular heads that also form compounds ("snowman", "grandchild", "townsperson").
_COMPOUND_HEADS = ("man", "woman", "child", "person", "mouse", "goose", "tooth", "foot")

# Singulars in -e that a suffix rule would otherwise cut wrongly.
_IE_NOUNS = frozenset(
    {
        "cookie",
        "movie",
        "pie",
        "tie",
        "zombie",
        "brownie",
        "smoothie",
        "selfie",
        "hoodie",
        "magpie",
        "collie",
        "budgie",
        "yorkie",
        "pixie",
        "genie",
        "bootie",
        "rookie",
        "goalie",
        "beanie",
        "birdie",
        "calorie",
        "lie",
        "die",
    }
)
_CHE_NOUNS = frozenset(
    {
        "moustache",
        "mustache",
        "headache",
        "stomachache",
        "toothache",
        "avalanche",
        "niche",
        "cache",
        "cliche",
        "quiche",
        "psyche",
    }
)
_OE_NOUNS = frozenset({"shoe", "toe", "canoe", "oboe", "hoe", "foe", "floe", "tiptoe"})

# Singulars in -o whose plural takes -es (all others take -s: pianos, photos, kangaroos).
_O_ES_NOUNS = frozenset(
    {
        "potato",
        "tomato",
        "hero",
        "mango",
        "volcano",
        "mosquito",
        "echo",
        "torpedo",
        "domino",
        "veto",
        "buffalo",
        "tornado",
    }
)

# Nouns that end in a compound head but are not compounds of it ("human" is not a kind of "man").
_NOT_COMPOUNDS = frozenset(
    {"human", "shaman", "caiman", "cayman", "talisman", "ottoman", "german", "roman", "doberman", "walkman", "mongoose"}
)

# Plural -> singular: the inverse of the irregulars, plus a learned plural that is only read.
_IRREGULAR_SINGULARS: dict[str, str] = {p: s for s, p in IRREGULAR_PLURALS.items()}
_IRREGULAR_SINGULARS["octopi"] = "octopus"
_VOWELS = frozenset("aeiou")


def _compound(word: str, table: dict[str, str], heads: tuple[str, ...]) -> str | None:
    """Inflect ``word`` if it ends in one of the irregular ``heads`` (looked up in ``table``)."""
    if word in _NOT_COMPOUNDS:
        return None
    for head in sorted(heads, key=len, reverse=True):
        if word.endswith(head) and len(word) > len(head):
            return word[: -len(head)] + table[head]
    return None


def _is_invariant(word: str) -> bool:
    return word in INVARIANT_NOUNS or any(
        word.endswith(n) and len(word) > len(n) for n in ("fish", "sheep", "deer", "craft")
    )


def singularize(word: str) -> str:
    """The singular lemma of a plural noun: ``"boxes"`` → ``"box"``, ``"mice"`` → ``"mouse"``."""
    if _is_invariant(word):
        return word
    if word in _IRREGULAR_SINGULARS:
        return _IRREGULAR_SINGULARS[word]
    plural_heads = tuple(IRREGULAR_PLURALS[h] for h in _COMPOUND_HEADS)
    compound = _compound(word, _IRREGULAR_SINGULARS, plural_heads)
    if compound is not None:
        return compound
    if not word.endswith("s") or word.endswith(("ss", "us", "is")) or len(word) <= 2:
        return word
    stem = word[:-1]  # drop the final "s"
    if stem in _IE_NOUNS or stem in _CHE_NOUNS or stem in _OE_NOUNS or stem.endswith("shoe"):
        return stem
    if word.endswith("sses"):
        return word[:-2]
    if word.endswith("uses") and not word.endswith("ouses"):
        return word[:-2]
    if word.endswith(("xes", "ches", "shes", "zzes")):
        return word[:-2]
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith("oes") and len(word) > 4:
        return word[:-2]
    return stem


def pluralize(word: str) -> str:
    """The plural of a singular noun, for question text: ``"box"`` → ``"boxes"``.

    The inverse of :func:`singularize` on the nouns it knows (``singularize(pluralize(w)) == w``).
    A compound pluralizes its head: ``"teddy bear"`` → ``"teddy bears"``, ``"cup of coffee"`` →
    ``"cups of coffee"``.
    """
    if " of " in word:
        head, content = word.split(" of ", 1)
        return f"{pluralize(head)} of {content}"
    if " " in word:
        *modifiers, head = word.split(" ")
        return " ".join([*modifiers, pluralize(head)])
    if _is_invariant(word):
        return word
    if word in IRREGULAR_PLURALS:
        return IRREGULAR_PLURALS[word]
    compound = _compound(word, IRREGULAR_PLURALS, _COMPOUND_HEADS)
    if compound is not None:
        return compound
    if word.endswith(("s", "x", "z", "ch", "sh")):
        return word + "es"
    if word.endswith("y") and len(word) > 1 and word[-2] not in _VOWELS:
        return word[:-1] + "ies"
    if word in _O_ES_NOUNS:
        return word + "es"
    return word + "s"

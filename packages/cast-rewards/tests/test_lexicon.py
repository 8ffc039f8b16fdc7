"""The closed word lists: count words, relation phrases and how users extend them."""

import pytest

from cast_core.errors import CastError
from cast_rewards.errors import LexiconError
from cast_rewards.lexicon import COUNT_WORDS, SPATIAL_PHRASES, VERB_PHRASES, Lexicon


def test_count_words_cover_a_an_and_one_to_ten():
    words = "one two three four five six seven eight nine ten".split()
    assert {w: COUNT_WORDS[w] for w in words} == {w: i + 1 for i, w in enumerate(words)}
    assert COUNT_WORDS["a"] == COUNT_WORDS["an"] == 1
    assert Lexicon.count("eleven") is None and Lexicon.count("the") is None


def test_documented_spatial_phrases_and_canonical_forms():
    assert SPATIAL_PHRASES == {
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


def test_geneval2_verbs_are_defaults():
    assert {"playing with", "chasing", "jumping over"} <= set(VERB_PHRASES)


def test_longest_match_wins():
    lex = Lexicon(relations=["to"])
    words = "a cat to the left of a dog".split()
    m = lex.match_relation(words, 2)
    assert (m.phrase, m.canonical, m.skill, m.length) == ("to the left of", "left of", "position", 4)
    assert lex.match_relation("a cat to a dog".split(), 2).phrase == "to"
    assert lex.match_relation(words, 1) is None


def test_extensions_as_list_mapping_or_single_string():
    lex = Lexicon(verbs={"Chases": "chasing", "sniffing": "sniffing"}, relations=["beside", "far  from"])
    assert lex.match_relation(["chases"], 0).canonical == "chasing"
    assert lex.match_relation(["chases"], 0).skill == "verb"
    assert lex.match_relation(["far", "from"], 0).canonical == "far from"
    assert lex.phrases("position")["beside"] == "beside"
    assert Lexicon(verbs="licking").match_relation(["licking"], 0).skill == "verb"
    # the defaults stay
    assert Lexicon(verbs=["licking"]).match_relation(["chasing"], 0) is not None


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"verbs": ["near"]}, "already known as a position relation 'near'"),
        ({"relations": {"above": "over"}}, "already known as a position relation 'above'"),
        ({"verbs": [""]}, "is empty"),
        ({"verbs": ["a dog"]}, "count word"),
        ({"relations": ["and then"]}, "separator"),
        ({"verbs": ["looks, at"]}, "plain words"),
        ({"verbs": [3]}, "not a string"),
        ({"verbs": 3}, "list of phrases or a mapping"),
    ],
)
def test_bad_extensions_are_clear_errors(kwargs, fragment):
    with pytest.raises(LexiconError) as err:
        Lexicon(**kwargs)
    assert fragment in str(err.value)
    assert isinstance(err.value, CastError) and isinstance(err.value, ValueError)


def test_repeating_a_known_phrase_identically_is_fine():
    assert (
        Lexicon(verbs=["chasing"], relations={"to the left of": "left of"}).match_relation(["chasing"], 0).canonical
        == "chasing"
    )

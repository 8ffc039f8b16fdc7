"""Noun number: the lemma stored in the graph and the plural used in question text."""

import pytest

from cast_rewards.inflection import pluralize, singularize

# (plural, singular lemma): regular rules, -es rules, -ies/-ie, -oes/-oe, f/fe, irregulars,
# invariants, compounds.
PAIRS = [
    ("circles", "circle"),
    ("squares", "square"),
    ("triangles", "triangle"),
    ("dogs", "dog"),
    ("boxes", "box"),
    ("foxes", "fox"),
    ("buses", "bus"),
    ("viruses", "virus"),
    ("glasses", "glass"),
    ("dresses", "dress"),
    ("houses", "house"),
    ("horses", "horse"),
    ("vases", "vase"),
    ("benches", "bench"),
    ("peaches", "peach"),
    ("dishes", "dish"),
    ("buzzes", "buzz"),
    ("quizzes", "quiz"),
    ("headaches", "headache"),
    ("puppies", "puppy"),
    ("cherries", "cherry"),
    ("flies", "fly"),
    ("cookies", "cookie"),
    ("pies", "pie"),
    ("ties", "tie"),
    ("monkeys", "monkey"),
    ("toys", "toy"),
    ("potatoes", "potato"),
    ("tomatoes", "tomato"),
    ("shoes", "shoe"),
    ("horseshoes", "horseshoe"),
    ("toes", "toe"),
    ("pianos", "piano"),
    ("kangaroos", "kangaroo"),
    ("leaves", "leaf"),
    ("knives", "knife"),
    ("wolves", "wolf"),
    ("shelves", "shelf"),
    ("gloves", "glove"),
    ("olives", "olive"),
    ("roofs", "roof"),
    ("giraffes", "giraffe"),
    ("mice", "mouse"),
    ("people", "person"),
    ("children", "child"),
    ("geese", "goose"),
    ("teeth", "tooth"),
    ("feet", "foot"),
    ("men", "man"),
    ("women", "woman"),
    ("oxen", "ox"),
    ("dice", "die"),
    ("cacti", "cactus"),
    ("gases", "gas"),
    ("lenses", "lens"),
    ("sheep", "sheep"),
    ("fish", "fish"),
    ("deer", "deer"),
    ("species", "species"),
    ("goldfish", "goldfish"),
    ("reindeer", "reindeer"),
    ("snowmen", "snowman"),
    ("grandchildren", "grandchild"),
    ("dormice", "dormouse"),
    ("humans", "human"),
    ("mongooses", "mongoose"),
    ("t-shirts", "t-shirt"),
]


@pytest.mark.parametrize("plural, singular", PAIRS)
def test_singularize(plural, singular):
    assert singularize(plural) == singular


@pytest.mark.parametrize("plural, singular", PAIRS)
def test_pluralize_is_the_inverse(plural, singular):
    assert pluralize(singular) == plural


def test_learned_plural_is_read():
    assert singularize("octopi") == "octopus"
    assert pluralize("octopus") == "octopuses" and singularize("octopuses") == "octopus"


@pytest.mark.parametrize("word", ["glass", "cactus", "tennis", "circle", "sheep", "ox"])
def test_words_that_do_not_look_plural_are_left_alone(word):
    assert singularize(word) == word

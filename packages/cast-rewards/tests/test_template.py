"""The template decomposer: every construction of its grammar, the exact docs/design.md §3.1 output, the
GenEval 2 questions, and errors that name the span they could not read."""

from __future__ import annotations

import pytest

from cast_core.errors import CastError, SceneGraphError
from cast_core.protocols import AtomDecomposer
from cast_core.scene_graph import SceneGraph
from cast_core.testing.conformance import AtomDecomposerConformance
from cast_rewards.errors import PromptParseError
from cast_rewards.template import TemplateDecomposer

# -- compact specs -----------------------------------------------------------------------------
# An entity is (noun, count, [attributes]); a relation is (subject index, phrase, other index,
# skill). `expected` spells out the docs/design.md §3.1 layout independently of the implementation.

P, V = "position", "verb"


def expected(prompt, entities, relations=()):
    ents, atoms, objects = [], [], []

    def add(**atom):
        atom = {"id": f"a{len(atoms) + 1}", **atom}
        atoms.append(atom)
        return atom["id"]

    for i, (noun, count, attrs) in enumerate(entities):
        eid = f"e{i + 1}"
        ents.append({"id": eid, "noun": noun, "count": count})
        obj = add(kind="object", entity=eid, parents=[])
        objects.append(obj)
        add(kind="count", entity=eid, value=count, parents=[obj])
        for attr in attrs:
            add(kind="attribute", entity=eid, value=attr, parents=[obj])
    for s, phrase, o, skill in relations:
        add(
            kind="relation",
            entity=f"e{s + 1}",
            value=phrase,
            other=f"e{o + 1}",
            skill=skill,
            parents=[objects[s], objects[o]],
        )
    return {"prompt": prompt, "entities": ents, "atoms": atoms}


def without_questions(graph: dict) -> dict:
    return {**graph, "atoms": [{k: v for k, v in a.items() if k != "question"} for a in graph["atoms"]]}


TABLE = [
    # single objects, a/an/one
    ("a circle", [("circle", 1, [])]),
    ("an apple", [("apple", 1, [])]),
    ("one dog", [("dog", 1, [])]),
    ("a red circle", [("circle", 1, ["red"])]),
    # counts two..ten
    ("two cats", [("cat", 2, [])]),
    ("three red apples", [("apple", 3, ["red"])]),
    ("four big dogs", [("dog", 4, ["big"])]),
    ("five candles", [("candle", 5, [])]),
    ("six small green frogs", [("frog", 6, ["small", "green"])]),
    ("seven stars", [("star", 7, [])]),
    ("eight wooden boxes", [("box", 8, ["wooden"])]),
    ("nine buses", [("bus", 9, [])]),
    ("ten glasses", [("glass", 10, [])]),
    # several adjectives, kept in prompt order; a repeated one is kept once
    ("two big shiny red circles", [("circle", 2, ["big", "shiny", "red"])]),
    ("a red red circle", [("circle", 1, ["red"])]),
    # count one keeps a singular noun ending in -s as written
    ("a glass and a bus", [("glass", 1, []), ("bus", 1, [])]),
    # lists with commas and/or "and"
    ("a cat and a dog", [("cat", 1, []), ("dog", 1, [])]),
    (
        "a red circle, two blue squares and a green triangle",
        [("circle", 1, ["red"]), ("square", 2, ["blue"]), ("triangle", 1, ["green"])],
    ),
    ("a cat, a dog, and a bird", [("cat", 1, []), ("dog", 1, []), ("bird", 1, [])]),
    ("a cat, a dog, a bird", [("cat", 1, []), ("dog", 1, []), ("bird", 1, [])]),
    # every spatial phrase, canonicalised
    ("a circle left of a square", [("circle", 1, []), ("square", 1, [])], [(0, "left of", 1, P)]),
    ("a circle right of a square", [("circle", 1, []), ("square", 1, [])], [(0, "right of", 1, P)]),
    ("a circle to the left of a square", [("circle", 1, []), ("square", 1, [])], [(0, "left of", 1, P)]),
    ("a circle to the right of a square", [("circle", 1, []), ("square", 1, [])], [(0, "right of", 1, P)]),
    ("a bird above a tree", [("bird", 1, []), ("tree", 1, [])], [(0, "above", 1, P)]),
    ("a ball below a table", [("ball", 1, []), ("table", 1, [])], [(0, "below", 1, P)]),
    ("a cup on top of a book", [("cup", 1, []), ("book", 1, [])], [(0, "on top of", 1, P)]),
    ("two cats under a chair", [("cat", 2, []), ("chair", 1, [])], [(0, "under", 1, P)]),
    ("a car in front of a house", [("car", 1, []), ("house", 1, [])], [(0, "in front of", 1, P)]),
    ("a tree behind three houses", [("tree", 1, []), ("house", 3, [])], [(0, "behind", 1, P)]),
    ("a lamp next to a sofa", [("lamp", 1, []), ("sofa", 1, [])], [(0, "next to", 1, P)]),
    ("a boat near an island", [("boat", 1, []), ("island", 1, [])], [(0, "near", 1, P)]),
    # verb phrases
    ("a dog playing with a ball", [("dog", 1, []), ("ball", 1, [])], [(0, "playing with", 1, V)]),
    ("a cat chasing two mice", [("cat", 1, []), ("mouse", 2, [])], [(0, "chasing", 1, V)]),
    ("a brown horse jumping over a fence", [("horse", 1, ["brown"]), ("fence", 1, [])], [(0, "jumping over", 1, V)]),
    # chains: each relation attaches to the phrase just before it
    (
        "five candles under three croissants to the right of a green flower",
        [("candle", 5, []), ("croissant", 3, []), ("flower", 1, ["green"])],
        [(0, "under", 1, P), (1, "right of", 2, P)],
    ),
    (
        "a cup on top of a book next to a lamp behind a vase",
        [("cup", 1, []), ("book", 1, []), ("lamp", 1, []), ("vase", 1, [])],
        [(0, "on top of", 1, P), (1, "next to", 2, P), (2, "behind", 3, P)],
    ),
    (
        "a dog chasing a cat above a wall",
        [("dog", 1, []), ("cat", 1, []), ("wall", 1, [])],
        [(0, "chasing", 1, V), (1, "above", 2, P)],
    ),
    # relations mixed with lists
    (
        "a red circle left of a blue square and two green triangles above a yellow star",
        [("circle", 1, ["red"]), ("square", 1, ["blue"]), ("triangle", 2, ["green"]), ("star", 1, ["yellow"])],
        [(0, "left of", 1, P), (2, "above", 3, P)],
    ),
    (
        "a cat, a dog chasing a ball and a bird",
        [("cat", 1, []), ("dog", 1, []), ("ball", 1, []), ("bird", 1, [])],
        [(1, "chasing", 2, V)],
    ),
    (
        "a circle left of a square and a triangle",
        [("circle", 1, []), ("square", 1, []), ("triangle", 1, [])],
        [(0, "left of", 1, P)],
    ),
    (
        "a circle left of a square, a square above a star",
        [("circle", 1, []), ("square", 1, []), ("square", 1, []), ("star", 1, [])],
        [(0, "left of", 1, P), (2, "above", 3, P)],
    ),
    # the same noun twice is two entities
    ("a circle left of a circle", [("circle", 1, []), ("circle", 1, [])], [(0, "left of", 1, P)]),
    # irregular and -es plurals
    ("three mice", [("mouse", 3, [])]),
    ("two people next to four children", [("person", 2, []), ("child", 4, [])], [(0, "next to", 1, P)]),
    ("two geese near five sheep", [("goose", 2, []), ("sheep", 5, [])], [(0, "near", 1, P)]),
    ("three green leaves and two sharp knives", [("leaf", 3, ["green"]), ("knife", 2, ["sharp"])]),
    ("three fish under two boxes", [("fish", 3, []), ("box", 2, [])], [(0, "under", 1, P)]),
    ("four cherries", [("cherry", 4, [])]),
    # capitalisation, trailing period, extra spaces
    (
        "Two Red Circles Left Of A Blue Square",
        [("circle", 2, ["red"]), ("square", 1, ["blue"])],
        [(0, "left of", 1, P)],
    ),
    ("a red circle.", [("circle", 1, ["red"])]),
    ("  A dog   chasing a CAT .  ", [("dog", 1, []), ("cat", 1, [])], [(0, "chasing", 1, V)]),
    # optional lead-ins and "in the image"
    ("there are two dogs", [("dog", 2, [])]),
    ("There is a cat in the image.", [("cat", 1, [])]),
    ("a photo of a banana", [("banana", 1, [])]),
    (
        "an image of two bananas next to a bowl in the picture",
        [("banana", 2, []), ("bowl", 1, [])],
        [(0, "next to", 1, P)],
    ),
    # open vocabulary: hyphenated and unknown words are fine
    # a modifier outside the attribute lexicon is part of a compound noun, never an attribute
    ("a one-eyed purple t-shirt", [("one-eyed t-shirt", 1, ["purple"])]),
    ("two left shoes", [("left shoe", 2, [])]),
]


@pytest.fixture(scope="module")
def dec():
    return TemplateDecomposer()


def test_table_is_large_and_varied():
    assert len(TABLE) >= 40


@pytest.mark.parametrize("case", TABLE, ids=[c[0] for c in TABLE])
def test_table(dec, case):
    prompt, entities, *rest = case
    relations = rest[0] if rest else ()
    graph = dec.decompose(prompt)
    assert without_questions(graph.to_dict()) == expected(prompt, entities, relations)
    assert all(a.question for a in graph.atoms), "every atom carries a question"


def test_design_example_exactly(dec):
    prompt = "two red circles left of a blue square"
    assert dec.decompose(prompt).to_dict() == {
        "prompt": "two red circles left of a blue square",
        "entities": [{"id": "e1", "noun": "circle", "count": 2}, {"id": "e2", "noun": "square", "count": 1}],
        "atoms": [
            {
                "id": "a1",
                "kind": "object",
                "entity": "e1",
                "parents": [],
                "question": "Are there any circles in the image?",
            },
            {
                "id": "a2",
                "kind": "count",
                "entity": "e1",
                "value": 2,
                "parents": ["a1"],
                "question": "How many circles are in the image?",
            },
            {
                "id": "a3",
                "kind": "attribute",
                "entity": "e1",
                "value": "red",
                "parents": ["a1"],
                "question": "Are the circles red?",
            },
            {
                "id": "a4",
                "kind": "object",
                "entity": "e2",
                "parents": [],
                "question": "Are there any squares in the image?",
            },
            {
                "id": "a5",
                "kind": "count",
                "entity": "e2",
                "value": 1,
                "parents": ["a4"],
                "question": "How many squares are in the image?",
            },
            {
                "id": "a6",
                "kind": "attribute",
                "entity": "e2",
                "value": "blue",
                "parents": ["a4"],
                "question": "Is the square blue?",
            },
            {
                "id": "a7",
                "kind": "relation",
                "entity": "e1",
                "value": "left of",
                "other": "e2",
                "skill": "position",
                "parents": ["a1", "a4"],
                "question": "Are the circles left of the square?",
            },
        ],
    }


QUESTIONS = [
    (
        "a red circle",
        ["Are there any circles in the image?", "How many circles are in the image?", "Is the circle red?"],
    ),
    (
        "A dog chasing two cats",
        [
            "Are there any dogs in the image?",
            "How many dogs are in the image?",
            "Are there any cats in the image?",
            "How many cats are in the image?",
            "Is the dog chasing the cats?",
        ],
    ),
    (
        "three white mice under a table",
        [
            "Are there any mice in the image?",
            "How many mice are in the image?",
            "Are the mice white?",
            "Are there any tables in the image?",
            "How many tables are in the image?",
            "Are the mice under the table?",
        ],
    ),
    (
        "two glasses to the right of a box",
        [
            "Are there any glasses in the image?",
            "How many glasses are in the image?",
            "Are there any boxes in the image?",
            "How many boxes are in the image?",
            "Are the glasses right of the box?",
        ],
    ),
    (
        "a person next to two sheep",
        [
            "Are there any people in the image?",
            "How many people are in the image?",
            "Are there any sheep in the image?",
            "How many sheep are in the image?",
            "Is the person next to the sheep?",
        ],
    ),
    (
        "a tall man playing with two puppies on top of a rug",
        [
            "Are there any men in the image?",
            "How many men are in the image?",
            "Is the man tall?",
            "Are there any puppies in the image?",
            "How many puppies are in the image?",
            "Are there any rugs in the image?",
            "How many rugs are in the image?",
            "Is the man playing with the puppies?",
            "Are the puppies on top of the rug?",
        ],
    ),
    (
        "four striped knives behind a loaf",
        [
            "Are there any knives in the image?",
            "How many knives are in the image?",
            "Are the knives striped?",
            "Are there any loaves in the image?",
            "How many loaves are in the image?",
            "Are the knives behind the loaf?",
        ],
    ),
]


@pytest.mark.parametrize("prompt, questions", QUESTIONS, ids=[q[0] for q in QUESTIONS])
def test_geneval2_questions(dec, prompt, questions):
    assert [a.question for a in dec.decompose(prompt).atoms] == questions


def test_prompt_is_kept_unchanged_and_graph_is_valid(dec):
    prompt = "  Two Red Circles, AND a square.  "
    g = dec.decompose(prompt)
    assert g.prompt == prompt
    assert SceneGraph.from_json(g.to_json()) == g
    assert [e.noun for e in g.entities] == ["circle", "square"]


def test_is_an_atom_decomposer(dec):
    assert isinstance(dec, AtomDecomposer)


# -- extension through the constructor ---------------------------------------------------------
def test_verbs_extend_through_the_constructor():
    prompt = "a dog sniffing two flowers"
    with pytest.raises(PromptParseError):
        TemplateDecomposer().decompose(prompt)  # "sniffing" is not a relation by default
    g = TemplateDecomposer(verbs=["sniffing"]).decompose(prompt)
    assert without_questions(g.to_dict()) == expected(
        prompt, [("dog", 1, []), ("flower", 2, [])], [(0, "sniffing", 1, V)]
    )
    assert g.atoms[-1].question == "Is the dog sniffing the flowers?"


def test_verb_and_relation_mappings_canonicalise():
    dec = TemplateDecomposer(verbs={"chases": "chasing"}, relations={"beside": "next to"})
    g = dec.decompose("a dog chases a cat beside a tree")
    rels = [(a.value, a.skill) for a in g.atoms if a.kind == "relation"]
    assert rels == [("chasing", "verb"), ("next to", "position")]
    # the defaults are still there
    assert dec.decompose("a dog playing with a ball").atoms[-1].value == "playing with"


# -- errors name the span ----------------------------------------------------------------------
ERRORS = [
    # (prompt, span, position, fragment of the reason)
    ("a circle left of of a square", "left of of", 9, "expected a noun phrase after 'left of'"),
    ("a circle left of", "left of", 9, "expected a noun phrase after 'left of', found the end of the prompt"),
    ("a circle to the right of.", "to the right of", 9, "found the end of the prompt"),
    ("", "", 0, "the prompt is empty"),
    ("   ", "   ", 0, "the prompt is empty"),
    ("two", "two", 0, "expected a noun after the count word 'two', found the end of the prompt"),
    ("a circle and two", "two", 13, "expected a noun after the count word 'two'"),
    ("two and a circle", "two and", 0, "expected a noun after the count word 'two', found 'and'"),
    ("two left of a square", "two left of", 0, "found the relation 'left of'"),
    ("red circles", "red circles", 0, "must start with a count word"),
    ("a circle and red square", "and red square", 9, "expected a noun phrase after 'and'"),
    ("2 circles", "2 circles", 0, "write numbers as words"),
    ("eleven circles", "eleven circles", 0, "must start with a count word"),
    ("the dog chasing a cat", "the dog", 0, "must start with a count word"),
    ("a circle two squares", "a circle two", 0, "between 'a circle' and 'two'"),
    ("a circle and", "and", 9, "expected a noun phrase after 'and', found the end of the prompt"),
    ("and a circle", "and", 0, "expected a noun phrase before 'and'"),
    ("left of a circle", "left of", 0, "expected a noun phrase before the relation 'left of'"),
    ("a circle, left of a square", ", left of", 8, "found the relation 'left of'"),
    ("a circle, , a square", ", ,", 8, "expected a noun phrase after ','"),
    ("a circle; a square", ";", 8, "unexpected character ';'"),
    ("a circle. a square", ".", 8, "a period is only allowed at the end"),
    ("a circle!", "!", 8, "unexpected character '!'"),
    ("there are", "there are", 0, "expected a noun phrase after 'there are'"),
    ("a big and red circle", "and red circle", 6, "expected a noun phrase after 'and'"),
    ("a circle left of in the image", "left of", 9, "found 'in the image'"),
]


@pytest.mark.parametrize("prompt, span, position, fragment", ERRORS, ids=[e[0] or "<empty>" for e in ERRORS])
def test_errors_name_the_span(dec, prompt, span, position, fragment):
    with pytest.raises(PromptParseError) as err:
        dec.decompose(prompt)
    e = err.value
    assert (e.span, e.start) == (span, position)
    assert str(e).startswith(f"cannot read {span!r} in prompt {prompt!r} (position {position}): ")
    assert fragment in str(e)


def test_brief_example_message(dec):
    with pytest.raises(SceneGraphError) as err:
        dec.decompose("a circle left of of a square")
    assert str(err.value).startswith(
        "cannot read 'left of of' in prompt 'a circle left of of a square' (position 9): "
        "expected a noun phrase after 'left of'"
    )
    assert isinstance(err.value, CastError)


def test_non_string_prompt_is_a_scene_graph_error(dec):
    with pytest.raises(SceneGraphError, match="must be a string"):
        dec.decompose(None)


# -- the shared contract -----------------------------------------------------------------------
class TestTemplateConformance(AtomDecomposerConformance):
    prompts = tuple(case[0] for case in TABLE[::3]) + (
        "a red circle",
        "two blue squares left of a green triangle",
        "five candles under three croissants to the right of a green flower",
        "A dog chasing two cats, and three mice under a table.",
    )

    def make_decomposer(self):
        return TemplateDecomposer()


def test_errors_quote_a_long_prompt_cut():
    from cast_core.errors import SceneGraphError

    prompt = "a red cat " + "with " * 5000
    with pytest.raises(SceneGraphError) as err:
        TemplateDecomposer().decompose(prompt)
    assert len(str(err.value)) < 600 and f"({len(prompt)} characters)" in str(err.value)

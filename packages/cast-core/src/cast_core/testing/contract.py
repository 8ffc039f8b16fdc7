"""The docs/design.md §3.1 example graph, as data: the one scene graph every decomposer and world that
claims the contract must reproduce exactly (questions aside). Kept in one place so that the
contract tests of every package compare against the same object."""

DESIGN_EXAMPLE = {
    "prompt": "two red circles left of a blue square",
    "entities": [{"id": "e1", "noun": "circle", "count": 2}, {"id": "e2", "noun": "square", "count": 1}],
    "atoms": [
        {"id": "a1", "kind": "object", "entity": "e1", "parents": []},
        {"id": "a2", "kind": "count", "entity": "e1", "value": 2, "parents": ["a1"]},
        {"id": "a3", "kind": "attribute", "entity": "e1", "value": "red", "parents": ["a1"]},
        {"id": "a4", "kind": "object", "entity": "e2", "parents": []},
        {"id": "a5", "kind": "count", "entity": "e2", "value": 1, "parents": ["a4"]},
        {"id": "a6", "kind": "attribute", "entity": "e2", "value": "blue", "parents": ["a4"]},
        {
            "id": "a7",
            "kind": "relation",
            "entity": "e1",
            "value": "left of",
            "other": "e2",
            "skill": "position",
            "parents": ["a1", "a4"],
        },
    ],
}

#: GenEval 2's questions for the example's atoms, in atom order
DESIGN_QUESTIONS = [
    "Are there any circles in the image?",
    "How many circles are in the image?",
    "Are the circles red?",
    "Are there any squares in the image?",
    "How many squares are in the image?",
    "Is the square blue?",
    "Are the circles left of the square?",
]

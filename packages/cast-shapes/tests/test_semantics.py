"""The meaning of each atom, on exact detections (no pixels): binding, counts, colours, relations."""

import math

import pytest

from cast_core.scene_graph import Atom, Entity, SceneGraph
from cast_shapes.grammar import graph_for_prompt
from cast_shapes.semantics import Detection, evaluate, ground_truth
from cast_shapes.world import SHAPES, Placed


def det(shape, colour, cx=10.0, cy=10.0):
    return Detection(shape, colour, cx, cy, {s: float(s == shape) for s in SHAPES})


def verdicts(prompt, dets):
    return [r.verdict for r in evaluate(graph_for_prompt(prompt), dets)]


def test_each_atom_answers_its_own_question():
    # "two red circles" against two blue circles: there are circles, two of them, not red
    assert verdicts("two red circles", [det("circle", "blue"), det("circle", "blue", 20)]) == [True, True, False]
    assert verdicts("two red circles", [det("circle", "red"), det("square", "red", 20)]) == [True, False, True]
    assert verdicts("two red circles", [det("square", "red")]) == [False, False, False]
    assert verdicts("two red circles", []) == [False, False, False]


def test_attribute_means_all_of_them():
    two = [det("circle", "red"), det("circle", "blue", 20)]
    four = [det("circle", "red", x) for x in (2, 8, 14)] + [det("circle", "green", 20)]
    g = graph_for_prompt("two red circles")
    assert evaluate(g, two)[2].score < 0.5 and evaluate(g, four)[2].score < 0.5
    assert evaluate(g, four)[2].score > evaluate(g, two)[2].score > 0.0
    assert evaluate(g, [det("circle", "red"), det("circle", "red", 20)])[2].score == 1.0


def test_count_score_decays_with_the_error():
    g = graph_for_prompt("three squares")
    scores = [evaluate(g, [det("square", "red", 4 * i) for i in range(n)])[1].score for n in range(6)]
    assert scores[3] == 1.0
    assert scores[2] == scores[4] == pytest.approx(math.exp(-1))
    assert scores[0] < scores[1] < scores[2]
    assert all(s < 0.5 for i, s in enumerate(scores) if i != 3)


def test_same_noun_entities_are_told_apart_by_colour():
    p = "a red circle left of two blue circles"
    good = [det("circle", "red", 5), det("circle", "blue", 20), det("circle", "blue", 25)]
    assert all(verdicts(p, good))
    # colour is identity here: a green circle is neither entity's; e1 is missing, e2 is intact
    wrong_colour = [det("circle", "green", 5), det("circle", "blue", 20), det("circle", "blue", 25)]
    assert verdicts(p, wrong_colour) == [False, False, False, True, True, True, False]
    assert verdicts(p, good + [det("circle", "blue", 30)]) == [True] * 4 + [False, True, True]
    # a colourless entity sharing its noun takes the circles no other entity claims
    q = "a circle left of two blue circles"
    assert verdicts(q, good) == [True] * 6
    assert verdicts(q, [det("circle", "green", 5)] + good[1:]) == [True] * 6
    assert verdicts(q, good[1:]) == [False, False, True, True, True, False]


def test_relations_use_group_centres_with_a_margin():
    p = "two circles left of a square"
    assert verdicts(p, [det("circle", "red", 4), det("circle", "red", 14), det("square", "red", 16)])[-1]
    # group centre 9 vs 10: only 1 px, inside the margin
    assert not verdicts(p, [det("circle", "red", 4), det("circle", "red", 14), det("square", "red", 10)])[-1]
    assert not verdicts(p, [det("circle", "red", 20), det("circle", "red", 24), det("square", "red", 10)])[-1]
    vert = "a triangle above a square"
    assert verdicts(vert, [det("triangle", "red", 10, 5), det("square", "red", 10, 20)])[-1]
    assert not verdicts(vert, [det("triangle", "red", 10, 20), det("square", "red", 10, 5)])[-1]


def test_unknown_vocabulary_scores_zero_with_nothing_to_point_at():
    g = SceneGraph(
        "a big dog next to a circle",
        (Entity("e1", "dog"), Entity("e2", "circles")),
        (
            Atom("a1", "object", "e1"),
            Atom("a2", "count", "e1", ("a1",), value=1),
            Atom("a3", "attribute", "e1", ("a1",), value="big"),
            Atom("a4", "object", "e2"),
            Atom("a5", "count", "e2", ("a4",), value=1),
            Atom("a6", "attribute", "e2", ("a4",), value="big"),
            Atom("a7", "relation", "e1", ("a1", "a4"), value="next to", other="e2", skill="position"),
            Atom("a8", "relation", "e2", ("a4",), value="under", other="e1", skill="position"),
        ),
    ).validate()
    res = evaluate(g, [det("circle", "red")])
    assert [r.score for r in res] == [0, 0, 0, 1, 1, 0, 0, 0]
    assert [r.members for r in res] == [None, None, None, (0,), (0,), (0,), None, None]


def test_ground_truth_reads_a_layout():
    layout = (Placed("circle", "red", 5.0, 5.0, 8, 0), Placed("square", "blue", 20.0, 6.0, 8, 1))
    g = graph_for_prompt("a red circle left of a blue square")
    assert [r.verdict for r in ground_truth(g, layout)] == [True] * 7
    g = graph_for_prompt("a red circle right of a blue square")
    assert [r.verdict for r in ground_truth(g, layout)] == [True] * 6 + [False]


def test_count_points_at_the_objects_unless_some_are_missing():
    g = graph_for_prompt("three squares")
    members = [evaluate(g, [det("square", "red", 4 * i) for i in range(n)])[1].members for n in range(6)]
    # too few: the missing square is nowhere to point at (flat map); enough or too many: the squares
    assert members == [None, None, None, (0, 1, 2), (0, 1, 2, 3), (0, 1, 2, 3, 4)]


def test_surplus_count_maps_point_at_the_extra_objects_only():
    g = graph_for_prompt("two squares")
    weak = Detection("square", "red", 30.0, 10.0, {**{s: 0.0 for s in SHAPES}, "square": 0.6})
    dets = [det("square", "red", 2), weak, det("square", "red", 14), det("square", "red", 20)]
    every = evaluate(g, dets)
    surplus = evaluate(g, dets, count_maps="surplus")
    assert [r.score for r in surplus] == [r.score for r in every]  # scores never change
    assert every[1].members == (0, 1, 2, 3)
    # two surplus squares: the least evidence first (index 1), then the latest of the exact ones
    assert surplus[1].members == (1, 3)
    assert surplus[0].members == every[0].members  # other atoms keep their maps
    exact = evaluate(g, dets[:1] + dets[2:3], count_maps="surplus")
    assert exact[1].members == (0, 1)  # no surplus: the count atom is about its objects
    assert evaluate(g, dets[:1], count_maps="surplus")[1].members is None  # too few: flat, as before
    with pytest.raises(ValueError, match="count_maps"):
        evaluate(g, dets, count_maps="some")

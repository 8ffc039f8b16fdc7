"""The docs/design.md §3.1 JSON contract: round-trips exactly, and every malformation names its atom."""

import json

import pytest

from cast_core import Atom, Entity, SceneGraph, SceneGraphError
from cast_core.testing.contract import DESIGN_EXAMPLE


def _with(**changes):
    data = json.loads(json.dumps(DESIGN_EXAMPLE))
    for atom_id, patch in changes.items():
        atom = next(a for a in data["atoms"] if a["id"] == atom_id)
        atom.update(patch)
    return data


def test_design_example_round_trips_exactly():
    g = SceneGraph.from_dict(DESIGN_EXAMPLE)
    assert g.to_dict() == DESIGN_EXAMPLE
    assert SceneGraph.from_json(g.to_json(indent=2)) == g
    assert g.atom("a7").other == "e2" and g.entity("e1").count == 2
    assert g.parent_indices()[6] == [0, 3]


def test_question_is_kept_when_present():
    data = _with(a2={"question": "How many circles are in the image?"})
    g = SceneGraph.from_dict(data)
    assert g.atom("a2").question == "How many circles are in the image?"
    assert g.to_dict()["atoms"][1]["question"] == "How many circles are in the image?"


def test_topological_order_puts_parents_first():
    g = SceneGraph(
        "p",
        (Entity("e1", "dog"),),
        (Atom("a2", "count", "e1", ("a1",), value=1), Atom("a1", "object", "e1")),
    )
    assert [a.id for a in g.topological_order()] == ["a1", "a2"]


@pytest.mark.parametrize(
    "data, fragments",
    [
        (_with(a1={"parents": ["a7"]}), ["cycle", "a1", "a7"]),
        (_with(a3={"parents": ["a9"]}), ["atom 'a3'", "parent 'a9'", "does not exist"]),
        (_with(a2={"kind": "colour"}), ["atom 'a2'", "kind 'colour'", "object, count, attribute, relation"]),
        (_with(a7={"other": "e5"}), ["atom 'a7'", "'e5'"]),
        (_with(a7={"skill": "vibe"}), ["atom 'a7'", "skill 'vibe'"]),
        (_with(a2={"value": "two"}), ["atom 'a2'", "count atom", "'two'"]),
        (_with(a3={"entity": "e9"}), ["atom 'a3'", "entity 'e9'"]),
        (_with(a3={"parnts": ["a1"]}), ["atom 'a3'", "unknown field", "'parnts'"]),
        (_with(a3={"id": "a2"}), ["atom id 'a2' is used twice"]),
        (_with(a1={"parents": ["a1"]}), ["atom 'a1'", "itself"]),
        (_with(a2={"skill": "position"}), ["atom 'a2'", "only relations"]),
    ],
)
def test_validation_errors_name_the_atom(data, fragments):
    with pytest.raises(SceneGraphError) as err:
        SceneGraph.from_dict(data)
    for fragment in fragments:
        assert fragment in str(err.value), (fragment, str(err.value))


def test_longer_cycle_is_reported_with_its_path():
    g = SceneGraph(
        "p",
        (Entity("e1", "dog"),),
        (
            Atom("a1", "object", "e1", ("a3",)),
            Atom("a2", "count", "e1", ("a1",), value=1),
            Atom("a3", "attribute", "e1", ("a2",), value="red"),
        ),
    )
    with pytest.raises(SceneGraphError, match=r"a1 -> a3 -> a2 -> a1|a3 -> a2 -> a1 -> a3|a2 -> a1 -> a3 -> a2"):
        g.validate()


def test_bad_json_names_line_and_column():
    with pytest.raises(SceneGraphError, match="line 2, column"):
        SceneGraph.from_json('{"prompt": "x",\n "atoms": [,]}')


def test_unknown_atom_lookup_lists_atoms():
    g = SceneGraph.from_dict(DESIGN_EXAMPLE)
    with pytest.raises(SceneGraphError, match="atoms are a1, a2"):
        g.atom("a42")

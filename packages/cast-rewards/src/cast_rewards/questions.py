"""GenEval 2's question templates, one per atom kind.

A VQA judge (Soft-TIFA) is only comparable with published GenEval 2 numbers if it is asked the
same questions, so the wording here copies GenEval 2's templates (notes §1):

- object:    ``Are there any {plural} in the image?``
- count:     ``How many {plural} are in the image?`` (plural even for one thing, as GenEval 2 does)
- attribute: ``Is the {noun} {attr}?`` for one thing, ``Are the {plural} {attr}?`` otherwise
- relation:  ``Is the {noun} {rel} the {other}?`` / ``Are the {plural} {rel} the {other}?``, where
  ``{other}`` is singular when the other entity's count is one and plural otherwise; the same
  template serves verbs ("Is the dog chasing the cat?").
"""

from __future__ import annotations

from cast_rewards.inflection import pluralize


def _named(noun: str, count: int) -> str:
    return noun if count == 1 else pluralize(noun)


def _be(count: int) -> str:
    return "Is" if count == 1 else "Are"


def object_question(noun: str) -> str:
    return f"Are there any {pluralize(noun)} in the image?"


def count_question(noun: str) -> str:
    return f"How many {pluralize(noun)} are in the image?"


def attribute_question(noun: str, count: int, attribute: str) -> str:
    return f"{_be(count)} the {_named(noun, count)} {attribute}?"


def relation_question(noun: str, count: int, relation: str, other_noun: str, other_count: int) -> str:
    return f"{_be(count)} the {_named(noun, count)} {relation} the {_named(other_noun, other_count)}?"

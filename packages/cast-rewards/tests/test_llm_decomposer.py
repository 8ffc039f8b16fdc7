"""The llm decomposer with a fake generate function (no model): valid answers parsed, a
malformed answer repaired by the one retry, a second failure falling back to the template
decomposer with a warning, and results cached on disk by (model, prompt)."""

import json

import pytest

from cast_core.testing.conformance import AtomDecomposerConformance
from cast_rewards.llm import LLMDecomposer, extract_json
from cast_rewards.template import TemplateDecomposer

TEMPLATE = TemplateDecomposer()


class Scripted:
    """Answers from a script; records the conversations it was shown."""

    def __init__(self, *answers):
        self.answers, self.seen = list(answers), []

    def __call__(self, messages):
        self.seen.append(messages)
        return self.answers.pop(0)


def graph_text(prompt):
    return TEMPLATE.decompose(prompt).to_json()


def test_a_valid_answer_in_prose_is_parsed(tmp_path):
    fake = Scripted("Sure! Here it is:\n```json\n" + graph_text("a red cat") + "\n```")
    graph = LLMDecomposer(generate=fake, cache_dir=tmp_path, model_id="fake").decompose("a red cat")
    assert graph == TEMPLATE.decompose("a red cat") and len(fake.seen) == 1
    system, example_q, example_a, question = fake.seen[0]
    assert system["role"] == "system" and question == {"role": "user", "content": "a red cat"}
    assert json.loads(example_a["content"])["prompt"] == example_q["content"]  # the worked example is a real graph


def test_a_malformed_answer_is_repaired_by_the_retry(tmp_path):
    bad = json.loads(graph_text("two dogs"))
    bad["atoms"][1]["parents"] = ["a9"]  # a parent that does not exist
    fake = Scripted(json.dumps(bad), graph_text("two dogs"))
    graph = LLMDecomposer(generate=fake, cache_dir=tmp_path, model_id="fake").decompose("two dogs")
    assert graph == TEMPLATE.decompose("two dogs") and len(fake.seen) == 2
    assert "not a valid scene graph" in fake.seen[1][-1]["content"] and "a9" in fake.seen[1][-1]["content"]


def test_two_failures_fall_back_to_the_template_with_a_warning(tmp_path):
    fake = Scripted("no idea", "{still not json")
    with pytest.warns(UserWarning, match="using the template decomposer"):
        graph = LLMDecomposer(generate=fake, cache_dir=tmp_path, model_id="fake").decompose("three blue cups")
    assert graph == TEMPLATE.decompose("three blue cups")
    assert not list(tmp_path.glob("*.json"))  # a fallback is not cached as the LLM's answer


def test_results_are_cached_on_disk_by_model_and_prompt(tmp_path):
    first = LLMDecomposer(generate=Scripted(graph_text("a red cat")), cache_dir=tmp_path, model_id="m1")
    first.decompose("a red cat")
    again = LLMDecomposer(generate=Scripted(), cache_dir=tmp_path, model_id="m1")  # would fail if called
    assert again.decompose("a red cat") == TEMPLATE.decompose("a red cat") and again.calls == 0
    other = LLMDecomposer(generate=Scripted(graph_text("a red cat")), cache_dir=tmp_path, model_id="m2")
    other.decompose("a red cat")
    assert other.calls == 1  # another model is another cache entry


def test_the_prompt_is_kept_even_if_the_model_rewrites_it(tmp_path):
    answer = json.loads(graph_text("a red cat"))
    answer["prompt"] = "A red cat."
    graph = LLMDecomposer(generate=Scripted(json.dumps(answer)), cache_dir=tmp_path, model_id="fake").decompose(
        "a red cat"
    )
    assert graph.prompt == "a red cat"


def test_extract_json_skips_braces_in_strings_and_prose():
    assert extract_json('x {"a": "}{", "b": {"c": 1}} y {"d": 2}') == {"a": "}{", "b": {"c": 1}}
    assert extract_json('{"q": "a \\"}\\" b", "e": "\\\\"}') == {"q": 'a "}" b', "e": "\\"}
    with pytest.raises(ValueError):
        extract_json("no object here")


class TestLLMDecomposerConformance(AtomDecomposerConformance):
    prompts = ("a red cat", "two dogs left of a blue car")

    def make_decomposer(self):
        import tempfile

        return LLMDecomposer(
            generate=lambda messages: graph_text(messages[-1]["content"]), cache_dir=tempfile.mkdtemp(), model_id="echo"
        )


def test_generate_needs_a_model_id():
    with pytest.raises(ValueError, match="needs model_id="):
        LLMDecomposer(generate=lambda m: "")

"""The ``llm`` decomposer: a local chat LLM (through transformers) writes the scene graph.

For prompts the ``template`` grammar cannot read ("a corgi wearing a tiny crown on a velvet
cushion"). The model is shown the docs/design.md §3.1 JSON contract and one worked example (the template
decomposer's own graph of a GenEval-style prompt), and asked for the graph of the user's prompt.
Its answer is validated (``SceneGraph.from_dict``: kinds, references, parents, no cycles). A
malformed answer is sent back once with the validation error; if the second answer is malformed
too, the ``template`` decomposer is used with a warning (and if it cannot read the prompt either,
its error is raised). Results are cached on disk by (model, prompt): an LLM call costs seconds,
and a run decomposes the same prompts every time.

``generate`` (``messages -> text``) can replace the model: tests pass a fake; a service-backed
LLM is a function away.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from pathlib import Path
from typing import Any, Callable

from cast_core.errors import SceneGraphError
from cast_core.scene_graph import SceneGraph

__all__ = ["LLMDecomposer", "SYSTEM_PROMPT", "extract_json"]

EXAMPLE_PROMPT = "two red cups left of a wooden chair"

SYSTEM_PROMPT = """You decompose text-to-image prompts into scene graphs of atomic, verifiable claims.
Answer with one JSON object and nothing else, in this format:
{"prompt": <the prompt, unchanged>,
 "entities": [{"id": "e1", "noun": <singular noun>, "count": <integer>}, ...],
 "atoms": [{"id": "a1", "kind": "object"|"count"|"attribute"|"relation", "entity": <entity id>,
            "value": <count integer | attribute adjective | relation phrase>, "other": <second entity id, relations only>,
            "skill": "position"|"verb" (relations only), "parents": [<atom ids this claim depends on>],
            "question": <a yes/no question, or "How many ...?" for counts>}, ...]}
Rules: every entity has one "object" atom (existence, no parents); its count and attribute atoms have that
object atom as parent; a relation has both entities' object atoms as parents; ids are unique."""


def extract_json(text: str) -> Any:
    """The first balanced ``{...}`` object in ``text`` (models wrap JSON in prose or fences)."""
    start = text.find("{")
    while start != -1:
        depth, in_string, escape = 0, False, False
        for i in range(start, len(text)):
            c = text[i]
            if in_string:
                if escape:
                    escape = False
                elif c == "\\":
                    escape = True
                elif c == '"':
                    in_string = False
                continue
            if c == '"':
                in_string = True
            elif c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    try:
                        return json.loads(text[start : i + 1])
                    except json.JSONDecodeError:
                        break
        start = text.find("{", start + 1)
    raise ValueError("the answer holds no JSON object")


#: what decomposer_kwargs.path must name, said in the errors
CHAT_MODEL_DIR = "a local chat model directory (config.json, weights, tokenizer), e.g. a Qwen3 instruct model"


class LLMDecomposer:
    """``path``: a local chat model directory (or hub id) for transformers; or ``generate``."""

    def __init__(
        self,
        path: str | None = None,
        *,
        generate: Callable[[list[dict]], str] | None = None,
        cache_dir: str | Path | None = None,
        max_new_tokens: int = 1024,
        device: str | None = None,
        model_id: str | None = None,
        fallback: bool = True,
    ):
        if (path is None) == (generate is None):
            raise ValueError("the llm decomposer needs path= (a local chat model, e.g. a Qwen3 instruct) or generate=")
        if generate is not None and not model_id:
            raise ValueError(
                "the llm decomposer with generate= needs model_id= (the cache is keyed by it: two "
                "models must not share answers)"
            )
        if generate is None:  # the model loads at the first prompt: its path and device are checked now
            from cast_rewards.model_dirs import check_device, check_model_dir

            check_model_dir(path, owner="llm decomposer", key="decomposer_kwargs.path", wants=CHAT_MODEL_DIR)
            if device is not None:
                check_device(device, "decomposer_kwargs.device")
        self.generate = generate or _transformers_generate(path, max_new_tokens, device)
        self.model_id = model_id or str(path)
        self.cache_dir = (
            Path(cache_dir).expanduser()
            if cache_dir is not None
            else Path.home() / ".cache" / "cast" / "llm-decompositions"
        )
        self.calls = 0  # generate() calls made (tests, logs)
        self.fallback = bool(fallback)  # False: raise instead of using the template (the auto decomposer decides)
        self._template: Any = None

    # -- the conversation ----------------------------------------------------------------------------
    def _example(self) -> list[dict]:
        graph = self._fallback().decompose(EXAMPLE_PROMPT)
        return [{"role": "user", "content": EXAMPLE_PROMPT}, {"role": "assistant", "content": graph.to_json()}]

    def messages(self, prompt: str) -> list[dict]:
        return [{"role": "system", "content": SYSTEM_PROMPT}, *self._example(), {"role": "user", "content": prompt}]

    def _fallback(self):
        if self._template is None:
            from cast_rewards.template import TemplateDecomposer

            self._template = TemplateDecomposer()
        return self._template

    def _parse(self, prompt: str, answer: str) -> SceneGraph:
        data = extract_json(answer)
        if isinstance(data, dict):
            data["prompt"] = prompt  # the contract keeps the prompt unchanged; do not trust a paraphrase
        return SceneGraph.from_dict(data)

    # -- AtomDecomposer --------------------------------------------------------------------------------
    def decompose(self, prompt: str) -> SceneGraph:
        cached = self._read_cache(prompt)
        if cached is not None:
            return cached
        messages = self.messages(prompt)
        error = ""
        for attempt in range(2):
            self.calls += 1
            answer = self.generate(messages)
            try:
                graph = self._parse(prompt, answer)
            except (ValueError, SceneGraphError) as err:
                error = str(err)
                messages = [
                    *messages,
                    {"role": "assistant", "content": answer},
                    {
                        "role": "user",
                        "content": f"That is not a valid scene graph: {error}. "
                        "Answer again with the corrected JSON object only.",
                    },
                ]
                continue
            self._write_cache(prompt, graph)
            return graph
        if not self.fallback:
            raise SceneGraphError(
                f"llm decomposer ({self.model_id}): no valid scene graph for {prompt!r} after a retry ({error})"
            )
        warnings.warn(
            f"llm decomposer ({self.model_id}): no valid scene graph for {prompt!r} after a retry "
            f"({error}); using the template decomposer",
            stacklevel=2,
        )
        return self._fallback().decompose(prompt)

    # -- cache -------------------------------------------------------------------------------------------
    def _cache_file(self, prompt: str) -> Path:
        # everything the answer depends on: the model, the instructions, the worked example, the prompt
        key = hashlib.sha256(json.dumps([self.model_id, SYSTEM_PROMPT, EXAMPLE_PROMPT, prompt]).encode()).hexdigest()[
            :24
        ]
        return self.cache_dir / f"{key}.json"

    def _read_cache(self, prompt: str) -> SceneGraph | None:
        path = self._cache_file(prompt)
        if not path.is_file():
            return None
        try:
            return SceneGraph.from_dict(json.loads(path.read_text()))
        except (ValueError, SceneGraphError):
            return None  # a damaged entry is simply recomputed

    def _write_cache(self, prompt: str, graph: SceneGraph) -> None:
        import os
        import tempfile

        path = self._cache_file(prompt)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")  # unique: processes may write the same key
        with os.fdopen(fd, "w") as f:
            f.write(graph.to_json())
        os.replace(tmp, path)  # atomic: a crash never leaves half a file


def _transformers_generate(path: str, max_new_tokens: int, device: str | None) -> Callable[[list[dict]], str]:
    """Greedy chat generation with a local transformers model, loaded on first use."""
    state: dict[str, Any] = {}

    def generate(messages: list[dict]) -> str:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if not state:
            dev = device or ("cuda" if torch.cuda.is_available() else "cpu")
            state["tok"] = AutoTokenizer.from_pretrained(path)
            state["model"] = (
                AutoModelForCausalLM.from_pretrained(
                    path, dtype=torch.bfloat16 if dev.startswith("cuda") else torch.float32
                )
                .to(dev)
                .eval()
            )
            state["device"] = dev
        tok, model = state["tok"], state["model"]
        text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, enable_thinking=False)
        enc = tok(text, return_tensors="pt").to(state["device"])
        with torch.no_grad():
            out = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False)
        return tok.decode(out[0, enc["input_ids"].shape[1] :], skip_special_tokens=True)

    return generate

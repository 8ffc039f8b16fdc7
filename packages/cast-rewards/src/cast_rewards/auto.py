"""The ``auto`` decomposer, the real-model recipes' default: the ``template`` grammar when it reads
the prompt, else the ``llm`` decomposer (when a model is configured), else one prompt-level atom.

Why this order: the grammar is exact and free but reads only GenEval-style prompts; an LLM reads
anything but costs seconds and can be wrong (its output is validated); a prompt-level atom
("Does this image show "…"?", VQAScore's question) is always sound but gives CAST no per-atom
signal, so it comes with a warning. The path each prompt took is kept (:meth:`path_of`,
:meth:`stats`): a run whose prompts mostly fall through to prompt-level atoms is not training
CAST, and should know it.

The template runs with ``distinct_nouns=True`` here: two objects with the same noun make
ambiguous count and attribute questions, so such a prompt goes to the LLM.
"""

from __future__ import annotations

import warnings
from collections import Counter
from pathlib import Path
from typing import Any, Callable

from cast_core.errors import SceneGraphError
from cast_core.scene_graph import SceneGraph, prompt_level_graph  # noqa: F401 - re-exported: its old home
from cast_rewards.errors import cut

__all__ = ["AutoDecomposer", "prompt_level_graph", "PATHS"]

PATHS = ("template", "llm", "prompt-level")


class AutoDecomposer:
    """``llm_path`` (a local chat model) or ``generate`` + ``model_id`` enable the LLM step;
    without them, prompts outside the grammar get the prompt-level atom."""

    def __init__(
        self,
        llm_path: str | None = None,
        *,
        generate: Callable[[list[dict]], str] | None = None,
        model_id: str | None = None,
        cache_dir: str | Path | None = None,
        **llm_options: Any,
    ):
        from cast_rewards.template import TemplateDecomposer

        self.template = TemplateDecomposer(distinct_nouns=True)
        self.llm = None
        if llm_path is not None or generate is not None:
            from cast_rewards.llm import CHAT_MODEL_DIR, LLMDecomposer
            from cast_rewards.model_dirs import check_model_dir

            if generate is None:  # named by this decomposer's own key, not the llm decomposer's
                check_model_dir(
                    llm_path, owner="auto decomposer", key="decomposer_kwargs.llm_path", wants=CHAT_MODEL_DIR
                )

            self.llm = LLMDecomposer(
                llm_path, generate=generate, model_id=model_id, cache_dir=cache_dir, fallback=False, **llm_options
            )
        self.paths: dict[str, str] = {}

    def decompose(self, prompt: str) -> SceneGraph:
        try:
            graph, path = self.template.decompose(prompt), "template"
        except SceneGraphError as template_error:
            graph = None
            if self.llm is not None:
                try:
                    graph, path = self.llm.decompose(prompt), "llm"
                except SceneGraphError:
                    graph = None
            if graph is None:
                warnings.warn(
                    f"auto decomposer: {cut(prompt)!r} is outside the template grammar "
                    f"({template_error}){'' if self.llm else ' and no llm is configured'}; "
                    "scored as one prompt-level atom",
                    stacklevel=2,
                )
                graph, path = prompt_level_graph(prompt), "prompt-level"
        self.paths[prompt] = path
        return graph

    def path_of(self, prompt: str) -> str | None:
        """How ``prompt`` was decomposed (``template``, ``llm`` or ``prompt-level``), if it was."""
        return self.paths.get(prompt)

    def stats(self) -> dict[str, int]:
        counts = Counter(self.paths.values())
        return {p: counts.get(p, 0) for p in PATHS}

"""Minimal components used to exercise the registry and the conformance kits.

They are test fixtures, deliberately simple, and are not registered outside tests.
"""

from __future__ import annotations

import torch

from cast_core import AdvantageMap, Atom, Entity, SceneGraph, Window


class HalfWindow:
    """The first half of the schedule."""

    def select(self, policy, prompts, num_steps):
        return Window(0, max(1, num_steps // 2))


class WordsDecomposer:
    """Every word is an object of count 1."""

    def decompose(self, prompt):
        entities, atoms = [], []
        for i, word in enumerate(prompt.lower().split(), 1):
            entities.append(Entity(f"e{i}", word, 1))
            atoms.append(Atom(f"a{2 * i - 1}", "object", f"e{i}"))
            atoms.append(Atom(f"a{2 * i}", "count", f"e{i}", (f"a{2 * i - 1}",), value=1))
        return SceneGraph(prompt, tuple(entities), tuple(atoms)).validate()


class MeanProjector:
    """Prompt-level z-score of the mean atom score, as a constant map (a graph without atoms
    has nothing to tell the images apart: every reward 0, not the mean of nothing)."""

    def project(self, scores, heatmaps, graph, latent_grid):
        r = scores.float().mean(1) if scores.shape[1] else torch.zeros(scores.shape[0])
        adv = (r - r.mean()) / (r.std(unbiased=False) + 1e-6)
        return AdvantageMap(values=adv[:, None, None].expand(-1, *latent_grid).clone(), prompt_advantages=adv)

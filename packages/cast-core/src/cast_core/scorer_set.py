"""Several scorers in one run: the config's ``scorers`` list, read and built.

``scorers = [{name = "soft-tifa", weight = 1.0, path = "..."}, {name = "pickscore", weight = 0.2,
path = "..."}]`` names each scorer, its weight and its options (every key but ``name``,
``weight``, ``label`` and ``prompt_level``). How the parts combine (docs/rewards.md, "Several
scorers"), and why:

* each scorer scores its own atoms — the decomposer's graph, or one prompt-level atom for a
  scorer that judges the whole prompt (:class:`~cast_core.protocols.PromptLevel`: pickscore,
  clip-score) — and each group's atoms are z-scored **per scorer**, so a reward on another scale
  neither drowns nor is drowned by the others;
* each scorer's advantage map is projected as a one-scorer run would project it (the run's
  projector with that scorer's heatmaps; a prompt-level scorer's map is its prompt-level
  advantage, constant over the image: it has no heatmaps to place anything), then the maps add
  up weighted: ``A = Σ_s w_s · A_s``. Weights act on advantages, not on rewards, because the
  z-scores have already removed each reward's scale;
* a group counts only when every scorer judged all of it.

The short form (``scorer`` / ``scorer_kwargs``) is one scorer of weight 1 that scores the
decomposer's graph whatever it is (a scalar scorer then gives every atom its one score), as
before ``scorers`` existed, so one-scorer runs are unchanged bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Sequence

from cast_core.config import ConfigError, _short

__all__ = [
    "ScorerSpec",
    "ScorerSlot",
    "scorer_specs",
    "monitor_specs",
    "listed_specs",
    "build_scorers",
    "RESERVED_KEYS",
]

#: the keys of a ``scorers`` entry that are cast's, not the scorer's options
RESERVED_KEYS = ("name", "weight", "label", "prompt_level")
_EXAMPLE = 'e.g. scorers = [{name = "shapes-oracle", weight = 1.0}, {name = "shapes-quality", weight = 0.5}]'


@dataclass(frozen=True)
class ScorerSpec:
    """One scorer as the config names it: ``key`` is where its options live, for errors."""

    label: str
    name: str
    weight: float = 1.0
    options: dict = field(default_factory=dict)
    prompt_level: bool | None = None  # None: ask the scorer (its ``prompt_level`` attribute)
    key: str = "scorer_kwargs"


@dataclass
class ScorerSlot:
    """A built scorer of the run with its label, weight and whether it judges whole prompts."""

    label: str
    scorer: Any
    weight: float = 1.0
    prompt_level: bool = False
    name: str = ""


def scorer_specs(cfg: Any) -> list[ScorerSpec]:
    """The run's scorers: the ``scorers`` entries, checked, or the short form's one scorer."""
    if not cfg.scorers:
        return [ScorerSpec(cfg.scorer, cfg.scorer, 1.0, dict(cfg.scorer_kwargs or {}), False)]
    return listed_specs(cfg.scorers, "scorers")


def monitor_specs(cfg: Any) -> list[ScorerSpec]:
    """``monitor_scorers``: entries as in ``scorers``, recorded by the monitor, never weighted."""
    return [replace(s, weight=1.0) for s in listed_specs(cfg.monitor_scorers, "monitor_scorers")]


def listed_specs(entries: Sequence[Any], key: str) -> list[ScorerSpec]:
    """The entries of config list ``key``, each checked in one line naming the item."""
    specs: list[ScorerSpec] = []
    for i, entry in enumerate(entries):
        where = f"config key '{key}': item {i}"
        if not isinstance(entry, dict):
            raise ConfigError(f"{where} is {entry!r}, not a table; {_EXAMPLE}")
        name = entry.get("name")
        if not isinstance(name, str) or not name.strip():
            raise ConfigError(f"{where} ({_short(entry)}) has no scorer name; {_EXAMPLE}")
        weight = entry.get("weight", 1.0)
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not 0 < weight < float("inf"):
            raise ConfigError(
                f"{where} ({name!r}): weight {weight!r} must be a number > 0 (it scales the scorer's advantages; "
                "drop the scorer to leave it out, or watch it without training on it with monitor_scorers)"
            )
        label = entry.get("label", name)
        if not isinstance(label, str) or not label.strip() or any(c in label for c in "/ \t\n"):
            raise ConfigError(f"{where} ({name!r}): label {label!r} must be a word without '/' or spaces")
        prompt_level = entry.get("prompt_level")
        if prompt_level is not None and not isinstance(prompt_level, bool):
            raise ConfigError(f"{where} ({name!r}): prompt_level {prompt_level!r} must be true or false")
        if any(s.label == label for s in specs):
            raise ConfigError(
                f"{where}: two scorers are labelled {label!r}; give each its own label "
                f'(e.g. {{name = "{name}", label = "{name}-2", ...}}), it names their metrics'
            )
        options = {k: v for k, v in entry.items() if k not in RESERVED_KEYS}
        specs.append(ScorerSpec(label, name, float(weight), options, prompt_level, f"{key}[{i}]"))
    return specs


def build_scorers(specs: Sequence[ScorerSpec], several: bool | None = None) -> list[ScorerSlot]:
    """Build every scorer. A scorer is prompt-level only in a run that lists ``scorers``
    (``several``, default: more than one spec or a spec from the list)."""
    from cast_core.registry import get_atom_scorer

    listed = several if several is not None else any(s.key != "scorer_kwargs" for s in specs)
    slots = []
    for spec in specs:
        scorer = get_atom_scorer(spec.name, **spec.options)
        level = spec.prompt_level if spec.prompt_level is not None else bool(getattr(scorer, "prompt_level", False))
        slots.append(ScorerSlot(spec.label, scorer, spec.weight, bool(level and listed), spec.name))
    return slots

"""Where a run's training prompts come from: a list, a text file, or ``module:callable``."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from cast_core.config import ConfigError

__all__ = ["resolve_prompts"]


def resolve_prompts(spec: Any) -> list[str]:
    """Training prompts from a list, a text file (one a line, '#' comments) or 'module:callable'."""
    if isinstance(spec, (list, tuple)):
        prompts = [str(p) for p in spec]
    elif isinstance(spec, str) and Path(spec).is_file():
        from cast_core.commands.inputs import read_prompt_file

        prompts = [p for _, p in read_prompt_file(spec)]
    elif isinstance(spec, str) and ":" in spec:
        module, _, attr = spec.partition(":")
        try:
            prompts = list(getattr(importlib.import_module(module), attr)())
        except (ImportError, AttributeError) as err:
            raise ConfigError(f"config key 'prompts': cannot load {spec!r}: {err}") from None
    else:
        raise ConfigError(
            f"config key 'prompts': {spec!r} is neither a list, an existing file, nor 'module:callable'"
        )
    if not prompts:
        raise ConfigError("config key 'prompts': no training prompts")
    return prompts

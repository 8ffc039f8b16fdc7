"""Where a run's training prompts come from: a list, a text file, a registered prompt suite
(``suite:NAME``), or ``module:callable``.

``module:callable`` imports and runs code named by a configuration file, so ``cast train``
accepts it only from a recipe (installed code already) or behind ``--allow-code-prompts``
(:func:`is_code_spec`); ``suite:NAME`` gives the same prompts through a plugin's registered suite
without that.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from cast_core.config import ConfigError

__all__ = ["resolve_prompts", "is_code_spec"]

SUITE_PREFIX = "suite:"


def is_code_spec(spec: Any) -> bool:
    """True when ``spec`` would import and call code (``module:callable``)."""
    return (isinstance(spec, str) and ":" in spec and not spec.startswith(SUITE_PREFIX)
            and not Path(spec).is_file())


def resolve_prompts(spec: Any) -> list[str]:
    """Training prompts from a list, a text file (one a line, '#' comments), 'suite:NAME' or
    'module:callable'."""
    if isinstance(spec, (list, tuple)):
        prompts = [str(p) for p in spec]
    elif isinstance(spec, str) and spec.startswith(SUITE_PREFIX):
        from cast_core.registry import get_prompt_suite

        prompts = list(get_prompt_suite(spec[len(SUITE_PREFIX):]))
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
            f"config key 'prompts': {spec!r} is neither a list, an existing file, 'suite:NAME' nor 'module:callable'"
        )
    if not prompts:
        raise ConfigError("config key 'prompts': no training prompts")
    return prompts

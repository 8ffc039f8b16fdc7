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
from cast_core.errors import InputError

__all__ = ["resolve_prompts", "is_code_spec", "read_prompt_file", "check_code_prompts"]

SUITE_PREFIX = "suite:"


def is_code_spec(spec: Any) -> bool:
    """True when ``spec`` would import and call code (``module:callable``)."""
    return isinstance(spec, str) and ":" in spec and not spec.startswith(SUITE_PREFIX) and not Path(spec).is_file()


def read_prompt_file(path: str | Path) -> list[tuple[str, str]]:
    """``[(location, prompt)]`` from a text file: one prompt a line; blank lines and lines
    starting with ``#`` are skipped. ``location`` is ``file:line`` for error messages."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"prompt file {path} does not exist") from None
    except UnicodeDecodeError as err:
        raise InputError(f"prompt file {path} is not UTF-8 text (byte {err.start}); save it as UTF-8") from None
    out = []
    for lineno, line in enumerate(text.splitlines(), 1):
        prompt = line.strip()
        if prompt and not prompt.startswith("#"):
            out.append((f"{path}:{lineno}", prompt))
    if not out:
        raise InputError(f"prompt file {path} has no prompts (one a line; '#' starts a comment)")
    return out


def check_code_prompts(cfg, allowed: bool, source: str) -> None:
    """Refuse ``prompts = "module:callable"`` unless it is the recipe's own value (installed code)
    or the caller allows it (``--allow-code-prompts``): a config file must not run code by itself."""
    from cast_core.registry import get_recipe

    if allowed or not is_code_spec(cfg.prompts):
        return
    try:
        recipe_value = get_recipe(cfg.recipe).settings.get("prompts") if cfg.recipe else None
    except Exception:  # noqa: BLE001 - an uninstalled recipe vouches for nothing
        recipe_value = None
    if cfg.prompts != recipe_value:
        raise ConfigError(
            f"{source}: prompts = {cfg.prompts!r} would import and run code from module "
            f"{cfg.prompts.partition(':')[0]!r}; pass --allow-code-prompts if you trust it, or give "
            "a prompt file, a list, or suite:NAME (see `cast plugins` for the suites)"
        )


def resolve_prompts(spec: Any) -> list[str]:
    """Training prompts from a list, a text file (one a line, '#' comments), 'suite:NAME' or
    'module:callable'."""
    if isinstance(spec, (list, tuple)):
        prompts = [str(p) for p in spec]
    elif isinstance(spec, str) and spec.startswith(SUITE_PREFIX):
        from cast_core.registry import get_prompt_suite

        prompts = list(get_prompt_suite(spec[len(SUITE_PREFIX) :]))
    elif isinstance(spec, str) and Path(spec).is_file():
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

"""Running on a machine without a GPU: ``--cpu`` (``cast train``, ``cast sample``) and the one-line
refusal of a device that is not there.

Why a flag: the backbone recipes are written for a GPU (bf16 weights, a text encoder on
``"cuda"``), and the tiny test pipelines run them on a CPU only with four ``--set`` items that a
user should not have to find in the tests. Which keys move a policy off the GPU belongs to the
policy, not to core: a policy class names them in its ``cpu_settings`` (config keys in ``--set``
spelling, e.g. ``{"policy_kwargs.text_encoder_device": "cpu"}``); core adds only its own keys
(accelerate's ``cpu`` flag, ``precision``, ``base_dtype``). The items go after the user's own
``--set``: ``--cpu`` added to a GPU command line (``device="cuda"``, bf16) runs it on the CPU.

Why a device check here: a CUDA device asked for on a machine without one surfaces as a torch
traceback ("Found no NVIDIA driver") after minutes of loading; every plugin that takes a
``device`` option can refuse it first, in one line that names its key (:func:`require_device`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from cast_core.errors import ConfigError

__all__ = ["CORE_CPU_SETTINGS", "cpu_settings", "cpu_sets", "policy_cpu_sets", "require_device"]

#: core's own keys: accelerate on the CPU, float32 weights and no bf16 autocast (emulated, slow)
CORE_CPU_SETTINGS: dict[str, Any] = {"cpu": True, "precision": "no", "base_dtype": "float32"}


def cpu_settings(policy: str) -> dict[str, Any]:
    """``--cpu``'s config keys for a run of ``policy``: core's, then the policy class's own."""
    from cast_core.registry import lookup

    factory = lookup("policy", policy).factory
    target = factory.resolve() if hasattr(factory, "resolve") else factory
    return {**CORE_CPU_SETTINGS, **dict(getattr(target, "cpu_settings", None) or {})}


def _items(settings: dict[str, Any]) -> tuple[str, ...]:
    from cast_core.config import toml_value

    return tuple(f"{key}={toml_value(value)}" for key, value in settings.items())


def cpu_sets(
    sets: Sequence[str],
    *,
    recipe: str | None = None,
    policy: str | None = None,
    config_file: str | None = None,
    resume_dir: str | None = None,
) -> tuple[str, ...]:
    """``cast train --cpu``: ``sets`` with the CPU overrides of the run's policy after them (they
    win: a GPU command line runs on the CPU with ``--cpu`` added). The policy is the one the run
    would train (``--policy``, else the config file's or ``--set``'s, else the recipe's). A resumed
    run keeps its configuration: ``--cpu`` is accepted there only when ``RUN/config.toml`` already
    holds those values."""
    from cast_core.config import TrainConfig, build_config, load_toml, update_from_file

    if resume_dir:
        path = Path(resume_dir) / "config.toml"
        cfg = update_from_file(TrainConfig(), load_toml(path), path)
        differ = {k: v for k, v in cpu_settings(cfg.policy).items() if _value(cfg, k) != v}
        if differ:
            key, value = next(iter(differ.items()))
            raise ConfigError(
                f"--cpu cannot change a resumed run: {path} has {key} = {_value(cfg, key)!r}, --cpu needs {value!r}; "
                "a run continues as it was configured, so start a new run with --cpu (--out)"
            )
        return tuple(sets)
    cfg = build_config(
        recipe=recipe,
        components={"policy": policy},
        config_file=config_file,
        sets=(*sets, *_items(CORE_CPU_SETTINGS)),  # as the run will be: precision="no" alone is no mistake
        require_scorer=False,
        log=lambda message: None,  # the real build, right after, says it once
    )
    return (*sets, *_items(cpu_settings(cfg.policy)))


def policy_cpu_sets(policy: str, sets: Sequence[str]) -> tuple[str, ...]:
    """``cast sample --cpu``: only the ``policy_kwargs.*`` overrides apply to a command that builds
    the policy alone (no trainer, so no dtype or precision keys); after the user's ``--set``, and
    so over ``--policy-opt`` too: a GPU command line runs on the CPU with ``--cpu`` added."""
    own = {k: v for k, v in cpu_settings(policy).items() if k.startswith("policy_kwargs.")}
    return (*sets, *_items(own))


def _value(cfg: Any, dotted: str) -> Any:
    head, _, rest = dotted.partition(".")
    value = getattr(cfg, head)
    for part in rest.split(".") if rest else ():
        value = value.get(part) if isinstance(value, dict) else None
    return value


def require_device(value: Any, key: str) -> "Any":
    """``value`` as a ``torch.device``, or one :class:`ConfigError` line naming ``key`` when it is
    not a device, or a CUDA / MPS device this machine does not have (before anything is loaded
    onto it). ``"cuda"`` without an index is any GPU; ``"cuda:3"`` needs four."""
    import torch

    try:
        device = torch.device(value)
    except (RuntimeError, TypeError, ValueError):
        raise ConfigError(
            f'config key {key!r}: {value!r} is not a torch device; use "cpu", "cuda" or "cuda:N"'
        ) from None
    fix = (
        f'on the CPU add --cpu (cast train, cast sample: a tiny model, a smoke test) or --set {key}="cpu"'
        if key.startswith("policy_kwargs.")
        else f'on the CPU use --set {key}="cpu"'
    )
    if device.type == "cuda":
        if not torch.cuda.is_available():
            why = "this torch is built without CUDA" if torch.version.cuda is None else "torch finds no GPU here"
            raise ConfigError(f"config key {key!r} = {str(value)!r} needs a CUDA GPU, but {why}; {fix}")
        count = torch.cuda.device_count()
        if device.index is not None and device.index >= count:
            raise ConfigError(
                f"config key {key!r} = {str(value)!r}: this machine has {count} GPU(s), cuda:0 to cuda:{count - 1}"
            )
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(
            f"config key {key!r} = {str(value)!r} needs Apple's MPS, which torch does not find here; {fix}"
        )
    return device

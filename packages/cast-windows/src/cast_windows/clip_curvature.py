"""``clip-curvature``: CAST's automatic SDE window, from where the sample's structure forms.

Exploration noise only helps RL where it can change what the image shows. The selector measures
that directly (docs/design.md §4): it samples a calibration set with the ODE, embeds the Tweedie estimate
``x̂0`` of every step, and follows its cosine similarity to the final image
(:mod:`cast_windows.curve`). The *formation point* is the knee of that curve where the rise
flattens (:mod:`cast_windows.knee`). The window is the run of steps up to it:

* **default** (``window_size=None``): steps ``0..knee`` inclusive — every step from pure noise to
  the first step whose ``x̂0`` already shows the final structure. Including the knee step itself
  gives one step of margin: its SDE move still starts from a state whose layout is barely settled.
* ``window_size=n``: the ``n`` steps ending at the knee (``knee-n+1..knee``); if fewer than ``n``
  steps precede it, the window starts at 0 and keeps its size (clipped to the schedule).

The curve is cached (:mod:`cast_windows.cache`), so the trainer — which calls :meth:`select` once
per run — measures it once per (policy, steps, resolution, embedder, calibration set).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from cast_core.protocols import Calibrated
from cast_core.types import Window
from cast_windows.cache import (
    cache_key,
    cache_path,
    default_cache_dir,
    embedder_identity,
    policy_identity,
    read_cache,
    write_cache,
)
from cast_windows.curve import SimilarityCurve, measure_curve
from cast_windows.knee import Knee, find_knee

WINDOW_RULE = "steps 0..knee inclusive (window_size=None) or the window_size steps ending at the knee"


def window_up_to(knee_step: int, num_steps: int, window_size: int | None = None) -> Window:
    """The window for a formation point at ``knee_step`` (rule in the module docstring)."""
    if not 0 <= knee_step < num_steps:
        raise ValueError(f"knee step {knee_step} is outside a schedule of {num_steps} steps")
    if window_size is None:
        return Window(0, knee_step + 1)
    if window_size < 1:
        raise ValueError(f"window_size must be >= 1, got {window_size}")
    size = min(int(window_size), num_steps)
    start = max(0, min(knee_step + 1 - size, num_steps - size))
    return Window(start, size)


def spread(items: Sequence[str], n: int) -> list[str]:
    """``n`` items spread evenly over ``items`` (all of them if there are at most ``n``), in order."""
    items = list(items)
    if len(items) <= n:
        return items
    return [items[(i * len(items)) // n] for i in range(n)]


class ClipCurvatureSelector:
    """The measured window. ``embedder`` is a registered embedder name (built with
    ``embedder_kwargs`` when first needed) or an object with ``embed(images) -> [B, D]``.

    Calibration prompts: ``calibration_prompts`` (a list, a prompt file or ``module:callable``),
    else ``policy.calibration_prompts`` if the policy has them, else the prompts passed to
    :meth:`select` (the trainer passes its first step's prompts);
    duplicates dropped, then ``num_prompts`` of them spread evenly over the list (calibration lists
    are often ordered, e.g. by difficulty, and the first few would all be alike), each sampled once
    per seed in ``seeds``.
    """

    def __init__(
        self,
        embedder: Any = "pixels",
        *,
        embedder_kwargs: dict | None = None,
        calibration_prompts: Sequence[str] | str | None = None,
        num_prompts: int = 8,
        seeds: Sequence[int] = (0, 1),
        window_size: int | None = None,
        method: str = "kneedle",
        smooth: int | None = None,
        min_rise: float = 1e-3,
        min_bend: float = 0.05,
        level: float = 0.9,
        image_size: Sequence[int] | None = None,
        batch_size: int = 8,
        cache_dir: str | Path | None = None,
        use_cache: bool = True,
    ):
        if num_prompts < 1:
            raise ValueError(f"num_prompts must be >= 1, got {num_prompts}")
        if not seeds:
            raise ValueError("seeds must name at least one seed")
        if window_size is not None and window_size < 1:
            raise ValueError(f"window_size must be >= 1 or None, got {window_size}")
        self.embedder_spec = embedder
        self.embedder_kwargs = dict(embedder_kwargs or {})
        self.calibration_prompts = calibration_prompts
        self.num_prompts = int(num_prompts)
        self.seeds = [int(s) for s in seeds]
        self.window_size = window_size
        self.knee_options = {
            "method": method,
            "smooth": smooth,
            "min_rise": min_rise,
            "min_bend": min_bend,
            "level": level,
        }
        self.image_size = tuple(image_size) if image_size is not None else None
        self.batch_size = int(batch_size)
        self.cache_dir = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
        self.use_cache = use_cache
        self._embedder: Any = None

    # -- pieces ----------------------------------------------------------------------------------
    @property
    def embedder(self) -> Any:
        """The embedder object (built from the registry on first use)."""
        if self._embedder is None:
            if isinstance(self.embedder_spec, str):
                from cast_core.registry import get_embedder

                self._embedder = get_embedder(self.embedder_spec, **self.embedder_kwargs)
            else:
                self._embedder = self.embedder_spec
        return self._embedder

    def embedder_name(self) -> str:
        """The embedder's cache identity. A registered name is identified by its name and
        arguments, so a cache hit never has to load (say) CLIP."""
        if isinstance(self.embedder_spec, str):
            args = json.dumps(self.embedder_kwargs, sort_keys=True, default=str) if self.embedder_kwargs else ""
            return self.embedder_spec + (f":{args}" if args else "")
        return embedder_identity(self.embedder_spec)

    def prompts_for(self, policy: Any, prompts: Sequence[str]) -> list[str]:
        """The calibration prompts actually used (see the class docstring)."""
        source: Any = self.calibration_prompts
        if source is None:
            source = policy.calibration_prompts if isinstance(policy, Calibrated) else None
        if source is None:
            source = prompts
        if isinstance(source, str):
            from cast_core.prompts import resolve_prompts

            source = resolve_prompts(source)
        unique = list(dict.fromkeys(str(p) for p in source))
        if not unique:
            raise ValueError(
                "clip-curvature has no calibration prompts: pass calibration_prompts=, or prompts to select()"
            )
        return spread(unique, self.num_prompts)

    def resolution(self, policy: Any) -> tuple[int, int]:
        return tuple(self.image_size) if self.image_size is not None else tuple(policy.default_image_size)

    def measure(self, policy: Any, prompts: Sequence[str], num_steps: int) -> tuple[SimilarityCurve, dict]:
        """The similarity curve (from the cache when possible) and what it was keyed by, plus
        ``cached`` / ``cache_file``."""
        calib = self.prompts_for(policy, prompts)
        key = cache_key(
            policy=policy_identity(policy),
            num_steps=int(num_steps),
            image_size=list(self.resolution(policy)),
            embedder=self.embedder_name(),
            prompts=calib,
            seeds=self.seeds,
            batch_size=self.batch_size,
        )
        path = cache_path(self.cache_dir, key) if self.use_cache else None
        stored = read_cache(path, key) if path is not None else None
        if stored is not None:
            return SimilarityCurve.from_dict(stored), {**key, "cached": True, "cache_file": str(path)}
        curve = measure_curve(
            policy,
            calib,
            self.embedder,
            num_steps=num_steps,
            seeds=self.seeds,
            image_size=self.image_size,
            batch_size=self.batch_size,
        )
        if path is not None:
            write_cache(path, key, curve.to_dict())
        return curve, {**key, "cached": False, "cache_file": str(path) if path is not None else None}

    def decide(self, curve: SimilarityCurve, num_steps: int) -> tuple[Knee, Window]:
        """Knee and window from a measured curve (cheap; no sampling)."""
        knee = find_knee(curve.mean, **self.knee_options)
        return knee, window_up_to(knee.step, num_steps, self.window_size)

    # -- the protocol ----------------------------------------------------------------------------
    def select(self, policy: Any, prompts: Sequence[str], num_steps: int) -> Window:
        curve, key = self.measure(policy, prompts, num_steps)
        knee, window = self.decide(curve, num_steps)
        arrays = knee.to_dict()
        diagnostics = {
            "selector": "clip-curvature",
            "policy": key["policy"],
            "embedder": key["embedder"],
            "num_steps": int(num_steps),
            "image_size": key["image_size"],
            "calibration_prompts": key["prompts"],
            "seeds": key["seeds"],
            "samples": curve.samples,
            "sigmas": curve.sigmas,
            "curve_mean": curve.mean,
            "curve_std": curve.std,
            "smoothed": arrays["smoothed"],
            "normalised": arrays["normalised"],
            "curvature": arrays["curvature"],
            "kneedle_distance": arrays["distance"],
            "knee_step": knee.step,
            "knee_method": knee.method,
            "smooth": knee.smooth,
            "fallback": knee.fallback,
            "reason": knee.reason,
            "window_size_option": self.window_size,
            "window_rule": WINDOW_RULE,
            "cached": key["cached"],
            "cache_file": key["cache_file"],
        }
        return Window(window.start, window.size, diagnostics=diagnostics).check_fits(num_steps)

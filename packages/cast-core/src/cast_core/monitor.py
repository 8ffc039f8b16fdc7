"""The drift and reward-hacking monitor (config ``monitor_every``): every N steps the trainer draws
a fixed set of held-out prompts and looks at what the policy makes of them.

Why held-out and fixed: the training reward is what the policy optimises, so it is the last
number to admit that the images got worse. The monitor samples the same prompts from the same
noise every time (seeded by the run's seed alone), with the plain ODE, so that two evaluations
differ only by what training changed, and its prompts are never trained on. It records, per
evaluation (``monitor.jsonl``, and the step's row of metrics.jsonl):

* ``monitor/LABEL`` — the mean reward GM of each of the run's scorers and of every
  ``monitor_scorers`` entry (a quality guard such as pickscore that the run does not train on);
* ``monitor/kl`` — Flow-GRPO's KL term between the policy and its adapter-free reference
  (:func:`cast_core.loss.kl_penalty` at the run's η), at the window's steps of the monitor
  trajectories (two middle steps for an objective without a window);
* ``monitor/diversity`` — the mean RMS pixel distance between two images of one prompt (a
  policy collapsing to one picture per prompt drives it to 0);
* ``monitor/saturation`` and ``monitor/contrast`` — mean HSV saturation and luminance standard
  deviation (the colour and contrast drift that reward hacking on aesthetic scores shows);
* ``train/KEY`` — the mean of the training rewards since the previous evaluation, which the stop
  rules (:mod:`cast_core.monitor_rules`) compare with the monitor's values.

The first evaluation is before the first step (the base policy): every rule measures from it.
In a run of several processes every process computes the whole evaluation (the same numbers; a
sharded policy's forward passes are collectives), and the main process writes it.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import torch

from cast_core.advantages import geometric_mean
from cast_core.config import ConfigError
from cast_core.judging import rows_of
from cast_core.loss import kl_penalty
from cast_core.monitor_rules import first_broken, parse_rules
from cast_core.projectors import ScalarProjector
from cast_core.protocols import PerStepWindow
from cast_core.prompts import resolve_prompts
from cast_core.sampling import sample_in_chunks
from cast_core.scorer_set import build_scorers, monitor_specs
from cast_core.sde import sde_step
from cast_core.seeding import generator_for, seed_for
from cast_core.types import Window

__all__ = ["Monitor", "image_statistics"]

MONITOR_FILE = "monitor.jsonl"


def image_statistics(images: torch.Tensor, groups: list[list[int]]) -> dict[str, float]:
    """Diversity within groups (rows of ``images`` per prompt), saturation and contrast."""
    x = images.detach().float().clamp(0, 1).cpu()
    distances = []
    for rows in groups:
        for a in range(len(rows)):
            for b in range(a + 1, len(rows)):
                distances.append(float((x[rows[a]] - x[rows[b]]).pow(2).mean().sqrt()))
    top, bottom = x.amax(1), x.amin(1)
    saturation = torch.where(top > 1e-6, (top - bottom) / top.clamp_min(1e-6), torch.zeros_like(top))
    luminance = 0.299 * x[:, 0] + 0.587 * x[:, 1] + 0.114 * x[:, 2]
    return {
        "monitor/diversity": sum(distances) / len(distances) if distances else math.nan,
        "monitor/saturation": float(saturation.mean()),
        "monitor/contrast": float(luminance.flatten(1).std(1, unbiased=False).mean()),
    }


class Monitor:
    """Built by the trainer when ``monitor_every > 0``; :meth:`evaluate` at step 0 and every
    ``monitor_every`` steps, :meth:`stop_reason` after each evaluation."""

    def __init__(self, trainer: Any):
        cfg = trainer.config
        self.trainer, self.config = trainer, cfg
        self.prompts = monitor_prompts(cfg, trainer.prompts)
        self.rules = parse_rules(cfg.monitor_stop_if)
        extra = monitor_specs(cfg)
        taken = {slot.label for slot in trainer.judge.slots}
        clash = [s.label for s in extra if s.label in taken]
        if clash:
            raise ConfigError(
                f"config key 'monitor_scorers': {clash[0]!r} is already a scorer of the run (its reward is "
                f"monitored anyway); drop it, or give it another label"
            )
        reserved = [s.label for s in trainer.judge.slots if f"monitor/{s.label}" in STATISTICS]
        if reserved:
            raise ConfigError(
                f"scorer label {reserved[0]!r} would hide the monitor's own monitor/{reserved[0]}; give the "
                "scorer another label (scorers = [{name = ..., label = ...}])"
            )
        from cast_core.judging import Judge

        self.judge = Judge(
            [*trainer.judge.slots, *build_scorers(extra, several=True)],
            trainer.decomposer,
            ScalarProjector(),  # no heatmaps: the monitor only reads scores
            trainer.dist,
            group_size=cfg.monitor_group_size,
            log=trainer.log,
        )
        self.judge.share_graphs(self.prompts)  # decomposed once, on rank 0 (an LLM must not answer ranks apart)
        self.path = Path(trainer.run_dir) / MONITOR_FILE
        self.rows: list[dict] = []
        self.sums: dict[str, list[float]] = {}

    # -- history ---------------------------------------------------------------------------------
    def restore(self, step: int, sums: dict | None = None) -> None:
        """A resumed run: the evaluations up to ``step`` from monitor.jsonl (later ones dropped),
        and the training rewards since the last of them: ``sums`` as the checkpoint saved them,
        else (a checkpoint from before the monitor was on) from metrics.jsonl's rows."""
        from cast_core.run_dir import read_metrics

        if self.path.exists():
            self.rows = [r for r in read_metrics(self.path) if r.get("step", math.inf) <= step]
            for row in self.rows:  # a run resumed after a stop goes on
                row.pop("stopped", None)
            self._write()
        if sums is not None:
            self.sums = {k: [float(x) for x in v] for k, v in sums.items()}
            return
        since = self.rows[-1]["step"] if self.rows else 0
        metrics = self.trainer.run_dir / "metrics.jsonl"
        for row in read_metrics(metrics) if metrics.exists() else []:
            if since < row.get("step", 0) <= step:
                self.observe(row)

    def observe(self, metrics: dict) -> None:
        """Add a training step's rewards (and every metric a rule watches) to the interval's sums."""
        watched = {r.while_rising for r in self.rules if r.while_rising}
        for key, value in metrics.items():
            if (key.startswith("reward_") or key in watched) and isinstance(value, (int, float)):
                if not isinstance(value, bool) and math.isfinite(value):
                    self.sums.setdefault(key, []).append(float(value))

    def due(self, step: int) -> bool:
        return step % self.config.monitor_every == 0

    def stop_reason(self) -> str | None:
        reason = first_broken(self.rules, self.rows) if self.rules else None
        return self.trainer.dist.broadcast_object(reason) if self.trainer.dist.active else reason

    def mark_stopped(self, reason: str) -> None:
        """Record the stop in the last row (``stopped``): what `cast train --num-processes`
        reads to exit 3 as a one-process run does."""
        self.rows[-1]["stopped"] = reason
        self._write()

    def _write(self) -> None:
        if self.trainer.dist.is_main:
            from cast_core.run_dir import write_atomic

            write_atomic(self.path, "".join(json.dumps(r) + "\n" for r in self.rows))

    # -- one evaluation --------------------------------------------------------------------------
    @torch.no_grad()
    def evaluate(self, step: int) -> dict:
        """Sample the monitor prompts, score them with every scorer, measure; append the row."""
        cfg, trainer = self.config, self.trainer
        G = cfg.monitor_group_size
        ids = [(p, g) for p in range(len(self.prompts)) for g in range(G)]
        batch = [self.prompts[p] for p, _ in ids]
        gens = [generator_for(cfg.seed, 0, "monitor", p, g) for p, g in ids]
        window = self._kl_window(step)
        cond = trainer.prompt_cache.batch(batch)
        with trainer.autocast():
            rollout = sample_in_chunks(
                trainer.policy,
                batch,
                chunk=cfg.sample_batch_size,
                generators=gens,
                conditioning=cond,
                num_steps=cfg.num_steps,
                image_size=trainer.image_size,
                window=window,
                eta=0.0,  # the plain ODE: what the policy draws, not its exploration
                decode_batch_size=cfg.decode_batch_size,
            )
        row: dict[str, Any] = {"step": step}
        self.judge.step = step
        scored = self.judge.score_local(self.prompts, rollout.images, ids)
        for slot in self.judge.slots:
            gms = []
            for p, (_, scores, _, error) in scored[slot.label].items():
                if error is None:
                    gms += geometric_mean(scores).tolist()
                else:
                    trainer.log(f"monitor at step {step}: {error}")
            row[f"monitor/{slot.label}"] = sum(gms) / len(gms) if gms else math.nan
        row["monitor/kl"] = self._kl(rollout, cond, window)
        row.update(image_statistics(rollout.images, [rows_of(ids, p) for p in range(len(self.prompts))]))
        for key, values in self.sums.items():
            row[f"train/{key}"] = sum(values) / len(values)
        self.sums = {}
        self.rows.append(row)
        self._write()
        return row

    def _kl_window(self, step: int) -> Window:
        """The run's window (measured once, or fixed); two middle steps for an objective without
        one, or a selector that draws a window per step."""
        cfg, trainer = self.config, self.trainer
        if trainer.objective.uses_window and not isinstance(trainer.selector, PerStepWindow):
            window = trainer.window_for(step, [])
            if window.size:
                return window
        start = max(0, min(cfg.num_steps - 2, cfg.num_steps // 2))
        return Window(start, min(2, cfg.num_steps))

    def _kl(self, rollout: Any, cond: Any, window: Window) -> float:
        """Flow-GRPO's KL term at the window's states of the ODE trajectories, in chunks of
        ``sample_batch_size`` rows (the reference pass doubles the forward passes)."""
        trainer, cfg = self.trainer, self.config
        from cast_core.conditioning import select_rows

        sig = rollout.sigmas
        eta = cfg.eta if cfg.eta > 0 else 0.7
        n = rollout.latents.shape[0] if rollout.latents is not None else 0
        chunk = cfg.sample_batch_size or n
        total, count = 0.0, 0
        for t, si in enumerate(rollout.step_indices):
            for i in range(0, n, chunk):
                rows = list(range(i, min(i + chunk, n)))
                x, x_next = rollout.latents[rows, t], rollout.next_latents[rows, t]
                c = select_rows(cond, rows)
                with trainer.autocast():
                    v = trainer.policy.velocity(x, sig[si], c, image_size=trainer.image_size)
                    with trainer.policy.reference():
                        v_ref = trainer.policy.velocity(x, sig[si], c, image_size=trainer.image_size)
                cur = sde_step(v.float(), x, sig[si], sig[si + 1], eta, sigma_max=sig[1], prev_sample=x_next)
                ref = sde_step(v_ref.float(), x, sig[si], sig[si + 1], eta, sigma_max=sig[1], prev_sample=x_next)
                total += float(kl_penalty(cur.mean, ref.mean, cur.std_dev_t)) * len(rows)
                count += len(rows)
        return total / count if count else math.nan


STATISTICS = ("monitor/kl", "monitor/diversity", "monitor/saturation", "monitor/contrast")


def monitor_prompts(cfg: Any, trained: Any) -> list[str]:
    """The run's monitor prompts: ``monitor_size`` of ``monitor_prompts``, drawn once by the seed;
    one line when there are none or some are training prompts (``trained``)."""
    if cfg.monitor_prompts in (None, "", []):
        raise ConfigError(
            "config key 'monitor_prompts': the monitor (monitor_every > 0) needs held-out prompts the run "
            'never trains on, e.g. monitor_prompts = "suite:heldout" on the shapes world, or a text file'
        )
    pool = resolve_prompts(cfg.monitor_prompts)
    overlap = [p for p in pool if p in set(trained)]
    if overlap:
        raise ConfigError(
            f"config key 'monitor_prompts': {len(overlap)} of them are training prompts (e.g. {overlap[0]!r}); "
            "the monitor must watch prompts the run never trains on: give a held-out set"
        )
    return random.Random(seed_for(cfg.seed, 0, "monitor-prompts")).sample(list(pool), min(cfg.monitor_size, len(pool)))


def stopped_reason(run_dir: str | Path) -> str | None:
    """Why the monitor stopped the run in ``run_dir`` at its last evaluation, or None."""
    from cast_core.run_dir import read_metrics

    path = Path(run_dir) / MONITOR_FILE
    rows = read_metrics(path) if path.exists() else []
    return rows[-1].get("stopped") if rows else None

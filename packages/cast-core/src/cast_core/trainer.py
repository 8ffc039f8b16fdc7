"""The CAST training loop, readable top to bottom (nanoGPT / TRL style).

One step (:meth:`Trainer.train_step`):

1. pick ``prompts_per_step`` prompts (seeded by ``(seed, step)``); each is repeated
   ``group_size`` times, and each process takes its equal, contiguous share of the samples;
2. sample them (:meth:`Trainer.rollout`): ODE outside the window, SDE inside, keeping
   per-position log-probs; every sample draws its noise from its own generator
   (:mod:`cast_core.seeding`), and prompts are encoded once per run (:class:`PromptCache`);
3. judge (:class:`cast_core.judging.Judge`): decompose each prompt once, score every image atom
   by atom, gather each group's verdicts over the processes, project them to advantage maps;
4. update (:class:`cast_core.update.PolicyUpdate`): ``inner_epochs`` passes of the clipped
   objective in minibatches of micro-batches, AdamW on the policy's adapter, gradient clipping,
   optional EMA;
5. log metrics, draw a sample grid, checkpoint atomically (the main process writes,
   :class:`cast_core.run_dir.RunDirectory`).

Every random choice comes from generators seeded by ``(seed, step, purpose, …)``, never from a
continuing global stream, so a resumed run replays exactly the steps the original would have
taken, and every process draws the same prompts and window.
"""

from __future__ import annotations

import contextlib
import json
import math
import random
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch

from cast_core import trackers
from cast_core.checkpoints import load_checkpoint, save_checkpoint, verified_checkpoints
from cast_core.conditioning import PromptCache
from cast_core.config import ConfigError, TrainConfig
from cast_core.distributed import Distributed
from cast_core.errors import CastError, Interrupted
from cast_core.interrupt import GracefulInterrupt
from cast_core.judging import Judge, multi_reward_stats, reward_stats
from cast_core.launch import in_distributed_launch
from cast_core.memory import peak_memory_mb
from cast_core.precision import autocast
from cast_core.progress import TrainingProgress
from cast_core.prompts import resolve_prompts
from cast_core.protocols import (
    CalibrationPrompts,
    ChecksPrompts,
    DecompositionStats,
    GradientCheckpointing,
    KeepsState,
    OffloadsTextEncoder,
    PerStepWindow,
    Preparable,
    SamplesWithOwnPolicy,
    self_shards,
)
from cast_core.registry import (
    build_objective,
    build_offering,
    check_factory_kwargs,
    factory_takes,
    get_atom_decomposer,
    get_policy,
    get_window_selector,
)
from cast_core.resume import finished_work, no_checkpoint_left
from cast_core.run_dir import RunDirectory, jsonable, jsonable_tree
from cast_core.scorer_set import build_scorers, scorer_specs
from cast_core.sampling import decode_images, sample_in_chunks
from cast_core.seeding import generator_for, sample_generators, seed_for
from cast_core.memory_plan import refuse_if_unfit
from cast_core.sharding import is_sharded, like
from cast_core.types import GroupVerdict, Rollout, ScoredGroups, Window
from cast_core.update import PolicyUpdate


class Trainer:
    """Build once (``__init__``), then :meth:`run` the loop; :meth:`close` ends a multi-process run."""

    # == build: components, run directory, optimizer ===============================================
    def __init__(
        self,
        config: TrainConfig,
        run_dir: str | Path,
        *,
        resume: bool = False,
        log: Callable[[str], None] | None = None,
    ):
        self.config = config.validate()
        cfg = self.config

        from accelerate import Accelerator  # imported here: `cast --help` must stay light

        # mixed precision is ours (cast_core.precision), not accelerate's process-global one
        # several processes without a GPU: accelerate must be told to use gloo on the CPU
        try:
            self.accelerator = Accelerator(
                cpu=cfg.cpu or (in_distributed_launch() and not torch.cuda.is_available()),
                **trackers.accelerator_kwargs(cfg.log_with, run_dir),
            )
        except ValueError as err:  # accelerate refuses unknown tracker names
            raise ConfigError(f"config key 'log_with': {err}") from None
        trackers.check_available(self.accelerator, cfg.log_with)
        self.dist = Distributed(self.accelerator)
        main_log = log or (lambda msg: print(msg, file=sys.stderr))
        self.log = main_log if self.dist.is_main else (lambda msg: None)
        self.run_dir = Path(run_dir)
        self.files = RunDirectory(self.run_dir, writer=self.dist.is_main)
        if not resume:  # before anything heavy: a reused directory is refused in seconds, not after loading
            self.files.refuse_existing_run()
        self.dist.barrier()  # every process has looked at the directory before the main one locks it
        fresh = not resume and not self.run_dir.exists()
        self.files.lock()
        try:
            self._build(cfg, resume)
        except BaseException:
            if not resume:  # a setting refused while building leaves nothing behind but its one line
                self.files.abandon(made_here=fresh)
            raise

    def _build(self, cfg: TrainConfig, resume: bool) -> None:
        """Everything from the components to the resumed checkpoint, in the order that makes each
        check fail before anything heavy is loaded."""
        self.scorer_specs = scorer_specs(cfg)
        for kind, name, kwargs, key in (
            ("policy", cfg.policy, cfg.policy_kwargs, "policy_kwargs"),
            *(("atom_scorer", s.name, s.options, s.key) for s in self.scorer_specs),
            ("atom_decomposer", cfg.decomposer, cfg.decomposer_kwargs, "decomposer_kwargs"),
            ("window_selector", cfg.window, cfg.window_kwargs, "window_kwargs"),
            ("objective", cfg.objective, cfg.objective_kwargs, "objective_kwargs"),
        ):
            if name:  # before anything heavy is built (an empty window name means no selector)
                check_factory_kwargs(kind, name, kwargs, key)
        if cfg.monitor_every:  # held-out prompts and extra scorers: refused before anything is loaded
            from cast_core.monitor import monitor_prompts
            from cast_core.scorer_set import monitor_specs

            monitor_prompts(cfg, resolve_prompts(cfg.prompts))
            for spec in monitor_specs(cfg):
                check_factory_kwargs("atom_scorer", spec.name, spec.options, spec.key)
        if cfg.memory_check and self.dist.device.type == "cuda":  # before the model takes the GPU
            refuse_if_unfit(cfg, self.dist, torch.cuda.get_device_properties(self.dist.device).total_memory, self.log)
        torch.manual_seed(cfg.seed)  # component construction (e.g. LoRA init) is reproducible
        self.policy = self._build_policy()
        self.prompts = resolve_prompts(cfg.prompts)
        if isinstance(self.policy, ChecksPrompts):  # a prompt it cannot read fails now, not after the window
            self.policy.check_prompts(list(self.prompts))
        self.image_size = tuple(cfg.image_size) if cfg.image_size else None
        # every other component is built (and every cheap check made) before any prompt is encoded
        scorers = build_scorers(self.scorer_specs)
        self.decomposer = get_atom_decomposer(cfg.decomposer, **cfg.decomposer_kwargs)
        self.projector = build_offering(
            "advantage_projector",
            cfg.projector,
            {
                "lam": cfg.lam,
                "adv_clip": cfg.adv_clip,
                "gating": cfg.gating,
                "heatmap_norm": cfg.heatmap_norm,
                "atom_credit": cfg.atom_credit,
            },
        )
        self.selector = get_window_selector(cfg.window, **cfg.window_kwargs) if cfg.window else None
        self.objective = build_objective(cfg)
        if not self.objective.uses_window and cfg.heatmap_source == "x0":
            raise ConfigError(
                f"config key 'heatmap_source': \"x0\" scores the maps on x̂0 before the window's first step, "
                f"and objective {cfg.objective!r} samples with the plain ODE (no window); "
                f'set heatmap_source = "final"'
            )
        try:
            self.latent_grid = self.policy.latent_grid(self.image_size)
        except ValueError as err:  # a size this policy cannot draw: one line, before any prompt is encoded
            raise ConfigError(f"image_size {list(self.image_size or ())}: policy {cfg.policy!r} says: {err}") from None
        self.dist.shard(cfg.prompts_per_step * cfg.group_size)  # fail now, not at the first step
        self.prompt_cache = PromptCache(
            lambda ps: self.policy.encode(ps, image_size=self.image_size),
            device=self.policy_device(),
            who=f"policy {cfg.policy!r}",
            max_entries=0 if cfg.offload_text_encoder else cfg.prompt_cache_size,
            dist=self.dist,  # several processes: each prompt is encoded by one of them, the rows shared
        )
        if cfg.offload_text_encoder:  # before prepare(): the text encoder leaves before the transformer arrives
            self._encode_all_then_offload()
        self.module = self._prepare_policy()
        self.prompt_cache.device = self.policy_device()
        self.params = [p for p in self.policy.trainable_parameters()]
        if not self.params:
            raise CastError(f"policy {cfg.policy!r} has no trainable parameters")
        # FSDP2 (ours or accelerate's): checkpoints and window measurements become collectives
        self.sharded = any(is_sharded(p) for p in self.params)
        self.optimizer = torch.optim.AdamW(
            self.params,
            lr=cfg.lr,
            betas=(cfg.adam_beta1, cfg.adam_beta2),
            eps=cfg.adam_eps,
            weight_decay=cfg.weight_decay,
        )
        self.ema = [p.detach().clone() for p in self.params] if cfg.ema > 0 else None
        if isinstance(self.objective, KeepsState):  # e.g. NFT's old policy starts as the adapter
            self.objective.attach(self.params)
        self.step = 0
        self.zero_spread_steps = 0  # leading steps whose every group got one reward for all its images
        self.no_reward_spread = False  # the last step's
        # the run's counts, saved in every checkpoint; only the trainer changes them (the judge and
        # the update report what they dropped, and the step adds it here)
        self.counters = {"skipped_updates": 0, "scorer_failures": 0, "images_sampled": 0, "optimizer_steps": 0}
        self.judge = Judge(
            scorers,
            self.decomposer,
            self.projector,
            self.dist,
            group_size=cfg.group_size,
            heatmap_source=cfg.heatmap_source,
            log=self.log,
            adv_clip=cfg.adv_clip,
            several=bool(cfg.scorers),
        )
        self.maps_from_x0 = self.judge.maps_from_x0
        self.overlap = None
        if cfg.async_scoring:
            from cast_core.async_scoring import OverlappedJudging

            self.overlap = OverlappedJudging(self.judge)
            per_process = cfg.prompts_per_step * cfg.group_size // self.dist.world
            if not 0 < cfg.sample_batch_size < per_process:
                self.log(
                    f"note: async_scoring judges one chunk of sample_batch_size images while the next samples; with "
                    f"sample_batch_size = {cfg.sample_batch_size} each process samples its {per_process} images "
                    f"in one chunk and nothing overlaps: set sample_batch_size to a group or two "
                    f"(e.g. --set sample_batch_size={cfg.group_size})"
                )
        self._prepare_run_dir(resume)
        self.updater = PolicyUpdate(
            cfg,
            self.policy,
            self.params,
            self.optimizer,
            self.dist,
            module=self.module,
            autocast=self.autocast,
            image_size=self.image_size,
            log=self.log,
            ema=self.ema,
            sharded=self.sharded,
            objective=self.objective,
        )
        self.monitor = None
        self.stopped_by_monitor: str | None = None
        if cfg.monitor_every:  # held-out prompts, sampled every monitor_every steps (cast_core/monitor.py)
            from cast_core.monitor import Monitor

            self.monitor = Monitor(self)
            if resume:
                self.monitor.restore(self.step, getattr(self, "_monitor_sums", None))

    def _build_policy(self) -> Any:
        """The policy with the run's base dtype, and on this process's GPU in a multi-GPU run."""
        cfg = self.config
        kwargs = dict(cfg.policy_kwargs)
        if cfg.base_dtype != "float32":
            if not factory_takes("policy", cfg.policy, "torch_dtype"):
                raise ConfigError(
                    f"config key 'base_dtype': policy {cfg.policy!r} takes no torch_dtype argument, "
                    f'so its weights cannot be held in {cfg.base_dtype}; use base_dtype = "float32"'
                )
            kwargs.setdefault("torch_dtype", cfg.base_dtype)
        if cfg.compile:
            if not factory_takes("policy", cfg.policy, "compile"):
                raise ConfigError(
                    f"config key 'compile': policy {cfg.policy!r} takes no compile argument, so cast cannot "
                    "compile its blocks; set compile = false"
                )
            kwargs.setdefault("compile", True)
        if (
            self.dist.active
            and cfg.sharding in ("fsdp2", "auto")
            and factory_takes("policy", cfg.policy, "load_sharded")
        ):  # each process reads only its slice of the weights: no full copy per process
            kwargs.setdefault("load_sharded", True)
            if (
                kwargs["load_sharded"]
                and self.dist.device.type == "cuda"
                and factory_takes("policy", cfg.policy, "device")
            ):
                kwargs["device"] = str(self.dist.device)  # a 1/N slice fits beside the text encoder
        device = self.dist.device
        if (
            self.dist.active
            and device.type == "cuda"
            and factory_takes("policy", cfg.policy, "device")
            and str(kwargs.get("device", "cuda")) == "cuda"
        ):
            kwargs["device"] = str(device)  # rank k computes on cuda:k
        policy = get_policy(cfg.policy, **kwargs)
        if getattr(policy, "sharded_at_load", False):
            self.log("loading: sharded (each process built the transformer on the meta device and read only its slice)")
        if cfg.gradient_checkpointing:
            if not isinstance(policy, GradientCheckpointing):
                raise ConfigError(
                    f"config key 'gradient_checkpointing': policy {cfg.policy!r} does not support it "
                    f"(no enable_gradient_checkpointing()); set gradient_checkpointing = false"
                )
            policy.enable_gradient_checkpointing()
        return policy

    def _prepare_policy(self) -> Any:
        """The policy's own wrapping for the run (``prepare``), with ``sharding`` passed on when
        it is not the default; ``None`` for a policy without ``prepare``."""
        cfg = self.config
        sharding = cfg.sharding
        if sharding == "auto":  # DDP would hold a full copy of the model on every process
            sharding = "fsdp2" if self.dist.active and self_shards(self.policy) else "accelerate"
            self.log(f"sharding: auto -> {sharding}")
        if sharding == "accelerate":
            return self.policy.prepare(self.accelerator) if isinstance(self.policy, Preparable) else None
        if not self.dist.active:
            raise ConfigError(
                f"config key 'sharding': \"{cfg.sharding}\" splits the weights over several processes "
                f"and this run has one; launch it with --num-processes N (or torchrun / accelerate "
                f'launch), or set sharding = "accelerate"'
            )
        if not self_shards(self.policy):
            raise ConfigError(
                f"config key 'sharding': policy {cfg.policy!r} cannot shard itself (its prepare() "
                f'takes no sharding argument); use sharding = "accelerate"'
            )
        return self.policy.prepare(self.accelerator, sharding=sharding)

    def _encode_all_then_offload(self) -> None:
        """Encode every training prompt, then let the policy release its text encoder — all
        before ``prepare`` moves the transformer to the accelerator, so the two never share it
        (FLUX.2-dev's 48 GB encoder and 64 GB transformer do not fit one 80 GB GPU together).
        A measured window's calibration prompts (the selector's ``prompts_for``) are encoded
        too, and the window reads them from this cache (:meth:`_measured_window`)."""
        if not isinstance(self.policy, OffloadsTextEncoder):
            raise ConfigError(
                f"config key 'offload_text_encoder': policy {self.config.policy!r} has no "
                f"offload_text_encoder(); set offload_text_encoder = false"
            )
        prompts = list(self.prompts)
        if isinstance(self.selector, CalibrationPrompts):  # what the window will sample
            prompts += self.selector.prompts_for(self.policy, list(self.prompts))
        if self.config.monitor_every:  # what the monitor will sample
            from cast_core.monitor import monitor_prompts

            prompts += monitor_prompts(self.config, self.prompts)
        self.log(f"encoding {len(set(prompts))} prompts before offloading the text encoder")
        self.prompt_cache.warm(prompts)
        self.policy.offload_text_encoder()

    def _prepare_run_dir(self, resume: bool) -> None:
        if resume:
            self._resume_from_intact_checkpoint()
        self.dist.barrier()  # every process has read the directory before the main one writes
        self.files.create(self.config.to_dict(), self._window_notes(self.files.read_window()))

    def _window_notes(self, measured: dict | None) -> dict[str, str]:
        """Comments for config.toml's ``window_start`` / ``window_size`` when they are not what
        the run trains with, so that the file never claims a window the run did not use."""
        cfg = self.config
        if not self.objective.uses_window:
            why = f"unused: objective {cfg.objective!r} samples with the plain ODE (no window)"
        elif self.selector is None:
            return {}
        elif isinstance(self.selector, PerStepWindow):
            why = f"unused: selector {cfg.window!r} picks each step's window (metrics.jsonl window_start/window_size)"
        elif measured is None:
            why = f"unused: selector {cfg.window!r} chooses the window at the first step (window.json)"
        else:
            end = measured["start"] + measured["size"] - 1
            why = (
                f"unused: the run trains on the window selector {cfg.window!r} chose, steps "
                f"{measured['start']}..{end} (window_start = {measured['start']}, window_size = "
                f"{measured['size']}; window.json)"
            )
        return {"window_start": why, "window_size": why}

    def _resume_from_intact_checkpoint(self) -> None:
        """Load the newest checkpoint that verifies and loads, naming every newer one skipped.
        With checkpoints on disk but none usable, refuse: restarting from step 0 would overwrite
        the run's adapters with an untrained one."""
        skipped: list[tuple[Path, str]] = []
        for ckpt, why in verified_checkpoints(self.run_dir):
            if why is None:
                try:
                    state, tensors = load_checkpoint(ckpt, self.policy, self.optimizer)
                except Exception as err:  # noqa: BLE001 - damage a manifest cannot see (older checkpoints)
                    why = (
                        f"it does not load ({type(err).__name__}: {str(err).splitlines()[0][:160] if str(err) else ''})"
                    )
            if why is not None:
                skipped.append((ckpt, why))
                self.log(f"warning: skipping checkpoint {ckpt.name}: {why}")
                continue
            self.step = state["step"]
            self.counters.update(state.get("counters", {}))
            self._monitor_sums = (state.get("monitor") or {}).get("sums")
            if self.ema is not None and tensors:
                self.ema = [like(tensors[f"ema.{i}"], p) for i, p in enumerate(self.params)]
            if isinstance(self.objective, KeepsState):
                self._restore_objective(ckpt, state, tensors)
            self.log(
                f"resumed {self.run_dir} from {ckpt.name}" + (f" (skipped {len(skipped)} newer)" if skipped else "")
            )
            self.files.truncate_metrics(self.step, warn=self.log)
            return
        if skipped:
            reasons = "; ".join(f"{p.name}: {why}" for p, why in skipped[:3])
            raise CastError(
                f"{self.run_dir} has {len(skipped)} checkpoint(s) but none is intact ({reasons}); refusing "
                "to restart from step 0 over them. Restore a checkpoint, or start a new run with another --out"
            )
        lost = finished_work(self.run_dir)
        if lost:  # e.g. every checkpoint deleted: a restart would rewrite metrics.jsonl from step 1
            raise CastError(no_checkpoint_left(self.run_dir, lost))
        self.log(f"no checkpoint in {self.run_dir} yet; starting from step 0")
        self.files.truncate_metrics(0, warn=self.log)

    def _restore_objective(self, ckpt: Path, state: dict, tensors: dict) -> None:
        saved = state.get("objective")
        if saved is None or saved.get("name") != self.config.objective:
            raise CastError(
                f"{ckpt} was written by a run whose objective was "
                f"{(saved or {}).get('name', 'sde-clipped')!r}, not {self.config.objective!r}: its state "
                "cannot continue this run. Resume with the run's own config, or start a new run with another --out"
            )
        prefix = "objective."
        self.objective.restore(
            saved.get("state", {}), {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}
        )

    # == the loop ==================================================================================
    def run(self) -> dict:
        """Train to ``steps`` (or the time budget). A first Ctrl-C ends the run after the current
        step with a checkpoint (:class:`~cast_core.errors.Interrupted`); a second aborts at once."""
        cfg = self.config
        last: dict = {}
        deadline = time.monotonic() + 60 * cfg.max_minutes if cfg.max_minutes else math.inf
        self.files.lock()
        trackers.start(self.accelerator, cfg.tracker_project or self.run_dir.name, cfg.to_dict())
        try:
            with (
                TrainingProgress(
                    cfg.steps, self.step, self.log, cfg.max_minutes, enabled=self.dist.is_main
                ) as progress,
                self.files.open_metrics() as metrics_file,
                GracefulInterrupt(self.log) as interrupt,
            ):
                if self.monitor is not None and not self.monitor.rows:  # the base policy: what rules measure from
                    self.monitor.evaluate(self.step)
                while self.step < cfg.steps:
                    last = self.train_step()
                    self._warn_if_no_reward_spread()
                    reason, evaluated = None, False
                    if self.monitor is not None:
                        self.monitor.observe(last)
                        if self.monitor.due(self.step):
                            last.update({k: v for k, v in self.monitor.evaluate(self.step).items() if k != "step"})
                            reason, evaluated = self.monitor.stop_reason(), True
                    # rank 0's clock, and a signal heard by any process, decide for everyone: every
                    # process stops at the same step (SIGTERM wins over SIGINT when both were heard)
                    late = self.dist.is_main and time.monotonic() >= deadline
                    out_of_time, signum = self.dist.max_ints([int(late), interrupt.signum or 0])
                    stop = signum != 0
                    final = self.step == cfg.steps or out_of_time or stop or reason is not None
                    if self.step % cfg.log_every == 0 or final or evaluated:
                        metrics_file.write(json.dumps(jsonable(last)) + "\n")
                        metrics_file.flush()
                        trackers.log(self.accelerator, last, self.step)
                    if self.step % cfg.checkpoint_every == 0 or final:
                        self.save()
                    progress.update(self.step, last)
                    if stop and self.step < cfg.steps:
                        raise Interrupted(
                            f"interrupted at step {self.step}; checkpoint written. Continue with "
                            f"`cast train --resume {self.run_dir}`",
                            signum,
                        )
                    if reason is not None and self.step < cfg.steps:
                        self.stopped_by_monitor = reason
                        self.monitor.mark_stopped(reason)
                        self.log(
                            f"monitor: stopped at step {self.step}: {reason}; checkpoint written (monitor.jsonl "
                            "has every evaluation)"
                        )
                        break
                    if final and self.step < cfg.steps:
                        self.log(f"time budget of {cfg.max_minutes:g} min reached at step {self.step}")
                        break
        finally:
            trackers.finish(self.accelerator)
            self.files.unlock()
        return last

    def _warn_if_no_reward_spread(self) -> None:
        """One warning when the first 2 steps of a run had no judged group with two different
        rewards: every advantage is then 0 and the run learns nothing (a constant judge)."""
        if self.zero_spread_steps < 0:  # decided already
            return
        if not self.no_reward_spread:
            self.zero_spread_steps = -1
            return
        self.zero_spread_steps += 1
        if self.zero_spread_steps == 2:
            self.zero_spread_steps = -1
            self.log(
                f"warning: the judge ({self._scorer_names()}) gave every image of each group the same reward "
                "in the first 2 steps, so every advantage is 0 and nothing is learned; use a scorer "
                "that tells the images apart (--scorer)"
            )

    def _scorer_names(self) -> str:
        names = [repr(s.name or s.label) for s in self.judge.slots]
        return f"scorer {names[0]}" if len(names) == 1 else f"scorers {', '.join(names)}"

    def train_step(self) -> dict:
        """One step: prompts → window → rollout → judge and project → update → metrics."""
        cfg = self.config
        t0 = time.perf_counter()
        sent_before, steps_before = self.dist.bytes_sent, self.updater.optimizer_steps
        prompts = self.pick_prompts(self.step)
        window = self.window_for(self.step, prompts)
        if self.overlap is None:
            rollout = self.rollout(prompts, window, self.step)
            scored = self.score_groups(prompts, rollout)
        else:  # the judge scores each chunk's groups while the next chunk samples (same numbers)
            self.judge.step = self.step
            self.judge.share_graphs(prompts)
            self.overlap.begin(prompts, self.sample_ids(len(prompts)))
            rollout = self.rollout(prompts, window, self.step, on_chunk=self.overlap.on_chunk)
            scored = self.score_groups(prompts, rollout, parts=self.overlap.parts())
        images = len(prompts) * cfg.group_size  # over all processes
        self.counters["images_sampled"] += images
        rows, advantages = scored.rows, scored.advantages
        metrics: dict[str, Any] = {
            "step": self.step + 1,
            "window_start": window.start,
            "window_size": window.size,
            **scored.reward_stats,
        }
        # verdicts are gathered whole, so every process decides the same
        self.no_reward_spread = bool(scored.kept) and all(
            bool((part.scores == part.scores[:1]).all())
            for v in scored.kept
            for part in (v.by_scorer or {"": v}).values()
        )
        if not scored.kept:
            self.counters["skipped_updates"] += 1
            metrics["skipped"] = "no group could be scored"
        elif not self.dist.all_true(bool(torch.isfinite(advantages).all())):
            self.counters["skipped_updates"] += 1
            metrics["skipped"] = "non-finite advantages"
            self.log(f"step {self.step}: non-finite advantages; update skipped")
        else:
            metrics.update(self.update(rollout, scored))
        self.counters["optimizer_steps"] += self.updater.optimizer_steps - steps_before
        if isinstance(self.objective, KeepsState):  # e.g. NFT's old policy trails the adapter
            self.objective.after_update(self.params, self.counters["optimizer_steps"])
        self.step += 1
        elapsed = time.perf_counter() - t0
        metrics.update(
            {
                "step_time_s": elapsed,
                "images_per_s": images / elapsed,
                "peak_memory_mb": peak_memory_mb(self.policy_device()),
                **({"judge_wait_s": self.overlap.waited_s} if self.overlap is not None else {}),
                **self.counters,
            }
        )
        if isinstance(self.decomposer, DecompositionStats):  # how the run's prompts were decomposed so far
            metrics.update({f"decomposed_{path.replace('-', '_')}": n for path, n in self.decomposer.stats().items()})
        if self.dist.active:
            metrics["processes"] = self.dist.world
            # this process's payload in cast's collectives this step, plus the gradient sync (DDP's
            # all-reduce; under FSDP2 its reduce-scatter, without the parameter all-gathers)
            ddp = (
                sum(p.numel() * p.element_size() for p in self.params) * (self.updater.optimizer_steps - steps_before)
                if self.updater.module_syncs
                else 0
            )
            metrics["comm_bytes"] = self.dist.bytes_sent - sent_before + ddp
        if cfg.sample_every and self.step % cfg.sample_every == 0 and self.dist.is_main:
            self.write_samples(prompts, rollout, rows, advantages)
        return metrics

    # == one step, in order: prompts, window, rollout, judge, update ===============================
    def pick_prompts(self, step: int) -> list[str]:
        rng = random.Random(seed_for(self.config.seed, step, "prompts"))
        k = self.config.prompts_per_step
        return rng.sample(self.prompts, k) if k <= len(self.prompts) else rng.choices(self.prompts, k=k)

    def window_for(self, step: int, prompts: list[str]) -> Window:
        cfg = self.config
        if not self.objective.uses_window:  # the plain ODE: no step explores, no trajectory is kept
            return Window(0, 0)
        if self.selector is None:
            return Window(cfg.window_start, cfg.window_size).check_fits(cfg.num_steps)
        if isinstance(self.selector, PerStepWindow):  # random, sliding: drawn from the run's seed and the step
            return self.selector.select_for_step(self.policy, prompts, cfg.num_steps, step=step, seed=cfg.seed)
        if not hasattr(self, "_window"):
            self._window = self._measured_window()
        return self._window

    @contextlib.contextmanager
    def _encoding_from_cache(self):
        """The policy's ``encode`` answered from the run's prompt cache while the window is
        measured: once the text encoder has left the accelerator, the calibration prompts must not
        be encoded again there (a 24B encoder on the CPU takes minutes a batch). The policy object
        itself is used, so its identity (what window caches key on) is unchanged."""
        original = self.policy.encode  # a prompt not cached is encoded by the policy itself, as before
        # the main process measures alone: a prompt missing from the cache is encoded here, not shared
        self.policy.encode = lambda prompts, image_size=None: self.prompt_cache.batch(list(prompts), collective=False)
        self.prompt_cache.encode = lambda prompts: original(prompts, image_size=self.image_size)
        try:
            yield
        finally:
            del self.policy.encode
            self.prompt_cache.encode = lambda prompts: self.policy.encode(prompts, image_size=self.image_size)

    def _measured_window(self) -> Window:
        """Select once per run, on the main process, and record it in window.json, so that a
        resumed run keeps the window it started with (even if a selector's cache was cleared in
        between); the other processes receive it. The selector sees all training prompts, never
        the prompts of whichever step we resume at."""
        record = self.files.read_window() if self.dist.is_main else None
        measure = record is None and self.dist.is_main
        if self.sharded:  # a sharded policy's forward passes are collectives: every process measures
            measure = self.dist.broadcast_object(record is None)
        if measure:
            with self._encoding_from_cache() if self.config.offload_text_encoder else contextlib.nullcontext():
                window = self.selector.select(self.policy, list(self.prompts), self.config.num_steps)
            record = {
                "start": window.start,
                "size": window.size,
                "selector": self.config.window,
                "diagnostics": jsonable_tree(dict(window.diagnostics)),
            }
            self.files.write_window(record)
            self.files.write_config(self.config.to_dict(), self._window_notes(record))
            self.log(
                f"window: steps {window.start}..{window.end - 1} of {self.config.num_steps} ({self.config.window})"
            )
        record = self.dist.broadcast_object(record)
        return Window(record["start"], record["size"], record.get("diagnostics", {}))

    def sample_ids(self, num_prompts: int) -> list[tuple[int, int]]:
        """This process's samples ``(prompt index, member)`` of a step with ``num_prompts`` prompts."""
        G = self.config.group_size
        return [divmod(s, G) for s in self.dist.shard(num_prompts * G)]

    def rollout(
        self,
        prompts: list[str],
        window: Window,
        step: int,
        x0_steps: tuple[int, ...] | None = None,
        ids: list[tuple[int, int]] | None = None,
        on_chunk: Callable[[list[Rollout], int], None] | None = None,
    ) -> Rollout:
        """Sample this process's share of the step (``ids``, default :meth:`sample_ids`).

        Sample ``(p, g)`` draws from its own generator, seeded by ``(seed, step, p, g)``, so its
        image does not depend on ``sample_batch_size`` or on the process count. Keeps x̂0 at
        ``x0_steps`` (default: the window start when the heatmaps come from x̂0, else nowhere).
        With ``group_noise = "shared"`` the G images of a prompt start from one noise (seeded by
        ``(seed, step, p)``), so their rewards differ only through the window's actions — the
        advantage then credits what the window did, not the luck of the draw (DanceGRPO's
        ``init_same_noise``); the window must then lie where noise can still change the verdicts.
        ``on_chunk(parts, sampled)`` hears each chunk as it is sampled (``async_scoring``)."""
        cfg = self.config
        ids = self.sample_ids(len(prompts)) if ids is None else ids
        batch = [prompts[p] for p, _ in ids]
        gens = sample_generators(cfg.seed, step, ids)
        if x0_steps is None:
            x0_steps = (window.start,) if self.maps_from_x0 else ()
        keep = tuple(x0_steps) or False
        noise = None
        if cfg.group_noise == "shared":  # one starting point per group
            noise = torch.cat(
                [
                    self.policy.initial_noise(1, self.image_size, generator_for(cfg.seed, step, "start", p))
                    for p, _ in ids
                ]
            )
        cond = self.prompt_cache.batch(batch)
        own = isinstance(self.objective, SamplesWithOwnPolicy) and hasattr(self, "params")
        with self.autocast(), self.objective.sampling(self.params) if own else contextlib.nullcontext():
            rollout = sample_in_chunks(
                self.policy,
                batch,
                chunk=cfg.sample_batch_size,
                generators=gens,
                conditioning=cond,
                initial_noise=noise,
                on_chunk=on_chunk,
                num_steps=cfg.num_steps,
                image_size=self.image_size,
                window=window,
                eta=cfg.eta,
                keep_x0=keep,
                noise_block=cfg.noise_block,
                decode_batch_size=cfg.decode_batch_size,
            )
        rollout.sample_ids = list(ids)
        return rollout

    def verdicts(self, prompts: list[str], rollout: Rollout, parts: dict | None = None) -> list[GroupVerdict]:
        """Verdicts on the final images of every group the scorers could judge (whole groups);
        from ``parts`` already scored (``async_scoring``) when given."""
        self.judge.step = self.step
        if parts is None:
            verdicts, failures = self.judge.verdicts(prompts, rollout)
        else:
            verdicts, failures = self.judge.collect(prompts, parts)
        self.counters["scorer_failures"] += failures
        return verdicts

    def advantages(self, verdicts: list[GroupVerdict], rollout: Rollout, x0_index: int = 0) -> ScoredGroups:
        """This process's advantage maps of the judged groups. With ``heatmap_source = "x0"`` the
        maps are scored on the rollout's ``x0_index``-th kept x̂0 (docs/shapes-rl.md); verdicts
        always judge the final image."""
        map_images = None
        if self.maps_from_x0:
            if rollout.x0 is None:
                raise RuntimeError("heatmap_source='x0' needs a rollout sampled with keep_x0 at the window start")
            with torch.no_grad():
                map_images = decode_images(
                    self.policy,
                    rollout.x0[:, x0_index].to(rollout.latents.dtype),
                    self.image_size,
                    self.config.decode_batch_size,
                )
        scored = self.judge.advantages(verdicts, rollout, self.latent_grid, map_images)
        self.counters["scorer_failures"] += scored.scorer_failures
        # a scorer may answer on another device than the policy's (a CPU judge for CUDA images)
        scored.advantages = scored.advantages.to(self.policy_device())
        return scored

    def score_groups(self, prompts: list[str], rollout: Rollout, parts: dict | None = None) -> ScoredGroups:
        """Judge (or gather ``parts`` already judged) and project, with the step's reward
        statistics in ``reward_stats``."""
        verdicts = self.verdicts(prompts, rollout, parts)
        scored = self.advantages(verdicts, rollout)
        if self.judge.several:
            scored.reward_stats = multi_reward_stats(scored.kept, self.judge.slots, scored.projector_stats)
        else:
            scored.reward_stats = reward_stats(verdicts, scored.projector_stats, projected=scored.kept)
        return scored

    def update(self, rollout: Rollout, scored: ScoredGroups) -> dict:
        """The update on this process's rows of the kept groups, which every process trains on."""
        all_ids = [(v.index, g) for v in scored.kept for g in range(self.config.group_size)]
        result = self.updater.run(rollout, scored.rows, scored.ids, scored.advantages, all_ids, self.step)
        self.counters["skipped_updates"] += result.skipped
        return result.metrics

    # == where the policy computes =================================================================
    def autocast(self):
        """The policy's forward passes under ``precision`` (:mod:`cast_core.precision`)."""
        return autocast(self.config.precision, self.policy_device())

    def policy_device(self) -> torch.device:
        """Where the policy computes: its ``device`` attribute, else its trainable parameters'
        (a policy without the attribute on CUDA must not get CPU autocast, i.e. no bf16 at all)."""
        device = getattr(self.policy, "device", None)
        if device is None:  # called on every forward: use the parameter list once it exists
            params = getattr(self, "params", None) or list(self.policy.trainable_parameters())
            device = params[0].device if params else None
        return torch.device(device if device is not None else "cpu")

    # == outputs: checkpoints, sample grids, the end of a run ======================================
    def close(self) -> None:
        """End a multi-process run cleanly: every process waits, then leaves the process group
        (a process that exits while another still talks to it can abort the whole launch)."""
        self.files.unlock()
        if self.overlap is not None:
            self.overlap.close()
        if self.dist.active:
            import torch.distributed as torch_dist

            self.dist.barrier()
            if torch_dist.is_initialized():
                torch_dist.destroy_process_group()

    def save(self) -> Path:
        """Checkpoint on the main process (adapter, optimizer and EMA are the same on every
        process: gradients are synced before each optimizer step); the others wait for it. With
        sharded weights every process takes part (gathering is a collective) and the main one
        writes the full tensors."""
        path = self.run_dir / "checkpoints" / f"step-{self.step:05d}"
        if self.dist.is_main or self.sharded:
            tensors = {f"ema.{i}": e for i, e in enumerate(self.ema)} if self.ema is not None else {}
            extra: dict = {}
            if self.monitor is not None:  # the training rewards since the last evaluation (resume)
                extra["monitor"] = {"sums": self.monitor.sums}
            if isinstance(self.objective, KeepsState):
                values, named = self.objective.state()
                tensors.update({f"objective.{k}": v for k, v in named.items()})
                extra["objective"] = {"name": self.config.objective, "state": values}
            path = save_checkpoint(
                self.run_dir,
                self.step,
                self.policy,
                self.optimizer,
                {"counters": self.counters, "config": self.config.to_dict(), **extra},
                tensors,
                keep=self.config.keep_checkpoints,
                write_extra=self._save_ema_adapter if self.ema is not None else None,
                writer=self.dist.is_main,
            )
        self.dist.barrier()
        return path

    def _save_ema_adapter(self, directory: Path) -> None:
        """The EMA weights as an adapter of their own (``ema-adapter/``), so that ``cast eval
        --adapter`` can score them; the live weights are put back whatever happens."""
        with torch.no_grad():
            live = [p.detach().clone() for p in self.params]
            try:
                for p, e in zip(self.params, self.ema):
                    p.copy_(e)
                self.policy.save_adapter(directory / "ema-adapter")
            finally:
                for p, v in zip(self.params, live):
                    p.copy_(v)

    def write_samples(self, prompts: list[str], rollout: Rollout, rows: list[int], advantages: torch.Tensor) -> None:
        """A grid of this process's members of the step's first group, with verdicts and maps."""
        from cast_core.judging import local_rows
        from cast_core.viz import sample_grid, save_picture

        group = local_rows(rollout, 0)
        if not group:
            return
        slot = next((s for s in self.judge.slots if not s.prompt_level), self.judge.slots[0])
        graph = self.judge.graph_for(slot, prompts[0])
        try:
            scores = slot.scorer.score(rollout.images[group], [graph] * len(group), heatmaps=False).scores
        except Exception:  # noqa: BLE001 - a picture is not worth a crash
            return
        adv = None
        if rows[: len(group)] == group:
            adv = advantages[: len(group)].reshape(len(group), *self.latent_grid)
        save_picture(
            sample_grid(rollout.images[group], graph, scores, adv), self.files.samples / f"step-{self.step:05d}.png"
        )

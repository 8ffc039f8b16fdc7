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
import inspect
import json
import math
import random
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch

from cast_core.checkpoints import load_checkpoint, save_checkpoint, verified_checkpoints
from cast_core.conditioning import PromptCache, select_rows
from cast_core.config import ConfigError, TrainConfig
from cast_core.distributed import Distributed
from cast_core.errors import CastError, Interrupted
from cast_core import trackers
from cast_core.interrupt import GracefulInterrupt
from cast_core.judging import GroupVerdict, Judge, reward_stats
from cast_core.launch import in_distributed_launch
from cast_core.precision import autocast
from cast_core.prompts import resolve_prompts
from cast_core.registry import get_advantage_projector, get_atom_decomposer, get_atom_scorer, get_policy, get_window_selector, lookup
from cast_core.run_dir import RunDirectory
from cast_core.sampling import concat_rollouts, decode_images, sample
from cast_core.seeding import generator_for, sample_generators, seed_for
from cast_core.sharding import is_sharded, like
from cast_core.types import Rollout, Window
from cast_core.update import PolicyUpdate


def _accepts(factory_kind: str, name: str) -> tuple[set[str], bool]:
    """The keyword names a component's factory takes, and whether it takes ``**kwargs``."""
    factory = lookup(factory_kind, name).factory
    target = factory.resolve() if hasattr(factory, "resolve") else factory
    try:
        params = inspect.signature(target).parameters
    except (TypeError, ValueError):
        return set(), False
    return set(params), any(p.kind is p.VAR_KEYWORD for p in params.values())


def _keywords(target: Any) -> tuple[set[str], bool]:
    """The keyword names ``target`` accepts, and whether that list is complete: a class whose
    ``__init__`` passes ``**options`` up to its base is followed up the MRO (the backbone
    policies do this) until an ``__init__`` without ``**`` closes the list."""
    chain = [c.__init__ for c in target.__mro__ if "__init__" in vars(c)] if inspect.isclass(target) else [target]
    names: set[str] = set()
    for fn in chain:
        try:
            params = inspect.signature(fn).parameters
        except (TypeError, ValueError):
            return names, False
        names |= {n for n, p in params.items() if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and n != "self"}
        if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
            return names, True
    return names, False


def check_factory_kwargs(kind: str, name: str, kwargs: dict[str, Any], key: str) -> None:
    """A typo in ``policy_kwargs`` / ``scorer_kwargs`` / … fails in the first second, naming the
    key and what the factory accepts — not after a 64 GB model has loaded, as a TypeError."""
    if not kwargs:
        return
    factory = lookup(kind, name).factory
    target = factory.resolve() if hasattr(factory, "resolve") else factory
    names, complete = _keywords(target)
    unknown = sorted(set(kwargs) - names)
    if complete and unknown:
        import difflib

        close = difflib.get_close_matches(unknown[0], sorted(names), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"config key '{key}': {kind.replace('_', ' ')} {name!r} takes no argument {unknown[0]!r}.{hint} "
                          f"It accepts: {', '.join(sorted(names)) or 'none'}")


def _build(factory_kind: str, name: str, getter: Callable, offered: dict[str, Any]) -> Any:
    """Build a component passing only the keyword arguments its factory accepts."""
    names, takes_any = _accepts(factory_kind, name)
    return getter(name, **(offered if takes_any else {k: v for k, v in offered.items() if k in names}))


class Trainer:
    def __init__(self, config: TrainConfig, run_dir: str | Path, *, resume: bool = False, log: Callable[[str], None] | None = None):
        self.config = config.validate()
        cfg = self.config

        from accelerate import Accelerator  # imported here: `cast --help` must stay light

        # mixed precision is ours (cast_core.precision), not accelerate's process-global one
        # several processes without a GPU: accelerate must be told to use gloo on the CPU
        try:
            self.accelerator = Accelerator(cpu=cfg.cpu or (in_distributed_launch() and not torch.cuda.is_available()),
                                           **trackers.accelerator_kwargs(cfg.log_with, run_dir))
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
        self.files.lock()
        for kind, name, kwargs, key in (("policy", cfg.policy, cfg.policy_kwargs, "policy_kwargs"),
                                        ("atom_scorer", cfg.scorer, cfg.scorer_kwargs, "scorer_kwargs"),
                                        ("atom_decomposer", cfg.decomposer, cfg.decomposer_kwargs, "decomposer_kwargs"),
                                        ("window_selector", cfg.window, cfg.window_kwargs, "window_kwargs")):
            if name:  # before anything heavy is built (an empty window name means no selector)
                check_factory_kwargs(kind, name, kwargs, key)
        torch.manual_seed(cfg.seed)  # component construction (e.g. LoRA init) is reproducible
        self.policy = self._build_policy()
        self.prompts = resolve_prompts(cfg.prompts)
        self.image_size = tuple(cfg.image_size) if cfg.image_size else None
        # every other component is built (and every cheap check made) before any prompt is encoded
        scorer = get_atom_scorer(cfg.scorer, **cfg.scorer_kwargs)
        self.decomposer = get_atom_decomposer(cfg.decomposer, **cfg.decomposer_kwargs)
        self.projector = _build("advantage_projector", cfg.projector, get_advantage_projector,
                                {"lam": cfg.lam, "adv_clip": cfg.adv_clip, "gating": cfg.gating,
                                 "heatmap_norm": cfg.heatmap_norm, "atom_credit": cfg.atom_credit})
        self.selector = get_window_selector(cfg.window, **cfg.window_kwargs) if cfg.window else None
        try:
            self.latent_grid = self.policy.latent_grid(self.image_size)
        except ValueError as err:  # a size this policy cannot draw: one line, before any prompt is encoded
            raise ConfigError(f"image_size {list(self.image_size or ())}: policy {cfg.policy!r} says: {err}") from None
        self.dist.shard(cfg.prompts_per_step * cfg.group_size)  # fail now, not at the first step
        self.prompt_cache = PromptCache(lambda ps: self.policy.encode(ps, image_size=self.image_size),
                                        device=self.policy_device(), who=f"policy {cfg.policy!r}",
                                        max_entries=0 if cfg.offload_text_encoder else cfg.prompt_cache_size)
        if cfg.offload_text_encoder:  # before prepare(): the text encoder leaves before the transformer arrives
            self._encode_all_then_offload()
        self.module = self._prepare_policy()
        self.prompt_cache.device = self.policy_device()
        self.params = [p for p in self.policy.trainable_parameters()]
        if not self.params:
            raise CastError(f"policy {cfg.policy!r} has no trainable parameters")
        # FSDP2 (ours or accelerate's): checkpoints and window measurements become collectives
        self.sharded = any(is_sharded(p) for p in self.params)
        self.optimizer = torch.optim.AdamW(self.params, lr=cfg.lr, betas=(cfg.adam_beta1, cfg.adam_beta2),
                                           eps=cfg.adam_eps, weight_decay=cfg.weight_decay)
        self.ema = [p.detach().clone() for p in self.params] if cfg.ema > 0 else None
        self.step = 0
        self.counters = {"skipped_updates": 0, "scorer_failures": 0, "images_sampled": 0}
        self.judge_ = Judge(scorer, self.decomposer, self.projector, self.dist, group_size=cfg.group_size,
                            heatmap_source=cfg.heatmap_source, log=self.log, counters=self.counters)
        self.maps_from_x0 = self.judge_.maps_from_x0
        self._prepare_run_dir(resume)
        self.updater = PolicyUpdate(cfg, self.policy, self.params, self.optimizer, self.dist, module=self.module,
                                    autocast=self.autocast, image_size=self.image_size, log=self.log,
                                    counters=self.counters, ema=self.ema, sharded=self.sharded)

    # the judge owns the scorer (a test or a plugin may swap it on a built trainer)
    scorer = property(lambda self: self.judge_.scorer, lambda self, v: setattr(self.judge_, "scorer", v))

    # -- construction ------------------------------------------------------------------------------
    def _build_policy(self) -> Any:
        """The policy with the run's base dtype, and on this process's GPU in a multi-GPU run."""
        cfg = self.config
        kwargs = dict(cfg.policy_kwargs)
        names, takes_any = _accepts("policy", cfg.policy)
        if cfg.base_dtype != "float32":
            if not (takes_any or "torch_dtype" in names):
                raise ConfigError(f"config key 'base_dtype': policy {cfg.policy!r} takes no torch_dtype argument, "
                                  f"so its weights cannot be held in {cfg.base_dtype}; use base_dtype = \"float32\"")
            kwargs.setdefault("torch_dtype", cfg.base_dtype)
        device = self.dist.device
        if self.dist.active and device.type == "cuda" and (takes_any or "device" in names) \
                and str(kwargs.get("device", "cuda")) == "cuda":
            kwargs["device"] = str(device)  # rank k computes on cuda:k
        policy = get_policy(cfg.policy, **kwargs)
        if cfg.gradient_checkpointing:
            enable = getattr(policy, "enable_gradient_checkpointing", None)
            if enable is None:
                raise ConfigError(f"config key 'gradient_checkpointing': policy {cfg.policy!r} does not support it "
                                  f"(no enable_gradient_checkpointing()); set gradient_checkpointing = false")
            enable()
        return policy

    def _prepare_policy(self) -> Any:
        """The policy's own wrapping for the run (``prepare``), with ``sharding`` passed on when
        it is not the default; ``None`` for a policy without ``prepare``."""
        cfg = self.config
        prepare = getattr(self.policy, "prepare", None)
        if cfg.sharding == "accelerate":
            return prepare(self.accelerator) if prepare is not None else None
        if not self.dist.active:
            raise ConfigError(f'config key \'sharding\': "{cfg.sharding}" splits the weights over several processes '
                              f"and this run has one; launch it with --num-processes N (or torchrun / accelerate "
                              f'launch), or set sharding = "accelerate"')
        if prepare is None or "sharding" not in inspect.signature(prepare).parameters:
            raise ConfigError(f'config key \'sharding\': policy {cfg.policy!r} cannot shard itself (its prepare() '
                              f'takes no sharding argument); use sharding = "accelerate"')
        return prepare(self.accelerator, sharding=cfg.sharding)

    def _encode_all_then_offload(self) -> None:
        """Encode every training prompt, then let the policy release its text encoder — all
        before ``prepare`` moves the transformer to the accelerator, so the two never share it
        (FLUX.2-dev's 48 GB encoder and 64 GB transformer do not fit one 80 GB GPU together).
        A measured window's calibration prompts (the selector's ``prompts_for``) are encoded
        too, and the window reads them from this cache (:meth:`_measured_window`)."""
        offload = getattr(self.policy, "offload_text_encoder", None)
        if offload is None:
            raise ConfigError(f"config key 'offload_text_encoder': policy {self.config.policy!r} has no "
                              f"offload_text_encoder(); set offload_text_encoder = false")
        prompts = list(self.prompts)
        if self.selector is not None and getattr(self.selector, "prompts_for", None) is not None:  # what the window will sample
            prompts += self.selector.prompts_for(self.policy, list(self.prompts))
        self.log(f"encoding {len(set(prompts))} prompts before offloading the text encoder")
        self.prompt_cache.warm(prompts)
        offload()

    # -- run directory ---------------------------------------------------------------------------
    def _prepare_run_dir(self, resume: bool) -> None:
        if resume:
            self._resume_from_intact_checkpoint()
        self.dist.barrier()  # every process has read the directory before the main one writes
        self.files.create(self.config.to_dict())

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
                    why = f"it does not load ({type(err).__name__}: {str(err).splitlines()[0][:160] if str(err) else ''})"
            if why is not None:
                skipped.append((ckpt, why))
                self.log(f"warning: skipping checkpoint {ckpt.name}: {why}")
                continue
            self.step = state["step"]
            self.counters.update(state.get("counters", {}))
            if self.ema is not None and tensors:
                self.ema = [like(tensors[f"ema.{i}"], p) for i, p in enumerate(self.params)]
            self.log(f"resumed {self.run_dir} from {ckpt.name}" + (f" (skipped {len(skipped)} newer)" if skipped else ""))
            self.files.truncate_metrics(self.step, warn=self.log)
            return
        if skipped:
            reasons = "; ".join(f"{p.name}: {why}" for p, why in skipped[:3])
            raise CastError(f"{self.run_dir} has {len(skipped)} checkpoint(s) but none is intact ({reasons}); refusing "
                            "to restart from step 0 over them. Restore a checkpoint, or start a new run with another --out")
        self.log(f"no checkpoint in {self.run_dir} yet; starting from step 0")
        self.files.truncate_metrics(0, warn=self.log)

    # -- pieces of one step ----------------------------------------------------------------------
    def graph(self, prompt: str):
        return self.judge_.graph(prompt)

    def pick_prompts(self, step: int) -> list[str]:
        rng = random.Random(seed_for(self.config.seed, step, "prompts"))
        k = self.config.prompts_per_step
        return rng.sample(self.prompts, k) if k <= len(self.prompts) else rng.choices(self.prompts, k=k)

    def window_for(self, step: int, prompts: list[str]) -> Window:
        cfg = self.config
        if self.selector is None:
            return Window(cfg.window_start, cfg.window_size).check_fits(cfg.num_steps)
        if hasattr(self.selector, "select_for_step"):  # per-step selectors (random, sliding) draw from the run's seed
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
        self.policy.encode = lambda prompts, image_size=None: self.prompt_cache.batch(list(prompts))
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
            record = {"start": window.start, "size": window.size, "selector": self.config.window,
                      "diagnostics": _jsonable_tree(dict(window.diagnostics))}
            self.files.write_window(record)
            self.log(f"window: steps {window.start}..{window.end - 1} of {self.config.num_steps} ({self.config.window})")
        record = self.dist.broadcast_object(record)
        return Window(record["start"], record["size"], record.get("diagnostics", {}))

    def sample_ids(self, num_prompts: int) -> list[tuple[int, int]]:
        """This process's samples ``(prompt index, member)`` of a step with ``num_prompts`` prompts."""
        G = self.config.group_size
        return [divmod(s, G) for s in self.dist.shard(num_prompts * G)]

    def rollout(self, prompts: list[str], window: Window, step: int, x0_steps: tuple[int, ...] | None = None,
                ids: list[tuple[int, int]] | None = None) -> Rollout:
        """Sample this process's share of the step (``ids``, default :meth:`sample_ids`).

        Sample ``(p, g)`` draws from its own generator, seeded by ``(seed, step, p, g)``, so its
        image does not depend on ``sample_batch_size`` or on the process count. Keeps x̂0 at
        ``x0_steps`` (default: the window start when the heatmaps come from x̂0, else nowhere).
        With ``group_noise = "shared"`` the G images of a prompt start from one noise (seeded by
        ``(seed, step, p)``), so their rewards differ only through the window's actions — the
        advantage then credits what the window did, not the luck of the draw (DanceGRPO's
        ``init_same_noise``); the window must then lie where noise can still change the verdicts."""
        cfg = self.config
        ids = self.sample_ids(len(prompts)) if ids is None else ids
        batch = [prompts[p] for p, _ in ids]
        gens = sample_generators(cfg.seed, step, ids)
        if x0_steps is None:
            x0_steps = (window.start,) if self.maps_from_x0 else ()
        keep = tuple(x0_steps) or False
        noise = None
        if cfg.group_noise == "shared":  # one starting point per group
            noise = torch.cat([self.policy.initial_noise(1, self.image_size, generator_for(cfg.seed, step, "start", p))
                               for p, _ in ids])
        cond = self.prompt_cache.batch(batch)
        chunk = cfg.sample_batch_size or len(batch)
        with self.autocast():
            parts = [sample(self.policy, batch[i:i + chunk], num_steps=cfg.num_steps, image_size=self.image_size,
                            window=window, eta=cfg.eta, generator=gens[i:i + chunk], keep_x0=keep,
                            noise_block=cfg.noise_block, conditioning=select_rows(cond, list(range(i, min(i + chunk, len(batch))))),
                            initial_noise=None if noise is None else noise[i:i + chunk],
                            decode_batch_size=cfg.decode_batch_size)
                     for i in range(0, len(batch), chunk)]
        rollout = concat_rollouts(parts)
        rollout.sample_ids = list(ids)
        return rollout

    def judge(self, prompts: list[str], rollout: Rollout) -> list[GroupVerdict]:
        """Verdicts on the final images of every group the scorer could judge (whole groups)."""
        self.judge_.step = self.step
        return self.judge_.verdicts(prompts, rollout)

    def advantages(self, verdicts: list[GroupVerdict], rollout: Rollout, x0_index: int = 0):
        """``(local rows, their sample ids, A [n, h·w], groups kept, projector stats)``. With
        ``heatmap_source = "x0"`` the maps are scored on the rollout's ``x0_index``-th kept x̂0
        (docs/shapes-rl.md); verdicts always judge the final image."""
        map_images = None
        if self.maps_from_x0:
            if rollout.x0 is None:
                raise RuntimeError("heatmap_source='x0' needs a rollout sampled with keep_x0 at the window start")
            with torch.no_grad():
                map_images = decode_images(self.policy, rollout.x0[:, x0_index].to(rollout.latents.dtype),
                                           self.image_size, self.config.decode_batch_size)
        rows, ids, adv, kept, stats = self.judge_.advantages(verdicts, rollout, self.latent_grid, map_images)
        # a scorer may answer on another device than the policy's (a CPU judge for CUDA images)
        return rows, ids, adv.to(self.policy_device()), kept, stats

    def score_groups(self, prompts: list[str], rollout: Rollout):
        """Judge and project: ``(local rows, sample ids, A [n, h·w], kept groups, reward stats)``."""
        verdicts = self.judge(prompts, rollout)
        rows, ids, adv, kept, amap_stats = self.advantages(verdicts, rollout)
        return rows, ids, adv, kept, reward_stats(verdicts, amap_stats, projected=kept)

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

    def log_prob(self, latents, next_latents, sigma, sigma_next, cond, sigma_max):
        return self.updater.log_prob(latents, next_latents, sigma, sigma_next, cond, sigma_max)

    def objective(self, log_prob: torch.Tensor, old: torch.Tensor, adv: torch.Tensor) -> tuple[torch.Tensor, dict]:
        return self.updater.objective(log_prob, old, adv)

    def update(self, rollout: Rollout, rows: list[int], ids: list[tuple[int, int]], advantages: torch.Tensor,
               kept: list[GroupVerdict]) -> dict:
        """The update on this process's ``rows``; ``kept`` are the groups every process trains on."""
        all_ids = [(v.index, g) for v in kept for g in range(self.config.group_size)]
        return self.updater.run(rollout, rows, ids, advantages, all_ids, self.step)

    # -- the step, top to bottom -----------------------------------------------------------------
    def train_step(self) -> dict:
        cfg = self.config
        t0 = time.perf_counter()
        sent_before, steps_before = self.dist.bytes_sent, self.updater.optimizer_steps
        prompts = self.pick_prompts(self.step)
        window = self.window_for(self.step, prompts)
        rollout = self.rollout(prompts, window, self.step)
        images = len(prompts) * cfg.group_size  # over all processes
        self.counters["images_sampled"] += images
        rows, ids, advantages, kept, stats = self.score_groups(prompts, rollout)
        metrics: dict[str, Any] = {"step": self.step + 1, "window_start": window.start, "window_size": window.size, **stats}
        if not kept:
            self.counters["skipped_updates"] += 1
            metrics["skipped"] = "no group could be scored"
        elif not self.dist.all_true(bool(torch.isfinite(advantages).all())):
            self.counters["skipped_updates"] += 1
            metrics["skipped"] = "non-finite advantages"
            self.log(f"step {self.step}: non-finite advantages; update skipped")
        else:
            metrics.update(self.update(rollout, rows, ids, advantages, kept))
        self.step += 1
        elapsed = time.perf_counter() - t0
        metrics.update({"step_time_s": elapsed, "images_per_s": images / elapsed,
                        "peak_memory_mb": _peak_memory_mb(self.policy_device()), **self.counters})
        decomposition = getattr(self.decomposer, "stats", None)
        if callable(decomposition):  # how the run's prompts were decomposed so far (the auto decomposer's paths)
            metrics.update({f"decomposed_{path.replace('-', '_')}": n for path, n in decomposition().items()})
        if self.dist.active:
            metrics["processes"] = self.dist.world
            # this process's payload in cast's collectives this step, plus the gradient sync (DDP's
            # all-reduce; under FSDP2 its reduce-scatter, without the parameter all-gathers)
            ddp = sum(p.numel() * p.element_size() for p in self.params) * (self.updater.optimizer_steps - steps_before) \
                if self.updater.module_syncs else 0
            metrics["comm_bytes"] = self.dist.bytes_sent - sent_before + ddp
        if cfg.sample_every and self.step % cfg.sample_every == 0 and self.dist.is_main:
            self.write_samples(prompts, rollout, rows, advantages)
        return metrics

    def run(self) -> dict:
        """Train to ``steps`` (or the time budget). A first Ctrl-C ends the run after the current
        step with a checkpoint (:class:`~cast_core.errors.Interrupted`); a second aborts at once."""
        cfg = self.config
        last: dict = {}
        deadline = time.monotonic() + 60 * cfg.max_minutes if cfg.max_minutes else math.inf
        self.files.lock()
        trackers.start(self.accelerator, cfg.tracker_project or self.run_dir.name, cfg.to_dict())
        try:
            with _Progress(cfg.steps, self.step, self.log, cfg.max_minutes, enabled=self.dist.is_main) as progress, \
                    self.files.open_metrics() as metrics_file, GracefulInterrupt(self.log) as interrupt:
                while self.step < cfg.steps:
                    last = self.train_step()
                    # rank 0's clock and Ctrl-C decide for everyone: every process stops at the same step
                    out_of_time, stop = self.dist.broadcast_object((time.monotonic() >= deadline, interrupt.requested))
                    final = self.step == cfg.steps or out_of_time or stop
                    if self.step % cfg.log_every == 0 or final:
                        metrics_file.write(json.dumps(_jsonable(last)) + "\n")
                        metrics_file.flush()
                        trackers.log(self.accelerator, last, self.step)
                    if self.step % cfg.checkpoint_every == 0 or final:
                        self.save()
                    progress.update(self.step, last)
                    if stop and self.step < cfg.steps:
                        raise Interrupted(f"interrupted at step {self.step}; checkpoint written. Continue with "
                                          f"`cast train --resume {self.run_dir}`")
                    if final and self.step < cfg.steps:
                        self.log(f"time budget of {cfg.max_minutes:g} min reached at step {self.step}")
                        break
        finally:
            trackers.finish(self.accelerator)
            self.files.unlock()
        return last

    def close(self) -> None:
        """End a multi-process run cleanly: every process waits, then leaves the process group
        (a process that exits while another still talks to it can abort the whole launch)."""
        self.files.unlock()
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
            path = save_checkpoint(self.run_dir, self.step, self.policy, self.optimizer,
                                   {"counters": self.counters, "config": self.config.to_dict()}, tensors,
                                   keep=self.config.keep_checkpoints,
                                   write_extra=self._save_ema_adapter if self.ema is not None else None,
                                   writer=self.dist.is_main)
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
        from cast_core.viz import sample_grid

        from cast_core.judging import local_rows

        group = local_rows(rollout, 0)
        if not group:
            return
        graph = self.graph(prompts[0])
        try:
            scores = self.scorer.score(rollout.images[group], [graph] * len(group), heatmaps=False).scores
        except Exception:  # noqa: BLE001 - a picture is not worth a crash
            return
        adv = None
        if rows[:len(group)] == group:
            adv = advantages[:len(group)].reshape(len(group), *self.latent_grid)
        sample_grid(rollout.images[group], graph, scores, adv).save(self.files.samples / f"step-{self.step:05d}.png")


def _peak_memory_mb(device: torch.device) -> float:
    """Peak memory where the policy computes: the CUDA allocator's on a GPU, the process's
    resident set on the CPU (a CPU run on a GPU machine must not report the idle GPU's ~0 MB)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    try:
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    except ImportError:  # pragma: no cover - Windows
        return float("nan")


def _jsonable_tree(obj: Any) -> Any:
    """Diagnostics as JSON: tensors/arrays become lists, other odd objects their repr."""
    if isinstance(obj, dict):
        return {str(k): _jsonable_tree(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable_tree(v) for v in obj]
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    return repr(obj)


def _jsonable(metrics: dict) -> dict:
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in metrics.items()}


class _Progress:
    """A rich progress bar on a terminal; plain log lines otherwise (CI, files, pipes)."""

    def __init__(self, total: int, done: int, log: Callable[[str], None], minutes: float = 0.0, enabled: bool = True):
        self.total, self.done, self.log = total, done, log
        self.tty = sys.stderr.isatty() and enabled
        self.minutes, self.t0 = minutes, time.monotonic()

    def expected_total(self, step: int) -> int:
        """The step the run will stop at: ``total``, or fewer when the time budget ends it first
        (projected from the pace so far). Why: a budgeted run (``make demo``) has a huge step cap,
        and "step 12/100000" says nothing about when it ends."""
        if not self.minutes or step <= self.done:
            return self.total
        per_step = (time.monotonic() - self.t0) / (step - self.done)
        left = max(0.0, 60 * self.minutes - (time.monotonic() - self.t0))
        return min(self.total, step + math.ceil(left / per_step))

    def __enter__(self):
        if self.tty:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self.bar = Progress(TextColumn("train"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                                TextColumn("{task.fields[info]}"), transient=False)
            self.bar.start()
            self.task = self.bar.add_task("train", total=self.total, completed=self.done, info="")
        return self

    def update(self, step: int, m: dict) -> None:
        info = (f"GM {m.get('reward_gm', float('nan')):.3f} AM {m.get('reward_am', float('nan')):.3f} "
                f"loss {m.get('loss', float('nan')):.4g} {m.get('images_per_s', 0):.1f} img/s")
        total = self.expected_total(step)
        if self.minutes:
            info += f" {(time.monotonic() - self.t0) / 60:.1f}/{self.minutes:g} min"
        elif not self.tty and step > self.done:  # the bar shows its own time left
            left = (time.monotonic() - self.t0) / (step - self.done) * (total - step)
            info += f" ETA {int(left // 60)}m{int(left % 60):02d}s"
        if self.tty:
            self.bar.update(self.task, total=total, completed=step, info=info)
        else:
            self.log(f"step {step}/{total} {info}" + (f" skipped: {m['skipped']}" if "skipped" in m else ""))

    def __exit__(self, *exc):
        if self.tty:
            self.bar.stop()
        return False


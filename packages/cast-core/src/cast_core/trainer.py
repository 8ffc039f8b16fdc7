"""The CAST training loop, readable top to bottom (nanoGPT / TRL style).

One step:

1. pick ``prompts_per_step`` prompts (seeded by ``(seed, step)``) and repeat each ``group_size``
   times;
2. sample them: ODE outside the window, SDE inside, keeping per-position log-probs;
3. decompose each prompt once (cached) and score every image atom by atom, with heatmaps;
4. turn each group's atom scores into an advantage map on the latent grid (the projector);
5. ``inner_epochs`` passes of the clipped objective over the window steps, AdamW on the
   policy's adapter, gradient clipping, optional EMA;
6. log metrics, draw a sample grid, checkpoint atomically.

Every random choice comes from generators seeded by ``(seed, step, purpose)``, never from a
continuing global stream, so a resumed run replays exactly the steps the original would have
taken — and every process of a distributed run would draw the same window.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import json
import math
import random
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch

from cast_core.aggregate import arithmetic_mean, geometric_mean
from cast_core.checkpoints import latest_checkpoint, load_checkpoint, save_checkpoint
from cast_core.config import ConfigError, TrainConfig, dump_toml
from cast_core.errors import CastError
from cast_core.loss import clipped_objective, flow_grpo_objective, kl_penalty
from cast_core.precision import autocast
from cast_core.registry import get_advantage_projector, get_atom_decomposer, get_atom_scorer, get_policy, get_window_selector, lookup
from cast_core.sampling import concat_rollouts, sample, select_rows
from cast_core.sde import reduce_per_position, sde_step
from cast_core.scene_graph import SceneGraph
from cast_core.types import Rollout, Window


def seed_for(seed: int, *parts: Any) -> int:
    """A 63-bit seed from ``(seed, parts)``: stable across processes and Python versions."""
    digest = hashlib.sha256(repr((seed, *parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


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


def _build(factory_kind: str, name: str, getter: Callable, offered: dict[str, Any]) -> Any:
    """Build a component passing only the keyword arguments its factory accepts."""
    factory = lookup(factory_kind, name).factory
    target = factory.resolve() if hasattr(factory, "resolve") else factory
    try:
        params = inspect.signature(target).parameters
        takes_any = any(p.kind is p.VAR_KEYWORD for p in params.values())
        kwargs = offered if takes_any else {k: v for k, v in offered.items() if k in params}
    except (TypeError, ValueError):
        kwargs = {}
    return getter(name, **kwargs)


def reward_stats(judged: list, amap_stats: list[dict] = ()) -> dict:
    """Reward GM/AM/spread, per-atom-kind pass rates of judged groups, and (given the
    projector's stats of the same groups) the fraction of saturated atoms."""
    gms, ams, passes = [], [], {}
    for _, graph, scores, _ in judged:
        for row in scores.tolist():
            gms.append(geometric_mean(row))
            ams.append(arithmetic_mean(row))
        for k, atom in enumerate(graph.atoms):
            passes.setdefault(atom.kind, []).extend((scores[:, k] >= 0.5).float().tolist())
    sat = sum(int(st.get("saturated_atoms", 0)) for st in amap_stats)
    total = sum(int(st.get("total_atoms", len(g.atoms))) for st, (_, g, _, _) in zip(amap_stats, judged))
    return {
        "reward_gm": sum(gms) / len(gms) if gms else float("nan"),
        "reward_am": sum(ams) / len(ams) if ams else float("nan"),
        "reward_std": float(torch.tensor(gms).std(unbiased=False)) if gms else float("nan"),
        "saturated_fraction": sat / total if total else float("nan"),
        **{f"pass_{kind}": sum(v) / len(v) for kind, v in passes.items()},
    }


class Trainer:
    def __init__(self, config: TrainConfig, run_dir: str | Path, *, resume: bool = False, log: Callable[[str], None] | None = None):
        self.config = config.validate()
        self.run_dir = Path(run_dir)
        self.log = log or (lambda msg: print(msg, file=sys.stderr))
        cfg = self.config

        from accelerate import Accelerator  # imported here: `cast --help` must stay light

        # mixed precision is ours (cast_core.precision), not accelerate's process-global one
        self.accelerator = Accelerator(cpu=cfg.cpu)
        torch.manual_seed(cfg.seed)  # component construction (e.g. LoRA init) is reproducible
        self.policy = get_policy(cfg.policy, **cfg.policy_kwargs)
        self.scorer = get_atom_scorer(cfg.scorer, **cfg.scorer_kwargs)
        self.decomposer = get_atom_decomposer(cfg.decomposer)
        self.projector = _build("advantage_projector", cfg.projector, get_advantage_projector,
                                {"lam": cfg.lam, "adv_clip": cfg.adv_clip, "gating": cfg.gating,
                                 "heatmap_norm": cfg.heatmap_norm, "atom_credit": cfg.atom_credit})
        self._needs_maps = getattr(self.projector, "needs_heatmaps", True)
        self.maps_from_x0 = cfg.heatmap_source == "x0" and self._needs_maps
        self.selector = get_window_selector(cfg.window, **cfg.window_kwargs) if cfg.window else None
        self.prompts = resolve_prompts(cfg.prompts)
        self.image_size = tuple(cfg.image_size) if cfg.image_size else None
        self.latent_grid = self.policy.latent_grid(self.image_size)
        self.params = [p for p in self.policy.trainable_parameters()]
        if not self.params:
            raise CastError(f"policy {cfg.policy!r} has no trainable parameters")
        self.optimizer = torch.optim.AdamW(self.params, lr=cfg.lr, betas=(cfg.adam_beta1, cfg.adam_beta2),
                                           eps=cfg.adam_eps, weight_decay=cfg.weight_decay)
        self.ema = [p.detach().clone() for p in self.params] if cfg.ema > 0 else None
        self.graphs: dict[str, Any] = {}
        self.step = 0
        self.counters = {"skipped_updates": 0, "scorer_failures": 0, "images_sampled": 0}
        self._prepare_run_dir(resume)

    # -- run directory ---------------------------------------------------------------------------
    def _prepare_run_dir(self, resume: bool) -> None:
        if resume:
            ckpt = latest_checkpoint(self.run_dir)
            if ckpt is not None:
                state, tensors = load_checkpoint(ckpt, self.policy, self.optimizer)
                self.step = state["step"]
                self.counters.update(state.get("counters", {}))
                if self.ema is not None and tensors:
                    self.ema = [tensors[f"ema.{i}"].to(p.device) for i, p in enumerate(self.params)]
                self.log(f"resumed {self.run_dir} from {ckpt.name}")
                self._truncate_metrics()
            else:
                self.log(f"no complete checkpoint in {self.run_dir}; starting from step 0")
        elif (self.run_dir / "config.toml").exists():
            raise CastError(
                f"{self.run_dir} already holds a run; continue it with `cast train --resume {self.run_dir}` "
                f"or choose another --out"
            )
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "samples").mkdir(exist_ok=True)
        (self.run_dir / "config.toml").write_text(dump_toml(self.config.to_dict()))

    def _truncate_metrics(self) -> None:
        """Drop metric lines written after the checkpoint we resume from (they will be redone)."""
        path = self.run_dir / "metrics.jsonl"
        if path.exists():
            keep = [line for line in path.read_text().splitlines() if line and json.loads(line).get("step", 0) <= self.step]
            path.write_text("".join(line + "\n" for line in keep))

    # -- pieces of one step ----------------------------------------------------------------------
    def graph(self, prompt: str):
        if prompt not in self.graphs:
            self.graphs[prompt] = self.decomposer.decompose(prompt)
        return self.graphs[prompt]

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

    def _measured_window(self) -> Window:
        """Select once per run and record it in window.json, so that a resumed run keeps the
        window it started with (even if a selector's cache was cleared in between). The selector
        sees all training prompts, never the prompts of whichever step we resume at."""
        path = self.run_dir / "window.json"
        if path.exists():
            data = json.loads(path.read_text())
            return Window(data["start"], data["size"], data.get("diagnostics", {}))
        window = self.selector.select(self.policy, list(self.prompts), self.config.num_steps)
        record = {"start": window.start, "size": window.size, "selector": self.config.window,
                  "diagnostics": _jsonable_tree(dict(window.diagnostics))}
        path.write_text(json.dumps(record, indent=2))
        self.log(f"window: steps {window.start}..{window.end - 1} of {self.config.num_steps} ({self.config.window})")
        return window

    def rollout(self, prompts: list[str], window: Window, generator: torch.Generator,
                x0_steps: tuple[int, ...] | None = None) -> Rollout:
        """Sample a batch; keeps x̂0 at ``x0_steps`` (default: the window start when the heatmaps
        come from x̂0, else nowhere). With ``group_noise = "shared"`` the G images of a prompt
        start from one noise, so their rewards differ only through the window's actions — the
        advantage then credits what the window did, not the luck of the draw (DanceGRPO's
        ``init_same_noise``); the window must then lie where noise can still change the verdicts."""
        cfg = self.config
        chunk = cfg.sample_batch_size or len(prompts)
        if x0_steps is None:
            x0_steps = (window.start,) if self.maps_from_x0 else ()
        keep = tuple(x0_steps) or False
        noise = None
        if cfg.group_noise == "shared":  # one starting point per group, drawn before any SDE noise
            groups = -(-len(prompts) // cfg.group_size)
            noise = self.policy.initial_noise(groups, self.image_size, generator)
            noise = noise.repeat_interleave(cfg.group_size, dim=0)[: len(prompts)]
        with self.autocast():
            parts = [sample(self.policy, prompts[i:i + chunk], num_steps=cfg.num_steps, image_size=self.image_size,
                            window=window, eta=cfg.eta, generator=generator, keep_x0=keep, noise_block=cfg.noise_block,
                            initial_noise=None if noise is None else noise[i:i + chunk])
                     for i in range(0, len(prompts), chunk)]
        return concat_rollouts(parts)

    def judge(self, prompts: list[str], rollout: Rollout) -> list[tuple[list[int], SceneGraph, torch.Tensor, torch.Tensor | None]]:
        """Verdicts on the final images, one scorer call per prompt group: ``(rows, graph, scores
        [G, K], final-image heatmaps or None)`` for every group the scorer could judge."""
        G = self.config.group_size
        final_maps = self._needs_maps and not self.maps_from_x0
        judged = []
        for g, prompt in enumerate(prompts):
            rows = list(range(g * G, (g + 1) * G))
            graph = self.graph(prompt)
            out = self._score(prompt, rollout.images[rows], graph, heatmaps=final_maps)
            if out is None:
                continue
            scores = torch.stack([s.float() for s in out.scores])
            if not torch.isfinite(scores).all():
                self.counters["scorer_failures"] += 1
                self.log(f"step {self.step}: non-finite scores for prompt {prompt!r}; group skipped")
                continue
            judged.append((rows, graph, scores, torch.stack([h.float() for h in out.heatmaps]) if final_maps else None))
        return judged

    def advantages(self, judged: list, rollout: Rollout, x0_index: int = 0) -> tuple[list[int], torch.Tensor, list[dict]]:
        """Project judged groups to advantage maps: (kept sample indices, A [n, N], projector stats).
        With ``heatmap_source = "x0"`` the maps are scored on the rollout's ``x0_index``-th kept
        x̂0: it depends on the state before the window's actions only, so weighting a position's
        log-prob by it cannot reward the actions for where objects ended up (the final image's
        maps can: docs/shapes-rl.md). Verdicts always judge the final image."""
        map_images = None
        if self._needs_maps and self.maps_from_x0:
            if rollout.x0 is None:
                raise RuntimeError("heatmap_source='x0' needs a rollout sampled with keep_x0 at the window start")
            with torch.no_grad():
                map_images = self.policy.decode(rollout.x0[:, x0_index].to(rollout.latents.dtype), self.image_size)
        kept, maps, amap_stats = [], [], []
        for rows, graph, scores, heat in judged:
            if map_images is not None:
                out = self._score(graph.prompt, map_images[rows], graph, heatmaps=True)
                if out is None:
                    continue
                heat = torch.stack([h.float() for h in out.heatmaps])
            amap = self.projector.project(scores, heat, graph, self.latent_grid)
            kept += rows
            maps.append(amap.values.reshape(len(rows), -1))
            amap_stats.append(amap.stats)
        # a scorer may answer on another device than the policy's (a CPU judge for CUDA images)
        device = self.policy_device()
        return kept, (torch.cat(maps).to(device) if maps else torch.empty(0, device=device)), amap_stats

    def _score(self, prompt: str, images: torch.Tensor, graph: SceneGraph, heatmaps: bool):
        """One scorer call; a failure is logged and counted and gives None (the group is skipped)."""
        try:
            return self.scorer.score(images, [graph] * len(images), heatmaps=heatmaps)
        except Exception as err:  # noqa: BLE001 - one bad batch must not kill a long run
            self.counters["scorer_failures"] += 1
            self.log(f"step {self.step}: scorer failed on prompt {prompt!r} ({type(err).__name__}: {err}); group skipped")
            return None

    def score_groups(self, prompts: list[str], rollout: Rollout) -> tuple[list[int], torch.Tensor, dict]:
        """Advantage maps for every group the scorer could judge: (kept sample indices, A [n, N], stats)."""
        judged = self.judge(prompts, rollout)
        kept, advantages, amap_stats = self.advantages(judged, rollout)
        return kept, advantages, reward_stats(judged, amap_stats)

    def autocast(self):
        """The policy's forward passes under ``precision`` (:mod:`cast_core.precision`)."""
        return autocast(self.config.precision, self.policy_device())

    def policy_device(self) -> torch.device:
        """Where the policy computes: its ``device`` attribute, else its trainable parameters'
        (a policy without the attribute on CUDA must not get CPU autocast, i.e. no bf16 at all)."""
        device = getattr(self.policy, "device", None)
        if device is None and self.params:
            device = self.params[0].device
        return torch.device(device if device is not None else "cpu")

    def log_prob(self, latents, next_latents, sigma, sigma_next, cond, sigma_max):
        """Per-element log-prob of the stored transition under the current policy, and the mean.
        The velocity runs under the same autocast as sampling (``precision``), so that the first
        pass recomputes exactly the sampled log-probs; the SDE arithmetic stays in float32."""
        with self.autocast():
            v = self.policy.velocity(latents, sigma, cond)
        step = sde_step(v, latents, sigma, sigma_next, self.config.eta, sigma_max=sigma_max, prev_sample=next_latents,
                        noise_block=self.config.noise_block)
        return step

    def objective(self, log_prob: torch.Tensor, old: torch.Tensor, adv: torch.Tensor) -> tuple[torch.Tensor, dict]:
        """The clipped objective of one window step: per position (CAST) or per sample (Flow-GRPO)."""
        cfg = self.config
        if cfg.ratio_mode == "position":
            return clipped_objective(reduce_per_position(log_prob), old, adv, cfg.clip_range)
        return flow_grpo_objective(reduce_per_position(log_prob).mean(1), old.mean(1), adv.mean(1), cfg.clip_range,
                                   adv_clip=cfg.adv_clip)

    def update(self, rollout: Rollout, kept: list[int], advantages: torch.Tensor, generator: torch.Generator) -> dict:
        """``inner_epochs`` passes of the clipped objective over the window steps."""
        cfg = self.config
        idx = torch.tensor(kept)
        sig = rollout.sigmas
        sigma_max = sig[1]
        n, T = len(kept), len(rollout.step_indices)
        mb = cfg.minibatch_size or n
        diags: list[dict] = []
        losses, kls = [], []
        for epoch in range(cfg.inner_epochs):
            # the first pass keeps sampling order so a full-batch update recomputes exactly the
            # sampled numbers (ratio exactly 1, the on-policy check); later passes shuffle
            perm = idx if epoch == 0 else idx[torch.randperm(n, generator=generator)]
            pos = {int(r): i for i, r in enumerate(kept)}
            for start in range(0, n, mb):
                rows = perm[start:start + mb]
                adv = advantages[[pos[int(r)] for r in rows]]
                cond = select_rows(rollout.conditioning, rows)
                self.optimizer.zero_grad(set_to_none=True)
                finite = True
                for t, step_index in enumerate(rollout.step_indices):
                    sigma, sigma_next = sig[step_index], sig[step_index + 1]
                    cur = self.log_prob(rollout.latents[rows, t], rollout.next_latents[rows, t], sigma, sigma_next, cond, sigma_max)
                    old = rollout.log_probs[rows, t]
                    loss, diag = self.objective(cur.log_prob, old, adv)
                    kl = torch.zeros(())
                    if cfg.beta > 0:
                        with torch.no_grad(), self.policy.reference():
                            ref = self.log_prob(rollout.latents[rows, t], rollout.next_latents[rows, t], sigma, sigma_next, cond, sigma_max)
                        kl = kl_penalty(cur.mean, ref.mean, cur.std_dev_t)
                    total = (loss + cfg.beta * kl) / T
                    if not torch.isfinite(total):
                        finite = False
                        break
                    self.accelerator.backward(total)
                    losses.append(float(loss.detach()))
                    kls.append(float(kl.detach()))
                    diags.append(diag)
                grads_ok = finite and all(p.grad is None or torch.isfinite(p.grad).all() for p in self.params)
                if not grads_ok:
                    self.optimizer.zero_grad(set_to_none=True)
                    self.counters["skipped_updates"] += 1
                    self.log(f"step {self.step}: non-finite loss or gradient; update skipped")
                    continue
                if cfg.max_grad_norm > 0:
                    torch.nn.utils.clip_grad_norm_(self.params, cfg.max_grad_norm)
                self.optimizer.step()
                if self.ema is not None:
                    with torch.no_grad():
                        for e, p in zip(self.ema, self.params):
                            e.lerp_(p.detach(), 1.0 - cfg.ema)
        mean = lambda xs: sum(xs) / len(xs) if xs else float("nan")  # noqa: E731
        out = {"loss": mean(losses), "kl": mean(kls)}
        for key in ("clip_fraction", "approx_kl", "ratio_mean"):
            out[key] = mean([d[key] for d in diags])
        out["ratio_min"] = min((d["ratio_min"] for d in diags), default=float("nan"))
        out["ratio_max"] = max((d["ratio_max"] for d in diags), default=float("nan"))
        return out

    # -- the step, top to bottom -----------------------------------------------------------------
    def train_step(self) -> dict:
        cfg = self.config
        t0 = time.perf_counter()
        prompts = self.pick_prompts(self.step)
        batch = [p for p in prompts for _ in range(cfg.group_size)]
        window = self.window_for(self.step, prompts)
        gen = torch.Generator().manual_seed(seed_for(cfg.seed, self.step, "noise"))
        rollout = self.rollout(batch, window, gen)
        self.counters["images_sampled"] += len(batch)
        kept, advantages, stats = self.score_groups(prompts, rollout)
        metrics: dict[str, Any] = {"step": self.step + 1, "window_start": window.start, "window_size": window.size, **stats}
        if not kept:
            self.counters["skipped_updates"] += 1
            metrics["skipped"] = "no group could be scored"
        elif not torch.isfinite(advantages).all():
            self.counters["skipped_updates"] += 1
            metrics["skipped"] = "non-finite advantages"
            self.log(f"step {self.step}: non-finite advantages; update skipped")
        else:
            metrics.update(self.update(rollout, kept, advantages, gen))
        self.step += 1
        elapsed = time.perf_counter() - t0
        metrics.update({"step_time_s": elapsed, "images_per_s": len(batch) / elapsed,
                        "peak_memory_mb": _peak_memory_mb(self.policy_device()), **self.counters})
        if cfg.sample_every and self.step % cfg.sample_every == 0:
            self.write_samples(prompts[0], rollout, kept, advantages)
        return metrics

    def run(self) -> dict:
        cfg = self.config
        last: dict = {}
        deadline = time.monotonic() + 60 * cfg.max_minutes if cfg.max_minutes else math.inf
        with _Progress(cfg.steps, self.step, self.log, cfg.max_minutes) as progress, open(self.run_dir / "metrics.jsonl", "a") as metrics_file:
            while self.step < cfg.steps:
                last = self.train_step()
                final = self.step == cfg.steps or time.monotonic() >= deadline
                if self.step % cfg.log_every == 0 or final:
                    metrics_file.write(json.dumps(_jsonable(last)) + "\n")
                    metrics_file.flush()
                if self.step % cfg.checkpoint_every == 0 or final:
                    self.save()
                progress.update(self.step, last)
                if final and self.step < cfg.steps:
                    self.log(f"time budget of {cfg.max_minutes:g} min reached at step {self.step}")
                    break
        return last

    def save(self) -> Path:
        tensors = {f"ema.{i}": e for i, e in enumerate(self.ema)} if self.ema is not None else {}
        return save_checkpoint(self.run_dir, self.step, self.policy, self.optimizer,
                               {"counters": self.counters, "config": self.config.to_dict()}, tensors,
                               keep=self.config.keep_checkpoints,
                               write_extra=self._save_ema_adapter if self.ema is not None else None)

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

    def write_samples(self, prompt: str, rollout: Rollout, kept: list[int], advantages: torch.Tensor) -> None:
        from cast_core.viz import sample_grid

        G = self.config.group_size
        rows = list(range(G))
        graph = self.graph(prompt)
        try:
            scores = self.scorer.score(rollout.images[rows], [graph] * G, heatmaps=False).scores
        except Exception:  # noqa: BLE001 - a picture is not worth a crash
            return
        adv = None
        if kept and kept[0] == 0:
            adv = advantages[:G].reshape(G, *self.latent_grid)
        sample_grid(rollout.images[rows], graph, scores, adv).save(self.run_dir / "samples" / f"step-{self.step:05d}.png")


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

    def __init__(self, total: int, done: int, log: Callable[[str], None], minutes: float = 0.0):
        self.total, self.done, self.log = total, done, log
        self.tty = sys.stderr.isatty()
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
        if self.tty:
            self.bar.update(self.task, total=total, completed=step, info=info)
        else:
            self.log(f"step {step}/{total} {info}" + (f" skipped: {m['skipped']}" if "skipped" in m else ""))

    def __exit__(self, *exc):
        if self.tty:
            self.bar.stop()
        return False

"""The policy update: ``inner_epochs`` passes of the clipped objective over a step's samples.

Three batch sizes, each with one job:

* the **step's batch** — ``prompts_per_step × group_size`` samples, shared among the ranks;
* the **minibatch** (``minibatch_size``, 0 = the whole batch) — the samples of one optimizer
  step, counted over all ranks;
* the **micro-batch** (``micro_batch_size``, 0 = the minibatch) — the samples of one forward and
  backward pass on one rank; gradients accumulate over micro-batches.

A micro-batch's loss (a mean over its samples) is weighted by its share of the minibatch, so
the accumulated gradient is the minibatch-mean gradient whatever the micro-batch size or the
number of ranks: gradient accumulation changes memory, not the update. Between micro-batches
the gradient sync is skipped (``no_sync``) and happens once per optimizer step. The minibatch
order is global (epoch 0 keeps sampling order, so a full-batch first pass recomputes exactly
the sampled log-probs; later epochs shuffle with a generator every rank seeds alike), and every
rank takes its own members of each minibatch.

Every rank runs the same number of synced backward passes whatever it holds — a rank without a
member in a minibatch contributes a zero-weighted pass — and skips are decided collectively.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, NamedTuple

import torch

from cast_core.conditioning import select_rows
from cast_core.distributed import Distributed
from cast_core.sde import sde_step
from cast_core.seeding import generator_for
from cast_core.sharding import full_tensor, gradients_unsynced, local
from cast_core.types import ObjectiveTerms, PassBatch, Rollout

__all__ = ["PolicyUpdate", "UpdateResult"]

#: sample-weighted means logged for every objective; an objective's other diagnostics are added
_MEAN_KEYS = ("loss", "kl")
#: extremes over the passes, when an objective reports them
_MIN_KEYS, _MAX_KEYS = ("ratio_min",), ("ratio_max",)


class UpdateResult(NamedTuple):
    """An update's metrics and its skipped minibatches (the trainer counts those)."""

    metrics: dict
    skipped: int


class PolicyUpdate:
    def __init__(
        self,
        config: Any,
        policy: Any,
        params: list[torch.nn.Parameter],
        optimizer: torch.optim.Optimizer,
        dist: Distributed,
        *,
        module: torch.nn.Module | None,
        autocast: Callable[[], Any],
        image_size: tuple[int, int] | None,
        log: Callable[[str], None],
        ema: list | None,
        sharded: bool = False,
        objective: Any = None,
    ):
        self.config, self.policy, self.params, self.optimizer = config, policy, params, optimizer
        self.dist, self.module, self.autocast, self.image_size = dist, module, autocast, image_size
        self.log, self.ema = log, ema
        if objective is None:
            from cast_core.objectives.sde_clipped import SDEClipped

            objective = SDEClipped()
        self.objective = objective
        # DDP and FSDP2 average gradients over ranks; the explicit path sums them
        self.fsdp = sharded and module is not None and dist.active
        self.module_syncs = self.fsdp or (module is not None and dist.active and hasattr(module, "no_sync"))
        self.optimizer_steps = 0  # gradient syncs so far (a benchmark counts their bytes)

    # -- what an objective computes with (cast_core.protocols.Objective) -------------------------
    def velocity(self, latents, sigma, cond):
        """The current policy's velocity under the run's precision (with gradients)."""
        with self.autocast():
            return self.policy.velocity(latents, sigma, cond, image_size=self.image_size)

    def reference_velocity(self, latents, sigma, cond):
        """The adapter-free reference model's velocity (no gradients)."""
        with torch.no_grad(), self.policy.reference():
            return self.velocity(latents, sigma, cond)

    def sde_log_prob(self, latents, next_latents, sigma, sigma_next, cond, sigma_max):
        """The SDE step of a stored transition under the current policy. The velocity runs under
        the same autocast as sampling (``precision``), so that the first pass recomputes exactly
        the sampled log-probs; the SDE arithmetic stays in float32."""
        v = self.velocity(latents, sigma, cond)
        return sde_step(
            v,
            latents,
            sigma,
            sigma_next,
            self.config.eta,
            sigma_max=sigma_max,
            prev_sample=next_latents,
            noise_block=self.config.noise_block,
        )

    def _loss(self, batch: PassBatch) -> ObjectiveTerms:
        """One pass of the run's objective (a benchmark wraps this to measure a pass's memory)."""
        return self.objective.loss(self, batch)

    # -- the update -------------------------------------------------------------------------------
    def minibatches(self, kept_ids: list[tuple[int, int]], step: int) -> list[list[list[tuple[int, int]]]]:
        """Per epoch, the minibatches as lists of global sample ids (identical on every rank)."""
        cfg = self.config
        base = sorted(kept_ids)
        n = len(base)
        size = cfg.minibatch_size or n
        epochs = []
        for epoch in range(cfg.inner_epochs):
            order = base
            if epoch > 0:
                perm = torch.randperm(n, generator=generator_for(cfg.seed, step, "shuffle", epoch)).tolist()
                order = [base[i] for i in perm]
            epochs.append([order[i : i + size] for i in range(0, n, size)])
        return epochs

    def run(
        self,
        rollout: Rollout,
        rows: list[int],
        ids: list[tuple[int, int]],
        advantages: torch.Tensor,
        all_ids: list[tuple[int, int]],
        step: int,
    ) -> UpdateResult:
        """Train on this rank's ``rows`` of ``rollout`` (sample ``ids``, advantages ``[n, h·w]``);
        ``all_ids`` are the kept samples of every rank. Returns the update's metrics and how many
        minibatches were skipped for a non-finite loss or gradient (identical on every rank)."""
        cfg = self.config
        row_of = dict(zip(ids, rows))
        adv_of = dict(zip(ids, range(len(ids))))
        T = self.objective.passes(rollout)
        sums: dict[str, float] = {}
        extremes: dict[str, float] = {}
        weight_total, grad_norms, skipped = 0.0, [], 0
        for epoch, epoch_batches in enumerate(self.minibatches(all_ids, step)):
            for members in epoch_batches:
                mine = [s for s in members if s in row_of]
                micro = cfg.micro_batch_size or max(len(mine), 1)
                chunks = [mine[i : i + micro] for i in range(0, len(mine), micro)] or [[]]
                self.optimizer.zero_grad(set_to_none=True)
                finite = True
                passes = [(c, t) for c in chunks for t in range(T)]
                for i, (chunk, t) in enumerate(passes):
                    last = i == len(passes) - 1
                    with self._no_sync(not last):
                        ok, stats = self._accumulate(
                            rollout, chunk, t, row_of, adv_of, advantages, len(members), T, epoch, step
                        )
                    finite &= ok
                    if stats:
                        w = stats.pop("weight")
                        for k, v in stats.items():
                            if k in _MIN_KEYS:
                                extremes[k] = min(extremes.get(k, float("inf")), v)
                            elif k in _MAX_KEYS:
                                extremes[k] = max(extremes.get(k, float("-inf")), v)
                            else:
                                sums[k] = sums.get(k, 0.0) + v * w
                        weight_total += w
                self.optimizer_steps += 1
                if not self.module_syncs:
                    self.dist.sum_gradients(self.params)
                grads_ok = all(p.grad is None or bool(torch.isfinite(local(p.grad)).all()) for p in self.params)
                if not self.dist.all_true(finite and grads_ok):
                    self.optimizer.zero_grad(set_to_none=True)
                    skipped += 1
                    if self.dist.is_main:
                        self.log(f"step {step}: non-finite loss or gradient; update skipped")
                    continue
                if cfg.max_grad_norm > 0:
                    norm = torch.nn.utils.clip_grad_norm_(self.params, cfg.max_grad_norm)
                    grad_norms.append(float(full_tensor(norm)))  # sharded gradients: a collective
                self.optimizer.step()
                if self.ema is not None:
                    with torch.no_grad():
                        for e, p in zip(self.ema, self.params):
                            e.lerp_(p.detach(), 1.0 - cfg.ema)
        return UpdateResult(self._metrics(sums, weight_total, extremes, grad_norms), skipped)

    def _no_sync(self, skip: bool):
        if skip and self.fsdp:
            return gradients_unsynced(self.module)
        if skip and self.module_syncs:
            return self.dist.accelerator.no_sync(self.module)
        return contextlib.nullcontext()

    def _accumulate(
        self,
        rollout: Rollout,
        chunk: list,
        t: int,
        row_of: dict,
        adv_of: dict,
        advantages: torch.Tensor,
        minibatch: int,
        T: int,
        epoch: int = 0,
        step: int = 0,
    ) -> tuple[bool, dict | None]:
        """Forward and backward of one micro-batch at window step ``t``, weighted by its share of
        the minibatch. An empty chunk (a rank without members here) runs a zero-weighted pass
        so that the gradient sync still happens on every rank."""
        if chunk:
            rows = torch.tensor([row_of[s] for s in chunk])
            adv = advantages[[adv_of[s] for s in chunk]]
            weight, ids = len(chunk) / minibatch, list(chunk)
        else:
            if not self.dist.active:
                return True, None
            rows, adv, weight, ids = (
                torch.tensor([0]),
                advantages.new_zeros(1, advantages.shape[1] if advantages.ndim == 2 else 1),
                0.0,
                [rollout.sample_ids[0] if rollout.sample_ids else (0, 0)],
            )
        cond = select_rows(rollout.conditioning, rows)
        device = (rollout.log_probs if rollout.log_probs is not None else rollout.final_latents).device
        batch = PassBatch(rollout, rows, ids, adv.to(device), cond, t, epoch, step)
        terms = self._loss(batch)
        loss, kl, diag = terms.loss, terms.kl, terms.diagnostics
        total = (loss + self.config.beta * kl) * (weight / T)
        if self.module_syncs:
            total = total * self.dist.world  # DDP averages over ranks; the weights already sum to 1
        finite = bool(torch.isfinite(total))
        if not chunk:
            total = total * 0.0
        if self.dist.accelerator is not None:
            self.dist.accelerator.backward(total)
        else:
            total.backward()
        if not chunk:
            return True, None
        stats = {"loss": float(loss.detach()), "kl": float(kl.detach()), "weight": weight / T, **diag}
        return finite, stats

    def _metrics(self, sums: dict, weight: float, extremes: dict, grad_norms: list) -> dict:
        """Weighted means over every rank's passes (so they equal a single process's)."""
        parts = self.dist.gather_objects((sums, weight, extremes))
        total = sum(w for _, w, _ in parts)
        keys = list(_MEAN_KEYS) + sorted({k for s, _, _ in parts for k in s} - set(_MEAN_KEYS))
        out = {k: (sum(s.get(k, 0.0) for s, _, _ in parts) / total if total else float("nan")) for k in keys}
        for k in _MIN_KEYS:
            if any(k in e for _, _, e in parts):
                out[k] = min(e.get(k, float("inf")) for _, _, e in parts)
        for k in _MAX_KEYS:
            if any(k in e for _, _, e in parts):
                out[k] = max(e.get(k, float("-inf")) for _, _, e in parts)
        out["grad_norm"] = sum(grad_norms) / len(grad_norms) if grad_norms else float("nan")
        return out

"""The policy update's paths that the trainer tests never reach: two ranks in one process (the
explicit gradient sum, zero-weighted passes of a rank without members, gathered metrics) against
a single process, the micro-batch weights under plain SGD (Adam hides a uniform scale), a
non-finite gradient under a finite loss, a skipped minibatch followed by a good one, and the
metrics' means over several epochs. Each test here was written against a surviving mutant of
``update.py`` (docs/testing.md, "Mutation testing")."""

from __future__ import annotations

import contextlib
import itertools
import threading

import pytest
import torch

from cast_core.conditioning import select_rows
from cast_core.distributed import Distributed
from cast_core.loss import flow_grpo_objective
from cast_core.trainer import Trainer
from cast_core.types import PassBatch
from cast_core.update import PolicyUpdate

from test_trainer import fake_config, quiet
from test_update_rules import perturbed

LR = 0.5
_DIRS = itertools.count()


def capture(tmp_path) -> dict:
    """One step's rollout, rows, ids, advantages and kept ids from a fake-policy trainer."""
    trainer = Trainer(fake_config(steps=1, sample_every=0), tmp_path / "capture", log=quiet)
    perturbed(trainer)
    box = {}

    def spy(rollout, scored):
        box.update(
            rollout=rollout,
            rows=list(scored.rows),
            ids=list(scored.ids),
            advantages=scored.advantages.clone(),
            all_ids=[(v.index, g) for v in scored.kept for g in range(trainer.config.group_size)],
        )
        return {}

    trainer.update = spy
    trainer.train_step()
    return box


def fresh(tmp_path, name: str, *, dist=None, trap=False, optimizer=None, ddp=False, **cfg) -> PolicyUpdate:
    """An updater on a policy with the captured trainer's weights (same seed, same perturbation),
    plain SGD unless told otherwise."""
    tr = Trainer(fake_config(steps=1, sample_every=0, **cfg), tmp_path / f"{name}-{next(_DIRS)}", log=quiet)
    perturbed(tr)
    policy = TrapPolicy(tr.policy) if trap else tr.policy
    params = list(tr.params) + ([policy.trap] if trap else [])
    module = None
    if ddp:  # the policy's module as DDP would wrap it (a no_sync member); the accelerator syncs
        module = tr.policy.field
        module.no_sync = contextlib.nullcontext
        dist.accelerator.attach(module, params)
    return PolicyUpdate(
        tr.config,
        policy,
        params,
        optimizer or torch.optim.SGD(params, lr=LR),
        dist or Distributed(),
        module=module,
        autocast=contextlib.nullcontext,
        image_size=tr.image_size,
        log=quiet,
        ema=None,
    )


def run(up: PolicyUpdate, box: dict, step: int = 0, advantages=None, rows=None, ids=None) -> dict:
    """The update's metrics, with its count of skipped minibatches as ``skipped``."""
    adv = box["advantages"] if advantages is None else advantages
    metrics, skipped = up.run(
        box["rollout"],
        box["rows"] if rows is None else rows,
        box["ids"] if ids is None else ids,
        adv,
        box["all_ids"],
        step,
    )
    return {**metrics, "skipped": skipped}


def flat(up: PolicyUpdate) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in up.params])


# --- two ranks in one process ---------------------------------------------------------------


class _Hub:
    def __init__(self, world: int):
        # a rank that skips a collective leaves the other waiting: a timeout, not a hang
        self.barrier, self.slots = threading.Barrier(world, timeout=60), [None] * world

    def exchange(self, rank: int, value):
        self.slots[rank] = value
        self.barrier.wait()
        out = list(self.slots)
        self.barrier.wait()
        return out


class DDPAccelerator:
    """accelerate under DDP as the update uses it: ``backward`` all-reduces (averages) the
    gradients over the ranks, except inside ``no_sync(module)``; counts the syncs."""

    device = "cpu"

    def __init__(self, rank: int, world: int, hub: _Hub):
        self.num_processes, self.process_index, self.hub = world, rank, hub
        self.syncing, self.syncs, self.module, self.params = True, 0, None, []

    def attach(self, module, params) -> None:
        self.module, self.params = module, params

    @contextlib.contextmanager
    def no_sync(self, module):
        assert module is self.module, "no_sync must be given the wrapped module"
        self.syncing = False
        try:
            yield
        finally:
            self.syncing = True

    def backward(self, loss) -> None:
        loss.backward()
        if self.syncing:
            self.syncs += 1
            mine = [p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p) for p in self.params]
            every = self.hub.exchange(self.process_index, mine)
            for i, p in enumerate(self.params):
                p.grad = sum(g[i] for g in every) / self.num_processes


class ThreadRank(Distributed):
    """One rank of a world of threads: the collectives as barrier exchanges, no accelerator,
    so the update takes its explicit gradient-sum path."""

    def __init__(self, rank: int, world: int, hub: _Hub, accelerator=None):
        super().__init__()
        self.rank, self.world, self.hub, self.accelerator = rank, world, hub, accelerator

    def _exchange(self, value):
        return self.hub.exchange(self.rank, value)

    def gather_objects(self, obj):
        return self._exchange(obj)

    def all_true(self, flag):
        return all(self._exchange(bool(flag)))

    def sum_gradients(self, params):
        params = list(params)
        mine = [p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p) for p in params]
        every = self._exchange(mine)
        for i, p in enumerate(params):
            p.grad = sum(g[i] for g in every)


@pytest.mark.parametrize("path", ["explicit", "ddp"])
@pytest.mark.parametrize("ratio_mode", ["position", "sample"])
def test_two_ranks_update_exactly_as_one_process(tmp_path, ratio_mode, path):
    """Explicit: the update sums gradients itself. DDP: the accelerator averages them in the
    last backward of each optimizer step, so the update scales its loss by the world size."""
    box = capture(tmp_path)
    cfg = dict(minibatch_size=4, inner_epochs=2, ratio_mode=ratio_mode, beta=0.1, micro_batch_size=1)
    single = fresh(tmp_path, "single", **cfg)
    expected_metrics = run(single, box, step=3)
    hub = _Hub(2)
    ddp = path == "ddp"
    ranks = [
        fresh(
            tmp_path, f"rank{r}", dist=ThreadRank(r, 2, hub, DDPAccelerator(r, 2, hub) if ddp else None), ddp=ddp, **cfg
        )
        for r in range(2)
    ]
    half = len(box["rows"]) // 2
    results, errors = [None, None], []

    def work(r):
        try:
            sl = slice(r * half, (r + 1) * half)
            results[r] = run(
                ranks[r], box, step=3, advantages=box["advantages"][sl], rows=box["rows"][sl], ids=box["ids"][sl]
            )
        except BaseException as err:  # surfaced below; a dead thread would hang the other at a barrier
            errors.append(err)
            hub.barrier.abort()

    threads = [threading.Thread(target=work, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    # epoch 0 in sampling order gives minibatches held by one rank alone: zero-weighted passes
    for up in ranks:
        torch.testing.assert_close(flat(up), flat(single), rtol=0, atol=2e-6)
        assert up.optimizer_steps == single.optimizer_steps == 8
        assert up.module_syncs == ddp
        if ddp:
            assert up.dist.accelerator.syncs == 8, "one gradient sync per optimizer step, not per pass"
    for m in results:
        assert m.keys() == expected_metrics.keys()
        for k, v in expected_metrics.items():
            assert m[k] == pytest.approx(v, rel=1e-5, abs=1e-7), k


# --- weights, under an optimizer that sees them --------------------------------------------


@pytest.mark.parametrize("micro", [0, 4])
def test_sgd_step_is_the_mean_loss_gradient(tmp_path, micro):
    """Adam is blind to a uniform scale of the gradient; SGD is not. One epoch, one minibatch:
    the step must be −lr × ∇(mean over window steps of the step objectives)."""
    box = capture(tmp_path)
    up = fresh(tmp_path, "u", micro_batch_size=micro)
    ref = fresh(tmp_path, "ref")
    rollout = box["rollout"]
    rows = torch.tensor(box["rows"])
    cond = select_rows(rollout.conditioning, rows)
    T = len(rollout.step_indices)
    ids = [rollout.sample_ids[int(r)] for r in rows] if rollout.sample_ids else [(0, int(r)) for r in rows]
    total = sum(ref._loss(PassBatch(rollout, rows, ids, box["advantages"], cond, t)).loss for t in range(T)) / T
    grads = torch.autograd.grad(total, ref.params)
    expected = torch.cat([(p.detach() - LR * g).reshape(-1) for p, g in zip(ref.params, grads)])
    run(up, box)
    torch.testing.assert_close(flat(up), expected, rtol=1e-5, atol=1e-7)
    assert up.optimizer_steps == 1


def test_backward_goes_through_the_accelerator(tmp_path):
    box = capture(tmp_path)
    calls = []

    class Accel:  # accelerate's single-process API as the update uses it
        num_processes, process_index, device = 1, 0, "cpu"

        def backward(self, loss):
            calls.append(float(loss.detach()))
            loss.backward()

    up = fresh(tmp_path, "u", dist=Distributed(Accel()))
    run(up, box)
    assert len(calls) == len(box["rollout"].step_indices), "one backward per window step, via accelerate"


# --- skipped updates ------------------------------------------------------------------------


class TrapPolicy:
    """The fake policy plus a parameter whose gradient is NaN while the loss stays finite
    (``where`` never selects the NaN branch, but its backward multiplies 0 by NaN)."""

    def __init__(self, inner):
        self.inner = inner
        self.trap = torch.nn.Parameter(torch.zeros(()))

    def velocity(self, latents, sigma, cond, image_size=None):
        v = self.inner.velocity(latents, sigma, cond, image_size=image_size)
        poison = torch.sqrt(self.trap - 1.0).expand_as(v)
        return torch.where(torch.zeros_like(v, dtype=torch.bool), poison, v)

    def reference(self):
        return self.inner.reference()


def test_a_non_finite_gradient_under_a_finite_loss_skips_the_update(tmp_path):
    box = capture(tmp_path)
    up = fresh(tmp_path, "u", trap=True)
    before = flat(up)
    m = run(up, box)
    assert m["loss"] == m["loss"], "the loss itself is finite"
    assert m["skipped"] == 1
    assert torch.equal(flat(up), before), "no parameter moved"


def test_a_skipped_minibatch_does_not_end_the_epoch(tmp_path):
    box = capture(tmp_path)
    up = fresh(tmp_path, "u", minibatch_size=8)
    first = set(sorted(box["all_ids"])[:8])  # epoch 0 runs in sampling order
    adv = box["advantages"].clone()
    for i, sid in enumerate(box["ids"]):
        if sid in first:
            adv[i] = float("nan")
    before = flat(up)
    assert run(up, box, advantages=adv)["skipped"] == 1
    after = flat(up)
    assert bool(torch.isfinite(after).all()) and not torch.equal(after, before), "the second minibatch stepped"


# --- metrics over several epochs and minibatches --------------------------------------------


def test_metrics_are_means_over_every_pass(tmp_path, monkeypatch):
    box = capture(tmp_path)
    up = fresh(tmp_path, "u", minibatch_size=8, inner_epochs=2, max_grad_norm=1e6)
    norms = []
    real_clip = torch.nn.utils.clip_grad_norm_

    def clip(params, limit, *a, **k):
        norm = real_clip(params, limit, *a, **k)
        norms.append(float(norm))
        return norm

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", clip)
    m = run(up, box)
    assert up.optimizer_steps == 4
    assert m["ratio_min"] < m["ratio_max"], "the second epoch's ratios are off 1"
    assert m["ratio_min"] <= m["ratio_mean"] <= m["ratio_max"], "a mean of ratios lies between them"
    assert len(norms) == 4 and m["grad_norm"] == pytest.approx(sum(norms) / 4, rel=1e-6)


def test_the_shuffle_follows_the_step_and_the_seed(tmp_path):
    box = capture(tmp_path)
    ids = box["all_ids"]

    def order(step, seed):
        up = fresh(tmp_path, f"s{step}-{seed}", minibatch_size=4, inner_epochs=2, seed=seed)
        return sum(up.minibatches(ids, step)[1], [])

    assert order(3, 0) == order(3, 0)
    assert order(3, 0) != order(4, 0), "another step, another shuffle"
    assert order(3, 0) != order(3, 1), "another seed, another shuffle"
    up = fresh(tmp_path, "spy", minibatch_size=4, inner_epochs=2)
    asked = []
    real = up.minibatches
    up.minibatches = lambda all_ids, step: asked.append(step) or real(all_ids, step)
    run(up, box, step=7)
    assert asked == [7], "run shuffles with its own step's stream"


# --- the configuration reaches the maths ----------------------------------------------------


def test_sample_ratio_mode_uses_the_configured_adv_clip(tmp_path):
    up = fresh(tmp_path, "u", ratio_mode="sample", adv_clip=0.5)
    gen = torch.Generator().manual_seed(0)
    lp, old = 0.01 * torch.randn(4, 6, 3, generator=gen), 0.01 * torch.randn(4, 6, generator=gen)
    adv = 3.0 * torch.randn(4, 6, generator=gen)
    loss, _ = up.objective.ratio_loss(up.config, lp, old, adv)
    want, _ = flow_grpo_objective(lp.mean(-1).mean(1), old.mean(1), adv.mean(1), up.config.clip_range, adv_clip=0.5)
    loose, _ = flow_grpo_objective(lp.mean(-1).mean(1), old.mean(1), adv.mean(1), up.config.clip_range, adv_clip=None)
    assert float(loss) == float(want) and float(loss) != float(loose)


def test_no_kl_is_computed_or_reported_at_beta_zero(tmp_path):
    box = capture(tmp_path)
    up = fresh(tmp_path, "u", beta=0.0)
    with_beta = fresh(tmp_path, "b", beta=0.1)
    assert run(up, box)["kl"] == 0.0
    assert run(with_beta, box)["kl"] > 0.0, "the perturbed adapter is away from the reference"


def test_the_policy_gets_the_run_image_size(tmp_path):
    box = capture(tmp_path)
    up = fresh(tmp_path, "u")
    up.image_size = tuple(up.policy.default_image_size)  # what a run with --image-size passes
    sizes = []
    real = up.policy.velocity

    def velocity(latents, sigma, cond, image_size=None):
        sizes.append(image_size)
        return real(latents, sigma, cond, image_size=image_size)

    up.policy.velocity = velocity
    run(up, box)
    assert sizes and set(sizes) == {up.image_size} and up.image_size is not None

"""The update's rules against computations written here from their definitions, not by calling
the code under test: the KL penalty (Flow-GRPO's scaled Gaussian KL against the adapter-free
field, float64), the EMA recursion at a decay that is not ½, gradient clipping to the limit, and
which samples each optimizer step sees when a step holds several minibatches."""

import math

import pytest
import torch

from cast_core.trainer import Trainer

from test_trainer import fake_config, quiet


def perturbed(trainer, scale: float = 0.05) -> None:
    """A non-zero adapter, so that the policy and its adapter-free reference differ."""
    with torch.no_grad():
        for i, p in enumerate(trainer.params):
            p.add_(scale * torch.randn(p.shape, generator=torch.Generator().manual_seed(100 + i)))


def captured_rollout(trainer) -> dict:
    box = {}
    real = trainer.update

    def spy(rollout, scored):
        box["rollout"], box["advantages"], box["ids"] = rollout, scored.advantages, scored.ids
        return real(rollout, scored)

    trainer.update = spy
    return box


def independent_kl(policy, rollout, eta: float) -> float:
    """Mean over window steps, samples and elements of ``(μθ − μref)² / (2·std_dev_t²)``: the
    Gaussian KL of the two SDE steps, ``Δμ²/(2·s²)`` with ``s = std_dev_t·sqrt(−dt)``, times
    ``−dt`` (Flow-GRPO's convention). The reference field is built from the frozen weights
    alone — no call to ``reference()`` — and everything is float64."""
    f = policy.field
    W, P = f.weight.double(), f.position_bias.double()
    W_adapted = W + f.lora_B.detach().double() @ f.lora_A.detach().double()
    P_adapted = P + f.position_delta.detach().double()
    sig = rollout.sigmas.double()
    cond = rollout.conditioning.double()
    per_step = []
    for t, si in enumerate(rollout.step_indices):
        s, s_next = sig[si], sig[si + 1]
        dt = s_next - s
        x = rollout.latents[:, t].double()
        std_dev_t = eta * math.sqrt(float(s) / (1 - float(sig[1] if s == 1 else s)))

        def mean(weight, bias):
            v = x @ weight.T + (1 + s) * cond[:, None, :] + bias
            return x + (v + std_dev_t**2 / (2 * s) * (x + (1 - s) * v)) * dt

        diff = mean(W_adapted, P_adapted) - mean(W, P)
        step_std = std_dev_t * math.sqrt(float(-dt))
        gaussian_kl = diff**2 / (2 * step_std**2)  # per element, equal covariances
        per_step.append(float((gaussian_kl * -dt).mean()))
    return sum(per_step) / len(per_step)


@pytest.mark.parametrize("window_start", [0, 2])  # σ = 1 (the sigma_max guard) and an inner window
def test_kl_metric_is_the_scaled_gaussian_kl_to_the_adapter_free_field(tmp_path, window_start):
    trainer = Trainer(
        fake_config(beta=0.3, steps=1, sample_every=0, window_start=window_start), tmp_path / "r", log=quiet
    )
    perturbed(trainer)
    box = captured_rollout(trainer)
    expected = None

    real_run = trainer.updater.run

    def before_update(*a, **k):  # the KL is measured with the weights the update starts from
        nonlocal expected
        expected = independent_kl(trainer.policy, box["rollout"], trainer.config.eta)
        return real_run(*a, **k)

    trainer.updater.run = before_update
    m = trainer.train_step()
    assert expected > 1e-6
    assert m["kl"] == pytest.approx(expected, rel=1e-4)


def test_the_kl_penalty_pulls_the_adapter_back_to_the_reference(tmp_path):
    """Constant rewards give zero advantages, so only the KL term moves the weights: with
    β > 0 the adapter's distance to the reference (B·A and ΔP) must shrink, step after step."""
    trainer = Trainer(
        fake_config(scorer="constant", beta=1.0, steps=4, sample_every=0, lr=0.01, max_grad_norm=0.0),
        tmp_path / "r",
        log=quiet,
    )
    perturbed(trainer, 0.2)

    def distance():
        f = trainer.policy.field
        return float(((f.lora_B @ f.lora_A).norm() + f.position_delta.norm()).detach())

    kls, distances = [], [distance()]
    for _ in range(4):
        kls.append(trainer.train_step()["kl"])
        distances.append(distance())
    assert all(b < a for a, b in zip(distances, distances[1:])), distances
    assert all(b < a for a, b in zip(kls, kls[1:])), kls
    # and without the penalty, zero advantages leave the weights where they are
    still = Trainer(
        fake_config(scorer="constant", beta=0.0, steps=1, sample_every=0, lr=0.01), tmp_path / "s", log=quiet
    )
    before = [p.detach().clone() for p in still.params]
    still.train_step()
    assert all(torch.equal(b, p) for b, p in zip(before, still.params))


def test_ema_follows_its_recursion_at_decay_0_8(tmp_path):
    """``e ← d·e + (1−d)·p`` after every optimizer step, from ``e₀ = p₀``; at d = 0.8 a reversed
    weight (``(1−d)·e + d·p``) is far off."""
    d = 0.8
    trainer = Trainer(fake_config(ema=d, steps=3, sample_every=0, minibatch_size=8), tmp_path / "r", log=quiet)
    expected = [p.detach().clone().double() for p in trainer.params]
    real_step = trainer.optimizer.step
    steps = []

    def step(*a, **k):
        out = real_step(*a, **k)
        steps.append(1)
        for e, p in zip(expected, trainer.params):
            e.mul_(d).add_((1 - d) * p.detach().double())
        return out

    trainer.optimizer.step = step
    for _ in range(3):
        trainer.train_step()
    assert len(steps) == 6  # two minibatches of 8 in each 16-sample step
    for e, mine, p in zip(expected, trainer.ema, trainer.params):
        torch.testing.assert_close(mine.double(), e, atol=1e-7, rtol=1e-6)
        assert not torch.allclose(mine, p.detach(), atol=1e-6)  # the average lags the live weights


def test_clipping_brings_the_global_norm_to_the_limit(tmp_path):
    limit = 1e-4
    trainer = Trainer(fake_config(max_grad_norm=limit, steps=1, sample_every=0), tmp_path / "r", log=quiet)
    perturbed(trainer)
    norms = []
    real_step = trainer.optimizer.step

    def step(*a, **k):
        norms.append(float(torch.sqrt(sum((p.grad.double() ** 2).sum() for p in trainer.params))))
        return real_step(*a, **k)

    trainer.optimizer.step = step
    m = trainer.train_step()
    assert m["grad_norm"] > 10 * limit  # the unclipped norm, as reported, was over the limit
    g = m["grad_norm"]
    assert norms == [pytest.approx(limit * g / (g + 1e-6), rel=1e-5)]  # torch's clip_coef has a 1e-6 guard
    # under the limit nothing changes
    loose = Trainer(fake_config(max_grad_norm=1e6, steps=1, sample_every=0), tmp_path / "l", log=quiet)
    perturbed(loose)
    norms.clear()
    real_loose = loose.optimizer.step
    loose.optimizer.step = lambda *a, **k: (
        norms.append(float(torch.sqrt(sum((p.grad.double() ** 2).sum() for p in loose.params)))) or real_loose(*a, **k)
    )
    m = loose.train_step()
    assert norms == [pytest.approx(m["grad_norm"], rel=1e-5)]


def test_each_optimizer_step_sees_the_configured_samples_once_per_epoch(tmp_path):
    """16 samples, minibatch 4, 3 epochs: 12 optimizer steps; each epoch covers every sample
    exactly once; epoch 0 is in sampling order, later epochs are shuffled and differ."""
    trainer = Trainer(fake_config(minibatch_size=4, inner_epochs=3, steps=1, sample_every=0), tmp_path / "r", log=quiet)
    seen = []
    real_accumulate = trainer.updater._accumulate

    def accumulate(rollout, chunk, t, *a, **k):
        if t == 0:
            seen.append(list(chunk))
        return real_accumulate(rollout, chunk, t, *a, **k)

    trainer.updater._accumulate = accumulate
    steps_before = trainer.updater.optimizer_steps
    trainer.train_step()
    assert trainer.updater.optimizer_steps - steps_before == 12
    assert all(len(c) == 4 for c in seen) and len(seen) == 12
    all_ids = sorted((p, g) for p in range(2) for g in range(8))
    epochs = [sum(seen[4 * e : 4 * e + 4], []) for e in range(3)]
    for order in epochs:
        assert sorted(order) == all_ids  # each sample once per epoch
    assert epochs[0] == all_ids  # sampling order first
    assert epochs[1] != all_ids and epochs[2] != all_ids and epochs[1] != epochs[2]

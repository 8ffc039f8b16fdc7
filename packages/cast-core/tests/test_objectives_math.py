"""DiffusionNFT's and AWM's losses against the papers' equations written out here, element by
element, in float64 — never by calling the code under test — plus the old policy's EMA schedule
and a tiny policy's gradient computed by hand."""

import math

import pytest
import torch

from cast_core.objectives.awm import awm_log_likelihood, awm_policy_loss, awm_timestep_indices
from cast_core.objectives.nft import nft_loss, optimality
from cast_core.objectives.old_policy import OldPolicy, decay_at

n, N, C = 3, 4, 2


def tensors(seed=0):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
    return r(n, N, C), r(n, N, C), r(n, N, C), r(n, N, C), torch.tensor([0.9, 0.5, 0.2], dtype=torch.float64)


def nft_by_hand(v, v_old, x_t, x0, sigma, adv, beta, c, per_position):
    """DiffusionNFT, eq. by eq.: r = clip(clip(A,±c)/c/2 + ½, 0, 1); v+ = βv + (1−β)v_old;
    v− = (1+β)v_old − βv; x̂0± = x_t − σv±; w± = mean|x̂0± − x0| (per sample, floored 1e-5);
    ℓ± = (x̂0± − x0)²/w±, averaged per position (or per sample); L = c·mean[rℓ+/β + (1−r)ℓ−/β]."""
    total, count = 0.0, 0
    for i in range(v.shape[0]):
        s = float(sigma[i])
        xp = [
            [
                float(x_t[i, j, k]) - s * (beta * float(v[i, j, k]) + (1 - beta) * float(v_old[i, j, k]))
                for k in range(C)
            ]
            for j in range(N)
        ]
        xn = [
            [
                float(x_t[i, j, k]) - s * ((1 + beta) * float(v_old[i, j, k]) - beta * float(v[i, j, k]))
                for k in range(C)
            ]
            for j in range(N)
        ]
        tgt = [[float(x0[i, j, k]) for k in range(C)] for j in range(N)]
        wp = max(sum(abs(xp[j][k] - tgt[j][k]) for j in range(N) for k in range(C)) / (N * C), 1e-5)
        wn = max(sum(abs(xn[j][k] - tgt[j][k]) for j in range(N) for k in range(C)) / (N * C), 1e-5)
        for j in range(N):
            a = float(adv[i, j]) if per_position else float(adv[i])
            r = min(max(min(max(a, -c), c) / c / 2 + 0.5, 0.0), 1.0)
            lp = sum((xp[j][k] - tgt[j][k]) ** 2 for k in range(C)) / C / wp
            ln = sum((xn[j][k] - tgt[j][k]) ** 2 for k in range(C)) / C / wn
            total += c * (r * lp / beta + (1 - r) * ln / beta)
            count += 1
    return total / count


@pytest.mark.parametrize("beta", [1.0, 0.1, 2.5])
def test_nft_loss_scalar_credit_equals_the_papers_equations(beta):
    v, v_old, x_t, x0, sigma = tensors()
    adv = torch.tensor([1.3, -7.0, 0.2], dtype=torch.float64)  # one clipped at -c
    loss, _ = nft_loss(v, v_old, x_t, x0, sigma, adv, beta=beta, adv_clip=5.0)
    assert float(loss) == pytest.approx(nft_by_hand(v, v_old, x_t, x0, sigma, adv, beta, 5.0, False), rel=1e-12)


def test_nft_loss_per_position_credit_equals_the_equations_per_position():
    v, v_old, x_t, x0, sigma = tensors(1)
    adv = torch.randn(n, N, generator=torch.Generator().manual_seed(5), dtype=torch.float64) * 4
    loss, _ = nft_loss(v, v_old, x_t, x0, sigma, adv, beta=0.7, adv_clip=3.0)
    assert float(loss) == pytest.approx(nft_by_hand(v, v_old, x_t, x0, sigma, adv, 0.7, 3.0, True), rel=1e-12)


def test_nft_constant_map_is_the_scalar_loss():
    v, v_old, x_t, x0, sigma = tensors(2)
    adv = torch.tensor([0.4, -1.1, 2.0], dtype=torch.float64)
    scalar, _ = nft_loss(v, v_old, x_t, x0, sigma, adv, beta=1.0, adv_clip=5.0)
    mapped, _ = nft_loss(v, v_old, x_t, x0, sigma, adv[:, None].expand(n, N), beta=1.0, adv_clip=5.0)
    assert float(mapped) == pytest.approx(float(scalar), rel=1e-13)


def test_optimality_maps_the_clipped_advantage_to_zero_one():
    a = torch.tensor([-9.0, -5.0, -2.5, 0.0, 2.5, 5.0, 9.0])
    assert optimality(a, 5.0).tolist() == pytest.approx([0.0, 0.0, 0.25, 0.5, 0.75, 1.0, 1.0])


def test_nft_gradient_of_a_tiny_linear_policy_matches_a_hand_derivation():
    """v = a·x_t with one scalar parameter a; the adaptive weights are constants, so
    dL/da = c/β · mean_i[ r_i·2·mean((x̂0+ − x0)·(−σβx_t))/w+ + (1−r_i)·2·mean((x̂0− − x0)·(σβx_t))/w− ]."""
    _, v_old, x_t, x0, sigma = tensors(3)
    adv = torch.tensor([2.0, -1.0, 0.5], dtype=torch.float64)
    beta, c = 0.5, 5.0
    a = torch.tensor(0.3, dtype=torch.float64, requires_grad=True)
    loss, _ = nft_loss(a * x_t, v_old, x_t, x0, sigma, adv, beta=beta, adv_clip=c)
    loss.backward()
    grad = 0.0
    for i in range(n):
        s, r = float(sigma[i]), min(max(float(adv[i]) / c / 2 + 0.5, 0), 1)
        xt, vo, tgt = x_t[i], v_old[i], x0[i]
        ep = xt - s * (beta * 0.3 * xt + (1 - beta) * vo) - tgt
        en = xt - s * ((1 + beta) * vo - beta * 0.3 * xt) - tgt
        wp, wn = float(ep.abs().mean()), float(en.abs().mean())
        grad += (
            r * float((2 * ep * (-s * beta * xt)).mean()) / wp + (1 - r) * float((2 * en * (s * beta * xt)).mean()) / wn
        )
    grad *= c / beta / n
    assert float(a.grad) == pytest.approx(grad, rel=1e-10)


def test_old_policy_decay_schedule_is_return_decay():
    """DiffusionNFT's return_decay: type 1 = (flat 0, 0.001/step, cap 0.5); type 2 = (75, 0.0075, 0.999)."""
    assert [decay_at(s, flat=0, rate=0.001, cap=0.5) for s in (0, 1, 250, 500, 900)] == pytest.approx(
        [0.0, 0.001, 0.25, 0.5, 0.5]
    )
    assert [decay_at(s, flat=75, rate=0.0075, cap=0.999) for s in (10, 75, 100, 500)] == pytest.approx(
        [0.0, 0.0, 0.1875, 0.999]
    )


def test_old_policy_update_is_the_ema_and_swaps_back_exactly():
    p = torch.nn.Parameter(torch.tensor([1.0, 2.0], dtype=torch.float64))
    old = OldPolicy(flat=0, rate=0.1, cap=0.5)
    old.attach([p])
    with torch.no_grad():
        p.copy_(torch.tensor([3.0, -2.0], dtype=torch.float64))
    decay = old.update([p], optimizer_steps=3)  # decay 0.3: old = 0.3·[1, 2] + 0.7·[3, −2]
    assert decay == pytest.approx(0.3)
    assert old.values[0].tolist() == pytest.approx([0.3 * 1 + 0.7 * 3, 0.3 * 2 + 0.7 * -2])
    with old.active([p]):
        assert p.tolist() == pytest.approx([2.4, -0.8])
    assert p.tolist() == [3.0, -2.0]


# -- AWM -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("weighting", ["uniform", "t", "t2", "huber", "ghuber"])
def test_awm_log_likelihood_per_weighting(weighting):
    v, eps, x0, _, sigma = tensors(4)
    got = awm_log_likelihood(v, eps, x0, sigma, weighting=weighting, ghuber_power=0.25)
    for i in range(n):
        mse = sum(
            (float(v[i, j, k]) - (float(eps[i, j, k]) - float(x0[i, j, k]))) ** 2 for j in range(N) for k in range(C)
        ) / (N * C)
        s = float(sigma[i])
        want = {
            "uniform": -mse,
            "t": -mse * s,
            "t2": -mse * s * s,
            "huber": -(math.sqrt(mse + 1e-10) - 1e-5) * s,
            "ghuber": -((mse + 1e-10) ** 0.25 - 1e-10**0.25) * s / 0.25,
        }[weighting]
        assert float(got[i]) == pytest.approx(want, rel=1e-12)


def test_awm_gradient_is_minus_the_clipped_scaled_advantage_times_the_likelihood_gradient():
    """On-policy ρ = 1: ∇L = −mean_i Â_i·∇ℓ_i with Â = clip(A, ±c)/c·a_max; the loss value is −mean Â."""
    v0, eps, x0, _, sigma = tensors(6)
    adv = torch.tensor([7.0, -2.0, 1.0], dtype=torch.float64)
    v = v0.clone().requires_grad_(True)
    ll = awm_log_likelihood(v, eps, x0, sigma, weighting="uniform")
    loss, diag = awm_policy_loss(ll, adv, adv_clip=5.0, advantage_max=1.0, clip_range=1.0)
    loss.backward()
    a_hat = [1.0, -0.4, 0.2]
    assert float(loss.detach()) == pytest.approx(-sum(a_hat) / 3, rel=1e-12)
    for i in range(n):  # dℓ_i/dv = −2(v − (ε − x0))/(N·C); dL/dv_i = −Â_i/n · dℓ_i/dv
        want = -a_hat[i] / n * (-2 * (v0[i] - (eps[i] - x0[i])) / (N * C))
        assert torch.allclose(v.grad[i], want, rtol=1e-12, atol=0)
    assert diag["ratio_mean"] == 1.0


def test_awm_per_position_with_a_constant_map_has_the_per_sample_gradient_under_a_linear_weighting():
    v0, eps, x0, _, sigma = tensors(7)
    adv = torch.tensor([0.5, -1.5, 2.0], dtype=torch.float64)
    grads = []
    for per_position in (False, True):
        v = v0.clone().requires_grad_(True)
        ll = awm_log_likelihood(v, eps, x0, sigma, weighting="t", per_position=per_position)
        a = adv[:, None].expand(n, N) if per_position else adv
        awm_policy_loss(ll, a, 5.0, 1.0, 1.0)[0].backward()
        grads.append(v.grad)
    assert torch.allclose(grads[0], grads[1], rtol=1e-12, atol=1e-15)


def test_awm_timesteps_are_stratified_over_the_schedule_like_discrete_wo_init():
    """num_steps 10, fraction 0.9: linspace(1, 9, 7) = 1, 2.33, 3.67, 5, 6.33, 7.67, 9 → strata
    [1,2) [2,3) [3,5) [5,6) [6,7) [7,9)."""
    assert awm_timestep_indices(10, 6, 0.9, torch.zeros(6)) == [1, 2, 3, 5, 6, 7]
    assert awm_timestep_indices(10, 6, 0.9, torch.full((6,), 0.99)) == [1, 2, 4, 5, 6, 8]

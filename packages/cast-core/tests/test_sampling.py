"""The window sampler: pure ODE without a window, SDE bookkeeping inside one, reproducible."""

import pytest
import torch

from cast_core import Window
from cast_core.conditioning import select_rows
from cast_core.sampling import concat_rollouts, sample
from cast_core.sde import sde_step
from cast_core.testing import FakePolicy

PROMPTS = ["a red circle", "two blue squares", "a green triangle"]


def test_no_window_is_the_policys_own_euler_sampler():
    policy = FakePolicy(seed=2)
    out = sample(policy, PROMPTS, num_steps=5, generator=torch.Generator().manual_seed(0))
    x = policy.initial_noise(3, None, torch.Generator().manual_seed(0))
    cond = policy.encode(PROMPTS)
    s = policy.sigmas(5)
    for i in range(5):
        x = x + (s[i + 1] - s[i]) * policy.velocity(x, s[i], cond)
    assert torch.equal(out.final_latents, x)
    assert torch.equal(out.images, policy.decode(x))
    assert out.latents is None and out.log_probs is None and out.step_indices == []


def test_window_steps_are_recorded_and_replayable():
    policy = FakePolicy()
    w = Window(1, 2)
    out = sample(
        policy, PROMPTS, num_steps=5, window=w, eta=0.8, generator=torch.Generator().manual_seed(3), keep_x0=True
    )
    n, c = policy.initial_noise(1).shape[1:]
    assert out.latents.shape == (3, 2, n, c) and out.next_latents.shape == (3, 2, n, c)
    assert out.log_probs.shape == (3, 2, n) and out.log_probs.dtype == torch.float32
    assert out.x0.shape == (3, 5, n, c) and out.step_indices == [1, 2]
    for t, i in enumerate(out.step_indices):  # re-scoring a stored move gives its stored log-prob
        v = policy.velocity(out.latents[:, t], out.sigmas[i], out.conditioning)
        lp = sde_step(
            v,
            out.latents[:, t],
            out.sigmas[i],
            out.sigmas[i + 1],
            0.8,
            sigma_max=out.sigmas[1],
            prev_sample=out.next_latents[:, t],
        ).log_prob.mean(-1)
        assert torch.equal(lp, out.log_probs[:, t])
    again = sample(policy, PROMPTS, num_steps=5, window=w, eta=0.8, generator=torch.Generator().manual_seed(3))
    assert torch.equal(again.images, out.images)
    some = sample(
        policy, PROMPTS, num_steps=5, window=w, eta=0.8, generator=torch.Generator().manual_seed(3), keep_x0=(3, 1)
    )
    assert torch.equal(some.x0, out.x0[:, [1, 3]])  # only the asked-for steps, in step order
    assert torch.equal(some.images, out.images)


def test_steps_outside_the_window_are_exact_euler_steps():
    """η > 0 with a window in the middle (steps 1–2 of 5): step 0 and steps 3–4 are the ODE's
    Euler steps bit for bit, computed here by hand, while the window's steps are not."""
    policy = FakePolicy()
    cond = policy.encode(PROMPTS)
    noise = policy.initial_noise(len(PROMPTS), generator=torch.Generator().manual_seed(5))
    out = sample(
        policy,
        PROMPTS,
        num_steps=5,
        window=Window(1, 2),
        eta=0.9,
        initial_noise=noise,
        generator=torch.Generator().manual_seed(1),
    )
    sig = policy.sigmas(5)

    def euler(x, i):
        return x + (sig[i + 1] - sig[i]) * policy.velocity(x, sig[i], cond)

    with torch.no_grad():
        assert torch.equal(out.latents[:, 0], euler(noise, 0))  # before the window
        x = out.next_latents[:, -1]  # after the window's last step
        assert torch.equal(out.final_latents, euler(euler(x, 3), 4))
        for t, i in enumerate(out.step_indices):  # inside: the SDE moved off the Euler step
            assert (out.next_latents[:, t] - euler(out.latents[:, t], i)).abs().max() > 1e-3


def test_eta_zero_inside_the_window_is_the_ode():
    policy = FakePolicy()
    ode = sample(policy, PROMPTS, num_steps=4, generator=torch.Generator().manual_seed(1))
    zero = sample(
        policy, PROMPTS, num_steps=4, window=Window(0, 4), eta=0.0, generator=torch.Generator().manual_seed(1)
    )
    assert torch.equal(ode.final_latents, zero.final_latents)


def test_window_must_fit():
    with pytest.raises(ValueError, match="do not fit a schedule of 4 steps"):
        sample(FakePolicy(), PROMPTS, num_steps=4, window=Window(3, 2))


def test_chunked_rollouts_concatenate():
    policy = FakePolicy()
    gen = torch.Generator().manual_seed(0)
    parts = [
        sample(policy, PROMPTS[:2], num_steps=3, window=Window(0, 1), generator=gen),
        sample(policy, PROMPTS[2:], num_steps=3, window=Window(0, 1), generator=gen),
    ]
    whole = concat_rollouts(parts)
    assert whole.prompts == PROMPTS and whole.latents.shape[0] == 3 and whole.conditioning.shape[0] == 3
    assert torch.equal(select_rows(whole.conditioning, [2]), whole.conditioning[[2]])


def test_per_sample_generators_make_images_independent_of_the_batch():
    """With one generator per sample, a sample's image is the same alone, in a batch, or in
    another position (float tolerance: the batch size may change the matmul kernels)."""
    policy = FakePolicy()
    w = Window(1, 2)
    gens = lambda seeds: [torch.Generator().manual_seed(s) for s in seeds]  # noqa: E731
    batch = sample(policy, PROMPTS, num_steps=4, window=w, eta=0.8, generator=gens([10, 11, 12]))
    alone = sample(policy, PROMPTS[2:], num_steps=4, window=w, eta=0.8, generator=gens([12]))
    swapped = sample(policy, PROMPTS[::-1], num_steps=4, window=w, eta=0.8, generator=gens([12, 11, 10]))
    torch.testing.assert_close(alone.images[0], batch.images[2], atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(swapped.images.flip(0), batch.images, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(swapped.log_probs.flip(0), batch.log_probs, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="2 generators for 3 samples"):
        sample(policy, PROMPTS, num_steps=4, generator=gens([1, 2]))


def test_decode_in_chunks_is_decode():
    policy = FakePolicy()
    whole = sample(policy, PROMPTS, num_steps=3, generator=torch.Generator().manual_seed(0))
    chunked = sample(policy, PROMPTS, num_steps=3, generator=torch.Generator().manual_seed(0), decode_batch_size=2)
    assert torch.equal(whole.images, chunked.images)


def test_image_size_reaches_encode_velocity_and_decode():
    class Recording(FakePolicy):
        seen: list = []

        def encode(self, prompts, image_size=None):
            self.seen.append(("encode", image_size))
            return super().encode(prompts, image_size)

        def velocity(self, latents, sigma, cond, image_size=None):
            self.seen.append(("velocity", image_size))
            return super().velocity(latents, sigma, cond, image_size)

    policy = Recording(image_size=(8, 16))
    out = sample(policy, PROMPTS, num_steps=2, image_size=(8, 16), generator=torch.Generator().manual_seed(0))
    assert out.images.shape == (3, 3, 8, 16)
    assert set(policy.seen) == {("encode", (8, 16)), ("velocity", (8, 16))}

"""cast's sampler through each policy gives diffusers' own pipeline images: same components,
same seed, float32, batch of 2, several step counts and a non-square size."""

import pytest
import torch

from cast_core.sampling import sample
from cast_core.sde import check_schedule
from cast_core.types import Window
from conftest import NAMES, pipeline_kwargs, tiny_pipeline, tiny_policy

PROMPTS = ["a red circle", "two blue dogs left of a cat"]
TOLERANCE = 2e-5


def pipeline_images(pipe, name, prompts, steps, size, generator, **extra):
    kwargs = {**pipeline_kwargs(name, len(prompts)), **extra}
    return pipe(
        prompt=prompts,
        num_inference_steps=steps,
        height=size[0],
        width=size[1],
        generator=generator,
        output_type="pt",
        **kwargs,
    ).images


def max_diff(a, b):
    return float((a - b).abs().max())


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("steps,size", [(2, (32, 32)), (4, (32, 48)), (6, (48, 32))])
def test_ode_sampling_gives_the_pipeline_images(name, steps, size):
    pipe, policy = tiny_pipeline(name), tiny_policy(name)
    expected = pipeline_images(pipe, name, PROMPTS, steps, size, torch.Generator().manual_seed(7))
    got = sample(
        policy, PROMPTS, num_steps=steps, image_size=size, window=None, generator=torch.Generator().manual_seed(7)
    ).images
    assert got.shape == expected.shape == (2, 3, *size)
    assert max_diff(got, expected) <= TOLERANCE
    # the comparison can fail: another seed gives other images
    other = sample(policy, PROMPTS, num_steps=steps, image_size=size, generator=torch.Generator().manual_seed(8)).images
    assert max_diff(other, expected) > 1e-3


@pytest.mark.parametrize("name", NAMES)
def test_per_sample_generators_match_the_pipeline(name):
    """The trainer draws each sample's noise from its own generator; the pipeline does the
    same with a list of generators."""
    pipe, policy = tiny_pipeline(name), tiny_policy(name)
    expected = pipeline_images(pipe, name, PROMPTS, 3, (32, 32), [torch.Generator().manual_seed(s) for s in (1, 2)])
    got = sample(
        policy, PROMPTS, num_steps=3, image_size=(32, 32), generator=[torch.Generator().manual_seed(s) for s in (1, 2)]
    ).images
    assert max_diff(got, expected) <= TOLERANCE


def test_qwen_image_without_guidance_matches_the_unguided_pipeline():
    pipe, policy = tiny_pipeline("qwen-image"), tiny_policy("qwen-image", true_cfg_scale=1.0)
    expected = pipe(
        prompt=PROMPTS,
        num_inference_steps=3,
        height=32,
        width=32,
        output_type="pt",
        generator=torch.Generator().manual_seed(0),
    ).images
    got = sample(policy, PROMPTS, num_steps=3, image_size=(32, 32), generator=torch.Generator().manual_seed(0)).images
    assert max_diff(got, expected) <= TOLERANCE
    guided = sample(
        tiny_policy("qwen-image"), PROMPTS, num_steps=3, image_size=(32, 32), generator=torch.Generator().manual_seed(0)
    ).images
    assert max_diff(guided, expected) > 1e-3  # CFG really changes the images


@pytest.mark.parametrize("scale", [1.0, 2.5])
def test_flux2_klein_guidance_scale_matches_the_pipeline(scale):
    pipe, policy = tiny_pipeline("flux2-klein"), tiny_policy("flux2-klein", guidance_scale=scale)
    expected = pipe(
        prompt=PROMPTS,
        num_inference_steps=3,
        height=32,
        width=32,
        output_type="pt",
        guidance_scale=scale,
        generator=torch.Generator().manual_seed(0),
    ).images
    got = sample(policy, PROMPTS, num_steps=3, image_size=(32, 32), generator=torch.Generator().manual_seed(0)).images
    assert max_diff(got, expected) <= TOLERANCE


def test_flux2_guidance_is_the_distilled_embedding():
    pipe, policy = tiny_pipeline("flux2"), tiny_policy("flux2", guidance_scale=2.0)
    expected = pipe(
        prompt=PROMPTS,
        num_inference_steps=3,
        height=32,
        width=32,
        output_type="pt",
        guidance_scale=2.0,
        generator=torch.Generator().manual_seed(0),
    ).images
    got = sample(policy, PROMPTS, num_steps=3, image_size=(32, 32), generator=torch.Generator().manual_seed(0)).images
    assert max_diff(got, expected) <= TOLERANCE


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("steps", [2, 4, 28])
def test_sigmas_are_the_schedulers_and_start_at_exactly_one(name, steps):
    """The shifted schedule reaches 1 exactly (so the SDE's sigma = 1 guard applies, never
    a NaN from 1.0000001), and equals what the pipeline's scheduler holds after a call."""
    pipe, policy = tiny_pipeline(name), tiny_policy(name)
    sigmas = policy.sigmas(steps, (32, 48))
    check_schedule(sigmas, steps, name)
    assert float(sigmas[0]) == 1.0
    pipeline_images(pipe, name, PROMPTS[:1], steps, (32, 48), torch.Generator().manual_seed(0))
    assert torch.equal(sigmas, pipe.scheduler.sigmas.float())


def test_a_schedule_diffusers_cannot_compute_is_refused_by_name():
    with pytest.raises(ValueError, match="non-finite sigmas for 1 step"):
        tiny_policy("qwen-image").sigmas(1, (32, 32))
    assert float(tiny_policy("flux2").sigmas(1, (32, 32))[0]) == 1.0


def test_schedules_shift_with_the_image_size():
    policy = tiny_policy("qwen-image")
    assert not torch.equal(policy.sigmas(4, (32, 32)), policy.sigmas(4, (64, 64)))


@pytest.mark.parametrize("name", NAMES)
def test_sde_window_from_the_first_step_gives_finite_log_probs(name):
    policy = tiny_policy(name)
    rollout = sample(
        policy,
        PROMPTS,
        num_steps=4,
        image_size=(32, 32),
        window=Window(start=0, size=2),
        generator=torch.Generator().manual_seed(0),
    )
    assert rollout.log_probs.shape[:2] == (2, 2)
    assert torch.isfinite(rollout.log_probs).all() and torch.isfinite(rollout.images).all()

"""Speed switches a GPU user expects: ``compile`` (regional torch.compile of the transformer blocks)
and ``attention_backend`` (diffusers' attention dispatcher). They may change speed, never the
numbers beyond rounding: compiled velocities, SDE log-probs and adapter gradients equal eager ones."""

import shutil

import pytest
import torch

from cast_core.sde import sde_step
from conftest import tiny_policy

PROMPTS = ["a red cat", "two blue dogs"]


def _step(policy, x, cond):
    """The velocity, an SDE step's per-element log-prob and the adapter's gradient of its sum."""
    for p in policy.trainable_parameters():
        p.grad = None
    v = policy.velocity(x, torch.tensor(0.6), cond)
    step = sde_step(
        v,
        x,
        torch.tensor(0.6),
        torch.tensor(0.4),
        0.7,
        sigma_max=torch.tensor(0.9),
        generator=torch.Generator().manual_seed(1),
    )
    step.log_prob.sum().backward()
    grads = [p.grad.detach().clone() for p in policy.trainable_parameters()]
    return v.detach(), step.log_prob.detach(), grads


def _perturbed(policy):
    with torch.no_grad():  # a non-zero LoRA, so its gradient and its effect are both tested
        for i, p in enumerate(policy.trainable_parameters()):
            p.add_(0.02 * torch.randn(p.shape, generator=torch.Generator().manual_seed(i)))
    return policy


@pytest.mark.slow  # inductor compiles each kind of block for the CPU: ~45 s a model on two cores
@pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None, reason="no C++ compiler for inductor")
def test_compiled_blocks_give_the_eager_numbers():
    eager, compiled = _perturbed(tiny_policy("flux2")), _perturbed(tiny_policy("flux2", compile=True))
    assert compiled.compiled and not eager.compiled
    assert all(b._compiled_call_impl is not None for b in compiled.blocks())  # every block, not the model
    assert all(b._compiled_call_impl is None for b in eager.blocks())
    x = eager.initial_noise(len(PROMPTS), None, torch.Generator().manual_seed(0))
    cond = eager.encode(PROMPTS)
    v_e, lp_e, g_e = _step(eager, x, cond)
    v_c, lp_c, g_c = _step(compiled, x, cond)
    torch.testing.assert_close(v_c, v_e, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lp_c, lp_e, atol=1e-4, rtol=1e-5)
    for a, b in zip(g_c, g_e, strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
    with compiled.reference(), eager.reference():  # the adapter switched off, through the compiled blocks
        torch.testing.assert_close(
            compiled.velocity(x, torch.tensor(0.6), cond),
            eager.velocity(x, torch.tensor(0.6), cond),
            atol=1e-5,
            rtol=1e-5,
        )


def test_the_native_attention_backend_changes_nothing(name):
    plain, native = tiny_policy(name), tiny_policy(name, attention_backend="native")
    x = plain.initial_noise(len(PROMPTS), None, torch.Generator().manual_seed(0))
    cond = plain.encode(PROMPTS)
    with torch.no_grad():
        assert torch.equal(native.velocity(x, torch.tensor(0.5), cond), plain.velocity(x, torch.tensor(0.5), cond))


def test_an_unknown_attention_backend_is_one_line_naming_the_choices():
    with pytest.raises(
        ValueError, match=r"attention_backend='flahs' is not a diffusers backend; choose one of .*flash"
    ):
        tiny_policy("flux2", attention_backend="flahs")


def test_compile_on_a_policy_that_cannot_is_refused_naming_the_key(tmp_path):
    from cast_core.config import ConfigError, TrainConfig
    from cast_core.trainer import Trainer

    cfg = TrainConfig(
        policy="fake",
        scorer="left-brightness",
        decomposer="fake",
        projector="spatial",
        window=None,
        window_start=0,
        window_size=2,
        num_steps=4,
        prompts=PROMPTS,
        prompts_per_step=2,
        group_size=2,
        compile=True,
    )
    with pytest.raises(ConfigError, match="config key 'compile': policy 'fake' takes no compile argument"):
        Trainer(cfg, tmp_path / "run", log=lambda m: None)

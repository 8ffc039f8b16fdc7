"""The shapes policy behind cast's Policy protocol: conformance, exact ODE parity, LoRA I/O."""

import pytest
import torch

from cast_core.sampling import ode_images, sample
from cast_core.testing import PolicyConformance
from cast_shapes.policy import ShapesPolicy
from cast_shapes.sampling_ode import ode_sample


class TestShapesPolicy(PolicyConformance):
    @pytest.fixture(autouse=True)
    def _weights(self, random_weights):
        self.weights = random_weights

    def make_policy(self):
        return ShapesPolicy(self.weights)


def test_window_free_sampling_is_the_networks_own_ode_sampler(random_weights):
    policy = ShapesPolicy(random_weights, guidance=2.0)
    prompts = ["a red circle", "two blue squares left of a green triangle"]
    ours = sample(policy, prompts, num_steps=6, generator=torch.Generator().manual_seed(5)).images
    theirs = ode_sample(policy.net, prompts, num_steps=6, guidance=2.0, seed=5)
    assert torch.equal(ours, theirs)


def test_adapter_files_and_mismatch(random_weights, tmp_path):
    policy = ShapesPolicy(random_weights, lora_rank=4)
    policy.save_adapter(tmp_path / "a")
    assert (tmp_path / "a" / "pytorch_lora_weights.safetensors").is_file()
    assert (tmp_path / "a" / "adapter_config.json").is_file()
    with pytest.raises(ValueError, match="does not match this policy's LoRA"):
        ShapesPolicy(random_weights, lora_rank=2).load_adapter(tmp_path / "a")
    with pytest.raises(FileNotFoundError, match="expected a directory written by save_adapter"):
        policy.load_adapter(tmp_path / "missing")


def test_only_lora_is_trainable(random_weights):
    policy = ShapesPolicy(random_weights)
    trainable = {id(p) for p in policy.trainable_parameters()}
    assert trainable and all(not p.requires_grad for p in policy.net.parameters() if id(p) not in trainable)
    names = [n for n, p in policy.net.transformer.named_parameters() if id(p) in trainable]
    assert any("single_transformer_blocks.0.attn.to_qkv_mlp_proj" in n for n in names)
    assert any("transformer_blocks.0.attn.to_q" in n for n in names)


def test_wrong_image_size_is_refused(random_weights):
    with pytest.raises(ValueError, match="draws \\(32, 32\\) images"):
        ShapesPolicy(random_weights).latent_grid((64, 64))


def test_sampling_is_deterministic_with_a_seed(random_weights):
    policy = ShapesPolicy(random_weights)
    a = sample(policy, ["a red circle"] * 2, num_steps=4, generator=torch.Generator().manual_seed(7)).images
    b = sample(policy, ["a red circle"] * 2, num_steps=4, generator=torch.Generator().manual_seed(7)).images
    c = sample(policy, ["a red circle"] * 2, num_steps=4, generator=torch.Generator().manual_seed(8)).images
    assert torch.equal(a, b) and not torch.equal(a, c)


def _perturb_adapter(policy, seed=0):
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in policy.trainable_parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=gen))


def _sample_both(policy, prompts, seed=3):
    plain = sample(policy, prompts, num_steps=4, generator=torch.Generator().manual_seed(seed)).images
    fast = ode_images(policy, prompts, num_steps=4, generator=torch.Generator().manual_seed(seed))
    return plain, fast


def test_inference_is_exact_for_the_base_and_folds_a_trained_adapter(random_weights):
    policy = ShapesPolicy(random_weights)
    prompts = ["a red circle", "two blue squares left of a green triangle"]
    plain, fast = _sample_both(policy, prompts)
    assert torch.equal(plain, fast)  # a zero adapter is not folded: bit for bit the base
    _perturb_adapter(policy)
    frozen = {k: v.clone() for k, v in policy.net.state_dict().items()}
    plain, fast = _sample_both(policy, prompts)
    with policy.reference():
        base = sample(policy, prompts, num_steps=4, generator=torch.Generator().manual_seed(3)).images
    assert not torch.allclose(plain, base, atol=1e-3)  # the adapter matters...
    torch.testing.assert_close(fast, plain, atol=1e-5, rtol=0)  # ...and folding it changes rounding only
    after = policy.net.state_dict()
    assert all(torch.equal(frozen[k], after[k]) for k in frozen)  # weights restored bit for bit
    assert all(p.requires_grad for p in policy.trainable_parameters())


def test_inference_restores_the_weights_on_error_and_respects_reference(random_weights):
    policy = ShapesPolicy(random_weights)
    _perturb_adapter(policy, seed=1)
    frozen = {k: v.clone() for k, v in policy.net.state_dict().items()}
    with pytest.raises(RuntimeError, match="boom"):
        with policy.inference():
            raise RuntimeError("boom")
    after = policy.net.state_dict()
    assert all(torch.equal(frozen[k], after[k]) for k in frozen)
    x = torch.randn(2, policy.cfg.grid**2, policy.cfg.channels, generator=torch.Generator().manual_seed(0))
    cond = policy.encode(["a red circle"] * 2)
    with policy.reference():
        ref = policy.velocity(x, torch.tensor(0.5), cond)
        with policy.inference():  # the adapter is off already: nothing to fold, and it stays off
            inner = policy.velocity(x, torch.tensor(0.5), cond)
        again = policy.velocity(x, torch.tensor(0.5), cond)
    assert torch.equal(ref, inner) and torch.equal(ref, again)
    assert not torch.allclose(policy.velocity(x, torch.tensor(0.5), cond), ref, atol=1e-4)


def test_shipped_weights_draw_a_recognisable_red_circle():
    """The committed weights, through the registry, as a user gets them."""
    from cast_core import get_atom_scorer, get_policy
    from cast_shapes.grammar import graph_for_prompt

    policy = get_policy("shapes")
    scorer = get_atom_scorer("shapes-oracle")
    graph = graph_for_prompt("a red circle")
    images = sample(policy, ["a red circle"] * 8, num_steps=10, generator=torch.Generator().manual_seed(0)).images
    scores = torch.stack(scorer.score(images, [graph] * 8).scores)  # [8, 3]: object, count, colour
    assert float(scores.mean()) >= 0.8, scores

"""Each backbone policy against the Policy contract (cast_core's conformance kit) and the
options a real run depends on: sizes, adapter presets, bf16 base, checkpointing, offload."""

import pytest
import torch

from cast_backbones.lora import flux2_targets, qwen_image_targets
from cast_core.protocols import Policy
from cast_core.testing.conformance import PolicyConformance
from conftest import POLICIES, tiny_pipeline, tiny_policy


class _Tiny(PolicyConformance):
    policy_name = ""
    num_steps = 3

    @property
    def plan_architecture(self):  # the Plannable check traces the tiny model's plan, not 32B
        return f"{self.policy_name}-tiny"

    def make_policy(self):
        return tiny_policy(self.policy_name, lora_rank=4)


class TestFlux2Conformance(_Tiny):
    policy_name = "flux2"


class TestFlux2KleinConformance(_Tiny):
    policy_name = "flux2-klein"


class TestQwenImageConformance(_Tiny):
    policy_name = "qwen-image"


def test_registered_under_their_names():
    from cast_core.registry import get_policy

    for name, cls in POLICIES.items():
        with pytest.raises(ValueError, match="exactly one of path= .* and pipeline="):
            get_policy(name)
        assert isinstance(cls.from_pipeline(tiny_pipeline(name), image_size=(32, 32)), Policy)


def test_a_missing_directory_is_named():
    with pytest.raises(FileNotFoundError, match="no pipeline directory at /nowhere/flux"):
        POLICIES["flux2"].from_pretrained("/nowhere/flux")


def test_a_pipeline_of_another_family_is_refused():
    with pytest.raises(TypeError, match="Flux2Policy needs a Flux2Pipeline, got QwenImagePipeline"):
        POLICIES["flux2"].from_pipeline(tiny_pipeline("qwen-image"))


def test_image_sizes_must_fit_the_latent_grid():
    policy = tiny_policy("qwen-image")  # VAE x4, 2x2 packing: 8 pixels per token
    assert policy.latent_grid((32, 48)) == (4, 6)
    with pytest.raises(ValueError, match=r"image_size \(30, 32\) must be positive multiples of 8"):
        policy.latent_grid((30, 32))
    assert tiny_policy("flux2").latent_grid((32, 48)) == (16, 24)  # VAE x1 in the tiny model


def test_lora_presets_are_the_dreambooth_defaults():
    flux = tiny_pipeline("flux2").transformer
    assert flux2_targets(flux) == [
        "to_k",
        "to_q",
        "to_v",
        "to_out.0",
        "to_qkv_mlp_proj",
        "single_transformer_blocks.0.attn.to_out",
        "single_transformer_blocks.1.attn.to_out",
    ]
    assert qwen_image_targets(None) == ["to_k", "to_q", "to_v", "to_out.0"]
    policy = tiny_policy("flux2", lora_rank=4)
    wrapped = {n.rsplit(".lora_A", 1)[0] for n, _ in policy.transformer.named_parameters() if ".lora_A." in n}
    assert (
        "single_transformer_blocks.1.attn.to_out" in wrapped and "transformer_blocks.0.attn.add_q_proj" not in wrapped
    )
    assert all(p.dtype == torch.float32 for p in policy.trainable_parameters())


def test_lora_options_rank_alpha_and_targets():
    policy = tiny_policy("qwen-image", lora_rank=3, lora_alpha=12, lora_targets="to_q, to_k")
    config = policy.transformer.peft_config["default"]
    assert (config.r, config.lora_alpha, sorted(config.target_modules)) == (3, 12, ["to_k", "to_q"])
    assert {p.shape[0] for n, p in policy.transformer.named_parameters() if "lora_A" in n} == {3}
    assert tiny_policy("flux2", lora_rank=5).lora["alpha"] == 10.0  # alpha defaults to 2 x rank
    with pytest.raises(ValueError, match="lora_targets is empty"):
        tiny_policy("flux2", lora_targets="")


def test_bfloat16_base_keeps_a_float32_adapter():
    policy = tiny_policy("flux2", torch_dtype="bfloat16")
    frozen = [p for p in policy.transformer.parameters() if not p.requires_grad]
    assert {p.dtype for p in frozen} == {torch.bfloat16}
    assert {p.dtype for p in policy.trainable_parameters()} == {torch.float32}
    x = policy.initial_noise(2, None, torch.Generator().manual_seed(0))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        v = policy.velocity(x, torch.tensor(0.5), policy.encode(["a cat", "a dog"]))
    assert torch.isfinite(v).all()
    with pytest.raises(ValueError, match="torch_dtype 'bf16' is not a torch dtype"):
        tiny_policy("flux2", torch_dtype="bf16")


@pytest.mark.parametrize("name", list(POLICIES))
def test_gradient_checkpointing_gives_the_same_gradients(name):
    def grads(checkpointing):
        policy = tiny_policy(name, lora_rank=4)
        if checkpointing:
            policy.enable_gradient_checkpointing()
        policy.transformer.train()
        params = policy.trainable_parameters()
        torch.manual_seed(1)
        with torch.no_grad():
            for p in params:
                p.add_(0.1 * torch.randn_like(p))
        x = policy.initial_noise(2, None, torch.Generator().manual_seed(0))
        policy.velocity(x, torch.tensor(0.6), policy.encode(["a cat", "a red dog"])).square().mean().backward()
        return [p.grad.clone() for p in params]

    plain, checkpointed = grads(False), grads(True)
    assert any(float(g.abs().max()) > 0 for g in plain)
    for a, b in zip(plain, checkpointed):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("name", list(POLICIES))
def test_offloaded_text_encoder_still_encodes_and_keeps_the_negative(name, monkeypatch):
    policy = tiny_policy(name)
    before = policy.encode(["a cat"])
    moves = []
    real_to = policy.pipe.text_encoder.to
    monkeypatch.setattr(policy.pipe.text_encoder, "to", lambda *a, **k: moves.append((a, k)) or real_to(*a, **k))
    assert policy._negative is None
    policy.offload_text_encoder()
    assert moves == [(("cpu",), {})] and policy.text_encoder_device.type == "cpu"
    torch.testing.assert_close(policy.encode(["a cat"]).embeds, before.embeds)
    assert (policy._negative is not None) == policy.uses_negative  # encoded before the encoder left


@pytest.mark.parametrize("name", list(POLICIES))
def test_bfloat16_noise_is_the_bfloat16_pipelines(name):
    """A bf16 pipeline draws its noise in bf16 — other numbers than a float32 draw — so the
    policy draws in the text encoder's dtype too (then keeps float32 latents)."""
    pipe = tiny_pipeline(name).to(torch.bfloat16)
    policy = POLICIES[name].from_pipeline(tiny_pipeline(name), torch_dtype="bfloat16", image_size=(32, 32))
    h, w = policy.latent_grid()
    if name == "qwen-image":
        expected = pipe.prepare_latents(2, 4, 32, 32, torch.bfloat16, "cpu", torch.Generator().manual_seed(0))
    else:
        expected, _ = pipe.prepare_latents(2, 1, 32, 32, torch.bfloat16, "cpu", torch.Generator().manual_seed(0))
    got = policy.initial_noise(2, None, torch.Generator().manual_seed(0))
    assert got.dtype == torch.float32 and torch.equal(got, expected.float())
    f32 = tiny_policy(name).initial_noise(2, None, torch.Generator().manual_seed(0))
    assert not torch.equal(f32, got)


def test_identity_names_what_changes_the_trajectories(tmp_path):
    tiny_pipeline("flux2-klein").save_pretrained(tmp_path)
    a = POLICIES["flux2-klein"].from_pretrained(tmp_path, image_size=(32, 32))
    b = POLICIES["flux2-klein"].from_pretrained(tmp_path, image_size=(32, 32), guidance_scale=1.0)
    assert a.identity.startswith(f"flux2-klein:{tmp_path.resolve()}:") and a.identity != b.identity
    assert tiny_policy("flux2").identity is None  # built in memory: cast_windows falls back to class + options


class _OneProcess:
    device = torch.device("cpu")

    def prepare(self, module):
        return module


def test_prepare_moves_and_wraps_the_transformer():
    policy = tiny_policy("flux2")
    assert policy.prepare(_OneProcess()) is policy.transformer
    with pytest.raises(ValueError, match="unknown sharding 'zero3'"):
        policy.prepare(_OneProcess(), sharding="zero3")


def test_reference_is_the_adapter_free_pipeline_transformer():
    """reference() really is the base model: the velocity equals the untouched pipeline's
    transformer on the same inputs, while the trained adapter is on outside it."""
    policy = tiny_policy("flux2", lora_rank=4)
    with torch.no_grad():
        for p in policy.trainable_parameters():
            p.add_(0.5)
    base = tiny_pipeline("flux2").transformer
    x = policy.initial_noise(1, None, torch.Generator().manual_seed(0))
    cond = policy.encode(["a cat"])
    h, w = policy.latent_grid()
    kwargs = dict(
        hidden_states=x,
        timestep=torch.tensor([0.5]),
        guidance=torch.tensor([4.0]),
        encoder_hidden_states=cond.embeds,
        txt_ids=torch.cartesian_prod(*(torch.arange(n) for n in (1, 1, 1, cond.embeds.shape[1])))[None],
        img_ids=policy.image_ids(h, w)[None],
        return_dict=False,
    )
    with torch.no_grad():
        expected = base(**kwargs)[0]
        with policy.reference():
            ref = policy.velocity(x, torch.tensor(0.5), cond)
        tuned = policy.velocity(x, torch.tensor(0.5), cond)
    torch.testing.assert_close(ref, expected, atol=1e-6, rtol=1e-6)
    assert float((tuned - expected).abs().max()) > 1e-3


def test_cuda_means_this_processs_gpu(monkeypatch):
    from cast_backbones.base import resolve_device

    monkeypatch.delenv("LOCAL_RANK", raising=False)
    assert resolve_device("cuda") == torch.device("cuda")
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert resolve_device("cuda") == torch.device("cuda", 3)
    assert resolve_device("cuda:1") == torch.device("cuda", 1) and resolve_device("cpu") == torch.device("cpu")


def test_the_text_encoder_has_its_own_device():
    policy = tiny_policy("flux2", text_encoder_device="meta")
    assert next(policy.pipe.text_encoder.parameters()).device.type == "meta"
    assert next(policy.transformer.parameters()).device.type == "cpu"
    policy.prepare(_OneProcess())
    assert next(policy.pipe.text_encoder.parameters()).device.type == "meta"  # prepare leaves it where it is


def test_a_typo_in_policy_kwargs_is_caught_through_the_options_chain():
    """The policies pass **options up to DiffusersPolicy; the trainer's check follows them."""
    from cast_core.config import ConfigError
    from cast_core.registry import check_factory_kwargs

    with pytest.raises(ConfigError, match="takes no argument 'lora_rnk'. Did you mean 'lora_rank'"):
        check_factory_kwargs("policy", "flux2", {"path": "x", "lora_rnk": 4}, "policy_kwargs")
    check_factory_kwargs("policy", "qwen-image", {"path": "x", "true_cfg_scale": 1.0, "lora_rank": 4}, "policy_kwargs")

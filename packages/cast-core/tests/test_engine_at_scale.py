"""What the large backbones need from the engine, pinned on the fake policy: micro-batches give
the full-batch gradient, a sample's image does not depend on how the batch is cut, prompts are
encoded once, ragged conditioning flows through training, non-square images, gradient
checkpointing, bf16 base weights with a float32 adapter, coarse judge heatmaps."""

import json

import pytest
import torch

from cast_core.conditioning import PromptEmbeds
from cast_core.config import ConfigError
from cast_core.projectors import SpatialProjector, resize_maps
from cast_core.testing import FakePolicy
from cast_core.testing.fakes import simple_graph
from cast_core.trainer import Trainer

from test_trainer import fake_config, metrics, quiet


def gradient_of_first_update(trainer) -> list[torch.Tensor]:
    """The accumulated gradient the first optimizer step of step 0 would apply."""
    grads = []
    real = trainer.optimizer.step

    def record(*a, **k):
        grads.append([p.grad.detach().clone() for p in trainer.params])
        return real(*a, **k)

    trainer.optimizer.step = record
    with torch.no_grad():  # a non-zero adapter, so that every parameter gets a gradient
        for i, p in enumerate(trainer.params):
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(i)))
    trainer.train_step()
    return grads[0]


@pytest.mark.parametrize("micro", [1, 3, 5])
def test_micro_batches_accumulate_the_full_batch_gradient(tmp_path, micro):
    """16 samples in micro-batches of 1, 3 (5 of 3 and one of 1) or 5: each micro-batch's mean
    loss weighs its share of the batch, so the sum is the full batch's gradient. (The SDE maths
    is float32 by contract, so this is float32 agreement, to rounding.)"""
    full = gradient_of_first_update(Trainer(fake_config(beta=0.1), tmp_path / "full", log=quiet))
    acc = gradient_of_first_update(
        Trainer(fake_config(beta=0.1, micro_batch_size=micro), tmp_path / "micro", log=quiet)
    )
    for a, b in zip(full, acc):
        assert float(a.abs().max()) > 0
        torch.testing.assert_close(b, a, atol=1e-7, rtol=1e-5)


def test_minibatches_step_the_optimizer_once_each(tmp_path):
    trainer = Trainer(fake_config(minibatch_size=4, micro_batch_size=2, inner_epochs=2), tmp_path / "r", log=quiet)
    steps = []
    real = trainer.optimizer.step
    trainer.optimizer.step = lambda *a, **k: steps.append(1) or real(*a, **k)
    trainer.train_step()
    assert len(steps) == 2 * 16 // 4  # two epochs of four minibatches
    epochs = trainer.updater.minibatches([(p, g) for p in range(2) for g in range(8)], step=0)
    assert [len(b) for e in epochs for b in e] == [4] * 8
    assert epochs[0][0] == [(0, 0), (0, 1), (0, 2), (0, 3)]  # epoch 0 keeps sampling order
    second = [s for b in epochs[1] for s in b]
    assert sorted(second) == sorted(s for b in epochs[0] for s in b) and second != sorted(second)  # each once, shuffled


def test_images_and_training_do_not_depend_on_sample_batch_size(tmp_path):
    """Per-sample noise: chunks of 4, of 2, or all at once draw the same images, and two
    training steps end at the same adapter (the old shared stream moved it by 1.2e-3)."""
    adapters, images = {}, {}
    for chunk in (0, 2, 4):
        trainer = Trainer(
            fake_config(sample_batch_size=chunk, steps=2, sample_every=0), tmp_path / f"c{chunk}", log=quiet
        )
        images[chunk] = trainer.rollout(["a red circle", "a blue square"], trainer.window_for(0, []), 0).images
        trainer.run()
        adapters[chunk] = [p.detach().clone() for p in trainer.params]
    for chunk in (2, 4):
        torch.testing.assert_close(images[chunk], images[0], atol=1e-6, rtol=1e-5)
        for a, b in zip(adapters[chunk], adapters[0]):
            torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_prompts_are_encoded_once_per_run(tmp_path):
    trainer = Trainer(fake_config(steps=4, sample_every=0), tmp_path / "r", log=quiet)
    calls = []
    real = trainer.policy.encode
    trainer.policy.encode = lambda prompts, image_size=None: calls.append(list(prompts)) or real(prompts, image_size)
    trainer.run()
    seen = [p for c in calls for p in c]
    assert len(seen) == len(set(seen)) <= 3  # each unique prompt once, never once per group member


def test_offloading_the_text_encoder_encodes_every_prompt_first(tmp_path):
    trainer = Trainer(fake_config(steps=2, offload_text_encoder=True, sample_every=0), tmp_path / "r", log=quiet)
    assert trainer.policy.text_encoder_loaded is False and len(trainer.prompt_cache) == 3
    trainer.run()
    assert len(metrics(tmp_path / "r")) == 2


class _EventPolicy(FakePolicy):
    """Records when it encodes, releases its text encoder and is prepared."""

    def __init__(self, events, **kw):
        super().__init__(**kw)
        self.events = events

    def encode(self, prompts, image_size=None):
        self.events.append(("encode", tuple(prompts)))
        return super().encode(prompts, image_size)

    def offload_text_encoder(self):
        self.events.append(("offload",))
        super().offload_text_encoder()

    def prepare(self, accelerator, sharding="accelerate"):
        self.events.append(("prepare",))
        return super().prepare(accelerator, sharding)


class _MeasuringSelector:
    """A measured (once per run) selector that samples calibration prompts of its own — one of
    them not a training prompt — and names them in ``prompts_for``, as clip-curvature does."""

    calibration = ["a calibration circle", "a red circle"]

    def __init__(self):
        self.seen_policies = []

    def prompts_for(self, policy, prompts):
        return list(self.calibration)

    def select(self, policy, prompts, num_steps):
        from cast_core.sampling import sample
        from cast_core.types import Window

        self.seen_policies.append(policy)
        sample(policy, self.calibration, num_steps=num_steps, generator=torch.Generator().manual_seed(0))
        return Window(1, 3)


def test_the_text_encoder_leaves_before_the_transformer_arrives_and_is_not_needed_again(tmp_path, monkeypatch):
    """FLUX.2-dev's encoder and transformer do not fit one 80 GB GPU together: every training
    prompt is encoded, the encoder released, and only then is the policy prepared; the window
    measured afterwards reads the cached prompts instead of encoding them again."""
    import cast_core.trainer as trainer_module

    events = []
    selector = _MeasuringSelector()
    monkeypatch.setattr(trainer_module, "get_policy", lambda name, **kw: _EventPolicy(events, **kw))
    monkeypatch.setattr(trainer_module, "get_window_selector", lambda name, **kw: selector)
    trainer = Trainer(
        fake_config(steps=1, offload_text_encoder=True, sample_every=0, window="measured"), tmp_path / "r", log=quiet
    )
    kinds = [e[0] for e in events]
    assert kinds == ["encode", "offload", "prepare"]
    assert set(events[0][1]) == {*trainer.prompts, "a calibration circle"}  # training + calibration prompts
    trainer.run()
    assert [e[0] for e in events[3:]] == []  # neither the window nor the step encoded anything
    assert selector.seen_policies == [trainer.policy]  # the policy itself (window caches key on it)
    assert "encode" not in vars(trainer.policy)  # its own encode is back
    assert json.loads((tmp_path / "r" / "window.json").read_text())["start"] == 1


class RaggedPolicy(FakePolicy):
    """Encodes a prompt as one token per word — ragged lengths, padded per batch with a mask,
    as Qwen-Image's text encoder does — and conditions on the masked mean of the tokens."""

    def encode(self, prompts, image_size=None):
        rows = [super(RaggedPolicy, self).encode(p.split(), image_size) for p in prompts]
        length = max(len(r) for r in rows)
        emb = torch.zeros(len(rows), length, self.channels)
        mask = torch.zeros(len(rows), length, dtype=torch.bool)
        for i, r in enumerate(rows):
            emb[i, : len(r)], mask[i, : len(r)] = r, True
        return PromptEmbeds(emb, mask, pooled=None)

    def velocity(self, latents, sigma, cond, image_size=None):
        m = cond.mask.float()[..., None]
        text = (cond.embeds * m).sum(1) / m.sum(1)
        return super().velocity(latents, sigma, text, image_size)


def test_ragged_conditioning_flows_through_sampling_and_training(tmp_path, monkeypatch):
    import cast_core.trainer as trainer_module

    monkeypatch.setattr(trainer_module, "get_policy", lambda name, **kw: RaggedPolicy(**kw))
    run = tmp_path / "r"
    Trainer(fake_config(steps=3, sample_batch_size=3, micro_batch_size=5, sample_every=0), run, log=quiet).run()
    m = metrics(run)
    assert len(m) == 3 and all(r["ratio_min"] == 1.0 and r["ratio_max"] == 1.0 for r in m)  # on-policy through select


def test_non_square_images_train(tmp_path):
    run = tmp_path / "r"
    cfg = fake_config(steps=2, sample_every=1, image_size=[8, 16], policy_kwargs={"image_size": [8, 16]})
    trainer = Trainer(cfg, run, log=quiet)
    assert trainer.latent_grid == (2, 4)
    trainer.run()
    assert len(metrics(run)) == 2 and (run / "samples" / "step-00002.png").is_file()


def test_gradient_checkpointing_changes_memory_not_the_update(tmp_path):
    plain = Trainer(fake_config(steps=2, sample_every=0), tmp_path / "a", log=quiet)
    ckpt = Trainer(fake_config(steps=2, sample_every=0, gradient_checkpointing=True), tmp_path / "b", log=quiet)
    assert ckpt.policy.field.checkpointing and not plain.policy.field.checkpointing
    plain.run()
    ckpt.run()
    for a, b in zip(plain.params, ckpt.params):
        torch.testing.assert_close(a, b, atol=1e-7, rtol=1e-6)


def test_bf16_base_weights_keep_a_float32_adapter_and_stay_on_policy(tmp_path):
    run = tmp_path / "r"
    trainer = Trainer(fake_config(steps=2, precision="bf16", base_dtype="bfloat16", sample_every=0), run, log=quiet)
    assert trainer.policy.weight.dtype == torch.bfloat16
    assert all(p.dtype == torch.float32 for p in trainer.params)
    trainer.run()
    assert all(r["ratio_min"] == 1.0 and r["ratio_max"] == 1.0 for r in metrics(run))
    with pytest.raises(ConfigError, match='base_dtype = "bfloat16" needs precision = "bf16"'):
        fake_config(base_dtype="bfloat16").validate()


def test_a_policy_without_the_optional_members_gets_a_clear_error(tmp_path, monkeypatch):
    import cast_core.trainer as trainer_module

    monkeypatch.setattr(
        trainer_module, "get_policy", lambda name, **kw: _without(FakePolicy(**kw), "enable_gradient_checkpointing")
    )
    with pytest.raises(ConfigError, match="does not support it"):
        Trainer(fake_config(gradient_checkpointing=True), tmp_path / "a", log=quiet)
    monkeypatch.setattr(
        trainer_module, "get_policy", lambda name, **kw: _without(FakePolicy(**kw), "offload_text_encoder")
    )
    with pytest.raises(ConfigError, match="has no offload_text_encoder"):
        Trainer(fake_config(offload_text_encoder=True), tmp_path / "b", log=quiet)


def test_fsdp2_sharding_errors_say_what_to_do(tmp_path, monkeypatch):
    """(The sharded run itself is in test_distributed.py: it needs several processes.)"""
    import cast_core.trainer as trainer_module
    from cast_core.distributed import Distributed

    with pytest.raises(ConfigError, match="this run has one; launch it with --num-processes N"):
        Trainer(fake_config(sharding="fsdp2"), tmp_path / "a", log=quiet)

    class Several(Distributed):  # what the trainer sees under a launcher, without starting one
        active = True

    monkeypatch.setattr(trainer_module, "Distributed", Several)

    class Unshardable(FakePolicy):
        def prepare(self, accelerator):
            return super().prepare(accelerator)

    monkeypatch.setattr(trainer_module, "get_policy", lambda name, **kw: Unshardable(**kw))
    with pytest.raises(ConfigError, match='cannot shard itself .* use sharding = "accelerate"'):
        Trainer(fake_config(sharding="fsdp2"), tmp_path / "b", log=quiet)


def _without(policy, name):
    """The policy, seen through a proxy that lacks ``name``."""

    class Proxy:
        def __getattr__(self, attr):
            if attr == name:
                raise AttributeError(attr)
            return getattr(policy, attr)

    return Proxy()


def test_coarse_heatmaps_are_resized_bilinearly_and_fine_ones_by_area():
    coarse = torch.tensor([[[0.0, 1.0]]])  # 1 x 2 cells
    # bilinear, align_corners=False, 2 -> 4: sample points -0.25, 0.25, 0.75, 1.25 (clamped)
    assert resize_maps(coarse, (1, 4)).tolist() == [[[0.0, 0.25, 0.75, 1.0]]]
    fine = torch.arange(16.0).reshape(1, 4, 4)
    assert resize_maps(fine, (2, 2)).tolist() == [[[2.5, 4.5], [10.5, 12.5]]]  # means of 2x2 blocks
    graph = simple_graph(colour=None)
    scores = torch.tensor([[1.0, 1.0], [0.0, 0.0]])
    maps = torch.tensor([[0.0, 1.0]]).expand(2, 2, 1, 2)
    out = SpatialProjector(lam=0.0, adv_clip=10.0).project(scores, maps, graph, (1, 4))
    z = torch.tensor([1.0, -1.0])  # the two atoms' z-scores (soft gating keeps them)
    expected = (2 * z)[:, None, None] * torch.tensor([0.0, 0.25, 0.75, 1.0])
    torch.testing.assert_close(out.values, expected, atol=1e-5, rtol=1e-5)


def test_a_scorer_with_coarse_heatmaps_passes_the_conformance_kit():
    from cast_core.testing import LeftBrightnessScorer
    from cast_core.testing.conformance import AtomScorerConformance

    class Coarse(LeftBrightnessScorer):
        def score(self, images, graphs, heatmaps=False):
            out = super().score(images, graphs, heatmaps)
            if heatmaps:
                out.heatmaps = [torch.nn.functional.avg_pool2d(m[None], 4)[0] for m in out.heatmaps]
            return out

    kit = AtomScorerConformance()
    kit.make_scorer = Coarse
    kit.test_heatmaps_cover_the_image_and_are_non_negative()


def test_a_selector_without_prompts_for_reaches_the_policys_own_encode(tmp_path, monkeypatch):
    """A calibration prompt the trainer could not foresee is encoded by the policy itself (here
    the fake policy's clear 'offloaded' error), not by endless recursion through the cache."""
    import cast_core.trainer as trainer_module

    class Blind(_MeasuringSelector):
        prompts_for = None  # the trainer cannot know what it will sample

    monkeypatch.setattr(trainer_module, "get_window_selector", lambda name, **kw: Blind())
    trainer = Trainer(
        fake_config(steps=1, offload_text_encoder=True, sample_every=0, window="measured"), tmp_path / "r", log=quiet
    )
    with pytest.raises(RuntimeError, match="offloaded"):
        trainer.run()

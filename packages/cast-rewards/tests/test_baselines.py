"""The scalar baselines on tiny random CLIPs built in memory: pickscore equals transformers' own
CLIP logits / 26, clip-score equals open_clip's own cosine, each image's one score is given to
every atom, and the AtomScorer contract holds."""

import pytest
import torch

from cast_core.testing.conformance import AtomScorerConformance
from cast_rewards.baselines import PICKSCORE_SCALE, ClipScoreScorer, PickScoreScorer
from cast_rewards.template import TemplateDecomposer

PROMPTS = ["two red circles left of a blue square", "a green cat"]
GRAPHS = [TemplateDecomposer().decompose(p) for p in PROMPTS]


def tiny_pickscore():
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPProcessor

    from cast_rewards.tiny_vlm import tiny_qwen3_vl

    torch.manual_seed(0)
    config = CLIPConfig(
        text_config=dict(
            vocab_size=300,
            hidden_size=32,
            intermediate_size=37,
            num_hidden_layers=1,
            num_attention_heads=2,
            max_position_embeddings=77,
        ),
        vision_config=dict(
            hidden_size=32,
            intermediate_size=37,
            num_hidden_layers=1,
            num_attention_heads=2,
            image_size=32,
            patch_size=8,
        ),
        projection_dim=16,
        logit_scale_init_value=4.0,
    )
    model = CLIPModel(config).eval()
    tokenizer = tiny_qwen3_vl()[1].tokenizer  # an offline byte-level tokenizer (ids < 300)
    processor = CLIPProcessor(
        image_processor=CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}),
        tokenizer=tokenizer,
    )
    return model, processor


def tiny_open_clip():
    from open_clip.model import CLIP

    torch.manual_seed(0)
    model = CLIP(
        embed_dim=16,
        vision_cfg={"layers": 1, "width": 32, "head_width": 16, "patch_size": 8, "image_size": 32},
        text_cfg={"context_length": 8, "vocab_size": 64, "width": 32, "heads": 2, "layers": 1},
    )

    def tokenizer(texts):  # words hashed into the tiny vocabulary, padded to the context
        rows = [[1 + sum(map(ord, w)) % 62 for w in t.split()][:8] for t in texts]
        return torch.tensor([r + [0] * (8 - len(r)) for r in rows])

    return model, tokenizer


def images(seed=0, size=32):
    return torch.rand(len(PROMPTS), 3, size, size, generator=torch.Generator().manual_seed(seed))


def test_pickscore_is_transformers_clip_logit_over_26():
    model, processor = tiny_pickscore()
    imgs = images()
    judge = PickScoreScorer(model=model, processor=processor, device="cpu")
    got = judge.score(imgs, GRAPHS, heatmaps=True)
    from PIL import Image

    pil = [Image.fromarray((im.permute(1, 2, 0).numpy() * 255).round().astype("uint8")) for im in imgs]
    with torch.no_grad():
        out = model(
            **processor(images=pil, return_tensors="pt"), **processor(text=PROMPTS, padding=True, return_tensors="pt")
        )
    raw = out.logits_per_image.diag() / PICKSCORE_SCALE
    torch.testing.assert_close(judge.prompt_scores(imgs, PROMPTS, clamp=False), raw, atol=1e-6, rtol=0)
    expected = raw.clamp(0, 1)
    for i, g in enumerate(GRAPHS):
        assert got.scores[i].shape == (len(g.atoms),)
        torch.testing.assert_close(got.scores[i], expected[i].expand(len(g.atoms)), atol=1e-6, rtol=0)
        assert torch.equal(got.heatmaps[i], torch.ones(len(g.atoms), 32, 32))  # flat: no place to point at


def needs_clip_embedder():
    """clip-score composes with cast-windows' `clip` embedder through the registry; this package
    does not depend on cast-windows, so on its own these tests have nothing to run."""
    from cast_core.registry import list_components

    if "clip" not in list_components("embedder"):
        pytest.skip("cast-windows (the 'clip' embedder) is not installed")


def test_clip_score_is_open_clips_cosine():
    needs_clip_embedder()
    model, tokenizer = tiny_open_clip()
    imgs = images(1)
    judge = ClipScoreScorer(model=model, tokenizer=tokenizer, device="cpu")
    got = judge.score(imgs, GRAPHS)
    mean = torch.tensor((0.48145466, 0.4578275, 0.40821073)).view(1, 3, 1, 1)  # OpenAI CLIP's, open_clip's default
    std = torch.tensor((0.26862954, 0.26130258, 0.27577711)).view(1, 3, 1, 1)
    with torch.no_grad():
        image = torch.nn.functional.normalize(model.encode_image((imgs - mean) / std), dim=-1)
        text = torch.nn.functional.normalize(model.encode_text(tokenizer(PROMPTS)), dim=-1)
    cos = (image * text).sum(-1)
    torch.testing.assert_close(judge.prompt_scores(imgs, PROMPTS, clamp=False), cos, atol=1e-5, rtol=0)
    for i, g in enumerate(GRAPHS):
        torch.testing.assert_close(got.scores[i], cos.clamp(0, 1)[i].expand(len(g.atoms)), atol=1e-5, rtol=0)


def test_pickscore_needs_weights():
    with pytest.raises(ValueError, match="pickscore needs path="):
        PickScoreScorer(device="cpu")
    with pytest.raises(FileNotFoundError, match="cannot load from '/nowhere'"):
        PickScoreScorer("/nowhere", device="cpu")


class TestPickScoreConformance(AtomScorerConformance):
    def make_scorer(self):
        model, processor = tiny_pickscore()
        return PickScoreScorer(model=model, processor=processor, device="cpu")

    def make_inputs(self):
        return images(2), GRAPHS


class TestClipScoreConformance(AtomScorerConformance):
    def make_scorer(self):
        needs_clip_embedder()
        model, tokenizer = tiny_open_clip()
        return ClipScoreScorer(model=model, tokenizer=tokenizer, device="cpu")

    def make_inputs(self):
        return images(3), GRAPHS

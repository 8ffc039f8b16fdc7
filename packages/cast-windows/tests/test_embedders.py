"""The pixels and clip embedders: the Embedder contract, CLIP preprocessing, the missing extra."""

import sys

import pytest
import torch

from cast_core import get_embedder
from cast_core.errors import CastError
from cast_core.testing import EmbedderConformance
from cast_windows.embedders import ClipEmbedder, MissingExtraError, PixelsEmbedder

from tiny_clip import make_tiny_clip


class TestPixelsEmbedder(EmbedderConformance):
    def make_embedder(self):
        return PixelsEmbedder()


class TestClipEmbedder(EmbedderConformance):
    """A tiny random open_clip model built in memory stands in for ViT-L-14."""

    def make_embedder(self):
        return ClipEmbedder(model=make_tiny_clip(), device="cpu")


class TestClipEmbedderOnOtherSizes(TestClipEmbedder):
    image_size = (24, 40)  # resized and centre-cropped to the model's 32 x 32


def test_pixels_ignore_brightness_offsets_and_see_layout():
    img = torch.zeros(1, 3, 32, 32)
    img[..., :16] = 1.0
    e = PixelsEmbedder()
    same = e.embed(torch.cat([img, 0.5 * img + 0.25]))  # contrast/offset change, same layout
    assert float(same[0] @ same[1]) == pytest.approx(1.0, abs=1e-5)
    flipped = e.embed(img.flip(-1))
    assert float(same[0] @ flipped[0]) < 0
    assert e.embed(torch.rand(2, 3, 16, 16)).shape == (2, 3 * 16 * 16)
    assert PixelsEmbedder(size=4).embed(torch.rand(1, 3, 16, 16)).shape == (1, 48)


def test_embedders_reject_non_images():
    with pytest.raises(ValueError, match=r"\[B, 3, H, W\]"):
        PixelsEmbedder().embed(torch.rand(3, 16, 16))


def test_clip_preprocess_resizes_crops_and_normalises(tiny_clip):
    e = ClipEmbedder(model=tiny_clip, device="cpu")
    x = e.preprocess(torch.full((2, 3, 20, 48), 0.5))
    assert x.shape == (2, 3, 32, 32)
    expected = (0.5 - e.mean) / e.std
    torch.testing.assert_close(x, expected.expand_as(x), atol=1e-4, rtol=0)


def test_clip_identity_names_the_weights(tiny_clip):
    a = ClipEmbedder(model=tiny_clip, device="cpu")
    b = ClipEmbedder(model=make_tiny_clip(seed=1), device="cpu")
    assert a.identity.startswith("clip:custom-CLIP:sha256-") and a.identity != b.identity
    assert a.identity == ClipEmbedder(model=make_tiny_clip(), device="cpu").identity


def test_clip_through_the_registry(tiny_clip):
    e = get_embedder("clip", model=tiny_clip, device="cpu")
    assert isinstance(e, ClipEmbedder) and e.embed(torch.rand(3, 3, 32, 32)).shape == (3, 16)
    assert isinstance(get_embedder("pixels"), PixelsEmbedder)


def test_clip_without_open_clip_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "open_clip", None)  # import open_clip -> ImportError
    with pytest.raises(MissingExtraError, match=r"cast-windows\[clip\]"):
        ClipEmbedder(pretrained="openai")


def test_clip_needs_weights_to_mean_anything():
    with pytest.raises(CastError, match="pretrained"):
        ClipEmbedder(pretrained=None)

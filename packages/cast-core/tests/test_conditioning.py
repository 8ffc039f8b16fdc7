"""The conditioning contract: rows of tensors and of padded, masked prompt embeddings, and the
prompt cache that encodes each prompt once."""

import pytest
import torch

from cast_core.conditioning import (
    PromptCache,
    PromptEmbeds,
    check_conditioning,
    concat_rows,
    move_to,
    num_rows,
    select_rows,
)
from cast_core.testing import FakePolicy


def embeds(lengths, dim=3, pooled=True, seed=0):
    """A batch padded to its longest prompt, as Qwen-Image's encoder gives it."""
    gen = torch.Generator().manual_seed(seed)
    L = max(lengths)
    mask = torch.tensor([[i < n for i in range(L)] for n in lengths])
    e = torch.randn(len(lengths), L, dim, generator=gen) * mask[..., None]
    return PromptEmbeds(e, mask, torch.randn(len(lengths), 2, generator=gen) if pooled else None)


def test_ragged_batches_concatenate_with_padding_masked_out():
    a, b = embeds([2, 4]), embeds([5], seed=1)
    both = concat_rows([a, b])
    assert both.embeds.shape == (3, 5, 3) and both.mask.tolist()[0] == [True, True, False, False, False]
    assert torch.equal(both.embeds[:2, :4], a.embeds) and torch.equal(both.embeds[:2, 4:], torch.zeros(2, 1, 3))
    assert torch.equal(both.embeds[2], b.embeds[0]) and torch.equal(both.pooled, torch.cat([a.pooled, b.pooled]))
    row = select_rows(both, [2, 0, 0])
    assert len(row) == 3 and torch.equal(row.mask[1], both.mask[0]) and num_rows(row) == 3
    assert move_to(row, "cpu").embeds.device.type == "cpu"


def test_none_members_stay_none_and_mixing_is_refused():
    a, b = embeds([2], pooled=False), embeds([3], pooled=False, seed=1)
    assert concat_rows([a, b]).pooled is None
    with pytest.raises(ValueError, match="'pooled' is None in some parts only"):
        concat_rows([a, embeds([3], seed=1)])
    with pytest.raises(ValueError, match="without a mask"):
        concat_rows([PromptEmbeds(torch.zeros(1, 2, 3)), PromptEmbeds(torch.zeros(1, 3, 3))])


def test_trimmed_drops_only_unused_padding():
    batch = embeds([2, 4])
    first = select_rows(batch, [0]).trimmed()
    assert first.length == 2 and torch.equal(first.embeds, batch.embeds[:1, :2])
    assert select_rows(batch, [1]).trimmed().length == 4


def test_untyped_conditioning_is_refused_with_the_fix():
    with pytest.raises(TypeError, match=r"dict; conditioning must be a tensor"):
        check_conditioning({"a": torch.zeros(2)}, "policy 'x'")


def test_prompt_cache_encodes_each_prompt_once_and_keeps_order():
    policy = FakePolicy()
    calls = []

    def encode(prompts):
        calls.append(list(prompts))
        return policy.encode(prompts)

    cache = PromptCache(encode)
    batch = ["a red circle"] * 3 + ["a blue square"] * 3
    out = cache.batch(batch)
    assert calls == [["a red circle", "a blue square"]]  # unique prompts, one call
    torch.testing.assert_close(out, policy.encode(batch))
    again = cache.batch(["a blue square", "two green triangles", "a red circle"])
    assert calls[1] == ["two green triangles"] and cache.encoded == 3
    torch.testing.assert_close(again, policy.encode(["a blue square", "two green triangles", "a red circle"]))


def test_prompt_cache_is_bounded_and_ragged_rows_come_back_trimmed():
    def encode(prompts):
        return embeds([len(p) for p in prompts])

    cache = PromptCache(encode, max_entries=2)
    cache.batch(["ab", "abcd"])
    assert cache.rows["ab"].length == 2  # not the 4 of the batch it was encoded in
    out = cache.batch(["abc", "ab"])
    assert out.embeds.shape[1] == 3 and len(cache) == 2 and "abcd" not in cache

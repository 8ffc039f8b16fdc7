"""A tiny random Qwen3-VL judge and its processor, built in memory with no download.

Why: the ``soft-tifa`` scorer's claims (its soft score is GenEval 2's, batching and padding
change nothing, the heatmap lands on the right image cells) are proved on the real transformers
classes at toy width. The tokenizer is byte-level with no merges plus Qwen's special tokens and
the answer words as whole tokens (the real tokenizer has "Yes", " yes" … as single tokens too);
the chat template emits the same ``<|vision_start|><|image_pad|><|vision_end|>`` layout as
Qwen3-VL's. Vision patches are 4 px and merged 2×2, so one image token covers 8×8 pixels.
"""

from __future__ import annotations

__all__ = ["tiny_qwen3_vl", "SPECIAL_TOKENS", "ANSWER_TOKENS"]

SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
]
ANSWER_TOKENS = ["Yes", "yes", " yes", " Yes", "No", "no", " no", " No"]

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if m['content'] is string %}{{ m['content'] }}{% else %}"
    "{% for c in m['content'] %}{% if c['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif c['type'] == 'text' %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _processor(max_pixels: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2VLImageProcessor, Qwen3VLProcessor
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

    vocab = {c: i for i, c in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(SPECIAL_TOKENS)
    tok.add_tokens(ANSWER_TOKENS)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<|endoftext|>", eos_token="<|im_end|>")
    tokenizer.chat_template = CHAT_TEMPLATE
    images = Qwen2VLImageProcessor(
        patch_size=4,
        merge_size=2,
        temporal_patch_size=2,
        min_pixels=8 * 8,
        max_pixels=max_pixels,
        image_mean=[0.5] * 3,
        image_std=[0.5] * 3,
    )
    video = Qwen3VLVideoProcessor(patch_size=4, merge_size=2, temporal_patch_size=2)
    return Qwen3VLProcessor(
        image_processor=images, tokenizer=tokenizer, video_processor=video, chat_template=CHAT_TEMPLATE
    )


def tiny_qwen3_vl(seed: int = 0, *, layers: int = 4, max_pixels: int = 64 * 64):
    """``(model, processor)``: a random ``Qwen3VLForConditionalGeneration`` (4 decoder layers,
    width 32) in eval mode, and a ``Qwen3VLProcessor`` that keeps images within ``max_pixels``."""
    import torch
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    processor = _processor(max_pixels)
    ids = {t: processor.tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    text = dict(
        bos_token_id=None,
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"],
        hidden_act="silu",
        head_dim=8,
        hidden_size=32,
        vocab_size=len(processor.tokenizer) + 4,
        intermediate_size=37,
        max_position_embeddings=2048,
        model_type="qwen3_vl",
        num_attention_heads=4,
        num_hidden_layers=layers,
        num_key_value_heads=2,
        rope_theta=10000,
        tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "mrope_section": [2, 1, 1], "mrope_interleaved": True},
    )
    vision = dict(
        depth=2,
        in_chans=3,
        hidden_act="gelu_pytorch_tanh",
        intermediate_size=32,
        out_hidden_size=32,
        hidden_size=32,
        num_heads=4,
        patch_size=4,
        spatial_merge_size=2,
        temporal_patch_size=2,
        num_position_embeddings=16,
        deepstack_visual_indexes=[0, 1],
    )
    config = Qwen3VLConfig(
        text_config=text,
        vision_config=vision,
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    return Qwen3VLForConditionalGeneration(config).eval(), processor

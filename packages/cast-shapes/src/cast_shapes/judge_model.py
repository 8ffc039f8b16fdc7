"""The learned shapes judge's architecture: a real ``Qwen3VLForConditionalGeneration`` at a few
million parameters, with an offline word-level tokenizer of the world's questions.

Why this shape: soft-tifa reads the judge's last-position probabilities and its attention to the
image tokens; to measure *that* recipe the judge must be the real Qwen3-VL architecture (vision
tower with 2×2 patch merging, deepstack, M-RoPE), only smaller. Vision patches of 4 px merged 2×2
put one image token on 8 × 8 pixels, so a 32 × 32 world image is a 4 × 4 token grid: the ratio of
Qwen3-VL's 32-px merged tokens at 1024² to FLUX's 16-px latents. The processor is saved beside the
weights, so ``soft-tifa`` loads the judge from its directory like any Qwen3-VL checkpoint.
"""

from __future__ import annotations

from cast_shapes.judge_data import ANSWERS
from cast_shapes.world import COLOURS, IMAGE_SIZE, RELATIONS, SHAPES

SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
]
#: the chat layout of Qwen3-VL's template for one user turn with an image, then the assistant's turn
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if m['content'] is string %}{{ m['content'] }}{% else %}"
    "{% for c in m['content'] %}{% if c['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif c['type'] == 'text' %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
QUESTION_WORDS = (
    "Are",
    "Is",
    "How",
    "there",
    "any",
    "in",
    "the",
    "image",
    "many",
    "are",
    "of",
    "Answer",
    "one",
    "word",
    "user",
    "assistant",
    "system",
    "What",
    "is",
    "this",
    "?",
    ".",
    ",",
    "Write",
    "a",
    "general",
    "description",
)  # the last: soft-tifa's default baseline question
#: the model's width; the defaults give about 2.5M parameters
SIZES = {"hidden": 128, "layers": 4, "heads": 4, "kv_heads": 2, "mlp": 384, "vision_hidden": 64, "vision_depth": 2}


def vocabulary() -> list[str]:
    """Every word a world question or answer uses, in a fixed order (lower- and capitalised)."""
    nouns = [w for s in SHAPES for w in (s, s + "s")]
    relation_words = sorted({w for r in RELATIONS for w in r.split()})
    answers = [w for a in ANSWERS for w in (a, a.lower())] + [str(n) for n in range(9)]
    words = [*QUESTION_WORDS, *nouns, *COLOURS, *relation_words, *answers]
    return list(dict.fromkeys(words))


def build_processor():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2VLImageProcessor, Qwen3VLProcessor
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

    vocab = {w: i for i, w in enumerate(["[UNK]", *vocabulary()])}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Whitespace()])
    tok.add_special_tokens(SPECIAL_TOKENS)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<|endoftext|>", eos_token="<|im_end|>", unk_token="[UNK]", padding_side="left"
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    pixels = IMAGE_SIZE * IMAGE_SIZE
    images = Qwen2VLImageProcessor(
        patch_size=4,
        merge_size=2,
        temporal_patch_size=2,
        min_pixels=pixels,
        max_pixels=pixels,
        image_mean=[0.5] * 3,
        image_std=[0.5] * 3,
    )
    video = Qwen3VLVideoProcessor(patch_size=4, merge_size=2, temporal_patch_size=2)
    return Qwen3VLProcessor(
        image_processor=images, tokenizer=tokenizer, video_processor=video, chat_template=CHAT_TEMPLATE
    )


def build_judge(processor=None, seed: int = 0, **sizes):
    """``(model, processor)``: a freshly initialised judge (train mode) and its processor."""
    import torch
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    s = {**SIZES, **sizes}
    processor = processor or build_processor()
    ids = {t: processor.tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    head_dim = s["hidden"] // s["heads"]
    text = dict(
        bos_token_id=None,
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"],
        hidden_act="silu",
        head_dim=head_dim,
        hidden_size=s["hidden"],
        vocab_size=len(processor.tokenizer),
        intermediate_size=s["mlp"],
        max_position_embeddings=512,
        model_type="qwen3_vl",
        num_attention_heads=s["heads"],
        num_hidden_layers=s["layers"],
        num_key_value_heads=s["kv_heads"],
        rope_theta=10000,
        tie_word_embeddings=True,
        rope_parameters={
            "rope_type": "default",
            "mrope_section": [head_dim // 8, head_dim // 8 * 3 // 2, head_dim // 8 * 3 // 2],
            "mrope_interleaved": True,
        },
    )
    vision = dict(
        depth=s["vision_depth"],
        in_chans=3,
        hidden_act="gelu_pytorch_tanh",
        intermediate_size=2 * s["vision_hidden"],
        out_hidden_size=s["hidden"],
        hidden_size=s["vision_hidden"],
        num_heads=4,
        patch_size=4,
        spatial_merge_size=2,
        temporal_patch_size=2,
        num_position_embeddings=64,
        deepstack_visual_indexes=list(range(s["vision_depth"])),
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
    return Qwen3VLForConditionalGeneration(config), processor

"""Tiny random FLUX.2, FLUX.2-klein and Qwen-Image pipelines, built in memory with no download.

Why they exist: every claim this package makes about the real models (the same noise, sigmas,
guidance and images as diffusers' own pipelines; LoRA files diffusers loads) is proved on these,
on a CPU, in seconds. They are diffusers' real classes at toy widths — the configs of diffusers'
own pipeline tests, with two changes that make the tests stricter:

* the schedulers carry the *real* models' shift settings (FLUX.2 ships FLUX.1-dev's dynamic
  shifting; Qwen-Image its exponential shift with ``shift_terminal=0.02``), so the ``mu`` paths
  are exercised rather than bypassed by the default scheduler;
* the text encoders are deep enough for the real hidden-state layers (FLUX.2-dev stacks layers
  10, 20, 30 of Mistral; klein 9, 18, 27 of Qwen3), so the policies run with their defaults.

The tokenizers are byte-level with no merges (one token per byte) and a chat template, built
with the ``tokenizers`` library: the hub's test tokenizers cannot be fetched offline.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "byte_tokenizer",
    "tiny_flux2_pipeline",
    "tiny_flux2_klein_pipeline",
    "tiny_qwen_image_pipeline",
    "TINY_PIPELINES",
]

# FLUX.2's scheduler_config.json is FLUX.1-dev's (diffusers' convert script copies it)
FLUX_SCHEDULER = {
    "base_image_seq_len": 256,
    "base_shift": 0.5,
    "max_image_seq_len": 4096,
    "max_shift": 1.15,
    "num_train_timesteps": 1000,
    "shift": 3.0,
    "use_dynamic_shifting": True,
}
# Qwen-Image's scheduler_config.json (also Qwen-Image-2512's)
QWEN_SCHEDULER = {
    "base_image_seq_len": 256,
    "base_shift": 0.5,
    "max_image_seq_len": 8192,
    "max_shift": 0.9,
    "num_train_timesteps": 1000,
    "shift": 1.0,
    "shift_terminal": 0.02,
    "use_dynamic_shifting": True,
    "time_shift_type": "exponential",
}

_CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}"
    "{% for c in m['content'] %}{% if c['type'] == 'text' %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def byte_tokenizer():
    """A fast tokenizer with one token per byte, pad/bos/eos and chat-template specials."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {c: i for i, c in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<pad>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"])
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>")
    hf.chat_template = _CHAT_TEMPLATE
    return hf


def _seeded(seed: int):
    import torch

    torch.manual_seed(seed)


def _flux2_transformer(guidance_embeds: bool, text_width: int, *, layers: int = 1, single_layers: int = 2):
    from diffusers import Flux2Transformer2DModel

    return Flux2Transformer2DModel(
        patch_size=1,
        in_channels=4,
        num_layers=layers,
        num_single_layers=single_layers,
        attention_head_dim=16,
        num_attention_heads=2,
        joint_attention_dim=text_width,
        timestep_guidance_channels=256,
        axes_dims_rope=(4, 4, 4, 4),
        guidance_embeds=guidance_embeds,
    )


def _flux2_vae():
    from diffusers import AutoencoderKLFlux2

    return AutoencoderKLFlux2(
        sample_size=32,
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D",),
        up_block_types=("UpDecoderBlock2D",),
        block_out_channels=(4,),
        layers_per_block=1,
        latent_channels=1,
        norm_num_groups=1,
        use_quant_conv=False,
        use_post_quant_conv=False,
    )


def _randomize_batch_norm(vae, seed: int) -> None:
    """Give the VAE's latent BatchNorm non-trivial running statistics, so that the
    normalisation in decoding is really tested (a fresh one is mean 0, variance 1)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        vae.bn.running_mean.copy_(0.3 * torch.randn(vae.bn.running_mean.shape, generator=gen))
        vae.bn.running_var.copy_(0.5 + torch.rand(vae.bn.running_var.shape, generator=gen))


def _flux2_family(pipeline_class, text_encoder, tokenizer, guidance_embeds: bool, seed: int):
    """A FLUX.2-family pipeline around ``text_encoder`` (3 stacked hidden states of width 16)."""
    from diffusers import FlowMatchEulerDiscreteScheduler

    transformer = _flux2_transformer(guidance_embeds, 3 * 16)
    vae = _flux2_vae()
    _randomize_batch_norm(vae, seed)
    return pipeline_class(
        scheduler=FlowMatchEulerDiscreteScheduler(**FLUX_SCHEDULER),
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        transformer=transformer,
    )


def tiny_flux2_pipeline(seed: int = 0):
    """A ``Flux2Pipeline`` (guidance-distilled FLUX.2-dev layout) with random toy weights."""
    from diffusers import Flux2Pipeline
    from transformers import Mistral3Config, Mistral3ForConditionalGeneration

    tokenizer = byte_tokenizer()
    _seeded(seed)
    pad, bos, eos = tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id
    config = Mistral3Config(
        text_config={
            "model_type": "mistral",
            "vocab_size": len(tokenizer) + 8,
            "hidden_size": 16,
            "intermediate_size": 37,
            "max_position_embeddings": 1024,
            "num_attention_heads": 4,
            "num_hidden_layers": 30,
            "num_key_value_heads": 2,
            "rms_norm_eps": 1e-05,
            "rope_theta": 1e9,
            "sliding_window": None,
            "bos_token_id": bos,
            "eos_token_id": eos,
            "pad_token_id": pad,
        },
        vision_config={
            "model_type": "pixtral",
            "hidden_size": 16,
            "num_hidden_layers": 1,
            "num_attention_heads": 4,
            "intermediate_size": 37,
            "image_size": 30,
            "patch_size": 6,
            "num_channels": 3,
        },
        bos_token_id=bos,
        eos_token_id=eos,
        pad_token_id=pad,
        image_seq_length=4,
        vision_feature_layer=-1,
        image_token_index=len(tokenizer) + 1,
    )
    return _flux2_family(Flux2Pipeline, Mistral3ForConditionalGeneration(config).eval(), tokenizer, True, seed)


def tiny_flux2_klein_pipeline(seed: int = 0):
    """A ``Flux2KleinPipeline`` (true CFG against the empty prompt) with random toy weights."""
    from diffusers import Flux2KleinPipeline
    from transformers import Qwen3Config, Qwen3ForCausalLM

    tokenizer = byte_tokenizer()
    _seeded(seed)
    config = Qwen3Config(
        intermediate_size=16,
        hidden_size=16,
        num_hidden_layers=27,
        num_attention_heads=2,
        num_key_value_heads=2,
        vocab_size=len(tokenizer) + 8,
        max_position_embeddings=1024,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    return _flux2_family(Flux2KleinPipeline, Qwen3ForCausalLM(config).eval(), tokenizer, False, seed)


def tiny_qwen_image_pipeline(seed: int = 0):
    """A ``QwenImagePipeline`` with random toy weights (the layout of Qwen-Image and -2512)."""
    import torch
    from diffusers import AutoencoderKLQwenImage, FlowMatchEulerDiscreteScheduler, QwenImagePipeline
    from diffusers import QwenImageTransformer2DModel
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    tokenizer = byte_tokenizer()
    _seeded(seed)
    transformer = QwenImageTransformer2DModel(
        patch_size=2,
        in_channels=16,
        out_channels=4,
        num_layers=2,
        attention_head_dim=16,
        num_attention_heads=3,
        joint_attention_dim=16,
        guidance_embeds=False,
        axes_dims_rope=(8, 4, 4),
    )
    z_dim = 4
    gen = torch.Generator().manual_seed(seed + 1)
    vae = AutoencoderKLQwenImage(
        base_dim=z_dim * 6,
        z_dim=z_dim,
        dim_mult=[1, 2, 4],
        num_res_blocks=1,
        temperal_downsample=[False, True],
        latents_mean=(0.2 * torch.randn(z_dim, generator=gen)).tolist(),
        latents_std=(0.5 + torch.rand(z_dim, generator=gen)).tolist(),
    )
    vocab = len(tokenizer) + 8
    config = Qwen2_5_VLConfig(
        text_config={
            "hidden_size": 16,
            "intermediate_size": 16,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "num_key_value_heads": 2,
            "vocab_size": vocab,
            "rope_scaling": {"mrope_section": [1, 1, 2], "rope_type": "default", "type": "default"},
            "rope_theta": 1000000.0,
            "pad_token_id": tokenizer.pad_token_id,
        },
        vision_config={"depth": 2, "hidden_size": 16, "intermediate_size": 16, "num_heads": 2, "out_hidden_size": 16},
        hidden_size=16,
        vocab_size=vocab,
        vision_start_token_id=vocab - 3,
        vision_end_token_id=vocab - 2,
        vision_token_id=vocab - 1,
        image_token_id=vocab - 4,
        video_token_id=vocab - 5,
    )
    text_encoder = Qwen2_5_VLForConditionalGeneration(config).eval()
    return QwenImagePipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(**QWEN_SCHEDULER),
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        transformer=transformer,
    )


#: policy name -> builder of its tiny pipeline
TINY_PIPELINES: dict[str, Any] = {
    "flux2": tiny_flux2_pipeline,
    "flux2-klein": tiny_flux2_klein_pipeline,
    "qwen-image": tiny_qwen_image_pipeline,
}

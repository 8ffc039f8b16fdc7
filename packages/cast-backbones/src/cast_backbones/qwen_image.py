"""The ``qwen-image`` policy: Qwen-Image and Qwen-Image-2512 (same architecture) behind the Policy
protocol.

Guidance is ``QwenImagePipeline``'s true CFG with its norm rescale — ``comb = neg + s·(cond −
neg)``, then ``comb·‖cond‖/‖comb‖`` per token — against ``negative_prompt`` (default ``" "``, the
model card's). The rescale is computed in float32 whatever the weights' dtype: in bfloat16 the
two norms carry about three significant digits, which is the size of the log-prob differences
the clipped objective works with. Set ``true_cfg_scale=1`` for the unguided model.

Text conditioning is the last hidden state of Qwen2.5-VL after the pipeline's system template
(whose tokens are dropped), per prompt at its own length; padded batches carry a mask that the
transformer applies, so a prompt's velocity does not depend on the prompts it is batched with.
"""

from __future__ import annotations

from typing import Any

import torch

from cast_backbones.base import DiffusersPolicy
from cast_backbones.lora import qwen_image_targets
from cast_backbones.plan_models import build_for_plan
from cast_core.conditioning import PromptEmbeds

__all__ = ["QwenImagePolicy"]


class QwenImagePolicy(DiffusersPolicy):
    name = "qwen-image"
    pipeline_class_name = "QwenImagePipeline"
    block_lists = ("transformer_blocks",)

    def __init__(self, path=None, *, true_cfg_scale: float = 4.0, negative_prompt: str = " ", **options: Any):
        super().__init__(path, **options)
        self.true_cfg_scale = float(true_cfg_scale)
        self.negative_prompt = str(negative_prompt)

    default_lora_targets = staticmethod(qwen_image_targets)
    build_for_plan = classmethod(build_for_plan)  # `cast plan`: real size on the meta device

    def identity_options(self) -> dict:
        return {
            **super().identity_options(),
            "true_cfg_scale": self.true_cfg_scale,
            "negative_prompt": self.negative_prompt,
        }

    @property
    def uses_negative(self) -> bool:
        return self.true_cfg_scale > 1

    def schedule_mu(self, image_seq_len: int, num_steps: int) -> float:
        from diffusers.pipelines.qwenimage.pipeline_qwenimage import calculate_shift

        config = self.pipe.scheduler.config
        return calculate_shift(
            image_seq_len,
            config.get("base_image_seq_len", 256),
            config.get("max_image_seq_len", 4096),
            config.get("base_shift", 0.5),
            config.get("max_shift", 1.15),
        )

    def noise_shape(self, n: int, h: int, w: int) -> tuple[int, ...]:
        # the pipeline draws (B, 1, C, 2h, 2w) video-shaped latents; the frame axis of 1 does not
        # change the order of the numbers
        return (n, self.transformer.config.in_channels // 4, 2 * h, 2 * w)

    def pack(self, latents: torch.Tensor, h: int, w: int) -> torch.Tensor:
        n, c = latents.shape[:2]
        x = latents.reshape(n, c, h, 2, w, 2).permute(0, 2, 4, 1, 3, 5)
        return x.reshape(n, h * w, c * 4)

    def encode_prompts(self, prompts: list[str], device: torch.device) -> PromptEmbeds:
        embeds, mask = self.pipe.encode_prompt(
            prompt=prompts, device=device, max_sequence_length=self.max_sequence_length
        )
        if mask is None:  # the pipeline drops an all-ones mask; rows need one to be concatenated
            mask = torch.ones(embeds.shape[:2], dtype=torch.bool, device=embeds.device)
        return PromptEmbeds(embeds, mask.bool())

    def _transformer(self, x: torch.Tensor, timestep: torch.Tensor, cond: PromptEmbeds, h: int, w: int) -> torch.Tensor:
        mask = cond.mask.to(self.device)
        return self._forward(
            hidden_states=x,
            timestep=timestep,
            guidance=None,
            encoder_hidden_states=cond.embeds.to(self.device, self.dtype),
            encoder_hidden_states_mask=None if bool(mask.all()) else mask,
            img_shapes=[[(1, h, w)]] * x.shape[0],
            return_dict=False,
        )[0]

    def velocity(self, latents: torch.Tensor, sigma, cond: PromptEmbeds, image_size=None) -> torch.Tensor:
        h, w = self.latent_grid(image_size)
        n = latents.shape[0]
        x = latents.to(self.device, self.dtype)
        timestep = self._timestep(sigma, n, x.dtype)
        pred = self._transformer(x, timestep, cond, h, w)
        if not self.uses_negative:
            return pred
        neg = self._transformer(x, timestep, self.negative(n), h, w).float()
        pred = pred.float()
        comb = neg + self.true_cfg_scale * (pred - neg)
        return comb * (torch.norm(pred, dim=-1, keepdim=True) / torch.norm(comb, dim=-1, keepdim=True))

    def decode_latents(self, latents: torch.Tensor, h: int, w: int) -> torch.Tensor:
        """Unpack to the VAE's ``(B, C, 1, H/8, W/8)``, undo the per-channel normalisation
        (the pipeline's arithmetic: ``x / (1/std) + mean``), decode, keep the one frame."""
        vae = self.pipe.vae
        n, _, c4 = latents.shape
        c = c4 // 4
        x = latents.reshape(n, h, w, c, 2, 2).permute(0, 3, 1, 4, 2, 5).reshape(n, c, 1, 2 * h, 2 * w).to(vae.dtype)
        mean = torch.tensor(vae.config.latents_mean).view(1, c, 1, 1, 1).to(x.device, x.dtype)
        inv_std = 1.0 / torch.tensor(vae.config.latents_std).view(1, c, 1, 1, 1).to(x.device, x.dtype)
        return vae.decode(x / inv_std + mean, return_dict=False)[0][:, :, 0]

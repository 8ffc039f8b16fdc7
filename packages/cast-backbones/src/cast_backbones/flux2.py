"""FLUX.2 policies: ``flux2`` (FLUX.2-dev, guidance-distilled: one forward pass per step) and
``flux2-klein`` (true classifier-free guidance against the empty prompt, as
``Flux2KleinPipeline`` does; none for its step-distilled checkpoints).

Latents are the pipeline's packed tokens ``[B, (H/16)(W/16), 128]``, one token per 16x16 pixels,
row-major; the text conditioning is the stacked hidden states of the text encoder (layers 10,
20, 30 of Mistral-Small for dev, 9, 18, 27 of Qwen3 for klein) padded to ``max_sequence_length``
and, as in the pipeline, attended to without a mask.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from cast_backbones.base import DiffusersPolicy
from cast_backbones.checks import check_out_layers, encoder_layer_count, encoder_layers_on_disk
from cast_backbones.lora import flux2_targets
from cast_backbones.plan_models import build_for_plan
from cast_core.conditioning import PromptEmbeds

__all__ = ["Flux2Policy", "Flux2KleinPolicy"]


def _ids(*axes: torch.Tensor) -> torch.Tensor:
    return torch.cartesian_prod(*axes)


class Flux2Policy(DiffusersPolicy):
    """FLUX.2-dev behind the Policy protocol. ``guidance_scale`` is the distilled guidance the
    pipeline embeds (default 4.0, the pipeline's)."""

    name = "flux2"
    pipeline_class_name = "Flux2Pipeline"
    block_lists = ("transformer_blocks", "single_transformer_blocks")
    default_out_layers: tuple[int, ...] = (10, 20, 30)

    def __init__(
        self,
        path=None,
        *,
        guidance_scale: float = 4.0,
        text_encoder_out_layers: Sequence[int] | None = None,
        **options: Any,
    ):
        layers = text_encoder_out_layers or self.default_out_layers
        if path is not None and options.get("pipeline") is None:  # before minutes of loading
            check_out_layers(layers, encoder_layers_on_disk(path))
        super().__init__(path, **options)
        self.guidance_scale = float(guidance_scale)
        # an IndexError inside encode_prompt otherwise, at the first prompt
        self.out_layers = check_out_layers(layers, encoder_layer_count(getattr(self.pipe.text_encoder, "config", None)))
        self._grid_ids: dict[tuple[int, int], torch.Tensor] = {}

    default_lora_targets = staticmethod(flux2_targets)
    build_for_plan = classmethod(build_for_plan)  # `cast plan`: real size on the meta device

    def identity_options(self) -> dict:
        return {**super().identity_options(), "guidance_scale": self.guidance_scale, "out_layers": self.out_layers}

    def schedule_mu(self, image_seq_len: int, num_steps: int) -> float:
        from diffusers.pipelines.flux2.pipeline_flux2 import compute_empirical_mu

        return compute_empirical_mu(image_seq_len=image_seq_len, num_steps=num_steps)

    def noise_shape(self, n: int, h: int, w: int) -> tuple[int, ...]:
        return (n, self.transformer.config.in_channels, h, w)

    def pack(self, latents: torch.Tensor, h: int, w: int) -> torch.Tensor:
        return latents.reshape(latents.shape[0], latents.shape[1], h * w).permute(0, 2, 1)

    def encode_prompts(self, prompts: list[str], device: torch.device) -> PromptEmbeds:
        embeds, _ = self.pipe.encode_prompt(
            prompt=prompts,
            device=device,
            max_sequence_length=self.max_sequence_length,
            text_encoder_out_layers=self.out_layers,
        )
        return PromptEmbeds(embeds)

    def image_ids(self, h: int, w: int) -> torch.Tensor:
        """Position ids ``(t=0, row, column, l=0)`` of the ``h*w`` latent tokens, row-major."""
        if (h, w) not in self._grid_ids:
            self._grid_ids[(h, w)] = _ids(torch.arange(1), torch.arange(h), torch.arange(w), torch.arange(1))
        return self._grid_ids[(h, w)].to(self.device)

    def _transformer(
        self, x: torch.Tensor, timestep: torch.Tensor, cond: PromptEmbeds, h: int, w: int, guidance: torch.Tensor | None
    ) -> torch.Tensor:
        n = x.shape[0]
        length = cond.embeds.shape[1]
        txt_ids = _ids(torch.arange(1), torch.arange(1), torch.arange(1), torch.arange(length)).to(self.device)
        out = self._forward(
            hidden_states=x,
            timestep=timestep,
            guidance=guidance,
            encoder_hidden_states=cond.embeds.to(self.device, self.dtype),
            txt_ids=txt_ids.unsqueeze(0).expand(n, -1, -1),
            img_ids=self.image_ids(h, w).unsqueeze(0).expand(n, -1, -1),
            return_dict=False,
        )[0]
        return out[:, : x.shape[1]]

    def velocity(self, latents: torch.Tensor, sigma, cond: PromptEmbeds, image_size=None) -> torch.Tensor:
        h, w = self.latent_grid(image_size)
        n = latents.shape[0]
        x = latents.to(self.device, self.dtype)
        timestep = self._timestep(sigma, n, x.dtype)
        guidance = torch.full((n,), self.guidance_scale, device=self.device, dtype=torch.float32)
        return self._transformer(x, timestep, cond, h, w, guidance)

    def decode_latents(self, latents: torch.Tensor, h: int, w: int) -> torch.Tensor:
        """Unpack, undo the VAE's BatchNorm normalisation, unpatchify 2x2, decode."""
        vae = self.pipe.vae
        n, _, c = latents.shape
        x = latents.reshape(n, h, w, c).permute(0, 3, 1, 2)
        mean = vae.bn.running_mean.view(1, -1, 1, 1).to(x.device, x.dtype)
        std = torch.sqrt(vae.bn.running_var.view(1, -1, 1, 1) + vae.config.batch_norm_eps).to(x.device, x.dtype)
        x = x * std + mean
        x = x.reshape(n, c // 4, 2, 2, h, w).permute(0, 1, 4, 2, 5, 3).reshape(n, c // 4, 2 * h, 2 * w)
        return vae.decode(x.to(vae.dtype), return_dict=False)[0]


class Flux2KleinPolicy(Flux2Policy):
    """FLUX.2-klein: ``guidance_scale`` > 1 is true CFG ``neg + g·(cond − neg)`` against the
    empty prompt (the pipeline's default 4.0), skipped for step-distilled checkpoints
    (``is_distilled`` in the pipeline config), exactly as ``Flux2KleinPipeline`` decides."""

    name = "flux2-klein"
    pipeline_class_name = "Flux2KleinPipeline"
    default_out_layers = (9, 18, 27)

    @property
    def uses_negative(self) -> bool:
        return self.guidance_scale > 1 and not self.pipe.config.is_distilled

    def velocity(self, latents: torch.Tensor, sigma, cond: PromptEmbeds, image_size=None) -> torch.Tensor:
        h, w = self.latent_grid(image_size)
        n = latents.shape[0]
        x = latents.to(self.device, self.dtype)
        timestep = self._timestep(sigma, n, x.dtype)
        pred = self._transformer(x, timestep, cond, h, w, None)
        if not self.uses_negative:
            return pred
        neg = self._transformer(x, timestep, self.negative(n), h, w, None)
        return neg + self.guidance_scale * (pred - neg)

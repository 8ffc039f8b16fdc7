"""Scalar reward baselines for Flow-GRPO comparisons: ``clip-score`` and ``pickscore``.

They judge the whole prompt at once, not atom by atom. To fit the AtomScorer contract (a score
per atom of the scene graph), every atom of an image gets the image's one prompt-level score, so
its AM and GM both equal that score, and heatmaps (when asked) are flat: the scalar projector
(Flow-GRPO) is the projector to pair them with.

* ``clip-score``: the cosine between open_clip's image and prompt embeddings (ViT-L-14 "openai"
  by default, the ``clip`` embedder's), clamped to [0, 1]. CLIPScore (Hessel et al.) is
  2.5·max(cos, 0); we keep max(cos, 0), so that it stays in [0, 1].
* ``pickscore``: PickScore (a CLIP-H fine-tuned on human preferences) through transformers'
  ``CLIPModel`` from a local path: ``logit_scale.exp()·cos / 26``, Flow-GRPO's normalisation
  (``pickscore_scorer.py``), clamped to [0, 1] (Flow-GRPO does not clamp; scores above 26 are
  rare).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from cast_core.errors import ConfigError
from cast_core.scene_graph import SceneGraph
from cast_core.types import AtomScores
from cast_rewards.images import to_pil

__all__ = ["ClipScoreScorer", "PickScoreScorer", "PICKSCORE_SCALE"]

PICKSCORE_SCALE = 26.0
#: what scorer_kwargs.path must name for pickscore, said in the errors
PICKSCORE_DIR = "a local PickScore directory (config.json and the CLIP weights, e.g. yuvalkirstain/PickScore_v1)"


def _broadcast(
    prompt_scores: torch.Tensor, images: torch.Tensor, graphs: Sequence[SceneGraph], heatmaps: bool
) -> AtomScores:
    scores = [prompt_scores[i].expand(len(g.atoms)).clone().float().cpu() for i, g in enumerate(graphs)]
    maps = None
    if heatmaps:
        h, w = images.shape[-2:]
        maps = [torch.ones(len(g.atoms), h, w) for g in graphs]
    return AtomScores(graphs=list(graphs), scores=scores, heatmaps=maps)


class ClipScoreScorer:
    """Image embeddings from the registered ``clip`` embedder (its preprocessing and weights),
    prompt embeddings from the same open_clip model's text tower."""

    prompt_level = True  # one verdict per prompt: in a run with several scorers, one prompt-level atom

    def __init__(
        self,
        model_name: str = "ViT-L-14",
        pretrained: str | None = "openai",
        *,
        model: Any = None,
        tokenizer: Callable[[list[str]], torch.Tensor] | None = None,
        device: str | None = None,
    ):
        from cast_core.registry import get_embedder, list_components

        if "clip" not in list_components("embedder"):
            raise ValueError(
                "clip-score embeds images with the 'clip' embedder of cast-windows, which is not installed: "
                "pip install cast-windows 'cast-rewards[clip]'"
            )
        self.embedder = get_embedder("clip", model_name=model_name, pretrained=pretrained, model=model, device=device)
        if tokenizer is None:
            import open_clip

            tokenizer = open_clip.get_tokenizer(model_name)
        self.tokenizer = tokenizer

    @torch.no_grad()
    def prompt_scores(self, images: torch.Tensor, prompts: Sequence[str], clamp: bool = True) -> torch.Tensor:
        image = self.embedder.embed(images).float()
        model = self.embedder.model
        tokens = self.tokenizer(list(prompts)).to(next(model.parameters()).device)
        text = model.encode_text(tokens).float()
        text = text / text.norm(dim=-1, keepdim=True).clamp_min(1e-12)
        cos = (image.to(text.device) * text).sum(-1).cpu()
        return cos.clamp(0, 1) if clamp else cos

    def score(self, images: torch.Tensor, graphs: Sequence[SceneGraph], heatmaps: bool = False) -> AtomScores:
        return _broadcast(self.prompt_scores(images, [g.prompt for g in graphs]), images, graphs, heatmaps)


class PickScoreScorer:
    """``path``: a local PickScore checkpoint (e.g. yuvalkirstain/PickScore_v1 downloaded);
    ``processor_path``: its processor (CLIP-H's, laion/CLIP-ViT-H-14-laion2B-s32B-b79K), default
    ``path``. Or pass a built ``model`` and ``processor``."""

    prompt_level = True  # one verdict per prompt: in a run with several scorers, one prompt-level atom

    def __init__(
        self,
        path: str | None = None,
        *,
        processor_path: str | None = None,
        model: Any = None,
        processor: Any = None,
        device: str | None = None,
        torch_dtype: Any = None,
    ):
        from cast_rewards.model_dirs import ModelPathError, check_device, check_model_dir

        self.device = check_device(device, "scorer_kwargs.device")  # before the weights are read
        if model is None:
            from transformers import AutoProcessor, CLIPModel

            if path is None:
                raise ConfigError(
                    "pickscore needs path= (a local PickScore checkpoint: --set scorer_kwargs.path=DIR) "
                    "or model= and processor="
                )
            check_model_dir(path, owner="pickscore", key="scorer_kwargs.path", wants=PICKSCORE_DIR)
            dtype = getattr(torch, torch_dtype) if isinstance(torch_dtype, str) else torch_dtype
            try:
                model = CLIPModel.from_pretrained(path, dtype=dtype or torch.float32)
                processor = AutoProcessor.from_pretrained(processor_path or path)
            except (OSError, ValueError) as err:  # a hub id without network, a directory missing a file
                raise ModelPathError(
                    f"pickscore: cannot load from {path!r} ({(str(err) or repr(err)).splitlines()[0][:200]}); "
                    f"give scorer_kwargs.path = {PICKSCORE_DIR}"
                ) from None
        if processor is None:
            raise ValueError("pickscore: a model= needs its processor=")
        self.model = model.to(self.device).eval()
        self.processor = processor

    @torch.no_grad()
    def prompt_scores(self, images: torch.Tensor, prompts: Sequence[str], clamp: bool = True) -> torch.Tensor:
        pil = [to_pil(im) for im in images]
        image_in = self.processor(images=pil, return_tensors="pt").to(self.device)
        text_in = self.processor(
            text=list(prompts), padding=True, truncation=True, max_length=77, return_tensors="pt"
        ).to(self.device)
        image = _features(self.model.get_image_features(**image_in)).float()
        text = _features(self.model.get_text_features(**text_in)).float()
        image = image / image.norm(dim=-1, keepdim=True)
        text = text / text.norm(dim=-1, keepdim=True)
        logits = self.model.logit_scale.exp().float() * (image * text).sum(-1)
        scores = (logits / PICKSCORE_SCALE).cpu()
        return scores.clamp(0, 1) if clamp else scores

    def score(self, images: torch.Tensor, graphs: Sequence[SceneGraph], heatmaps: bool = False) -> AtomScores:
        return _broadcast(self.prompt_scores(images, [g.prompt for g in graphs]), images, graphs, heatmaps)


def _features(out: Any) -> torch.Tensor:
    """transformers 5 returns an output object from get_*_features; 4.x a tensor."""
    if torch.is_tensor(out):
        return out
    return out.pooler_output if getattr(out, "pooler_output", None) is not None else out[0]

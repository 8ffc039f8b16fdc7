"""A tiny randomly initialised open_clip model, built in memory (no download), for tests."""

import torch


def make_tiny_clip(seed: int = 0, image_size: int = 32):
    """An open_clip ``CLIP`` with a 1-layer, 32-wide vision tower on 32 px inputs (~40k weights)."""
    from open_clip.model import CLIP

    torch.manual_seed(seed)
    return CLIP(
        embed_dim=16,
        vision_cfg={"layers": 1, "width": 32, "head_width": 16, "patch_size": 8, "image_size": image_size},
        text_cfg={"context_length": 8, "vocab_size": 64, "width": 32, "heads": 2, "layers": 1},
    )


def suite_for_tests():
    """A prompt list for ``cast window --suite tiny_clip:suite_for_tests``."""
    return ["a red circle", "a blue square"]

"""Shared builders: tiny random pipelines (cast_backbones.tiny) and policies around them."""

import warnings

import pytest

from cast_backbones import policy_classes
from cast_backbones.tiny import TINY_PIPELINES

POLICIES = policy_classes()
NAMES = tuple(POLICIES)
SIZE = (32, 32)


def tiny_pipeline(name, seed=0):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return TINY_PIPELINES[name](seed)


def tiny_policy(name, seed=0, **options):
    """The policy around a fresh tiny pipeline (same seed = same weights as tiny_pipeline)."""
    options.setdefault("image_size", SIZE)
    return POLICIES[name].from_pipeline(tiny_pipeline(name, seed), **options)


def pipeline_kwargs(name, batch):
    """What makes the pipeline guide as the policy does by default (Qwen's CFG needs a
    negative prompt; FLUX.2's pipelines use their own defaults)."""
    return {"negative_prompt": [" "] * batch, "true_cfg_scale": 4.0} if name == "qwen-image" else {}


@pytest.fixture(params=NAMES)
def name(request):
    return request.param

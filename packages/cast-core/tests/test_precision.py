"""Mixed precision: what autocasts, what refuses, and the config agreeing with the module."""

import dataclasses

import pytest
import torch

from cast_core.config import TrainConfig
from cast_core.precision import PRECISIONS, autocast, bf16_is_fast


def test_bf16_autocasts_matmuls_and_no_leaves_float32():
    a, b = torch.randn(4, 8), torch.randn(8, 3)
    with autocast("bf16", "cpu"):
        assert (a @ b).dtype == torch.bfloat16
    with autocast("no", "cpu"):
        assert (a @ b).dtype == torch.float32
    assert (a @ b).dtype == torch.float32  # nothing leaks out of the context


def test_unknown_precision_is_refused_with_the_choices():
    with pytest.raises(ValueError, match=r"precision must be one of \('no', 'bf16'\), got 'fp16'"):
        autocast("fp16")


def test_config_offers_exactly_the_precisions_the_module_implements():
    field = next(f for f in dataclasses.fields(TrainConfig) if f.name == "precision")
    assert tuple(field.metadata["choices"]) == PRECISIONS


def test_bf16_is_fast_answers_a_bool_and_no_for_unknown_devices():
    assert isinstance(bf16_is_fast("cpu"), bool)
    assert bf16_is_fast("meta") is False

"""Shared fixtures for cast-shapes tests."""

import pytest
import torch

from cast_shapes.checkpoint_io import save_net
from cast_shapes.model import ShapesModelConfig, ShapesNet


@pytest.fixture(scope="session")
def random_weights(tmp_path_factory):
    """A randomly initialised shapes network saved like the shipped weights (fast, no training)."""
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("w") / "random.safetensors"
    save_net(ShapesNet(ShapesModelConfig()), path)
    return path

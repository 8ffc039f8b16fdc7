"""Shared fixtures."""

import pytest

from tiny_clip import make_tiny_clip


@pytest.fixture
def tiny_clip():
    """A tiny randomly initialised open_clip model (see tiny_clip.py)."""
    return make_tiny_clip()

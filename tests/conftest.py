"""Shared fixtures: tiny configs that build in milliseconds, and fresh registries."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import zoo

# `make test` runs two workers on two cores: one thread each avoids oversubscription.
torch.set_num_threads(1)

# Small enough for every test to build many models; big enough to have heads and layers.
TINY: dict[str, Any] = dict(
    vocab_size=97, max_seq_len=64, d_model=32, n_layers=2, n_heads=4, dropout=0.0
)


def tiny(name: str = "gpt2-small", **overrides: Any) -> zoo.DecoderLM:
    """Preset ``name`` shrunk to TINY sizes, with overrides, seeded."""
    torch.manual_seed(0)
    return zoo.build(name, **{**TINY, **overrides}).eval()


@pytest.fixture
def tiny_model() -> zoo.DecoderLM:
    return tiny()


@pytest.fixture
def fresh_registry() -> zoo.Registry:
    """A registry of the built-ins only, independent of installed plugins."""
    return zoo.Registry(entry_points=False)

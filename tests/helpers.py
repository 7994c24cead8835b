"""Helpers shared by the test modules: tiny configs that build in milliseconds.

Imported as ``from helpers import TINY, tiny`` (pytest puts tests/ on sys.path);
fixtures live in conftest.py, plain helpers here.
"""

from __future__ import annotations

from typing import Any

import torch

import zoo

# Small enough for every test to build many models; big enough to have heads and layers.
TINY: dict[str, Any] = dict(vocab_size=97, max_seq_len=64, d_model=32, n_layers=2, n_heads=4, dropout=0.0)


def tiny(name: str = "gpt2-small", **overrides: Any) -> zoo.DecoderLM:
    """Preset ``name`` shrunk to TINY sizes, with overrides, seeded."""
    torch.manual_seed(0)
    return zoo.build(name, **{**TINY, **overrides}).eval()

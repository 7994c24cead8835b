"""Shared fixtures. Plain helpers (TINY, tiny) live in tests/helpers.py."""

from __future__ import annotations

import pytest
import torch

import zoo
from helpers import tiny

# `make test` runs two workers on two cores: one thread each avoids oversubscription.
torch.set_num_threads(1)


@pytest.fixture
def tiny_model() -> zoo.DecoderLM:
    return tiny()

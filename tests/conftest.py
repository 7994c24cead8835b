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


@pytest.fixture(autouse=True)
def _wandb_leaves_no_settings() -> object:
    """W&B keeps its settings (the mode, the key, the project) in a process-wide singleton:
    a test that ran it online or without a key would make a later offline run fail. Every
    test that ran it leaves a fresh one."""
    yield
    import sys

    wandb = sys.modules.get("wandb")
    if wandb is not None:
        wandb.teardown()

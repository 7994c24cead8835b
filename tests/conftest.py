"""Shared fixtures. Plain helpers (TINY, tiny) live in tests/helpers.py."""

from __future__ import annotations

import gc
from types import ModuleType

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


_frozen_for: list[ModuleType | None] = [None]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before each test module's first test (ahead of its fixtures), what is alive by then
    (torch, transformers, pytest's items, earlier modules' caches) is collected once and
    moved out of the collector's way (``gc.freeze``, as the ``zoo`` command does after its
    imports, zoo/_startup.py). Late in a full run a worker holds millions of long-lived
    objects that every full collection walked (about 3 s each, many in dynamo's tracing);
    what the module's own tests and fixtures make is collected as always."""
    module = getattr(item, "module", None)
    if module is not _frozen_for[0]:
        _frozen_for[0] = module
        gc.collect()
        gc.freeze()

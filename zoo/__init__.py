"""zoo: a plugin-based model zoo for transformer language models.

    import zoo
    model = zoo.build("gpt2-small")                     # exactly GPT-2 Small
    model = zoo.build("gpt2-small", placement="post",   # ... moved toward 2017
                      position="sinusoidal", activation="relu")
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

from zoo.factory import build
from zoo.config import ModelConfig, get_config
from zoo.contracts import AttentionContext, Placement, PositionEncoding, residual_output
from zoo.errors import *  # noqa: F403  ZooError and its subclasses, listed in zoo.errors.__all__
from zoo.errors import __all__ as _ERRORS
from zoo.hookspecs import hookimpl
from zoo.model import DecoderLM, check_inputs
from zoo.plugins.attention import Attention, EagerAttention, SdpaAttention
from zoo.seq2seq import EncoderDecoder
from zoo.registry import KINDS, Component, Registry, default_registry


def list_models(pattern: str = "*", *, registry: Registry | None = None) -> list[str]:
    """Names of the presets matching an fnmatch ``pattern`` (``"gpt2-*"``), sorted."""
    return (registry or default_registry()).preset_names(pattern)


def components(kind: str | None = None, *, registry: Registry | None = None) -> list[Component]:
    """Registered components (of one ``kind``, or all), with who provided each."""
    return (registry or default_registry()).components(kind)


# Heavier parts load on first use, so `import zoo` stays quick.
_LAZY = {
    "save": "zoo.checkpoint",
    "load": "zoo.checkpoint",
    "versions": "zoo.checkpoint",
    "from_hf": "zoo.interop.hf",
    "to_hf": "zoo.interop.hf",
    "generate_text": "zoo.generate",
    "tokenizer": "zoo.text",
    "summarize": "zoo.summary",
    "train": "zoo.training",
    "evaluate": "zoo.training",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'zoo' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = [
    "__version__",
    "build",
    "get_config",
    "list_models",
    "components",
    "ModelConfig",
    "DecoderLM",
    "EncoderDecoder",
    "Registry",
    "Component",
    "KINDS",
    "hookimpl",
    "AttentionContext",
    "PositionEncoding",
    "Placement",
    "residual_output",
    "check_inputs",
    "Attention",
    "SdpaAttention",
    "EagerAttention",
    *_LAZY,
    *_ERRORS,
]

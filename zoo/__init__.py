"""zoo: a plugin-based model zoo for transformer language models.

import zoo
model = zoo.build("gpt2-small")                     # exactly GPT-2 Small
model = zoo.build("gpt2-small", placement="post",   # ... moved toward 2017
                  position="sinusoidal", activation="relu")

Every name but the errors and the version loads on first use (``zoo._lazy``): ``import
zoo`` imports no torch, so ``zoo --help`` starts at once, and ``zoo.build`` brings in
what it needs when it is first called.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

from zoo._lazy import lazy_names
from zoo._version import __version__

# zoo needs no NumPy (checkpoints are written and hashed without it); without NumPy
# installed, torch warns about it on import, which every zoo command would print.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy", category=UserWarning)

from zoo.errors import *  # noqa: F403  ZooError and its subclasses, listed in zoo.errors.__all__
from zoo.errors import __all__ as _ERRORS

if TYPE_CHECKING:  # the lazily loaded names below, as type checkers and IDEs see them (re-exported)
    from zoo.api import build as build
    from zoo.api import components as components
    from zoo.api import list_models as list_models
    from zoo.checkpoint import load as load
    from zoo.checkpoint import save as save
    from zoo.checkpoint import versions as versions
    from zoo.harness import evaluate_tasks as evaluate_tasks
    from zoo.interop.hf import from_hf as from_hf
    from zoo.interop.hf import from_pretrained as from_pretrained
    from zoo.interop.hf import to_hf as to_hf
    from zoo.interop.nanogpt import from_nanogpt as from_nanogpt
    from zoo.nn.attention import Attention as Attention
    from zoo.nn.attention import AttentionContext as AttentionContext
    from zoo.nn.attention import EagerAttention as EagerAttention
    from zoo.nn.attention import SdpaAttention as SdpaAttention
    from zoo.nn.config import ModelConfig as ModelConfig
    from zoo.nn.config import get_config as get_config
    from zoo.nn.contracts import CrossAttention as CrossAttention
    from zoo.nn.contracts import Placement as Placement
    from zoo.nn.contracts import PositionEncoding as PositionEncoding
    from zoo.nn.converter import Converter as Converter
    from zoo.nn.converter import Count as Count
    from zoo.nn.converter import Epsilon as Epsilon
    from zoo.nn.converter import Fraction as Fraction
    from zoo.nn.converter import HFFields as HFFields
    from zoo.nn.converter import Positive as Positive
    from zoo.nn.converter import RopeTable as RopeTable
    from zoo.nn.converter import Rule as Rule
    from zoo.nn.hookspecs import RegisterComponent as RegisterComponent
    from zoo.nn.hookspecs import RegisterConverter as RegisterConverter
    from zoo.nn.hookspecs import RegisterPreset as RegisterPreset
    from zoo.nn.hookspecs import hookimpl as hookimpl
    from zoo.nn.inputs import check_inputs as check_inputs
    from zoo.nn.marks import residual_output as residual_output
    from zoo.nn.model import DecoderLM as DecoderLM
    from zoo.nn.registry import KINDS as KINDS
    from zoo.nn.registry import Component as Component
    from zoo.nn.registry import Registry as Registry
    from zoo.nn.registry import default_registry as default_registry
    from zoo.nn.seq2seq import EncoderDecoder as EncoderDecoder
    from zoo.pipelines import generate_text as generate_text
    from zoo.summary import summarize as summarize
    from zoo.text.loading import tokenizer as tokenizer
    from zoo.training import train as train
    from zoo.training.evaluate import (
        evaluate as evaluate,  # re-exported  (zoo.training.evaluate is also a module's name)
    )

# Every part loads on first use, so `import zoo` stays quick and imports no torch.
_LAZY = {
    "build": "zoo.api",
    "list_models": "zoo.api",
    "components": "zoo.api",
    "get_config": "zoo.nn.config",
    "ModelConfig": "zoo.nn.config",
    "DecoderLM": "zoo.nn.model",
    "EncoderDecoder": "zoo.nn.seq2seq",
    "Registry": "zoo.nn.registry",
    "Component": "zoo.nn.registry",
    "KINDS": "zoo.nn.registry",
    "hookimpl": "zoo.nn.hookspecs",
    "RegisterComponent": "zoo.nn.hookspecs",
    "RegisterPreset": "zoo.nn.hookspecs",
    "RegisterConverter": "zoo.nn.hookspecs",
    "AttentionContext": "zoo.nn.attention",
    "Attention": "zoo.nn.attention",
    "SdpaAttention": "zoo.nn.attention",
    "EagerAttention": "zoo.nn.attention",
    "PositionEncoding": "zoo.nn.contracts",
    "Placement": "zoo.nn.contracts",
    "CrossAttention": "zoo.nn.contracts",
    "residual_output": "zoo.nn.marks",
    "check_inputs": "zoo.nn.inputs",
    "save": "zoo.checkpoint",
    "load": "zoo.checkpoint",
    "versions": "zoo.checkpoint",
    "from_hf": "zoo.interop.hf",
    "to_hf": "zoo.interop.hf",
    "from_pretrained": "zoo.interop.hf",
    "from_nanogpt": "zoo.interop.nanogpt",
    "Converter": "zoo.nn.converter",
    "Rule": "zoo.nn.converter",
    "HFFields": "zoo.nn.converter",  # a converter's config.json schema and its field types
    "Count": "zoo.nn.converter",
    "Epsilon": "zoo.nn.converter",
    "Fraction": "zoo.nn.converter",
    "Positive": "zoo.nn.converter",
    "RopeTable": "zoo.nn.converter",
    "generate_text": "zoo.pipelines",
    "tokenizer": "zoo.text.loading",
    "summarize": "zoo.summary",
    "train": "zoo.training",
    "evaluate": "zoo.training",
    "evaluate_tasks": "zoo.harness",  # lm-evaluation-harness (the eval extra)
}


# Names reachable as zoo.NAME without being part of `from zoo import *`.
_UNLISTED = {"default_registry": "zoo.nn.registry"}

__getattr__, __dir__ = lazy_names(__name__, {**_LAZY, **_UNLISTED})


__all__ = [
    "__version__",
    *_LAZY,
    *_ERRORS,
]

"""zoo: a plugin-based model zoo for transformer language models.

import zoo
model = zoo.build("gpt2-small")                     # exactly GPT-2 Small
model = zoo.build("gpt2-small", placement="post",   # ... moved toward 2017
                  position="sinusoidal", activation="relu")
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from zoo._lazy import lazy_names
from zoo._version import __version__

# zoo needs no NumPy (checkpoints are written and hashed without it); without NumPy
# installed, torch warns about it on import, which every zoo command would print.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy", category=UserWarning)

import torch

from zoo import decoding as _decoding  # noqa: F401  registers the decode loop behind DecoderLM.generate
from zoo.errors import *  # noqa: F403  ZooError and its subclasses, listed in zoo.errors.__all__
from zoo.errors import ConfigError, checked_types
from zoo.errors import __all__ as _ERRORS
from zoo.errors import check_flag as _check_flag
from zoo.nn.attention import Attention, AttentionContext, EagerAttention, SdpaAttention
from zoo.nn.config import ModelConfig, get_config
from zoo.nn.contracts import CrossAttention, Placement, PositionEncoding
from zoo.nn.factory import build as _build
from zoo.nn.generation import provide_tokenizer as _provide_tokenizer
from zoo.nn.hookspecs import RegisterComponent, RegisterConverter, RegisterPreset, hookimpl
from zoo.nn.inputs import check_inputs
from zoo.nn.marks import residual_output
from zoo.nn.model import DecoderLM
from zoo.nn.registry import KINDS, Component, Registry, default_registry
from zoo.nn.seq2seq import EncoderDecoder


def _carried_tokenizer(model: torch.nn.Module) -> Any:
    from zoo.pipelines import carried_tokenizer

    return carried_tokenizer(model)


_provide_tokenizer(_carried_tokenizer)  # model.tokenizer loads what its tokenizer_record names


@checked_types()
def build(
    name_or_config: str | ModelConfig | Mapping[str, Any],
    *,
    pretrained: bool = False,
    revision: str | None = None,
    device: torch.device | str | None = None,
    dtype: torch.dtype | str | None = None,
    registry: Registry | None = None,
    **overrides: Any,
) -> DecoderLM | EncoderDecoder:
    """Build a model from a preset name, a config or a mapping, with overrides.

    ``zoo.build("gpt2-small", placement="post", position="sinusoidal",
    activation="relu")`` swaps components; ``attention={"name": "eager"}`` passes a
    component with options. ``device="meta"`` builds the structure only.

    ``pretrained=True`` loads the weights the preset names (``zoo list`` shows which do;
    ``revision`` picks their branch, tag or commit) from the hub cache, after checking
    that their config is the preset's, and returns the model in eval mode; overrides
    may then change only dropout and the attention kernel.
    """
    _check_flag(pretrained, "pretrained", "; for a hub id use zoo.from_pretrained")
    if pretrained:
        from zoo.interop.pretrained import build_pretrained

        return build_pretrained(
            name_or_config, revision=revision, device=device, dtype=dtype, registry=registry, overrides=overrides
        )
    if revision is not None:
        raise ConfigError("revision= picks the version of pretrained weights; pass it with pretrained=True")
    return _build(name_or_config, device=device, dtype=dtype, registry=registry, **overrides)


@checked_types()
def list_models(pattern: str = "*", *, registry: Registry | None = None) -> list[str]:
    """Names of the presets matching an fnmatch ``pattern`` (``"gpt2-*"``), sorted."""
    return (registry or default_registry()).preset_names(pattern)


@checked_types()
def components(kind: str | None = None, *, registry: Registry | None = None) -> list[Component]:
    """Registered components (of one ``kind``, or all), with who provided each."""
    return (registry or default_registry()).components(kind)


if TYPE_CHECKING:  # the lazily loaded names below, as type checkers and IDEs see them (re-exported)
    from zoo.checkpoint import load as load
    from zoo.checkpoint import save as save
    from zoo.checkpoint import versions as versions
    from zoo.harness import evaluate_tasks as evaluate_tasks
    from zoo.interop.hf import from_hf as from_hf
    from zoo.interop.hf import from_pretrained as from_pretrained
    from zoo.interop.hf import to_hf as to_hf
    from zoo.interop.nanogpt import from_nanogpt as from_nanogpt
    from zoo.nn.converter import Converter as Converter
    from zoo.nn.converter import Count as Count
    from zoo.nn.converter import Epsilon as Epsilon
    from zoo.nn.converter import Fraction as Fraction
    from zoo.nn.converter import HFFields as HFFields
    from zoo.nn.converter import Positive as Positive
    from zoo.nn.converter import RopeTable as RopeTable
    from zoo.nn.converter import Rule as Rule
    from zoo.pipelines import generate_text as generate_text
    from zoo.summary import summarize as summarize
    from zoo.text.loading import tokenizer as tokenizer
    from zoo.training import train as train
    from zoo.training.evaluate import (
        evaluate as evaluate,  # re-exported  (zoo.training.evaluate is also a module's name)
    )

# Heavier parts load on first use, so `import zoo` stays quick.
_LAZY = {
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


__getattr__, __dir__ = lazy_names(__name__, _LAZY)


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
    "RegisterComponent",
    "RegisterPreset",
    "RegisterConverter",
    "AttentionContext",
    "PositionEncoding",
    "Placement",
    "CrossAttention",
    "residual_output",
    "check_inputs",
    "Attention",
    "SdpaAttention",
    "EagerAttention",
    *_LAZY,
    *_ERRORS,
]

"""The functions ``import zoo`` names at its top: ``build`` (a preset, a config or a
mapping, with the preset's pretrained weights on request), ``list_models`` and
``components``. ``zoo/__init__.py`` loads this module on first use, so that ``import
zoo`` and ``zoo --help`` import no torch."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from zoo.errors import ConfigError, checked_types
from zoo.errors import check_flag as _check_flag
from zoo.nn.config import ModelConfig
from zoo.nn.factory import build as _build
from zoo.nn.model import DecoderLM
from zoo.nn.registry import Component, Registry, default_registry
from zoo.nn.seq2seq import EncoderDecoder

__all__ = ["build", "components", "list_models"]


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

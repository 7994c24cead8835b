"""The one door for plugins: everything a component, preset or converter package needs.

The zoo's built-in plugins (``zoo.plugins``) import this module and nothing else of the
zoo, as a third-party package does (an import-linter contract holds them to it)::

    from zoo.plugin import RegisterComponent, hookimpl, residual_output

    @hookimpl
    def zoo_register_components(register: RegisterComponent) -> None:
        register("mlp", "mine", MyMLP)

and the package names its module under the ``zoo`` entry-point group. What each kind
promises is in ``zoo.nn.contracts``; what a converter promises, in ``zoo.nn.converter``.
"""

from __future__ import annotations

from zoo.errors import *  # noqa: F403  the ZooError tree, for plugins' own refusals
from zoo.errors import __all__ as _ERRORS
from zoo.nn.attention import (
    MASKED,
    Attention,
    AttentionContext,
    AttentionOptions,
    EagerAttention,
    LayerPoints,
    SdpaAttention,
    check_kv_heads,
)
from zoo.nn.cache import KVCache, LayerCache
from zoo.nn.config import ModelConfig
from zoo.nn.contracts import (
    COMPONENT_KINDS,
    CONFIG_ARGUMENTS,
    CrossAttention,
    Placement,
    PositionEncoding,
)
from zoo.nn.converter import (
    KERNELS,
    MAX_EXPERTS,
    Converter,
    Count,
    Epsilon,
    Experts,
    Fraction,
    HFFields,
    Layers,
    Positive,
    RopeTable,
    Rule,
    refuse,
)
from zoo.nn.family import REQUIRED, F, Family, W, builtin_family, converter, linear, zoo_value
from zoo.nn.hookspecs import RegisterComponent, RegisterConverter, RegisterPreset, hookimpl
from zoo.nn.marks import SCALES_WITH, SHOWN, hook_point, is_residual_output, is_stacked, residual_output, stacked

__all__ = [
    # registering
    "hookimpl",
    "RegisterComponent",
    "RegisterPreset",
    "RegisterConverter",
    # what components are and use
    "CONFIG_ARGUMENTS",
    "COMPONENT_KINDS",
    "ModelConfig",
    "PositionEncoding",
    "Placement",
    "CrossAttention",
    "Attention",
    "AttentionOptions",
    "SdpaAttention",
    "EagerAttention",
    "AttentionContext",
    "LayerPoints",
    "MASKED",
    "check_kv_heads",
    "SCALES_WITH",
    "SHOWN",
    "KVCache",
    "LayerCache",
    "residual_output",
    "is_residual_output",
    "stacked",
    "is_stacked",
    "hook_point",
    # converters
    "Converter",
    "Rule",
    "HFFields",
    "Count",
    "Experts",
    "Layers",
    "MAX_EXPERTS",
    "Epsilon",
    "Fraction",
    "Positive",
    "RopeTable",
    "KERNELS",
    "refuse",
    # families as tables (zoo.nn.family)
    "REQUIRED",
    "F",
    "Family",
    "W",
    "builtin_family",
    "converter",
    "linear",
    "zoo_value",
    *_ERRORS,
]

"""The plugin module named by the entry point: what zoo-modern contributes, and under which names.

zoo imports this module when a ``Registry`` is created (unless plugin control skips
it), registers it with pluggy, and calls the registering hooks below with a ``register``
callback that records this distribution as the provider of everything registered; a
checkpoint of an older format calls ``zoo_migrate_checkpoint``.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

import zoo.plugin
from zoo_modern import (
    activations,
    deltanet,
    diff_attention,
    local_attention,
    mamba,
    mamba2,
    migrations,
    mla,
    mlp,
    moe,
    norms,
    placement,
    qknorm,
    short_conv,
)
from zoo_modern.attention import GqaOptions, check_gqa, gqa
from zoo_modern.families import CONVERTERS as TABLES
from zoo_modern.families import PRESETS
from zoo_modern.mlp import SwiGluOptions, swiglu
from zoo_modern.placement import Parallel, SandwichNorm
from zoo_modern.positions import ALiBi, Rotary, SinusoidalHalves, check_halves, check_rotary


@zoo.plugin.hookimpl
def zoo_register_components(register: zoo.plugin.RegisterComponent) -> None:
    register("position", "rotary", Rotary, check=check_rotary)
    register("position", "alibi", ALiBi)
    register("position", "sinusoidal_halves", SinusoidalHalves, check=check_halves)
    register("mlp", "swiglu", swiglu, SwiGluOptions)
    register("attention", "gqa", gqa, GqaOptions, check=check_gqa)
    register("placement", "sandwich", SandwichNorm)
    register("placement", "parallel", Parallel)  # decoder-only: its block takes no cross-attention
    for module in (qknorm, mlp, norms, placement):  # modern: qknorm, glu, rmsnorm_offset, post_sublayer
        module.register_components(register)
    activations.register_components(register)  # relu2 (Nemotron, Arcee, Jais 2), xielu
    for module in (
        local_attention,
        short_conv,
        mamba2,
        mamba,
        mla,
        deltanet,
        diff_attention,
    ):  # sinks, chunked, conv, scans, latent, delta, diff
        module.register_components(register)
    moe.register_components(register)


@zoo.plugin.hookimpl
def zoo_register_presets(register: zoo.plugin.RegisterPreset) -> None:
    presets = resources.files("zoo_modern") / "presets"
    for name in PRESETS:
        register(name, presets / f"{name}.toml")


@zoo.plugin.hookimpl
def zoo_register_converters(register: zoo.plugin.RegisterConverter) -> None:
    for converter in TABLES:
        register(converter)


@zoo.plugin.hookimpl
def zoo_migrate_checkpoint(
    metadata: dict[str, str], tensors: dict[str, Any], from_format: int
) -> tuple[dict[str, str], dict[str, Any]] | None:
    return migrations.stack_experts(metadata, tensors, from_format)  # 1 -> 2: an MoE's experts stacked

"""The plugin module named by the entry point: what zoo-modern contributes, and under which names.

zoo imports this module when a ``Registry`` is created (unless plugin control skips
it), registers it with pluggy, and calls the two hooks below with a ``register``
callback that records this distribution as the provider of everything registered.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

import zoo
from zoo_modern.attention import GqaOptions, check_gqa, gqa
from zoo_modern.mlp import SwiGluOptions, swiglu
from zoo_modern.placement import SandwichNorm
from zoo_modern.positions import ALiBi, Rotary, check_rotary


@zoo.hookimpl
def zoo_register_components(register: Any) -> None:
    register("position", "rotary", Rotary, check=check_rotary)
    register("position", "alibi", ALiBi)
    register("mlp", "swiglu", swiglu, SwiGluOptions)
    register("attention", "gqa", gqa, GqaOptions, check=check_gqa)
    register("placement", "sandwich", SandwichNorm)


@zoo.hookimpl
def zoo_register_presets(register: Any) -> None:
    presets = resources.files("zoo_modern") / "presets"
    register("gpt2-small-modern", presets / "gpt2-small-modern.toml")

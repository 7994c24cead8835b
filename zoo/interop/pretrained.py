"""Presets with weights: ``zoo.build("gpt2-small", pretrained=True)``.

A preset names the hub id of its released weights (``[preset] pretrained`` in its TOML
file, or in a plugin's preset mapping). Building it with ``pretrained=True`` resolves
the id through the hub cache, imports it with the family's converter, and checks that
the hub's ``config.json`` describes exactly the preset's model (a mismatch names the
field) before the weights are loaded into the preset's config. Overrides that would
change what the weights mean (sizes, components) are refused; dropout and the
attention kernel may change.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from zoo.errors import ConfigError, InteropError, PresetError
from zoo.files import read_json
from zoo.interop.hf import converter_for, from_hf
from zoo.interop.hub import check_revision, local_or_snapshot
from zoo.nn.config import ModelConfig, apply_overrides, preset_dict, preset_pretrained, validate_config
from zoo.nn.converter import KERNELS, engine_blockers
from zoo.nn.factory import build, device_arg, dtype_arg, reset_buffers
from zoo.nn.model import DecoderLM
from zoo.nn.registry import Registry, default_registry

__all__ = ["build_pretrained", "config_mismatches", "pretrained_presets"]

# Config fields that do not change what trained weights compute at inference.
FREE_FIELDS = ("dropout", "init")


def pretrained_presets(registry: Registry | None = None) -> dict[str, str]:
    """Preset name -> hub id of its weights, for the presets that name weights."""
    registry = registry or default_registry()
    found = {name: preset_pretrained(name, registry) for name in registry.preset_names()}
    return {name: repo for name, repo in found.items() if repo}


def build_pretrained(
    name: object,
    *,
    revision: str | None = None,
    device: torch.device | str | None = None,
    dtype: torch.dtype | str | None = None,
    registry: Registry | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> DecoderLM:
    """Preset ``name`` with its released weights, in eval mode (see the module)."""
    registry = registry or default_registry()
    check_revision(revision)
    if not isinstance(name, str):
        raise ConfigError(
            f"pretrained=True takes a preset name whose preset names its weights, got a {type(name).__name__}; "
            f"for a hub id or a folder, use zoo.from_pretrained(ID)"
        )
    repo = preset_pretrained(name, registry)
    if repo is None:
        preset_dict(name, registry)  # an unknown name: the registry's error, with a did-you-mean
        with_weights = ", ".join(sorted(pretrained_presets(registry))) or "none"
        raise PresetError(
            f"preset {name!r} names no weights, so pretrained=True has nothing to load; presets with weights: "
            f"{with_weights} (`zoo list` shows them). Build it with random weights (pretrained=False)"
        )
    target_dtype, target_device = dtype_arg(dtype), device_arg(device)
    kernel = _check_overrides(name, repo, dict(overrides or {}))
    base = preset_dict(name, registry)
    preset = validate_config(base, registry=registry, source=f"config for preset {name!r}")
    final = validate_config(
        apply_overrides(base, overrides or {}), registry=registry, source=f"preset {name!r} with overrides"
    )
    folder, _ = local_or_snapshot(repo, revision)
    imported = from_hf(folder, dtype=target_dtype, attention=kernel, registry=registry)
    hf = read_json(folder / "config.json", InteropError, "config.json")
    mismatches = config_mismatches(preset, imported.config, hf, registry)
    if mismatches:
        raise InteropError(
            f"preset {name!r} names the weights {repo!r}, but their config.json differs from the preset in "
            f"{'; '.join(mismatches)}. Fix the preset's fields (or its pretrained id) so both describe one model"
        )
    model = build(final, device="meta", registry=registry)
    assert isinstance(model, DecoderLM)  # the preset matches a decoder's config.json
    model.load_state_dict(imported.state_dict(), strict=True, assign=True)
    model.tie_weights()
    reset_buffers(model)
    model.tokenizer_record = imported.tokenizer_record
    return model.to(target_device or "cpu").eval()


def _check_overrides(name: str, repo: str, overrides: dict[str, Any]) -> str:
    """The attention kernel the overrides ask for; any override that changes what the
    weights compute (a size, a component, an option) is refused."""
    kernel = "sdpa"
    attention = overrides.pop("attention", None)
    if attention is not None:
        spec = {"name": attention} if isinstance(attention, str) else attention
        if isinstance(spec, Mapping) and set(spec) == {"name"} and spec["name"] in KERNELS:
            kernel = str(spec["name"])
        else:
            overrides["attention"] = attention
    changed = sorted(key for key in overrides if key not in FREE_FIELDS)
    if changed:
        raise ConfigError(
            f"pretrained=True loads {repo!r} into preset {name!r} as it is, but the override(s) "
            f"{', '.join(changed)} would change the model's shapes or what its weights compute; only "
            f"{', '.join(FREE_FIELDS)} and attention={'|'.join(map(repr, KERNELS))} may change. Drop them, "
            f"or build with random weights (pretrained=False)"
        )
    return kernel


def config_mismatches(
    preset: ModelConfig, imported: ModelConfig, hf: Mapping[str, Any], registry: Registry | None = None
) -> list[str]:
    """Where the preset and an imported config describe different models, one phrase per
    field. The preset is first written the way the family's converter writes it (GPT-NeoX
    stores rotary as a fraction, the zoo may hold dimensions), so only meaning counts."""
    registry = registry or default_registry()
    converter = converter_for(hf, registry=registry)
    expressed = preset
    if converter.exports and not converter.blockers(preset) + engine_blockers(converter, preset):
        fields = converter.config_from_hf(converter.config_to_hf(preset), "the preset")
        try:
            expressed = validate_config(fields, registry=registry, source="the preset")
        except ConfigError:
            expressed = preset
    mine, theirs = _comparable(expressed), _comparable(imported)
    return [
        f"{key} (the preset has {_shown(mine.get(key))}, the weights' config {_shown(theirs.get(key))})"
        for key in sorted(set(mine) | set(theirs))
        if mine.get(key) != theirs.get(key)
    ]


def _comparable(config: ModelConfig) -> dict[str, Any]:
    data = config.model_dump(exclude=set(FREE_FIELDS))
    attention = dict(data["attention"])
    if attention.get("name") in KERNELS:  # the kernel is not the model
        attention["name"] = "sdpa"
    attention.pop("kernel", None)
    data["attention"] = attention
    return data


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."

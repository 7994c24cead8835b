"""The built-in presets: every ``*.toml`` file in ``zoo.presets``."""

from __future__ import annotations

from importlib import resources

from zoo.plugin import RegisterPreset, hookimpl


@hookimpl
def zoo_register_presets(register: RegisterPreset) -> None:
    for entry in sorted(resources.files("zoo.presets").iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".toml"):
            register(entry.name.removesuffix(".toml"), entry)

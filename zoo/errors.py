"""The zoo's errors: one root, one subclass per area.

Every message says what went wrong, where (file, plugin, key) and how to fix it, so
callers can catch ``ZooError`` and show ``str(err)`` to a person as it is.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = [
    "ZooError",
    "ConfigError",
    "InputError",
    "PresetError",
    "RegistryError",
    "UnknownComponentError",
    "DuplicateComponentError",
    "PluginError",
    "CheckpointError",
    "InteropError",
]


class ZooError(Exception):
    """Root of every error the zoo raises on purpose."""


class ConfigError(ZooError, ValueError):
    """A model config is invalid: a field is out of range or two fields disagree."""


class InputError(ZooError, ValueError):
    """Input to a model is malformed: wrong shape or dtype, or a token outside the vocabulary."""


class PresetError(ZooError):
    """A preset is unknown, or its TOML file cannot be read or validated."""


class RegistryError(ZooError):
    """A component lookup or registration failed."""


def did_you_mean(name: str, choices: Iterable[str], *, n: int = 3, cutoff: float = 0.5) -> str:
    """`` Did you mean 'x' or 'y'?`` for up to ``n`` choices close to ``name``, else ``""``."""
    close = difflib.get_close_matches(name, list(choices), n=n, cutoff=cutoff)
    return f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""


class UnknownComponentError(RegistryError):
    """No component of this kind has this name; the message suggests close names."""

    def __init__(self, kind: str, name: str, available: Iterable[str], hint: str = "") -> None:
        names = sorted(available)
        guess = did_you_mean(name, names)
        listing = ", ".join(names) if names else "none are registered"
        super().__init__(
            f"unknown {kind} component {name!r}.{guess} Available {kind} components: {listing}."
            f"{hint}"
        )
        self.kind, self.name, self.available = kind, name, names


class DuplicateComponentError(RegistryError):
    """Two plugins registered the same (kind, name)."""


class PluginError(ZooError):
    """A plugin failed to import or to register; names the plugin and its distribution."""


class CheckpointError(ZooError):
    """A checkpoint cannot be written, or is damaged, incompatible or incomplete."""


class InteropError(ZooError):
    """A foreign model (Hugging Face layout) cannot be converted exactly."""

"""The zoo's errors: one root, one subclass per area.

Every message says what went wrong, where (file, plugin, key) and how to fix it, so
callers can catch ``ZooError`` and show ``str(err)`` to a person as it is.
"""

from __future__ import annotations

import difflib
import re
import shlex
from collections.abc import Iterable

__all__ = [
    "ZooError",
    "ConfigError",
    "DivergenceError",
    "InputError",
    "PresetError",
    "RegistryError",
    "UnknownComponentError",
    "DuplicateComponentError",
    "PluginError",
    "CheckpointError",
    "InteropError",
    "HookError",
    "DistributedError",
]

#: The name ``pip install`` knows this package by (the import name is ``zoo``).
DISTRIBUTION = "zoo-lm"

#: Longest text from a file that a message shows in full.
SHOWN_LIMIT = 120

# PEP 508 distribution names, optionally with a PEP 440-ish version pin.
_DISTRIBUTION_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,98}[A-Za-z0-9])?")
_VERSION = re.compile(r"[0-9A-Za-z.+!_-]{1,40}")


class ZooError(Exception):
    """Root of every error the zoo raises on purpose."""


class ConfigError(ZooError, ValueError):
    """A model config is invalid: a field is out of range or two fields disagree."""


class DivergenceError(ConfigError):
    """Training diverged: the loss became NaN or infinite. A ``ConfigError`` because the
    fix is a setting (a lower learning rate, a longer warmup); the learning-rate sweep of
    an ablation catches this one alone, as the mark of a rate too high."""


class InputError(ZooError, ValueError):
    """Input to a model is malformed: wrong shape or dtype, or a token outside the vocabulary."""


class PresetError(ZooError):
    """A preset is unknown, or its TOML file cannot be read or validated."""


class RegistryError(ZooError):
    """A component lookup or registration failed."""


def printable(text: object, limit: int | None = SHOWN_LIMIT) -> str:
    """``text`` safe to show a person: control and other unprintable characters (ANSI
    and OSC escape sequences, bidi overrides, newlines) as their ``\\x1b`` escapes, and
    at most ``limit`` characters (the rest counted, not shown).

    Strings read from files (component and distribution names, user metadata) go
    through this before they reach a message or the terminal.
    """
    text = str(text)
    if limit is not None and len(text) > limit:
        text = f"{text[:limit]}… ({len(text) - limit:,} more characters)"
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def quoted(text: object, limit: int | None = SHOWN_LIMIT) -> str:
    """``'text'``: ``repr`` of a string, clipped to ``limit`` characters (see ``printable``)."""
    if not isinstance(text, str):
        return printable(repr(text), limit)
    if limit is not None and len(text) > limit:
        return repr(text[:limit]) + f"… ({len(text) - limit:,} more characters)"
    return repr(text)


def command(*words: object) -> str:
    """A command for a person to paste, in backticks: ``shlex.join`` of ``words``, so a
    value from a file (a revision ``main&&curl x|sh``, a path with spaces) comes back
    quoted, then made ``printable``. Every command a message shows is built here."""
    return f"`{printable(shlex.join(str(word) for word in words), None)}`"


def is_distribution_name(name: object) -> bool:
    """Whether ``name`` is a valid distribution name (PEP 508)."""
    return isinstance(name, str) and _DISTRIBUTION_NAME.fullmatch(name) is not None


def is_version(text: object) -> bool:
    """Whether ``text`` looks like a version string (no spaces, quotes or controls)."""
    return isinstance(text, str) and _VERSION.fullmatch(text) is not None


def did_you_mean(name: str, choices: Iterable[str], *, n: int = 3, cutoff: float = 0.5) -> str:
    """`` Did you mean 'x' or 'y'?`` for up to ``n`` choices close to ``name``, else ``""``."""
    if len(name) > 200:  # difflib on a very long (likely hostile) name is slow and pointless
        return ""
    close = difflib.get_close_matches(name, list(choices), n=n, cutoff=cutoff)
    return f" Did you mean {' or '.join(quoted(c) for c in close)}?" if close else ""


class UnknownComponentError(RegistryError):
    """No component of this kind has this name; the message suggests close names."""

    def __init__(self, kind: str, name: str, available: Iterable[str], hint: str = "") -> None:
        names = sorted(available)
        guess = did_you_mean(name, names)
        listing = ", ".join(names) if names else "none are registered"
        super().__init__(
            f"unknown {kind} component {quoted(name)}.{guess} Available {kind} components: {listing}.{hint}"
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


class HookError(ZooError, ValueError):
    """A hook point is unknown to a model, or a hook cannot run where it was asked to."""


class DistributedError(ZooError):
    """The ranks of a run lost each other: a collective timed out, or another rank stopped."""


def check_flag(value: object, name: str, hint: str = "") -> bool:
    """``value`` if it is ``True`` or ``False``, else an ``InputError``: a truthy string
    such as ``'no'`` (or a 1) is a mistake to name, never a switch to flip. The one check of
    every boolean parameter of the public API (``hint``: what to pass instead); here, below
    every layer, so that each can use it."""
    if not isinstance(value, bool):
        raise InputError(f"{name} must be True or False, got {type(value).__name__} {quoted(value, 60)}{hint}")
    return value

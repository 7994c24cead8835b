"""The zoo's errors: one root, one subclass per area.

Every message says what went wrong, where (file, plugin, key) and how to fix it, so
callers can catch ``ZooError`` and show ``str(err)`` to a person as it is.
"""

from __future__ import annotations

import difflib
import errno
import functools
import inspect
import os
import re
import shlex
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

__all__ = [
    "ZooError",
    "ConfigError",
    "DivergenceError",
    "InputError",
    "ArgumentError",
    "PresetError",
    "RegistryError",
    "UnknownComponentError",
    "DuplicateComponentError",
    "PluginError",
    "CheckpointError",
    "InteropError",
    "HookError",
    "DistributedError",
    "os_error",
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


class ArgumentError(InputError, TypeError):
    """A public function was called without an argument it needs, with one it does not
    take, or with too many positional ones. A ``TypeError`` too, as Python's own is, so
    code that catches that still catches this."""


class PresetError(ZooError):
    """A preset is unknown, or its TOML file cannot be read or validated."""


class RegistryError(ZooError):
    """A component lookup or registration failed."""


def number(value: float) -> str:
    """A float as every table and label shows it: 12 significant digits, no trailing zeros
    (``1000000``, ``1e-06``, ``0.0003``), so ``zoo info`` and ``zoo compare`` agree."""
    return f"{value:.12g}"


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


class RecordError(CheckpointError):
    """A record read from a file (a checkpoint's tokenizer record) names what no file may
    name: a path. A reader given the thing itself (``--tokenizer``) goes on without it."""


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


# What each OS error means for a file the zoo writes or reads, and how to fix it.
# Keyed by name: not every platform has every number (Windows has no EDQUOT).
_OS_ERRORS: dict[str, str] = {
    "ENOSPC": "the disk is full (no space left on the device); free some space, or write to another disk",
    "EDQUOT": "the disk quota is used up; free some space in your quota, or write to another disk",
    "EFBIG": (
        "the file would be larger than the largest file allowed here (the process's file-size limit, "
        "`ulimit -f`, or the filesystem's own); raise the limit (`ulimit -f unlimited`), or write to another disk"
    ),
    "EROFS": "the filesystem is read-only; write to a folder on a writable disk, or remount it read-write",
    "EACCES": "permission denied; make the folder writable for this user (chmod u+w), or write elsewhere",
    "EPERM": "the operation is not permitted here; check the file's and folder's owner and flags, or write elsewhere",
    "EBUSY": "the file or folder is busy (in use, or a mount point); wait until it is free, or use another path",
    "ETXTBSY": "the file is busy (a running program); wait until it is free, or use another path",
    "ENAMETOOLONG": "the file name or path is too long for this filesystem; use a shorter one",
    "ENOENT": "a folder on the path does not exist (or was removed meanwhile); create it, or use another path",
    "ENOTDIR": "a part of the path is a file, not a folder; use another path",
    "EISDIR": "it is a folder, not a file; remove the folder or give another file path",
    "EEXIST": "something else already exists there; remove it or use another path",
    "ELOOP": "the path has a loop of symbolic links; fix the links or use another path",
    "EXDEV": "the path crosses filesystems where it cannot; use a path on one disk",
    "EMFILE": "too many files are open in this process; raise the limit (`ulimit -n`)",
    "ENFILE": "too many files are open on this machine; close some programs, or raise the system's limit",
    "EIO": "the disk reported an input/output error; check the device (or network filesystem) and retry",
    "EINVAL": "the filesystem does not accept this name or operation; use a plain file name on a local disk",
}


def os_error(err: OSError, action: str, path: object, error: type[ZooError] = ZooError) -> ZooError:
    """``error`` for ``err``, raised while trying to ``action`` ``path``: what happened and
    how to fix it. The one mapping of OS errors (disk full, file too large, read-only,
    busy, ...) that every writer of the zoo raises through."""
    name = errno.errorcode.get(err.errno, "") if isinstance(err.errno, int) else ""
    reason = _OS_ERRORS.get(name)
    said = err.strerror or str(err) or type(err).__name__
    where = printable(os.fsdecode(path) if isinstance(path, (str, bytes, os.PathLike)) else path)
    detail = f"{reason} ({name}: {said})" if reason else f"{said}{f' ({name})' if name else ''}"
    return error(f"cannot {action} {where}: {detail}")


# What a message calls a value of each type a public parameter names.
_TYPE_WORDS = {
    "str": "a string", "int": "an integer", "float": "a number", "None": "None", "PathLike": "a path", "Path": "a path",
    "Mapping": "a mapping", "dict": "a dict", "Sequence": "a sequence", "Iterable": "an iterable",
    "list": "a list", "Callable": "a function", "Tensor": "a tensor", "Module": "a torch module",
    "Generator": "a torch.Generator", "device": "a torch.device", "dtype": "a torch.dtype",
}  # fmt: skip


def _resolve(token: str, space: dict[str, object]) -> type | None:
    """The class a token of an annotation (``os.PathLike[str]``, ``torch.device``) names in
    the function's module, or ``None`` when it names none there (a ``TYPE_CHECKING`` import,
    ``Any``, a protocol or an alias): a parameter with such a part is not checked."""
    import builtins

    head, *rest = token.split("[", 1)[0].strip().split(".")
    found = space.get(head, getattr(builtins, head, None))
    for part in rest:
        found = getattr(found, part, None)
    if not isinstance(found, type) or getattr(found, "_is_protocol", False) or found in (object, Any):
        return None
    return found


def _fits(value: object, kinds: tuple[type, ...]) -> bool:
    if value is None:
        return type(None) in kinds
    if isinstance(value, bool):  # a flag is never a count or a number
        return bool in kinds
    if isinstance(value, (bytes, bytearray)) and bytes not in kinds:  # bytes are a Sequence of ints
        return False
    return isinstance(value, kinds) or (isinstance(value, int) and float in kinds)


def _alternatives(annotation: str) -> list[str]:
    """The parts of a union annotation, split at its top level: ``int | Sequence[int | None]``
    is ``int`` and ``Sequence[int | None]``."""
    parts, depth, start = [], 0, 0
    for at, character in enumerate(annotation):
        depth += {"[": 1, "]": -1}.get(character, 0)
        if character == "|" and depth == 0:
            parts.append(annotation[start:at].strip())
            start = at + 1
    return [*parts, annotation[start:].strip()]


def _parameter_kinds(signature: inspect.Signature, space: dict[str, Any]) -> dict[str, tuple[type, ...]]:
    """The classes each parameter of a function takes (its names looked up in ``space``), from its annotation, for those whose
    every part names a class (``int | None``, ``str | os.PathLike[str]``); flags are left to
    ``check_flag``, which names what to pass instead."""
    kinds = {}
    for name, parameter in signature.parameters.items():
        words = _alternatives(str(parameter.annotation))
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD) or "bool" in words:
            continue
        found = [_resolve(word, space) for word in words if word != "None"]
        if found and all(found):
            kinds[name] = tuple(k for k in found if k is not None) + ((type(None),) if "None" in words else ())
    return kinds


def _taken(kinds: tuple[type, ...]) -> str:
    """``a string, a path or None``: what a parameter takes, in words."""
    words = [_TYPE_WORDS.get(kind.__name__, f"a {kind.__name__}") for kind in kinds if kind is not type(None)]
    words += ["None"] if type(None) in kinds else []
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"


def _call_error(
    function: Callable[..., Any],
    signature: inspect.Signature,
    args: tuple[object, ...],
    keywords: dict[str, object],
    kinds: dict[str, tuple[type, ...]],
    err: TypeError,
) -> ArgumentError | None:
    """The ``ArgumentError`` for a call ``signature.bind`` refused: the count of positional
    arguments it takes, the first argument it needs and was not given (what it takes), or a
    keyword it does not take (the names nearest); None for a keyword left to a function
    that takes ``**options`` behind its signature and names them itself."""
    name, parameters = function.__name__, list(signature.parameters.values())
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(args) > len(positional) and not any(p.kind is p.VAR_POSITIONAL for p in parameters):
        return ArgumentError(
            f"{name}() takes at most {len(positional)} positional argument(s) "
            f"({', '.join(p.name for p in positional) or 'none'}), got {len(args)}; pass the others by name"
        )
    given = {p.name for p in positional[: len(args)]} | set(keywords)
    for p in parameters:
        if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name not in given:
            taken = f" ({_taken(kinds[p.name])})" if p.name in kinds else ""
            return ArgumentError(f"{name}() needs the argument {p.name}{taken}, which was not given; give {p.name}=...")
    names = [p.name for p in parameters if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    unknown = [key for key in keywords if key not in names]
    if unknown and getattr(function, "__code__", None) and function.__code__.co_flags & inspect.CO_VARKEYWORDS:
        return None  # its **options: it names an unknown one itself, with the nearest
    if unknown:
        return ArgumentError(
            f"{name}() takes no argument {quoted(unknown[0], 60)}.{did_you_mean(unknown[0], names)} "
            f"Its arguments: {', '.join(names)}"
        )
    return ArgumentError(f"{name}(): {printable(str(err))}")  # e.g. an argument given twice: Python's words


def checked_types(*own: str) -> Callable[[F], F]:
    """A decorator: the function, refusing an argument of a type its annotation does not
    name (a list for a path, ``'4'`` for a count) with an ``InputError`` naming the argument
    and what it takes, before anything else runs. The one type check of the public entry
    points; ``own``: the parameters the function checks itself, with a message of its own."""

    def decorate(function: F) -> F:
        kinds: dict[str, tuple[type, ...]] | None = None
        signature = inspect.signature(function)

        @functools.wraps(function)
        def checked(*args: object, **keywords: object) -> object:
            nonlocal kinds, signature
            if kinds is None:  # on the first call: the module's names (and a signature set later) are there
                signature = inspect.signature(checked)
                space = {**function.__globals__, **getattr(checked, "__namespace__", {})}
                kinds = {k: v for k, v in _parameter_kinds(signature, space).items() if k not in own}
            try:
                bound = signature.bind(*args, **keywords)
            except TypeError as err:  # a missing or unknown argument, or too many
                refused = _call_error(function, signature, args, keywords, kinds, err)
                if refused is None:
                    return function(*args, **keywords)
                raise refused from None
            for name, value in bound.arguments.items():
                if name in kinds and not _fits(value, kinds[name]):
                    raise InputError(
                        f"{name} must be {_taken(kinds[name])}, got {type(value).__name__} {quoted(value, 60)}; "
                        f"give {name}= one of those instead"
                    )
            return function(*args, **keywords)

        return checked  # type: ignore[return-value]

    return decorate

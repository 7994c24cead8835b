"""Reading files a person or another program may have damaged or planted, safely.

Every file the zoo reads back (manifests, ``config.json``, records, metrics lines)
comes through here: a regular file only (not a folder, a FIFO or ``/dev/zero``), read
to a size limit, never through a symbolic link where the zoo itself wrote the file,
JSON without ``NaN``/``Infinity``/``1e400`` and without nesting deep enough to
exhaust the stack, and names from a file confined to the folder they name files of.
Each failure is the caller's ``ZooError`` subclass, with a message that says what to do.
"""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path, PurePosixPath
from typing import Any

import xxhash

from zoo.errors import ZooError, os_error, printable, quoted

__all__ = [
    "MAX_DEPTH",
    "confined",
    "depth",
    "digest",
    "loads",
    "open_append",
    "open_read",
    "read_bytes",
    "read_json",
    "read_text",
]

#: Deepest nesting of lists and objects a JSON file the zoo reads may have.
MAX_DEPTH = 32
#: Default size limit of a small file read whole (a manifest, a config, a record).
SMALL = 16 << 20


def _open_regular(path: Path, error: type[ZooError], what: str, *, follow: bool = True) -> int:
    """A read-only descriptor of ``path``, refused unless it is a regular file.

    The check is on the opened descriptor (``fstat``), so a file swapped after a check
    cannot slip through; ``O_NONBLOCK`` keeps a FIFO from blocking the open itself.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    if not follow:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError as err:
        raise error(f"{what} {path} does not exist") from err
    except IsADirectoryError as err:
        raise error(f"{what} {path} is a folder, not a file") from err
    except OSError as err:
        if not follow and Path(path).is_symlink():
            raise error(f"{what} {path} is a symbolic link; the zoo does not follow links here: remove it") from err
        raise os_error(err, f"read {what}", path, error) from err
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        kind = "a folder" if stat.S_ISDIR(info.st_mode) else "not a regular file (a device, FIFO or socket)"
        raise error(f"{what} {path} is {kind}; it must be a regular file")
    return fd


def open_read(path: str | os.PathLike[str], error: type[ZooError], what: str = "file", *, follow: bool = True) -> Any:
    """``path`` opened to read bytes, refused unless it is a regular file (for files read a
    line at a time, too big to read whole)."""
    fd = _open_regular(Path(path), error, what, follow=follow)
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def digest(path: str | os.PathLike[str], error: type[ZooError], what: str = "file") -> str:
    """The xxh3-128 digest of the regular file ``path``'s content, read in 4 MiB blocks: what
    every cache of something made from a file keys on (never its size and mtime, which
    ``cp -p``, ``rsync -t`` or ``os.utime`` keep with new content)."""
    hasher = xxhash.xxh3_128()
    try:
        with open_read(path, error, what) as handle:
            while block := handle.read(1 << 22):
                hasher.update(block)
    except OSError as err:
        raise os_error(err, f"read {what}", path, error) from err
    return str(hasher.hexdigest())


def read_bytes(
    path: str | os.PathLike[str], error: type[ZooError], what: str = "file", *, limit: int = SMALL, follow: bool = True
) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them (else ``error``)."""
    path = Path(path)
    fd = _open_regular(path, error, what, follow=follow)
    try:
        os.set_blocking(fd, True)
        size = os.fstat(fd).st_size
        if size > limit:
            raise error(
                f"{what} {path} is {size:,} bytes, more than the {limit:,} a {what} may have; it is not the file "
                f"the zoo wrote (or is damaged)"
            )
        with os.fdopen(os.dup(fd), "rb") as handle:
            data = handle.read(limit + 1)
    except OSError as err:
        raise os_error(err, f"read {what}", path, error) from err
    finally:
        os.close(fd)
    if len(data) > limit:  # grew while being read
        raise error(f"{what} {path} is more than {limit:,} bytes; it is not the file the zoo wrote")
    return data


def read_text(
    path: str | os.PathLike[str], error: type[ZooError], what: str = "file", *, limit: int = SMALL, follow: bool = True
) -> str:
    """The UTF-8 text of ``path`` (``read_bytes``), with an error naming the bad byte."""
    data = read_bytes(path, error, what, limit=limit, follow=follow)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise error(f"{what} {path} is not UTF-8 text ({err.reason} at byte {err.start})") from err


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is out of range (not finite)")
    return value


def _constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number; the zoo reads only finite numbers")


def depth(value: Any, limit: int = MAX_DEPTH) -> int:
    """How deeply ``value``'s lists and dicts nest (stops counting past ``limit``)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, (list, dict)):
            deepest = max(deepest, level)
            if level > limit:
                return level
            stack.extend((child, level + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def loads(text: str, error: type[ZooError], where: str, *, words: bool = False) -> Any:
    """JSON ``text`` with finite numbers only and at most ``MAX_DEPTH`` levels of nesting.
    ``words``: the bare ``NaN`` and ``Infinity`` Python's ``json`` writes are read as those
    floats (for lines an older zoo wrote; a number too large, ``1e400``, is still refused)."""
    constant = float if words else _constant
    try:
        value = json.loads(text, parse_constant=constant, parse_float=_finite, parse_int=_bounded_int)
    except RecursionError as err:
        raise error(f"{where} nests lists or objects too deeply; it is not a file the zoo reads") from err
    except ValueError as err:
        raise error(f"{where} is not valid JSON ({printable(str(err), 200)})") from err
    if depth(value) > MAX_DEPTH:
        raise error(f"{where} nests lists or objects more than {MAX_DEPTH} deep; it is not a file the zoo reads")
    return value


def _bounded_int(text: str) -> int:
    if len(text) > 40:
        raise ValueError(f"the integer {text[:20]}... has {len(text)} digits")
    return int(text)


def read_json(
    path: str | os.PathLike[str], error: type[ZooError], what: str = "file", *, limit: int = SMALL, follow: bool = True
) -> Any:
    """The JSON in ``path``, read as ``read_text`` does and parsed as ``loads`` does."""
    return loads(read_text(path, error, what, limit=limit, follow=follow), error, f"{what} {path}")


def confined(folder: Path, name: object, error: type[ZooError], where: str) -> Path:
    """``folder / name`` for a plain relative file name from a file: no absolute path, no
    ``..``, no backslash or NUL, so a file cannot point the zoo outside ``folder``."""
    if not isinstance(name, str) or not name or len(name) > 255 or "\0" in name or "\\" in name:
        raise error(f"{where}: the file name {quoted(name, 80)} is not a plain file name")
    parts = PurePosixPath(name).parts
    if PurePosixPath(name).is_absolute() or any(part in ("..", ".") for part in parts) or not parts:
        raise error(
            f"{where}: the file name {quoted(name, 80)} points outside its folder {folder}; "
            f"a file may name only files inside its own folder"
        )
    return folder.joinpath(*parts)


def open_append(path: Path, error: type[ZooError]) -> Any:
    """``path`` opened to append text, created if absent, never through a symbolic link
    (``O_NOFOLLOW``) and never onto anything but a regular file."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags | getattr(os, "O_NONBLOCK", 0), 0o666)
    except OSError as err:
        if path.is_symlink():
            raise error(
                f"{path} is a symbolic link; the zoo writes its own files only, never through a link: remove it"
            ) from err
        if path.exists() and not path.is_file():
            raise error(f"{path} is not a regular file; remove it so the zoo can write its own") from err
        raise os_error(err, "write", path, error) from err
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise error(f"{path} is not a regular file; remove it so the zoo can write its own")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "a", encoding="utf-8")

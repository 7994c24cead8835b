"""Output folders the zoo owns: a marker of what made them, a lock while a run writes,
and replacement whole or not at all.

A folder the zoo writes (a Hugging Face export, a training run, an ablation) holds
``.zoo-folder.json``: which kind of output it is, the command and the zoo version that
made it, and, for an export, the files written. The rules:

- **A folder the zoo did not make is never written into.** A non-empty folder without
  the marker (or with another kind's) is refused unless ``overwrite=True``, which
  replaces it *whole*: the new contents are written into a hidden sibling folder, then
  swapped in by one rename (``renameat2(RENAME_EXCHANGE)`` on Linux, else two renames),
  so the folder is the old one or the new one, never a mix, and a failure leaves the old
  one untouched and no staging folder behind.
- **One writer at a time.** A run holds an exclusive ``flock`` on ``.zoo-folder.lock``
  for as long as it writes; a second process on the same folder gets an error at once
  (``FolderLockedError``), so two runs started together cannot interleave.
- **No write through a link.** The output path itself may not be a symbolic link, the
  lock is opened with ``O_NOFOLLOW``, files are published with ``os.replace`` (which
  replaces a planted link rather than writing through it), and appends go through
  ``zoo.files.open_append``.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from zoo._version import __version__
from zoo.checkpoint.store import write_atomically
from zoo.checkpoint.swap import clean_stale, makedirs, sibling, swap_in
from zoo.errors import ZooError, os_error, printable
from zoo.files import read_json

__all__ = [
    "LOCK",
    "MARKER",
    "FolderLockedError",
    "Marker",
    "OwnedFolder",
    "check_output_path",
    "check_replaceable",
    "check_versions_folder",
    "check_versions_only",
    "refuse_inputs_inside",
    "owned_folder",
    "read_marker",
    "staged_folder",
    "writing_beside",
]

MARKER = ".zoo-folder.json"
LOCK = ".zoo-folder.lock"
_OWN = frozenset({MARKER, LOCK})


class FolderLockedError(ZooError):
    """Another process holds the folder's lock: a run is writing into it now."""


class Marker(BaseModel):
    """What ``.zoo-folder.json`` says about the folder it sits in."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    format: Literal[1] = 1
    kind: str  # "hf-export", "train", "ablate"
    command: str  # what made it: "zoo.to_hf", "zoo train", ...
    zoo_version: str
    created: float  # seconds since the epoch
    files: list[str] | None = None  # every file written, for outputs written whole


def read_marker(folder: Path, error: type[ZooError]) -> Marker | None:
    """The marker of ``folder``, None when it has none; ``error`` for a damaged one."""
    file = folder / MARKER
    if not os.path.lexists(file):
        return None
    data = read_json(file, error, "folder marker", limit=1 << 20, follow=False)
    try:
        return Marker.model_validate(data)
    except ValidationError as err:
        raise error(
            f"{file} is damaged ({err.error_count()} problem(s), first: {err.errors()[0]['msg']}); "
            f"remove the folder, or pass overwrite=True to replace it whole"
        ) from err


def check_output_path(path: Path, error: type[ZooError], what: str = "the output folder") -> None:
    """Refuse an output path that is a symbolic link or something other than a folder."""
    if path.is_symlink():
        raise error(
            f"cannot write {what} {path}: it is a symbolic link (to {os.readlink(path)}); the zoo does not "
            f"write through links: give the folder itself"
        )
    if path.exists() and not path.is_dir():
        raise error(f"cannot write {what} {path}: it is a file, not a folder; remove it or pick another path")
    for parent in path.parents:
        if parent.exists() and not parent.is_dir():
            raise error(f"cannot create {what} {path}: {parent} is a file, not a folder; pick another path")
        if parent.exists():
            break


def check_replaceable(path: Path, error: type[ZooError], what: str) -> None:
    """Refuse to replace the current folder or one holding it (``--out .``): the swap
    would move the folder a shell sits in, and its staging folder would sit inside it."""
    try:
        here, there = Path.cwd().resolve(), path.resolve()
    except OSError:
        return
    if here == there or there in here.parents:
        raise error(
            f"cannot replace {what} {path}: it is the current folder{'' if here == there else ' or holds it'}, "
            f"which the zoo cannot replace whole; cd to its parent and give its name, or pick a new folder"
        )


def _entries(folder: Path) -> list[str]:
    """What ``folder`` holds besides the zoo's own marker and lock."""
    try:
        return sorted(set(os.listdir(folder)) - _OWN)
    except FileNotFoundError:
        return []
    except OSError as err:
        raise ZooError(f"cannot list {folder}: {err.strerror or err}") from err


def _foreign(folder: Path, kind: str, error: type[ZooError]) -> str | None:
    """Why ``folder`` may not be replaced without ``overwrite``, or None when it may: it is
    absent or empty, or it is this kind's output holding nothing but what it wrote."""
    entries = _entries(folder)
    if not entries and not os.path.lexists(folder / MARKER):
        return None
    marker = read_marker(folder, error)
    if marker is None:
        return f"holds {len(entries)} file(s) the zoo did not write (no {MARKER})"
    if marker.kind != kind:
        return f"was made by {marker.command} ({marker.kind}), not by this command"
    extra = sorted(set(entries) - set(marker.files or ()))
    if extra:
        shown = ", ".join(extra[:4]) + (f" and {len(extra) - 4} more" if len(extra) > 4 else "")
        return f"holds files the zoo did not write there ({shown})"
    return None


# -- locks -----------------------------------------------------------------------------


def _flock(fd: int, *, block: bool) -> bool:
    """Take an exclusive lock on ``fd``; False when ``block`` is off and it is held."""
    if os.name != "posix":  # pragma: no cover - Windows: msvcrt locks a byte range
        import msvcrt

        try:
            msvcrt.locking(fd, msvcrt.LK_LOCK if block else msvcrt.LK_NBLCK, 1)  # type: ignore[attr-defined]
        except OSError:
            return False
        return True
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if block else fcntl.LOCK_NB))
    except BlockingIOError:
        return False
    return True


def _holder(lock: Path) -> str:
    try:
        with open(lock, encoding="utf-8", errors="replace") as handle:
            text = handle.read(200).strip()
    except OSError:
        return "another process"
    return f"process {text}" if text.isdigit() else "another process"


def _take_lock(folder: Path, error: type[ZooError], lock: Path | None = None) -> int:
    """The descriptor of ``folder``'s lock file (``lock``, by default ``LOCK`` inside it),
    exclusively locked; FolderLockedError if held."""
    lock = folder / LOCK if lock is None else lock
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(lock, flags, 0o644)
    except OSError as err:
        if lock.is_symlink():
            raise error(f"{lock} is a symbolic link; the zoo does not write through links: remove it") from err
        raise os_error(err, "lock", folder, error) from err
    if not _flock(fd, block=False):
        os.close(fd)
        raise FolderLockedError(
            f"{folder} is in use: {_holder(lock)} is writing into it now (it holds {lock.name}). Wait for it to "
            f"finish, or give another output folder"
        )
    os.ftruncate(fd, 0)
    os.write(fd, str(os.getpid()).encode())
    return fd


@contextlib.contextmanager
def writing_beside(target: Path, error: type[ZooError]) -> Iterator[None]:
    """``target`` locked for the ``with`` block by a lock file beside it (for an output
    made elsewhere and renamed into place whole, such as ``zoo data prepare -o``): a
    second process writing the same ``target`` gets ``FolderLockedError`` at once."""
    lock = target.parent / f".{target.name}{LOCK}"
    fd = _take_lock(target, error, lock)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            lock.unlink()
        _release(fd)


def _release(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)  # closing drops the flock


def _held_by_another(folder: Path) -> bool:
    """Whether a run holds ``folder``'s lock now (tried, not waited for)."""
    lock = folder / LOCK
    if lock.is_symlink() or not lock.is_file():
        return False
    try:
        fd = os.open(lock, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return False
    try:
        return not _flock(fd, block=False)
    finally:
        os.close(fd)


@contextlib.contextmanager
def _parent_lock(parent: Path) -> Iterator[None]:
    """Serialise swaps in ``parent`` (a short, blocking lock on the folder itself)."""
    try:
        fd = os.open(parent, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:  # a folder that cannot be opened (Windows): swaps go unserialised
        yield
        return
    try:
        _flock(fd, block=True)
        yield
    finally:
        os.close(fd)


def _write_marker(folder: Path, kind: str, command: str, files: list[str] | None = None) -> Marker:
    marker = Marker(kind=kind, command=command, zoo_version=__version__, created=time.time(), files=files)
    text = marker.model_dump_json(indent=2) + "\n"
    write_atomically(folder / MARKER, lambda f: f.write_text(text, encoding="utf-8"))
    return marker


def _refusal(
    target: Path, why: str, error: type[ZooError], what: str = "the output folder", hint: str = ""
) -> ZooError:
    if hint:
        return error(
            f"{what} {target} is not empty; {hint} (it {why}; the zoo never writes into a folder it did not make)"
        )
    return error(
        f"{what} {target} {why}; the zoo never writes into a folder it did not make. Give a new or "
        f"empty folder, or pass overwrite=True to replace {target.name} whole (everything in it is removed)"
    )


@contextlib.contextmanager
def staged_folder(
    path: Path,
    kind: str,
    command: str,
    *,
    error: type[ZooError],
    overwrite: bool = False,
    what: str = "the output folder",
) -> Iterator[Path]:
    """A fresh hidden folder beside ``path`` to write an output into; on success it
    replaces ``path`` whole, with a marker listing the files written; on failure it is
    removed and ``path`` is as it was (missing parents made for it removed too).

    ``path`` may be absent, empty, or this kind's own unchanged output; anything else
    needs ``overwrite``. A folder a run holds locked is never replaced.
    """
    check_output_path(path, error, what)
    if not overwrite and (why := _foreign(path, kind, error)):
        raise _refusal(path, why, error)
    check_replaceable(path, error, what)
    made = makedirs(path.parent, error)
    clean_stale(path)
    staging = sibling(path, "new")
    try:
        staging.mkdir()
        yield staging
        files = sorted(os.listdir(staging))
        _write_marker(staging, kind, command, files)
        with _parent_lock(path.parent):
            check_output_path(path, error, what)  # again: another process may have acted meanwhile
            if not overwrite and (why := _foreign(path, kind, error)):
                raise _refusal(path, why, error)
            if os.path.lexists(path) and _held_by_another(path):
                raise FolderLockedError(f"{path} is in use by a running zoo process; it was not replaced")
            swap_in(staging, path)
    except BaseException as err:
        shutil.rmtree(staging, ignore_errors=True)
        for parent in made:
            with contextlib.suppress(OSError):
                parent.rmdir()
        if isinstance(err, OSError):  # disk full, read-only, ...: said once, by os_error
            raise os_error(err, f"write {what}", path, error) from err
        raise


@dataclass
class OwnedFolder:
    """A run's output folder, locked for as long as the run holds it."""

    path: Path
    marker: Marker
    fresh: bool  # created (or emptied) by this claim: nothing of an earlier run in it
    _fd: int = -1

    def __post_init__(self) -> None:
        if self._fd >= 0:
            _HELD.add(_key(self.path))

    def release(self) -> None:
        if self._fd >= 0:
            _HELD.discard(_key(self.path))
            _release(self._fd)
            self._fd = -1


#: The folders this process holds the lock of (``OwnedFolder``s not yet released).
_HELD: set[str] = set()


def _key(folder: Path) -> str:
    return os.path.realpath(folder)


def check_versions_folder(folder: Path, error: type[ZooError]) -> None:
    """Refuse to add a checkpoint version to a folder the zoo made for one output (a
    training run, an ablation, an export) unless this process holds it: a version saved
    beside a run's by ``zoo build`` or ``zoo convert`` would become the run's newest, with
    no training state, and break its resume (or mix into an export)."""
    if not folder.is_dir() or _key(folder) in _HELD:
        return
    marker = read_marker(folder, error)
    if marker is not None:
        raise error(
            f"{folder} was made by {marker.command} ({marker.kind} folder): only that command writes into it, "
            f"and a version saved there would mix with its own; save to another folder, or to a .safetensors file"
        )


#: What a folder of checkpoint versions that no command marked may hold: its versions, the
#: tokenizer ``zoo convert`` keeps beside them, and a killed save's temporary file.
_VERSIONS_ONLY = re.compile(r"v[0-9]+\.safetensors|tokenizer|\..*\.[0-9]+-[0-9a-f]{8}\.tmp")
#: A version or its training state: what a checkpoint folder given as an input is read from.
_A_VERSION = re.compile(r"v[0-9]+(?:\.state)?\.safetensors")


def check_versions_only(folder: Path, error: type[ZooError]) -> None:
    """Refuse to add a checkpoint version to a user's folder: one without a marker that
    holds anything but checkpoint versions (``zoo build -o DIR``, ``zoo convert -o DIR``
    on a folder of papers would drop ``v0001.safetensors`` among them)."""
    check_versions_folder(folder, error)
    if not folder.is_dir() or read_marker(folder, error) is not None:
        return
    foreign = [name for name in _entries(folder) if not _VERSIONS_ONLY.fullmatch(name)]
    if foreign:
        shown = ", ".join(printable(name, 60) for name in foreign[:3]) + (" ..." if len(foreign) > 3 else "")
        raise error(
            f"{printable(str(folder))} holds {len(foreign)} file(s) that are not checkpoint versions ({shown}); "
            f"the zoo adds versions only to a new, empty or versions-only folder: give one of those, "
            f"or a path ending in .safetensors"
        )


def _flatten(inputs: Iterable[tuple[str, object]]) -> Iterator[tuple[str, str]]:
    for name, value in inputs:
        values = value if isinstance(value, (list, tuple)) else [value]
        for item in values:
            if isinstance(item, (str, os.PathLike)) and os.fspath(item) and os.path.lexists(item):
                yield name, os.fspath(item)


def _real(path: str | os.PathLike[str]) -> Path:
    """``path`` with its folder's links resolved but not its last part: a link that is
    replaced or removed takes only the link, so its target is not what is lost."""
    absolute = Path(os.path.abspath(path))
    return Path(os.path.realpath(absolute.parent)) / absolute.name


def refuse_inputs_inside(
    output: str | os.PathLike[str], inputs: Iterable[tuple[str, object]], error: type[ZooError]
) -> None:
    """Refuse to replace or remove ``output`` (``overwrite=True``) when an input of the
    same command is it or lies inside it: the command would delete what it reads (the
    prepared data, the checkpoint it fine-tunes, its corpus or config). ``inputs`` are
    ``(name, path)`` pairs, named as the message shows them (``--data``); a value that is
    not an existing path (a preset, a hub id, None) has nothing to lose, and a list is
    each of its items. An output that is an existing version (or its state) inside an
    input folder is refused too: a checkpoint folder is read from its versions. Inputs are
    compared with links resolved."""
    if not os.fspath(output):
        return
    target = _real(output)
    for name, path in _flatten(inputs):
        real = Path(os.path.realpath(path))
        if real == target or target in real.parents:
            where = "is" if real == target else "lies inside"
            raise error(
                f"{name} {printable(path)} {where} {printable(os.fspath(output))}, which overwrite=True replaces "
                f"whole: the command would delete what it reads. Move {printable(path)} out of it, or give "
                f"another output"
            )
        if target.parent == real and _A_VERSION.fullmatch(target.name) and os.path.lexists(target) and real.is_dir():
            raise error(
                f"{printable(os.fspath(output))} is a version in {name} {printable(path)}, a checkpoint folder the "
                f"command reads: replacing it would delete what it reads; give another output"
            )


def claim(
    path: Path,
    kind: str,
    command: str,
    *,
    error: type[ZooError],
    overwrite: bool = False,
    adopt: Callable[[Path], bool] | None = None,
    what: str = "the output folder",
    hint: str = "",
) -> OwnedFolder:
    """Lock ``path`` (created if absent) for a run of ``kind``; the caller releases it.

    An empty folder gets the marker; this kind's folder is taken as it is (the caller
    decides whether its contents may be resumed); a folder without a marker is taken
    only when ``adopt(path)`` recognises it (a run of an older zoo, which gets the
    marker then); anything else is refused unless ``overwrite``, which first swaps in
    an empty folder (the old one removed whole once the new one is locked). ``what``
    names the folder in messages (``--out``); ``hint`` replaces the advice of a refusal.
    """
    check_output_path(path, error, what)
    if overwrite and _entries(path) + ([MARKER] if os.path.lexists(path / MARKER) else []):
        check_replaceable(path, error, what)
        makedirs(path.parent, error)
        clean_stale(path)
        staging = sibling(path, "new")
        try:
            staging.mkdir()
        except OSError as err:
            raise os_error(err, f"replace {what}", path, error) from err
        try:
            fd = _take_lock(staging, error)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        try:
            marker = _write_marker(staging, kind, command)
            with _parent_lock(path.parent):
                check_output_path(path, error)
                if _held_by_another(path):
                    raise FolderLockedError(
                        f"{path} is in use: a running zoo process holds it; it was not replaced. Wait for it to finish"
                    )
                swap_in(staging, path)
        except BaseException as err:
            _release(fd)
            shutil.rmtree(staging, ignore_errors=True)
            if isinstance(err, OSError):
                raise os_error(err, f"replace {what}", path, error) from err
            raise
        return OwnedFolder(path, marker, True, fd)
    try:  # refuse before creating anything in a folder not ours
        _inspect_claim(path, kind, error, adopt, what, hint)
    except ZooError:
        if _held_by_another(path):  # a run claiming it now: its marker is half-written, not foreign
            raise FolderLockedError(
                f"{path} is in use: a running zoo process holds it (it holds {LOCK}). Wait for it to finish, "
                f"or give another output folder"
            ) from None
        raise
    makedirs(path, error)
    had_lock = os.path.lexists(path / LOCK)
    fd = _take_lock(path, error)
    try:
        found, fresh = _inspect_claim(path, kind, error, adopt, what, hint)  # again, now no one else can act
        marker = found if found is not None else _write_marker(path, kind, command)
    except BaseException:
        if not had_lock:
            with contextlib.suppress(OSError):
                (path / LOCK).unlink()
        _release(fd)
        raise
    return OwnedFolder(path, marker, fresh, fd)


def _inspect_claim(
    path: Path,
    kind: str,
    error: type[ZooError],
    adopt: Callable[[Path], bool] | None,
    what: str = "the output folder",
    hint: str = "",
) -> tuple[Marker | None, bool]:
    """``(marker, fresh)`` of a folder a run of ``kind`` may take; the refusal otherwise."""
    found = read_marker(path, error) if path.is_dir() else None
    entries = _entries(path)
    if found is None:
        if entries and not (adopt is not None and adopt(path)):
            why = f"holds {len(entries)} file(s) the zoo did not write (no {MARKER})"
            raise _refusal(path, why, error, what, hint)
    elif found.kind != kind:
        raise _refusal(path, f"was made by {found.command} ({found.kind}), not by this command", error, what, hint)
    return found, not entries


@contextlib.contextmanager
def owned_folder(
    path: Path,
    kind: str,
    command: str,
    *,
    error: type[ZooError],
    overwrite: bool = False,
    adopt: Callable[[Path], bool] | None = None,
) -> Iterator[OwnedFolder]:
    """``claim`` as a context manager: the lock is held inside the ``with`` block."""
    folder = claim(path, kind, command, error=error, overwrite=overwrite, adopt=adopt)
    try:
        yield folder
    finally:
        folder.release()

"""Checkpoint files on disk: atomic writes, numbered versions, the safetensors writer and reader.

``publish_file`` writes one file and ``publish_version`` adds the next version of a
checkpoint directory (``v0001.safetensors``, ...) and never overwrites one. Every write
goes to a hidden temporary file in the same folder, named to fit the filesystem's name
limit, is fsynced, and appears under its final name in one step (``os.replace``, or
``os.link`` that fails if the version exists, which is how concurrent savers get
distinct versions). ``write_atomically`` offers the same to other writers (the
Hugging Face export, training state).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import secrets
import stat
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from torch import Tensor

from zoo.checkpoint.hashing import bytes_of, dtype_name
from zoo.errors import CheckpointError, ZooError, os_error, printable, quoted
from zoo.files import open_read

SUFFIX = ".safetensors"
VERSION_NAME = re.compile(r"v([0-9]+)\.safetensors")
# The safetensors name of each dtype a checkpoint may hold (no float8: it cannot run a model).
_SAFETENSORS_DTYPES = {
    torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
    torch.uint8: "U8", torch.bool: "BOOL",
}  # fmt: skip
_ALIGN = 64  # bytes; where the data section of a written file starts
# What os.link fails with on a filesystem without hard links (others go through os_error).
_NO_HARD_LINKS = {errno.EPERM, errno.EMLINK, errno.EXDEV, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS}


# -- publishing ------------------------------------------------------------------------


def publish_file(path: Path, tensors: dict[str, Tensor], header: dict[str, str]) -> Path:
    """Write ``path`` atomically: a temporary file, fsync, rename over, fsync the folder."""
    if path.is_dir():
        raise CheckpointError(f"cannot save to {path}: it is a directory; give a file name or drop the {SUFFIX} suffix")
    check_output_file(path, CheckpointError, overwrite=True, what="the checkpoint file", make_parents=True)
    directory = _make_directory(path.parent, path)
    temporary = _write_temporary(directory, path, tensors, header)
    try:
        os.replace(temporary, path)
    except OSError as err:
        _remove(temporary)
        raise os_error(err, "save to", path, CheckpointError) from err
    _fsync_directory(directory)
    return path


def publish_version(directory: Path, tensors: dict[str, Tensor], header: dict[str, str]) -> Path:
    """Add the next version to ``directory``; concurrent savers each get their own number.

    ``os.link`` publishes the finished temporary file under the version's name and fails
    if that name exists, so a version is never overwritten and never seen half-written.
    """
    if directory.exists() and not directory.is_dir():
        raise CheckpointError(
            f"cannot save to {directory}: it is a file, not a checkpoint directory; "
            f"give a directory path, or a path ending in {SUFFIX} for a single file"
        )
    _make_directory(directory, directory)
    temporary = _write_temporary(directory, directory / "version", tensors, header)
    try:
        while True:
            found = version_files(directory)
            final = directory / version_name(max(found, default=0) + 1)
            try:
                os.link(temporary, final)
                break
            except FileExistsError:
                continue  # another process took this number; take the next one
    except OSError as err:
        if err.errno not in _NO_HARD_LINKS:
            raise os_error(err, "add a version to", directory, CheckpointError) from err
        raise CheckpointError(
            f"cannot add a version to {directory}: {err}. zoo adds versions with hard links; "
            f"on a filesystem without them, save to a path ending in {SUFFIX}"
        ) from err
    finally:
        _remove(temporary)
    _fsync_directory(directory)
    return final


def _make_directory(directory: Path, target: Path) -> Path:
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise os_error(err, f"save to {target}: cannot create folder", directory, CheckpointError) from err
    return directory


def _write_temporary(directory: Path, target: Path, tensors: dict[str, Tensor], header: dict[str, str]) -> Path:
    """The checkpoint written to a fsynced temporary file in ``directory`` (``write_temporary``)."""
    try:
        return write_temporary(
            directory, target.name, lambda file: write_safetensors(file, tensors, header), CheckpointError, target
        )
    except (RuntimeError, ValueError) as err:
        raise CheckpointError(f"cannot save to {target}: {type(err).__name__}: {err}") from err


# -- the safetensors format ------------------------------------------------------------


def write_safetensors(file: Path, tensors: Mapping[str, Tensor], metadata: Mapping[str, str]) -> None:
    """Write ``tensors`` and string ``metadata`` to ``file`` in the safetensors format.

    Written here rather than by ``safetensors.torch.save_file``, which needs NumPy: the
    header (little-endian u64 length, JSON padded with spaces so the data starts at a
    multiple of 64 bytes), then each tensor's bytes, widest dtype first so every tensor
    starts aligned to its item size. Memory-mapped on load, tensors then sit as
    allocated ones do, so SIMD kernels take the same path and results match bit for bit.
    """
    order = sorted(tensors, key=lambda name: (-tensors[name].element_size(), name))
    entries: dict[str, Any] = {"__metadata__": dict(metadata)} if metadata else {}
    offset = 0
    for name in order:
        tensor = tensors[name]
        if tensor.dtype not in _SAFETENSORS_DTYPES:
            raise ValueError(f"tensor {name} has dtype {dtype_name(tensor.dtype)}, which a checkpoint cannot hold")
        size = tensor.numel() * tensor.element_size()
        entries[name] = {
            "dtype": _SAFETENSORS_DTYPES[tensor.dtype],
            "shape": list(tensor.shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    header = json.dumps(entries, separators=(",", ":")).encode()
    header += b" " * (-(8 + len(header)) % _ALIGN)  # the data starts aligned, as freshly allocated tensors do
    with open(file, "wb") as handle:
        handle.write(len(header).to_bytes(8, "little"))
        handle.write(header)
        for name in order:
            handle.write(bytes_of(tensors[name]))


def open_file(file: Path, *, tensors: bool = True) -> tuple[dict[str, str], dict[str, Tensor]]:
    """The header metadata and the memory-mapped tensors of a safetensors file."""
    # A regular file, not a device such as /dev/zero (whose size reads 0) or a FIFO.
    # safe_open opens it again by name; contents changed in between fail the digest check.
    open_read(file, CheckpointError, "checkpoint").close()
    try:
        if file.stat().st_size == 0:
            raise CheckpointError(f"{file} is empty (0 bytes): not a checkpoint; it was never written or was truncated")
        with safe_open(file, framework="pt", device="cpu") as handle:
            metadata = handle.metadata() or {}
            found = {name: handle.get_tensor(name) for name in handle.keys()} if tensors else {}
    except SafetensorError as err:
        raise CheckpointError(
            f"{file} is not a valid safetensors file ({err}); it is damaged, truncated or "
            f"not a checkpoint. Restore it from a copy, or load another version."
        ) from err
    except (TypeError, ValueError) as err:  # a dtype or shape torch cannot represent
        raise CheckpointError(f"{file} holds a tensor torch cannot read ({err}); the file is damaged") from err
    except OSError as err:
        raise CheckpointError(f"cannot read {file}: {err}") from err
    return metadata, found


# -- atomic writes ---------------------------------------------------------------------


def write_temporary(
    directory: Path,
    name: str,
    write: Callable[[Path], object],
    error: type[ZooError] = CheckpointError,
    target: Path | None = None,
) -> Path:
    """``write(file)`` to a hidden temporary file in ``directory`` named after ``name``,
    then fsync it; returns the file. On any error the file is removed; an OS error
    (disk full, file too large, read-only, ...) becomes ``error`` naming ``target``
    (``directory / name``) by way of ``os_error``, any other propagates.

    The file gets the mode the umask gives new files: it is created first to learn
    that mode (``mkstemp`` would give 0600), and the mode is set again after ``write``,
    which may replace the file (a library writing through a temporary of its own).
    """
    unique = f".{os.getpid()}-{secrets.token_hex(4)}.tmp"
    room = _name_max(directory) - len(unique.encode()) - 1
    stem = name.encode()[: max(room, 0)].decode(errors="ignore")  # whole characters, so it fits
    temporary = directory / f".{stem}{unique}"
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        mode = os.fstat(fd).st_mode & 0o777
        os.close(fd)
        write(temporary)
        os.chmod(temporary, mode)
        _fsync(temporary)
    except OSError as err:
        _remove(temporary)
        raise os_error(err, "write", target or directory / name, error) from err
    except BaseException:
        _remove(temporary)
        raise
    return temporary


def check_output_file(
    path: object,
    error: type[ZooError],
    *,
    overwrite: bool,
    what: str = "the output file",
    instead: str = "give a new file name",
    make_parents: bool = False,
) -> Path:
    """``path`` as a single-file output the zoo may write, else ``error`` saying why and
    what to do: a regular file or nothing, since the atomic write replaces whatever is
    there (a FIFO, a device, a socket would be replaced by a regular file, a folder is
    not a file name). An existing file, or a link (replaced, never written through),
    needs ``overwrite``. Its folder must exist and be writable unless ``make_parents``
    (the writer creates it). The CLI and the API of every single-file writer check here."""
    if not isinstance(overwrite, bool):  # 'no' is truthy: it would replace the file
        raise error(f"overwrite must be True or False, got {quoted(overwrite)}")
    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
        raise error(f"{what} {quoted(path)} names no file: give the path of the file to write")
    target = Path(path)
    try:
        info: os.stat_result | None = os.lstat(target)
    except (FileNotFoundError, NotADirectoryError):  # its folder is missing or a file: said below
        info = None
    except OSError as err:
        raise error(f"cannot write {what} {printable(str(target))}: {err.strerror or err}") from err
    shown = printable(str(target))
    if info is not None and stat.S_ISDIR(info.st_mode):
        raise error(f"{what} {shown} is a folder, not a file name; give a file path (a name inside it, or another)")
    if info is not None and not (stat.S_ISREG(info.st_mode) or stat.S_ISLNK(info.st_mode)):
        kind = "a FIFO" if stat.S_ISFIFO(info.st_mode) else "a socket" if stat.S_ISSOCK(info.st_mode) else "a device"
        raise error(
            f"{what} {shown} is {kind}, not a regular file; the zoo writes a file by replacing what is there, "
            f"so it never writes onto one: give the path of a regular file"
        )
    if info is not None and not overwrite:
        raise error(f"{shown} exists; pass overwrite=True to replace it, or {instead}")
    _check_output_folder(target, error, what, make_parents)
    return target


def _check_output_folder(target: Path, error: type[ZooError], what: str, make_parents: bool) -> None:
    """The folder ``target`` goes in exists (or, with ``make_parents``, its nearest
    existing ancestor is a folder) and can be written."""
    folder = target.parent
    while make_parents and not os.path.lexists(folder) and folder != folder.parent:
        folder = folder.parent
    if not folder.exists():
        raise error(
            f"cannot write {what} {printable(str(target))}: the folder {printable(str(folder))} does not exist; "
            f"create it first (mkdir -p), or give a path in an existing folder"
        )
    if not folder.is_dir():
        raise error(f"cannot write {what} {printable(str(target))}: {printable(str(folder))} is not a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        code = errno.EROFS if os.statvfs(folder).f_flag & os.ST_RDONLY else errno.EACCES
        raise os_error(OSError(code, os.strerror(code)), f"write {what}", target, error)


def write_atomically(path: Path, write: Callable[[Path], object], error: type[ZooError] = CheckpointError) -> Path:
    """Write ``path`` in one step: ``write_temporary`` in its folder, rename it over
    ``path``, fsync the folder. An OS error is ``error`` (``os_error``: what happened and
    the fix), others propagate; no temporary file is left behind."""
    if path.name in ("", ".", ".."):  # '', '.', '..' or '/': a folder, whose rename would fail as "busy"
        raise error(f"cannot write {quoted(str(path))}: it names a folder, not a file; give a file name")
    temporary = write_temporary(path.parent, path.name, write, error, path)
    try:
        os.replace(temporary, path)
        _fsync_directory(path.parent)
    except OSError as err:
        _remove(temporary)
        raise os_error(err, "write", path, error) from err
    except BaseException:
        _remove(temporary)
        raise
    return path


def _remove(temporary: Path) -> None:
    """Remove a temporary file if it is there; a failure (a filesystem gone read-only)
    leaves it, so that the error that led here is the one reported."""
    with contextlib.suppress(OSError):
        temporary.unlink(missing_ok=True)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_directory(directory: Path) -> None:
    """Make a rename in ``directory`` durable (POSIX; Windows cannot open folders)."""
    if os.name == "posix":
        _fsync(directory)


# -- paths and versions ----------------------------------------------------------------


def path_arg(
    path: object, action: str, error: type[ZooError] = CheckpointError, what: str = "a file or directory path"
) -> Path:
    """``path`` as a Path; ``error`` for a non-path or an empty string."""
    if not isinstance(path, (str, os.PathLike)) or not str(path):
        raise error(f"cannot {action} {quoted(path)}: give {what} as a str or Path (use '.' for the current directory)")
    path = Path(path)
    for part in path.parts:
        size = len(os.fsencode(part))
        if size > _name_max(path.parent if part == path.name else Path(".")):
            raise error(
                f"cannot {action} {quoted(str(path), 80)}: the name {quoted(part, 40)} is {size} bytes long, "
                f"more than the {_name_max(Path('.'))} bytes a file name may have here; use a shorter name"
            )
    if len(os.fsencode(path)) >= 4096:
        raise error(f"cannot {action} {quoted(str(path), 80)}: the path is longer than 4096 bytes")
    return path


def _name_max(directory: Path) -> int:
    """The longest file name (in bytes) the filesystem of ``directory`` allows."""
    for folder in (directory, *directory.parents):
        try:
            return int(os.pathconf(folder, "PC_NAME_MAX"))
        except (OSError, ValueError, AttributeError):
            continue
    return 255


def resolve(path: str | os.PathLike[str], version: int | None) -> Path:
    """The file to read: ``path`` itself, or a version of the directory ``path``."""
    path = path_arg(path, "load")
    if version is not None and (isinstance(version, bool) or not isinstance(version, int) or version < 1):
        raise CheckpointError(f"version must be a positive integer, got {version!r}")
    if path.is_dir():
        found = version_files(path)
        if not found:
            hint = ""
            if (path / "config.json").exists():
                hint = " It looks like a Hugging Face model folder: load it with zoo.from_hf."
            raise CheckpointError(
                f"{path} holds no checkpoint versions (files named v0001{SUFFIX}, ...); "
                f"zoo.save(model, FOLDER) creates them.{hint}"
            )
        if version is None:
            return found[max(found)]
        if version not in found:
            raise CheckpointError(f"{path} has no version {version}; its versions are {_numbers(sorted(found))}")
        return found[version]
    if version is not None:
        raise CheckpointError(
            f"version={version} selects a version of a checkpoint directory, but {path} is not a directory"
        )
    if not path.exists():
        raise CheckpointError(f"no checkpoint at {path}: no such file or directory")
    return path


def version_files(directory: Path) -> dict[int, Path]:
    """``{number: path}`` of the versions in ``directory`` (temporary files excluded).

    Two files claiming one number (``v1.safetensors`` and ``v0001.safetensors``) are an
    error naming both: which of them is "version 1" would depend on the listing order.
    """
    try:
        names = sorted(os.listdir(directory))
    except OSError as err:
        raise CheckpointError(f"cannot list checkpoint directory {directory}: {err}") from err
    found: dict[int, Path] = {}
    for name in names:
        match = VERSION_NAME.fullmatch(name)
        if match:
            number = int(match.group(1))
            if number in found:
                raise CheckpointError(
                    f"{directory} has two files for version {number}: {found[number].name} and {name}. "
                    f"Rename or remove one; zoo names versions {version_name(number)}"
                )
            found[number] = directory / name
    return found


def version_name(number: int) -> str:
    """The file name of version ``number``: ``v0001.safetensors``."""
    return f"v{number:04d}{SUFFIX}"


def _numbers(numbers: list[int]) -> str:
    if len(numbers) <= 12:
        return ", ".join(map(str, numbers))
    return f"{numbers[0]} to {numbers[-1]} ({len(numbers)} in all)"

"""A folder replaced whole, in one step: the new contents are staged in a hidden sibling
(``sibling``), then swapped in by one rename (``renameat2(RENAME_EXCHANGE)`` on Linux, else
two renames), so the path holds the old folder or the new one, never a mix. Staging folders
of a process killed mid-write are removed (``clean_stale``). ``zoo.checkpoint.owned`` decides
when a folder may be replaced; this module only does it."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import re
import secrets
import shutil
import sys
from pathlib import Path

from zoo.errors import ZooError, os_error

_STAGING = re.compile(r"\.(?P<name>.+)\.zoo-(?:new|old)-(?P<pid>[0-9]+)-[0-9a-f]{8}")


def exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one step (Linux ``renameat2(RENAME_EXCHANGE)``); False where unsupported."""
    if sys.platform != "linux":
        return False
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), str(b))


def sibling(target: Path, role: str) -> Path:
    return target.parent / f".{target.name}.zoo-{role}-{os.getpid()}-{secrets.token_hex(4)}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    return True


def clean_stale(target: Path) -> None:
    """Remove staging folders of ``target`` whose process is gone (killed mid-write)."""
    with contextlib.suppress(OSError):
        for entry in os.scandir(target.parent):
            match = _STAGING.fullmatch(entry.name)
            if match and match["name"] == target.name and not _alive(int(match["pid"])):
                shutil.rmtree(entry.path, ignore_errors=True)


def _fsync_folder(folder: Path) -> None:
    if os.name == "posix":
        with contextlib.suppress(OSError):
            fd = os.open(folder, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def swap_in(staging: Path, target: Path) -> None:
    """Put ``staging`` at ``target``; whatever was at ``target`` is removed after."""
    if not os.path.lexists(target):
        os.rename(staging, target)
    elif exchange(staging, target):
        shutil.rmtree(staging, ignore_errors=True)  # now the old folder
    else:
        old = sibling(target, "old")
        os.rename(target, old)
        try:
            os.rename(staging, target)
        except BaseException:
            os.rename(old, target)
            raise
        shutil.rmtree(old, ignore_errors=True)
    _fsync_folder(target.parent)


def makedirs(folder: Path, error: type[ZooError]) -> list[Path]:
    """Create ``folder``'s missing parents; the ones created, outermost last."""
    made = []
    for parent in [folder, *folder.parents]:
        if os.path.lexists(parent):
            break
        made.append(parent)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise os_error(err, "create", folder, error) from err
    return made

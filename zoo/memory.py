"""What a model needs in memory, checked before anything is allocated.

``build`` and ``zoo.load`` construct the model on the meta device first; ``require``
compares the bytes its tensors would take with what the target device has free, so an
absurd request is a zoo error naming the size instead of the allocator's raw error or
the kernel's OOM killer. ``allocating`` turns an allocation that fails anyway into the
same kind of error.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import Tensor, nn

from zoo.errors import ZooError

__all__ = ["available_bytes", "tensor_bytes", "model_bytes", "require", "allocating", "fmt_bytes"]


def fmt_bytes(n: float) -> str:
    """``1536`` -> ``1.5 KiB``."""
    for scale, unit in ((1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


def available_bytes(device: torch.device | str | None = None) -> int | None:
    """Free memory on ``device``; ``None`` if unknown. CPU: the least of the available RAM plus
    free swap, what the cgroup's ``memory.max`` leaves, and what ``ulimit -v`` leaves."""
    device = torch.device(device or "cpu")
    if device.type == "cuda" and torch.cuda.is_available():
        return int(torch.cuda.mem_get_info(device)[0])
    if device.type != "cpu":
        return None
    limits = [free for free in (_machine_free(), _cgroup_free(), _address_space_free()) if free is not None]
    return min(limits) if limits else None


def _machine_free() -> int | None:
    """The machine's available RAM plus free swap."""
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            info = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in handle if line.split()[1:2]}
        return info["MemAvailable"] + info.get("SwapFree", 0)
    except (OSError, KeyError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def _cgroup_free() -> int | None:
    """What this process's cgroup (v2) still lets it use: ``memory.max`` less ``memory.current``
    (a container's memory cap, which /proc/meminfo does not show)."""
    try:
        with open("/proc/self/cgroup", encoding="ascii") as handle:
            path = next((line.split(":", 2)[2].strip() for line in handle if line.startswith("0::")), None)
        if path is None:
            return None
        folder = Path("/sys/fs/cgroup") / path.lstrip("/")
        limit = (folder / "memory.max").read_text().strip()
        if limit == "max":
            return None
        return max(0, int(limit) - int((folder / "memory.current").read_text().strip()))
    except (OSError, ValueError, IndexError):
        return None


def _address_space_free() -> int | None:
    """What ``ulimit -v`` (RLIMIT_AS) still lets this process map."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        if soft == resource.RLIM_INFINITY:
            return None
        with open("/proc/self/statm", encoding="ascii") as handle:
            mapped = int(handle.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        return max(0, soft - mapped)
    except (ImportError, OSError, ValueError, IndexError, AttributeError):
        return None


def tensor_bytes(tensors: Iterable[Tensor]) -> int:
    """Bytes of ``tensors``, each tensor counted once (tied weights are one tensor)."""
    seen: set[int] = set()
    total = 0
    for tensor in tensors:
        if id(tensor) not in seen:
            seen.add(id(tensor))
            total += tensor.numel() * tensor.element_size()
    return total


def model_bytes(model: nn.Module) -> int:
    """Bytes of a model's parameters and buffers (works on the meta device)."""
    return tensor_bytes([*model.parameters(), *model.buffers()])


def require(
    nbytes: int,
    device: torch.device | str | None,
    what: str,
    error: type[ZooError],
    fix: str = "use a smaller config, a smaller dtype (dtype='bf16') or another device",
) -> None:
    """Raise ``error`` (saying ``what`` and how to ``fix`` it) when ``nbytes`` is more
    than ``device`` has free."""
    free = available_bytes(device)
    if free is not None and nbytes > free:
        raise error(
            f"{what} would allocate {fmt_bytes(nbytes)} on {torch.device(device or 'cpu')}, but only "
            f"{fmt_bytes(free)} is free; {fix}"
        )


@contextmanager
def allocating(nbytes: int, what: str, error: type[ZooError]) -> Iterator[None]:
    """Turn an allocation failure inside the block into ``error`` naming the size."""
    try:
        yield
    except (MemoryError, torch.OutOfMemoryError) as err:
        raise error(f"{what}: out of memory allocating {fmt_bytes(nbytes)} ({err})") from err
    except RuntimeError as err:
        if "alloc" not in str(err).lower() and "out of memory" not in str(err).lower():
            raise
        raise error(f"{what}: out of memory allocating {fmt_bytes(nbytes)} ({err})") from err

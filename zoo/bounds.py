"""Bounds on the sizes a user or a file sets, computed from this machine, checked before work.

A thread count, a batch, a number of seeds, a sequence length or a budget's steps each
turn into threads or bytes. Each function here compares what a size asks for with
what the machine has (its CPUs, its free memory) and raises a zoo error naming the flag
(and its config-file key) before anything is allocated, instead of a segfault, an
allocator crash or a run that never ends. The estimates are honest products (count x
bytes per element, lower bounds of what the work must hold), so they refuse only what
certainly cannot fit: a normal run is never refused.
"""

from __future__ import annotations

import os

import torch

from zoo.errors import ConfigError, ZooError
from zoo.memory import available_bytes, fmt_bytes

__all__ = [
    "STEP_BYTES",
    "THREADS_PER_CPU",
    "check_bytes",
    "check_elements",
    "check_steps",
    "check_threads",
    "count",
    "cpu_count",
    "max_threads",
    "named",
    "size",
]

#: Threads per CPU a run may ask for: oversubscribing a little is a choice, 100,000
#: threads crash torch's thread pool.
THREADS_PER_CPU = 4
#: Bytes a training run holds per optimizer step whatever the model: the step's loss, a
#: Python float in the losses list it returns (24 bytes of float, 8 of pointer).
STEP_BYTES = 32


def cpu_count() -> int:
    """The CPUs this process may run on (its affinity where the OS says, else all)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def max_threads() -> int:
    """The most CPU threads a run may ask for here."""
    return THREADS_PER_CPU * cpu_count()


def count(n: int) -> str:
    """``1234567`` -> ``1,234,567``; past 10**15, ``about 1.28e+52``, however many digits."""
    if n < 10**15:
        return f"{n:,}"
    digits = str(n)
    return f"about {digits[0]}.{digits[1:3]}e+{len(digits) - 1}"


def size(nbytes: int) -> str:
    """``fmt_bytes`` up to a PiB; past it, bytes as ``count`` writes them."""
    return fmt_bytes(nbytes) if nbytes < 1 << 50 else f"{count(nbytes)} bytes"


def named(flag: str, key: str | None = None) -> str:
    """How a message names a size: its flag, and the key a config file gives it by
    (``--eval-batches (eval_batches in a --config file)``); ``key=""`` for no file key."""
    key = flag.lstrip("-").replace("-", "_") if key is None else key
    return f"{flag} ({key} in a --config file)" if key else flag


def check_threads(threads: int | None, flag: str = "--threads", *, key: str | None = None) -> None:
    """Refuse more CPU threads than ``max_threads()`` (None: leave torch's as set)."""
    if threads is None or isinstance(threads, bool) or not isinstance(threads, int):
        return  # the caller's type checks say what is wrong with a non-integer
    limit = max_threads()
    if threads > limit:
        raise ConfigError(
            f"{named(flag, key)} {count(threads)} is more threads than this machine can run: it has {cpu_count()} "
            f"CPU(s), so at most {limit} ({THREADS_PER_CPU} per CPU); lower {flag} (or leave it out)"
        )


def check_bytes(
    nbytes: int,
    what: str,
    flag: str,
    *,
    key: str | None = None,
    device: torch.device | str | None = None,
    error: type[ZooError] = ConfigError,
    fix: str | None = None,
) -> None:
    """Refuse ``what`` (set by ``flag``; ``""``: by an API argument ``fix`` names) when
    its ``nbytes`` is more than ``device`` (default: this machine's RAM) has free; unknown
    free memory refuses nothing."""
    free = available_bytes(device)
    if free is not None and nbytes > free:
        where = torch.device(device or "cpu")
        prefix = f"{named(flag, key)}: " if flag else ""
        raise error(
            f"{prefix}{what} would take {size(nbytes)} on {where}, but only {fmt_bytes(free)} is free; "
            f"{fix or f'lower {flag}'}"
        )


def check_elements(
    elements: int,
    bytes_per: int,
    what: str,
    flag: str,
    *,
    key: str | None = None,
    device: torch.device | str | None = None,
    error: type[ZooError] = ConfigError,
    fix: str | None = None,
) -> None:
    """``check_bytes`` of ``elements`` of ``bytes_per`` bytes each (exact integers: no
    overflow however large the sizes multiplied into ``elements``)."""
    check_bytes(
        int(elements) * int(bytes_per), f"{what} ({count(int(elements))} x {bytes_per} bytes)", flag, key=key, device=device,
        error=error, fix=fix,
    )  # fmt: skip


def check_steps(steps: int, what: str, flag: str, *, key: str | None = None) -> None:
    """Refuse a number of optimizer steps a run could not hold its record of in memory
    (``STEP_BYTES`` each): a budget of 1e300 tokens is a run that never ends."""
    check_elements(steps, STEP_BYTES, f"{what}: {count(steps)} optimizer steps, each one's loss kept", flag, key=key)

"""torch.distributed for training: the process group from torchrun's environment, and
the model prepared for one strategy.

- ``single``: one process, the model as it is.
- ``ddp``: ``DistributedDataParallel``, every rank a full replica; gradients averaged.
- ``fsdp``: FSDP2, ``fully_shard`` on each block and then on the root (as torchtitan
  does), parameters, gradients and optimizer moments sharded over the ranks; with bf16 a
  ``MixedPrecisionPolicy`` (bf16 compute, fp32 reductions and master weights).
- ``auto``: DDP when weights, gradients and AdamW's two moments fit in 60% of one
  device's memory (CPU: always), else FSDP2; ``single`` in one process.

gloo on CPU, nccl on CUDA. ``torchrun`` sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``
and the rendezvous; a plain ``zoo train`` runs as a world of one.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import xxhash
from torch import Tensor, nn

from zoo._version import __version__
from zoo.errors import ConfigError, DistributedError, quoted
from zoo.training.choices import STRATEGIES

BYTES_PER_PARAMETER = 16  # fp32 weights, gradients and AdamW's two moments


@dataclass(frozen=True)
class World:
    """This process's place among the training processes."""

    rank: int
    size: int
    local_rank: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1


def launcher_int(name: str, default: int, *, low: int = 0) -> int:
    """``$name`` as torchrun sets it (``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK``): a whole
    number >= ``low``, ``default`` when unset; anything else is a ``ConfigError``."""
    text = os.environ.get(name)
    if text is None:
        return default
    if not text.strip().isdigit() or not low <= int(text) < 1 << 20:
        raise ConfigError(
            f"the environment variable {name}={quoted(text, 40)} must be a whole number >= {low}; it is set by "
            f"torchrun for each rank: unset it to run one process, or start the run with torchrun"
        )
    return int(text)


def init_world(
    device: str | torch.device | None = None, *, timeout: datetime.timedelta | None = None
) -> tuple[World, bool]:
    """The world torchrun describes (a world of one without it); initialises the process
    group when needed (gloo for ``device="cpu"``, else nccl when there is a GPU), with
    torch's default ``timeout`` for collectives unless given. Returns the world and
    whether this call created the group."""
    created = False
    size = launcher_int("WORLD_SIZE", 1, low=1)
    if size > 1 and not dist.is_initialized():
        launcher_int("RANK", 0)
        missing = [name for name in ("MASTER_ADDR", "MASTER_PORT") if not os.environ.get(name)]
        if missing:
            raise ConfigError(
                f"WORLD_SIZE={size} asks for {size} ranks, but {' and '.join(missing)} {'are' if len(missing) > 1 else 'is'} not set; start the run "
                f"with torchrun (it sets them), or unset WORLD_SIZE to run one process"
            )
        backend = "nccl" if torch.cuda.is_available() and device != "cpu" else "gloo"
        dist.init_process_group(backend, timeout=timeout or collective_timeout())
        created = True
    if dist.is_initialized():
        rank, size = dist.get_rank(), dist.get_world_size()
    else:
        rank, size = 0, 1
    local_rank = launcher_int("LOCAL_RANK", 0)
    if device is None:
        device = f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu"
    target = torch.device(device)
    if target.type == "cuda":
        torch.cuda.set_device(target)
    return World(rank, size, local_rank, target), created


def collective_timeout() -> datetime.timedelta:
    """How long a collective waits for the other ranks before it fails: ``$ZOO_DIST_TIMEOUT``
    seconds, default 600, so a rank that went its own way stops the run instead of
    hanging it."""
    text = os.environ.get("ZOO_DIST_TIMEOUT", "600")
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds < 1e7:
        raise ConfigError(f"ZOO_DIST_TIMEOUT={text!r} must be a number of seconds > 0 (default 600)")
    return datetime.timedelta(seconds=seconds)


# What torch's collectives raise when the other ranks are gone or late (gloo's words; nccl's
# watchdog reports a timeout the same way when asynchronous error handling does not abort).
_TIMED_OUT = re.compile(r"timed out|timeout", re.IGNORECASE)
_PEER_GONE = re.compile(r"connection closed by peer|connection reset by peer|broken pipe", re.IGNORECASE)


@contextlib.contextmanager
def collective_errors(world: World) -> Iterator[None]:
    """Turn a collective that timed out, or found another rank gone, into a
    ``DistributedError`` saying which and what to do; other errors pass unchanged."""
    try:
        yield
    except RuntimeError as err:  # torch.distributed.DistBackendError is one too
        if not world.distributed:
            raise
        text = str(err)
        seconds = f"{collective_timeout().total_seconds():g}"
        if _TIMED_OUT.search(text):
            raise DistributedError(
                f"rank {world.rank} of {world.size}: the other ranks did not reach the same step within "
                f"{seconds} s (ZOO_DIST_TIMEOUT): one stopped, hangs or runs another command; read the other "
                f"ranks' output, and for steps that are only slow (a first compile, a large save) raise "
                f"ZOO_DIST_TIMEOUT=SECONDS"
            ) from err
        if _PEER_GONE.search(text):
            raise DistributedError(
                f"rank {world.rank} of {world.size}: another rank stopped mid-run (its connection closed); its "
                f"output says why. Saved versions are complete: continue with --resume"
            ) from err
        raise


def agree(world: World, settings: Any, data: Any, config: Any, out: Any, resume: bool) -> None:
    """Every rank must train the same run: rank 0's resolved settings, data (its content
    digest) and model config are compared with every rank's before the first step; a
    difference is a ``ConfigError`` on every rank naming the setting and both values.

    Without it, ranks given another ``--seq-len``, ``--lr`` or ``--data`` train to the end
    without a word, and another ``--save-every`` deadlocks."""
    if not world.distributed:
        return
    values: dict[str, Any] = {f"{k} (--{k.replace('_', '-')})": v for k, v in settings.to_dict().items()}
    values["the data (--data, by content)"] = data.digest or [data.source, data.train.tokens, data.val.tokens]
    values["the model config (NAME and --set)"] = config.model_dump(mode="json") if config is not None else None
    values["--out"] = None if out is None else str(Path(out).absolute())
    values["--resume"] = bool(resume)
    values["the zoo version"] = __version__
    names = sorted(values)
    hashes = torch.tensor(
        [len(names)]
        + [xxhash.xxh3_64_intdigest(json.dumps(values[n], sort_keys=True, default=str).encode()) >> 1 for n in names],
        dtype=torch.int64,
    )
    gathered = all_gather(hashes, world)
    differing = [
        (i - 1, [rank for rank, other in enumerate(gathered) if int(other[i]) != int(gathered[0][i])])
        for i in range(len(hashes))
    ]
    differing = [(i, ranks) for i, ranks in differing if ranks]
    if not differing:
        return
    if differing[0][0] < 0:
        raise ConfigError("the ranks run different zoo versions; install the same zoo on every node")
    reference = json.loads(
        broadcast_text(json.dumps({names[i]: values[names[i]] for i, _ in differing}, default=str), world)
    )
    lines = []
    for i, ranks in differing:
        theirs = reference[names[i]]
        if world.rank == 0:
            detail = f"rank 0: {_short(theirs)}"
        else:
            mine = json.loads(json.dumps(values[names[i]], default=str))
            fields = field_differences(theirs, mine)
            here = f"on this rank ({world.rank})"
            detail = "; ".join(f"{f}: {_short(a)} on rank 0, {_short(b)} {here}" for f, a, b in fields[:4])
            detail = detail or f"rank 0: {_short(theirs)}, {_short(mine)} {here}"
        lines.append(f"{names[i]} differs on rank(s) {ranks[:8]} ({detail})")
    raise ConfigError(
        "the ranks were started with different settings: " + "; ".join(lines) + ". Start every rank with the same "
        "command (torchrun passes one command to all ranks; on several nodes, check each node's)"
    )


def _short(value: Any) -> str:
    return json.dumps(value, default=str)[:80]


def field_differences(reference: Any, mine: Any, path: str = "") -> list[tuple[str, Any, Any]]:
    """Where two JSON objects differ, field by field (``attention.name``), as ``(field,
    reference's value, mine)``; empty unless both are objects."""
    if not (isinstance(reference, dict) and isinstance(mine, dict)):
        return []
    found: list[tuple[str, Any, Any]] = []
    for key in sorted(set(reference) | set(mine), key=str):
        field = f"{path}.{key}" if path else str(key)
        a, b = reference.get(key, "(absent)"), mine.get(key, "(absent)")
        if isinstance(a, dict) and isinstance(b, dict):
            found += field_differences(a, b, field)
        elif a != b:
            found.append((field, a, b))
    return found


def close_world(created: bool) -> None:
    if created and dist.is_initialized():
        dist.destroy_process_group()


def choose_strategy(strategy: str, world: World, parameters: int) -> str:
    """The strategy to run: ``auto`` resolved, and ``single`` in a world of one."""
    if strategy not in STRATEGIES:
        raise ConfigError(f"unknown strategy {strategy!r}; use one of {', '.join(STRATEGIES)} (--strategy)")
    if not world.distributed:
        return "single"
    if strategy == "single":
        raise ConfigError(
            f"strategy 'single' runs one process, but torchrun started {world.size}; "
            f"use --strategy ddp or fsdp, or run without torchrun"
        )
    if strategy != "auto":
        return strategy
    if world.device.type != "cuda":
        return "ddp"
    budget = 0.6 * torch.cuda.get_device_properties(world.device).total_memory
    return "ddp" if parameters * BYTES_PER_PARAMETER <= budget else "fsdp"


def blocks_of(model: nn.Module) -> nn.ModuleList | None:
    """The model's list of transformer blocks (``model.blocks``), if it has one."""
    blocks = getattr(model, "blocks", None)
    return blocks if isinstance(blocks, nn.ModuleList) else None


def prepare_model(
    model: nn.Module,
    strategy: str,
    world: World,
    *,
    param_dtype: torch.dtype | None = None,
    compile: bool = False,
    activation_checkpointing: bool = False,
) -> nn.Module:
    """``model`` on the world's device, checkpointed, compiled and wrapped per ``strategy``.

    Activation checkpointing wraps each block (torch's ``checkpoint_wrapper``, which keeps
    parameter names); ``compile`` compiles each block in place (names unchanged).
    """
    # torch's FSDP and checkpointing modules take ~0.4 s to import: loaded here, on use,
    # so that every `zoo` command does not pay for them at start-up.
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    model.to(world.device)
    blocks = blocks_of(model)
    if activation_checkpointing:
        if blocks is None:
            raise ConfigError(f"activation checkpointing wraps model.blocks, which a {type(model).__name__} lacks")
        for i, block in enumerate(blocks):
            blocks[i] = checkpoint_wrapper(block, preserve_rng_state=True)
    if compile:
        for block in blocks if blocks is not None else [model]:
            block.compile()
    if strategy == "single":
        return model
    if strategy == "ddp":
        ids = [world.device.index] if world.device.type == "cuda" else None
        return nn.parallel.DistributedDataParallel(model, device_ids=ids)
    mesh = init_device_mesh(world.device.type, (world.size,))
    policy = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32)
    for block in blocks if blocks is not None else []:
        fully_shard(block, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    return model


@contextlib.contextmanager
def gradient_sync(model: nn.Module, sync: bool) -> Iterator[None]:
    """Skip the gradient all-reduce of a micro-batch that is not the last of its step."""
    if sync:
        yield
    elif isinstance(model, nn.parallel.DistributedDataParallel):
        with model.no_sync():
            yield
    elif callable(set_sync := getattr(model, "set_requires_gradient_sync", None)):  # FSDP2
        set_sync(False)
        try:
            yield
        finally:
            set_sync(True)
    else:
        yield


def all_sum(value: Tensor, world: World) -> Tensor:
    """``value`` summed over the ranks (itself in a world of one)."""
    if world.distributed:
        value = value.clone()
        dist.all_reduce(value)
    return value


def all_gather(value: Tensor, world: World) -> list[Tensor]:
    """Every rank's ``value`` (same shape and dtype on every rank), by rank."""
    if not world.distributed:
        return [value]
    local = value.to(world.device)
    out = [torch.empty_like(local) for _ in range(world.size)]
    dist.all_gather(out, local)
    return [t.to(value.device) for t in out]


def barrier(world: World) -> None:
    if world.distributed:
        dist.barrier()


def broadcast_flag(flag: bool, world: World) -> bool:
    """Rank 0's ``flag`` on every rank."""
    if not world.distributed:
        return flag
    value = torch.tensor([int(flag)], device=world.device if world.device.type == "cuda" else "cpu")
    dist.broadcast(value, 0)
    return bool(value.item())


def broadcast_text(text: str, world: World) -> str:
    """Rank 0's ``text`` on every rank (UTF-8 bytes in tensors, no pickle)."""
    if not world.distributed:
        return text
    device = world.device if world.device.type == "cuda" else torch.device("cpu")
    data = text.encode("utf-8")
    size = torch.tensor([len(data)], dtype=torch.int64, device=device)
    dist.broadcast(size, 0)
    buffer = torch.zeros(int(size.item()), dtype=torch.uint8, device=device)
    if world.is_main and data:
        buffer.copy_(torch.frombuffer(bytearray(data), dtype=torch.uint8))
    if int(size.item()):
        dist.broadcast(buffer, 0)
    return bytes(buffer.cpu().tolist()).decode("utf-8")

"""Checkpointing a run: the out folder checked, a version and its training state saved
(collectively; rank 0 writes), old versions pruned, and a resume's state read back and
checked against the run it continues."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import torch
from torch import Tensor, nn

from zoo.checkpoint import load, save, unwrap, versions
from zoo.config import ModelConfig
from zoo.errors import CheckpointError, ConfigError, InputError
from zoo.factory import build
from zoo.training.data import TokenData
from zoo.training.distributed import World, barrier
from zoo.training.metrics import LOGS
from zoo.training.settings import RESUMABLE_CHANGES, TrainSettings
from zoo.training.state import TrainingState, optimizer_tensors, read_state, state_path, write_state
from zoo.training.stateful import Stateful, collect


def output_folder(out: str | os.PathLike[str] | None, resume: bool, world: World) -> Path | None:
    """The out folder, checked: new or empty without ``resume``, holding versions with it."""
    if out is None:
        if resume:
            raise ConfigError("resume needs the run's folder: pass out=DIR (--out DIR)")
        return None
    folder = Path(out)
    if resume:
        if not folder.is_dir() or not versions(folder):
            raise CheckpointError(f"nothing to resume in {folder}: it holds no saved versions; drop --resume to start")
        return folder
    # A run stopped before its first save left only its own logs: start it again.
    if folder.exists() and (not folder.is_dir() or any(p.name not in LOGS for p in folder.iterdir())):
        raise InputError(
            f"--out {folder} is not empty; pass --resume to continue the run in it, or choose a new folder"
        )
    barrier(world)  # every rank has looked before rank 0 creates it
    if world.is_main:
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise InputError(f"cannot create --out {folder}: {err.strerror}; choose a writable folder") from err
    barrier(world)
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InputError(f"--out {folder} is not writable; choose a writable folder")
    return folder


def resume_state(model: nn.Module, config: Any, data: TokenData, settings: TrainSettings, out: Path) -> TrainingState:
    """The newest version's weights loaded into ``model``, and its training state, checked."""
    newest = versions(out)[-1]
    state = read_state(state_path(newest.path))
    if config is not None and json.loads(state.config) != json.loads(config.model_dump_json()):
        raise ConfigError(
            f"cannot resume {out} with another model config; train the saved one (zoo train {out} --resume), "
            f"or start a new run in another --out folder"
        )
    saved, now = state.settings, settings.to_dict()
    changed = sorted(k for k in now if k not in RESUMABLE_CHANGES and saved.get(k) != now[k])
    if changed:
        listing = ", ".join(f"{k}: {saved.get(k)!r} -> {now[k]!r}" for k in changed)
        raise ConfigError(
            f"cannot resume {out} with other training settings ({listing}); resume with the run's settings, "
            f"or start a new run in another --out folder"
        )
    if state.manifest_digest and data.digest and state.manifest_digest != data.digest:
        raise InputError(f"{out} was trained on other data (manifest digest differs); resume with the run's --data")
    saved_model = load(newest.path)
    model.load_state_dict(saved_model.state_dict())
    return state


def save_version(
    out: Path,
    model: nn.Module,
    world: World,
    strategy: str,
    settings: TrainSettings,
    data: TokenData,
    optimizer: torch.optim.Optimizer,
    states: Mapping[str, Stateful],
    metadata: dict[str, Any],
) -> Path | None:
    """A new version in ``out`` and its training state: the optimizer's and every part of
    ``states`` (``stateful.collect``); collective, rank 0 writes.

    The state is written first, then the version, so a version always has its state."""
    optim, groups = optimizer_tensors(model, optimizer)
    parts = {**optim, **collect(states)}
    full = None
    if strategy == "fsdp":
        from torch.distributed.checkpoint.state_dict import (  # on use: slow import
            StateDictOptions,
            get_model_state_dict,
        )

        full = cast(
            dict[str, Tensor],
            get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)),
        )
    path = None
    if world.is_main:
        config = getattr(model, "config", None)
        config_json = config.model_dump_json() if config is not None else "null"
        state = TrainingState.of_parts(parts, settings.to_dict(), config_json, data.digest, world.size, groups)
        existing = versions(out)
        number = (existing[-1].version if existing else 0) + 1
        write_state(state_path(out / f"v{number:04d}.safetensors"), state)
        training = {
            "step": state.step,
            "tokens": state.tokens,
            "tokenizer": data.tokenizer,
            "manifest_digest": data.digest,
            "data": data.source,
            "world_size": world.size,
            "strategy": strategy,
            "settings": settings.to_dict(),
        }
        path = save(_plain_model(model, full), out, metadata={**metadata, "training": training})
        if path.name != f"v{number:04d}.safetensors":
            raise CheckpointError(f"another process is saving into {out}; give each run its own --out folder")
        _prune(out, settings.keep_last)
    barrier(world)
    return path


def _plain_model(model: nn.Module, full: dict[str, Tensor] | None) -> nn.Module:
    """The model to ``zoo.save``: itself, or under FSDP2 a copy holding the gathered weights."""
    if full is None:
        return unwrap(model)
    config: ModelConfig = getattr(model, "config")  # noqa: B009  nn.Module's __getattr__ types it as Tensor
    copy = build(config, device="meta")
    copy.load_state_dict(full, assign=True)
    if hasattr(copy, "tie_weights"):
        copy.tie_weights()
    return copy


def _prune(out: Path, keep_last: int | None) -> None:
    """Remove all but the newest ``keep_last`` versions (each model file, then its state)."""
    if keep_last is None:
        return
    for old in versions(out)[:-keep_last]:
        old.path.unlink(missing_ok=True)
        state_path(old.path).unlink(missing_ok=True)

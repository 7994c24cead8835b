"""Checkpointing a run: the out folder checked, a version and its training state saved
(collectively; rank 0 writes), old versions pruned, and a resume's state read back and
checked against the run it continues."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import torch
from torch import Tensor, nn

from zoo.checkpoint import VersionInfo, load, save, unwrap, versions
from zoo.checkpoint.owned import LOCK, MARKER, FolderLockedError, claim
from zoo.checkpoint.tokenizer import TOKENIZER_FOLDER
from zoo.errors import CheckpointError, ConfigError, InputError, ZooError, quoted
from zoo.nn.config import ModelConfig
from zoo.nn.factory import build
from zoo.text.loading import keep_tokenizer_files
from zoo.training.distributed import World, barrier, broadcast_text
from zoo.training.sampling import TokenData
from zoo.training.settings import RESUMABLE_CHANGES, TrainSettings
from zoo.training.state import SUFFIX, TrainingState, optimizer_tensors, read_state, state_path, write_state
from zoo.training.stateful import Stateful, collect

RUN_KIND = "train"  # the kind of output folder a training run owns (zoo.checkpoint.owned)
_RUN_FILE = re.compile(
    r"v[0-9]+(\.state)?\.safetensors|metrics\.(jsonl|csv)|tensorboard|wandb|run\.toml|curves\.png|\..*\.tmp"
)
_TEMPORARY = re.compile(r"\..*\.(?P<pid>[0-9]+)-[0-9a-f]{8}\.tmp")


def _older_run(folder: Path) -> bool:
    """Whether ``folder`` (without a marker) is a run of an older zoo: only files a run writes."""
    names = [p.name for p in folder.iterdir() if p.name not in (LOCK, MARKER)]
    return bool(names) and all(_RUN_FILE.fullmatch(name) for name in names)


def output_folder(
    out: str | os.PathLike[str] | None,
    resume: bool,
    world: World,
    stack: contextlib.ExitStack | None = None,
    *,
    overwrite: bool = False,
) -> Path | None:
    """The out folder, claimed for this run (``zoo.checkpoint.owned``: a marker, and a lock
    held until ``stack`` closes, so a second run on it is refused), and checked: without
    ``resume`` it must hold no version, with it at least one. ``overwrite`` replaces a
    folder that holds anything (a run, or files the zoo did not write) with an empty one,
    swapped in whole. Rank 0 claims; every rank gets its verdict, so no rank is left
    waiting on a collective."""
    if overwrite and resume:
        raise ConfigError("resume continues the run in --out and overwrite replaces it; give one of them")
    if out is None:
        if resume:
            raise ConfigError("resume needs the run's folder: pass out=DIR (--out DIR)")
        if overwrite:
            raise ConfigError("overwrite replaces the run's folder: pass out=DIR (--out DIR) with it")
        return None
    folder = Path(out)
    failure = ""
    if world.is_main:
        try:
            owned = claim(
                folder,
                RUN_KIND,
                "zoo train",
                error=InputError,
                overwrite=overwrite,
                adopt=_older_run,
                what="--out",
                hint="pass --resume to continue the run in it, --overwrite to replace it, or choose a new folder",
            )
            if stack is not None:
                stack.callback(owned.release)
            else:
                owned.release()
            _check_contents(folder, resume)
        except ZooError as err:
            failure = f"{type(err).__name__}\0{err}"
    failure = broadcast_text(failure, world)
    if failure:
        kind, _, message = failure.partition("\0")
        raise {"CheckpointError": CheckpointError, "FolderLockedError": FolderLockedError}.get(kind, InputError)(
            message
        )
    return folder


def _check_contents(folder: Path, resume: bool) -> None:
    """Resume needs a version; a fresh start needs none. What a run killed before its
    first version left (logs, an orphaned state, temporary files) is cleaned away."""
    _clean_temporary(folder)
    found = versions(folder)
    if resume and not found:
        raise CheckpointError(f"nothing to resume in {folder}: it holds no saved versions; drop --resume to start")
    if not resume and found:
        raise InputError(
            f"--out {folder} holds a run ({len(found)} version(s)); pass --resume to continue it, --overwrite to "
            f"replace it with a new run (its versions are deleted), or choose a new folder"
        )
    if not resume:  # a run stopped before its first version: start it again, from nothing
        for path in folder.iterdir():
            if path.name.endswith(SUFFIX) and path.is_file():
                path.unlink()
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InputError(f"--out {folder} is not writable; choose a writable folder")


def _clean_temporary(folder: Path) -> None:
    """Remove temporary files of writers that are gone (the folder is locked: no writer is left)."""
    for path in folder.iterdir():
        match = _TEMPORARY.fullmatch(path.name)
        if match and int(match["pid"]) != os.getpid() and path.is_file():
            path.unlink(missing_ok=True)


def resume_state(model: nn.Module, config: Any, data: TokenData, settings: TrainSettings, out: Path) -> TrainingState:
    """The newest version's weights loaded into ``model``, and its training state, checked."""
    found = versions(out)
    _check_one_run(out, found)
    newest = found[-1]
    state = read_state(state_path(newest.path))
    _check_binding(newest.path, newest.metadata, state)
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


def resume_caveats(state: TrainingState, settings: TrainSettings, world_size: int, config: Any) -> list[str]:
    """Why a resumed run's weights will differ from the same run uninterrupted, though it
    resumes correctly: another micro-batch size sums each step's gradients in another order
    (float sums differ in their last bits, and grow apart), and another world size draws
    dropout's masks from other ranks' streams. Each version records its own settings and
    world size, so the run's record shows where it changed."""
    rates = getattr(config, "dropout", None)
    dropout = max(rates.embedding, rates.attention, rates.residual) if rates is not None else 0.0
    caveats = []
    batch = settings.batch_size
    saved_micro = state.settings.get("micro_batch_size") or batch // max(state.world_size, 1)
    micro = settings.micro_batch_size or batch // world_size
    if (saved_micro, state.world_size) != (micro, world_size):
        caveats.append(
            f"micro-batches of {micro} on {world_size} rank(s) where the run had {saved_micro} on "
            f"{state.world_size} (--micro-batch-size, the ranks): each step's gradients are summed in another order, "
            f"so the weights will differ slightly from an uninterrupted run's"
        )
    if state.world_size != world_size and dropout > 0:
        caveats.append(
            f"{world_size} rank(s) where the run saved {state.world_size}, with dropout={dropout:g}: dropout's masks "
            f"come from other random streams, so the weights will differ from an uninterrupted run"
        )
    return caveats


def _check_one_run(out: Path, found: list[VersionInfo]) -> None:
    """Every version in a run's folder is of that run (one run id; older zoos record
    none): a version copied in from another run would continue that run's weights under
    this run's history."""
    runs: dict[str, list[str]] = {}
    for version in found:
        training = version.metadata.get("training")
        run_id = training.get("run_id") if isinstance(training, dict) else None
        if isinstance(run_id, str):
            runs.setdefault(run_id, []).append(version.path.name)
    if len(runs) > 1:
        listing = "; ".join(
            f"run {quoted(run_id, 20)}: {names[0]}" + (f" .. {names[-1]} ({len(names)})" if len(names) > 1 else "")
            for run_id, names in runs.items()
        )
        raise CheckpointError(
            f"{out} holds versions of {len(runs)} runs ({listing}): a version was copied in from another run. "
            f"Move the other run's versions out of the folder, or start a new run in another --out folder"
        )


def _check_binding(version: Path, metadata: dict[str, Any], state: TrainingState) -> None:
    """The state must be the one saved with ``version``: the version records its state's
    digest (and run); a version of an older zoo records only its step, which must agree."""
    training = metadata.get("training")
    training = training if isinstance(training, dict) else {}
    advice = (
        f"put back the {state_path(version).name} saved with it, or resume from an earlier version by moving "
        f"{version.name} away, or start a new run in another --out folder"
    )
    bound = training.get("state_digest")
    if bound is not None:
        if bound != state.digest:
            other = "another run" if state.run_id != training.get("run_id") else "another version of this run"
            raise CheckpointError(
                f"the training state beside {version} belongs to {other} (step {state.step}; the version records "
                f"another state digest); {advice}"
            )
        return
    step = training.get("step")  # a version saved by an older zoo: no digest to compare
    if isinstance(step, int) and step != state.step:
        raise CheckpointError(
            f"the training state beside {version} is from step {state.step}, the version from step {step}; {advice}"
        )


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
        run_id = metadata.get("run_id")
        state = dataclasses.replace(state, run_id=run_id if isinstance(run_id, str) else None)
        existing = versions(out)
        number = (existing[-1].version if existing else 0) + 1
        state_digest = write_state(state_path(out / f"v{number:04d}.safetensors"), state)
        training = {
            "state_digest": state_digest,
            "run_id": state.run_id,
            "step": state.step,
            "tokens": state.tokens,
            "tokenizer": data.tokenizer,
            "manifest_digest": data.digest,
            "data": data.source,
            "world_size": world.size,
            "strategy": strategy,
            "settings": settings.to_dict(),
        }
        extra = {k: v for k, v in metadata.items() if k != "run_id"}  # the run is named in training
        if data.tokenizer_files and data.path is not None:  # the data's own tokenizer travels with the run
            hashes = keep_tokenizer_files(data.path / TOKENIZER_FOLDER, out / TOKENIZER_FOLDER)
            extra["tokenizer"] = {"files": hashes, "source": data.tokenizer}
        path = save(_plain_model(model, full), out, metadata={**extra, "training": training})
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

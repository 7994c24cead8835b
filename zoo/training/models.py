"""The model ``train`` trains: a built model, a checkpoint (with the tokenizer it was
trained with), or a preset name built with overrides and the run's seed."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from zoo.checkpoint import inspect, load, versions
from zoo.errors import CheckpointError, ConfigError, RecordError
from zoo.interop.hf import from_hf
from zoo.interop.hub import is_hub_id, local_or_snapshot
from zoo.nn.config import resolve_config
from zoo.nn.factory import build
from zoo.nn.registry import default_registry
from zoo.text.loading import has_tokenizer, recorded_tokenizer_source
from zoo.training.data import tokenizer_cache
from zoo.training.manifest import TOKENIZERS
from zoo.training.settings import TrainSettings


def gpt2_vocab(model: nn.Module) -> bool:
    return getattr(getattr(model, "config", None), "vocab_size", 0) >= 50257


def model_of(
    model: nn.Module | str | os.PathLike[str],
    overrides: dict[str, Any],
    settings: TrainSettings,
    resume_from: Any,
    given: bool = False,
) -> tuple[nn.Module, str | None]:
    """The model to train and the tokenizer it was trained with (when a checkpoint says);
    ``given``: a tokenizer is given, so a checkpoint's refused record is passed over."""
    if isinstance(model, nn.Module):
        if overrides:
            raise ConfigError("overrides apply to a preset name or checkpoint, not to a built model")
        return model, None
    if not isinstance(model, (str, os.PathLike)):
        raise ConfigError(f"train() takes a preset name, a checkpoint path or a model, got {type(model).__name__}")
    path = Path(model)
    if (path / "config.json").is_file() or is_hub_id(str(model)):  # a Hugging Face folder or hub id: fine-tune it
        if overrides:
            raise ConfigError("overrides apply to a preset name or a zoo checkpoint, not to imported weights")
        folder, _ = local_or_snapshot(str(model))
        return from_hf(folder).train(), str(model) if has_tokenizer(folder) else None
    saved = versions(path) if path.is_dir() else []
    if path.is_dir() and not saved:
        if (
            str(model) in default_registry().preset_names()
        ):  # a folder named like a preset (a run stopped early): the preset
            path = Path("\0")  # exists nowhere
        else:
            raise CheckpointError(
                f"{path} is a folder without checkpoint versions: nothing to train from. Give a preset name "
                f"(see `zoo list`) or a checkpoint file or folder"
            )
    if path.exists():
        meta = saved[-1].metadata if saved else inspect(path, verify=False).metadata
        loaded = load(path)
        if overrides:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(settings.seed)
                rebuilt = build(resolve_config(loaded.config, overrides))
            try:
                rebuilt.load_state_dict(loaded.state_dict())
            except RuntimeError as err:
                raise ConfigError(f"the overrides change the shape of {path}'s weights: {err}") from err
            loaded = rebuilt
        try:
            return loaded.train(), checkpoint_tokenizer(path, meta)
        except RecordError:
            if not given:
                raise
            return loaded.train(), None
    trained = None
    if resume_from is not None and Path(resume_from).is_dir() and (saved := versions(resume_from)):
        trained = trained_tokenizer(saved[-1].metadata)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(settings.seed)
        return build(str(model), **overrides), trained


def checkpoint_tokenizer(path: Path, metadata: dict[str, Any]) -> str | None:
    """The tokenizer to prepare text with for a checkpoint: the one its training data was
    prepared with, where that is still at hand, else the one it carries (a name, a hub
    snapshot, files kept beside it, or its embedded files, unpacked into the data cache)."""
    trained = trained_tokenizer(metadata)
    if trained in TOKENIZERS:  # a folder or hub id it names is read from the record, checked (never as a path)
        return str(trained)
    return recorded_tokenizer_source(path, unpack=tokenizer_cache())


def trained_tokenizer(metadata: dict[str, Any]) -> str | None:
    training = metadata.get("training")
    return training.get("tokenizer") if isinstance(training, dict) else None

"""Saving a zoo model to a checkpoint and loading it back.

Loading runs no code from the file: no pickle, components are looked up in the registry
by name, and the config is validated before the model is built on the meta device.
Tensors are memory-mapped and assigned as they are, so peak memory stays near one copy
of the weights.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from zoo.checkpoint.checks import (
    RUNNABLE_FLOATS,
    check_allocation,
    check_dtypes,
    check_fit,
    check_ties_hold,
    single_float_dtype,
    tensors_to_save,
)
from zoo.checkpoint.format import build_header, read
from zoo.checkpoint.owned import check_versions_folder
from zoo.checkpoint.store import SUFFIX, path_arg, publish_file, publish_version, resolve
from zoo.checkpoint.tokenizer import TOKENIZER_FOLDER, portable_record
from zoo.errors import CheckpointError, check_flag, checked_types, quoted
from zoo.memory import allocating, model_bytes
from zoo.nn.config import ModelConfig
from zoo.nn.factory import device_arg, dtype_arg, initialize, materialize, model_for
from zoo.nn.generation import GENERATION_KEYS, check_generation
from zoo.nn.registry import Registry, default_registry

if TYPE_CHECKING:
    from zoo.nn.model import DecoderLM
    from zoo.nn.seq2seq import EncoderDecoder


@checked_types("path")
def save(
    model: nn.Module,
    path: str | os.PathLike[str],
    *,
    metadata: Mapping[str, Any] | None = None,
    registry: Registry | None = None,
) -> Path:
    """Save ``model`` with its config; returns the file written.

    A ``path`` ending in ``.safetensors`` is written (replaced) atomically. Any other
    path is a checkpoint directory: the save adds its next version and never overwrites
    one. ``metadata`` is your own JSON-serialisable mapping (step, loss, ...), returned
    by ``versions()`` and ``inspect()``. Models wrapped by ``torch.compile`` or DDP are
    saved under their plain parameter names.
    """
    model = unwrap(model)
    config = getattr(model, "config", None)
    if not isinstance(config, ModelConfig):
        raise CheckpointError(
            f"cannot save a {type(model).__name__}: zoo.save saves zoo models, which carry "
            f"their ModelConfig as model.config (build one with zoo.build or zoo.load)"
        )
    path = path_arg(path, "save to")  # before the work of hashing the tensors
    registry = registry or default_registry()
    tensors, ties = tensors_to_save(model, config, registry)
    check_dtypes(tensors, "cannot save: the model", "convert it first with model.to(torch.float32) (or bf16, fp16)")
    own = getattr(model, "generation_config", None)
    if own and "generation" not in (metadata or {}):  # a model's generation settings travel with it
        check_generation(own, "cannot save the model: its generation_config", CheckpointError)
        metadata = {**(metadata or {}), "generation": {k: v for k, v in own.items() if k in GENERATION_KEYS}}
    header = build_header(config, tensors, ties, with_tokenizer(model, metadata), registry)
    if path.suffix == SUFFIX:
        return publish_file(path, tensors, header)
    check_versions_folder(path, CheckpointError)
    return publish_version(path, tensors, header)


def with_tokenizer(model: nn.Module, metadata: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """``metadata`` with the model's own tokenizer record under ``"tokenizer"``, unless it
    names one itself: a model read with its tokenizer is saved with it."""
    record = portable_record(getattr(model, "tokenizer_record", None), "the model's tokenizer")
    if record is None or (metadata is not None and "tokenizer" in metadata):
        return metadata
    return {**(metadata or {}), "tokenizer": record}


def carried_record(metadata: Mapping[str, Any], file: Path) -> dict[str, Any] | None:
    """The tokenizer record a loaded model carries: the checkpoint's (or, for a training
    run, the name its data was prepared with), with the folder of files kept beside it."""
    record = metadata.get("tokenizer")
    training = metadata.get("training")
    if record is None and isinstance(training, Mapping):
        record = training.get("tokenizer")
    if isinstance(record, str):
        record = {"name": record}
    if not isinstance(record, Mapping):
        return None
    # Checked where it is used (zoo.checkpoint.records), so that a tokenizer given instead
    # still works; a file's "folder" is never read: the run's own is the one beside it.
    record = {key: value for key, value in record.items() if key != "folder"}
    if "files" in record:
        record["folder"] = str(file.parent / TOKENIZER_FOLDER)
    return record


def generation_settings(user: Mapping[str, Any], where: str = "the checkpoint") -> dict[str, Any]:
    """A loaded model's ``generation_config``: the settings its checkpoint keeps
    (``"generation"``, saved from the model's; checked, naming ``where``), and
    ``trained_context``, the sequence length a training run trained it at (generation
    past it warns)."""
    kept = user.get("generation")
    settings = {k: v for k, v in kept.items() if k in GENERATION_KEYS} if isinstance(kept, Mapping) else {}
    check_generation(settings, f"the generation settings {where} keeps (its metadata 'generation')", CheckpointError)
    training = user.get("training")
    trained = training.get("settings") if isinstance(training, Mapping) else None
    seq_len = trained.get("seq_len") if isinstance(trained, Mapping) else None
    if type(seq_len) is int and seq_len > 0:
        settings["trained_context"] = seq_len
    return settings


def unwrap(model: nn.Module) -> nn.Module:
    """The model inside ``torch.compile`` (``_orig_mod``) and DDP/DataParallel (``module``)."""
    while True:
        inner = getattr(model, "_orig_mod", None)
        if isinstance(inner, nn.Module):
            model = inner
        elif isinstance(model, (nn.parallel.DistributedDataParallel, nn.DataParallel)):
            model = model.module
        else:
            return model


@checked_types("path", "version")
def load(
    path: str | os.PathLike[str],
    *,
    version: int | None = None,
    device: torch.device | str | None = None,
    dtype: torch.dtype | str | None = None,
    strict: bool = True,
    verify: bool = True,
    registry: Registry | None = None,
) -> DecoderLM | EncoderDecoder:
    """Load a model from a checkpoint file, or from a directory's newest (or ``version``).

    The model comes back in eval mode, on ``device`` (default CPU), with floating-point
    weights converted to ``dtype`` if given (fp32, bf16, fp16). ``verify=False`` skips
    the digest (the bytes are then not read until used). ``strict=False`` ignores
    unexpected tensors and initialises missing ones with the config's init scheme;
    shape and dtype mismatches are always errors.
    """
    check_flag(strict, "strict")
    check_flag(verify, "verify")
    registry = registry or default_registry()
    target_dtype = dtype_arg(dtype, CheckpointError)
    target_device = device_arg(device, CheckpointError)
    ckpt = read(resolve(path, version), verify=verify, registry=registry)
    config = ckpt.model_config()
    check_dtypes(
        ckpt.tensors
        if target_dtype is None
        else {n: t for n, t in ckpt.tensors.items() if t.dtype not in RUNNABLE_FLOATS},
        str(ckpt.path),
        "load it with one dtype for every weight, e.g. zoo.load(path, dtype='fp32')",
    )
    with torch.device("meta"):
        model = model_for(config, registry)
    missing = check_fit(ckpt, model, strict=strict)
    # One dtype for buffers the file does not hold: the requested one, else the file's.
    model_dtype = target_dtype or single_float_dtype(ckpt.tensors.values())
    if model_dtype is not None:
        model.to(model_dtype)
    needed = model_bytes(model)
    check_allocation(ckpt, model, missing, converting=target_dtype is not None)
    # Uninitialised storage (no pages touched), non-persistent buffers rebuilt; the
    # file's memory-mapped tensors then replace the parameters without a copy.
    with allocating(needed, f"cannot load {ckpt.path}", CheckpointError):
        materialize(model, "cpu")
        if missing:
            initialize(model, config, registry)
    expected = model.state_dict(keep_vars=True)
    state = {
        name: tensor.to(target_dtype) if target_dtype and tensor.is_floating_point() else tensor
        for name, tensor in ckpt.tensors.items()
        if name in expected
    }
    try:
        model.load_state_dict(state, strict=False, assign=True)
    except RuntimeError as err:
        raise CheckpointError(f"cannot load {ckpt.path}: {err}") from err
    model.tie_weights()
    check_ties_hold(model, ckpt)
    model.tokenizer_record = carried_record(ckpt.user_metadata, ckpt.path)
    own = getattr(model, "generation_config", None)
    if isinstance(own, dict):  # a decoder's (zoo.nn.model.DecoderLM)
        own.update(generation_settings(ckpt.user_metadata, quoted(str(ckpt.path))))
        model.generation_source = f"the checkpoint {ckpt.path} (its kept generation settings)"
    if target_device is not None and target_device.type != "cpu":
        model.to(target_device)
    return model.eval()

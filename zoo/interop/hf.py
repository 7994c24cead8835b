"""Hugging Face folders in and out: ``from_hf(path)`` and ``to_hf(model, path)``.

``from_hf`` (and ``from_pretrained``) also take a hub id, resolved to a cached
snapshot by ``zoo.interop.hub``. A folder is ``config.json`` plus weights (``model.safetensors``, shards listed in
``model.safetensors.index.json``, or a legacy ``pytorch_model.bin``, read without
unpickling code). Which family it is comes from ``config.json``'s ``architectures``
(else ``model_type``); the converter registered for it by a plugin (GPT-2 by the
built-ins, Llama, Mistral, Qwen2 and GPT-NeoX by zoo-modern) maps the config and the
weights. Anything the zoo would compute differently is refused with an
``InteropError``, never loaded into a model that silently differs.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from zoo.checkpoint.owned import staged_folder
from zoo.checkpoint.records import checked_record, is_hub_name
from zoo.checkpoint.store import path_arg, write_atomically, write_safetensors
from zoo.checkpoint.tokenizer import embedded_record, folder_files, record_files
from zoo.errors import ConfigError, InteropError, ZooError, check_flag, checked_types, quoted
from zoo.files import confined, read_json
from zoo.interop.hub import local_or_snapshot, snapshot
from zoo.nn.config import ModelConfig, validate_config
from zoo.nn.converter import (
    KERNELS,
    Converter,
    check_layer_types,
    check_storage,
    engine_blockers,
    state_from_hf,
    state_to_hf,
    untie_if_stored,
)
from zoo.nn.factory import build, device_arg, dtype_arg, reset_buffers
from zoo.nn.generation import GENERATION_KEYS, check_generation
from zoo.nn.model import DecoderLM
from zoo.nn.registry import RegisteredConverter, Registry, default_registry

__all__ = ["config_from_hf", "config_to_hf", "converter_for", "from_hf", "from_pretrained", "read_weights", "to_hf"]

WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
# model_type -> the plugin distribution whose converter reads it, for the hint when the
# plugin is not installed.
# model_type -> (distribution, folder of this checkout that holds it)
CONFIG_LIMIT = 4 << 20  # bytes; a config.json is a few kB
EXPORT_KIND = "hf-export"  # the kind of output folder to_hf writes (zoo.checkpoint.owned)
KNOWN_PLUGINS = {name: ("zoo-lm-modern", "examples/zoo-modern") for name in ("llama", "mistral", "qwen2", "gpt_neox")}


# -- which converter ----------------------------------------------------------------------


def aliases(entry: Any) -> tuple[str, ...]:
    """The other model types a registered converter reads (``Converter.model_type_aliases``)."""
    names = getattr(entry.converter, "model_type_aliases", ())
    return tuple(names) if isinstance(names, tuple) else ()


def converter_for(hf: Mapping[str, Any], *, where: str = "config.json", registry: Registry | None = None) -> Converter:
    """The registered converter for ``config.json`` ``hf``: by ``architectures``, else
    ``model_type`` (a config with neither is GPT-2's oldest form)."""
    registry = registry or default_registry()
    installed = registry.converters()
    architectures = hf.get("architectures") or []
    if not isinstance(architectures, list):
        architectures = [architectures]
    model_type = hf.get("model_type")
    if not architectures and model_type is None:
        model_type = "gpt2"
    for entry in installed:
        if entry.architecture in architectures:
            if model_type is not None and model_type not in (entry.model_type, *aliases(entry)):
                raise InteropError(
                    f"{where}: architectures names {entry.architecture} (model_type {entry.model_type!r}) but "
                    f"model_type is {str(model_type)[:80]!r}; config.json contradicts itself, fix one of them"
                )
            found: Converter = entry.converter
            return found
    for entry in installed:
        if model_type in (entry.model_type, *aliases(entry)):
            by_type: Converter = entry.converter
            return by_type
    shown_names = [f"{e.architecture} ({e.provider})" for e in installed[:8]]
    more = f" and {len(installed) - 8} more (`zoo plugins` lists them)" if len(installed) > 8 else ""
    names = (", ".join(shown_names) or "none") + more
    hint = ""
    plugin = KNOWN_PLUGINS.get(model_type) if isinstance(model_type, str) else None
    if plugin:
        hint = f" Its converter comes with the plugin {plugin[0]}: install it (from a checkout: pip install ./{plugin[1]})."
    skipped = [p.name for p in registry.plugins if p.status != "loaded"]
    if skipped:
        hint += f" Note: plugin(s) {', '.join(map(repr, skipped))} were skipped or failed (see `zoo plugins`)."
    shown = ", ".join(repr(a)[:80] for a in architectures[:4]) or "none"
    raise InteropError(
        f"{where}: no converter reads architectures [{shown}] (model_type {str(model_type)[:80]!r}). "
        f"Installed converters: {names}.{hint}"
    )


def config_from_hf(
    hf: Mapping[str, Any], *, where: str = "config.json", registry: Registry | None = None
) -> dict[str, Any]:
    """The zoo config fields for ``config.json`` ``hf``; refuses what the zoo cannot model."""
    found = converter_for(hf, where=where, registry=registry)
    check_layer_types(hf, where, found.layer_kinds)
    return found.config_from_hf(hf, where)


#: How many architectures an export refusal lists in full, nearest (fewest differences) first.
NEAREST = 2


def _exporter(config: ModelConfig, architecture: str | None, registry: Registry | None) -> Converter:
    """The converter that writes ``config``: the one named, else the first that fits."""
    entries: list[RegisteredConverter] = (registry or default_registry()).converters()
    if architecture is not None:
        chosen = [e for e in entries if e.architecture == architecture]
        if not chosen:
            known = ", ".join(e.architecture for e in entries if e.exports)
            raise InteropError(f"no converter writes {architecture!r}; installed exporters: {known or 'none'}")
        entries = chosen
    reasons: list[tuple[int, str]] = []
    for entry in entries:
        if not entry.exports:
            continue
        blockers = entry.converter.blockers(config) + engine_blockers(entry.converter, config)
        if not blockers:
            found: Converter = entry.converter
            return found
        reasons.append((len(blockers), f"as {entry.architecture} ({entry.provider}): " + "; ".join(blockers)))
    # The nearest designs, in full: a list of every exporter's reasons is unreadable.
    reasons.sort(key=lambda r: r[0])
    shown = [text for _, text in reasons[:NEAREST]] or ["no converter exports"]
    rest = len(reasons) - len(shown)
    more = (
        f" ({rest} other architecture(s) differ at least as much; name one with --architecture, or architecture= in zoo.to_hf)"
        if rest > 0
        else ""
    )
    raise InteropError(
        "this model cannot be written as a Hugging Face model: "
        + " | ".join(shown)
        + more
        + ". Each architecture holds only its own design; build the model from components that one has"
    )


def config_to_hf(
    config: ModelConfig,
    dtype: torch.dtype = torch.float32,
    *,
    architecture: str | None = None,
    registry: Registry | None = None,
) -> dict[str, Any]:
    """``config.json`` for ``config``, by the first converter (or ``architecture``) that
    can express it; refuses with every converter's reasons otherwise."""
    converter = _exporter(config, architecture, registry)
    return {
        "architectures": [converter.architecture],
        "model_type": converter.model_type,
        **converter.config_to_hf(config),
        "dtype": str(dtype).removeprefix("torch."),
    }


# -- weights ----------------------------------------------------------------------------


def read_weights(folder: Path) -> dict[str, Tensor]:
    """Every tensor in the folder's weight files, by the name it is stored under."""
    for name in WEIGHT_FILES:
        path = folder / name
        if not path.is_file():
            continue
        if name.endswith(".index.json"):
            files = _shards(path)
        else:
            files = [path]
        tensors: dict[str, Tensor] = {}
        for file in files:
            tensors.update(_read_file(file))
        return tensors
    raise InteropError(f"{folder} has no weights: expected one of {', '.join(WEIGHT_FILES)}")


def _shards(index: Path) -> list[Path]:
    """The shard files an index names: plain names inside its folder, each a file."""
    data = read_json(index, InteropError, "shard index", limit=64 << 20)
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise InteropError(f"cannot read the shard index {index}: it needs a 'weight_map' of tensor name -> file name")
    names = sorted(set(weight_map.values()))
    paths = [confined(index.parent, name, InteropError, str(index)) for name in names]
    missing = [quoted(n, 80) for n, p in zip(names, paths, strict=True) if not p.is_file()]
    if missing:
        raise InteropError(f"{index} lists shards that are not in {index.parent}: {', '.join(missing[:6])}")
    return paths


def _read_file(path: Path) -> dict[str, Tensor]:
    if path.suffix == ".safetensors":
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            return load_file(path)
        except (SafetensorError, OSError) as err:
            raise InteropError(f"cannot read {path}: {err}") from err
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # weights_only refuses arbitrary pickles with various errors
        raise InteropError(
            f"cannot read {path} safely (only plain tensors are loaded, never arbitrary pickled "
            f"code): {err}. Convert it to model.safetensors"
        ) from err
    if not isinstance(state, Mapping) or not all(isinstance(v, Tensor) for v in state.values()):
        raise InteropError(f"{path} does not hold a mapping of tensor names to tensors")
    check_storage(state, str(path))  # a pickle's views may claim far more than they store
    return dict(state)


def _local_tensors(converter: Converter, tensors: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """Stored tensors by the names the converter's rules use, non-weights dropped."""
    local = {}
    for key, tensor in tensors.items():
        name = converter.local_name(key)
        if not converter.skip(name):
            local[name] = tensor
    return local


@checked_types("path")
def from_hf(
    path: str | os.PathLike[str],
    *,
    revision: str | None = None,
    dtype: torch.dtype | str | None = None,
    device: torch.device | str | None = None,
    attention: str = "sdpa",
    registry: Registry | None = None,
    allow_nonfinite: bool = False,
) -> DecoderLM:
    """A zoo model from a Hugging Face folder or hub id, in eval mode.

    ``path`` is a folder, or a hub id such as ``"openai-community/gpt2"`` resolved
    through the hub cache (``zoo.interop.hub``; ``revision`` picks a branch, tag or
    commit). The family comes from ``config.json`` (see ``zoo plugins`` for the
    converters installed). Weights keep their stored dtype unless ``dtype`` is given.
    ``attention`` picks the kernel (``"sdpa"`` or ``"eager"``; the same math).
    Weights must be floating point and finite: a NaN or infinity is an error naming
    the tensor unless ``allow_nonfinite=True``.
    """
    check_flag(allow_nonfinite, "allow_nonfinite")
    if attention not in KERNELS:
        raise InteropError(
            f"attention={attention!r}: imported weights fit the zoo attention kernels "
            f"{', '.join(map(repr, KERNELS))} (same math); pick one of them"
        )
    target_dtype = dtype_arg(dtype, InteropError)
    target_device = device_arg(device, InteropError)
    folder, _ = local_or_snapshot(path, revision, bare=True)
    folder = path_arg(folder, "read", InteropError, "a folder path")
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise InteropError(
            f"{folder} is not a Hugging Face model folder: it has no config.json. Give a folder that "
            f"transformers saved (save_pretrained), or a hub id such as 'openai-community/gpt2'"
        )
    hf = read_json(config_path, InteropError, "config.json", limit=CONFIG_LIMIT)  # bounded, finite numbers
    if not isinstance(hf, dict):
        raise InteropError(f"{config_path} does not hold a JSON object")
    registry = registry or default_registry()
    converter = converter_for(hf, where=str(config_path), registry=registry)
    check_layer_types(hf, str(config_path), converter.layer_kinds)
    fields = converter.with_kernel(converter.config_from_hf(hf, str(config_path)), attention)
    tensors = _local_tensors(converter, read_weights(folder))
    fields = untie_if_stored(converter, fields, tensors, str(folder))
    try:
        config = validate_config(fields, source=str(config_path), registry=registry)
    except ConfigError as err:
        raise InteropError(f"{config_path} describes no valid zoo model: {err}") from err
    model = build(config, device="meta", registry=registry)
    assert isinstance(model, DecoderLM)  # the config is a decoder's
    state = state_from_hf(
        converter, tensors, config, model.state_dict(), where=str(folder), allow_nonfinite=allow_nonfinite
    )
    target = target_dtype or state["tok_emb.weight"].dtype
    state = {name: tensor.to(target) for name, tensor in state.items()}
    model.load_state_dict(state, strict=True, assign=True)
    model.tie_weights()
    reset_buffers(model)
    files = folder_files(folder)
    model.tokenizer_record = embedded_record(files) if files else None  # the model carries its tokenizer
    model.generation_config = generation_config(folder, hf)
    model.generation_source = str(
        folder / ("generation_config.json" if (folder / "generation_config.json").is_file() else "config.json")
    )
    return model.to(target_device or "cpu").eval()


def generation_config(folder: Path, hf: Mapping[str, Any]) -> dict[str, Any]:
    """The generation settings a Hugging Face folder states, as transformers reads them:
    ``generation_config.json`` when the folder has one, else the token ids of
    ``config.json``; only the keys zoo decoding honours (``GENERATION_KEYS``), set ones."""
    file = folder / "generation_config.json"
    stated = read_json(file, InteropError, "generation_config.json", limit=CONFIG_LIMIT) if file.is_file() else hf
    if not isinstance(stated, dict):
        raise InteropError(f"{file} does not hold a JSON object")
    keys = GENERATION_KEYS if stated is not hf else ("eos_token_id", "pad_token_id", "bos_token_id")
    settings = {key: stated[key] for key in keys if stated.get(key) is not None}
    vocab = hf.get("vocab_size")
    if isinstance(vocab, int):  # an id past the vocabulary is never generated: transformers never stops at it
        for key in ("eos_token_id", "pad_token_id", "bos_token_id"):
            value = settings.get(key)
            if isinstance(value, list):
                kept = [i for i in value if not (isinstance(i, int) and i >= vocab)]
                if kept != value:
                    settings[key] = kept if kept or key != "eos_token_id" else None
            elif isinstance(value, int) and not isinstance(value, bool) and value >= vocab:
                settings[key] = None
        settings = {key: value for key, value in settings.items() if value is not None}
    if stated is not hf:
        check_generation(settings, quoted(str(file)), InteropError)
    return settings


@checked_types()
def from_pretrained(
    path_or_id: str | os.PathLike[str],
    *,
    revision: str | None = None,
    dtype: torch.dtype | str | None = None,
    device: torch.device | str | None = None,
) -> DecoderLM:
    """A pretrained model by hub id (``"openai-community/gpt2"``) or folder, in eval mode,
    as transformers' ``AutoModelForCausalLM.from_pretrained`` names it.

    The first call for an id needs the network, or a hub cache that holds it
    (``HF_HOME``; ``HF_HUB_OFFLINE=1`` never downloads); later calls read the cache.
    ``revision`` picks a branch, tag or commit; ``dtype`` converts the weights (default:
    as stored); ``device`` places them. ``zoo.from_hf`` is the same with more options.
    """
    return from_hf(path_or_id, revision=revision, dtype=dtype, device=device)


def tokenizer_files(record: Mapping[str, Any] | None) -> dict[str, bytes]:
    """The files of the tokenizer a model carries, to write beside its weights: embedded or
    kept files, GPT-2's for ``gpt2``, the byte tokenizer's as a byte-level BPE for
    ``bytes``, a hub snapshot's."""
    where = "the model's tokenizer record"
    record = checked_record(record, where) if record else None  # read from a file: it names no path
    if record and is_hub_name(hub := record.get("hub", record.get("name"))):
        return folder_files(snapshot(hub, record.get("revision"), need="tokenizer"))  # never a local folder
    return record_files(record, where)


#: GPT-2's vocabulary, and it padded to a multiple of 64 (nanoGPT, Pythia): a model of one
#: with no tokenizer of its own is read with GPT-2's (``zoo.generate_text``), whose
#: ``<|endoftext|>`` is its start and its end.
GPT2_VOCABS = (50257, 50304)
GPT2_EOT = 50256


def special_tokens(model: DecoderLM) -> dict[str, Any]:
    """The export's ``bos_token_id``, ``eos_token_id`` and ``pad_token_id``, as the zoo uses
    them: each the model's ``generation_config`` states, else the tokenizer it carries
    (its start token, its end-of-text), else GPT-2's ``<|endoftext|>`` for GPT-2's
    vocabulary, else none; the pad is the first EOS id, as the zoo pads finished rows.
    So transformers and lm-eval's ``hf`` model start, stop and pad where
    ``zoo.generate_text`` and ``zoo eval --tasks`` do, not at an architecture's default
    (Llama's 2 is an ordinary token of most vocabularies). Only the stated ones when the
    carried tokenizer cannot be loaded here: the converter's values stand for the rest."""
    own = {k: v for k, v in model.generation_config.items() if k in SPECIAL_IDS and v is not None}
    bos: int | None = None
    eos: int | list[int] | None = None
    if model.tokenizer_record:
        try:
            tokenizer = model.tokenizer
        except ZooError:  # e.g. GPT-2's tokenizer without the text extra
            return own
        bos, eos = tokenizer.start_token_id, tokenizer.eot_token_id
    elif model.config.vocab_size in GPT2_VOCABS:
        bos = eos = GPT2_EOT
    ids: dict[str, Any] = {"bos_token_id": bos, "eos_token_id": eos, **own}
    first_eos = ids["eos_token_id"][0] if isinstance(ids["eos_token_id"], list) else ids["eos_token_id"]
    ids.setdefault("pad_token_id", first_eos)
    return ids


SPECIAL_IDS = ("bos_token_id", "eos_token_id", "pad_token_id")


def _bytes_writer(data: bytes) -> Callable[[Path], object]:
    return lambda file: file.write_bytes(data)


@checked_types("path")
def to_hf(
    model: torch.nn.Module,
    path: str | os.PathLike[str],
    *,
    architecture: str | None = None,
    registry: Registry | None = None,
    overwrite: bool = False,
) -> Path:
    """Write ``model`` as a Hugging Face folder (config.json + model.safetensors; the files
    of the tokenizer it carries, which ``transformers.AutoTokenizer`` loads; and
    generation_config.json with the model's ``generation_config``, where it has one);
    config.json's ``bos_token_id``, ``eos_token_id`` and ``pad_token_id`` are where the zoo
    starts, ends and pads the model's text (``special_tokens``).

    The architecture is ``architecture``, else the first installed converter that can
    express the model (GPT-2 for GPT-2's design, Llama for LLaMA's, ...);
    ``transformers.AutoModelForCausalLM.from_pretrained(path)`` loads it with the same
    logits. A model no converter can express is refused, naming what blocks each.

    The folder is written whole (``zoo.checkpoint.owned.staged_folder``): a new or empty
    folder, or an earlier export left as it was; a folder holding anything else is
    refused unless ``overwrite=True``, which replaces it whole. A failed export leaves
    nothing behind. Returns the folder.
    """
    check_flag(overwrite, "overwrite")
    if not isinstance(model, DecoderLM):
        raise InteropError(
            f"to_hf writes decoder-only language models, got {type(model).__name__}; "
            f"the Hugging Face causal-LM layouts have no encoder"
        )
    config = model.config
    converter = _exporter(config, architecture, registry)  # refuses before any work
    hf_config = config_to_hf(config, model.tok_emb.weight.dtype, architecture=converter.architecture, registry=registry)
    hf_config.update(special_tokens(model))
    tensors = state_to_hf(converter, model.state_dict(), config)
    tokenizer = tokenizer_files(model.tokenizer_record)
    folder = path_arg(path, "write to", InteropError, "a folder path")
    text = json.dumps(hf_config, indent=2, sort_keys=True) + "\n"
    generation = {k: v for k, v in model.generation_config.items() if k in GENERATION_KEYS}
    check_generation(generation, "cannot export the model: its generation_config", InteropError)
    try:
        with staged_folder(
            folder, EXPORT_KIND, "zoo.to_hf", error=InteropError, overwrite=overwrite, what="the Hugging Face folder"
        ) as staging:
            write_atomically(
                staging / "model.safetensors", lambda f: write_safetensors(f, tensors, {"format": "pt"}), InteropError
            )
            write_atomically(staging / "config.json", lambda f: f.write_text(text, encoding="utf-8"), InteropError)
            for name, data in tokenizer.items():  # AutoTokenizer loads the export
                write_atomically(staging / name, _bytes_writer(data), InteropError)
            if generation:  # the model's generation settings, where transformers reads them
                write_atomically(
                    staging / "generation_config.json",
                    lambda f: f.write_text(json.dumps(generation, indent=2, sort_keys=True) + "\n", encoding="utf-8"),
                    InteropError,
                )
    except (OSError, ValueError) as err:
        raise InteropError(
            f"cannot write the Hugging Face folder {folder}: {err}; pick a writable folder path"
        ) from err
    return folder

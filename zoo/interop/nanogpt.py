"""nanoGPT checkpoints in: ``from_nanogpt(path)`` reads the ``ckpt.pt`` that nanoGPT's
``train.py`` writes.

That file is a ``torch.save`` of ``{"model": state_dict, "model_args": {...},
"optimizer": ..., "iter_num": ..., "best_val_loss": ..., "config": {...}}``. It is read
with ``torch.load(weights_only=True)``: tensors and plain data only, never pickled
code. nanoGPT's GPT is GPT-2's design with ``nn.Linear`` layers (no transposes), exact
GELU, optional biases (``bias``) and a head tied to ``wte``; a model trained with
``compile=True`` stores every name behind ``_orig_mod.``.

nanoGPT's character-level datasets (``shakespeare_char``) keep their vocabulary in the
``meta.pkl`` that ``prepare.py`` writes, ``{"vocab_size", "stoi", "itos"}``. A pickle can
name any importable callable and have it run when loaded, so ``read_meta`` unpickles with
a ``find_class`` that refuses every name: only pickle's own dicts, strings and numbers
load, and anything but a dict of strings and ints (and the two dicts in it) is refused.
``from_nanogpt`` embeds a checked ``meta.pkl`` in the model as its tokenizer
(``zoo.text.chars`` reads it), so the imported model samples text.
"""

from __future__ import annotations

import io
import os
import pickle
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from zoo.checkpoint.store import path_arg
from zoo.checkpoint.tokenizer import embedded_record
from zoo.errors import ConfigError, InteropError, check_flag, checked_types, printable
from zoo.files import read_bytes
from zoo.nn.config import validate_config
from zoo.nn.converter import (
    KERNELS,
    Converter,
    Count,
    Fraction,
    HFFields,
    Layers,
    Rule,
    check_storage,
    state_from_hf,
    untie_if_stored,
)
from zoo.nn.factory import build, device_arg, dtype_arg, reset_buffers
from zoo.nn.model import DecoderLM

if TYPE_CHECKING:
    from zoo.nn.config import ModelConfig

__all__ = ["META_FILE", "NANOGPT_ARGS", "from_nanogpt", "read_meta"]

# nanoGPT's GPTConfig fields (model_args), with its defaults.
NANOGPT_ARGS: dict[str, Any] = {
    "block_size": 1024,
    "vocab_size": 50304,
    "n_layer": 12,
    "n_head": 12,
    "n_embd": 768,
    "dropout": 0.0,
    "bias": True,
}
COMPILED = "_orig_mod."

META_FILE = "meta.pkl"  # what nanoGPT's data/<dataset>/prepare.py writes beside train.bin
META_LIMIT = 64 << 20  # bytes: shakespeare_char's is under 1 kB; a character vocabulary is small
META_KEYS = ("vocab_size", "stoi", "itos")


class _NoObjects(pickle.Unpickler):
    """An unpickler that imports nothing: every class or function a pickle names is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"it names {module}.{name}, and only plain dicts of strings and ints are read")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("it refers to persistent objects, and only plain dicts are read")


def read_meta(data: bytes, where: str) -> tuple[dict[str, int], dict[int, str]]:
    """``(stoi, itos)`` of a nanoGPT ``meta.pkl``'s bytes, checked: one character per
    entry, ids from 0, each map the other's inverse, ``vocab_size`` their size."""
    try:
        meta = _NoObjects(io.BytesIO(data)).load()
    except Exception as err:  # a damaged or hostile pickle fails in many ways; none constructs an object
        raise InteropError(f"{where} is not a nanoGPT meta.pkl the zoo reads: {printable(str(err))[:200]}") from err
    if not isinstance(meta, dict) or not {"stoi", "itos"} <= set(meta) or set(meta) - set(META_KEYS):
        shown = sorted(map(str, meta))[:6] if isinstance(meta, dict) else type(meta).__name__
        raise InteropError(f"{where} holds {printable(shown)}, not nanoGPT's {{'vocab_size', 'stoi', 'itos'}}")
    stoi, itos = _typed(meta["stoi"], str, int, f"{where} 'stoi'"), _typed(meta["itos"], int, str, f"{where} 'itos'")
    size = meta.get("vocab_size", len(itos))
    if type(size) is not int or size != len(itos) or set(itos) != set(range(size)):
        raise InteropError(f"{where}: 'itos' must give ids 0..vocab_size-1 ({printable(repr(size))[:40]}) a character")
    if len(stoi) != len(itos) or any(itos.get(i) != c or len(c) != 1 for c, i in stoi.items()):
        raise InteropError(f"{where}: 'stoi' and 'itos' must map single characters and their ids both ways")
    return stoi, itos


def _typed(value: object, key: type, item: type, where: str) -> dict[Any, Any]:
    """``value`` as a dict of ``key`` to ``item`` (exactly those types: no bools for ints)."""
    if type(value) is not dict or any(type(k) is not key or type(v) is not item for k, v in value.items()):
        raise InteropError(f"{where} must be a dict of {key.__name__} to {item.__name__}")
    return value


class NanoGPTArgs(HFFields):
    """nanoGPT's ``model_args``, typed (``config_fields`` checks them first)."""

    block_size: Count = 1024
    vocab_size: Count = 50304
    n_layer: Layers = 12
    n_head: Count = 12
    n_embd: Count = 768
    dropout: Fraction = 0.0
    bias: bool = True


class NanoGPT(Converter):
    """nanoGPT's GPT: GPT-2's layout with ``nn.Linear`` weights (out, in) and optional biases."""

    architecture = "nanoGPT"
    model_type = "nanogpt"
    prefix = "transformer."
    embedding = "wte.weight"

    def skip(self, name: str) -> bool:
        parts = name.split(".")  # h.N.attn.bias: the causal mask nanoGPT keeps without flash attention
        return len(parts) == 4 and parts[0] == "h" and parts[2:] == ["attn", "bias"]

    def rules(self, config: ModelConfig) -> list[Rule]:
        names = ["wte.weight", "wpe.weight"]
        layer = ["ln_1", "attn.c_attn", "attn.c_proj", "ln_2", "mlp.c_fc", "mlp.c_proj"]
        zoo_layer = ["attn_residual.norm", "attn.qkv", "attn.out", "mlp_residual.norm", "mlp.up", "mlp.down"]
        params = ("weight", "bias") if config.bias else ("weight",)
        rules = [Rule.copy("tok_emb.weight", names[0]), Rule.copy("position.table.weight", names[1])]
        for i in range(config.n_layers):
            for ours, theirs in zip(zoo_layer, layer, strict=True):
                rules += [Rule.copy(f"blocks.{i}.{ours}.{p}", f"h.{i}.{theirs}.{p}") for p in params]
        rules += [Rule.copy(f"final_norm.{p}", f"ln_f.{p}") for p in params]
        return [*rules, Rule.copy("head.weight", "lm_head.weight")]


def config_fields(model_args: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Zoo config fields for nanoGPT's ``model_args``; unknown arguments are refused."""
    unknown = sorted(set(model_args) - set(NANOGPT_ARGS))
    if unknown:
        raise InteropError(
            f"{where}: model_args has {', '.join(repr(k)[:60] for k in unknown[:6])}, which nanoGPT's GPT does "
            f"not have (a modified model?); the zoo reads {', '.join(NANOGPT_ARGS)} only"
        )
    NanoGPTArgs.read(model_args, f"{where} model_args")
    args = {**NANOGPT_ARGS, **model_args}
    return {
        "vocab_size": args["vocab_size"],
        "max_seq_len": args["block_size"],
        "d_model": args["n_embd"],
        "n_layers": args["n_layer"],
        "n_heads": args["n_head"],
        "dropout": args["dropout"],
        "bias": args["bias"],
        "tie_embeddings": True,
        "norm_eps": 1e-5,
        "attention": "sdpa",
        "norm": "layernorm",
        "placement": "pre",
        "activation": "gelu",  # nn.GELU(): the exact erf form
        "position": "learned",
        "mlp": "standard",
        "init": "gpt2",
    }


def read_checkpoint(path: str | os.PathLike[str]) -> tuple[dict[str, Any], dict[str, Tensor], str]:
    """``(model_args, state_dict without the compile prefix, file name)`` of a ckpt.pt (or its folder)."""
    file = path_arg(path, "read", InteropError, "a nanoGPT ckpt.pt path")
    if file.is_dir():
        file = file / "ckpt.pt"
    if not file.is_file():
        raise InteropError(f"{file} does not exist; pass nanoGPT's ckpt.pt (or the out_dir holding it)")
    try:
        checkpoint = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as err:  # weights_only refuses arbitrary pickles with various errors
        raise InteropError(
            f"cannot read {file} safely: only tensors and plain data are loaded, never pickled code "
            f"({type(err).__name__}: {str(err)[:300]})"
        ) from err
    where = str(file)
    if not isinstance(checkpoint, Mapping) or not isinstance(checkpoint.get("model"), Mapping):
        raise InteropError(f"{where} is not a nanoGPT checkpoint: it needs a 'model' state dict and 'model_args'")
    model_args = checkpoint.get("model_args")
    if not isinstance(model_args, Mapping):
        raise InteropError(f"{where} has no 'model_args' dict (n_layer, n_head, n_embd, block_size, bias, vocab_size)")
    state = {}
    for key, tensor in checkpoint["model"].items():
        if not isinstance(key, str) or not isinstance(tensor, Tensor):
            raise InteropError(f"{where}: 'model' must map tensor names to tensors, found {key!r}"[:200])
        state[key.removeprefix(COMPILED)] = tensor
    check_storage(state, where)  # before anything copies a tensor: a stride-0 one could expand to gigabytes
    return dict(model_args), state, where


@checked_types()
def from_nanogpt(
    path: str | os.PathLike[str],
    *,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
    attention: str = "sdpa",
    allow_nonfinite: bool = False,
    meta: str | os.PathLike[str] | None = None,
) -> DecoderLM:
    """A zoo model from a nanoGPT ``ckpt.pt`` (or the ``out_dir`` holding it), in eval mode.

    Compiled checkpoints (names behind ``_orig_mod.``) load too. Weights keep their
    stored dtype unless ``dtype`` is given; ``attention`` is "sdpa" or "eager". Weights
    must be floating point and finite (``allow_nonfinite=True`` to load NaNs anyway).
    ``meta``: the ``meta.pkl`` of a character-level dataset (``data/shakespeare_char/``),
    by default one beside ``ckpt.pt``; the model carries it as its tokenizer.
    """
    check_flag(allow_nonfinite, "allow_nonfinite")
    if attention not in KERNELS:
        raise InteropError(f"attention={attention!r}: pick one of {', '.join(map(repr, KERNELS))}")
    target_dtype = dtype_arg(dtype, InteropError)
    target_device = device_arg(device, InteropError)
    model_args, stored, where = read_checkpoint(path)
    vocabulary = meta_file(meta, Path(where))
    converter = NanoGPT()
    tensors = {converter.local_name(k): v for k, v in stored.items() if not converter.skip(converter.local_name(k))}
    fields = untie_if_stored(converter, {**config_fields(model_args, where), "attention": attention}, tensors, where)
    try:
        config = validate_config(fields, source=f"{where} model_args")
    except ConfigError as err:
        raise InteropError(f"{where}: model_args describe no valid zoo model: {err}") from err
    model = build(config, device="meta")
    assert isinstance(model, DecoderLM)  # the config is a decoder's
    state = state_from_hf(converter, tensors, config, model.state_dict(), where=where, allow_nonfinite=allow_nonfinite)
    target = target_dtype or state["tok_emb.weight"].dtype
    model.load_state_dict({n: t.to(target) for n, t in state.items()}, strict=True, assign=True)
    model.tie_weights()
    reset_buffers(model)
    if vocabulary is not None:
        model.tokenizer_record = meta_record(vocabulary, config.vocab_size)
    return model.to(target_device or "cpu").eval()


def meta_file(meta: str | os.PathLike[str] | None, checkpoint: Path) -> Path | None:
    """The ``meta.pkl`` to read: the one given (which must exist), else one beside the checkpoint."""
    if meta is None:
        beside = checkpoint.parent / META_FILE
        return beside if beside.is_file() else None
    file = path_arg(meta, "read", InteropError, "a nanoGPT meta.pkl path")
    if not file.is_file():
        raise InteropError(f"{printable(str(file))!r} is not a file; pass nanoGPT's data/<dataset>/meta.pkl")
    return file


def meta_record(file: Path, vocab_size: int) -> dict[str, Any]:
    """The tokenizer record that embeds ``file``, a ``meta.pkl`` checked to fit the model."""
    data = read_bytes(file, InteropError, "nanoGPT meta.pkl", limit=META_LIMIT)
    _, itos = read_meta(data, str(file))
    if len(itos) > vocab_size:
        raise InteropError(
            f"{file} has {len(itos)} characters, more than the model's {vocab_size} ids: it is not this model's "
            f"meta.pkl; pass the one of the dataset it was trained on"
        )
    return embedded_record({META_FILE: data})

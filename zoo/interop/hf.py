"""Hugging Face GPT-2 folders in and out: ``from_hf(path)`` and ``to_hf(model, path)``.

A GPT-2 folder is ``config.json`` plus weights (``model.safetensors``, shards listed in
``model.safetensors.index.json``, or a legacy ``pytorch_model.bin``). GPT-2's linear
layers are ``Conv1D``s that store weights as (in, out), the transpose of
``nn.Linear``; the fused ``c_attn`` is exactly the zoo attention's fused ``qkv``, so a
transpose is the whole conversion. Anything the zoo would compute differently is
refused with an ``InteropError``, never loaded into a model that silently differs.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from zoo.factory import build, device_arg, dtype_arg, reset_buffers
from zoo.checkpoint import path_arg, write_atomically
from zoo.config import ModelConfig, validate_config
from zoo.errors import ConfigError, InteropError
from zoo.model import DecoderLM

__all__ = ["from_hf", "to_hf", "config_from_hf", "config_to_hf"]

# Hugging Face activation names -> zoo activation components. "gelu_new", "gelu_fast"
# and "gelu_pytorch_tanh" are the same tanh approximation written three ways.
ACTIVATIONS = {
    "gelu_new": "gelu_tanh",
    "gelu_fast": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu": "gelu",
    "relu": "relu",
    "silu": "silu",
    "swish": "silu",
}
GPT2_ATTENTION = ("sdpa", "eager")  # zoo attentions with GPT-2's math and weight layout
ACTIVATIONS_OUT = {"gelu_tanh": "gelu_new", "gelu": "gelu", "relu": "relu", "silu": "silu"}

# (GPT-2 name, zoo name, stored transposed?). "{i}" is the layer index.
LAYOUT: tuple[tuple[str, str, bool], ...] = (
    ("wte.weight", "tok_emb.weight", False),
    ("wpe.weight", "position.table.weight", False),
    ("h.{i}.ln_1.weight", "blocks.{i}.attn_residual.norm.weight", False),
    ("h.{i}.ln_1.bias", "blocks.{i}.attn_residual.norm.bias", False),
    ("h.{i}.attn.c_attn.weight", "blocks.{i}.attn.qkv.weight", True),
    ("h.{i}.attn.c_attn.bias", "blocks.{i}.attn.qkv.bias", False),
    ("h.{i}.attn.c_proj.weight", "blocks.{i}.attn.out.weight", True),
    ("h.{i}.attn.c_proj.bias", "blocks.{i}.attn.out.bias", False),
    ("h.{i}.ln_2.weight", "blocks.{i}.mlp_residual.norm.weight", False),
    ("h.{i}.ln_2.bias", "blocks.{i}.mlp_residual.norm.bias", False),
    ("h.{i}.mlp.c_fc.weight", "blocks.{i}.mlp.up.weight", True),
    ("h.{i}.mlp.c_fc.bias", "blocks.{i}.mlp.up.bias", False),
    ("h.{i}.mlp.c_proj.weight", "blocks.{i}.mlp.down.weight", True),
    ("h.{i}.mlp.c_proj.bias", "blocks.{i}.mlp.down.bias", False),
    ("ln_f.weight", "final_norm.weight", False),
    ("ln_f.bias", "final_norm.bias", False),
    ("lm_head.weight", "head.weight", False),
)
# The causal-mask buffers old transformers versions saved with the weights.
MASK_BUFFER = re.compile(r"h\.\d+\.attn\.(bias|masked_bias)")
# GPT2Config's defaults, for fields an older config.json leaves out.
HF_DEFAULTS: dict[str, Any] = {
    "vocab_size": 50257,
    "n_positions": 1024,
    "n_embd": 768,
    "n_layer": 12,
    "n_head": 12,
    "n_inner": None,
    "activation_function": "gelu_new",
    "resid_pdrop": 0.1,
    "embd_pdrop": 0.1,
    "attn_pdrop": 0.1,
    "layer_norm_epsilon": 1e-5,
    "tie_word_embeddings": True,
}
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)


# -- config.json ------------------------------------------------------------------------


def config_from_hf(hf: Mapping[str, Any], *, where: str = "config.json") -> dict[str, Any]:
    """The zoo config fields for a GPT-2 ``config.json``; refuses what the zoo cannot model."""
    model_type = hf.get("model_type", "gpt2")
    if model_type != "gpt2":
        raise InteropError(f"{where}: model_type is {model_type!r}; zoo.from_hf reads GPT-2 models ('gpt2') only")
    refusals = {
        "add_cross_attention": "cross-attention layers (an encoder-decoder GPT-2)",
        "scale_attn_by_inverse_layer_idx": "attention scores divided by the layer index",
        "reorder_and_upcast_attn": (
            "attention upcast to float32 in half precision (in float32 it changes nothing, "
            "so for a float32 model you may set it to false)"
        ),
        "is_encoder_decoder": "an encoder-decoder model",
    }
    for flag, meaning in refusals.items():
        if hf.get(flag):
            raise InteropError(f"{where}: {flag}=true ({meaning}) is not modelled by the zoo; this model cannot be imported exactly")
    if hf.get("scale_attn_weights", True) is not True:
        raise InteropError(
            f"{where}: scale_attn_weights=false (scores not divided by sqrt(head_dim)) is not "
            f"modelled by the zoo; this model cannot be imported exactly"
        )
    if hf.get("pruned_heads"):
        raise InteropError(f"{where}: pruned_heads={hf['pruned_heads']!r}: models with pruned heads are not supported")
    get = {**HF_DEFAULTS, **{k: v for k, v in hf.items() if v is not None or k == "n_inner"}}
    activation = get["activation_function"]
    if activation not in ACTIVATIONS:
        raise InteropError(
            f"{where}: activation_function={activation!r} has no zoo equivalent; "
            f"supported: {', '.join(sorted(ACTIVATIONS))}"
        )
    n_positions = hf.get("n_positions", hf.get("n_ctx", HF_DEFAULTS["n_positions"]))
    return {
        "vocab_size": get["vocab_size"],
        "max_seq_len": n_positions,
        "d_model": get["n_embd"],
        "n_layers": get["n_layer"],
        "n_heads": get["n_head"],
        "d_ff": get["n_inner"],  # None: 4 * d_model, as in GPT-2
        "dropout": {"embedding": get["embd_pdrop"], "attention": get["attn_pdrop"], "residual": get["resid_pdrop"]},
        "bias": True,
        "tie_embeddings": bool(get["tie_word_embeddings"]),
        "embedding_scale": "none",
        "head_output": "logits",
        "norm_eps": get["layer_norm_epsilon"],
        "attention": "sdpa",
        "norm": "layernorm",
        "placement": "pre",
        "activation": ACTIVATIONS[activation],
        "position": "learned",
        "mlp": "standard",
        "init": "gpt2",
    }


def config_to_hf(config: ModelConfig, dtype: torch.dtype = torch.float32) -> dict[str, Any]:
    """GPT-2 ``config.json`` fields for ``config``; refuses what GPT-2's layout cannot express."""
    blockers = _blockers(config)
    if blockers:
        raise InteropError(
            "this model cannot be written as a Hugging Face GPT-2: " + "; ".join(blockers)
            + ". Only GPT-2's own design (pre-norm LayerNorm with biases, learned positions, "
            "standard MLP, plain multi-head attention) has that layout"
        )
    has_gpt2_eot = config.vocab_size > 50256  # the GPT-2 tokenizer's <|endoftext|>
    return {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": config.vocab_size,
        "n_positions": config.max_seq_len,
        "n_embd": config.d_model,
        "n_layer": config.n_layers,
        "n_head": config.n_heads,
        "n_inner": config.d_ff,
        "activation_function": ACTIVATIONS_OUT[config.activation.name],
        "resid_pdrop": config.dropout.residual,
        "embd_pdrop": config.dropout.embedding,
        "attn_pdrop": config.dropout.attention,
        "layer_norm_epsilon": config.norm_eps,
        "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False,
        "reorder_and_upcast_attn": False,
        "add_cross_attention": False,
        "tie_word_embeddings": config.tie_embeddings,
        "bos_token_id": 50256 if has_gpt2_eot else None,
        "eos_token_id": 50256 if has_gpt2_eot else None,
        "dtype": str(dtype).removeprefix("torch."),
    }


def _blockers(config: ModelConfig) -> list[str]:
    """What in ``config`` GPT-2's layout cannot express, one phrase each."""
    wanted = {
        "placement": ("pre", "GPT-2 normalises before each sub-layer"),
        "norm": ("layernorm", "GPT-2 uses LayerNorm"),
        "position": ("learned", "GPT-2 stores a learned position table (wpe)"),
        "mlp": ("standard", "GPT-2's MLP is c_fc, activation, c_proj"),
    }
    blockers = []
    if config.architecture != "decoder":
        blockers.append(f"architecture {config.architecture!r} (GPT-2 is decoder-only)")
    for kind, (name, why) in wanted.items():
        spec = getattr(config, kind)
        if spec.name != name or spec.options:
            blockers.append(f"{kind} {spec.name!r} ({why})")
    if config.attention.name not in GPT2_ATTENTION or config.attention.options:
        blockers.append(f"attention {config.attention.name!r} (GPT-2 has plain multi-head attention with a fused c_attn)")
    if config.activation.name not in ACTIVATIONS_OUT:
        blockers.append(f"activation {config.activation.name!r} (GPT-2 configs name {', '.join(ACTIVATIONS_OUT)})")
    if config.final_norm is False:
        blockers.append("final_norm=false (GPT-2 always has ln_f)")
    if not config.bias:
        blockers.append("bias=false (GPT-2's linear layers and norms have biases)")
    if config.embedding_scale != "none":
        blockers.append(f"embedding_scale={config.embedding_scale!r} (GPT-2 does not scale its embeddings)")
    if config.head_output != "logits":
        blockers.append(f"head_output={config.head_output!r} (GPT-2's head returns logits)")
    return blockers


# -- weights ----------------------------------------------------------------------------


def _layout(n_layers: int) -> list[tuple[str, str, bool]]:
    """LAYOUT with the layer index filled in for every layer."""
    rows = []
    for hf_name, zoo_name, transposed in LAYOUT:
        if "{i}" in hf_name:
            rows += [(hf_name.format(i=i), zoo_name.format(i=i), transposed) for i in range(n_layers)]
        else:
            rows.append((hf_name, zoo_name, transposed))
    return rows


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
    try:
        weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        names = sorted(set(weight_map.values()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise InteropError(f"cannot read the shard index {index}: {err}; it needs a 'weight_map' of tensor -> file") from err
    missing = [n for n in names if not (index.parent / n).is_file()]
    if missing:
        raise InteropError(f"{index} lists shards that are not in {index.parent}: {', '.join(missing)}")
    return [index.parent / n for n in names]


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
    return dict(state)


def _to_zoo_state(
    tensors: Mapping[str, Tensor], config: ModelConfig, expected: Mapping[str, Tensor], where: str
) -> dict[str, Tensor]:
    """GPT-2 tensors renamed, transposed and checked against the zoo model's shapes."""
    plain = {}
    for key, tensor in tensors.items():
        name = key.removeprefix("transformer.")
        if MASK_BUFFER.fullmatch(name):
            continue  # a saved causal mask, not a weight
        plain[name] = tensor
    if config.tie_embeddings:
        plain.pop("lm_head.weight", None)  # transformers ties it to wte as well
    state: dict[str, Tensor] = {}
    missing = []
    for hf_name, zoo_name, transposed in _layout(config.n_layers):
        if zoo_name == "head.weight" and config.tie_embeddings:
            continue
        tensor = plain.pop(hf_name, None)
        if tensor is None:
            missing.append(hf_name)
            continue
        want = tuple(expected[zoo_name].shape)
        stored = tuple(reversed(want)) if transposed else want
        if tuple(tensor.shape) != stored:
            raise InteropError(
                f"{where}: tensor {hf_name!r} has shape {tuple(tensor.shape)}, but config.json "
                f"(n_embd={config.d_model}, n_inner={config.d_ff}, vocab_size={config.vocab_size}, "
                f"n_positions={config.max_seq_len}) implies {stored}; the weights and config.json disagree"
            )
        state[zoo_name] = tensor.t().contiguous() if transposed else tensor
    if missing:
        raise InteropError(f"{where}: missing GPT-2 tensors: {_listing(missing)}")
    if plain:
        raise InteropError(
            f"{where}: tensors GPT-2's layout does not have (a different architecture, or a "
            f"variant the zoo cannot import exactly): {_listing(sorted(plain))}"
        )
    if config.tie_embeddings:
        state["head.weight"] = state["tok_emb.weight"]
    return state


def _listing(names: list[str], limit: int = 6) -> str:
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def from_hf(
    path: str | os.PathLike[str],
    *,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
    attention: str = "sdpa",
) -> DecoderLM:
    """A zoo model from a Hugging Face GPT-2 folder, in eval mode.

    Weights keep their stored dtype unless ``dtype`` is given. ``attention`` picks the
    zoo attention implementation (``"sdpa"`` or ``"eager"``; both are GPT-2's math).
    """
    if attention not in GPT2_ATTENTION:
        raise InteropError(
            f"attention={attention!r}: GPT-2's weights fit the zoo attentions "
            f"{', '.join(map(repr, GPT2_ATTENTION))} (same math, fused qkv); pick one of them"
        )
    target_dtype = dtype_arg(dtype, InteropError)
    target_device = device_arg(device, InteropError)
    folder = path_arg(path, "read", InteropError, "a folder path")
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise InteropError(f"{folder} is not a Hugging Face model folder: it has no config.json")
    try:
        hf = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise InteropError(f"cannot read {config_path}: {err}") from err
    if not isinstance(hf, dict):
        raise InteropError(f"{config_path} does not hold a JSON object")
    fields = {**config_from_hf(hf, where=str(config_path)), "attention": attention}
    try:
        config = validate_config(fields, source=str(config_path))
    except ConfigError as err:
        raise InteropError(f"{config_path} describes no valid zoo model: {err}") from err
    tensors = read_weights(folder)
    model = build(config, device="meta")
    expected = model.state_dict()
    state = _to_zoo_state(tensors, config, expected, where=str(folder))
    target = target_dtype or state["tok_emb.weight"].dtype
    state = {name: tensor.to(target) for name, tensor in state.items()}
    model.load_state_dict(state, strict=True, assign=True)
    model.tie_weights()
    reset_buffers(model)
    return model.to(target_device or "cpu").eval()


def to_hf(model: DecoderLM, path: str | os.PathLike[str]) -> Path:
    """Write ``model`` as a Hugging Face GPT-2 folder (config.json + model.safetensors).

    ``transformers.GPT2LMHeadModel.from_pretrained(path)`` loads it with the same
    logits. Models GPT-2's layout cannot express are refused, naming what blocks them.
    Returns the folder.
    """
    if not isinstance(model, DecoderLM):
        raise InteropError(
            f"to_hf writes decoder-only language models, got {type(model).__name__}; "
            f"GPT-2's layout has no encoder"
        )
    config = model.config
    hf_config = config_to_hf(config, model.tok_emb.weight.dtype)  # refuses before any work
    state = model.state_dict()
    tensors: dict[str, Tensor] = {}
    for hf_name, zoo_name, transposed in _layout(config.n_layers):
        if zoo_name == "head.weight" and config.tie_embeddings:
            continue  # transformers ties lm_head to wte
        tensor = state[zoo_name].detach().to("cpu")
        tensors[hf_name if hf_name == "lm_head.weight" else f"transformer.{hf_name}"] = (
            tensor.t() if transposed else tensor
        ).contiguous()
    folder = path_arg(path, "write to", InteropError, "a folder path")
    from safetensors.torch import save_file

    text = json.dumps(hf_config, indent=2, sort_keys=True) + "\n"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        write_atomically(folder / "model.safetensors", lambda f: save_file(tensors, f, metadata={"format": "pt"}))
        write_atomically(folder / "config.json", lambda f: f.write_text(text, encoding="utf-8"))
    except OSError as err:
        raise InteropError(f"cannot write the Hugging Face folder {folder}: {err}; pick a writable folder path") from err
    return folder

"""The factory of whole models: from a config to a model on the meta device, then real
weights on the target device, then the configured init.

``build`` constructs the model on the meta device (no memory, no work), materialises
the weights once on the target device, and runs the configured init scheme once. That
is why building gpt2-xl on ``device="meta"`` is instant, and why a real build costs
one pass of random draws rather than torch's default init followed by another.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from zoo.errors import ConfigError, ZooError
from zoo.memory import allocating, model_bytes, require
from zoo.nn.config import MAX_PARAMETERS, ModelConfig, resolve_config
from zoo.nn.model import DecoderLM
from zoo.nn.parts import PartMaker
from zoo.nn.registry import Registry
from zoo.nn.seq2seq import EncoderDecoder

#: The names a dtype may be given by (``dtype_arg``), each with its torch dtype.
DTYPE_NAMES = {
    "float32": torch.float32, "fp32": torch.float32,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float16": torch.float16, "fp16": torch.float16, "half": torch.float16,
    "float64": torch.float64, "fp64": torch.float64,
}  # fmt: skip


def __getattr__(name: str) -> Any:
    """Deprecated names: ``DTYPES`` is now ``DTYPE_NAMES`` (``zoo.training.PRECISIONS`` is
    the training precisions)."""
    if name == "DTYPES":
        warnings.warn("zoo.nn.factory.DTYPES is now zoo.nn.factory.DTYPE_NAMES", DeprecationWarning, stacklevel=2)
        return DTYPE_NAMES
    raise AttributeError(f"module 'zoo.nn.factory' has no attribute {name!r}")


def dtype_arg(dtype: torch.dtype | str | None, error: type[ZooError] = ConfigError) -> torch.dtype | None:
    """A floating-point dtype a model can run in, from a ``torch.dtype`` or a name ("bf16"),
    else ``error`` (float8 dtypes hold weights, but matmuls do not run in them)."""
    if dtype is None or (isinstance(dtype, torch.dtype) and dtype in DTYPE_NAMES.values()):
        return dtype
    if isinstance(dtype, str) and dtype.lower().removeprefix("torch.") in DTYPE_NAMES:
        return DTYPE_NAMES[dtype.lower().removeprefix("torch.")]
    raise error(
        f"dtype must be a floating-point dtype a model runs in: float32, bfloat16, float16 or float64 "
        f"(a torch.dtype or a name such as 'bf16'), got {dtype!r}"
    )


def device_arg(device: torch.device | str | None, error: type[ZooError] = ConfigError) -> torch.device | None:
    """A ``torch.device`` from a device or its name ("cuda:0"), else ``error``."""
    if device is None:
        return None
    try:
        found = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise error(f"device must name a torch device such as 'cpu' or 'cuda:0', got {device!r}") from err
    if found.type == "cuda" and not torch.cuda.is_available():
        raise error(f"device {str(found)!r} asks for CUDA, but this torch has no CUDA device; use device='cpu'")
    if found.type == "cuda" and found.index is not None and found.index >= torch.cuda.device_count():
        raise error(
            f"device {str(found)!r} does not exist: this machine has {torch.cuda.device_count()} CUDA device(s)"
        )
    if found.type == "mps" and not torch.backends.mps.is_available():
        raise error(f"device {str(found)!r} asks for Apple's MPS, which this machine lacks; use device='cpu'")
    return found


def materialize(model: nn.Module, device: torch.device | str | None = None) -> nn.Module:
    """Give a meta-device model real (uninitialised) storage, re-tie, rebuild buffers."""
    model.to_empty(device=device or "cpu")
    tie = getattr(model, "tie_weights", None)
    if tie is not None:
        tie()
    return reset_buffers(model)


def reset_buffers(model: nn.Module) -> nn.Module:
    """Rebuild derived buffers (``reset_buffers()``), which materialising leaves empty."""
    for module in model.modules():
        reset = getattr(module, "reset_buffers", None)
        if reset is not None:
            reset()
    return model


def model_for(config: ModelConfig, registry: Registry | None = None) -> DecoderLM | EncoderDecoder:
    """The model class for ``config.architecture``, constructed on the current device.

    ``build`` and ``zoo.load`` call this under ``torch.device("meta")``. Its parameters
    are counted there, so the size bound covers every plugin's components.
    """
    model: DecoderLM | EncoderDecoder
    with _SkipMetaInit():
        if config.architecture == "encoder_decoder":
            model = EncoderDecoder(config, registry=registry)
        else:
            model = DecoderLM(config, registry=registry)
    count = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
    if count > MAX_PARAMETERS:
        raise ConfigError(
            f"this config builds a model of {count:,} parameters, over the limit of {MAX_PARAMETERS:,}; "
            f"reduce d_model, n_layers, d_ff, vocab_size or a component's size options"
        )
    return model


class _SkipMetaInit(torch.overrides.TorchFunctionMode):
    """Skips ``torch.nn.init`` draws on meta tensors while modules are constructed.

    Modules like ``nn.Embedding`` initialise themselves in ``__init__``; on the meta
    device that draws nothing but imports ``torch._dynamo`` (about 2 s in a fresh
    process). The init scheme runs after materialising anyway.
    """

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if getattr(func, "__module__", None) == "torch.nn.init":
            tensor = args[0] if args else kwargs.get("tensor")
            if isinstance(tensor, torch.Tensor) and tensor.is_meta:
                return tensor
        return func(*args, **kwargs)


def initialize(model: nn.Module, config: ModelConfig, registry: Registry | None = None) -> nn.Module:
    """Draw fresh weights for ``model`` with the init scheme ``config`` names."""
    PartMaker(config, registry).make("init")(model)
    return model


def build(
    name_or_config: str | ModelConfig | Mapping[str, Any],
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype | str | None = None,
    registry: Registry | None = None,
    **overrides: Any,
) -> DecoderLM | EncoderDecoder:
    """The model of a preset name, a config or a mapping, with overrides: built on the meta
    device, then (unless ``device="meta"``) materialised and initialised. ``zoo.build``
    without pretrained weights; its docstring has the examples."""
    dtype, device = dtype_arg(dtype), device_arg(device)
    config = resolve_config(name_or_config, overrides, registry=registry)
    with torch.device("meta"):
        model = model_for(config, registry)
    if dtype is not None:
        model.to(dtype)
    if device is not None and device.type == "meta":
        return model
    size = model_bytes(model)
    require(size, device, f"building {config.n_layers}-layer d_model={config.d_model}", ConfigError)
    with allocating(size, "cannot build the model", ConfigError):
        materialize(model, device)
        initialize(model, config, registry)
    return model

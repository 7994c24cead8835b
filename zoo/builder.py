"""From a config to a model: component factories, the meta device, and init.

``build`` constructs the model on the meta device (no memory, no work), materialises
the weights once on the target device, and runs the configured init scheme once. That
is why building gpt2-xl on ``device="meta"`` is instant, and why a real build costs
one pass of random draws rather than torch's default init followed by another.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from zoo.config import ModelConfig, resolve_config
from zoo.errors import ConfigError, ZooError
from zoo.registry import Registry, default_registry

if TYPE_CHECKING:
    from zoo.model import DecoderLM
    from zoo.seq2seq import EncoderDecoder


class Builder:
    """Makes the configured component of each kind for one config.

    Component factories receive the builder, so an MLP can ask for the configured
    activation and a placement for the configured norm.
    """

    def __init__(self, config: ModelConfig, registry: Registry | None = None) -> None:
        self.config = config
        self.registry = registry or default_registry()

    def make(self, kind: str) -> Any:
        """Call the factory of the configured ``kind`` with its validated options."""
        spec = getattr(self.config, kind)
        component = self.registry.get(kind, spec.name)
        options = component.options_model.model_validate(spec.options)
        return component.factory(self, options)

    def attention(self) -> nn.Module:
        return self.make("attention")

    def norm(self) -> nn.Module:
        return self.make("norm")

    def placement(self) -> nn.Module:
        return self.make("placement")

    def activation(self) -> nn.Module:
        return self.make("activation")

    def position(self) -> nn.Module:
        return self.make("position")

    def mlp(self) -> nn.Module:
        return self.make("mlp")


DTYPES = {
    "float32": torch.float32, "fp32": torch.float32,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float16": torch.float16, "fp16": torch.float16, "half": torch.float16,
    "float64": torch.float64, "fp64": torch.float64,
}  # fmt: skip


def dtype_arg(dtype: torch.dtype | str | None, error: type[ZooError] = ConfigError) -> torch.dtype | None:
    """A floating-point dtype from a ``torch.dtype`` or a name ("bf16"), else ``error``."""
    if dtype is None or (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        return dtype
    if isinstance(dtype, str) and dtype.lower().removeprefix("torch.") in DTYPES:
        return DTYPES[dtype.lower().removeprefix("torch.")]
    raise error(f"dtype must be a floating-point dtype such as torch.bfloat16 or 'bf16', got {dtype!r}")


def device_arg(device: torch.device | str | None, error: type[ZooError] = ConfigError) -> torch.device | None:
    """A ``torch.device`` from a device or its name ("cuda:0"), else ``error``."""
    if device is None:
        return None
    try:
        return torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise error(f"device must name a torch device such as 'cpu' or 'cuda:0', got {device!r}") from err


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


def model_for(config: ModelConfig, registry: Registry | None = None) -> nn.Module:
    """The model class for ``config.architecture``, constructed on the current device.

    ``build`` and ``zoo.load`` call this under ``torch.device("meta")``.
    """
    if config.architecture == "encoder_decoder":
        from zoo.seq2seq import EncoderDecoder

        return EncoderDecoder(config, registry=registry)
    from zoo.model import DecoderLM

    return DecoderLM(config, registry=registry)


def build(
    name_or_config: str | ModelConfig | Mapping[str, Any],
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype | str | None = None,
    registry: Registry | None = None,
    **overrides: Any,
) -> DecoderLM | EncoderDecoder:
    """Build a model from a preset name, a config or a mapping, with overrides.

    ``zoo.build("gpt2-small", placement="post", position="sinusoidal",
    activation="relu")`` swaps components; ``attention={"name": "eager"}`` passes a
    component with options. ``device="meta"`` builds the structure only.
    """
    dtype, device = dtype_arg(dtype), device_arg(device)
    config = resolve_config(name_or_config, overrides, registry=registry)
    with torch.device("meta"):
        model = model_for(config, registry)
    if dtype is not None:
        model.to(dtype)
    if device is not None and device.type == "meta":
        return model
    materialize(model, device)
    Builder(config, registry).make("init")(model)
    return model

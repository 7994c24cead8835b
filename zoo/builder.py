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


def materialize(model: nn.Module, device: torch.device | str | None = None) -> nn.Module:
    """Give a meta-device model real (uninitialised) storage, re-tie, rebuild buffers."""
    model.to_empty(device=device or "cpu")
    tie = getattr(model, "tie_weights", None)
    if tie is not None:
        tie()
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
    dtype: torch.dtype | None = None,
    registry: Registry | None = None,
    **overrides: Any,
) -> DecoderLM | EncoderDecoder:
    """Build a model from a preset name, a config or a mapping, with overrides.

    ``zoo.build("gpt2-small", placement="post", position="sinusoidal",
    activation="relu")`` swaps components; ``attention={"name": "eager"}`` passes a
    component with options. ``device="meta"`` builds the structure only.
    """
    config = resolve_config(name_or_config, overrides, registry=registry)
    with torch.device("meta"):
        model = model_for(config, registry)
    if dtype is not None:
        model.to(dtype)
    if str(device) == "meta":
        return model
    materialize(model, device)
    Builder(config, registry).make("init")(model)
    return model

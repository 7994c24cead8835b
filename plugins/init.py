"""Init schemes: how fresh weights are drawn. Each returns ``init(model)``.

Models are built on the meta device and materialised with uninitialised memory, so an
init scheme must cover every parameter: linear layers and embeddings are drawn here
(``stacked`` layers, an MoE's experts, one layer at a time),
and any other module with parameters of its own is reset with its
``reset_parameters()``; a module with neither is an error, never garbage weights.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict, Field
from torch import Tensor, nn

from zoo.plugin import ConfigError, RegisterComponent, hookimpl, is_residual_output, is_stacked


def init_all(model: nn.Module, draw: Callable[[nn.Module, Tensor], None], scheme: str) -> None:
    """Draw every linear/embedding weight with ``draw``, zero biases, reset the rest.

    Tied weights are drawn once.
    """
    done: set[int] = set()
    for name, module in model.named_modules():
        own = list(module.parameters(recurse=False))
        if not own:
            continue
        if isinstance(module, (nn.Linear, nn.Embedding)) or is_stacked(module):
            if id(module.weight) not in done:  # stacked layers (experts) are drawn one by one
                for weight in module.weight.unbind(0) if is_stacked(module) else (module.weight,):
                    draw(module, weight)
            bias = getattr(module, "bias", None)
            if bias is not None:
                nn.init.zeros_(bias)
        elif hasattr(module, "reset_parameters"):
            module.reset_parameters()
        else:
            raise ConfigError(
                f"init {scheme!r} cannot initialise {name or 'the model'} "
                f"({type(module).__name__}): give that module a reset_parameters() method"
            )
        done.update(id(p) for p in own)


class Gpt2InitOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
    std: float = Field(0.02, gt=0.0, description="std of weight draws")
    scale_residual: bool = Field(True, description="divide residual outputs' std by sqrt(2 * n_layers)")


def gpt2(n_layers: int, std: float = 0.02, scale_residual: bool = True) -> Callable[[nn.Module], None]:
    """N(0, 0.02) weights, zero biases, norms 1/0, residual outputs N(0, 0.02/sqrt(2L))."""
    residual_std = std / math.sqrt(2 * n_layers) if scale_residual else std

    def draw(module: nn.Module, weight: Tensor) -> None:
        nn.init.normal_(weight, 0.0, residual_std if is_residual_output(module) else std)

    return lambda model: init_all(model, draw, "gpt2")


def xavier() -> Callable[[nn.Module], None]:
    """Xavier-uniform weights and zero biases: the 2017 Transformer's reference code."""

    def draw(module: nn.Module, weight: Tensor) -> None:
        nn.init.xavier_uniform_(weight)

    return lambda model: init_all(model, draw, "xavier")


def torch_defaults() -> Callable[[nn.Module], None]:
    """Each module's own default (``reset_parameters``), as plain torch would give."""

    def init(model: nn.Module) -> None:
        done: set[int] = set()  # a tied head keeps the embedding's init, as in plain torch
        for name, module in model.named_modules():
            own = [id(p) for p in module.parameters(recurse=False)]
            if not own or done.issuperset(own):
                continue
            done.update(own)
            if not hasattr(module, "reset_parameters"):
                raise ConfigError(
                    f"init 'torch' cannot initialise {name or 'the model'} "
                    f"({type(module).__name__}): give that module a reset_parameters() method"
                )
            module.reset_parameters()

    return init


@hookimpl
def zoo_register_components(register: RegisterComponent) -> None:
    register("init", "gpt2", gpt2, Gpt2InitOptions)
    register("init", "xavier", xavier)
    register("init", "torch", torch_defaults)

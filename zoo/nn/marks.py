"""Marks the model reads off a component's modules, so components write no model code:
``residual_output`` flags a projection that writes into the residual stream (init schemes
scale it down; its input is a hook point); ``stacked`` flags layers stacked on dim 0 (an
MoE's experts: drawn one by one as linear layers); ``hook_point`` names a module whose output is a
hook point of its sub-layer (an MoE's router); a module's ``aux_loss()`` is a term the
training loss adds (``auxiliary_loss``: an MoE's load balancing). ``SCALES_WITH`` marks a
component option as a size relative to the model's (``zoo.nn.sizes``)."""

from __future__ import annotations

from typing import TypeVar

from torch import Tensor, nn

M = TypeVar("M", bound=nn.Module)

#: The ``json_schema_extra`` key by which a component option says it is a size relative to
#: the model's, so a preset built smaller scales it (``zoo.nn.sizes``): ``"d_model"`` (an
#: MLP's hidden size), ``"head_dim"`` (a head's width) or ``"n_heads"`` (key/value heads).
SCALES_WITH = "scales_with"
#: The ``json_schema_extra`` key (value True) by which a component option says it defines
#: the design, so ``zoo compare``, ``zoo info`` and ablation labels show it even at its
#: default: an MoE's expert count and top-k.
SHOWN = "shown"


def residual_output(layer: M) -> M:
    """Mark ``layer`` as a projection that writes into the residual stream.

    Init schemes (GPT-2's) scale these down by sqrt(2 * n_layers).
    """
    layer.zoo_residual_output = True  # type: ignore[assignment]
    return layer


def is_residual_output(module: nn.Module) -> bool:
    return bool(getattr(module, "zoo_residual_output", False))


def stacked(module: M) -> M:
    """Mark ``module`` as linear layers of one shape stacked on dim 0 (an MoE's experts):
    ``weight`` (n, out, in), ``bias`` (n, out) or None. Init schemes draw each layer as a
    linear one (fans of one layer, not of the stack); the block's hook contract finds no one
    activation or output projection in a sub-layer holding one (each expert has its own)."""
    module.zoo_stacked = True  # type: ignore[assignment]
    return module


def is_stacked(module: nn.Module) -> bool:
    return bool(getattr(module, "zoo_stacked", False))


def hook_point(module: M, name: str) -> M:
    """Mark ``module``'s output as the hook point ``name`` (``hook_router``) of the sub-layer
    that holds it: ``blocks.{i}.mlp.hook_router``. ``name`` starts with ``hook_``."""
    if not name.startswith("hook_") or not name.isidentifier():
        raise ValueError(f"a hook point's name is an identifier starting with 'hook_', got {name!r}")
    module.zoo_hook_point = name  # type: ignore[assignment]
    return module


def marked_point(module: nn.Module) -> str | None:
    """The hook point ``hook_point`` named ``module``'s output, or None."""
    name = getattr(module, "zoo_hook_point", None)
    return name if isinstance(name, str) else None


def auxiliary_loss(model: nn.Module) -> Tensor | None:
    """The sum of the ``aux_loss()`` of ``model``'s modules that have one and return a
    tensor for the latest forward (an MoE's load-balancing term in training, already
    weighted), or None where none does: what the training loss adds to cross-entropy."""
    total: Tensor | None = None
    for module in model.modules():
        method = getattr(module, "aux_loss", None)
        term = method() if callable(method) else None
        if isinstance(term, Tensor):
            total = term if total is None else total + term
    return total

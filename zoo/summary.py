"""What a config costs: parameters by group and forward FLOPs per token.

Both are measured on the model itself, built on the meta device (no memory, no work),
never from a formula for one architecture, so a plugin's components and the 2017
encoder-decoder are counted as they are built:

- Parameters: each module is attributed to the kind of the registered component that
  made it (the innermost one, so a norm inside a placement counts as a norm), and
  grouped as embeddings, attention, MLP, norms and head. Tied weights are counted once,
  where they first appear (a tied head shares the token embedding, so it adds 0).
- FLOPs: one forward pass over ``context`` tokens on the meta device under torch's
  ``FlopCounterMode``, which counts every matrix multiply by its shapes (2 FLOPs per
  multiply-add; elementwise work such as norms and softmax is not counted, it is a
  small fraction). Attention-score FLOPs (q kᵀ and weights · v, batched matmuls that
  grow with the context) are reported separately; they are counted over the full
  S x S score matrix, as the kernels compute it. For the encoder-decoder, "per token"
  means per target token, with a source as long as the target.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from zoo.config import ModelConfig, resolve_config
from zoo.errors import ConfigError
from zoo.factory import model_for
from zoo.registry import Component, Registry, default_registry

GROUPS: tuple[str, ...] = ("embeddings", "attention", "mlp", "norms", "head", "other")

# The group of the parameters of a component of each kind.
KIND_GROUP: dict[str, str] = {
    "attention": "attention",
    "norm": "norms",
    "placement": "norms",  # a placement owns the norms around its sub-layer
    "activation": "mlp",
    "mlp": "mlp",
    "position": "embeddings",
}

# Matmuls with a weight operand; any other counted op (bmm, attention kernels) is
# activation x activation, i.e. attention scores.
_WEIGHT_OPS = frozenset({"aten.mm", "aten.addmm", "aten.linear"})
_NORMS = (nn.LayerNorm, nn.RMSNorm, nn.GroupNorm)


@dataclass(frozen=True)
class ModelSummary:
    """Parameters and forward FLOPs of one config, grouped.

    ``parameters`` and ``flops_per_token`` map each group of ``GROUPS`` (only those
    present) to a count; ``score_flops_per_token`` is the part of the FLOPs spent on
    attention scores at ``context`` tokens; ``tied`` lists ``(name, shares_with)``.
    """

    config: ModelConfig
    context: int
    parameters: dict[str, int]
    flops_per_token: dict[str, float]
    score_flops_per_token: float
    tied: list[tuple[str, str]]

    @property
    def total_parameters(self) -> int:
        return sum(self.parameters.values())

    @property
    def total_flops_per_token(self) -> float:
        return sum(self.flops_per_token.values())

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view (the config as its validated fields)."""
        return {
            "config": self.config.model_dump(mode="json"),
            "context": self.context,
            "parameters": {"total": self.total_parameters, **self.parameters},
            "flops_per_token": {"total": self.total_flops_per_token, **self.flops_per_token},
            "score_flops_per_token": self.score_flops_per_token,
            "tied": [list(pair) for pair in self.tied],
        }


class _KindRecorder:
    """A view of a registry that notes which kind of component made each module.

    ``PartMaker`` only calls ``get(kind, name)``; everything else passes through.
    """

    def __init__(self, registry: Registry) -> None:
        self._registry = registry
        self.made: dict[int, tuple[nn.Module, str]] = {}

    def get(self, kind: str, name: str) -> Component:
        component = self._registry.get(kind, name)
        factory = component.factory

        @functools.wraps(factory)  # keeps the signature the part maker fills arguments from
        def recording_factory(*args: Any, **kwargs: Any) -> Any:
            made = factory(*args, **kwargs)
            if isinstance(made, nn.Module):
                self.made[id(made)] = (made, kind)  # keep a reference: ids stay unique
            return made

        return replace(component, factory=recording_factory)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._registry, name)


def meta_model(config: ModelConfig, registry: Registry | None = None) -> tuple[nn.Module, dict[str, str]]:
    """The model of ``config`` on the meta device, and the group of each module by name.

    A module made by a registered component takes that component's group; a module
    inside it inherits the group; the model's ``head`` is the head; any other embedding
    or norm is grouped as such, and the rest (containers such as blocks) is ``other``.
    """
    recorder = _KindRecorder(registry or default_registry())
    with torch.device("meta"):
        model = model_for(config, recorder)  # type: ignore[arg-type]
    head = getattr(model, "head", None)
    inherited: dict[str, str | None] = {}
    for name, module in model.named_modules():
        made = recorder.made.get(id(module))
        parent = inherited.get(name.rpartition(".")[0]) if name else None
        if made is not None and made[1] in KIND_GROUP:
            group: str | None = KIND_GROUP[made[1]]
        elif module is head:
            group = "head"
        elif parent is not None:
            group = parent
        elif isinstance(module, nn.Embedding):
            group = "embeddings"
        elif isinstance(module, _NORMS):
            group = "norms"
        else:
            group = None
        inherited[name] = group
    return model, {name: group or "other" for name, group in inherited.items()}


def count_parameters(model: nn.Module, groups: Mapping[str, str]) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Parameters per group, each tensor counted once; and the tied ``(name, owner)`` pairs."""
    counts = dict.fromkeys(GROUPS, 0)
    owners: dict[int, str] = {}
    tied: list[tuple[str, str]] = []
    for module_name, module in model.named_modules():
        for param_name, param in module.named_parameters(recurse=False):
            full = f"{module_name}.{param_name}" if module_name else param_name
            owner = owners.get(id(param))
            if owner is not None:
                tied.append((full, owner))
                continue
            owners[id(param)] = full
            counts[groups.get(module_name, "other")] += param.numel()
    return counts, tied


def example_inputs(config: ModelConfig, context: int, device: str = "meta") -> tuple[Tensor, ...]:
    """Token ids for one forward pass over ``context`` tokens (source and target alike)."""
    ids = torch.zeros(1, context, dtype=torch.long, device=device)  # (1, S)
    if config.architecture == "encoder_decoder":
        return ids, ids.clone()  # src, tgt
    return (ids,)


def count_flops(
    model: nn.Module, groups: Mapping[str, str], inputs: tuple[Tensor, ...], tokens: int
) -> tuple[dict[str, float], float]:
    """Forward FLOPs per token by group, and the attention-score part, on meta tensors.

    Every module gets hooks that note the FLOP count on entry and exit; what a module
    spent, less what its sub-modules spent, goes to its group.
    """
    counter = FlopCounterMode(display=False)
    per_group = dict.fromkeys(GROUPS, 0.0)
    stack: list[tuple[str, int]] = []  # (group, total FLOPs on entry) of open modules

    def enter(group: str) -> Callable[[nn.Module, Any], None]:
        def hook(module: nn.Module, args: Any) -> None:
            stack.append((group, counter.get_total_flops()))

        return hook

    def leave(module: nn.Module, args: Any, output: Any) -> None:
        group, before = stack.pop()
        spent = counter.get_total_flops() - before
        per_group[group] += spent
        if stack:  # the enclosing module's span includes this one's: count it once
            per_group[stack[-1][0]] -= spent

    handles = []
    try:
        for name, module in model.named_modules():
            handles.append(module.register_forward_pre_hook(enter(groups.get(name, "other"))))
            handles.append(module.register_forward_hook(leave))
        # The math backend of scaled_dot_product_attention is made of matmuls the counter
        # sees; fused kernels (CPU flash, say) would go uncounted.
        with sdpa_kernel(SDPBackend.MATH), counter, torch.no_grad():
            model.eval()(*inputs)
    finally:
        for handle in handles:
            handle.remove()
    by_op = counter.get_flop_counts().get("Global", {})
    scores = sum(n for op, n in by_op.items() if str(op) not in _WEIGHT_OPS)
    return {g: n / tokens for g, n in per_group.items()}, scores / tokens


def summarize(
    name_or_config: str | ModelConfig | Mapping[str, Any],
    *,
    context: int | None = None,
    registry: Registry | None = None,
    **overrides: Any,
) -> ModelSummary:
    """Parameters by group and forward FLOPs per token of a preset or config.

    ``context`` is the sequence length of the measured forward pass (default: the
    config's ``max_seq_len``); the attention-score FLOPs grow linearly with it.
    """
    config = resolve_config(name_or_config, overrides, registry=registry)
    context = config.max_seq_len if context is None else context
    if isinstance(context, bool) or not isinstance(context, int) or context < 1:
        raise ConfigError(f"context must be at least 1 token (an integer), got {context!r}")
    model, groups = meta_model(config, registry)
    parameters, tied = count_parameters(model, groups)
    flops, scores = count_flops(model, groups, example_inputs(config, context), context)
    present = [g for g in GROUPS if g != "other" or parameters[g] or flops[g]]
    return ModelSummary(
        config=config,
        context=context,
        parameters={g: parameters[g] for g in present},
        flops_per_token={g: flops[g] for g in present},
        score_flops_per_token=scores,
        tied=tied,
    )


__all__ = ["GROUPS", "ModelSummary", "summarize", "meta_model", "count_parameters", "count_flops"]

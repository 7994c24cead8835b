"""What a config costs: parameters by group and forward FLOPs per token.

Both are measured on the model itself, built on the meta device (no memory, no work),
never from a formula for one architecture, so a plugin's components and the 2017
encoder-decoder are counted as they are built:

- Parameters: each module is attributed to the kind of the registered component that
  made it (the innermost one, so a norm inside a placement counts as a norm), and
  grouped as embeddings, attention, MLP, norms and head. Tied weights are counted once,
  where they first appear (a tied head shares the token embedding, so it adds 0).
- FLOPs: one forward pass over ``context`` tokens on the meta device under
  ``FlopCounter``, a dispatch mode that counts every op torch's ``FlopCounterMode`` has
  a formula for (matmuls, convolutions, attention kernels), by its shapes and with
  those formulas (2 FLOPs per multiply-add; elementwise work such as norms and softmax
  is not counted, it is a small fraction). ``FlopCounterMode`` itself is not used: its
  module tracking imports ``torch._dynamo``, over a second of start-up for ``zoo info``. Attention-score FLOPs (q kᵀ and weights · v, batched matmuls that
  grow with the context) are reported separately; they are counted over the full
  S x S score matrix, as the kernels compute it. For the encoder-decoder, "per token"
  means per target token, with a source as long as the target.
"""

from __future__ import annotations

import functools
import itertools
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry

from zoo.errors import ConfigError, checked_types
from zoo.nn.config import ModelConfig, resolve_config
from zoo.nn.factory import model_for
from zoo.nn.registry import Component, Registry, default_registry

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


_aten = torch.ops.aten
_REDUCTIONS = frozenset({_aten.mean, _aten.sum, _aten.amax, _aten.amin})
_SAME_SHAPE = frozenset({_aten.tril, _aten.triu, _aten._softmax, _aten._safe_softmax, _aten._log_softmax, _aten.cumsum})


def _stand_in(value: Any) -> Any:
    """A one-element CPU tensor of a meta tensor's dtype and rank (type promotion only
    looks at those); anything else as it is."""
    if isinstance(value, Tensor) and value.is_meta:
        return torch.zeros([1] * value.dim(), dtype=value.dtype)
    if isinstance(value, (list, tuple)):
        return type(value)(_stand_in(v) for v in value)
    return value


def _broadcast(shapes: list[torch.Size]) -> list[int]:
    """The broadcast of ``shapes`` (``torch.broadcast_shapes`` imports sympy to say it)."""
    out: list[int] = []
    for sizes in itertools.zip_longest(*(reversed(s) for s in shapes), fillvalue=1):
        wide = {n for n in sizes if n != 1}
        if len(wide) > 1:
            raise RuntimeError(f"shapes {[tuple(s) for s in shapes]} do not broadcast")
        out.append(wide.pop() if wide else 1)
    return out[::-1]


def _meta_result(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The result of an op whose meta kernel is written in Python, made without it.

    torch computes elementwise ops, norms, softmax and ``cat`` on meta tensors with its
    Python references, whose type-promotion wrapper imports ``torch._dynamo`` (over a
    second) on first use. Here the output's dtype comes from running the op on one-element
    CPU stand-ins and its shape from the inputs' shapes. None: run the op as it is.
    """
    packet = func._overloadpacket
    if packet is _aten.arange and str(kwargs.get("device")) == "meta" and not any(isinstance(a, Tensor) for a in args):
        probe = func(*args, **{**kwargs, "device": "cpu"})  # a range of positions: small
        return torch.empty(probe.shape, dtype=probe.dtype, device="meta")
    if packet is _aten.cat and isinstance(args[0], (list, tuple)) and all(isinstance(t, Tensor) for t in args[0]):
        parts = [t for t in args[0] if t.dim() != 1 or t.shape[0] != 0]  # cat skips legacy empty (0,) inputs
        if not parts or not all(t.is_meta for t in parts):
            return None
        dim = args[1] if len(args) > 1 else kwargs.get("dim", 0)
        dim = dim % parts[0].dim()
        shape = list(parts[0].shape)
        shape[dim] = sum(t.shape[dim] for t in parts)
        probe = func(_stand_in(list(parts)), dim)
        return torch.empty(shape, dtype=probe.dtype, device="meta")
    if packet is _aten.stack and isinstance(args[0], (list, tuple)) and args[0]:
        parts = list(args[0])
        if not all(isinstance(t, Tensor) and t.is_meta and t.shape == parts[0].shape for t in parts):
            return None
        dim = (args[1] if len(args) > 1 else kwargs.get("dim", 0)) % (parts[0].dim() + 1)
        probe = func(_stand_in(parts), dim)
        shape = [*parts[0].shape[:dim], len(parts), *parts[0].shape[dim:]]
        return torch.empty(shape, dtype=probe.dtype, device="meta")
    if packet is _aten.embedding and all(isinstance(a, Tensor) and a.is_meta for a in args[:2]):
        weight, indices = args[0], args[1]  # its meta kernel's checks import sympy
        return torch.empty((*indices.shape, weight.shape[-1]), dtype=weight.dtype, device="meta")
    if packet is _aten.topk and isinstance(args[0], Tensor) and args[0].is_meta and args[0].dim():
        x, k = args[0], int(args[1])  # an MoE's routing; its meta kernel's checks import sympy
        dim = (args[2] if len(args) > 2 else kwargs.get("dim", -1)) % x.dim()
        shape = [*x.shape[:dim], k, *x.shape[dim + 1 :]]
        return torch.empty(shape, dtype=x.dtype, device="meta"), torch.empty(shape, dtype=torch.long, device="meta")
    if packet is _aten.gather and all(isinstance(a, Tensor) and a.is_meta for a in (args[0], args[2])):
        return torch.empty(args[2].shape, dtype=args[0].dtype, device="meta")  # its meta kernel imports sympy
    metas = [a for a in args if isinstance(a, Tensor) and a.is_meta]
    if not metas or kwargs.get("out") is not None:
        return None
    if packet in (_aten.mm, _aten.bmm, _aten.addmm, _aten.baddbmm):
        a, b = (args[1], args[2]) if packet in (_aten.addmm, _aten.baddbmm) else (args[0], args[1])
        if not (isinstance(a, Tensor) and isinstance(b, Tensor) and a.is_meta and b.is_meta):
            return None
        return torch.empty((*a.shape[:-1], b.shape[-1]), dtype=a.dtype, device="meta")
    if packet in _REDUCTIONS and isinstance(args[0], Tensor) and args[0].is_meta:
        x = args[0]
        dims = args[1] if len(args) > 1 else kwargs.get("dim")
        keep = bool(args[2] if len(args) > 2 else kwargs.get("keepdim", False))
        dims = range(x.dim()) if dims is None or dims == [] else [dims] if isinstance(dims, int) else dims
        reduced = {d % max(x.dim(), 1) for d in dims}
        shape = [1 if i in reduced else n for i, n in enumerate(x.shape) if keep or i not in reduced]
        probe = func(*_stand_in(args), **_stand_in(kwargs))
        return torch.empty(shape, dtype=probe.dtype, device="meta")
    if packet is _aten.native_layer_norm:  # (output, mean, rstd); the statistics in float32 for 16-bit inputs
        x, normalized = args[0], list(args[1])
        stats = [*x.shape[: x.dim() - len(normalized)], *([1] * len(normalized))]
        low = x.dtype in (torch.float16, torch.bfloat16)

        def stat() -> torch.Tensor:
            return torch.empty(stats, dtype=torch.float32 if low else x.dtype, device="meta")

        return (torch.empty(x.shape, dtype=x.dtype, device="meta"), stat(), stat())
    pointwise = torch.Tag.pointwise in func.tags
    if not (pointwise or packet in _SAME_SHAPE):
        return None
    if any(isinstance(a, Tensor) and not a.is_meta and a.dim() > 0 for a in args):
        return None  # a real tensor beside meta ones: let torch say what it thinks of that
    probe = func(*_stand_in(args), **_stand_in(kwargs))
    if not isinstance(probe, Tensor):
        return None
    if func._schema.is_mutable:  # in place (add_): the result is its first argument
        return args[0] if isinstance(args[0], Tensor) else None
    shape = _broadcast([t.shape for t in metas]) if pointwise else args[0].shape
    return torch.empty(shape, dtype=probe.dtype, device="meta")


class FlopCounter(TorchDispatchMode):  # type: ignore[no-untyped-call]  # torch's dispatch mode is untyped
    """Counts the FLOPs of the ops run under it, as torch's ``FlopCounterMode`` does.

    Each op with a formula in torch's ``flop_registry`` (mm, addmm, bmm, baddbmm,
    convolutions, the attention kernels) adds that formula's count for its arguments'
    shapes, so meta tensors suffice. Unlike ``FlopCounterMode`` it does not track
    modules (the hooks of ``count_flops`` do) and it makes the results of ops whose meta
    kernels are Python references itself: both would import ``torch._dynamo``.
    """

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        """Keep ``__torch_dispatch__`` plain: torch would wrap it in ``torch._dynamo.disable``
        (imported on the first op) to keep compilation out of it; nothing here is compiled."""
        return False

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # torch's dispatch mode is untyped
        self.by_op: dict[str, int] = defaultdict(int)
        self.total = 0

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        kwargs = kwargs or {}
        out = _meta_result(func, args, kwargs)
        if out is None:
            out = func(*args, **kwargs)
        formula = flop_registry.get(func._overloadpacket)
        if formula is not None:
            flops = int(formula(*args, **kwargs, out_val=out))
            self.by_op[str(func._overloadpacket)] += flops
            self.total += flops
        return out


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


def layered_counts(config: ModelConfig, registry: Registry | None = None) -> dict[str, int]:
    """``count_parameters`` of ``config``'s model by group, without building every layer.

    A decoder's layers differ only by their ``layer_pattern`` entry (P of them, or 1): a
    one-layer model per entry (the pattern turned to start there) gives the parameters
    outside the layers and those of a layer of that entry; the rest is arithmetic. So
    ``zoo list`` counts Qwen3-30B-A3B's 48 layers of 128 experts from one layer; an
    encoder-decoder, or a model of no more layers than entries, is built whole."""
    pattern = config.layer_pattern
    period = len(pattern) or 1
    if config.architecture != "decoder" or config.n_layers <= period:
        return count_parameters(*meta_model(config, registry))[0]
    layers, outside = [], {}
    for first in range(period):
        turned = config.model_copy(update={"n_layers": 1, "layer_pattern": pattern[first:] + pattern[:first]})
        model, groups = meta_model(turned, registry)
        total, layer = count_parameters(model, groups)[0], dict.fromkeys(GROUPS, 0)
        for name, module in model.get_submodule("blocks.0").named_modules(prefix="blocks.0"):
            for param in module.parameters(recurse=False):
                layer[groups.get(name, "other")] += param.numel()
        layers.append(layer)
        outside = {g: total[g] - layer[g] for g in GROUPS}
    return {g: outside[g] + sum(layers[i % period][g] for i in range(config.n_layers)) for g in GROUPS}


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
    counter = FlopCounter()
    per_group = dict.fromkeys(GROUPS, 0.0)
    stack: list[tuple[str, int]] = []  # (group, total FLOPs on entry) of open modules

    def enter(group: str) -> Callable[[nn.Module, Any], None]:
        def hook(module: nn.Module, args: Any) -> None:
            stack.append((group, counter.total))

        return hook

    def leave(module: nn.Module, args: Any, output: Any) -> None:
        group, before = stack.pop()
        spent = counter.total - before
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
    scores = sum(n for op, n in counter.by_op.items() if op not in _WEIGHT_OPS)
    return {g: n / tokens for g, n in per_group.items()}, scores / tokens


@checked_types("context")
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


__all__ = [
    "GROUPS",
    "FlopCounter",
    "ModelSummary",
    "summarize",
    "meta_model",
    "count_parameters",
    "layered_counts",
    "count_flops",
]

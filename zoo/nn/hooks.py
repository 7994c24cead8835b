"""Hook points: one name per place in the computation, the same for every design.

A decoder-only model's points, in the order the forward reaches them::

    hook_embed                       token embeddings (B, S, d), scaled as configured
    hook_pos_embed                   what the position encoding adds to them (0 for rotary, ALiBi, none)
    blocks.{i}.hook_resid_pre        the residual stream entering block i
    blocks.{i}.attn.hook_q|k|v       (B, H|H_kv, S, dk) as the attention kernel reads them (TransformerLens:
                                     (B, S, H, dk); zoo.nn.activations.to_transformer_lens maps name and layout)
    blocks.{i}.attn.hook_scores      (B, H, S, S_k) masked, before the softmax
    blocks.{i}.attn.hook_pattern     (B, H, S, S_k) after the softmax (q to pattern: none for a mixer
                                     without scores, ``attends = False``)
    blocks.{i}.attn.hook_z           (B, S, H, dk) each head's output, before the output projection
    blocks.{i}.hook_attn_out         (B, S, d) what attention hands its placement
    blocks.{i}.hook_resid_mid        the stream between attention and MLP
    blocks.{i}.mlp.hook_pre|post     (B, S, d_ff) the activation's input | the output projection's input
    blocks.{i}.mlp.hook_<name>       a module's output its component marked (``hook_point``): an MoE's hook_router
    blocks.{i}.hook_mlp_out          (B, S, d) what the MLP hands its placement
    blocks.{i}.hook_resid_post       the stream leaving block i
    hook_final_norm                  the final norm's output (the stream itself without one)
    hook_logits                      the model's output (log-probabilities if so configured)

An encoder-decoder has ``encoder.hook_embed``, ``encoder.{i}.…``, ``encoder.hook_final_norm``,
``decoder.hook_embed``, ``decoder.{i}.…`` (with ``cross_attn.hook_*``, ``hook_cross_out`` and
``hook_resid_cross``, the stream after cross-attention), ``hook_final_norm``, ``hook_logits``.

The points come from the contracts, never from a component's own code: the model names
the embeddings; a block's input and output, each sub-layer's output and each placement's
output are module boundaries, reached with torch module hooks that exist only while a
hook is set; q, k, v, scores and pattern live in ``AttentionContext.attend``; z and the
MLP's post point are the inputs of the layer marked ``residual_output``; the MLP's pre
point is its activation module's input. With no hook set the forward is the plain one.

A placement that runs attention and the MLP side by side (``parallel``) has no stream
between them; its ``hook_resid_mid`` is ``resid_pre + attn_out``, the stream as attention
alone leaves it, and replacing it shifts ``resid_post`` by the same amount.

A hook is ``fn(activation, name)``; it reads the activation, or returns a tensor of the
same shape, dtype and device to use in its place (anything else is a ``HookError``).
Under ``torch.compile`` hooks work: dynamo traces them and recompiles once when hooks
are set or removed (``model.hook_state`` is in its guards); a hook it cannot trace
breaks the graph, which ``fullgraph=True`` refuses.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.hooks import RemovableHandle

from zoo.bounds import check_bytes
from zoo.errors import HookError, check_flag, did_you_mean, quoted
from zoo.nn.activations import ActivationCache
from zoo.nn.attention import AttentionContext
from zoo.nn.marks import is_residual_output, is_stacked, marked_point

__all__ = [
    "HookFn",
    "hook_points",
    "hooked",
    "run_with_cache",
    "run_with_hooks",
]

#: A hook: reads ``activation`` at ``name``; returns None, or a tensor like it (shape, dtype, device) to replace it.
HookFn = Callable[[Tensor, str], "Tensor | None"]
#: Which points: None (all), a name, names, or a predicate on names.
Names = str | Iterable[str] | Callable[[str], bool] | None

ATTENTION_POINTS = ("hook_q", "hook_k", "hook_v", "hook_scores", "hook_pattern")


@dataclass(frozen=True)
class Stack:
    """One stack of blocks and the names around it."""

    embed: str  # prefix of its embedding points: "", "encoder.", "decoder."
    blocks: str  # prefix of its blocks' points: "blocks.", "encoder.", "decoder."
    layers: nn.ModuleList
    norm: nn.Module  # its final norm (an Identity without one)
    norm_point: str


def stacks(model: nn.Module) -> list[Stack]:
    """The stacks of ``model``: one for a decoder-only model, encoder and decoder for a seq2seq one."""
    m: Any = getattr(model, "_orig_mod", model)
    blocks, encoder, decoder = (getattr(m, name, None) for name in ("blocks", "encoder", "decoder"))
    if isinstance(blocks, nn.ModuleList):
        return [Stack("", "blocks.", blocks, m.final_norm, "hook_final_norm")]
    if isinstance(encoder, nn.ModuleList) and isinstance(decoder, nn.ModuleList):
        return [
            Stack("encoder.", "encoder.", encoder, m.encoder_norm, "encoder.hook_final_norm"),
            Stack("decoder.", "decoder.", decoder, m.final_norm, "hook_final_norm"),
        ]
    raise HookError(f"{type(model).__name__} has no hook points: they belong to zoo models (zoo.build(...))")


def sublayers(block: nn.Module) -> list[tuple[str, str, str, str | None]]:
    """A block's sub-layers in order: (module, its placement, output point, stream point after it)."""
    found: list[tuple[str, str, str, str | None]] = [("attn", "attn_residual", "hook_attn_out", "hook_resid_mid")]
    if hasattr(block, "cross_attn"):
        found.append(("cross_attn", "cross_residual", "hook_cross_out", "hook_resid_cross"))
    found.append(("mlp", "mlp_residual", "hook_mlp_out", None))
    return found


def residual_projection(module: nn.Module) -> nn.Module | None:
    """The one layer in ``module`` marked ``residual_output`` (its output projection), or None
    (also where it holds ``stacked`` experts: each has its own)."""
    if any(is_stacked(m) for m in module.modules()):
        return None
    marked = [m for m in module.modules() if is_residual_output(m)]
    return marked[0] if len(marked) == 1 else None


def activation_of(mlp: nn.Module) -> nn.Module | None:
    """The MLP's activation: the module the part maker made of kind ``activation``, else its one
    ``torch.nn`` activation module; None if there is none or more than one, or where the MLP
    holds ``stacked`` experts (each has its own)."""
    if any(is_stacked(m) for m in mlp.modules()):
        return None
    made = [m for m in mlp.modules() if getattr(m, "zoo_kind", None) == "activation"]
    if len(made) == 1:
        return made[0]
    torch_made = [m for m in mlp.modules() if type(m).__module__ == "torch.nn.modules.activation"]
    return torch_made[0] if len(torch_made) == 1 else None


def marked_points(sublayer: nn.Module) -> list[tuple[str, nn.Module]]:
    """The points a component named with ``hook_point`` (an MoE's ``hook_router``): each
    its module's output, in the order the modules were registered (first is first run)."""
    return [(name, m) for m in sublayer.modules() if (name := marked_point(m)) is not None]


def block_points(block: nn.Module) -> list[str]:
    """A block's point names, relative to the block, in forward order."""
    names = ["hook_resid_pre"]
    for attr, _, output, stream in sublayers(block):
        sub = getattr(block, attr)
        names += [f"{attr}.{name}" for name, _ in marked_points(sub)]
        if attr == "mlp":
            names += ["mlp.hook_pre"] if activation_of(sub) is not None else []
            names += ["mlp.hook_post"] if residual_projection(sub) is not None else []
        else:  # a token mixer without scores (``attends = False``, a convolution) has none of them
            names += [f"{attr}.{point}" for point in ATTENTION_POINTS] if getattr(sub, "attends", True) else []
            names += [f"{attr}.hook_z"] if residual_projection(sub) is not None else []
        names += [output] + ([stream] if stream else [])
    return [*names, "hook_resid_post"]


def hook_points(model: nn.Module) -> list[str]:
    """Every hook point of ``model``, in the order its forward reaches them."""
    model = getattr(model, "_orig_mod", model)  # a torch.compile'd model: its module
    names: list[str] = []
    for stack in stacks(model):
        names += [f"{stack.embed}hook_embed", f"{stack.embed}hook_pos_embed"]
        for i, block in enumerate(stack.layers):
            names += [f"{stack.blocks}{i}.{name}" for name in block_points(block)]
        names.append(stack.norm_point)
    return [*names, "hook_logits"]


class HookState:
    """The hooks set on one model, and the torch module hooks that reach its points."""

    def __init__(self, n_heads: int) -> None:
        self.fns: dict[str, list[HookFn]] = {}
        self.handles: list[RemovableHandle] = []
        self.n_heads = n_heads

    def wants(self, name: str) -> bool:
        return name in self.fns

    def run(self, name: str, x: Tensor) -> Tensor:
        """``x`` after the hooks at ``name``, each reading it or replacing it."""
        fns = self.fns.get(name)
        if not fns:
            return x
        for fn in list(fns):
            out = fn(x, name)
            if out is None:
                continue
            if not isinstance(out, Tensor) or out.shape != x.shape or out.dtype != x.dtype or out.device != x.device:
                raise HookError(_bad_return(name, x, out))
            x = out
        return x

    def embed(self, position: Any, x: Tensor, positions: Tensor, scope: str) -> Tensor:
        """Token embeddings ``x`` through ``hook_embed``, plus positions through ``hook_pos_embed``."""
        x = self.run(f"{scope}hook_embed", x)
        out: Tensor = position.embed(x, positions)
        name = f"{scope}hook_pos_embed"
        if self.wants(name):
            added = out - x
            replaced = self.run(name, added)
            if replaced is not added:
                out = x + replaced
        return out


def _bad_return(name: str, x: Tensor, out: object) -> str:
    """Why a hook's return cannot replace the activation ``x``: it must be a tensor like
    ``x`` in shape, dtype and device (another dtype or device would fail, or silently
    change the precision of, every layer after it)."""
    where = f"the hook at {name!r} returned"
    if not isinstance(out, Tensor) or out.shape != x.shape:
        got = tuple(out.shape) if isinstance(out, Tensor) else type(out).__name__
        return (
            f"{where} {got}; return None to only read the activation, or a tensor of its shape {tuple(x.shape)} "
            f"to replace it"
        )
    if out.dtype != x.dtype:
        return f"{where} a {out.dtype} tensor for a {x.dtype} activation; return it as one: out.to(activation.dtype)"
    return (
        f"{where} a tensor on {out.device} for an activation on {x.device}; return it there: out.to(activation.device)"
    )


@dataclass(frozen=True)
class LayerHooks:
    """One attention layer's points, for ``AttentionContext.hooks``."""

    state: HookState
    prefix: str  # "blocks.3.attn."

    def point(self, name: str, x: Tensor) -> Tensor:
        return self.state.run(self.prefix + name, x)

    def wants(self, *names: str) -> bool:
        return any(self.state.wants(self.prefix + name) for name in names)


# -- the torch module hooks that reach the points (present only while hooks are set) -----


def _block_in(state: HookState, name: str, frame: dict[str, Any], module: nn.Module, args: tuple[Any, ...]) -> Any:
    frame.clear()
    x = state.run(name, args[0])
    frame["pre"] = x
    return (x, *args[1:]) if x is not args[0] else None


def _attention_in(
    state: HookState, prefix: str, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    layer = LayerHooks(state, prefix)
    if len(args) > 1 and isinstance(args[1], AttentionContext):
        return (args[0], dataclasses.replace(args[1], hooks=layer), *args[2:]), kwargs
    if isinstance(kwargs.get("ctx"), AttentionContext):
        return args, {**kwargs, "ctx": dataclasses.replace(kwargs["ctx"], hooks=layer)}
    return None


def _heads_in(state: HookState, name: str, module: nn.Module, args: tuple[Any, ...]) -> Any:
    if not state.wants(name):
        return None
    x = args[0]  # (B, S, d): the heads side by side
    heads = x.view(*x.shape[:-1], state.n_heads, x.shape[-1] // state.n_heads)  # (B, S, H, dk)
    out = state.run(name, heads)
    return (out.reshape(x.shape), *args[1:]) if out is not heads else None


def _input(state: HookState, name: str, module: nn.Module, args: tuple[Any, ...]) -> Any:
    x = state.run(name, args[0])
    return (x, *args[1:]) if x is not args[0] else None


def _output(
    state: HookState, name: str, frame: dict[str, Any] | None, key: str, module: nn.Module, args: Any, out: Tensor
) -> Tensor:
    out = state.run(name, out)
    if frame is not None:
        frame[key] = out
    return out


def _block_out(state: HookState, prefix: str, frame: dict[str, Any], module: nn.Module, args: Any, out: Tensor) -> Any:
    mid = f"{prefix}hook_resid_mid"
    if state.wants(mid) and "mid" not in frame and "attn" in frame:  # side by side: no stream between
        derived = frame["pre"] + frame["attn"]
        replaced = state.run(mid, derived)
        if replaced is not derived:
            out = out + (replaced - derived)
    return state.run(f"{prefix}hook_resid_post", out)


def _install(model: Any, state: HookState) -> None:
    add = state.handles.append
    for stack in stacks(model):
        for i, block in enumerate(stack.layers):
            prefix = f"{stack.blocks}{i}."
            frame: dict[str, Any] = {}
            add(block.register_forward_pre_hook(functools.partial(_block_in, state, f"{prefix}hook_resid_pre", frame)))
            for attr, placement, output, stream in sublayers(block):
                sub = getattr(block, attr)
                projection = residual_projection(sub)
                for name, marked in marked_points(sub):
                    add(
                        marked.register_forward_hook(
                            functools.partial(_output, state, f"{prefix}{attr}.{name}", None, "")
                        )
                    )
                if attr == "mlp":
                    activation = activation_of(sub)
                    if activation is not None:
                        add(
                            activation.register_forward_pre_hook(
                                functools.partial(_input, state, f"{prefix}mlp.hook_pre")
                            )
                        )
                    if projection is not None:
                        add(
                            projection.register_forward_pre_hook(
                                functools.partial(_input, state, f"{prefix}mlp.hook_post")
                            )
                        )
                else:
                    hook = functools.partial(_attention_in, state, f"{prefix}{attr}.")
                    add(sub.register_forward_pre_hook(hook, with_kwargs=True))
                    if projection is not None:
                        add(
                            projection.register_forward_pre_hook(
                                functools.partial(_heads_in, state, f"{prefix}{attr}.hook_z")
                            )
                        )
                add(sub.register_forward_hook(functools.partial(_output, state, f"{prefix}{output}", frame, attr)))
                if stream is not None:
                    joined = getattr(block, placement)
                    add(
                        joined.register_forward_hook(
                            functools.partial(_output, state, f"{prefix}{stream}", frame, "mid")
                        )
                    )
            add(block.register_forward_hook(functools.partial(_block_out, state, prefix, frame)))
        add(stack.norm.register_forward_hook(functools.partial(_output, state, stack.norm_point, None, "")))
    add(model.register_forward_hook(functools.partial(_output, state, "hook_logits", None, "")))


def _unknown(model: nn.Module, name: str, known: Sequence[str]) -> HookError:
    local = name.rsplit(".", 1)[-1]
    scheme = {n.rsplit(".", 1)[-1] for n in hook_points(model)}
    if local in ("hook_pre", "hook_post", "hook_z") and not any(n == name for n in known):
        return HookError(
            f"{name!r} is not a hook point of this model: its component there has no module the "
            f"contract can see (an MLP's pre point is its activation module's input; post and z are "
            f"the input of its one layer marked residual_output)"
        )
    hint = did_you_mean(name, known, n=2, cutoff=0.6) or (
        f" Points end in one of {', '.join(sorted(scheme))}." if local not in scheme else ""
    )
    return HookError(
        f"{name!r} is not a hook point of this model.{hint} List them with model.hook_points() (e.g. {known[2]!r})"
    )


def select(model: nn.Module, names: Names) -> list[str]:
    """The points ``names`` picks, in forward order; unknown names are an error."""
    known = hook_points(model)
    if names is None:
        return known
    if callable(names):
        return [n for n in known if names(n)]
    given: object = names  # what the type allows, and what a caller may pass anyway
    if isinstance(given, (bytes, bytearray)) or not isinstance(given, (str, Iterable)):
        raise HookError(
            f"names picks hook points: None (all), a name, names, or a predicate on names; got "
            f"{type(names).__name__} {quoted(names, 60)}; list them with model.hook_points()"
        )
    wanted = [names] if isinstance(names, str) else list(names)
    known_set = set(known)
    for name in wanted:
        if not isinstance(name, str):
            raise HookError(f"hook point names are str, got {type(name).__name__} {quoted(name, 60)}")
        if name not in known_set:
            raise _unknown(model, name, known)
    order = {n: i for i, n in enumerate(known)}
    return sorted(set(wanted), key=order.__getitem__)


@contextmanager
def hooked(model: nn.Module, fns: Mapping[str, HookFn | Sequence[HookFn]]) -> Iterator[None]:
    """Run ``fns[name](activation, name)`` at each named point while the block is open.

    A hook returns None (it only reads) or a tensor of the activation's shape, dtype and
    device that takes its place. Every hook is checked to be callable as
    ``fn(activation, name)`` before any is set. Contexts nest; on exit the model is as it was.
    """
    m: Any = getattr(model, "_orig_mod", model)  # a torch.compile'd model: its module
    if not isinstance(fns, Mapping):
        raise HookError(
            f"hooked takes a mapping of point name to hook (or hooks), got {type(fns).__name__}; "
            f"e.g. {{'blocks.0.hook_resid_post': fn}}"
        )
    select(m, list(fns))  # every name must be a point of this model
    given_fns = {name: _hook_list(name, given) for name, given in fns.items()}  # all checked before any is set
    state: HookState | None = m.hook_state
    fresh = state is None
    if state is None:
        state = HookState(m.config.n_heads)
        _install(m, state)
        m.hook_state = state
    added: list[tuple[str, HookFn]] = []
    try:
        for name, listed in given_fns.items():
            for fn in listed:
                state.fns.setdefault(name, []).append(fn)
                added.append((name, fn))
        yield
    finally:
        for name, fn in added:
            kept = state.fns[name]
            kept.pop(next(i for i, f in enumerate(kept) if f is fn))
            if not kept:
                del state.fns[name]
        if fresh:
            for handle in state.handles:
                handle.remove()
            m.hook_state = None


def _hook_list(name: str, given: object) -> list[HookFn]:
    """The hooks ``given`` for point ``name`` (one, or a sequence), each a callable that
    takes ``(activation, name)``."""
    listed: list[Any] | None = None
    if callable(given):
        listed = [given]
    elif isinstance(given, Sequence) and not isinstance(given, (str, bytes, bytearray)):
        listed = list(given)
    if listed is None:
        raise HookError(
            f"the hook for {name!r} is {type(given).__name__} {quoted(given, 60)}: give a function "
            f"fn(activation, name) (or a list of them)"
        )
    for fn in listed:
        if not callable(fn):
            raise HookError(
                f"a hook for {name!r} is {type(fn).__name__} {quoted(fn, 60)}, not a function fn(activation, name)"
            )
        try:
            inspect.signature(fn).bind(None, name)
        except TypeError:
            raise HookError(
                f"the hook {quoted(getattr(fn, '__name__', fn), 60)} for {name!r} cannot be called as "
                f"fn(activation, name); give it those two arguments (return None, or a replacement)"
            ) from None
        except ValueError:  # a builtin without a signature: called as it is
            pass
    return listed


def tokens_of(model: nn.Module, args: tuple[Any, ...], tokenizer: Any = None) -> tuple[Any, ...]:
    """``args`` with a text (or a list of texts of one length in tokens) in first place as
    token ids (1|B, S) on the model's device, through ``tokenizer`` (anything with
    ``encode(str) -> list[int]``), else the model's own (``model.tokenizer``)."""
    if not args or not (
        isinstance(args[0], str) or (isinstance(args[0], list) and args[0] and all(isinstance(t, str) for t in args[0]))
    ):
        return args
    tokenizer = tokenizer if tokenizer is not None else getattr(getattr(model, "_orig_mod", model), "tokenizer", None)
    if not callable(getattr(tokenizer, "encode", None)):
        raise HookError(
            "text was given where tokens go, and the model has no tokenizer to encode it: pass tokenizer= "
            "(zoo.tokenizer('gpt2'), or any object with encode(text) -> ids), or token ids"
        )
    rows = [tokenizer.encode(text) for text in ([args[0]] if isinstance(args[0], str) else args[0])]
    if len({len(row) for row in rows}) != 1 or not rows[0]:
        raise HookError(
            f"the texts encode to {sorted({len(row) for row in rows})} tokens; give texts of one nonzero length in "
            f"tokens (or pass token ids with an attention_mask)"
        )
    device = next(model.parameters()).device
    return (torch.tensor(rows, device=device), *args[1:])


def run_with_cache(
    model: nn.Module, *args: Any, names: Names = None, detach: bool = True, tokenizer: Any = None, **kwargs: Any
) -> tuple[Any, ActivationCache]:
    """``model(*args, **kwargs)`` and its activations, keyed by point name in forward order,
    as an ``ActivationCache`` (a dict with TransformerLens's helpers, ``zoo.nn.activations``).

    ``names`` picks the points (None: all; a name; names; a predicate). ``detach=False``
    keeps them in the autograd graph, so gradients can be taken with respect to them.
    A text (or texts) in place of the tokens is encoded with ``tokenizer`` or the model's
    own (``tokens_of``). Every point asked for by name must run, else a ``HookError``
    names the ones that did not.
    """
    check_flag(detach, "detach")
    selected = select(model, names)
    args = tokens_of(model, args, tokenizer)
    tokens = args[0] if args else kwargs.get("input_ids")
    if isinstance(tokens, Tensor) and tokens.dim() in (1, 2):
        rows, length = (1, tokens.shape[0]) if tokens.dim() == 1 else tuple(tokens.shape)
        check_bytes(
            cache_bytes(model, selected, rows, length),
            f"run_with_cache of {len(selected)} hook point(s) on {rows} x {length} tokens",
            "",
            error=HookError,
            fix="pick fewer points (names=...) or pass fewer, shorter rows of tokens",
            device=next(model.parameters()).device,
        )
    cache: dict[str, Tensor] = {}

    def keep(x: Tensor, name: str) -> None:
        cache[name] = x.detach() if detach else x

    with hooked(model, dict.fromkeys(selected, keep)):
        out = model(*args, **kwargs)
    missing = [n for n in selected if n not in cache]
    if missing and names is not None and not callable(names):
        raise HookError(
            f"hook point(s) {', '.join(missing)} did not run: the component there does not follow "
            f"its contract (an attention must compute its heads with ctx.attend)"
        )
    return out, ActivationCache({n: cache[n] for n in selected if n in cache}, model)


def run_with_hooks(
    model: nn.Module,
    *args: Any,
    fwd_hooks: Iterable[tuple[str | Callable[[str], bool], HookFn]] = (),
    tokenizer: Any = None,
    **kwargs: Any,
) -> Any:
    """``model(*args, **kwargs)`` with ``fwd_hooks`` set for this call only, as in
    TransformerLens: ``(name, fn)`` pairs, a name or a predicate on names each, and
    ``fn(activation, name)`` reading or replacing (``hooked``). Text as ``run_with_cache``."""
    fns: dict[str, list[HookFn]] = {}
    for pair in fwd_hooks:
        if not (isinstance(pair, tuple) and len(pair) == 2):
            raise HookError(f"fwd_hooks are (name, fn) pairs, got {type(pair).__name__} {quoted(pair, 60)}")
        where, fn = pair
        for name in select(model, where if callable(where) else [where]):
            fns.setdefault(name, []).append(fn)
    args = tokens_of(model, args, tokenizer)
    with hooked(model, fns):
        return model(*args, **kwargs)


def cache_bytes(model: nn.Module, names: Iterable[str], rows: int, length: int) -> int:
    """A lower bound on the bytes ``run_with_cache`` keeps for ``names`` on ``rows`` x
    ``length`` tokens of a decoder-only model: scores and patterns (B, H, S, S), logits
    (B, S, V), queries and the residual-stream points (B, S, d_model); points that may be
    narrower (keys and values of grouped heads, MLP hiddens, position embeddings) count 0."""
    config = getattr(getattr(model, "_orig_mod", model), "config", None)
    heads, width, vocab = (getattr(config, name, None) for name in ("n_heads", "d_model", "vocab_size"))
    param = next(model.parameters(), None)
    if not (isinstance(heads, int) and isinstance(width, int) and isinstance(vocab, int)):
        return 0  # not a zoo model's config: no estimate, no refusal
    if param is None or not hasattr(model, "blocks"):
        return 0  # not a decoder-only model: its cross-attention has other shapes
    per_point = {"hook_scores": heads * length, "hook_pattern": heads * length, "hook_logits": vocab}
    narrow = ("hook_k", "hook_v", "mlp.hook_pre", "mlp.hook_post", "hook_pos_embed")
    elements = 0
    for name in names:
        point = name.rsplit(".", 1)[-1]
        if not name.endswith(narrow):
            elements += per_point.get(point, width)
    return rows * length * elements * param.element_size()

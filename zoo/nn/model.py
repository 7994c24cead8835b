"""The assembled model: a decoder-only language model built from registered parts.

Reads like nanoGPT's GPT: token embedding (+ position), dropout, N blocks, an optional
final norm, and a head tied to the token embedding. Every part with a choice behind it
(attention, norm, placement, activation, position, MLP) comes from the registry.

``forward`` checks what it can see without reading data (types, shapes, dtypes,
lengths), so it never waits on the device and compiles to one graph; the checks live in
``zoo.nn.inputs``, with ``check_inputs``, which also checks values and which the entry points
call once per request. Out-of-range ids that reach the embedding on the CPU still raise
an ``InputError``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from zoo.errors import HookError, InputError, check_flag, checked_types
from zoo.nn.activations import ActivationCache
from zoo.nn.attention import AttentionContext, make_mask
from zoo.nn.cache import KVCache
from zoo.nn.config import ModelConfig
from zoo.nn.contracts import Placement, PositionEncoding, wires_layer
from zoo.nn.generation import carried_tokenizer
from zoo.nn.hooks import HookFn, HookState, Names, hook_points, hooked, run_with_cache, run_with_hooks
from zoo.nn.inputs import (
    as_padding,
    check_cache,
    check_positions,
    check_tensor,
    check_tokens,
    value_problems,
)
from zoo.nn.lens import LensModel
from zoo.nn.parts import PartMaker
from zoo.nn.registry import KINDS, Registry


class Block(nn.Module):
    """One layer: attention, then the MLP, each joined to the residual stream by its
    placement (pre-norm: ``x + attn(norm(x))``; post-norm: ``norm(x + attn(x))``)."""

    def __init__(self, parts: PartMaker) -> None:
        super().__init__()
        attn_residual, mlp_residual = parts.placements()  # made as a pair: they may share a norm
        self.attn_residual: Placement = attn_residual  # owns the norm(s) around attention
        self.attn = parts.make("attention")
        self.mlp_residual: Placement = mlp_residual  # owns the norm(s) around the MLP
        self.mlp = parts.make("mlp")
        self.wired = wires_layer(type(attn_residual))  # the placement combines the sub-layers itself
        window = getattr(self.attn, "window", None)
        self.window: int | None = window if isinstance(window, int) else None  # sliding window, if any
        keeps = getattr(self.attn, "cache_window", None)  # a chunk's, a convolution's: what its cache keeps
        self.keeps: int | None = keeps if isinstance(keeps, int) else self.window

    def forward(self, x: Tensor, ctx: AttentionContext) -> Tensor:
        if self.wired:  # a parallel layout: attention and MLP side by side
            return type(self.attn_residual).block(x, self.attn_residual, self.attn, self.mlp_residual, self.mlp, ctx)
        x = self.attn_residual(x, self.attn, ctx)  # (B, S, d): attention sub-layer
        x = self.mlp_residual(x, self.mlp)  # (B, S, d): MLP sub-layer
        return x


class LayerMasks:
    """The masks of one forward pass, each made once: the full layers' and one per
    (window, cached keys) of the windowed layers (``make_mask``)."""

    def __init__(self, n_heads: int, seq: int, padding: Tensor | None, encoding: PositionEncoding, x: Tensor) -> None:
        self.n_heads, self.seq, self.padding, self.encoding, self.x = n_heads, seq, padding, encoding, x
        self.made: dict[tuple[int | None, int, int], tuple[Tensor | None, bool]] = {}

    def get(
        self, window: int | None, cached: int, encoding: PositionEncoding | None = None
    ) -> tuple[Tensor | None, bool]:
        """``(mask, is_causal)`` for queries after ``cached`` keys, within ``window``, with
        ``encoding``'s score bias (default: the model's)."""
        if window is not None and window >= cached + self.seq:
            window = None  # every key is within the window: the full layers' mask
        encoding = self.encoding if encoding is None else encoding
        key = (window, cached, id(encoding))
        if key not in self.made:
            self.made[key] = make_mask(
                q_len=self.seq,
                k_len=cached + self.seq,
                n_heads=self.n_heads,
                causal=True,
                key_padding=self.padding,
                encoding=encoding,
                dtype=self.x.dtype,
                device=self.x.device,
                window=window,
            )
        return self.made[key]


class TokenModel(LensModel):
    """What every zoo language model shares: the token embedding (scaled as configured)
    plus positions, the output head tied to it, and checks on the token ids."""

    head: nn.Linear  # set by each model, after its layers
    final_norm: nn.Module
    tokenizer_record: dict[str, Any] | None

    def __init__(self, config: ModelConfig, parts: PartMaker) -> None:
        super().__init__()
        self.config = config
        self.tok_emb = nn.Embedding(config.vocab_size, config.d_model)
        self.position: PositionEncoding = parts.make("position")
        self.drop = nn.Dropout(config.dropout.embedding)
        scale = config.embedding_scale
        self.embed_norm = parts.norm() if config.embedding_norm else nn.Identity()  # BLOOM's
        self.embed_scale = math.sqrt(config.d_model) if scale == "sqrt_d_model" else 1.0 if scale == "none" else scale
        self.hook_state: HookState | None = None  # only while hooks are set (zoo.nn.hooks)
        #: The tokenizer this model goes with, as a checkpoint records it (a name, a hub id,
        #: kept or embedded files: ``zoo.checkpoint.tokenizer``); set where a model is read
        #: (``zoo.from_hf``, ``zoo.load``), saved by ``zoo.save``, written by ``zoo.to_hf``.
        self.tokenizer_record = None
        self._tokenizer: Any = None

    @property
    def tokenizer(self) -> Any:
        """The tokenizer this model goes with: one assigned here, else the one its
        ``tokenizer_record`` names, loaded on first use; None if there is neither."""
        if self._tokenizer is None and self.tokenizer_record:
            self._tokenizer = carried_tokenizer(self)
        return self._tokenizer

    @tokenizer.setter
    def tokenizer(self, value: Any) -> None:
        self._tokenizer = value

    def wants_final_norm(self, placement: nn.Module) -> bool:
        """A norm after the last layer: as configured, else as the placement says."""
        if self.config.final_norm is not None:
            return self.config.final_norm
        return bool(getattr(placement, "final_norm", True))

    def tie_weights(self) -> None:
        """Share the token embedding with the head, when configured."""
        if self.config.tie_embeddings:
            self.head.weight = self.tok_emb.weight

    def embed(self, idx: Tensor, positions: Tensor, scope: str = "") -> Tensor:
        """Token embeddings (B, S, d), scaled, with positions, after dropout; ``scope``
        prefixes their hook points (``encoder.``)."""
        try:
            x = self.tok_emb(idx)  # (B, S, d)
            if self.embed_scale != 1.0:  # the factor rounded to the model's dtype first, as Gemma's was
                x = x * torch.tensor(self.embed_scale, dtype=x.dtype)
            if self.hook_state is not None:  # hook_embed, hook_pos_embed
                out: Tensor = self.drop(self.embed_norm(self.hook_state.embed(self.position, x, positions, scope)))
                return out
            out = self.drop(self.embed_norm(self.position.embed(x, positions)))
            return out
        except IndexError as err:  # an id or position past a table (the CPU says so here)
            problems = value_problems(self, idx, positions=positions)
            raise InputError("; ".join(problems) or str(err)) from err

    def positions_for(
        self, positions: Tensor | None, batch: int, seq: int, offset: int, device: torch.device
    ) -> Tensor:
        """``positions`` (1|B, S) checked by shape and dtype, or ``offset .. offset+S-1``."""
        if positions is None:
            return torch.arange(offset, offset + seq, device=device)[None]  # (1, S)
        return check_positions(positions, batch, seq)

    def output(self, x: Tensor) -> Tensor:
        """Logits (B, S, V) of the last hidden states, or log-probabilities if configured."""
        x = self.final_norm(x)
        logits: Tensor = self.head(x)  # (B, S, V)
        if self.config.logit_scale != 1.0:
            logits = logits * self.config.logit_scale
        cap = self.config.logit_softcap
        if cap is not None:  # Gemma 2: logits smoothly within +-cap
            logits = cap * torch.tanh(logits / cap)
        if self.config.head_output == "log_softmax":
            return F.log_softmax(logits, dim=-1)
        return logits

    def check_tokens(self, idx: Tensor, length: int, name: str = "idx") -> None:
        """Token ids of shape (batch, seq) whose ``length`` positions fit (``zoo.nn.inputs``)."""
        check_tokens(self, idx, length, name)

    def check_cache(self, cache: object, layers: int, batch: int) -> KVCache | None:
        """``cache`` if it is a ``KVCache`` of ``layers`` layers and this batch (``zoo.nn.inputs``)."""
        return check_cache(cache, layers, batch)

    def hook_points(self) -> list[str]:
        """The names of this model's hook points, in forward order (``zoo.nn.hooks``)."""
        return hook_points(self)

    def hooks(self, fns: Mapping[str, HookFn | Sequence[HookFn]]) -> AbstractContextManager[None]:
        """``with model.hooks({name: fn}):`` runs ``fn(activation, name)`` at each point; a hook
        that returns a tensor (of the same shape, dtype and device) replaces the activation."""
        return hooked(self, fns)

    def run_with_cache(
        self, *args: Any, names: Names = None, detach: bool = True, tokenizer: Any = None, **kwargs: Any
    ) -> tuple[Tensor, ActivationCache]:
        """The output of ``self(*args, **kwargs)`` and the activations at ``names`` (all by
        default, or names, or a predicate), keyed by point name, as an ``ActivationCache``
        (a dict with TransformerLens's helpers); ``detach=False`` keeps grad. Text in place
        of tokens is encoded with ``tokenizer``, else ``self.tokenizer``."""
        out, cache = run_with_cache(self, *args, names=names, detach=detach, tokenizer=tokenizer, **kwargs)
        return out, cache

    def run_with_hooks(
        self,
        *args: Any,
        fwd_hooks: Sequence[tuple[str | Callable[[str], bool], HookFn]] = (),
        tokenizer: Any = None,
        **kwargs: Any,
    ) -> Tensor:
        """``self(*args, **kwargs)`` with ``fwd_hooks``, ``(name or predicate, fn)`` pairs, set
        for this call only, as TransformerLens's ``run_with_hooks``."""
        out: Tensor = run_with_hooks(self, *args, fwd_hooks=fwd_hooks, tokenizer=tokenizer, **kwargs)
        return out

    def num_parameters(self, *, trainable_only: bool = False) -> int:
        """Number of parameters, tied weights counted once."""
        check_flag(trainable_only, "trainable_only")
        return sum(p.numel() for p in self.parameters() if p.requires_grad or not trainable_only)

    def extra_repr(self) -> str:
        c = self.config
        sizes = f"layers={c.n_layers}, d_model={c.d_model}, heads={c.n_heads}, d_ff={c.d_ff}, vocab={c.vocab_size}"
        return ", ".join([sizes, *(f"{kind}={getattr(c, kind).name}" for kind in KINDS)])


class DecoderLM(TokenModel):
    """A causal language model: ``model(idx) -> logits`` of shape (B, S, vocab_size).

    With ``head_output = "log_softmax"`` (the 2017 design) it returns log-probabilities.
    """

    def __init__(self, config: ModelConfig, registry: Registry | None = None) -> None:
        parts = PartMaker(config, registry)
        super().__init__(config, parts)
        makers = [
            parts if config.layer(i) is config else PartMaker(config.layer(i), registry) for i in range(config.n_layers)
        ]
        blocks = [Block(maker) for maker in makers]
        self.blocks = nn.ModuleList(blocks)
        # A pattern entry that changes the position has its own, inside attention only
        # (rotation, score bias); the embedding's positions are the model's.
        self.layer_positions = nn.ModuleDict(
            {
                str(j): makers[j].make("position")
                for j, entry in enumerate(config.layer_pattern)
                if "position" in entry.changes() and j < config.n_layers  # entry j first makes layer j
            }
        )
        self.final_norm = parts.norm() if self.wants_final_norm(blocks[0].attn_residual) else nn.Identity()
        self.head = nn.Linear(config.d_model, config.vocab_size, bias=config.head_bias)
        self.tie_weights()
        # What generation uses when a call does not say (zoo.nn.generation.GENERATION_KEYS):
        # end-of-sequence and pad ids, sampling and length settings, by transformers' names.
        self.generation_config: dict[str, Any] = {}
        #: Where ``generation_config`` came from, as a refusal of one of its settings names
        #: it (``generation_config.json``, ``config.json``, the checkpoint).
        self.generation_source = "the model's generation_config"

    def forward(
        self,
        idx: Tensor,
        *,
        attention_mask: Tensor | None = None,
        positions: Tensor | None = None,
        cache: KVCache | None = None,
        last_only: bool = False,
    ) -> Tensor:
        """Logits (B, S, V) for token ids ``idx`` (B, S).

        ``attention_mask`` (B, cached + S), 1 for real tokens and 0 for padding;
        ``positions`` (B|1, S) overrides the default ``offset .. offset+S-1``;
        ``cache`` holds keys and values of earlier calls and is extended in place;
        ``last_only`` computes the head for the last position only, (B, 1, V), which is
        all decoding needs (the head is the largest matmul of a small model).
        """
        check_flag(last_only, "last_only")
        check_tensor(idx, "idx", "of token ids of shape (batch, seq)")
        cache = self.check_cache(cache, self.config.n_layers, idx.shape[0] if idx.dim() else 0)
        offset = cache.length if cache is not None else 0
        self.check_tokens(idx, offset + (idx.shape[-1] if idx.dim() else 0))
        batch, seq = idx.shape
        positions = self.positions_for(positions, batch, seq, offset, idx.device)
        x = self.embed(idx, positions)  # (B, S, d)
        padding = as_padding(attention_mask, idx, "attention_mask", cached=offset)
        masks = LayerMasks(self.config.n_heads, seq, padding, self.position, x)
        mask, is_causal = masks.get(None, offset)
        ctx = AttentionContext(mask, is_causal, self.position, self.position.prepare(positions), padding=padding)
        contexts = self.layer_contexts(ctx, positions) if self.layer_positions else {}
        period = len(self.config.layer_pattern) or 1
        for i, block in enumerate(cast(Sequence[Block], self.blocks)):
            layer_cache = cache[i] if cache is not None else None
            layer_ctx, encoding = contexts.get(i % period, (ctx, self.position))
            layer_ctx = layer_ctx.for_layer(layer_cache)
            if block.keeps is not None or encoding is not self.position:  # its own mask
                cached = offset if layer_cache is None else layer_cache.stored  # the keys its cache keeps
                layer_ctx = layer_ctx.with_mask(*masks.get(block.window, cached, encoding))
            x = block(x, layer_ctx)
        if last_only:
            x = x[:, -1:]  # (B, 1, d)
        return self.output(x)

    def layer_contexts(
        self, ctx: AttentionContext, positions: Tensor
    ) -> dict[int, tuple[AttentionContext, PositionEncoding]]:
        """For each pattern entry with its own position (``layer_positions``), the context
        with that encoding, prepared once per forward pass for all the layers of the entry."""
        contexts = {}
        for name, module in self.layer_positions.items():
            encoding = cast(PositionEncoding, module)
            contexts[int(name)] = (replace(ctx, encoding=encoding, rotation=encoding.prepare(positions)), encoding)
        return contexts

    def new_cache(self, capacity: int = 0) -> KVCache:
        """An empty KV cache for this model; ``capacity`` preallocates positions. A layer
        with a sliding window keeps only its window (``zoo.nn.cache.RollingLayerCache``), one
        whose attention sets ``cache_window`` (a chunk, a convolution's kernel) that many."""
        return KVCache(self.config.n_layers, capacity, [block.keeps for block in cast(Sequence[Block], self.blocks)])

    @torch.no_grad()
    def attention_maps(self, idx: Tensor) -> list[Tensor]:
        """Attention weights of every layer, each (B, H, S, S): the ``attn.hook_pattern`` points.

        Any attention that follows the contract gives them; the fused kernel computes
        them explicitly for this call only.
        """
        names = [f"blocks.{i}.attn.hook_pattern" for i in range(len(self.blocks))]
        mixers = [i for i, block in enumerate(self.blocks) if not getattr(block.attn, "attends", True)]
        if mixers:
            raise HookError(
                f"block(s) {', '.join(map(str, mixers))} mix tokens without attention scores (attends=False), "
                f"so they have no attention map; read the other blocks' blocks.{{i}}.attn.hook_pattern with "
                f"model.run_with_cache"
            )
        _, cache = self.run_with_cache(idx, names=names)
        return list(cache.values())

    @checked_types()
    def generate(self, input_ids: Tensor, max_new_tokens: int | None = None, **kwargs: Any) -> Tensor:
        """KV-cached decoding; see ``zoo.decoding.generate`` for the options.

        A convenience: the decode loop sits a layer above the model and registers itself
        in ``zoo.nn.generation`` (``import zoo`` does it); its weight layouts are kept between
        calls in ``zoo.decoding.layouts``.
        """
        from zoo.nn.generation import provided

        return provided(self)(self, input_ids, max_new_tokens, **kwargs)

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
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from zoo.errors import InputError, check_flag
from zoo.nn.attention import AttentionContext, make_mask
from zoo.nn.cache import KVCache
from zoo.nn.config import ModelConfig
from zoo.nn.contracts import Placement, PositionEncoding, wires_layer
from zoo.nn.hooks import HookFn, HookState, Names, hook_points, hooked, run_with_cache
from zoo.nn.inputs import (  # noqa: F401  INDEX_DTYPES and check_inputs: importable from here as before
    INDEX_DTYPES,
    as_padding,
    check_cache,
    check_inputs,
    check_positions,
    check_tensor,
    check_tokens,
    value_problems,
)
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

    def forward(self, x: Tensor, ctx: AttentionContext) -> Tensor:
        if self.wired:  # a parallel layout: attention and MLP side by side
            return type(self.attn_residual).block(x, self.attn_residual, self.attn, self.mlp_residual, self.mlp, ctx)
        x = self.attn_residual(x, self.attn, ctx)  # (B, S, d): attention sub-layer
        x = self.mlp_residual(x, self.mlp)  # (B, S, d): MLP sub-layer
        return x


class TokenModel(nn.Module):
    """What every zoo language model shares: the token embedding (scaled as configured)
    plus positions, the output head tied to it, and checks on the token ids."""

    head: nn.Linear  # set by each model, after its layers
    final_norm: nn.Module

    def __init__(self, config: ModelConfig, parts: PartMaker) -> None:
        super().__init__()
        self.config = config
        self.tok_emb = nn.Embedding(config.vocab_size, config.d_model)
        self.position: PositionEncoding = parts.make("position")
        self.drop = nn.Dropout(config.dropout.embedding)
        self.embed_scale = math.sqrt(config.d_model) if config.embedding_scale == "sqrt_d_model" else 1.0
        self.hook_state: HookState | None = None  # only while hooks are set (zoo.nn.hooks)

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
            if self.embed_scale != 1.0:
                x = x * self.embed_scale
            if self.hook_state is not None:  # hook_embed, hook_pos_embed
                out: Tensor = self.drop(self.hook_state.embed(self.position, x, positions, scope))
                return out
            out = self.drop(self.position.embed(x, positions))
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
        self, *args: Any, names: Names = None, detach: bool = True, **kwargs: Any
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """The output of ``self(*args, **kwargs)`` and the activations at ``names`` (all by
        default, or names, or a predicate), keyed by point name; ``detach=False`` keeps grad."""
        out, cache = run_with_cache(self, *args, names=names, detach=detach, **kwargs)
        return out, cache

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
        blocks = [Block(parts) for _ in range(config.n_layers)]
        self.blocks = nn.ModuleList(blocks)
        self.final_norm = parts.norm() if self.wants_final_norm(blocks[0].attn_residual) else nn.Identity()
        self.head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.tie_weights()
        # What generation uses when a call does not say (zoo.nn.generation.GENERATION_KEYS):
        # end-of-sequence and pad ids, sampling and length settings, by transformers' names.
        self.generation_config: dict[str, Any] = {}

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
        mask, is_causal = make_mask(
            q_len=seq,
            k_len=offset + seq,
            n_heads=self.config.n_heads,
            causal=True,
            key_padding=as_padding(attention_mask, idx, "attention_mask", cached=offset),
            encoding=self.position,
            dtype=x.dtype,
            device=x.device,
        )
        ctx = AttentionContext(mask, is_causal, self.position, self.position.prepare(positions))
        for i, block in enumerate(self.blocks):
            x = block(x, ctx.for_layer(cache[i] if cache is not None else None))
        if last_only:
            x = x[:, -1:]  # (B, 1, d)
        return self.output(x)

    def new_cache(self, capacity: int = 0) -> KVCache:
        """An empty KV cache for this model; ``capacity`` preallocates positions."""
        return KVCache(self.config.n_layers, capacity)

    @torch.no_grad()
    def attention_maps(self, idx: Tensor) -> list[Tensor]:
        """Attention weights of every layer, each (B, H, S, S): the ``attn.hook_pattern`` points.

        Any attention that follows the contract gives them; the fused kernel computes
        them explicitly for this call only.
        """
        names = [f"blocks.{i}.attn.hook_pattern" for i in range(len(self.blocks))]
        _, cache = self.run_with_cache(idx, names=names)
        return list(cache.values())

    def generate(self, input_ids: Tensor, max_new_tokens: int | None = None, **kwargs: Any) -> Tensor:
        """KV-cached decoding; see ``zoo.decoding.generate`` for the options.

        A convenience: the decode loop sits a layer above the model and registers itself
        in ``zoo.nn.generation`` (``import zoo`` does it); its weight layouts are kept between
        calls in ``zoo.decoding.layouts``.
        """
        from zoo.nn.generation import provided

        return provided(self)(self, input_ids, max_new_tokens, **kwargs)

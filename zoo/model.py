"""The assembled model: a decoder-only language model built from registered parts.

Reads like nanoGPT's GPT: token embedding (+ position), dropout, N blocks, an optional
final norm, and a head tied to the token embedding. Every part with a choice behind it
(attention, norm, placement, activation, position, MLP) comes from the registry.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from zoo.builder import Builder
from zoo.cache import KVCache
from zoo.config import ModelConfig
from zoo.contracts import AttentionContext, PositionEncoding
from zoo.errors import ConfigError, InputError
from zoo.registry import KINDS, Registry


class Block(nn.Module):
    """One layer: attention then MLP, each joined to the residual stream by the placement."""

    def __init__(self, builder: Builder) -> None:
        super().__init__()
        self.attn_residual = builder.placement()  # owns the norm(s) around attention
        self.attn = builder.attention()
        self.mlp_residual = builder.placement()  # owns the norm(s) around the MLP
        self.mlp = builder.mlp()

    def forward(self, x: Tensor, ctx: AttentionContext) -> Tensor:
        x = self.attn_residual(x, self.attn, ctx)
        x = self.mlp_residual(x, self.mlp)
        return x


def as_padding(mask: Tensor | None, tokens: Tensor, name: str, *, cached: int = 0) -> Tensor | None:
    """A (B, cached + S) mask of 1 (real) / 0 (padding) as booleans, checked against ``tokens``."""
    if mask is None:
        return None
    expected = (tokens.shape[0], cached + tokens.shape[1])
    if tuple(mask.shape) != expected:
        raise InputError(
            f"{name} must have shape {expected} (batch, {'cached + new' if cached else 'sequence'} "
            f"length) with 1 for real tokens and 0 for padding, got {tuple(mask.shape)}"
        )
    return mask.bool()


class TokenModel(nn.Module):
    """What every zoo language model shares: the token embedding (scaled as configured)
    plus positions, the output head tied to it, and checks on the token ids."""

    def __init__(self, config: ModelConfig, builder: Builder) -> None:
        super().__init__()
        self.config = config
        self.tok_emb = nn.Embedding(config.vocab_size, config.d_model)
        self.position: PositionEncoding = builder.position()
        self.drop = nn.Dropout(config.dropout.embedding)
        self.embed_scale = math.sqrt(config.d_model) if config.embedding_scale == "sqrt_d_model" else 1.0

    def wants_final_norm(self, placement: nn.Module) -> bool:
        """A norm after the last layer: as configured, else as the placement says."""
        if self.config.final_norm is not None:
            return self.config.final_norm
        return bool(getattr(placement, "final_norm", True))

    def tie_weights(self) -> None:
        """Share the token embedding with the head, when configured."""
        if self.config.tie_embeddings:
            self.head.weight = self.tok_emb.weight

    def embed(self, idx: Tensor, positions: Tensor) -> Tensor:
        """Token embeddings (B, S, d), scaled, with positions, after dropout."""
        x = self.tok_emb(idx)  # (B, S, d)
        if self.embed_scale != 1.0:
            x = x * self.embed_scale
        return self.drop(self.position.embed(x, positions))

    def output(self, x: Tensor) -> Tensor:
        """Logits (B, S, V) of the last hidden states, or log-probabilities if configured."""
        x = self.final_norm(x)
        logits = self.head(x)  # (B, S, V)
        if self.config.head_output == "log_softmax":
            return F.log_softmax(logits, dim=-1)
        return logits

    def check_tokens(self, idx: Tensor, length: int, name: str = "idx") -> None:
        """Refuse token ids of the wrong shape or dtype, too long, or outside the vocabulary."""
        if idx.dim() != 2 or idx.dtype not in (torch.long, torch.int32, torch.int64):
            raise InputError(
                f"{name} must be an integer tensor of token ids of shape (batch, seq), got "
                f"{idx.dtype} of shape {tuple(idx.shape)}; add a batch dimension with {name}[None]"
            )
        limit = self.position.max_positions
        if limit is not None and length > limit:
            raise ConfigError(
                f"{name}: {length} positions do not fit: position {self.config.position.name!r} "
                f"holds max_seq_len={limit}; shorten the input to at most {limit} tokens (prompt "
                f"plus new tokens), or use a position encoding without a limit"
            )
        if idx.numel() and not idx.is_meta:
            low, high = int(idx.min()), int(idx.max())
            if low < 0 or high >= self.config.vocab_size:
                raise InputError(
                    f"{name}: token id {low if low < 0 else high} is outside the vocabulary "
                    f"[0, {self.config.vocab_size}); check the tokenizer matches the model"
                )

    def num_parameters(self, *, trainable_only: bool = False) -> int:
        """Number of parameters, tied weights counted once."""
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
        builder = Builder(config, registry)
        super().__init__(config, builder)
        self.blocks = nn.ModuleList(Block(builder) for _ in range(config.n_layers))
        self.final_norm = builder.norm() if self.wants_final_norm(self.blocks[0].attn_residual) else nn.Identity()
        self.head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.tie_weights()

    def forward(
        self,
        idx: Tensor,
        *,
        attention_mask: Tensor | None = None,
        positions: Tensor | None = None,
        cache: KVCache | None = None,
        record_weights: list[Tensor] | None = None,
        last_only: bool = False,
    ) -> Tensor:
        """Logits (B, S, V) for token ids ``idx`` (B, S).

        ``attention_mask`` (B, cached + S), 1 for real tokens and 0 for padding;
        ``positions`` (B|1, S) overrides the default ``offset .. offset+S-1``;
        ``cache`` holds keys and values of earlier calls and is extended in place;
        ``last_only`` computes the head for the last position only, (B, 1, V), which is
        all decoding needs (the head is the largest matmul of a small model).
        """
        offset = cache.length if cache is not None else 0
        self.check_tokens(idx, offset + idx.shape[-1])
        batch, seq = idx.shape
        if positions is None:
            positions = torch.arange(offset, offset + seq, device=idx.device)[None]  # (1, S)
        elif positions.dim() != 2 or positions.shape[1] != seq or positions.shape[0] not in (1, batch):
            raise InputError(f"positions must have shape (1 or {batch}, {seq}), got {tuple(positions.shape)}")
        elif self.position.max_positions is not None and positions.numel() and not positions.is_meta:
            if int(positions.min()) < 0 or int(positions.max()) >= self.position.max_positions:
                raise InputError(
                    f"positions must lie in [0, {self.position.max_positions}) for position "
                    f"{self.config.position.name!r}, got {int(positions.min())}..{int(positions.max())}"
                )
        x = self.embed(idx, positions)  # (B, S, d)
        padding = as_padding(attention_mask, idx, "attention_mask", cached=offset)
        ctx = AttentionContext(positions, self.position, key_padding=padding, weights=record_weights)
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
        """Attention weights of every layer, each (B, H, S, S), for inspection.

        Needs an attention that can return its weights, such as ``eager``.
        """
        if not all(getattr(b.attn, "records_weights", False) for b in self.blocks):
            raise ConfigError(
                f"attention {self.config.attention.name!r} cannot return its weights; "
                f"build the model with attention='eager' to inspect them"
            )
        weights: list[Tensor] = []
        self(idx, record_weights=weights)
        return weights

    def generate(self, input_ids: Tensor, max_new_tokens: int, **kwargs: Any) -> Tensor:
        """KV-cached decoding; see ``zoo.decoding.generate`` for the options.

        A convenience: decoding sits a layer above the model, so it is imported here, on use.
        """
        from zoo.decoding import generate

        return generate(self, input_ids, max_new_tokens, **kwargs)

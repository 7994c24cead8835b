"""The 2017 Transformer as the paper built it: an encoder-decoder for sequence to sequence.

The encoder is a stack of ``Block``s (self-attention then MLP) with bidirectional
attention. Each decoder layer has three sub-layers: causal self-attention over the
target, cross-attention from the target to the encoder's output, and the MLP. Every
sub-layer is joined to the residual stream by the configured placement, and every part
comes from the registry, exactly as in ``DecoderLM``, so swapping a component swaps it
in the encoder and the decoder alike.

Source and target share one vocabulary and one embedding matrix (the paper's shared
BPE vocabulary), which the output layer reuses when ``tie_embeddings`` is set. The
position component is shared too: each side counts its positions from 0.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from zoo.errors import ConfigError, InputError
from zoo.nn.attention import AttentionContext, make_mask
from zoo.nn.cache import KVCache
from zoo.nn.config import ModelConfig
from zoo.nn.contracts import CrossAttention, Placement, require_cross, wires_layer
from zoo.nn.inputs import as_padding, check_tensor
from zoo.nn.model import Block, TokenModel
from zoo.nn.parts import PartMaker
from zoo.nn.registry import Registry


class DecoderBlock(nn.Module):
    """One decoder layer: causal self-attention, cross-attention to the encoder, MLP.

    Self-attention's and the MLP's placements are a pair, as in ``Block``; the three
    sub-layers run one after the other (a placement that overrides ``block`` combines them).
    """

    def __init__(self, parts: PartMaker) -> None:
        super().__init__()
        attn_residual, mlp_residual = parts.placements()
        self.attn_residual: Placement = attn_residual
        self.attn = parts.make("attention")
        self.cross_residual: Placement = parts.make("placement")
        self.cross_attn = parts.make("attention")  # queries from the target, keys/values from memory
        self.mlp_residual: Placement = mlp_residual
        self.mlp = parts.make("mlp")
        self.wired = wires_layer(type(attn_residual))

    def forward(self, x: Tensor, self_ctx: AttentionContext, cross_ctx: AttentionContext) -> Tensor:
        if self.wired:
            cross = CrossAttention(self.cross_residual, self.cross_attn, cross_ctx)
            return type(self.attn_residual).block(
                x, self.attn_residual, self.attn, self.mlp_residual, self.mlp, self_ctx, cross=cross
            )
        x = self.attn_residual(x, self.attn, self_ctx)  # causal self-attention
        x = self.cross_residual(x, self.cross_attn, cross_ctx)  # attention to the encoder's output
        x = self.mlp_residual(x, self.mlp)
        return x


class EncoderDecoder(TokenModel):
    """``model(src, tgt) -> logits`` (B, T, vocab_size) for target ids given source ids.

    With ``head_output = "log_softmax"`` (the 2017 design) it returns log-probabilities.
    Masks are (B, S) for the source and (B, cached + T) for the target, 1 for real
    tokens and 0 for padding; the target side is causal on top of its mask.
    """

    def __init__(self, config: ModelConfig, registry: Registry | None = None) -> None:
        if config.architecture != "encoder_decoder" or config.n_encoder_layers is None:
            raise ConfigError(
                f"EncoderDecoder needs architecture='encoder_decoder', got {config.architecture!r}; "
                f"build decoder-only configs with zoo.build (DecoderLM)"
            )
        parts = PartMaker(config, registry)
        super().__init__(config, parts)  # one embedding for source, target and head
        self.encoder = nn.ModuleList(Block(parts) for _ in range(config.n_encoder_layers))
        decoder = [DecoderBlock(parts) for _ in range(config.n_layers)]
        try:  # the config refuses such a placement class; this catches one a factory function makes
            require_cross(type(decoder[0].attn_residual), config.placement.name)
        except ValueError as err:
            raise ConfigError(str(err)) from None
        self.decoder = nn.ModuleList(decoder)
        wants_final_norm = self.wants_final_norm(decoder[0].attn_residual)
        self.encoder_norm = parts.norm() if wants_final_norm else nn.Identity()
        self.final_norm = parts.norm() if wants_final_norm else nn.Identity()
        self.head = nn.Linear(config.d_model, config.vocab_size, bias=config.head_bias)
        self.tie_weights()

    def forward(
        self,
        src: Tensor,
        tgt: Tensor,
        *,
        src_mask: Tensor | None = None,
        tgt_mask: Tensor | None = None,
    ) -> Tensor:
        """Logits (B, T, V) for target ids ``tgt`` (B, T) given source ids ``src`` (B, S)."""
        memory = self.encode(src, src_mask=src_mask)
        return self.decode(tgt, memory, src_mask=src_mask, tgt_mask=tgt_mask)

    def encode(self, src: Tensor, *, src_mask: Tensor | None = None) -> Tensor:
        """The encoder's output (B, S, d): every source token sees every other one."""
        check_tensor(src, "src", "of token ids of shape (batch, seq)")
        self.check_tokens(src, src.shape[-1] if src.dim() else 0, "src")
        seq = src.shape[1]
        positions = torch.arange(seq, device=src.device)[None]  # (1, S)
        x = self.embed(src, positions, "encoder.")
        mask, _ = make_mask(
            q_len=seq,
            k_len=seq,
            n_heads=self.config.n_heads,
            causal=False,
            key_padding=as_padding(src_mask, src, "src_mask"),
            encoding=self.position,
            dtype=x.dtype,
            device=x.device,
        )
        ctx = AttentionContext(mask, False, self.position, self.position.prepare(positions))
        for block in self.encoder:
            x = block(x, ctx)
        out: Tensor = self.encoder_norm(x)
        return out

    def decode(
        self,
        tgt: Tensor,
        memory: Tensor,
        *,
        src_mask: Tensor | None = None,
        tgt_mask: Tensor | None = None,
        cache: KVCache | None = None,
    ) -> Tensor:
        """Logits (B, T, V) for ``tgt`` (B, T) attending to ``memory`` (B, S, d).

        With a ``cache`` from ``new_cache()``, ``tgt`` holds only the new target tokens:
        self-attention keys and values accumulate, and the memory's keys and values
        are computed on the first call and reused after.
        """
        check_tensor(tgt, "tgt", "of token ids of shape (batch, seq)")
        cache = self.check_cache(cache, 2 * self.config.n_layers, tgt.shape[0] if tgt.dim() else 0)
        offset = cache.length if cache is not None else 0
        self.check_tokens(tgt, offset + (tgt.shape[-1] if tgt.dim() else 0), "tgt")
        batch, seq = tgt.shape
        check_tensor(memory, "memory", "(the encoder output, model.encode(src))")
        if memory.dim() != 3 or memory.shape[0] != batch or memory.shape[2] != self.config.d_model:
            raise InputError(
                f"memory must be the encoder output of shape (batch={batch}, src_len, "
                f"d_model={self.config.d_model}), got {tuple(memory.shape)}; pass model.encode(src)"
            )
        positions = torch.arange(offset, offset + seq, device=tgt.device)[None]  # (1, T)
        x = self.embed(tgt, positions, "decoder.")
        self_mask, is_causal = make_mask(
            q_len=seq,
            k_len=offset + seq,
            n_heads=self.config.n_heads,
            causal=True,
            key_padding=as_padding(tgt_mask, tgt, "tgt_mask", cached=offset),
            encoding=self.position,
            dtype=x.dtype,
            device=x.device,
        )
        cross_mask, _ = make_mask(
            q_len=seq,
            k_len=memory.shape[1],
            n_heads=self.config.n_heads,
            causal=False,
            key_padding=as_padding(src_mask, memory, "src_mask"),
            encoding=None,
            dtype=x.dtype,
            device=x.device,
        )
        self_ctx = AttentionContext(self_mask, is_causal, self.position, self.position.prepare(positions))
        cross_ctx = AttentionContext(cross_mask, False, memory=memory)
        for i, block in enumerate(self.decoder):
            x = block(
                x,
                self_ctx.for_layer(cache[2 * i] if cache is not None else None),
                cross_ctx.for_layer(cache[2 * i + 1] if cache is not None else None),
            )
        return self.output(x)  # (B, T, V)

    def new_cache(self, capacity: int = 0) -> KVCache:
        """An empty cache for ``decode``: self- and cross-attention of each decoder layer.

        ``capacity`` preallocates target positions; the cross-attention caches hold the
        source's keys and values, sized when they are first filled.
        """
        cache = KVCache(2 * self.config.n_layers, capacity)
        for cross in cache.layers[1::2]:
            cross.capacity_hint = 0
        return cache

    def extra_repr(self) -> str:
        return f"encoder_layers={self.config.n_encoder_layers}, decoder_{super().extra_repr()}"

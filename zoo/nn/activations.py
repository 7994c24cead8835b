"""The activation cache ``run_with_cache`` returns, with TransformerLens's helpers.

``ActivationCache`` is a ``dict`` of point name to tensor (code that reads it as a dict
keeps working) that also knows its model, so it can take the residual stream apart as
TransformerLens's ``ActivationCache`` does, with the same names, arguments, labels and
numbers on the same weights (``tests/test_lens.py`` compares them on GPT-2):

- ``accumulated_resid``: the stream entering each block (and between its sub-layers with
  ``incl_mid``), then the final stream: labels ``0_pre``, ``0_mid``, ..., ``final_post``;
- ``decompose_resid``: the pieces that sum to the stream: ``embed``, ``pos_embed``, then
  each block's ``{i}_attn_out`` and ``{i}_mlp_out``;
- ``stack_head_results``: each head's share of its layer's attention output, ``z`` of the
  head times its slice of the output projection (the projection's bias is no head's),
  labels ``L{i}H{h}``;
- ``apply_ln_to_stack``: what a norm does to each piece, with the scale of the whole
  stream it reads (centred for LayerNorm, then divided by the stream's scale; the norm's
  weight and bias are not applied, as TransformerLens with ``fold_ln`` leaves them to
  the next layer): the final norm, or with ``layer`` a pre-norm block's (``norm_at``);
- ``logit_attrs``: each piece's contribution to a token's logit (or the difference
  between two tokens'): the normed piece dotted with the head's row for the token times
  the final norm's weight (TransformerLens's ``W_U`` with the norm folded in).

``pos_slice`` takes an int (one position, the dimension dropped), a slice or None (all),
as TransformerLens's ``Slice`` does. Decoder-only models.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from zoo.errors import HookError
from zoo.nn.marks import is_residual_output

__all__ = ["ActivationCache", "TL_NAMES", "to_transformer_lens"]

#: zoo point (the part after ``blocks.{i}.``) -> TransformerLens's name, where they differ.
TL_NAMES = {"attn.hook_scores": "attn.hook_attn_scores", "hook_final_norm": "ln_final.hook_out"}
#: Points whose layout differs: the zoo's (B, H, S, dk) as the attention kernel reads them,
#: TransformerLens's (B, S, H, dk).
HEADS_FIRST = ("attn.hook_q", "attn.hook_k", "attn.hook_v")

PosSlice = int | slice | None


def to_transformer_lens(name: str, value: Tensor) -> tuple[str, Tensor]:
    """A zoo point and its activation under TransformerLens's name and in its layout:
    ``blocks.3.attn.hook_q`` (B, H, S, dk) is ``blocks.3.attn.hook_q`` (B, S, H, dk);
    ``attn.hook_scores`` is ``attn.hook_attn_scores``; the rest keep name and shape."""
    local = name.split(".", 2)[-1] if name.startswith("blocks.") else name
    prefix = name[: len(name) - len(local)]
    return prefix + TL_NAMES.get(local, local), value.transpose(1, 2) if local in HEADS_FIRST else value


def _positions(x: Tensor, pos_slice: PosSlice) -> Tensor:
    """``x`` (..., S, d) at ``pos_slice`` along its position dimension."""
    if pos_slice is None:
        return x
    if isinstance(pos_slice, bool) or not isinstance(pos_slice, (int, slice)):
        raise HookError(f"pos_slice is an int, a slice or None (all positions), got {type(pos_slice).__name__}")
    return x[..., pos_slice, :]


class ActivationCache(dict[str, Tensor]):
    """Point name -> activation, as ``run_with_cache`` keeps them, and the model they came from."""

    def __init__(self, cache: dict[str, Tensor], model: nn.Module) -> None:
        super().__init__(cache)
        self.model: Any = getattr(model, "_orig_mod", model)
        blocks = getattr(self.model, "blocks", None)  # an encoder-decoder has none: its helpers refuse
        self.n_layers = len(blocks) if isinstance(blocks, nn.ModuleList) else 0

    def _point(self, name: str) -> Tensor:
        if not self.n_layers:
            raise HookError(
                f"the cache's helpers take a decoder-only model's stream apart; {type(self.model).__name__} is not one"
            )
        if name not in self:
            raise HookError(
                f"this cache has no {name!r}, which the helper needs; run run_with_cache with names=None "
                f"(every point) or with {name!r} among them"
            )
        return self[name]

    def _layer(self, layer: int | None) -> int:
        """``layer`` as a count of blocks: None (or -1) is all of them."""
        if layer is None or layer == -1:
            return self.n_layers
        if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer <= self.n_layers:
            raise HookError(f"layer is 0 .. {self.n_layers} (or None, -1: all {self.n_layers} blocks), got {layer!r}")
        return layer

    def _stack(
        self,
        parts: list[Tensor],
        labels: list[str],
        apply_ln: bool,
        pos_slice: PosSlice,
        return_labels: bool,
        layer: int,
        recompute_ln: bool = False,
    ) -> Any:
        stack = torch.stack([_positions(p, pos_slice) for p in parts])
        if apply_ln:
            stack = self.apply_ln_to_stack(stack, layer, pos_slice=pos_slice, recompute_ln=recompute_ln)
        return (stack, labels) if return_labels else stack

    def accumulated_resid(
        self,
        layer: int | None = None,
        incl_mid: bool = False,
        apply_ln: bool = False,
        pos_slice: PosSlice = None,
        return_labels: bool = False,
    ) -> Any:
        """The stream entering blocks ``0 .. layer - 1`` (and between their sub-layers with
        ``incl_mid``), then, for all blocks, the final stream: (N, B, S, d). With ``apply_ln``
        and all blocks (the logit lens), each stream is normed with its own statistics."""
        count = self._layer(layer)
        parts, labels = [], []
        for i in range(count):
            parts.append(self._point(f"blocks.{i}.hook_resid_pre"))
            labels.append(f"{i}_pre")
            if incl_mid:
                parts.append(self._point(f"blocks.{i}.hook_resid_mid"))
                labels.append(f"{i}_mid")
        if count == self.n_layers:
            parts.append(self._point(f"blocks.{count - 1}.hook_resid_post"))
            labels.append("final_post")
        else:
            parts.append(self._point(f"blocks.{count}.hook_resid_pre"))
            labels.append(f"{count}_pre")
        return self._stack(
            parts, labels, apply_ln, pos_slice, return_labels, count, recompute_ln=count == self.n_layers
        )

    def decompose_resid(
        self,
        layer: int | None = None,
        mode: str = "all",
        apply_ln: bool = False,
        pos_slice: PosSlice = None,
        incl_embeds: bool = True,
        return_labels: bool = False,
    ) -> Any:
        """The pieces that sum to the stream entering block ``layer`` (None: the final
        stream): the embeddings, then each block's attention and MLP outputs; ``mode``
        ``"attn"`` or ``"mlp"`` keeps one kind."""
        if mode not in ("all", "attn", "mlp"):
            raise HookError(f"mode is 'all', 'attn' or 'mlp', got {mode!r}")
        parts: list[Tensor] = []
        labels: list[str] = []
        if incl_embeds:
            parts += [self._point("hook_embed"), self._point("hook_pos_embed")]
            labels += ["embed", "pos_embed"]
        count = self._layer(layer)
        for i in range(count):
            for kind in ("attn", "mlp"):
                if mode in ("all", kind):
                    parts.append(self._point(f"blocks.{i}.hook_{kind}_out"))
                    labels.append(f"{i}_{kind}_out")
        return self._stack(parts, labels, apply_ln, pos_slice, return_labels, count)

    def head_results(self, layer: int) -> Tensor:
        """Each head's output in the stream, (B, S, H, d): its ``z`` through its slice of the
        attention's output projection (the layer marked ``residual_output``), without its bias."""
        z = self._point(f"blocks.{layer}.attn.hook_z")  # (B, S, H, dk)
        marked = [m for m in self.model.blocks[layer].attn.modules() if is_residual_output(m)]
        if len(marked) != 1 or not isinstance(marked[0], nn.Linear):
            raise HookError(f"block {layer}'s attention has no one linear output projection to split by head")
        weight = marked[0].weight.reshape(marked[0].out_features, z.shape[-2], z.shape[-1])  # (d, H, dk)
        return torch.einsum("bshk,dhk->bshd", z, weight.to(z.dtype))

    def stack_head_results(
        self,
        layer: int = -1,
        return_labels: bool = False,
        pos_slice: PosSlice = None,
        apply_ln: bool = False,
    ) -> Any:
        """Every head's output of blocks ``0 .. layer - 1`` (-1: all), stacked: (L * H, B, S, d),
        labels ``L{i}H{h}``."""
        parts, labels = [], []
        count = self._layer(layer)
        for i in range(count):
            heads = self.head_results(i)
            parts += list(heads.unbind(-2))
            labels += [f"L{i}H{h}" for h in range(heads.shape[-2])]
        return self._stack(parts, labels, apply_ln, pos_slice, return_labels, count)

    def norm_at(self, layer: int | None = None, mlp_input: bool = False) -> tuple[nn.Module, str]:
        """The norm that reads the stream entering block ``layer`` (its attention's, or with
        ``mlp_input`` its MLP's; None: the final norm), and the point of that stream."""
        count = self._layer(layer)
        if count == self.n_layers:
            if mlp_input:
                raise HookError("mlp_input is for a block's MLP norm; the final norm (layer None) has none")
            return self.model.final_norm, f"blocks.{self.n_layers - 1}.hook_resid_post"
        placement = getattr(self.model.blocks[count], "mlp_residual" if mlp_input else "attn_residual")
        norm = getattr(placement, "norm", None)
        if not (getattr(placement, "final_norm", False) and isinstance(norm, nn.Module)):
            raise HookError(
                f"block {count}'s {type(placement).__name__} does not norm the stream before its sub-layer "
                f"(pre-norm does); apply the final norm instead (layer None)"
            )
        return norm, f"blocks.{count}.hook_resid_{'mid' if mlp_input else 'pre'}"

    def apply_ln_to_stack(
        self,
        residual_stack: Tensor,
        layer: int | None = None,
        mlp_input: bool = False,
        pos_slice: PosSlice = None,
        recompute_ln: bool = False,
    ) -> Tensor:
        """The scaling of the norm that reads block ``layer``'s input (``norm_at``; None: the
        final norm) applied to each piece of ``residual_stack`` (N, B, [S,] d): centred
        (LayerNorm) and divided by the whole stream's scale there, so the pieces still sum
        to the normed stream (before the norm's weight and bias); with ``recompute_ln``
        each piece is normed with its own statistics instead."""
        norm, point = self.norm_at(layer, mlp_input)
        stream = residual_stack if recompute_ln else _positions(self._point(point), pos_slice)
        if isinstance(norm, nn.Identity):
            return residual_stack
        if isinstance(norm, nn.LayerNorm):
            centred = stream - stream.mean(-1, keepdim=True)
            scale = (centred.pow(2).mean(-1, keepdim=True) + norm.eps).sqrt()
            return (residual_stack - residual_stack.mean(-1, keepdim=True)) / scale
        if isinstance(norm, nn.RMSNorm):
            eps = norm.eps if norm.eps is not None else torch.finfo(stream.dtype).eps
            return residual_stack / (stream.pow(2).mean(-1, keepdim=True) + eps).sqrt()
        raise HookError(
            f"apply_ln_to_stack knows LayerNorm and RMSNorm; this model's final norm is {type(norm).__name__}"
        )

    def directions(self, tokens: int | Tensor) -> Tensor:
        """The residual-stream direction of each token's logit, after the final norm's
        scaling: the head's row times the norm's weight; (d,), or (*tokens.shape, d)."""
        weight: Tensor = self.model.head.weight  # (V, d)
        rows = weight[tokens]
        gain = getattr(self.model.final_norm, "weight", None)
        return rows * gain if isinstance(gain, Tensor) else rows

    def logit_attrs(
        self,
        residual_stack: Tensor,
        tokens: int | Tensor,
        incorrect_tokens: int | Tensor | None = None,
        pos_slice: PosSlice = None,
    ) -> Tensor:
        """Each piece's share of the logit of ``tokens`` (less that of ``incorrect_tokens``):
        the piece through ``apply_ln_to_stack``, dotted with the token's direction. ``tokens``
        an int, one per row (B,), or one per row and position (B, S)."""
        directions = self.directions(tokens)
        if incorrect_tokens is not None:
            directions = directions - self.directions(incorrect_tokens)
        scaled = self.apply_ln_to_stack(residual_stack, pos_slice=pos_slice)
        if directions.dim() == 2 and scaled.dim() == 4 and directions.shape[0] == scaled.shape[1]:
            directions = directions[:, None]  # one token per row, over every position
        return (scaled * directions).sum(-1)

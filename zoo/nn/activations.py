"""The activation cache ``run_with_cache`` returns, with TransformerLens's helpers.

``ActivationCache`` is a ``dict`` of point name to tensor (code that reads it as a dict
keeps working) that also knows its model, so it can take the residual stream apart as
TransformerLens's ``ActivationCache`` does, with the same names, arguments, labels and
numbers on the same weights (``tests/test_lens.py`` compares them on GPT-2 and Llama):

- ``accumulated_resid``: the stream entering each block (and between its sub-layers with
  ``incl_mid``), then the final stream: labels ``0_pre``, ``0_mid``, ..., ``final_post``;
- ``decompose_resid``: the pieces that sum to the stream: ``embed``, ``pos_embed`` (only
  where the model adds a position table: none for rotary, as TransformerLens has it),
  then each block's ``{i}_attn_out`` and ``{i}_mlp_out``;
- ``get_full_resid_decomposition``, ``stack_neuron_results``, ``compute_head_results``,
  ``remove_batch_dim``, ``apply_slice_to_batch_dim``: TransformerLens's, by head and by
  neuron (``L{i}H{h}``, ``L{i}N{n}``, ``bias``, ``remainder``);
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


def _neurons(neuron_slice: Any, width: int) -> Any:
    """What indexes the neurons: all (None), one kept as a list (an int), a slice, or indices."""
    if neuron_slice is None:
        return slice(None)
    if isinstance(neuron_slice, bool) or not isinstance(neuron_slice, (int, slice, list, tuple, Tensor)):
        raise HookError(f"neuron_slice is an int, a slice, indices or None (all), got {type(neuron_slice).__name__}")
    return [neuron_slice] if isinstance(neuron_slice, int) else neuron_slice


class ActivationCache(dict[str, Tensor]):
    """Point name -> activation, as ``run_with_cache`` keeps them, and the model they came from."""

    def __init__(self, cache: dict[str, Tensor], model: nn.Module) -> None:
        super().__init__(cache)
        self.model: Any = getattr(model, "_orig_mod", model)
        blocks = getattr(self.model, "blocks", None)  # an encoder-decoder has none: its helpers refuse
        self.n_layers = len(blocks) if isinstance(blocks, nn.ModuleList) else 0
        self.has_batch_dim = True  # remove_batch_dim takes it off a batch of one

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
        mlp_input: bool = False,
    ) -> Any:
        stack = torch.stack([_positions(p, pos_slice) for p in parts])
        if apply_ln:
            stack = self.apply_ln_to_stack(
                stack, layer, mlp_input=mlp_input, pos_slice=pos_slice, recompute_ln=recompute_ln
            )
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
        mlp_input: bool = False,
    ) -> Any:
        """The pieces that sum to the stream entering block ``layer`` (None: the final
        stream; with ``mlp_input`` the stream entering its MLP): the embeddings (the
        position embedding only where the model adds one: not with rotary, ALiBi or none,
        as TransformerLens has it), then each block's attention and MLP outputs; ``mode``
        ``"attn"`` or ``"mlp"`` keeps one kind."""
        if mode not in ("all", "attn", "mlp"):
            raise HookError(f"mode is 'all', 'attn' or 'mlp', got {mode!r}")
        parts, labels = self._embeds(pos_slice=None) if incl_embeds else ([], [])
        count = self._layer(layer)
        for i in range(count + (1 if mlp_input else 0)):
            for kind in ("attn", "mlp"):
                if mode in ("all", kind) and (i < count or kind == "attn"):
                    parts.append(self._point(f"blocks.{i}.hook_{kind}_out"))
                    labels.append(f"{i}_{kind}_out")
        return self._stack(parts, labels, apply_ln, pos_slice, return_labels, count, mlp_input=mlp_input)

    def has_pos_embed(self) -> bool:
        """Whether the model adds a position embedding to its token embeddings (a learned or
        sinusoidal table); rotary, ALiBi and none add nothing, and have no ``pos_embed`` piece."""
        embed = getattr(type(getattr(self.model, "position", None)), "embed", None)
        return embed is not None and not getattr(embed, "__qualname__", "").startswith("PositionEncoding.")

    def _embeds(self, pos_slice: PosSlice) -> tuple[list[Tensor], list[str]]:
        parts, labels = [_positions(self._point("hook_embed"), pos_slice)], ["embed"]
        if self.has_pos_embed():
            parts.append(_positions(self._point("hook_pos_embed"), pos_slice))
            labels.append("pos_embed")
        return parts, labels

    def head_results(self, layer: int) -> Tensor:
        """Each head's output in the stream, (B, S, H, d): its ``z`` through its slice of the
        attention's output projection (the layer marked ``residual_output``), without its bias."""
        z = self._point(f"blocks.{layer}.attn.hook_z")  # (B, S, H, dk)
        marked = [m for m in self.model.blocks[layer].attn.modules() if is_residual_output(m)]
        if len(marked) != 1 or not isinstance(marked[0], nn.Linear):
            raise HookError(f"block {layer}'s attention has no one linear output projection to split by head")
        weight = marked[0].weight.reshape(marked[0].out_features, z.shape[-2], z.shape[-1])  # (d, H, dk)
        return torch.einsum("...hk,dhk->...hd", z, weight.to(z.dtype))

    def compute_head_results(self) -> None:
        """Each block's head results (``head_results``) kept in the cache as
        ``blocks.{i}.attn.hook_result`` (B, S, H, d), TransformerLens's name and layout."""
        for i in range(self.n_layers):
            self[f"blocks.{i}.attn.hook_result"] = self.head_results(i)

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

    def _projection(self, layer: int, kind: str) -> nn.Linear:
        """Block ``layer``'s one linear output projection of its ``attn`` or ``mlp``."""
        marked = [m for m in getattr(self.model.blocks[layer], kind).modules() if is_residual_output(m)]
        if len(marked) != 1 or not isinstance(marked[0], nn.Linear):
            raise HookError(f"block {layer}'s {kind} has no one linear output projection to split")
        return marked[0]

    def neuron_results(self, layer: int, neuron_slice: Any = None, pos_slice: PosSlice = None) -> Tensor:
        """Each MLP neuron's output in the stream, (B, S, N, d): its activation (``mlp.hook_post``,
        what the output projection reads) times its row of that projection, without its bias."""
        post = _positions(self._point(f"blocks.{layer}.mlp.hook_post"), pos_slice)
        rows = self._projection(layer, "mlp").weight.t()  # (d_ff, d)
        chosen = _neurons(neuron_slice, rows.shape[0])
        return post[..., chosen, None] * rows[chosen].to(post.dtype)

    def stack_neuron_results(
        self,
        layer: int,
        pos_slice: PosSlice = None,
        neuron_slice: Any = None,
        return_labels: bool = False,
        incl_remainder: bool = False,
        apply_ln: bool = False,
        mlp_input: bool = False,
    ) -> Any:
        """Every MLP neuron's output of blocks ``0 .. layer - 1`` (-1: all), stacked:
        (L * N, B, S, d), labels ``L{i}N{n}``; ``incl_remainder`` adds what the rest of the
        stream entering ``layer`` (its MLP's input with ``mlp_input``) is, ``remainder``."""
        count = self._layer(layer)
        width = self._projection(0, "mlp").in_features
        ids = torch.arange(width)[_neurons(neuron_slice, width)].tolist()
        labels = [f"L{i}N{n}" for i in range(count) for n in ids]
        shape = _positions(self._point("hook_embed"), pos_slice).shape
        stack = (
            torch.cat([self.neuron_results(i, neuron_slice, pos_slice) for i in range(count)], dim=-2).movedim(-2, 0)
            if count
            else self._point("hook_embed").new_zeros((0, *shape))
        )
        if incl_remainder:
            target = self.norm_at(count, mlp_input)[1] if count < self.n_layers else "blocks.{}.hook_resid_post"
            target = target.format(self.n_layers - 1)
            stack = torch.cat([stack, (_positions(self._point(target), pos_slice) - stack.sum(0))[None]])
            labels.append("remainder")
        if apply_ln:
            stack = self.apply_ln_to_stack(stack, count, mlp_input=mlp_input, pos_slice=pos_slice)
        return (stack, labels) if return_labels else stack

    def accumulated_bias(self, layer: int, mlp_input: bool = False, include_mlp_biases: bool = True) -> Tensor:
        """The output projections' biases that reach the stream entering block ``layer``
        (its MLP's input with ``mlp_input``): attention's, and the MLPs' with
        ``include_mlp_biases``; (d,), zeros where the projections have none."""
        total = self._point("hook_embed").new_zeros(self.model.config.d_model)
        for i in range(layer + (1 if mlp_input else 0)):
            kinds = ("attn", "mlp") if include_mlp_biases and i < layer else ("attn",)
            for kind in kinds:
                bias = self._projection(i, kind).bias
                total = total + bias.to(total.dtype) if bias is not None else total
        return total

    def get_full_resid_decomposition(
        self,
        layer: int | None = None,
        mlp_input: bool = False,
        expand_neurons: bool = True,
        apply_ln: bool = False,
        pos_slice: PosSlice = None,
        return_labels: bool = False,
    ) -> Any:
        """Every head's output, every neuron's (or with ``expand_neurons=False`` each MLP's
        output), the embeddings and the biases, which sum to the stream entering block
        ``layer`` (None: the final stream; its MLP's input with ``mlp_input``), in
        TransformerLens's order and labels: ``L{i}H{h}``, ``L{i}N{n}`` (``{i}_mlp_out``),
        ``embed``, ``pos_embed``, ``bias``."""
        count = self._layer(layer)
        heads, labels = self.stack_head_results(count + (1 if mlp_input else 0), True, pos_slice)
        parts = [heads]
        if count and expand_neurons:
            neurons, named = self.stack_neuron_results(count, pos_slice, return_labels=True)
        elif count:
            neurons, named = self.decompose_resid(
                count, "mlp", pos_slice=pos_slice, incl_embeds=False, return_labels=True
            )
        if count:
            parts.append(neurons)
            labels = labels + named
        embeds, embed_labels = self._embeds(pos_slice)
        bias = self.accumulated_bias(count, mlp_input, include_mlp_biases=expand_neurons)
        parts += [torch.stack(embeds), bias.expand((1, *heads.shape[1:]))]
        stack = torch.cat(parts)
        if apply_ln:
            stack = self.apply_ln_to_stack(stack, count, mlp_input=mlp_input, pos_slice=pos_slice)
        return (stack, [*labels, *embed_labels, "bias"]) if return_labels else stack

    def remove_batch_dim(self) -> ActivationCache:
        """The cache of a batch of one without its batch dimension, in place (TransformerLens's)."""
        if not self.has_batch_dim:
            return self
        sizes = {value.shape[0] for value in self.values() if value.dim()}
        if sizes - {1}:
            raise HookError(f"remove_batch_dim is for a batch of one; this cache has {max(sizes)} rows")
        for name, value in self.items():
            if value.dim():
                self[name] = value[0]
        self.has_batch_dim = False
        return self

    def apply_slice_to_batch_dim(self, batch_slice: int | slice | list[int] | Tensor) -> ActivationCache:
        """A cache of the rows ``batch_slice`` picks (an int drops the batch dimension), as
        TransformerLens's; entries without that many rows are kept as they are."""
        if not self.has_batch_dim:
            raise HookError("this cache has no batch dimension (remove_batch_dim took it) to slice")
        rows = self["hook_embed"].shape[0] if "hook_embed" in self else max(v.shape[0] for v in self.values())
        picked = {
            name: value[batch_slice] if value.dim() and value.shape[0] == rows else value
            for name, value in self.items()
        }
        sliced = ActivationCache(picked, self.model)
        sliced.has_batch_dim = not isinstance(batch_slice, int)
        return sliced

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

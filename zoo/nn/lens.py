"""TransformerLens's model surface on a zoo model: the names its users reach for.

``LensModel`` (a base of every zoo language model) gives, with TransformerLens's names,
shapes and meaning (``tests/test_lens.py`` compares them with its ``TransformerBridge``
on the same weights):

- ``to_tokens(text)`` (B, S) and ``to_str_tokens(text or ids)``: the model's tokenizer,
  a BOS put first unless ``prepend_bos=False``, rows padded (right by default);
- the weights by head: ``W_E`` (V, d), ``W_pos`` (n_ctx, d; a learned table only, as
  TransformerLens refuses it for rotary models; here a ``HookError``), ``W_Q`` (L, H, d, dk), ``W_K``/``W_V``
  (L, H_kv, d, dk: grouped heads as stored), ``W_O`` (L, H, dk, d), ``W_U`` (d, V);
  views of the parameters, so they follow an edit of the model;
- ``add_hook(name or predicate, fn)`` and ``reset_hooks()``: hooks that stay set until
  reset (``is_permanent`` ones survive a plain reset), ``fn(activation, name)`` as in
  ``run_with_hooks``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, cast

import torch
from torch import Tensor, nn

from zoo.errors import HookError, check_flag
from zoo.nn.config import ModelConfig
from zoo.nn.contracts import PositionEncoding
from zoo.nn.hooks import HookFn, hooked, residual_projection, select

__all__ = ["LensModel"]


class LensModel(nn.Module):
    """TransformerLens's tokens, weights and persistent hooks (see the module)."""

    config: ModelConfig
    tok_emb: nn.Embedding
    head: nn.Linear
    position: PositionEncoding

    # -- tokens --------------------------------------------------------------------------

    def _lens_tokenizer(self, tokenizer: Any) -> Any:
        found = tokenizer if tokenizer is not None else getattr(self, "tokenizer", None)
        if not callable(getattr(found, "encode", None)):
            raise HookError("the model has no tokenizer to turn text into tokens: pass tokenizer= (zoo.tokenizer(...))")
        return found

    def to_tokens(
        self,
        input: str | Sequence[str],
        prepend_bos: bool = True,
        padding_side: str = "right",
        move_to_device: bool = True,
        truncate: bool = True,
        tokenizer: Any = None,
    ) -> Tensor:
        """Token ids (B, S) of a text or texts: the tokenizer's, with its start token first
        (``prepend_bos``) or without it, rows padded on ``padding_side`` with its
        end-of-text, cut to ``max_seq_len`` (``truncate``)."""
        for flag, name in ((prepend_bos, "prepend_bos"), (move_to_device, "move_to_device"), (truncate, "truncate")):
            check_flag(flag, name)
        tok = self._lens_tokenizer(tokenizer)
        texts = [input] if isinstance(input, str) else list(input)
        if not texts or not all(isinstance(text, str) for text in texts) or padding_side not in ("left", "right"):
            raise HookError("to_tokens takes a text or a list of texts, and padding_side 'left' or 'right'")
        added = tok.encode("")  # what the tokenizer puts before every text itself (a BOS), if anything
        start = tok.bos_token_id if tok.bos_token_id is not None else tok.eot_token_id
        rows = []
        for text in texts:
            ids = tok.encode(text)
            if added and ids[: len(added)] == added:
                ids = ids[len(added) :]
            first = added if added else ([start] if start is not None else [])
            rows.append((first if prepend_bos else []) + ids)
        if truncate:
            rows = [row[: self.config.max_seq_len] for row in rows]
        width = max(map(len, rows))
        pad = tok.eot_token_id if tok.eot_token_id is not None else 0
        padded = [row + [pad] * (width - len(row)) if padding_side == "right" else [pad] * (width - len(row)) + row
                  for row in rows]  # fmt: skip
        tokens = torch.tensor(padded, dtype=torch.long)
        return tokens.to(self.tok_emb.weight.device) if move_to_device else tokens

    def to_str_tokens(
        self, input: str | Tensor | list[Any], prepend_bos: bool = True, tokenizer: Any = None
    ) -> list[str] | list[list[str]]:
        """Each token's text: of a text (tokenized as ``to_tokens``), of ids (S,) or (1, S),
        or of each item of a list."""
        check_flag(prepend_bos, "prepend_bos")
        if isinstance(input, list):
            return [cast(list[str], self.to_str_tokens(item, prepend_bos, tokenizer)) for item in input]
        tok = self._lens_tokenizer(tokenizer)
        if isinstance(input, str):
            ids = self.to_tokens(input, prepend_bos=prepend_bos, tokenizer=tok)[0]
        elif isinstance(input, Tensor) and input.squeeze().dim() <= 1:
            ids = input.squeeze().reshape(-1)
        else:
            raise HookError("to_str_tokens takes a text, token ids of one row, or a list of them")
        return [tok.decode([int(i)]) for i in ids.tolist()]

    # -- weights ---------------------------------------------------------------------------

    def _attentions(self) -> list[Any]:
        attentions: list[Any] = [block.attn for block in getattr(self, "blocks", [])]
        mixers = [str(i) for i, a in enumerate(attentions) if not getattr(a, "attends", True)]
        if mixers:
            raise HookError(
                f"block(s) {', '.join(mixers)} mix tokens without attention (attends=False, a convolution): "
                f"there are no weights by head to stack over every layer; read those blocks' own modules"
            )
        if not attentions or not all(isinstance(getattr(a, "qkv", None), nn.Linear) for a in attentions):
            raise HookError("the weights by head need attention with one fused q/k/v projection (zoo's Attention)")
        return attentions

    def _qkv(self, part: int) -> Tensor:
        """Part 0, 1 or 2 (q, k, v) of every layer's fused projection, (L, H, d, dk)."""
        rows = []
        for attn in self._attentions():
            heads = [attn.n_heads, attn.n_kv_heads, attn.n_kv_heads]
            begin = sum(heads[:part]) * attn.head_dim
            weight = attn.qkv.weight[begin : begin + heads[part] * attn.head_dim]  # (H * dk, d)
            rows.append(weight.reshape(heads[part], attn.head_dim, -1).transpose(1, 2))
        return torch.stack(rows)

    @property
    def W_E(self) -> Tensor:  # noqa: N802 - TransformerLens's name
        """The token embedding, (V, d)."""
        return self.tok_emb.weight

    @property
    def W_pos(self) -> Tensor:  # noqa: N802
        """The learned position table, (n_ctx, d); a model without one has none."""
        table = getattr(self.position, "table", None)
        if not isinstance(table, nn.Embedding):
            raise HookError(  # not an AttributeError: nn.Module would answer it with "has no attribute"
                f"W_pos is a learned position table; this model's positions are {type(self.position).__name__}, "
                f"which add no table to the embeddings (TransformerLens has no W_pos for them either)"
            )
        return table.weight[getattr(self.position, "offset", 0) :]

    @property
    def W_Q(self) -> Tensor:  # noqa: N802
        """Queries by head, (L, H, d, dk)."""
        return self._qkv(0)

    @property
    def W_K(self) -> Tensor:  # noqa: N802
        """Keys by key/value head, (L, H_kv, d, dk)."""
        return self._qkv(1)

    @property
    def W_V(self) -> Tensor:  # noqa: N802
        """Values by key/value head, (L, H_kv, d, dk)."""
        return self._qkv(2)

    @property
    def W_O(self) -> Tensor:  # noqa: N802
        """The output projection by head, (L, H, dk, d)."""
        rows = []
        for attn in self._attentions():
            out = residual_projection(attn)
            if not isinstance(out, nn.Linear):
                raise HookError("the attention has no one linear output projection to split by head")
            rows.append(out.weight.reshape(out.out_features, attn.n_heads, attn.head_dim).permute(1, 2, 0))
        return torch.stack(rows)

    @property
    def W_U(self) -> Tensor:  # noqa: N802
        """The unembedding, (d, V)."""
        return self.head.weight.t()

    # -- hooks that stay -------------------------------------------------------------------

    def add_hook(
        self,
        name: str | Callable[[str], bool],
        hook: HookFn,
        dir: str = "fwd",
        is_permanent: bool = False,
    ) -> None:
        """Set ``hook`` at a point (or every point a predicate picks) until ``reset_hooks``."""
        check_flag(is_permanent, "is_permanent")
        if dir != "fwd":
            raise HookError(f"the zoo's hooks run forward (dir='fwd'), got dir={dir!r}; use torch's backward hooks")
        names = select(self, name if callable(name) else [name])
        self._set_hooks({point: hook for point in names}, is_permanent)

    def _set_hooks(self, fns: dict[str, HookFn], permanent: bool) -> None:
        context = hooked(self, fns)
        context.__enter__()
        kept: list[tuple[AbstractContextManager[None], dict[str, HookFn], bool]]
        kept = self.__dict__.setdefault("_kept_hooks", [])
        kept.append((context, fns, permanent))

    def reset_hooks(self, including_permanent: bool = False) -> None:
        """Remove the hooks ``add_hook`` set (the permanent ones too with ``including_permanent``)."""
        check_flag(including_permanent, "including_permanent")
        kept: list[tuple[AbstractContextManager[None], dict[str, HookFn], bool]] = self.__dict__.get("_kept_hooks", [])
        stays = [(fns, permanent) for _, fns, permanent in kept if permanent and not including_permanent]
        for context, _, _ in reversed(kept):  # contexts nest: the last set goes first
            context.__exit__(None, None, None)
        kept.clear()
        for fns, permanent in stays:  # set again, in their order
            self._set_hooks(fns, permanent)

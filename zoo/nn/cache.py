"""Key/value caches for incremental decoding.

Each attention layer gets a ``LayerCache`` through ``AttentionContext.cache`` and calls
``keys, values = cache.update(k, v)`` with its new keys and values. The cache stores
whatever shapes it is given, so an attention with fewer key/value heads (GQA) stores
only those. Buffers are preallocated and grow by doubling, so a new token costs one
copy of one position, not a copy of the prefix.

A layer with a sliding window of W positions gets a ``RollingLayerCache``: it keeps the
last W - 1 keys and values only (all a later query can see), so decoding past the
window holds memory bounded by the window, not the context.

A recurrent mixer (Mamba-2's scan) also keeps its ``state``: one tensor (B, ...) that
each call replaces whole, not a position per token; beam search reorders it with the rest.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from zoo.errors import InputError


class LayerCache:
    """Keys and values of one attention layer: (B, H_kv, length, d) each."""

    def __init__(self, capacity: int = 0) -> None:
        self.capacity_hint = capacity
        self.keys: Tensor | None = None
        self.values: Tensor | None = None
        self.length = 0
        #: A recurrent mixer's state after the positions so far, (B, ...), replaced by each call.
        self.state: Tensor | None = None

    def update(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Append (B, H_kv, S, d) keys and values; return all of them so far."""
        end = self.length + k.shape[2]
        keys, values = self.keys, self.values
        if keys is not None and values is not None and self.length:
            self._check_fits(k, v, keys, values)
        if keys is None or values is None or end > keys.shape[2]:
            keys, values = self._grow(k, v, end)
        keys[:, :, self.length : end] = k
        values[:, :, self.length : end] = v
        self.length = end
        return keys[:, :, :end], values[:, :, :end]

    @staticmethod
    def _check_fits(k: Tensor, v: Tensor, keys: Tensor, values: Tensor) -> None:
        """Refuse keys of another batch, head count or width than those stored (shapes
        only: no data is read, so this compiles away)."""
        stored = (keys.shape[0], keys.shape[1], keys.shape[3], values.shape[1], values.shape[3])
        new = (k.shape[0], k.shape[1], k.shape[3], v.shape[1], v.shape[3])
        if stored != new or k.dtype != keys.dtype:
            raise InputError(
                f"the KV cache holds keys and values of (batch, kv heads, head dim) "
                f"{stored[:3]} in {keys.dtype}, but this call makes {new[:3]} in {k.dtype}: "
                f"it was filled by another model or batch; make a fresh one with model.new_cache()"
            )

    @property
    def stored(self) -> int:
        """How many positions' keys and values this cache holds (and returns before the new ones)."""
        return self.length

    def contents(self) -> tuple[Tensor, Tensor]:
        """All keys and values stored so far (for cross-attention's fixed memory)."""
        if self.keys is None or self.values is None:
            raise InputError("the cache is empty; fill it with a first call before reading it")
        return self.keys[:, :, : self.length], self.values[:, :, : self.length]

    def _grow(self, k: Tensor, v: Tensor, needed: int) -> tuple[Tensor, Tensor]:
        old = 0 if self.keys is None else self.keys.shape[2]
        capacity = max(needed, self.capacity_hint, 2 * old)
        batch, heads, _, _ = k.shape
        keys = k.new_empty(batch, heads, capacity, k.shape[3])
        values = v.new_empty(batch, v.shape[1], capacity, v.shape[3])
        if self.keys is not None and self.values is not None and self.length:
            keys[:, :, : self.length] = self.keys[:, :, : self.length]
            values[:, :, : self.length] = self.values[:, :, : self.length]
        self.keys, self.values = keys, values
        return keys, values

    @property
    def nbytes(self) -> int:
        """Bytes of the keys, values and state stored so far (not the spare capacity)."""
        state = 0 if self.state is None else self.state.numel() * self.state.element_size()
        if self.keys is None or self.values is None:
            return state
        per_position = (self.keys[:, :, :1].numel() + self.values[:, :, :1].numel()) * self.keys.element_size()
        return per_position * self.stored + state


class RollingLayerCache(LayerCache):
    """The keys and values of a layer with a sliding ``window``: only the last
    ``window - 1`` positions are kept, the most a later query sees besides its own.

    ``length`` counts every position seen (the model's offset); ``stored`` those kept.
    ``update`` returns the kept keys followed by the new ones, oldest first, which is
    what ``make_mask(window=...)`` masks for.
    """

    def __init__(self, window: int) -> None:
        super().__init__()
        self.window = window

    @property
    def stored(self) -> int:
        return min(self.length, self.window - 1)

    def update(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Append (B, H_kv, S, d) keys and values; return the kept ones and these."""
        new, keys, values = k.shape[2], self.keys, self.values
        if keys is not None and values is not None and self.stored:
            self._check_fits(k, v, keys, values)
            k, v = torch.cat([keys, k], dim=2), torch.cat([values, v], dim=2)
        keep = min(k.shape[2], self.window - 1)
        self.keys = k[:, :, k.shape[2] - keep :].clone()  # a copy: the prompt's keys are not kept alive
        self.values = v[:, :, v.shape[2] - keep :].clone()
        self.length += new
        return k, v

    def contents(self) -> tuple[Tensor, Tensor]:
        raise InputError("a rolling cache keeps the last positions of a sliding window, not a fixed memory")


class KVCache:
    """One ``LayerCache`` per layer; ``length`` is how many positions are cached.

    ``windows`` (one per layer, None for a full layer) gives windowed layers a
    ``RollingLayerCache``."""

    def __init__(self, n_layers: int, capacity: int = 0, windows: Sequence[int | None] | None = None) -> None:
        windows = windows or [None] * n_layers
        self.layers = [LayerCache(capacity) if w is None else RollingLayerCache(w) for w in windows]

    def __getitem__(self, index: int) -> LayerCache:
        return self.layers[index]

    def __len__(self) -> int:
        return len(self.layers)

    @property
    def length(self) -> int:
        return self.layers[0].length if self.layers else 0

    @property
    def nbytes(self) -> int:
        return sum(layer.nbytes for layer in self.layers)

    def reorder(self, rows: Tensor) -> None:
        """Keep, as row ``i``, the keys, values and state of row ``rows[i]`` (beam search's
        beams following their best continuations)."""
        for layer in self.layers:
            if layer.keys is not None and layer.values is not None:
                layer.keys = layer.keys.index_select(0, rows)
                layer.values = layer.values.index_select(0, rows)
            if layer.state is not None:
                layer.state = layer.state.index_select(0, rows)

"""The inference engine: a language model prepared for decoding, the user's model untouched.

``Engine(model)`` makes its own module tree over the model's weights (a copy of the
modules, sharing every parameter and buffer) in eval mode, and swaps each linear layer
for a ``PreparedLinear`` that knows the fast way to run it on this device:

- a decode step at batch 1 multiplies every weight by one vector. CPU BLAS streams a
  matrix fastest along its longer side, while ``nn.Linear`` keeps (out, in) contiguous
  along ``in``; for the qkv and up projections and the vocabulary head that reads about
  half as fast (a whole gpt2-small step: ~21 instead of ~28 ms on two cores). On the CPU
  in float32 the engine keeps a copy of the weights with out >= in contiguous along
  ``out`` (same values and shape), its *layout*, and uses it for every product;
- several rows through the vocabulary head (the last positions of a batch) run
  ordered (V, d) @ (d, rows) on the model's own (V, d) weight, which CPU BLAS runs 2-3x
  faster than (rows, d) @ (d, V) at a few rows;
- dropout, the identity in eval mode, returns its input without calling into torch
  (``SkippedDropout``: a gpt2-small step makes 25 such calls, ~3% of its time here).

The module tree is cheap to copy (milliseconds); the layouts are not (about 0.75x the
model's memory for gpt2-small, ~0.2 s to make). So layouts live in a ``Layouts`` store,
one entry per weight, each valid while its weight is the same tensor, at the same
address, at the same in-place version: an engine prepares again (``refresh``) when the
weights change (an optimizer step, ``load_state_dict``, ``.to(dtype)``), copying into
the layouts it has instead of allocating new ones. An ``Engine`` owns its store, freed
with it; ``model.generate`` and ``generate(model, ...)`` share ``layouts``, the store
of the last ``layouts.max_models`` models decoded without an engine (one by default),
dropped when such a model is freed or ``layouts.clear()`` is called; ``layouts.nbytes``
says what it holds. The model itself stays device-agnostic and is never modified: not
its parameters' storage, not its mode.
"""

from __future__ import annotations

import copy
import functools
import itertools
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeGuard

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from zoo.errors import InputError
from zoo.nn.model import DecoderLM

if TYPE_CHECKING:
    from zoo.nn.cache import KVCache
    from zoo.nn.config import ModelConfig

__all__ = ["Engine", "Layouts", "PreparedLinear", "SkippedDropout", "layouts"]


class PreparedLinear(nn.Module):
    """A linear layer for decoding: ``weight`` and ``bias`` are the model's own (shared).

    ``by_out``, when set, holds the same values as ``weight`` stored contiguous along
    ``out`` and is used instead of it (the product ``x @ W^T`` then reads W^T row by row,
    as transformers' GPT-2 ``Conv1D`` does); ``weight_first`` orders many-row products
    (out, in) @ (in, rows), the faster way round for the vocabulary head on the CPU.
    """

    def __init__(self, linear: nn.Linear, by_out: Tensor | None, *, weight_first: bool) -> None:
        super().__init__()
        self.weight = linear.weight
        self.bias = linear.bias
        self.by_out = by_out
        self.weight_first = weight_first

    def forward(self, x: Tensor) -> Tensor:
        rows = x.shape[:-1].numel()
        if self.weight_first and rows > 1:
            y = self.weight @ x.reshape(rows, -1).t()  # (out, rows)
            if self.bias is not None:
                y = y + self.bias[:, None]
            return y.t().view(*x.shape[:-1], -1)  # a transposed view: fine for decoding
        return F.linear(x, self.weight if self.by_out is None else self.by_out, self.bias)


class SkippedDropout(nn.Dropout):
    """``nn.Dropout`` as decoding runs it, in eval mode: the identity (``p`` kept, for
    code that reads it). Replaces only plain ``nn.Dropout`` modules without hooks."""

    def forward(self, input: Tensor) -> Tensor:
        return input

    @staticmethod
    def replaces(module: nn.Module) -> TypeGuard[nn.Dropout]:
        return type(module) is nn.Dropout and not (module._forward_hooks or module._forward_pre_hooks)


def _tensors(model: nn.Module) -> list[Tensor]:
    return list(itertools.chain(model.parameters(), model.buffers()))


def _version(t: Tensor) -> int:
    """How often ``t`` was changed in place; inference tensors keep no count (-1)."""
    return -1 if t.is_inference() else t._version


def _signature(model: nn.Module) -> tuple[tuple[int, int, int], ...]:
    """Which tensors the model holds, where, and how often they were changed in place
    (inference tensors keep no count: -1; they can change only inside inference mode)."""
    return tuple((id(t), t.data_ptr(), _version(t)) for t in _tensors(model))


def _wants_layout(weight: Tensor) -> bool:
    """Whether decoding reads ``weight`` (out, in) faster from a copy contiguous along ``out``."""
    return (
        weight.device.type == "cpu"
        and weight.dtype == torch.float32
        and weight.dim() == 2
        and weight.shape[0] >= weight.shape[1]
        and weight.is_contiguous()
    )


@dataclass
class _Layout:
    """One weight's decoding layout and what it was copied from."""

    source: weakref.ref[Tensor]
    key: tuple[int, int]  # (data_ptr, version) of the weight when copied; version -1: always copy again
    tensor: Tensor  # the weight's values, contiguous along out


class _Store:
    """The layouts of one model's weights, by weight."""

    def __init__(self) -> None:
        self.entries: dict[int, _Layout] = {}

    @property
    def nbytes(self) -> int:
        return sum(e.tensor.numel() * e.tensor.element_size() for e in self.entries.values())

    def layout(self, weight: Tensor) -> Tensor:
        """``weight``'s layout, copied again (into the same memory when it fits) if it changed."""
        key = (weight.data_ptr(), _version(weight))
        entry = self.entries.get(id(weight))
        if entry is not None and entry.source() is weight:
            if entry.key == key and key[1] != -1:
                return entry.tensor
            if entry.tensor.shape == weight.shape and entry.tensor.dtype == weight.dtype:
                entry.tensor.copy_(weight)
                entry.key = key
                return entry.tensor
        tensor = weight.detach().t().contiguous().t()
        self.entries[id(weight)] = _Layout(weakref.ref(weight), key, tensor)
        return tensor

    def keep_only(self, weights: set[int]) -> None:
        """Drop the layouts of weights the model no longer holds."""
        for gone in set(self.entries) - weights:
            del self.entries[gone]


class Layouts:
    """Decoding layouts kept between calls for models decoded without an ``Engine``.

    Holds the stores of the last ``max_models`` models (least recently decoded dropped
    first; 0 keeps none, so every call copies its layouts again); a store goes when its
    model is freed. On the CPU in float32 a store costs about 0.75x the model's weights
    (gpt2-small: ~0.38 GB); on other devices and dtypes nothing. ``nbytes`` is what the
    stores hold now; ``release(model)`` and ``clear()`` free them.
    """

    def __init__(self, max_models: int = 1) -> None:
        self.max_models = max_models
        self._stores: OrderedDict[int, tuple[weakref.ref[nn.Module], _Store]] = OrderedDict()
        self._lock = threading.RLock()  # re-entrant: a freed model's callback may run inside

    def __len__(self) -> int:
        return len(self._stores)

    @property
    def nbytes(self) -> int:
        """Bytes of the layouts held, all models together."""
        return sum(store.nbytes for _, store in list(self._stores.values()))

    def store(self, model: nn.Module) -> _Store:
        """The store of ``model`` (made now if it has none), as the most recent."""
        key = id(model)
        with self._lock:
            held = self._stores.get(key)
            if held is not None and held[0]() is model:
                self._stores.move_to_end(key)
                return held[1]
            store = _Store()
            if self.max_models > 0:
                ref = weakref.ref(model, functools.partial(self._forget, key))
                self._stores[key] = (ref, store)
                while len(self._stores) > self.max_models:
                    self._stores.popitem(last=False)
            return store

    def release(self, model: nn.Module) -> None:
        """Free the layouts kept for ``model``."""
        with self._lock:
            held = self._stores.get(id(model))
            if held is not None and held[0]() is model:
                del self._stores[id(model)]

    def clear(self) -> None:
        """Free every layout kept."""
        with self._lock:
            self._stores.clear()

    def _forget(self, key: int, _: object = None) -> None:
        with self._lock:
            held = self._stores.get(key)
            if held is not None and held[0]() is None:
                del self._stores[key]


layouts = Layouts()
"""The layouts ``model.generate`` and ``generate(model, ...)`` reuse between calls."""


class Engine:
    """A decoder-only model prepared for decoding; ``generate(engine, ...)`` runs it.

    ``engine.scores(ids, ...)`` is the model's forward for the last position only, as
    (B, V) scores, taking the same ``attention_mask``, ``positions`` and ``cache``.
    ``layouts`` is where its weight layouts are kept: by default its own, freed with it;
    ``zoo.decoding.layouts`` shares them between calls (what ``model.generate`` does).
    """

    def __init__(self, model: DecoderLM, *, layouts: Layouts | None = None) -> None:
        if not isinstance(model, DecoderLM):
            raise InputError(
                f"decoding needs a zoo decoder-only language model (zoo.build('gpt2-small'), "
                f"zoo.load(...)), got {type(model).__name__}"
            )
        self._source = weakref.ref(model)
        self._store = layouts.store(model) if layouts is not None else _Store()
        self.model: DecoderLM = self._prepare(model, self._store)
        self._signature = _signature(model)

    @property
    def config(self) -> ModelConfig:
        return self.model.config

    @property
    def generation_config(self) -> dict[str, Any]:
        """The model's generation settings (``DecoderLM.generation_config``), as it has them now."""
        model = self._source()
        return (model if model is not None else self.model).generation_config

    @property
    def generation_source(self) -> str:
        """Where the model's ``generation_config`` came from (``DecoderLM.generation_source``)."""
        model = self._source()
        return str(getattr(model if model is not None else self.model, "generation_source", ""))

    @property
    def device(self) -> torch.device:
        param = next(self.model.parameters(), None)
        return param.device if param is not None else torch.device("cpu")

    @property
    def nbytes(self) -> int:
        """Bytes of the weight layouts this engine uses (beyond the model's own weights)."""
        return self._store.nbytes

    def refresh(self) -> None:
        """Prepare again if the model's weights changed since (in place or replaced)."""
        model = self._source()
        if model is not None and _signature(model) != self._signature:
            self.model = self._prepare(model, self._store)
            self._signature = _signature(model)

    def new_cache(self, capacity: int = 0) -> KVCache:
        return self.model.new_cache(capacity)

    @torch.inference_mode()
    def scores(
        self,
        ids: Tensor,
        *,
        attention_mask: Tensor | None = None,
        positions: Tensor | None = None,
        cache: KVCache | None = None,
    ) -> Tensor:
        """(B, V) scores for the token after ``ids`` (B, S): logits, or log-probabilities
        for a ``log_softmax`` head."""
        out: Tensor = self.model(ids, attention_mask=attention_mask, positions=positions, cache=cache, last_only=True)
        return out[:, -1]

    @staticmethod
    @torch.inference_mode()  # layouts may be copied from inference tensors, and only serve decoding
    def _prepare(model: DecoderLM, store: _Store) -> DecoderLM:
        """A copy of the module tree sharing every tensor, in eval mode, linears and
        dropout prepared."""
        shared: dict[int, object] = {id(t): t for t in _tensors(model)}
        prepared = copy.deepcopy(model, shared)  # modules copied, tensors shared
        prepared.eval()
        head = getattr(prepared, "head", None)
        used: set[int] = set()
        for parent in list(prepared.modules()):
            for name, child in list(parent.named_children()):
                if SkippedDropout.replaces(child):
                    setattr(parent, name, SkippedDropout(child.p, child.inplace).eval())
                if not isinstance(child, nn.Linear):
                    continue
                weight = child.weight
                layout = store.layout(weight) if _wants_layout(weight) else None
                if layout is not None:
                    used.add(id(weight))
                cpu_float = weight.device.type == "cpu" and weight.dtype == torch.float32
                setattr(parent, name, PreparedLinear(child, layout, weight_first=cpu_float and child is head))
        store.keep_only(used)
        return prepared

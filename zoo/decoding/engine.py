"""The inference engine: a language model prepared once for decoding, the user's model untouched.

``Engine(model)`` makes its own module tree over the model's weights (a copy of the
modules, sharing every parameter and buffer) in eval mode, and swaps each linear layer
for a ``PreparedLinear`` that knows the fast way to run it on this device:

- a decode step at batch 1 multiplies every weight by one vector. CPU BLAS streams a
  matrix fastest along its longer side, while ``nn.Linear`` keeps (out, in) contiguous
  along ``in``; for the qkv and up projections and the vocabulary head that reads about
  half as fast (a whole gpt2-small step: ~21 instead of ~28 ms on two cores). On the CPU
  in float32 the engine keeps a copy of the weights with out >= in contiguous along
  ``out`` (same values and shape) and uses it for every product;
- several rows through the vocabulary head (the last positions of a batch) run
  ordered (V, d) @ (d, rows) on the model's own (V, d) weight, which CPU BLAS runs 2-3x
  faster than (rows, d) @ (d, V) at a few rows.

The copies cost memory (for gpt2-small about 0.75x the model) and time to make (~0.2 s),
so keep an engine for repeated calls; it notices when the model's weights change
(training, ``load_state_dict``) and prepares them again. The model itself stays
device-agnostic and is never modified: not its parameters' storage, not its mode.
"""

from __future__ import annotations

import copy
import itertools
import weakref
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from zoo.errors import InputError
from zoo.model import DecoderLM

if TYPE_CHECKING:
    from zoo.cache import KVCache
    from zoo.config import ModelConfig

__all__ = ["Engine", "PreparedLinear"]


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


def _tensors(model: nn.Module) -> list[Tensor]:
    return list(itertools.chain(model.parameters(), model.buffers()))


def _signature(model: nn.Module) -> tuple[tuple[int, int, int], ...]:
    """Which tensors the model holds, where, and how often they were changed in place
    (inference tensors keep no count: -1; they can change only inside inference mode)."""
    return tuple((id(t), t.data_ptr(), -1 if t.is_inference() else t._version) for t in _tensors(model))


class Engine:
    """A decoder-only model prepared for decoding; ``generate(engine, ...)`` runs it.

    ``engine.scores(ids, ...)`` is the model's forward for the last position only, as
    (B, V) scores, taking the same ``attention_mask``, ``positions`` and ``cache``.
    """

    def __init__(self, model: DecoderLM) -> None:
        if not isinstance(model, DecoderLM):
            raise InputError(
                f"decoding needs a zoo decoder-only language model (zoo.build('gpt2-small'), "
                f"zoo.load(...)), got {type(model).__name__}"
            )
        self._source = weakref.ref(model)
        self.model: DecoderLM = self._prepare(model)
        self._signature = _signature(model)

    @property
    def config(self) -> ModelConfig:
        return self.model.config

    @property
    def device(self) -> torch.device:
        param = next(self.model.parameters(), None)
        return param.device if param is not None else torch.device("cpu")

    def refresh(self) -> None:
        """Prepare again if the model's weights changed since (in place or replaced)."""
        model = self._source()
        if model is not None and _signature(model) != self._signature:
            self.model = self._prepare(model)
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
        out = self.model(ids, attention_mask=attention_mask, positions=positions, cache=cache, last_only=True)
        return out[:, -1]

    @staticmethod
    def _prepare(model: DecoderLM) -> DecoderLM:
        """A copy of the module tree sharing every tensor, in eval mode, linears prepared."""
        shared: dict[int, object] = {id(t): t for t in _tensors(model)}
        prepared = copy.deepcopy(model, shared)  # modules copied, tensors shared
        prepared.eval()
        head = getattr(prepared, "head", None)
        by_out: dict[int, Tensor] = {}  # one copy per weight, however many layers share it
        for parent in list(prepared.modules()):
            for name, child in list(parent.named_children()):
                if not isinstance(child, nn.Linear):
                    continue
                weight = child.weight
                cpu_float = weight.device.type == "cpu" and weight.dtype == torch.float32
                if cpu_float and weight.shape[0] >= weight.shape[1] and weight.is_contiguous():
                    if id(weight) not in by_out:
                        with torch.no_grad():
                            by_out[id(weight)] = weight.detach().t().contiguous().t()
                    layout: Tensor | None = by_out[id(weight)]
                else:
                    layout = None
                setattr(parent, name, PreparedLinear(child, layout, weight_first=cpu_float and child is head))
        return prepared

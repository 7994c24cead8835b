"""The links from the model up to the layers above it: ``DecoderLM.generate`` to the
decode loop, and ``model.tokenizer`` to the tokenizer its record names.

The model sits below decoding (``zoo.decoding`` imports ``zoo.nn.model``), so the model
cannot import the loop; instead ``zoo.decoding`` registers its ``generate`` here when it
is imported, and ``DecoderLM.generate`` calls what is registered. ``import zoo`` imports
``zoo.decoding``, so the method works whichever way the model was made.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from zoo.errors import ZooError

if TYPE_CHECKING:
    from torch import Tensor, nn

__all__ = ["GENERATION_KEYS", "Generate", "carried_tokenizer", "provide", "provide_tokenizer", "provided"]

#: The settings of transformers' ``GenerationConfig`` the zoo's decoding honours, by the
#: same names. A model keeps the ones its files state in ``model.generation_config`` (a
#: model from ``from_hf``: ``generation_config.json``, else ``config.json``'s token ids),
#: the defaults of every ``generate`` call that does not give them.
GENERATION_KEYS = (
    "eos_token_id", "pad_token_id", "bos_token_id", "do_sample", "temperature", "top_k", "top_p",
    "repetition_penalty", "max_new_tokens", "max_length", "min_new_tokens", "num_beams", "length_penalty",
    "early_stopping", "stop_strings",
)  # fmt: skip


Generate = Callable[..., "Tensor"]
"""``generate(model, input_ids, max_new_tokens, **options) -> ids``, as ``zoo.decoding.generate``."""


_provided: list[Generate] = []


def provide(generate: Generate) -> None:
    """Register the decode loop ``DecoderLM.generate`` runs (``zoo.decoding`` does, on import)."""
    _provided[:] = [generate]


def provided(model: nn.Module) -> Generate:
    """The registered decode loop, or a ``ZooError`` saying how to get one."""
    if not _provided:
        raise ZooError(
            f"{type(model).__name__}.generate needs the decode loop, which registers itself when "
            f"zoo.decoding is imported; `import zoo` (or `import zoo.decoding`) first"
        )
    return _provided[0]


_tokenizers: list[Callable[[nn.Module], Any]] = []


def provide_tokenizer(resolve: Callable[[nn.Module], Any]) -> None:
    """Register how a model's ``tokenizer_record`` becomes a tokenizer (``import zoo`` does)."""
    _tokenizers[:] = [resolve]


def carried_tokenizer(model: nn.Module) -> Any:
    """The tokenizer ``model.tokenizer_record`` names, or None (none named, or none registered)."""
    return _tokenizers[0](model) if _tokenizers else None

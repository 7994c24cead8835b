"""The links from the model up to the layers above it: ``DecoderLM.generate`` to the
decode loop, and ``model.tokenizer`` to the tokenizer its record names.

The model sits below decoding (``zoo.decoding`` imports ``zoo.nn.model``), so the model
cannot import the loop; instead ``zoo.decoding`` registers its ``generate`` here when it
is imported, and ``DecoderLM.generate`` calls what is registered. ``import zoo`` imports
``zoo.decoding``, so the method works whichever way the model was made.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from zoo.errors import ZooError

if TYPE_CHECKING:
    from torch import Tensor, nn

__all__ = [
    "GENERATION_KEYS", "Generate", "carried_tokenizer", "check_generation", "provide", "provide_tokenizer", "provided",
]  # fmt: skip

#: The settings of transformers' ``GenerationConfig`` the zoo's decoding honours, by the
#: same names. A model keeps the ones its files state in ``model.generation_config`` (a
#: model from ``from_hf``: ``generation_config.json``, else ``config.json``'s token ids),
#: the defaults of every ``generate`` call that does not give them.
GENERATION_KEYS = (
    "eos_token_id", "pad_token_id", "bos_token_id", "do_sample", "temperature", "top_k", "top_p",
    "repetition_penalty", "max_new_tokens", "max_length", "min_new_tokens", "num_beams", "length_penalty",
    "early_stopping", "stop_strings",
)  # fmt: skip

#: The settings that are real numbers: each must be finite.
REAL_KEYS = ("temperature", "top_p", "repetition_penalty", "length_penalty")


def check_generation(settings: Mapping[str, Any], source: str, error: type[ZooError]) -> None:
    """Refuse generation ``settings`` no decoding can honour, in one line naming their
    ``source``: a real-valued one (``REAL_KEYS``) that is not a finite number, and
    ``min_new_tokens`` above ``max_new_tokens`` (no sequence could be made that long)."""
    for key in REAL_KEYS:
        value = settings.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise error(f"{source}: {key}={value!r} is not a number; give a finite number (or leave {key} out)")
        if isinstance(value, float) and not math.isfinite(value):
            raise error(f"{source}: {key}={value!r} is not a finite number; give a finite one (or leave {key} out)")
    least, most = settings.get("min_new_tokens"), settings.get("max_new_tokens")
    if type(least) is int and type(most) is int and least > most >= 0:  # a negative count: refused as one
        raise error(
            f"{source}: min_new_tokens={least} is more than max_new_tokens={most}, so no sequence could be that "
            f"long; lower min_new_tokens to at most {most} or raise max_new_tokens"
        )


Generate = Callable[..., "Tensor"]
"""``generate(model, input_ids, max_new_tokens, **options) -> ids``, as ``zoo.decoding.generate``."""


_provided: list[Generate] = []


def provide(generate: Generate) -> None:
    """Register the decode loop ``DecoderLM.generate`` runs (``zoo.decoding`` does, on import)."""
    _provided[:] = [generate]


def provided(model: nn.Module) -> Generate:
    """The registered decode loop (``zoo.decoding``'s, imported on first need), or a
    ``ZooError`` saying how to get one."""
    if not _provided:
        importlib.import_module("zoo.decoding")  # registers itself on its first import
    if not _provided:
        raise ZooError(
            f"{type(model).__name__}.generate needs the decode loop, which registers itself when "
            f"zoo.decoding is first imported; it was unregistered since: `import zoo.decoding` and "
            f"call zoo.nn.generation.provide(zoo.decoding.generate)"
        )
    return _provided[0]


_tokenizers: list[Callable[[nn.Module], Any]] = []


def provide_tokenizer(resolve: Callable[[nn.Module], Any]) -> None:
    """Register how a model's ``tokenizer_record`` becomes a tokenizer (``zoo.pipelines``
    does, on import)."""
    _tokenizers[:] = [resolve]


def carried_tokenizer(model: nn.Module) -> Any:
    """The tokenizer ``model.tokenizer_record`` names (read by ``zoo.pipelines``, imported
    on first need), or None (none named, or none registered)."""
    if not _tokenizers and getattr(model, "tokenizer_record", None):
        importlib.import_module("zoo.pipelines")  # registers its reader on its first import
    return _tokenizers[0](model) if _tokenizers else None

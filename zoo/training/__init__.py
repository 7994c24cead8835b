"""Training: data preparation, the one training loop (``loop``) with its ``settings``,
``checkpointing`` (exact resume), ``metrics`` and ``models``, distributed strategies, and
evaluation. ``zoo.train`` and ``zoo.evaluate`` are the entry points; ``fit`` trains a
built model in one process, on token ids or ``TokenData`` (what ``ablate`` uses)."""

from __future__ import annotations

import warnings
from typing import Any

from zoo.training.data import (
    BUNDLED_CORPUS,
    MANIFEST,
    TOKENIZERS,
    Corpus,
    TokenData,
    TokenSplit,
    WindowSampler,
    bundled_corpus,
    load_corpus,
    open_data,
    prepare,
    resolve_data,
    tokens_data,
    training_batches,
    validation_batches,
)
from zoo.training.distributed import STRATEGIES, World
from zoo.training.documents import read_text
from zoo.training.evaluate import EvalResult, evaluate
from zoo.training.loop import (
    CurvePoint,
    TrainResult,
    deterministic,
    fit,
    learning_rate,
    lm_loss,
    mean_loss,
    parameter_groups,
    run,
    run_loop,
    train,
)
from zoo.training.metrics import METRICS, StepReport
from zoo.training.settings import PRECISIONS, TrainSettings

__all__ = [
    "BUNDLED_CORPUS",
    "PRECISIONS",
    "MANIFEST",
    "METRICS",
    "STRATEGIES",
    "TOKENIZERS",
    "Corpus",
    "CurvePoint",
    "EvalResult",
    "StepReport",
    "TokenData",
    "TokenSplit",
    "TrainResult",
    "TrainSettings",
    "WindowSampler",
    "World",
    "bundled_corpus",
    "deterministic",
    "evaluate",
    "fit",
    "learning_rate",
    "lm_loss",
    "load_corpus",
    "mean_loss",
    "open_data",
    "parameter_groups",
    "prepare",
    "read_text",
    "resolve_data",
    "run",
    "run_loop",
    "tokens_data",
    "train",
    "training_batches",
    "validation_batches",
]


def __getattr__(name: str) -> Any:
    """Deprecated names: ``DTYPES`` (the precisions' names) is now ``PRECISIONS``."""
    if name == "DTYPES":
        warnings.warn(
            "zoo.training.DTYPES is now zoo.training.PRECISIONS (a dict: precision -> autocast dtype)",
            DeprecationWarning,
            stacklevel=2,
        )
        return tuple(PRECISIONS)
    raise AttributeError(f"module 'zoo.training' has no attribute {name!r}")

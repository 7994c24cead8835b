"""Training: data preparation, the one training loop (``loop``) with its ``settings``,
``checkpointing`` (exact resume), ``metrics`` and ``models``, distributed strategies, and
evaluation. ``zoo.train`` and ``zoo.evaluate`` are the entry points; ``fit`` trains a
built model in one process, on token ids or ``TokenData`` (what ``ablate`` uses)."""

from __future__ import annotations

from zoo.training.corpus import BUNDLED_CORPUS, STDLIB_CORPUS, Corpus, bundled_corpus, load_corpus, stdlib_corpus
from zoo.training.data import resolve_data
from zoo.training.distributed import STRATEGIES, World
from zoo.training.documents import read_text
from zoo.training.evaluate import EvalResult, evaluate
from zoo.training.loop import CurvePoint, TrainResult, fit, run_loop, train
from zoo.training.manifest import MANIFEST, TOKENIZERS
from zoo.training.metrics import METRICS, StepReport
from zoo.training.optimization import deterministic, lm_loss, mean_loss, parameter_groups
from zoo.training.sampling import (
    TokenData,
    TokenSplit,
    WindowSampler,
    tokens_data,
    training_batches,
    validation_batches,
)
from zoo.training.settings import PRECISIONS, TrainSettings
from zoo.training.shards import open_data, prepare
from zoo.training.stateful import learning_rate

__all__ = [
    "BUNDLED_CORPUS",
    "STDLIB_CORPUS",
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
    "stdlib_corpus",
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
    "run_loop",
    "tokens_data",
    "train",
    "training_batches",
    "validation_batches",
]

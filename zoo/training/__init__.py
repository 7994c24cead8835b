"""Training: data preparation, the one training loop (``loop``) with its ``settings``,
``checkpointing`` (exact resume), ``metrics`` and ``models``, distributed strategies, and
evaluation. ``zoo.train`` and ``zoo.evaluate`` are the entry points; ``fit`` trains a
built model in one process, on token ids or ``TokenData`` (what ``ablate`` uses).

Every name loads on first use (``zoo._lazy``), so that ``zoo train -h`` reads the settings'
defaults (``settings``) and the names training takes (``choices``) without importing torch.
"""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING

from zoo._lazy import lazy_names

if TYPE_CHECKING:  # the names below load on first use
    from zoo.training.choices import STRATEGIES
    from zoo.training.corpus import BUNDLED_CORPUS, STDLIB_CORPUS, Corpus, bundled_corpus, load_corpus, stdlib_corpus
    from zoo.training.data import resolve_data
    from zoo.training.distributed import World
    from zoo.training.documents import read_text
    from zoo.training.evaluate import EvalResult, evaluate
    from zoo.training.loop import CurvePoint, TrainResult, fit, run_loop, train
    from zoo.training.manifest import MANIFEST, TOKENIZERS
    from zoo.training.metrics import METRICS, StepReport
    from zoo.training.optimization import PRECISIONS, deterministic, lm_loss, mean_loss, parameter_groups
    from zoo.training.sampling import (
        TokenData,
        TokenSplit,
        WindowSampler,
        tokens_data,
        training_batches,
        validation_batches,
    )
    from zoo.training.settings import TrainSettings
    from zoo.training.shards import open_data, prepare
    from zoo.training.stateful import learning_rate

_LAZY = {
    "BUNDLED_CORPUS": "zoo.training.corpus",
    "STDLIB_CORPUS": "zoo.training.corpus",
    "Corpus": "zoo.training.corpus",
    "bundled_corpus": "zoo.training.corpus",
    "load_corpus": "zoo.training.corpus",
    "stdlib_corpus": "zoo.training.corpus",
    "resolve_data": "zoo.training.data",
    "STRATEGIES": "zoo.training.choices",
    "World": "zoo.training.distributed",
    "read_text": "zoo.training.documents",
    "EvalResult": "zoo.training.evaluate",
    "evaluate": "zoo.training.evaluate",
    "CurvePoint": "zoo.training.loop",
    "TrainResult": "zoo.training.loop",
    "fit": "zoo.training.loop",
    "run_loop": "zoo.training.loop",
    "train": "zoo.training.loop",
    "MANIFEST": "zoo.training.manifest",
    "TOKENIZERS": "zoo.training.manifest",
    "METRICS": "zoo.training.metrics",
    "StepReport": "zoo.training.metrics",
    "deterministic": "zoo.training.optimization",
    "lm_loss": "zoo.training.optimization",
    "mean_loss": "zoo.training.optimization",
    "parameter_groups": "zoo.training.optimization",
    "TokenData": "zoo.training.sampling",
    "TokenSplit": "zoo.training.sampling",
    "WindowSampler": "zoo.training.sampling",
    "tokens_data": "zoo.training.sampling",
    "training_batches": "zoo.training.sampling",
    "validation_batches": "zoo.training.sampling",
    "PRECISIONS": "zoo.training.optimization",
    "TrainSettings": "zoo.training.settings",
    "open_data": "zoo.training.shards",
    "prepare": "zoo.training.shards",
    "learning_rate": "zoo.training.stateful",
}

__getattr__, __dir__ = lazy_names(__name__, _LAZY)


class _Training(types.ModuleType):
    """This package, whose ``evaluate`` stays the function (looked up in ``_LAZY``) when its
    module of the same name is imported, which would set the package's attribute to the module."""

    def __setattr__(self, name: str, value: object) -> None:
        if not (name == "evaluate" and isinstance(value, types.ModuleType)):
            super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Training

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

"""The architectures the zoo reads from Hugging Face, one case per family (and variant),
each a tiny transformers config: ``tests/test_families.py`` runs every parity check of a
converter over all of them. Cases live in one module per group of families, so adding a
family is adding a case to its group's module (or a new module listed below)."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

GROUPS = ("existing", "engine", "modern", "moe", "classic", "hybrids", "state_space", "dense", "seq2seq", "moe_2026")
GROUPS += ("dense_2026",)


@dataclass(frozen=True)
class Family:
    """One architecture as transformers builds it.

    ``id``: the test id (``qwen3``, ``gemma2-window``); ``config``/``model``: the
    transformers class names; ``fields``: a tiny config (vocabulary, ids and lengths are
    the harness's); ``export``: whether ``zoo.to_hf`` writes this architecture back;
    ``model_type``: the converter's key (``config.json``'s ``model_type``)."""

    id: str
    model_type: str
    config: str
    model: str
    fields: Mapping[str, Any] = field(default_factory=dict)
    export: bool = True


def all_cases() -> list[Family]:
    cases: list[Family] = []
    for group in GROUPS:
        try:
            module = importlib.import_module(f"family_cases.{group}")
        except ModuleNotFoundError as err:
            if err.name != f"family_cases.{group}":
                raise
            continue
        cases += module.CASES
    ids = [case.id for case in cases]
    assert len(ids) == len(set(ids)), f"duplicate family ids: {ids}"
    return cases

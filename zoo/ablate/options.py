"""What ``zoo ablate``'s flags and ``run_ablation``'s defaults share, kept apart from the
training so that building the command line imports none of it: the default scales, seed
counts and sweep offsets, the options that are also flags, the row orders, and the
``--scales`` parser.
"""

from __future__ import annotations

import re
from typing import Any

from zoo.errors import InputError

#: The default scale: each of the nine runs of transformer-2017 -> gpt2-small takes a
#: few seconds of one CPU core (GPT-2 tokens with a 1024 + 256 vocabulary, or bytes).
DEFAULT_SCALE: dict[str, Any] = {
    "d_model": 64,
    "layers": 2,
    "heads": 4,
    "seq_len": 64,
    "steps": 150,
    "batch": 16,
    "lr": 3e-3,
    "eval_every": 25,
}
#: The scale of ``make demo``: the same runs, a fraction of the steps.
DEMO_SCALE: dict[str, Any] = {
    "d_model": 48,
    "layers": 2,
    "heads": 4,
    "seq_len": 48,
    "steps": 60,
    "batch": 12,
    "lr": 4e-3,
    "eval_every": 15,
}
#: Seeds per variant by default: the fewest that give an interval worth reading.
DEFAULT_SEEDS = 3
#: ``tune_lr``'s default grid: the learning rate times these (log-spaced, factor 2).
LR_GRID_FACTORS: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0)
#: ``tune_lr``'s default budget: this fraction of the steps, one seed.
TUNE_FRACTION = 0.25
#: The sweep's seed is the first seed plus this: not a compared seed, and the same
#: whatever the number of seeds (so adding seeds reuses the sweep).
TUNE_SEED_OFFSET = 1000
#: The A/A control (the base again) trains at seeds ``seed + CONTROL_SEED_OFFSET + i``, an
#: independent stream paired with the base's seed ``seed + i``: its Δ is pure seed noise.
CONTROL_SEED_OFFSET = 2000

# run_ablation arguments that are also `zoo ablate` flags of the same name (--d-model for d_model):
# the command that repeats an ablation names them.
FLAG_OPTIONS = (
    "d_model",
    "layers",
    "heads",
    "seq_len",
    "steps",
    "batch",
    "lr",
    "eval_every",
    "seeds",
    "seed",
    "workers",
    "tokenizer",
    "max_chars",
    "threads",
    "order",
    "device",
    "correction",
    "warmup",
    "launcher",
)
#: Where an ablation's runs train: here (``--workers`` processes) or as Ray tasks (``zoo.ablate.cluster``).
LAUNCHERS = ("local", "ray")


# Options spelled otherwise on the command line: the scale as --set model fields, the batch as --batch-size.
SET_FIELDS = {"d_model": "d_model", "layers": "n_layers", "heads": "n_heads"}
FLAG_NAMES = {"batch": "--batch-size"}

#: The orders of the table's rows (``AblationResult.rows``).
ORDERS = ("effect", "plan")


_SCALE = re.compile(r"\s*(\d+)\s*x\s*(\d+)\s*")


def parse_scales(text: str) -> list[tuple[int, int]]:
    """``"64x2,128x4"`` -> ``[(64, 2), (128, 4)]`` (d_model x layers)."""
    pairs = []
    for part in text.split(","):
        match = _SCALE.fullmatch(part)
        if not match:
            raise InputError(f"a scale is D_MODELxLAYERS such as 64x2, got {part.strip()!r} (--scales 64x2,128x4)")
        pairs.append((int(match[1]), int(match[2])))
    return pairs

"""Zoo checkpoints of zoo-modern's older parameter layouts, upgraded on load (the
``zoo_migrate_checkpoint`` hook; ``zoo.checkpoint.format`` runs it a format step at a time).

Format 1 -> 2: the ``moe`` MLP held one SwiGLU module per expert
(``mlp.experts.{e}.gate.weight``, ``up``, ``down``, biases alike); it now holds them stacked,
as transformers 5 does: ``mlp.experts.gate_up.weight`` (E, 2 x hidden, d), rows [gate | up],
and ``mlp.experts.down.weight`` (E, d, hidden), biases (E, 2 x hidden) and (E, d). The
tensors are the same numbers, so a migrated model computes what the old one did.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

#: One expert's tensor in the format-1 layout: (module prefix, expert, projection, weight or bias).
PER_EXPERT = re.compile(r"(.*\.)experts\.(\d+)\.(gate|up|down)\.(weight|bias)")


def routes(metadata: Mapping[str, str]) -> bool:
    """Whether the file's config names the ``moe`` MLP (a damaged config: no; ``read`` reports it)."""
    try:
        mlp = json.loads(metadata["zoo.config"]).get("mlp")
    except (KeyError, ValueError, AttributeError, RecursionError):
        return False
    return mlp == "moe" or (isinstance(mlp, dict) and mlp.get("name") == "moe")


def stack_experts(
    metadata: Mapping[str, str], tensors: Mapping[str, Any], from_format: int
) -> tuple[dict[str, str], dict[str, Any]] | None:
    """Format 1 -> 2 for an MoE's checkpoint: each layer's per-expert tensors stacked
    (see the module's docstring); None for another step or a model without the ``moe`` MLP."""
    if from_format != 1 or not routes(metadata):
        return None
    kept: dict[str, Any] = {}
    layers: dict[tuple[str, str], dict[tuple[int, str], Tensor]] = {}
    for name, tensor in tensors.items():
        match = PER_EXPERT.fullmatch(name)
        if match is None:
            kept[name] = tensor
        else:
            prefix, expert, projection, kind = match.groups()
            layers.setdefault((prefix, kind), {})[int(expert), projection] = tensor
    for (prefix, kind), parts in layers.items():
        count = 1 + max(expert for expert, _ in parts)
        if len(parts) != 3 * count:
            raise ValueError(f"{prefix}experts holds {len(parts)} {kind} tensors, not 3 for each of {count} experts")
        pairs = [torch.cat([parts[e, "gate"], parts[e, "up"]]) for e in range(count)]
        kept[f"{prefix}experts.gate_up.{kind}"] = torch.stack(pairs)
        kept[f"{prefix}experts.down.{kind}"] = torch.stack([parts[e, "down"] for e in range(count)])
    return dict(metadata), kept

"""The names training takes, torch-free: precisions, strategies and loggers, so that
``zoo train -h`` lists them without importing torch."""

from __future__ import annotations

from collections.abc import Sequence

from zoo.errors import ConfigError

#: The training precisions (``--dtype``); ``zoo.training.PRECISIONS`` maps each to the dtype it autocasts to.
PRECISION_NAMES = ("fp32", "bf16", "fp16")
#: How a run spreads over processes (``--strategy``; ``zoo.training.distributed``).
STRATEGIES = ("auto", "single", "ddp", "fsdp")
#: The loggers ``--log`` may name, beside metrics.jsonl (always written); each is written
#: by its own library (csv: the standard library's; the others are extras of the same name).
LOGGERS = ("csv", "tensorboard", "wandb")


def check_loggers(names: Sequence[str]) -> tuple[str, ...]:
    """``names`` checked against ``LOGGERS``; an error listing them otherwise."""
    unknown = [n for n in names if n not in LOGGERS]
    if unknown:
        raise ConfigError(
            f"unknown logger {', '.join(map(repr, unknown))}; --log takes a comma-separated list of "
            f"{', '.join(LOGGERS)} (metrics.jsonl is always written)"
        )
    return tuple(dict.fromkeys(names))

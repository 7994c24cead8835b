"""``KEY=VALUE`` overrides, as the ``zoo`` command's ``--set`` takes them: values read as
JSON, else TOML, else text; dotted keys reach into components and dropout."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Iterable
from typing import Any

from zoo.errors import ConfigError, did_you_mean
from zoo.nn.config import ModelConfig
from zoo.nn.registry import KINDS


def parse_value(raw: str) -> Any:
    """A ``--set`` value as JSON, else as a TOML value, else the text itself.

    ``2`` -> 2, ``0.1`` -> 0.1, ``false`` -> False, ``[1, 2]`` -> [1, 2],
    ``{"n_kv_heads": 2}`` -> a dict, ``eager`` -> "eager".
    """
    text = raw.strip()
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        value = tomllib.loads(f"value = {text}")["value"]
    except tomllib.TOMLDecodeError:
        return text
    return value if isinstance(value, (str, int, float, bool, list, dict)) else text


def parse_sets(items: Iterable[str]) -> dict[str, Any]:
    """``["n_layers=2", "attention.name=eager", "attention.n_kv_heads=2"]`` as overrides.

    Dotted keys reach into components and dropout: the example gives
    ``{"n_layers": 2, "attention": {"name": "eager", "n_kv_heads": 2}}``, which
    ``zoo.get_config`` applies like keyword overrides.
    """
    overrides: dict[str, Any] = {}
    fields = list(ModelConfig.model_fields)
    for item in items:
        key, sep, raw = item.partition("=")
        path = key.strip().split(".")
        if not sep or not all(path):
            raise ConfigError(
                f"--set {item!r}: expected KEY=VALUE, e.g. --set n_layers=2, "
                f"--set attention.name=eager or --set dropout=0"
            )
        if path[0] not in fields:
            raise ConfigError(
                f"--set {item!r}: {path[0]!r} is not a config field.{did_you_mean(path[0], fields, n=2, cutoff=0.6)} "
                f"Fields: {', '.join(fields)}."
            )
        value = parse_value(raw)
        target = overrides
        for depth, part in enumerate(path[:-1]):
            current = target.get(part)
            if current is None:
                current = target[part] = {}
            elif isinstance(current, str) and depth == 0 and part in KINDS:
                current = target[part] = {"name": current}  # attention=eager, then attention.x=1
            elif not isinstance(current, dict):
                raise ConfigError(
                    f"--set {item!r}: {'.'.join(path[: depth + 1])} is already set to "
                    f"{current!r} by an earlier --set; set it once, as a whole or by its keys"
                )
            target = current
        leaf = path[-1]
        if len(path) == 1 and leaf in KINDS and isinstance(value, str) and isinstance(target.get(leaf), dict):
            target[leaf] = {**target[leaf], "name": value}  # attention.x=1, then attention=eager
        else:
            target[leaf] = value
    return overrides

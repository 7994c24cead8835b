"""What the commands of ``zoo`` share: where they add their subcommands (with the parent
parsers of ``--debug``, ``--json``, ``--set`` and ``--context``), argument types, and
the config a NAME argument with ``--set`` overrides stands for."""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import zoo
from zoo.checkpoint import inspect
from zoo.cli.render import Ui
from zoo.config import ModelConfig, parse_sets, preset_description, resolve_config, validate_config
from zoo.errors import InteropError
from zoo.interop.hf import config_from_hf
from zoo.interop.hub import is_hub_id, local_or_snapshot

#: A command's handler: the parsed arguments and the output in, the exit status out.
Handler = Callable[[argparse.Namespace, Ui], int]


@dataclasses.dataclass(frozen=True)
class Commands:
    """The ``zoo`` parser's subcommands and the parent parsers the commands share; each
    command module's ``add_parsers`` adds its commands here."""

    sub: argparse._SubParsersAction[argparse.ArgumentParser]
    common: argparse.ArgumentParser  # --debug, on every command
    json_flag: argparse.ArgumentParser  # --json
    sets: argparse.ArgumentParser  # --set KEY=VALUE
    context: argparse.ArgumentParser  # --context N

    def add(
        self, name: str, handler: Handler, help: str, parents: Sequence[argparse.ArgumentParser] = ()
    ) -> argparse.ArgumentParser:
        """A subcommand ``name`` run by ``handler``, with ``--debug`` and ``parents``' flags."""
        p = self.sub.add_parser(name, help=help, description=help, parents=[self.common, *parents])
        p.set_defaults(handler=handler)
        return p


def seed(text: str) -> int:
    """``--seed``: an integer torch can seed with, 0 to 2**64 - 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if not 0 <= value < 1 << 64:
        raise argparse.ArgumentTypeError(f"must lie in 0 .. 2**64-1 (18446744073709551615), got {text}")
    return value


def json_object(path: Path) -> dict[str, Any]:
    """The JSON object in ``path`` (a ``config.json``), else an ``InteropError``."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise InteropError(f"cannot read {path}: {err}") from err
    if not isinstance(data, dict):
        raise InteropError(f"{path} does not hold a JSON object")
    return data


def load_config(name: str, sets: Iterable[str] = ()) -> tuple[ModelConfig, str]:
    """The config of a preset, or of a checkpoint file or folder, with ``--set`` overrides.

    Returns the config and what to call it: the preset with its description, or the path.
    """
    overrides = parse_sets(sets)
    if name not in zoo.list_models() and ((Path(name) / "config.json").is_file() or is_hub_id(name)):
        folder, commit = local_or_snapshot(name, need="config")  # a Hugging Face folder or hub id: its config.json
        config_path = folder / "config.json"
        hf = json_object(config_path)
        fields = config_from_hf(hf, where=str(config_path))
        base = validate_config(fields, source=str(config_path))
        return resolve_config(base, overrides), f"{name} (at {commit})" if commit else name
    if name not in zoo.list_models() and Path(name).exists():
        info = inspect(name, verify=False)
        return resolve_config(info.config, overrides), name
    config = zoo.get_config(name, **overrides)  # PresetError for an unknown name
    description = preset_description(name)
    return config, f"{name}: {description}" if description else name

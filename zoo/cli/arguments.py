"""What the commands' arguments stand for when a command runs: the config a NAME argument
with ``--set`` overrides names, and the outputs (and inputs) a command refuses to write over.
The parsers that take them are ``zoo.cli.parsers``; the flags they share, ``zoo.cli.options``."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import zoo
from zoo.checkpoint import inspect
from zoo.checkpoint.owned import check_versions_only, refuse_inputs_inside
from zoo.checkpoint.store import SUFFIX, check_output_file
from zoo.errors import InputError, InteropError, printable
from zoo.files import read_json
from zoo.interop.hf import config_from_hf
from zoo.interop.hub import is_hub_id, local_or_snapshot
from zoo.nn.config import ModelConfig, preset_description, resolve_config, validate_config
from zoo.nn.sets import parse_sets

#: The other way out for a checkpoint output (``zoo build``, ``zoo convert``).
OR_A_VERSIONS_FOLDER = "give a new file name or a checkpoint folder (which gets a new version)"


def refuse_existing_file(out: str, overwrite: bool, instead: str = "give a new file name", flag: str = "-o") -> None:
    """A single-file output (``-o FILE``) must be a regular file or absent, in a folder
    that exists and can be written; one that exists is refused unless ``--overwrite``:
    the zoo never replaces a file it was not asked to. ``instead`` is the other way out
    the message offers (``check_output_file``, which the API's writers use too)."""
    check_output_file(out, InputError, overwrite=overwrite, what=flag, instead=instead)


def refuse_checkpoint_out(out: str, overwrite: bool) -> None:
    """``-o`` of a command that saves a checkpoint (``zoo build``, ``zoo convert --from-*``):
    a ``.safetensors`` file is a single-file output (its folder is made); any other path is
    a folder that gets the next version, which must be new, empty, or hold versions only."""
    if not out or out.endswith(SUFFIX):
        check_output_file(
            out, InputError, overwrite=overwrite, what="-o", instead=OR_A_VERSIONS_FOLDER, make_parents=True
        )
    elif os.path.lexists(out) and not Path(out).is_dir():
        raise InputError(
            f"-o {printable(out)} exists and is not a folder; a path without the {SUFFIX} suffix is a checkpoint "
            f"folder: give a new folder, or a path ending in {SUFFIX}"
        )
    else:
        check_versions_only(Path(out), InputError)


def refuse_overwriting_inputs(out: str | None, overwrite: bool, inputs: Mapping[str, object]) -> None:
    """With ``--overwrite``, refuse an ``-o/--out`` that is or holds an input of the command
    (``refuse_inputs_inside``): ``inputs`` maps the flag that gives each (``--data``), or
    what a positional argument is, to its value (a path, a list of them, or anything else)."""
    if overwrite and out:
        refuse_inputs_inside(out, inputs.items(), InputError)


def json_object(path: Path) -> dict[str, Any]:
    """The JSON object in ``path`` (a ``config.json``), else an ``InteropError``."""
    data = read_json(path, InteropError, "config.json")  # bounded, finite, not nested past the stack
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

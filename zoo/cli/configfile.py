"""Command config files: ``zoo train --config run.toml``, ``zoo ablate --config study.toml``.

A file is TOML whose keys are the command's flags, spelled as the flag without its
dashes (``batch_size`` or ``batch-size``; ``from`` and ``to`` for ablate's presets;
``name`` for train's NAME), with values of the flag's kind: ``steps = 200``,
``lr = 3e-3``, ``compile = true``, ``log = ["csv", "wandb"]``. ``set`` is a table of
model fields (``[set]`` then ``n_layers = 2``) or a list of ``"FIELD=VALUE"``. What the
file gives becomes the flags' defaults, so a flag on the command line overrides it.

``zoo train`` writes what it ran with (``run.toml``, the same format, every setting
resolved) into its ``--out`` folder, and ``--resume`` reads it back first: a run can be
continued, or repeated (``zoo train --config RUN/run.toml -o NEW``), from its folder alone.
"""

from __future__ import annotations

import argparse
import difflib
import json
import math
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from zoo.checkpoint import write_atomically
from zoo.errors import ConfigError, printable
from zoo.files import read_text

#: Largest config file read (a run.toml is a few hundred bytes).
CONFIG_LIMIT = 1 << 20
RUN_CONFIG = "run.toml"  # the resolved settings `zoo train` writes into its out folder
# Flags that say how to run this command line, not what to run: never in a file.
NOT_IN_FILES = {"help", "debug", "config", "json", "renamed_flags", "handler", "config_parser"}
# Switches that destroy what is there: said on the command line for the run they start, never
# in a file, which travels (a shared study.toml must not wipe the folder of whoever runs it).
COMMAND_LINE_ONLY = {"overwrite"}


def file_keys(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """Every key a config file of ``parser``'s command may hold, to the flag it sets."""
    keys: dict[str, argparse.Action] = {}
    for action in parser._actions:
        if action.dest in NOT_IN_FILES or action.help == argparse.SUPPRESS:
            continue
        keys[action.dest] = action
        for flag in action.option_strings:
            if flag.startswith("--"):
                keys[flag.removeprefix("--").replace("-", "_")] = action
    return keys


def read_config(path: str | Path, parser: argparse.ArgumentParser) -> dict[str, Any]:
    """The flag defaults ``path`` sets for ``parser``'s command: ``{dest: value}``."""
    text = read_text(path, ConfigError, "config file", limit=CONFIG_LIMIT)  # a regular file, bounded, UTF-8
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"the config file {printable(str(path))} is not valid TOML: {err}") from err
    except (RecursionError, ValueError) as err:  # nesting past the stack, an integer of thousands of digits
        raise ConfigError(
            f"the config file {printable(str(path))} is not a config file the zoo reads "
            f"({type(err).__name__}: {printable(str(err), 100)}); fix it, or pass the flags on the command line"
        ) from err
    keys = file_keys(parser)
    defaults: dict[str, Any] = {}
    given: dict[str, str] = {}  # each flag's dest, to the key that set it
    for key, value in raw.items():
        action = keys.get(key.replace("-", "_"))
        if action is not None and action.dest in given:
            raise ConfigError(
                f"{printable(str(path))}: {printable(given[action.dest], 60)!r} and {printable(key, 60)!r} both set "
                f"{_flag(action)}; keep one of them"
            )
        if action is not None:
            given[action.dest] = key
        if action is None:
            near = difflib.get_close_matches(key.replace("-", "_"), list(keys), n=3)
            hint = f" Did you mean {' or '.join(map(repr, near))}?" if near else ""
            raise ConfigError(
                f"{printable(str(path))}: {printable(key, 60)!r} is not a flag of `zoo {parser.prog.split()[-1]}`.{hint} "
                f"Keys are the flags without dashes: {', '.join(sorted(k for k in keys if k == keys[k].dest))}"
            )
        defaults[action.dest] = _flag_value(action, value, f"{printable(str(path))}: {key}")
        if action.dest in COMMAND_LINE_ONLY and defaults[action.dest] is True:
            raise ConfigError(
                f"{printable(str(path))}: {printable(key, 60)} = true is refused: --{action.dest} removes what is "
                f"in the output, so it is taken only from the command line, never from a file; remove it from "
                f"the file and pass --{action.dest} yourself"
            )
    return defaults


def _flag_value(action: argparse.Action, value: Any, where: str) -> Any:
    """``value`` from TOML as ``action`` would store it; strings go through the flag's
    own type (argparse converts string defaults), so a file is checked like a command line."""
    if isinstance(action, argparse._AppendAction):
        if isinstance(value, Mapping):  # [set] n_layers = 2
            return [f"{k}={json.dumps(_scalar(v, f'{where}.{printable(k, 60)}'))}" for k, v in value.items()]
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return list(value)
        raise ConfigError(f"{where}: expected a list of strings or a table, got {value!r}")
    if action.nargs == 0:  # a switch
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true or false, got {value!r}")
        return value
    if action.nargs not in ("*", "+"):
        _check_kind(action, value, where)
    if isinstance(value, list):
        if action.nargs in ("*", "+"):
            return [str(v) for v in value]
        value = ",".join(str(v) for v in value)
    if isinstance(value, (dict, bool)):
        raise ConfigError(f"{where}: expected a value for {'/'.join(action.option_strings) or action.dest}")
    text = str(value)
    if action.choices is not None and text not in action.choices:
        raise ConfigError(f"{where}: {text!r} is not one of {', '.join(map(str, action.choices))}")
    if action.type is None:
        return text
    try:
        return action.type(text)  # type: ignore[operator]
    except (argparse.ArgumentTypeError, ValueError, TypeError) as err:
        raise ConfigError(f"{where}: {err}") from err


#: The flag types that read a number, to what a file must write for them.
NUMBER_TYPES = {"count": "a whole number", "seed": "a whole number", "int": "a whole number", "float": "a number"}


def _flag(action: argparse.Action) -> str:
    return next((f for f in action.option_strings if f.startswith("--")), action.dest)


def _check_kind(action: argparse.Action, value: Any, where: str) -> None:
    """Refuse a TOML value of another kind than the flag's: text for a number
    (``workers = "2"``), or a number for a flag that takes text (``out = 5``, a folder)."""
    number = NUMBER_TYPES.get(getattr(action.type, "__name__", ""))
    if number is not None and not isinstance(value, (int, float)):
        shown = f"the string {printable(value, 60)!r}" if isinstance(value, str) else printable(value, 60)
        example = value.strip() if isinstance(value, str) and _numeric(value) else "2"
        raise ConfigError(
            f"{where}: {_flag(action)} takes {number}, got {shown}; write the number without quotes "
            f"({where.rpartition(': ')[2]} = {printable(example, 20)})"
        )
    if action.type is None and not isinstance(value, str):
        kinds = {list: "a list", dict: "a table", bool: "true or false"}
        kind = (
            "a number" if isinstance(value, (int, float)) else kinds.get(type(value), f"a TOML {type(value).__name__}")
        )
        raise ConfigError(
            f"{where}: {_flag(action)} takes text ({action.metavar or 'a name or path'}), got {kind} "
            f'({printable(value, 60)}); quote it ({where.rpartition(": ")[2]} = "{printable(value, 20)}")'
        )


def _numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _scalar(value: Any, where: str) -> Any:
    """A model field's value from a ``[set]`` table: a string, number or boolean, or a list
    of them; a TOML date or time, or a nested table, is refused naming the key."""
    if isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, list):
        return [_scalar(item, where) for item in value]
    kind = "a table" if isinstance(value, Mapping) else f"a TOML {type(value).__name__}"
    raise ConfigError(
        f"{where}: a model field takes a string, number, boolean or list, not {kind} ({printable(value, 60)}); "
        f'quote it to pass it as text (key = "...")'
    )


def write_config(path: Path, values: Mapping[str, Any], header: str) -> Path:
    """``values`` as a config file (``None`` left out), atomically."""
    lines = [f"# {line}" for line in header.splitlines()]
    tables = []
    for key, value in values.items():
        if value is None or value == [] or value == ():
            continue
        if key == "set":  # a table of model fields
            tables += ["", "[set]"] + [f"{field} = {_toml(v)}" for field, v in _fields(value).items()]
            continue
        lines.append(f"{key} = {_toml(value)}")
    text = "\n".join([*lines, *tables]) + "\n"
    return write_atomically(path, lambda file: file.write_text(text, encoding="utf-8"), ConfigError)


def _fields(sets: list[str]) -> dict[str, Any]:
    """``["n_layers=2"]`` as ``{"n_layers": 2}`` (values read as JSON, else kept as text)."""
    fields: dict[str, Any] = {}
    for item in sets:
        key, _, text = item.partition("=")
        try:
            fields[key.strip()] = json.loads(text)
        except ValueError:
            fields[key.strip()] = text
    return fields


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ConfigError(f"cannot write {value} to a config file")
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{json.dumps(str(k))} = {_toml(v)}" for k, v in value.items()) + " }"
    return json.dumps(str(value), ensure_ascii=False)  # a TOML basic string: JSON's escapes are TOML's

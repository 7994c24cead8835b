"""The parser of ``zoo ablate`` (run by ``zoo.cli.ablate``): a flag per option of
``zoo.ablate.options`` (each option declared once there), in the shared vocabulary."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import Field
from typing import Any

from zoo.ablate.options import (
    AnyOptions,
    Flag,
    Options,
    StudyOptions,
    flag_name,
    option_fields,
    parse_scales,
    shown_default,
)
from zoo.cli.options import (
    Commands,
    RenamedFlag,
    add_batch_size,
    add_config,
    add_out,
    add_overwrite,
    add_seed,
    add_sets,
    positive,
    seed,
)
from zoo.errors import InputError

#: The model fields `zoo ablate --set` takes (both sides are trained at this scale), to
#: the option each sets.
SCALE_FIELDS = {
    flag_name(f).partition(" ")[2]: f.name for f, _ in option_fields(Options) if flag_name(f).startswith("--set ")
}
STUDY_GROUP = "a study: one ablation per rung x rate x warm-up, each in a folder of --out"


def add_parsers(commands: Commands) -> None:
    """Add the parsers of ``zoo ablate`` to ``commands``."""
    p = commands.add(
        "ablate",
        "cmd_ablate",
        [commands.json_flag],
    )
    add_config(p, "ablate")
    add_option_flags(p, Options)
    add_option_flags(p, StudyOptions, STUDY_GROUP)
    p.add_argument(
        "--docs",
        default=None,
        metavar="FILE",
        help="write the results as a generated region of FILE (a Markdown page), named after --out, and the results "
        "file beside it as studies/NAME.json (default: none)",
    )
    add_overwrite(
        p,
        "replace an --out folder this ablation did not make (or another's) whole, everything in it removed "
        "(default: refuse it)",
    )


def add_option_flags(p: argparse.ArgumentParser, kind: type[AnyOptions], group: str | None = None) -> None:
    """A flag per option of ``kind`` (``zoo.ablate.options``), its help stating the
    default: the shared vocabulary's own where it has one, one ``--set`` for the model
    fields of the scale, an old spelling hidden."""
    where = p.add_argument_group(group) if group else p
    for f, flag in option_fields(kind):
        name, help = flag_name(f), f"{flag.help} {shown_default(f)}"
        if name.startswith("--set "):
            if f.name == next(iter(SCALE_FIELDS.values())):  # one --set for them all, where the first is
                add_sets(p, help=_sets_help())
        elif name in VOCABULARY:
            VOCABULARY[name][1](p, flag, help)
        else:
            shown = {"choices": flag.choices} if flag.choices else {"metavar": flag.metavar} if flag.metavar else {}
            where.add_argument(name, dest=f.name, default=None, help=help, **shown, **KIND_ARGUMENTS[flag.kind])
        if flag.old:
            new = f"{name}=N" if name.startswith("--set ") else name
            parse = KIND_ARGUMENTS[flag.kind]["type"]
            p.add_argument(flag.old, dest=option_dest(f), type=parse, action=RenamedFlag, new=new, metavar="N")


def _sets_help() -> str:
    shown = {f.name: flag.shown if f.default is None else f.default for f, flag in option_fields(Options)}
    scale = ", ".join(f"{field}={shown[option]}" for field, option in SCALE_FIELDS.items())
    return f"the scale both sides are trained at: {', '.join(SCALE_FIELDS)}; repeatable (default: {scale})"


#: Flags of the shared vocabulary (``zoo.cli.options``), each added by its own function.
VOCABULARY: dict[str, tuple[str, Callable[[argparse.ArgumentParser, Flag, str], None]]] = {
    "--seed": ("seed", lambda p, flag, help: add_seed(p, help)),
    "--batch-size": ("batch_size", lambda p, flag, help: add_batch_size(p, help)),
    "-o": ("out", lambda p, flag, help: add_out(p, flag.help, metavar="DIR", required=False, default=flag.shown)),
}


def option_dest(f: Field[Any]) -> str:
    """Where an option's flag leaves its value on the parsed arguments."""
    name = flag_name(f)
    return VOCABULARY[name][0] if name in VOCABULARY else f.name


def vocab_limit(text: str) -> int | str:
    """``--vocab-limit``: a count, or ``all`` for every GPT-2 token in the text."""
    if text == "all":
        return "all"
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of tokens or 'all', got {text!r}") from None


def axis_list(text: str) -> list[str]:
    """``--swaps``: comma-separated config fields, ``placement,position`` (``a+b``: a paired row)."""
    return [axis.strip() for axis in text.split(",") if axis.strip()]


def scale_list(text: str) -> list[tuple[int, int]]:
    """``--scales``: ``64x2,128x4``."""
    try:
        return parse_scales(text)
    except InputError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def warmup_list(text: str) -> list[int | None]:
    """``--warmup-sweep``: comma-separated warm-up steps, ``0,50`` (``auto``: a tenth of the steps)."""
    try:
        steps = [None if part.strip() == "auto" else int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated steps such as 0,50, got {text!r}") from None
    return _some(steps, text, "warm-up steps such as 0,50")


def factor_list(text: str) -> list[int]:
    """``--eval-lengths``: comma-separated whole multiples of ``--seq-len``, ``2,4``."""
    try:
        factors = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated whole factors such as 2,4, got {text!r}") from None
    return _some(factors, text, "whole factors such as 2,4")


def rate_list(text: str) -> list[float]:
    """``--lr-grid``: comma-separated learning rates, ``1e-3,3e-3,1e-2``."""
    try:
        rates = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated rates such as 1e-3,3e-3, got {text!r}") from None
    return _some(rates, text, "rates such as 1e-3,3e-3")


def _some(values: list[Any], text: str, example: str) -> list[Any]:
    """``values`` unless the list is empty (``','``: commas and nothing between them)."""
    if not values:
        raise argparse.ArgumentTypeError(f"expected at least one value, comma-separated {example}; got {text!r}")
    return values


#: How the command line reads each kind of option (``zoo.ablate.options.KINDS``): the
#: arguments of its flag, and (``KIND_VALUES``) what turns a parsed value into the option's.
KIND_ARGUMENTS: dict[str, dict[str, Any]] = {
    "text": {},
    "choice": {},
    "path": {},
    "count": {"type": positive},
    "seed": {"type": seed},
    "int": {"type": int},
    "float": {"type": float},
    "switch": {"action": "store_true"},
    "vocab": {"type": vocab_limit},
    "rates": {"type": rate_list},
    "axes": {"type": axis_list},
    "optional-axes": {"type": axis_list, "nargs": "?", "const": True},
    "scales": {"type": scale_list},
    "warmups": {"type": warmup_list},
    "factors": {"type": factor_list},
}

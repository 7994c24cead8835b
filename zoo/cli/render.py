"""How the ``zoo`` command shows things: the ``Ui`` (tables and lines on stdout, JSON,
errors and progress on stderr), tables whose cells stay plain text, and the formats of
numbers and config values. The only module of the zoo that prints, with the commands."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import sys
from collections.abc import Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from zoo.errors import number, printable
from zoo.nn.config import ModelConfig
from zoo.nn.registry import KINDS, default_registry
from zoo.summary import ModelSummary

# -- formats -----------------------------------------------------------------------------


def fmt_int(n: int | None) -> str:
    return "-" if n is None else f"{n:,}"


def fmt_flops(x: float) -> str:
    """``284812800`` -> ``284.8 M``: FLOPs with an SI prefix."""
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.1f} {prefix}"
    return f"{x:.0f}"


def fmt_bytes(n: int) -> str:
    for scale, unit in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def fmt_value(value: Any, *, nested: bool = False, depth: int = 0) -> str:
    """A config value in a table: component specs as ``name(option=value, ...)``, other
    mappings as ``key=value, ...`` (in braces when nested). Strings are shown printable
    and clipped (they may come from a file); nesting past 8 levels shows as ``…``."""
    if depth > 8:
        return "…"
    if hasattr(value, "model_dump"):
        value = value.model_dump()
    if isinstance(value, Mapping):
        value = dict(value)
        name = value.pop("name", None)
        inner = ", ".join(f"{printable(k, 60)}={fmt_value(v, nested=True, depth=depth + 1)}" for k, v in value.items())
        if name is not None:
            return f"{fmt_value(name, depth=depth + 1)}({inner})" if inner else fmt_value(name, depth=depth + 1)
        return f"{{{inner}}}" if nested else inner
    if isinstance(value, float):
        return number(value)
    if isinstance(value, (list, tuple)):
        return "(" + ", ".join(fmt_value(v, nested=True, depth=depth + 1) for v in value) + ")"
    return printable(value)


def terminal_text(text: str) -> str:
    """Generated ``text`` safe for a terminal: newlines and tabs kept, every other control
    or unprintable character (ESC of ANSI sequences, BEL, BS, CR, bidi overrides) shown as
    its escape (``\\x1b``), so what a model spells cannot move the cursor, clear the screen
    or rewrite the title."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c in "\n\t" else repr(c)[1:-1] for c in text)


def jsonable(value: Any) -> Any:
    """Dataclasses, pydantic models, paths and tuples as plain JSON values."""
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


# -- output ------------------------------------------------------------------------------


#: Output width when stdout is not a terminal: wide enough that nothing is clipped.
UNLIMITED_WIDTH = 1 << 16


class PipeConsole(Console):
    """A console that reports a closed pipe to ``main`` (exit 0) instead of rich's
    default, which exits with status 1."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError


class Ui:
    """Where output goes: rich tables on stdout, JSON on stdout, errors and progress on
    stderr. Piped output is not width-limited, so tables keep every digit."""

    def __init__(self, *, json_mode: bool = False) -> None:
        self.out = PipeConsole(highlight=False)
        if not self.out.is_terminal:
            self.out = PipeConsole(highlight=False, width=UNLIMITED_WIDTH)
        self.err = Console(stderr=True, highlight=False)
        self.json_mode = json_mode

    def json(self, data: Any) -> None:
        sys.stdout.write(json.dumps(jsonable(data), indent=2) + "\n")
        sys.stdout.flush()

    def print(self, *things: Any, **kwargs: Any) -> None:
        """Print renderables; a table narrower terminals cannot hold without cutting a
        number or a name is printed at the width it needs (the terminal wraps its lines).

        Not to a terminal (a pipe, a file), each is printed as its content only: a table's
        title and caption on lines of their own (never wrapped to the table's width), no
        padding past the last character of a line, no blank first or last line."""
        if not self.out.is_terminal:
            for thing in things:
                self._print_plain(thing, **kwargs)
            return
        unlimited = self.out.options.update_width(UNLIMITED_WIDTH)
        needed = max(
            (Measurement.get(self.out, unlimited, t).minimum for t in things if isinstance(t, Table)), default=0
        )
        width = self.out.width
        if needed > width:
            self.out.width = needed
        try:
            self.out.print(*things, **kwargs)
        finally:
            self.out.width = width

    def _print_plain(self, thing: Any, **kwargs: Any) -> None:
        title = caption = None
        if isinstance(thing, Table):
            title, caption = thing.title, thing.caption
            thing = copy.copy(thing)
            thing.title = thing.caption = None
        if title is not None:
            self.line(str(title))
        with self.out.capture() as captured:
            self.out.print(thing, **kwargs)
        lines = [line.rstrip() for line in captured.get().splitlines()]
        while lines and not lines[0]:
            lines.pop(0)
        while lines and not lines[-1]:
            lines.pop()
        if lines:
            self.out.file.write("\n".join(lines) + "\n")
            self.out.file.flush()
        if caption is not None:
            self.line(str(caption))

    def status(self, text: str) -> Any:
        """A spinner on stderr while something runs (``with ui.status(...):``); ``text`` is
        plain (a path's ``[/]`` is not rich markup) with control characters escaped."""
        return self.err.status(Text(printable(text, None)))

    def line(self, text: str, style: str = "") -> None:
        """One line of plain text (no markup, control characters escaped), never wrapped."""
        self.out.print(Text(printable(text, None), style=style), soft_wrap=True)

    def error(self, message: str) -> None:
        """One red line on stderr."""
        self._stderr_line("error", message, "red")

    def warn(self, message: str) -> None:
        """One yellow line on stderr."""
        self._stderr_line("warning", message, "yellow")

    def _stderr_line(self, label: str, message: str, color: str) -> None:
        message = printable(" ".join(message.split("\n")), None)
        self.err.print(Text(f"{label}: ", style=f"bold {color}") + Text(message, style=color), soft_wrap=True)


# -- tables ------------------------------------------------------------------------------


class SafeTable(Table):
    """A table whose string cells are plain text: never read as rich markup (a file's
    ``[link=…]`` or ``[/bold]`` stays text) and with control characters escaped."""

    def add_row(self, *renderables: Any, **kwargs: Any) -> None:
        super().add_row(*(_plain_cell(r) for r in renderables), **kwargs)


def _plain_cell(cell: Any) -> Any:
    """A table cell as inert text: a string escaped, and a ``Text`` too (a plugin's error or
    a preset's description reaches a cell as ``Text`` with a style), keeping its style and
    its line breaks."""
    if isinstance(cell, str):
        return Text(printable(cell, None))
    if isinstance(cell, Text) and not cell.plain.replace("\n", "").isprintable():
        shown = "\n".join(printable(line, None) for line in cell.plain.split("\n"))
        return Text(shown, style=cell.style, justify=cell.justify, overflow=cell.overflow, no_wrap=cell.no_wrap)
    return cell


def new_table(title: str | None = None, *columns: str, right: Iterable[str] = (), clip: Iterable[str] = ()) -> Table:
    """A table; ``right`` columns are right-aligned.

    Without ``clip``, the first column stays on one line and the others may fold. With
    it, only the ``clip`` columns give way when the terminal is narrow: they take the
    width the others leave, and ``clipped`` text in them is cut with "…".
    """
    table = SafeTable(
        title=Text(printable(title, None)) if title is not None else None,
        box=box.SIMPLE_HEAD,
        title_justify="left",
        title_style="bold",
        caption_justify="left",
    )
    right, clip = set(right), set(clip)
    for index, column in enumerate(columns):
        justify: Literal["right", "left"] = "right" if column in right else "left"
        header = Text(printable(column, None))  # a column may be named by a path: plain text, never markup
        if clip:
            table.add_column(header, justify=justify, no_wrap=column not in clip, overflow="ellipsis")
        else:
            table.add_column(header, justify=justify, overflow="fold", no_wrap=index == 0)
    return table


def clipped(text: str) -> Text:
    """Text shown on one line, cut with "…" where the column is too narrow."""
    return Text(text, no_wrap=True, overflow="ellipsis")


def config_table(config: ModelConfig, title: str = "config", *, providers: bool = True) -> Table:
    """Each config field and its value; with ``providers``, who provides each component."""
    table = new_table(title, "field", "value", *(["provided by"] if providers else []))
    for field, value in config.model_dump().items():
        if value is None or (field == "layer_pattern" and not value):
            continue
        if field == "layer_pattern":  # one row per entry: which layers it makes, and how they differ
            period = len(value)
            for j, entry in enumerate(value):
                layers = ", ".join(str(i) for i in range(j, config.n_layers, period))
                label = ("layers " if "," in layers else "layer ") + layers
                table.add_row(label, fmt_value(entry) if entry else "(the model's)", *([""] * providers))
            continue
        row = [field, fmt_value(value)]
        if providers:
            row.append(default_registry().get(field, value["name"]).provider if field in KINDS else "")
        table.add_row(*row)
    return table


def mapping_table(title: str, key_column: str, mapping: Mapping[Any, Any]) -> Table:
    """Each key of ``mapping`` and its value, formatted as a config value."""
    table = new_table(title, key_column, "value")
    for key, value in mapping.items():
        table.add_row(printable(key), fmt_value(value))
    return table


def summary_table(summary: ModelSummary, title: str = "parameters and forward FLOPs per token") -> Table:
    flops = f"FLOPs/token (ctx {summary.context})"
    table = new_table(title, "group", "parameters", "share", flops, right=("parameters", "share", flops))
    total = summary.total_parameters or 1
    tied = {name for name, _ in summary.tied}
    for group, count in summary.parameters.items():
        label = group
        if group == "head" and count == 0 and any(name.startswith("head") for name in tied):
            label = "head (tied to embeddings)"
        share = f"{100 * count / total:.1f}%"
        table.add_row(label, fmt_int(count), share, fmt_flops(summary.flops_per_token.get(group, 0.0)))
    table.add_section()
    bold = [Text(fmt_int(summary.total_parameters)), Text(fmt_flops(summary.total_flops_per_token))]
    table.add_row(Text("total"), bold[0], "", bold[1], style="bold")
    table.caption = (
        f"FLOPs: matmuls of one forward pass, 2 per multiply-add; of them attention scores "
        f"(q·kᵀ and weights·v over {summary.context} tokens): {fmt_flops(summary.score_flops_per_token)}"
    )
    return table

"""The ``zoo`` command: look at presets and components, build, inspect, convert,
generate, ablate and benchmark. The only module of the zoo that prints (with rich).

Every subcommand maps onto the library: ``zoo info gpt2-small --set n_layers=2`` is
``zoo.get_config("gpt2-small", n_layers=2)`` plus ``zoo.summary.summarize``. Errors
the zoo raises on purpose (``ZooError``) print as one red line and exit 1; ``--debug``
shows the traceback. ``--json`` prints machine-readable output instead of tables.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import json
import math
import os
import re
import subprocess
import sys
import tomllib
import traceback
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

import zoo
from zoo.config import ModelConfig, preset_description, resolve_config
from zoo.errors import ConfigError, InputError, ZooError, did_you_mean, printable
from zoo.registry import KINDS, default_registry

# -- parsing --set ---------------------------------------------------------------------


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


def load_config(name: str, sets: Iterable[str] = ()) -> tuple[ModelConfig, str]:
    """The config of a preset, or of a checkpoint file or folder, with ``--set`` overrides.

    Returns the config and what to call it: the preset with its description, or the path.
    """
    overrides = parse_sets(sets)
    if name not in zoo.list_models() and Path(name).exists():
        from zoo.checkpoint import inspect

        info = inspect(name, verify=False)
        return resolve_config(info.config, overrides), name
    config = zoo.get_config(name, **overrides)  # PresetError for an unknown name
    description = preset_description(name)
    return config, f"{name}: {description}" if description else name


# -- formatting ------------------------------------------------------------------------


def fmt_int(n: int | None) -> str:
    return "-" if n is None else f"{n:,}"


def fmt_flops(x: float) -> str:
    """``284812800`` -> ``284.8 M``: FLOPs with an SI prefix."""
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.1f} {prefix}"
    return f"{x:.0f}"


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
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        return "(" + ", ".join(fmt_value(v, nested=True, depth=depth + 1) for v in value) + ")"
    return printable(value)


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
        number or a name is printed at the width it needs (the terminal wraps its lines)."""
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


class SafeTable(Table):
    """A table whose string cells are plain text: never read as rich markup (a file's
    ``[link=…]`` or ``[/bold]`` stays text) and with control characters escaped."""

    def add_row(self, *renderables: Any, **kwargs: Any) -> None:
        super().add_row(*(Text(printable(r, None)) if isinstance(r, str) else r for r in renderables), **kwargs)


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
        if clip:
            table.add_column(column, justify=justify, no_wrap=column not in clip, overflow="ellipsis")
        else:
            table.add_column(column, justify=justify, overflow="fold", no_wrap=index == 0)
    return table


def clipped(text: str) -> Text:
    """Text shown on one line, cut with "…" where the column is too narrow."""
    return Text(text, no_wrap=True, overflow="ellipsis")


def config_table(config: ModelConfig, title: str = "config", *, providers: bool = True) -> Table:
    """Each config field and its value; with ``providers``, who provides each component."""
    table = new_table(title, "field", "value", *(["provided by"] if providers else []))
    for field, value in config.model_dump().items():
        if value is None:
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


def layers_label(config: ModelConfig) -> str:
    """``12``, or ``6+6`` for an encoder-decoder."""
    encoder = config.n_encoder_layers
    return f"{encoder}+{config.n_layers}" if encoder else str(config.n_layers)


# -- subcommands -----------------------------------------------------------------------


def cmd_list(args: argparse.Namespace, ui: Ui) -> int:
    from zoo.summary import count_parameters, meta_model

    names = zoo.list_models(args.pattern)
    if not names:
        raise zoo.PresetError(f"no preset matches {args.pattern!r}; available presets: {', '.join(zoo.list_models())}")
    entries = []
    for name in names:
        entry: dict[str, Any] = {"name": name, "description": preset_description(name)}
        try:
            config = zoo.get_config(name)
            counts, _ = count_parameters(*meta_model(config))
        except ZooError as err:  # one broken preset (say, a plugin's) does not hide the others
            entry["error"] = str(err)
        else:
            entry.update(
                architecture=config.architecture,
                layers=layers_label(config),
                d_model=config.d_model,
                n_heads=config.n_heads,
                d_ff=config.d_ff,
                vocab_size=config.vocab_size,
                parameters=sum(counts.values()),
                config=config,
            )
        entries.append(entry)
    if ui.json_mode:
        ui.json(entries)
        return 0
    table = new_table(
        None,
        "preset",
        "layers",
        "d_model",
        "heads",
        "d_ff",
        "vocab",
        "parameters",
        "description",
        right=("layers", "d_model", "heads", "d_ff", "vocab", "parameters"),
        clip=("description",),
    )
    for e in entries:
        if "error" in e:
            table.add_row(e["name"], *[""] * 6, Text(e["error"], style="red", overflow="fold"))
            continue
        table.add_row(
            e["name"],
            e["layers"],
            str(e["d_model"]),
            str(e["n_heads"]),
            str(e["d_ff"]),
            fmt_int(e["vocab_size"]),
            fmt_int(e["parameters"]),
            clipped(e["description"]),
        )
    ui.print(table)
    return 0


def option_defaults(options_model: Any) -> str:
    parts = []
    for name, field in options_model.model_fields.items():
        parts.append(f"{name}={fmt_value(field.default)}" if not field.is_required() else f"{name} (required)")
    return ", ".join(parts)


def cmd_components(args: argparse.Namespace, ui: Ui) -> int:
    found = zoo.components(args.kind)  # an unknown kind is a RegistryError with suggestions
    if ui.json_mode:
        ui.json(
            [
                {
                    "kind": c.kind,
                    "name": c.name,
                    "description": c.description,
                    "options": c.options_model.model_json_schema().get("properties", {}),
                    "provider": c.provider,
                    "plugin": c.plugin.name,
                    "distribution": c.plugin.distribution,
                    "version": c.plugin.version,
                }
                for c in found
            ]
        )
        return 0
    table = new_table(None, "kind", "name", "options", "provided by", "description", clip=("description",))
    for c in found:
        table.add_row(c.kind, c.name, option_defaults(c.options_model), c.provider, clipped(c.description))
    ui.print(table)
    if args.kind is None:
        ui.print(converters_table())
    return 0


def converters_table() -> Table:
    """The Hugging Face converters installed, with what they do and who provides them."""
    table = new_table(
        "Hugging Face converters",
        "architecture",
        "model_type",
        "export",
        "provided by",
        "description",
        clip=("description",),
    )
    for c in default_registry().converters():
        table.add_row(c.architecture, c.model_type, "yes" if c.exports else "no", c.provider, clipped(c.description))
    return table


def cmd_plugins(args: argparse.Namespace, ui: Ui) -> int:
    plugins = default_registry().plugins
    converters = default_registry().converters()
    if ui.json_mode:
        ui.json(
            [
                {
                    "name": p.name,
                    "distribution": p.distribution,
                    "version": p.version,
                    "status": p.status,
                    "builtin": p.builtin,
                    "error": str(p.error) if p.error else None,
                    "converters": [c.architecture for c in converters if c.plugin.name == p.name],
                }
                for p in plugins
            ]
        )
        return 0
    styles = {"loaded": "green", "skipped": "yellow", "failed": "bold red"}
    table = new_table(None, "plugin", "distribution", "version", "status", "note")
    for p in plugins:
        if p.error:
            note = Text(str(p.error), style="red")
        elif p.status == "skipped":
            note = Text("skipped by ZOO_PLUGINS / ZOO_DISABLE_PLUGINS")
        else:
            note = Text("built-in" if p.builtin else "")
        status = Text(p.status, style=styles.get(p.status, ""))
        table.add_row(p.name, p.distribution or "-", p.version or "-", status, note)
    ui.print(table)
    failed = sum(p.status == "failed" for p in plugins)
    third = sum(not p.builtin for p in plugins)
    ui.line(f"{len(plugins) - third} built-in, {third} third-party plugin(s), {failed} failed", "dim")
    ui.print(converters_table())
    return 0


def summary_table(summary: Any, title: str = "parameters and forward FLOPs per token") -> Table:
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


def cmd_info(args: argparse.Namespace, ui: Ui) -> int:
    from zoo.summary import summarize

    config, label = load_config(args.name, args.set)
    summary = summarize(config, context=args.context)
    if ui.json_mode:
        ui.json({"name": args.name, **summary.to_dict()})
        return 0
    ui.line(label, "bold")
    if args.set:
        ui.line("with " + " ".join(f"--set {s}" for s in args.set), "dim")
    ui.print(config_table(config))
    ui.print(summary_table(summary))
    return 0


def cmd_compare(args: argparse.Namespace, ui: Ui) -> int:
    from zoo.ablate import diff_configs
    from zoo.summary import summarize

    config_a, _ = load_config(args.a, [*args.set, *args.set_a])
    config_b, _ = load_config(args.b, [*args.set, *args.set_b])
    label_a, label_b = args.a, args.b
    context = args.context if args.context is not None else min(config_a.max_seq_len, config_b.max_seq_len)
    summary_a = summarize(config_a, context=context)
    summary_b = summarize(config_b, context=context)
    differences = diff_configs(config_a, config_b)
    if ui.json_mode:
        ui.json(
            {
                **{
                    side: {"name": label, "parameters": s.total_parameters, "flops_per_token": s.total_flops_per_token}
                    for side, label, s in (("a", label_a, summary_a), ("b", label_b, summary_b))
                },
                "context": context,
                "differences": [{"axis": axis, "a": a, "b": b} for axis, a, b in differences],
            }
        )
        return 0
    table = new_table(f"{label_a} vs {label_b}", "axis", label_a, label_b)
    for axis, a, b in differences:
        table.add_row(axis, fmt_value(a), fmt_value(b))
    if not differences:
        table.add_row(Text("(no component or size differs)", style="dim"), "", "")
    table.add_section()
    table.add_row("parameters", fmt_int(summary_a.total_parameters), fmt_int(summary_b.total_parameters))
    table.add_row(
        f"FLOPs/token (ctx {context})",
        fmt_flops(summary_a.total_flops_per_token),
        fmt_flops(summary_b.total_flops_per_token),
    )
    ui.print(table)
    return 0


def parse_metadata(items: Iterable[str]) -> dict[str, str]:
    metadata = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InputError(f"--metadata {item!r}: expected KEY=VALUE, e.g. --metadata note=baseline")
        metadata[key.strip()] = value
    return metadata


def cmd_build(args: argparse.Namespace, ui: Ui) -> int:
    import torch

    config, _ = load_config(args.name, args.set)
    metadata = parse_metadata(args.metadata)
    with ui.err.status(f"building {args.name} and drawing its weights (seed {args.seed})"):
        torch.manual_seed(args.seed)
        model = zoo.build(config)
    with ui.err.status(f"saving to {args.output}"):
        written = zoo.save(model, args.output, metadata=metadata or None)  # a folder: its new version
    ui.line(f"built {args.name} ({fmt_int(model.num_parameters())} parameters), saved to {written}", "green")
    return 0


def tensor_rows(tensors: Iterable[Any]) -> list[tuple[str, str, str, int]]:
    """(name, dtype, shape, count) with layer numbers folded: ``blocks.*.attn.qkv.weight`` x12."""
    folded: dict[tuple[str, str, str], int] = {}
    for tensor in tensors:
        shape = "(" + ", ".join(str(n) for n in tensor.shape) + ")"
        key = (re.sub(r"\.\d+\.", ".*.", tensor.name), tensor.dtype, shape)
        folded[key] = folded.get(key, 0) + 1
    return [(name, dtype, shape, n) for (name, dtype, shape), n in folded.items()]


def fmt_bytes(n: int) -> str:
    for scale, unit in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def cmd_inspect(args: argparse.Namespace, ui: Ui) -> int:
    from zoo.checkpoint import inspect

    with ui.err.status(f"reading {args.path}" + ("" if args.no_verify else " and checking its digest")):
        info = inspect(args.path, version=args.checkpoint_version, verify=not args.no_verify)
    if ui.json_mode:
        ui.json(info)
        return 0
    elements = sum(math.prod(t.shape) for t in info.tensors)
    head = new_table(str(info.path), "", "")
    head.show_header = False
    head.add_row("format", str(info.format))
    head.add_row("written by", f"zoo {printable(info.zoo_version, 40)}" if info.zoo_version else "-")
    head.add_row("created", info.created.isoformat(timespec="seconds") if info.created else "-")
    if info.version is not None:
        head.add_row("version", str(info.version))
    head.add_row("size", f"{fmt_bytes(info.file_size)}, {len(info.tensors)} tensors, {fmt_int(elements)} parameters")
    if info.ties:
        head.add_row("tied", ", ".join(f"{printable(a)} = {printable(b)}" for a, b in info.ties.items()))
    head.add_row(
        "digest",
        Text("not checked (--no-verify)", style="yellow")
        if info.digest_ok is None
        else Text("ok", style="green")
        if info.digest_ok
        else Text("MISMATCH", style="bold red"),
    )
    ui.print(head)
    if info.versions:
        table = new_table("versions", "version", "file", "created", "zoo", "metadata")
        for v in info.versions:
            table.add_row(
                str(v.version),
                v.path.name,
                v.created.isoformat(timespec="seconds") if v.created else "-",
                printable(v.zoo_version, 40) if v.zoo_version else "-",
                fmt_value(v.metadata),
            )
        ui.print(table)
    if isinstance(info.config, ModelConfig):
        ui.print(config_table(info.config, providers=False))
    else:  # a component's plugin is missing: the raw fields as saved
        ui.print(mapping_table("config (not validated: a component's plugin is missing)", "field", info.config))
    if info.components:
        installed = {(c.kind, c.name) for c in zoo.components()}
        table = new_table(
            "components, and who provided them when saved", "kind", "component", "provided by", "installed now"
        )
        for kind, record in info.components.items():
            who = " ".join(x for x in (record.distribution, record.version) if x) or record.plugin or "-"
            here = (kind, record.name) in installed
            now = Text("yes", style="green") if here else Text("no", style="bold red")
            table.add_row(printable(kind, 40), printable(record.name), printable(who), now)
        ui.print(table)
    if info.metadata:
        ui.print(mapping_table("user metadata", "key", info.metadata))
    table = new_table("tensors", "name", "dtype", "shape", "count", right=("count",))
    for name, dtype, shape, n in tensor_rows(info.tensors):
        table.add_row(printable(name), dtype, shape, f"x{n}" if n > 1 else "")
    ui.print(table)
    return 0


def cmd_convert(args: argparse.Namespace, ui: Ui) -> int:
    source = args.from_hf or args.from_nanogpt
    if source:
        with ui.err.status(f"reading {source}"):
            model = zoo.from_hf(source) if args.from_hf else zoo.from_nanogpt(source)
        with ui.err.status(f"saving to {args.output}"):
            written = zoo.save(model, args.output)
        count = fmt_int(model.num_parameters())
        ui.line(f"converted {source} ({count} parameters) to the zoo checkpoint {written}", "green")
    else:
        with ui.err.status(f"loading {args.to_hf}"):
            model = zoo.load(args.to_hf)
        with ui.err.status(f"writing a Hugging Face model to {args.output}"):
            folder = zoo.to_hf(model, args.output, architecture=args.architecture)
        architecture = json.loads((folder / "config.json").read_text(encoding="utf-8"))["architectures"][0]
        ui.line(f"converted {args.to_hf} to the Hugging Face folder {args.output} ({architecture})", "green")
    return 0


def cmd_generate(args: argparse.Namespace, ui: Ui) -> int:
    from zoo.pipelines import generate_text

    options = {
        key: getattr(args, key)
        for key in ("max_new_tokens", "temperature", "top_k", "top_p", "repetition_penalty", "seed")
        if getattr(args, key) is not None
    }
    # Greedy unless asked to sample; a sampling flag (temperature, top-k, top-p) asks.
    sampling_flags = any(getattr(args, key) is not None for key in ("temperature", "top_k", "top_p"))
    options["do_sample"] = args.sample or (sampling_flags and not args.greedy)

    echo = [] if args.no_echo else [Text(args.prompt, style="bold")]  # shown once text starts coming

    def on_text(piece: str) -> None:
        ui.out.print(*echo, Text(piece), sep="", end="", soft_wrap=True)
        ui.out.file.flush()
        echo.clear()

    # A Hugging Face folder (config.json) or a zoo checkpoint; generate_text tells them apart.
    generate_text(args.model, args.prompt, on_text=on_text, **options)
    ui.out.print(*echo, soft_wrap=True)
    return 0


# Flags of `zoo ablate` passed to run_ablation when given (its defaults rule otherwise).
ABLATE_OPTIONS = (
    "d_model",
    "layers",
    "heads",
    "seq_len",
    "steps",
    "batch",
    "lr",
    "eval_every",
    "seed",
    "seeds",
    "tokenizer",
    "vocab_limit",
    "max_chars",
    "threads",
    "tune_fraction",
    "order",
    "workers",
    "device",
)


def cmd_ablate(args: argparse.Namespace, ui: Ui) -> int:
    from zoo.ablate import run_ablation, significant_swaps, table

    options: dict[str, Any] = {key: getattr(args, key) for key in ABLATE_OPTIONS if getattr(args, key) is not None}
    if args.data is not None:
        options["data"] = Path(args.data)
    if options.get("vocab_limit") == "all":
        options["vocab_limit"] = None
    if args.tune_lr or args.lr_grid is not None:
        options["tune_lr"] = True
    if args.lr_grid is not None:
        options["lr_grid"] = args.lr_grid
    if args.path is not None:
        options["path"] = True if args.path is True else [axis.strip() for axis in args.path.split(",") if axis.strip()]
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[loss]}"),
        TimeElapsedColumn(),
        console=ui.err,  # progress never mixes with the results on stdout
    )
    tasks: dict[str, Any] = {}
    done: set[str] = set()

    def on_progress(run: str, step: int, total: int, loss: float | None) -> None:
        if run not in tasks:
            for name in [n for n in done if n.startswith("tune ") and n in tasks]:
                progress.remove_task(tasks.pop(name))  # a finished sweep run makes room
            tasks[run] = progress.add_task(run, total=total, loss="")
        # The last call of a run (step == total once more) carries its final validation loss.
        progress.update(tasks[run], completed=step, total=total, loss="" if loss is None else f"loss {loss:.3f}")
        if step == total:
            done.add(run)

    with progress:
        result = run_ablation(
            base=args.base, target=args.target, out_dir=Path(args.out), on_progress=on_progress, **options
        )
    if not result.main_process:
        return 0  # under torchrun, rank 0 reports
    if ui.json_mode:
        ui.json({**result.to_dict(), "results_path": str(result.results_path)})
        return 0
    seeds = len(result.seeds)
    header, rows = table(result, compact=True)
    title = (
        f"ablation {args.base} -> {args.target}: {result.settings.steps} steps, {seeds} seed{'s' if seeds > 1 else ''}"
    )
    rich_table = new_table(title, *header, right=header[1:], clip=header[:1])
    sig = header.index("sig")
    for run, row in zip(result.rows(), rows):
        delta = run.delta_vs_previous if result.mode == "path" and run.delta_vs_previous else run.delta_vs_base
        style = ("green" if delta.mean < 0 else "red") if row[sig] else "dim"
        cells: list[Any] = [clipped(row[0])]
        cells[0].stylize("bold" if run.axis in ("base", "target") else "")
        cells += [
            Text(cell, style=style) if header[i].startswith("Δ") or i == sig else cell
            for i, cell in enumerate(row)
            if i
        ]
        rich_table.add_row(*cells)
    ui.print(rich_table)
    ui.line("val loss: mean ± 95% CI over seeds; Δ: paired over matching seeds, ± 95% CI; *: the CI excludes 0", "dim")
    s = result.settings
    ui.line(
        f"budget: every run {s.steps * s.tokens_per_step:,} tokens, {fmt_flops(result.runs[0].train_flops)} training FLOPs "
        f"for the base (parameters and FLOPs per variant: report.md)",
        "dim",
    )
    significant = significant_swaps(result)
    ui.line(f"significant at 95%: {', '.join(significant) if significant else 'none'}", "bold")
    for note in result.notes:
        ui.line(note, "yellow")
    if result.reused:
        ui.line(
            f"reused {len(result.reused)} finished runs from {Path(args.out)}; trained {len(result.trained)}", "dim"
        )
    ui.line(f"report: {result.report_path}")
    ui.line(f"curves: {result.results_path}")
    for plot in (result.plot_path, result.delta_plot_path):
        if plot:
            ui.line(f"plot: {plot}")
    ui.line(
        f"checkpoints: {', '.join(run.checkpoint.name for run in result.runs)} (first seed) in {Path(args.out)}", "dim"
    )
    return 0


def bench_folder() -> Path:
    """The source checkout's ``bench/`` folder (benchmarks are not installed with zoo)."""
    for root in (Path.cwd(), Path(zoo.__file__).resolve().parent.parent):
        if (root / "bench" / "__init__.py").is_file():
            return root / "bench"
    raise ZooError(
        "the benchmarks live in bench/ of the zoo source checkout, and neither the current "
        f"folder nor {Path(zoo.__file__).resolve().parent.parent} has one; run `zoo bench` from a "
        "clone of the repository"
    )


def bench_scripts(folder: Path) -> dict[str, Path]:
    """Benchmark name (``forward``) to script (``bench/bench_forward.py``)."""
    return {p.stem.removeprefix("bench_"): p for p in sorted(folder.glob("bench_*.py"))}


def cmd_bench(args: argparse.Namespace, ui: Ui) -> int:
    folder = bench_folder()
    scripts = bench_scripts(folder)
    if args.list:
        table = new_table(f"benchmarks in {folder}", "name", "what it measures")
        for name, path in scripts.items():
            doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
            table.add_row(name, doc.split("\n\n")[0].replace("\n", " "))
        ui.print(table)
        return 0
    if args.name is None:
        if (folder / "__main__.py").is_file():
            modules = ["bench"]  # the suite's own runner
        else:
            modules = [f"bench.{path.stem}" for path in scripts.values()]
    else:
        key = args.name.removesuffix(".py").removeprefix("bench_")
        if key not in scripts:
            raise ZooError(
                f"no benchmark {args.name!r} in {folder}; available: {', '.join(scripts) or 'none'} "
                f"(see `zoo bench --list`)"
            )
        modules = [f"bench.{scripts[key].stem}"]
    for module in modules:
        ui.line(f"$ python -m {module} {' '.join(args.args)}".rstrip(), "dim")
        code = subprocess.run([sys.executable, "-m", module, *args.args], cwd=folder.parent, check=False).returncode
        if code:
            return code
    return 0


# -- the parser ------------------------------------------------------------------------


def seed(text: str) -> int:
    """``--seed``: an integer torch can seed with, 0 to 2**64 - 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if not 0 <= value < 1 << 64:
        raise argparse.ArgumentTypeError(f"must lie in 0 .. 2**64-1 (18446744073709551615), got {text}")
    return value


def vocab_limit(text: str) -> int | str:
    """``--vocab-limit``: a count, or ``all`` for every GPT-2 token in the text."""
    if text == "all":
        return "all"
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of tokens or 'all', got {text!r}") from None


def rate_list(text: str) -> list[float]:
    """``--lr-grid``: comma-separated learning rates, ``1e-3,3e-3,1e-2``."""
    try:
        return [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated rates such as 1e-3,3e-3, got {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks of errors")
    json_flag = argparse.ArgumentParser(add_help=False)
    json_flag.add_argument("--json", action="store_true", help="print JSON instead of tables")
    sets = argparse.ArgumentParser(add_help=False)
    sets.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config field; dotted keys reach into components (attention.name=eager); repeatable",
    )
    context = argparse.ArgumentParser(add_help=False)
    context.add_argument(
        "--context", type=int, default=None, metavar="N", help="sequence length for FLOPs/token (default: max_seq_len)"
    )

    parser = argparse.ArgumentParser(
        prog="zoo",
        description="A plugin-based model zoo for transformer language models.",
    )
    parser.add_argument("--version", action="version", version=f"zoo {zoo.__version__}")
    parser.add_argument("--debug", action="store_true", default=False, help="show tracebacks of errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def add(
        name: str, handler: Callable[..., int], help: str, parents: Sequence[argparse.ArgumentParser] = ()
    ) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help, parents=[common, *parents])
        p.set_defaults(handler=handler)
        return p

    p = add("list", cmd_list, "list presets (PATTERN may use wildcards: 'gpt2-*')", [json_flag])
    p.add_argument("pattern", nargs="?", default="*")

    p = add("components", cmd_components, "list components and the plugin that provides each", [json_flag])
    p.add_argument("kind", nargs="?", choices=None, help=f"one of {', '.join(KINDS)}")

    add("plugins", cmd_plugins, "list plugins: loaded, skipped, and failed (with why)", [json_flag])

    p = add("info", cmd_info, "a config, its parameters by group, its FLOPs per token", [json_flag, sets, context])
    p.add_argument("name", help="preset name, or a checkpoint file or folder")

    p = add("compare", cmd_compare, "what differs between two configs; parameters, FLOPs", [json_flag, sets, context])
    p.add_argument("a", help="preset name or checkpoint")
    p.add_argument("b", help="preset name or checkpoint")
    p.add_argument("--set-a", action="append", default=[], metavar="KEY=VALUE", help="override for A only")
    p.add_argument("--set-b", action="append", default=[], metavar="KEY=VALUE", help="override for B only")

    p = add("build", cmd_build, "build a model with its init and save it as a checkpoint", [sets])
    p.add_argument("name", help="preset name, or a checkpoint whose config to reuse")
    p.add_argument(
        "-o", "--output", required=True, metavar="PATH", help="a .safetensors file, or a folder for numbered versions"
    )
    p.add_argument("--seed", type=seed, default=0, help="seed of the weight draws (default 0)")
    p.add_argument(
        "--metadata", action="append", default=[], metavar="KEY=VALUE", help="user metadata to store; repeatable"
    )

    p = add("inspect", cmd_inspect, "a checkpoint: format, config, providers, versions, tensors, digest", [json_flag])
    p.add_argument("path", help="a checkpoint file or a folder of versions")
    p.add_argument(
        "--checkpoint-version",
        type=int,
        default=None,
        metavar="N",
        help="a version of a checkpoint folder (default: newest)",
    )
    p.add_argument("--no-verify", action="store_true", help="skip the digest check")

    p = add("convert", cmd_convert, "convert Hugging Face folders and nanoGPT checkpoints to zoo checkpoints and back")
    direction = p.add_mutually_exclusive_group(required=True)
    direction.add_argument(
        "--from-hf", metavar="DIR", help="a Hugging Face folder to import (see `zoo plugins` for the families)"
    )
    direction.add_argument("--from-nanogpt", metavar="CKPT", help="a nanoGPT ckpt.pt (or its out_dir) to import")
    direction.add_argument("--to-hf", metavar="CHECKPOINT", help="a zoo checkpoint to export")
    p.add_argument(
        "--architecture",
        default=None,
        metavar="NAME",
        help="with --to-hf: the Hugging Face architecture to write (default: the first that fits)",
    )
    p.add_argument("-o", "--output", required=True, metavar="PATH", help="where to write the result")

    p = add("generate", cmd_generate, "generate text from a checkpoint or a Hugging Face folder, streaming")
    p.add_argument("model", metavar="PATH_OR_HF_DIR")
    p.add_argument("--prompt", required=True)
    p.add_argument("--max-new-tokens", type=int, default=None)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--greedy", action="store_true", help="always take the most likely token (the default)")
    mode.add_argument(
        "--sample", action="store_true", help="sample (implied by --temperature, --top-k, --top-p); --seed repeats one"
    )
    p.add_argument("--temperature", type=float, default=None)
    p.add_argument("--top-k", type=int, default=None)
    p.add_argument("--top-p", type=float, default=None)
    p.add_argument("--repetition-penalty", type=float, default=None)
    p.add_argument("--seed", type=seed, default=None, help="seed of the sampling, 0 .. 2**64-1")
    p.add_argument("--no-echo", action="store_true", help="print only the generated text, not the prompt")

    p = add(
        "ablate",
        cmd_ablate,
        "train a base, each single swap (or a cumulative path) toward a target, and the target, over seeds",
        [json_flag],
    )
    p.add_argument("--from", dest="base", default="transformer-2017", metavar="PRESET", help="default transformer-2017")
    p.add_argument("--to", dest="target", default="gpt2-small", metavar="PRESET", help="default gpt2-small")
    from zoo.ablate import DEFAULT_SCALE, DEFAULT_SEEDS, ORDERS, TUNE_FRACTION

    for flag in ("--d-model", "--layers", "--heads", "--seq-len", "--steps", "--batch", "--eval-every"):
        default = DEFAULT_SCALE[flag.removeprefix("--").replace("-", "_")]
        p.add_argument(flag, type=int, default=None, metavar="N", help=f"default {default}")
    p.add_argument("--lr", type=float, default=None, help=f"peak learning rate (default {DEFAULT_SCALE['lr']})")
    p.add_argument("--seeds", type=int, default=None, metavar="N", help=f"runs per variant (default {DEFAULT_SEEDS})")
    p.add_argument(
        "--seed", type=int, default=None, metavar="N", help="the first seed; seeds run N, N+1, ... (default 0)"
    )
    p.add_argument("--tune-lr", action="store_true", help="sweep a learning rate per variant, train each at its best")
    p.add_argument(
        "--lr-grid",
        type=rate_list,
        default=None,
        metavar="R,R,...",
        help="the rates --tune-lr sweeps (implies it; default: --lr times 0.25, 0.5, 1, 2)",
    )
    p.add_argument(
        "--tune-fraction",
        type=float,
        default=None,
        metavar="F",
        help=f"the sweep's share of the steps (default {TUNE_FRACTION})",
    )
    p.add_argument(
        "--path",
        nargs="?",
        const=True,
        default=None,
        metavar="AXIS,AXIS,...",
        help="a cumulative path (base, +swap 1, +swaps 1-2, ..., target) instead of single swaps; optionally its order",
    )
    p.add_argument("--order", choices=ORDERS, default=None, help="table rows by effect size (default) or in plan order")
    p.add_argument(
        "--workers", type=int, default=None, metavar="N", help="runs trained at once, one process each (default 1)"
    )
    p.add_argument("--device", choices=("cpu", "cuda"), default=None, help="cuda: one GPU per worker (default cpu)")
    p.add_argument("--data", default=None, metavar="FILE", help="a text file to train on (default: Shakespeare)")
    p.add_argument(
        "--tokenizer", choices=("auto", "gpt2", "bytes"), default=None, help="auto: GPT-2 if installed, else bytes"
    )
    p.add_argument(
        "--vocab-limit",
        type=vocab_limit,
        default=None,
        metavar="N|all",
        help="GPT-2 tokens: keep the N most frequent, spell the rest as bytes (default 1024)",
    )
    p.add_argument("--max-chars", type=int, default=None, metavar="N", help="train on the first N characters only")
    p.add_argument("--threads", type=int, default=None, metavar="N", help="torch CPU threads per run (default 1)")
    p.add_argument(
        "--out",
        default="runs/ablation",
        metavar="DIR",
        help="output folder; run again on it, it trains only unfinished runs (default runs/ablation)",
    )

    p = add("bench", cmd_bench, "run the benchmarks of bench/ (all, or one by name), forwarding arguments")
    p.add_argument("--list", action="store_true", help="list the benchmarks")
    p.add_argument("name", nargs="?", help="a benchmark, e.g. forward (bench/bench_forward.py)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the benchmark")
    from zoo.cli_train import add_commands  # data, train, eval

    add_commands(sub)
    return parser


def load_plugins(ui: Ui, *, quiet: bool) -> None:
    """Load the plugins now; each that failed is one warning line (``zoo plugins`` says
    more), and so is plugin control that names no installed plugin."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RuntimeWarning)
        registry = default_registry()
    failures = {str(plugin.error) for plugin in registry.plugins if plugin.status == "failed"}
    for warning in caught:  # the registry's own warnings other than the failures said below
        if str(warning.message) not in failures:
            ui.warn(str(warning.message))
    if not quiet:
        for plugin in registry.plugins:
            if plugin.status == "failed":
                ui.warn(f"{plugin.error} (see `zoo plugins`)")


# Python arguments that library messages suggest, and the flags that do the same here.
CLI_HINTS = {
    "verify=False": "--no-verify",
}


def cli_hints(message: str) -> str:
    """``message`` with the Python arguments it suggests named as the CLI's flags."""
    for python, flag in CLI_HINTS.items():
        message = message.replace(python, flag)
    return message


def quiet_broken_pipe() -> int:
    """The reader of stdout went away (``zoo info | head -1``): stop quietly, status 0.

    stdout is pointed at /dev/null so the interpreter's final flush does not fail again.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``zoo`` command; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:  # bare `zoo`
        parser.print_help()
        return 0
    ui = Ui(json_mode=getattr(args, "json", False))
    try:
        load_plugins(ui, quiet=args.handler is cmd_plugins)
        return args.handler(args, ui)
    except BrokenPipeError:
        return quiet_broken_pipe()
    except ZooError as err:
        if args.debug:
            ui.err.print(Text("".join(traceback.format_exception(err)), style="dim"), soft_wrap=True)
        ui.error(cli_hints(str(err)))
        return 1
    except KeyboardInterrupt:
        ui.error("interrupted")
        return 130
    except Exception as err:  # a bug, not a user error: say so, keep it to one line
        if args.debug:
            raise
        ui.error(f"unexpected {type(err).__name__}: {err} (rerun with --debug for the traceback, and please report it)")
        return 2


if __name__ == "__main__":
    sys.exit(main())

"""``zoo build`` (a model with its init, saved) and ``zoo inspect`` (a checkpoint file or
folder, read without building the model)."""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Iterable
from typing import Any

import torch
from rich.text import Text

import zoo
from zoo.checkpoint import inspect
from zoo.checkpoint.store import SUFFIX
from zoo.cli.arguments import (
    load_config,
    refuse_checkpoint_out,
    refuse_overwriting_inputs,
)
from zoo.cli.render import Ui, config_table, fmt_bytes, fmt_int, fmt_value, mapping_table, new_table
from zoo.errors import InputError, printable
from zoo.nn.config import ModelConfig


def parse_metadata(items: Iterable[str]) -> dict[str, str]:
    metadata = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InputError(f"--metadata {item!r}: expected KEY=VALUE, e.g. --metadata note=baseline")
        metadata[key.strip()] = value
    return metadata


def cmd_build(args: argparse.Namespace, ui: Ui) -> int:
    config, _ = load_config(args.name, args.set)
    metadata = parse_metadata(args.metadata)
    refuse_checkpoint_out(args.out, args.overwrite)
    refuse_overwriting_inputs(args.out, args.overwrite and args.out.endswith(SUFFIX), {"the checkpoint": args.name})
    seed = 0 if args.seed is None else args.seed
    with ui.status(f"building {args.name} and drawing its weights (seed {seed})"):
        torch.manual_seed(seed)
        model = zoo.build(config)
    with ui.status(f"saving to {args.out}"):
        written = zoo.save(model, args.out, metadata=metadata or None)  # a folder: its new version
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


def cmd_inspect(args: argparse.Namespace, ui: Ui) -> int:
    with ui.status(f"reading {args.path}" + ("" if args.no_verify else " and checking its digest")):
        info = inspect(args.path, version=args.version, verify=not args.no_verify)
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

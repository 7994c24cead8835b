"""``zoo list``, ``components``, ``plugins``, ``info`` and ``compare``: what is installed,
and what a config holds and costs."""

from __future__ import annotations

import argparse
from typing import Any

from rich.table import Table
from rich.text import Text

import zoo
from zoo.ablate.compare import diff_configs
from zoo.cli.arguments import load_config
from zoo.cli.render import (
    Ui,
    clipped,
    config_table,
    fmt_flops,
    fmt_int,
    fmt_value,
    new_table,
    summary_table,
)
from zoo.errors import ZooError, printable
from zoo.nn.config import ModelConfig, preset_description, preset_family, preset_pretrained
from zoo.nn.registry import default_registry
from zoo.summary import layered_counts, summarize


def layers_label(config: ModelConfig) -> str:
    """``12``, or ``6+6`` for an encoder-decoder."""
    encoder = config.n_encoder_layers
    return f"{encoder}+{config.n_layers}" if encoder else str(config.n_layers)


def cmd_list(args: argparse.Namespace, ui: Ui) -> int:
    names = zoo.list_models(args.pattern)
    if not names:
        raise zoo.PresetError(f"no preset matches {args.pattern!r}; available presets: {', '.join(zoo.list_models())}")
    entries = []
    for name in names:
        entry: dict[str, Any] = {
            "name": name,
            "description": preset_description(name),
            "family": preset_family(name),  # None: a plugin's preset that names none
            "pretrained": preset_pretrained(name),  # the hub id of its weights, or None
        }
        try:
            config = zoo.get_config(name)
            counts = layered_counts(config)  # built layer by design, not layer by layer
        except ZooError as err:  # one broken preset (say, a plugin's) does not hide the others
            entry["error"] = str(err)
        else:
            entry.update(
                architecture=config.architecture,
                layers=config.n_layers,
                encoder_layers=config.n_encoder_layers,
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
    ui.print(list_table(entries))
    return 0


#: The section of the presets that name no family (a plugin's may not).
NO_FAMILY = "other"


def by_family(entries: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """``zoo list``'s entries in sections: the families alphabetically (``NO_FAMILY`` last),
    each with its presets in name order."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for entry in entries:
        groups.setdefault(entry["family"] or NO_FAMILY, []).append(entry)
    order = sorted(groups, key=lambda family: (family == NO_FAMILY, family.casefold()))
    return {family: groups[family] for family in order}


def list_table(entries: list[dict[str, Any]]) -> Table:
    """The presets in a section per family: the family's name in bold, then its presets."""
    table = new_table(
        None,
        "preset",
        "layers",
        "d_model",
        "heads",
        "d_ff",
        "vocab",
        "parameters",
        "weights",
        "description",
        right=("layers", "d_model", "heads", "d_ff", "vocab", "parameters"),
        clip=("description",),
    )
    groups = by_family(entries)
    for family, members in groups.items():
        table.add_row(Text(printable(family, None), style="bold"))
        for e in members:
            last = e is members[-1] and family != list(groups)[-1]
            if "error" in e:
                table.add_row(e["name"], *[""] * 7, Text(e["error"], style="red", overflow="fold"), end_section=last)
                continue
            table.add_row(
                e["name"],
                layers_label(e["config"]),
                str(e["d_model"]),
                str(e["n_heads"]),
                str(e["d_ff"]),
                fmt_int(e["vocab_size"]),
                fmt_int(e["parameters"]),
                e["pretrained"] or "",
                clipped(e["description"]),
                end_section=last,
            )
    return table


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


def cmd_info(args: argparse.Namespace, ui: Ui) -> int:
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

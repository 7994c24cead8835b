"""The parser of ``zoo probe`` (run by ``zoo.cli.probe``)."""

from __future__ import annotations

import argparse

from zoo.cli.options import Commands, add_out, add_overwrite, add_revision, add_version, seed
from zoo.figures import FIGURE_FORMATS
from zoo.measures import METRICS


def metric_list(text: str) -> list[str]:
    """``--metrics residual,grad``: names from ``METRICS``."""
    names = [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in names if m not in METRICS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown metric(s) {', '.join(unknown) or '(none)'}; choose from {','.join(METRICS)}"
        )
    return names


def add_parsers(commands: Commands) -> None:
    """Add the parsers of ``zoo probe`` to ``commands``."""
    p = commands.add(
        "probe",
        "cmd_probe",
        [commands.json_flag, commands.sets],
    )
    p.add_argument(
        "targets",
        nargs="+",
        metavar="MODEL",
        help="preset names, zoo checkpoints (files or run folders), Hugging Face folders, or hub ids such as "
        "openai-community/gpt2",
    )
    p.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="KEY=VALUE ...",
        help="one design per flag: space-separated overrides on each preset (default: the preset as it is); repeatable",
    )
    p.add_argument(
        "--vary",
        action="append",
        default=[],
        metavar="KEY=V1,V2,...",
        help="one design per value (every combination of several --vary, times each --variant); repeatable "
        "(default: none)",
    )
    add_version(p, "a checkpoint folder")
    add_revision(p)
    p.add_argument("--batch-size", type=int, default=4, metavar="N", help="rows of text (default: 4)")
    p.add_argument("--seq-len", type=int, default=128, metavar="N", help="tokens per row (default: 128)")
    p.add_argument(
        "--tokenizer",
        choices=["auto", "bytes", "gpt2"],
        default="auto",
        help="how the bundled corpus becomes ids (default: auto, GPT-2 when the vocabulary holds it, else bytes)",
    )
    p.add_argument("--seed", type=seed, default=0, metavar="N", help="seed of each preset's fresh weights (default: 0)")
    p.add_argument(
        "--metrics",
        type=metric_list,
        default=list(METRICS),
        metavar="NAME,NAME,...",
        help=f"what to show and plot, comma-separated from {','.join(METRICS)} (default: all)",
    )
    add_out(p, "write every measurement as JSON to FILE (default: none)", metavar="FILE", required=False)
    p.add_argument(
        "--plot",
        default=None,
        metavar="FILE",
        help=f"draw the designs side by side, in the format FILE's suffix names ({', '.join(FIGURE_FORMATS)}; "
        f"needs matplotlib; default: none)",
    )
    add_overwrite(p, "replace existing files -o and --plot name (default: refuse them)")

"""The parser of ``zoo bench`` (run by ``zoo.cli.bench``)."""

from __future__ import annotations

import argparse

from zoo.cli.options import Commands


def add_parsers(commands: Commands) -> None:
    """Add the parsers of ``zoo bench`` to ``commands``."""
    p = commands.add("bench", "cmd_bench")
    p.add_argument("--list", action="store_true", help="list the benchmarks (default: run them)")
    p.add_argument(
        "name", nargs="?", metavar="NAME", help="a benchmark, e.g. forward (bench/bench_forward.py) (default: all)"
    )
    p.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS", help="arguments for the benchmark")

"""Run benchmarks: ``python -m bench`` runs the CPU suite (all but ``gpu``, the prepared
GPU run); ``python -m bench NAME [ARGS...]`` runs one with its own flags
(``python -m bench modern --repeats 5``)."""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path

SEPARATE = {"gpu"}  # run by name only: `python -m bench gpu` needs a GPU and writes a report


def available() -> list[str]:
    folder = str(Path(__file__).parent)
    return sorted(m.name.removeprefix("bench_") for m in pkgutil.iter_modules([folder]) if m.name.startswith("bench_"))


def main(argv: list[str]) -> int:
    names = available()
    if argv and argv[0] not in names:
        sys.stderr.write(f"unknown benchmark {argv[0]!r}; available: {', '.join(names)}\n")
        return 2
    runs = [(argv[0], argv[1:])] if argv else [(name, []) for name in names if name not in SEPARATE]
    for name, args in runs:
        status = importlib.import_module(f"bench.bench_{name}").main(args)
        sys.stdout.write("\n")
        if status:
            return int(status)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

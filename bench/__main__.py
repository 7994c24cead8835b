"""Run every benchmark in bench/ (or those named): ``python -m bench [forward generate ...]``."""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    names = sorted(m.name.removeprefix("bench_") for m in pkgutil.iter_modules([str(Path(__file__).parent)]) if m.name.startswith("bench_"))
    chosen = argv or names
    unknown = sorted(set(chosen) - set(names))
    if unknown:
        sys.stderr.write(f"unknown benchmark(s) {', '.join(unknown)}; available: {', '.join(names)}\n")
        return 2
    for name in chosen:
        module = importlib.import_module(f"bench.bench_{name}")
        module.main([])
        sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

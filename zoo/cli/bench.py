"""``zoo bench``: run the benchmarks of the source checkout's ``bench/`` folder."""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
from pathlib import Path

from rich.text import Text

import zoo
from zoo.cli.render import Ui, new_table
from zoo.errors import ZooError, printable


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
        # On stderr: stdout is the benchmark's own (its --json parses whole, `| jq` works).
        ui.err.print(
            Text(printable(f"$ python -m {module} {' '.join(args.args)}".rstrip(), None), style="dim"), soft_wrap=True
        )
        ui.err.file.flush()  # before the benchmark's own lines
        code = subprocess.run([sys.executable, "-m", module, *args.args], cwd=folder.parent, check=False).returncode
        if code:
            return code
    return 0

"""Start-up: wall time of ``zoo --help``, ``zoo --version``, ``zoo info -h`` and ``zoo train -h``
over a bare Python start, and of ``zoo list`` and ``zoo info gpt2-small`` over ``import torch``.

Each command runs as a fresh process (the way a person runs it), interleaved with
``python -c "import torch"`` so machine noise hits all alike; the median of each is
reported with its excess over importing torch, which every command pays anyway. The
CPU seconds (user + system) of each process are shown too: on a busy machine they
vary less than wall time. The processes run with bytecode caching on, as an installed
package has it (pip compiles the ``.pyc`` files), even where the environment turns it off
(``PYTHONDONTWRITEBYTECODE``): without it every module is compiled from source at every
start, which measures the compiler, not the zoo.

The ``zoo`` command freezes what it imported out of the garbage collector's way
(``zoo._startup``), which makes its exit faster than a plain ``import torch``'s; so a
command's excess is shown twice: over plain ``import torch``, and over ``import torch``
treated the same way, which leaves the zoo's own work (the target's measure). The meta
build, a library call that freezes nothing, is measured over plain ``import torch``.

``zoo --help`` and ``zoo --version`` import no torch (they answer from the command table,
``zoo.cli.commands``), nor does a command's ``-h`` (its parser module, ``zoo.cli.parsers``),
so they are measured over ``python -c pass``.

Targets: ``zoo --help``, ``zoo --version`` and every ``zoo CMD -h`` (``info``, the smallest
parser, and ``train``, the largest) within 0.3 s of a bare Python start;
``zoo list`` and ``zoo info gpt2-small`` within 0.5 s of ``import torch``.

    python -m bench.bench_startup [--repeats 7]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.common import table

ZOO = [sys.executable, "-m", "zoo"]
#: ``import torch`` as the zoo command has it: the imports frozen.
TORCH_AS_ZOO = "import gc, torch; gc.freeze()"
COMMANDS: dict[str, list[str]] = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "zoo --help": [*ZOO, "--help"],
    "zoo --version": [*ZOO, "--version"],
    "zoo info -h": [*ZOO, "info", "-h"],
    "zoo train -h": [*ZOO, "train", "-h"],
    "import torch": [sys.executable, "-c", "import torch"],
    "import torch, as zoo starts": [sys.executable, "-c", TORCH_AS_ZOO],
    "zoo list": [*ZOO, "list"],
    "zoo info gpt2-small": [*ZOO, "info", "gpt2-small"],
    "zoo.build(gpt2-small, device=meta)": [sys.executable, "-c", "import zoo; zoo.build('gpt2-small', device='meta')"],
}
TARGET_S = 0.5
#: The commands that import no torch, measured over a bare Python start, and their target.
TORCH_FREE = ("zoo --help", "zoo --version", "zoo info -h", "zoo train -h")
TORCH_FREE_TARGET_S = 0.3
#: The measured processes' environment: bytecode cached (see the module's doc).
ENVIRONMENT = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def run(command: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds of one run of ``command``, start to exit (output discarded)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, cwd=Path.cwd(), env=ENVIRONMENT
    )
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return elapsed, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="bench_startup", description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args(argv)
    for command in COMMANDS.values():  # warm the page cache and write the .pyc files
        run(command)
    walls: dict[str, list[float]] = {name: [] for name in COMMANDS}
    cpus: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(args.repeats):
        for name, command in COMMANDS.items():
            elapsed, cpu = run(command)
            walls[name].append(elapsed)
            cpus[name].append(cpu)
    wall = {name: statistics.median(ts) for name, ts in walls.items()}
    cpu = {name: statistics.median(ts) for name, ts in cpus.items()}
    bare = wall["python -c pass"]
    rows = [("python -c pass", f"{bare:.2f} s", f"bare start; CPU {cpu['python -c pass']:.2f} s")]
    for name in TORCH_FREE:
        own = wall[name] - bare
        verdict = "ok" if own <= TORCH_FREE_TARGET_S else f"over the {TORCH_FREE_TARGET_S} s target"
        rows.append((name, f"{wall[name]:.2f} s", f"{own:+.2f} s over a bare start ({verdict})"))
    plain, same = wall["import torch"], wall["import torch, as zoo starts"]
    rows += [
        ("import torch", f"{plain:.2f} s", f"baseline; CPU {cpu['import torch']:.2f} s"),
        (
            "import torch, as zoo starts",
            f"{same:.2f} s",
            f"imports frozen: {same - plain:+.2f} s; CPU {cpu['import torch, as zoo starts']:.2f} s",
        ),
    ]
    for name in [n for n in COMMANDS if n.startswith(("zoo ", "zoo.")) and n not in TORCH_FREE]:
        program = name.startswith("zoo ")  # the zoo command freezes its imports; a library call does not
        base, base_cpu = (same, cpu["import torch, as zoo starts"]) if program else (plain, cpu["import torch"])
        own = wall[name] - base
        verdict = "ok" if own <= TARGET_S else f"over the {TARGET_S} s target"
        over = (
            f"{wall[name] - plain:+.2f} s over import torch, {own:+.2f} s over it as zoo starts"
            if program
            else (f"{own:+.2f} s over import torch (a library call: nothing frozen)")
        )
        rows.append((name, f"{wall[name]:.2f} s", f"{over} ({verdict}); CPU {cpu[name] - base_cpu:+.2f} s"))
    cached = "bytecode cached" + (
        " (PYTHONDONTWRITEBYTECODE ignored)" if "PYTHONDONTWRITEBYTECODE" in os.environ else ""
    )
    print(table(f"start-up, median of {args.repeats} fresh processes, {cached}", rows))


if __name__ == "__main__":
    main(sys.argv[1:])

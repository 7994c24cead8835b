"""Checkpoint load: ``zoo.load`` vs transformers' ``GPT2LMHeadModel.from_pretrained``.

Both load a gpt2-small-sized model with random weights from a safetensors file on
local disk (warm page cache): zoo from ``zoo.save``, transformers from
``save_pretrained`` of a ``GPT2LMHeadModel(GPT2Config())``. Every load runs in a fresh
worker process, after its imports, so peak RSS (``VmHWM``, reset before the load)
measures the load alone: it is reported as growth over the RSS before the load, against the file size.
transformers' load maps the file and reads no bytes; ``zoo.load`` with the digest on
reads and hashes every byte, with ``verify=False`` it maps the file the same lazy way.

Targets: load time <= 1.0x transformers' with the digest off and <= 2.0x with it on;
peak RSS growth <= 1.2x the file size.

    python -m bench.bench_checkpoint [--repeats 5] [--rounds 2]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from bench.common import setup, table

KINDS = ("zoo", "zoo-unverified", "transformers")
ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error"}


def status_mib(field: str) -> float:
    """A memory field of /proc/self/status (``VmRSS``, ``VmHWM``), MiB. Linux only."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024  # kB
    raise SystemExit(f"/proc/self/status has no {field}; this benchmark needs Linux")


def reset_peak_rss() -> None:
    """Restart the VmHWM peak from the current RSS (Linux >= 4.0). ``ru_maxrss`` would
    not do: after fork+exec it starts from the parent's peak."""
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")


def worker(kind: str, path: str, repeats: int) -> dict[str, object]:
    """One process: a first load (timed, peak RSS measured), then ``repeats`` more."""
    setup()
    from transformers import GPT2LMHeadModel

    import zoo
    import zoo.checkpoint  # noqa: F401  (imports are not part of the load)

    zoo.components()  # the plugin registry, built once per process like an import
    loaders = {
        "zoo": lambda: zoo.load(path),
        "zoo-unverified": lambda: zoo.load(path, verify=False),
        "transformers": lambda: GPT2LMHeadModel.from_pretrained(path),
    }
    load = loaders[kind]
    gc.collect()
    before = status_mib("VmRSS")
    reset_peak_rss()
    start = time.perf_counter()
    model = load()
    first = time.perf_counter() - start
    peak = status_mib("VmHWM")
    parameters = sum(p.numel() for p in model.parameters())
    del model
    times = []
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter()
        model = load()
        times.append(time.perf_counter() - start)
        del model
    return {
        "first": first,
        "times": times,
        "rss_before": before,
        "peak_growth": peak - before,
        "parameters": parameters,
    }


def run_worker(kind: str, path: Path, repeats: int) -> dict[str, object]:
    command = [
        sys.executable,
        "-m",
        "bench.bench_checkpoint",
        "--worker",
        kind,
        "--path",
        str(path),
        "--repeats",
        str(repeats),
    ]
    done = subprocess.run(
        command, capture_output=True, text=True, env={**os.environ, **ENV}, cwd=Path(__file__).resolve().parent.parent
    )
    if done.returncode != 0:
        raise SystemExit(f"worker {kind} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def prepare(folder: Path) -> tuple[Path, Path, dict[str, float]]:
    """Save a random gpt2-small with each library; returns both files and save times."""
    from transformers import GPT2Config, GPT2LMHeadModel

    import zoo

    model = zoo.build("gpt2-small").eval()
    start = time.perf_counter()
    ours = zoo.save(model, folder / "zoo")
    saves = {"zoo": time.perf_counter() - start}
    del model
    peer = GPT2LMHeadModel(GPT2Config()).eval()  # gpt2-small sizes, random weights
    start = time.perf_counter()
    peer.save_pretrained(folder / "hf")
    saves["transformers"] = time.perf_counter() - start
    del peer
    return ours, folder / "hf", saves


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5, help="timed loads per worker after the first")
    parser.add_argument("--rounds", type=int, default=2, help="workers per kind, interleaved")
    parser.add_argument("--worker", choices=KINDS, help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        sys.stdout.write(json.dumps(worker(args.worker, args.path, args.repeats)) + "\n")
        return
    setup()
    with tempfile.TemporaryDirectory(prefix="zoo-bench-ckpt-") as tmp:
        ours, theirs, saves = prepare(Path(tmp))
        paths = {"zoo": ours, "zoo-unverified": ours, "transformers": theirs}
        runs: dict[str, list[dict[str, object]]] = {kind: [] for kind in KINDS}
        for _ in range(args.rounds):
            for kind in KINDS:
                runs[kind].append(run_worker(kind, paths[kind], args.repeats))
        sizes = {"zoo": ours.stat().st_size, "transformers": (theirs / "model.safetensors").stat().st_size}
    seconds = {kind: statistics.median(t for run in runs[kind] for t in run["times"]) for kind in KINDS}
    first = {kind: statistics.median(run["first"] for run in runs[kind]) for kind in KINDS}
    growth = {kind: max(run["peak_growth"] for run in runs[kind]) for kind in KINDS}
    file_mib = {kind: sizes["transformers" if kind == "transformers" else "zoo"] / 2**20 for kind in KINDS}
    hf = seconds["transformers"]
    rows = [
        ("file size, zoo / transformers", f"{file_mib['zoo']:.0f} / {file_mib['transformers']:.0f} MiB",
         f"{runs['zoo'][0]['parameters']:,} / {runs['transformers'][0]['parameters']:,} parameters"),
        ("load, transformers", f"{hf * 1e3:.0f} ms", f"first in process: {first['transformers'] * 1e3:.0f} ms"),
        ("load, zoo, digest off", f"{seconds['zoo-unverified'] * 1e3:.0f} ms",
         f"{seconds['zoo-unverified'] / hf:.2f}x transformers (target <= 1.0x); first: {first['zoo-unverified'] * 1e3:.0f} ms"),
        ("load, zoo, digest on", f"{seconds['zoo'] * 1e3:.0f} ms",
         f"{seconds['zoo'] / hf:.2f}x transformers (target <= 2.0x); first: {first['zoo'] * 1e3:.0f} ms"),
    ]  # fmt: skip
    for kind, label in (
        ("zoo", "zoo, digest on"),
        ("zoo-unverified", "zoo, digest off"),
        ("transformers", "transformers"),
    ):
        rows.append(
            (f"peak RSS growth, {label}", f"{growth[kind]:.0f} MiB",
             f"{growth[kind] / file_mib[kind]:.2f}x its file (target <= 1.2x)")
        )  # fmt: skip
    rows.append(("save, zoo / save_pretrained", f"{saves['zoo'] * 1e3:.0f} / {saves['transformers'] * 1e3:.0f} ms",
                 "zoo: hash + write + fsync; not a target"))  # fmt: skip
    title = f"Checkpoint load, gpt2-small (median of {args.rounds} x {args.repeats} loads; torch {torch.__version__})"
    sys.stdout.write(table(title, rows) + "\n")


if __name__ == "__main__":
    main()

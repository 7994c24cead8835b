"""Worker x thread plans for ``zoo ablate --workers``: which spends the machine's cores best.

A study is dozens of independent runs, so what counts is the tokens/s of the whole
machine, summed over the runs that train at once. Each plan ``WxT`` starts W fresh
processes (as ``--workers W`` does), each training the zoo's loop (``run_loop``, the loop
``zoo ablate`` runs) at one of ``make study``'s rungs with T torch threads (``--threads T``);
the processes import and build first, then start together, and each reports the median
of its timed steps. A plan's figure is the sum of its processes' tokens/s. Rounds
alternate the plans (noise hits all alike) and each plan's figure is its median over the
rounds. The default plans spend the cores torch sees (``--cores``, default
``os.cpu_count()``): all of them as one thread each, as one process of all the threads,
and, on more than 2 cores, halfway.

``--json`` prints ``{"plans": {"WxT": tokens/s}, "best": "WxT", "rounds": {...}}``.
``zoo ablate``'s default of one thread per run (``--threads 1``) is the plan this
measured best on the 2-core machine it was developed on (docs/ablation.md).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.common import table

ROOT = Path(__file__).resolve().parents[1]


def child(rung: str, threads: int, steps: int) -> None:
    """One worker: build, say ready, wait for the start, train, print the step times."""
    import torch

    import zoo
    from bench.bench_study import BATCH, HEAD_SIZE, SEQ, VOCAB, settings_for
    from zoo.training import World, bundled_corpus, run_loop, tokens_data

    torch.set_num_threads(threads)
    text = bundled_corpus().encode()
    tokens = torch.frombuffer(bytearray(text), dtype=torch.uint8).to(torch.int64)
    split = len(tokens) * 9 // 10
    data = tokens_data(tokens[:split], tokens[split:])
    d_model, layers = (int(n) for n in rung.split("x"))
    shape = dict(d_model=d_model, n_layers=layers, n_heads=d_model // HEAD_SIZE, vocab_size=VOCAB, max_seq_len=SEQ)
    model = zoo.build("gpt2-small", **shape, dropout=0.0)
    settings = settings_for(steps, threads)
    reports: list[Any] = []
    print("ready", flush=True)
    sys.stdin.readline()  # the start, given to every worker of the plan at once
    run_loop(model, data, settings, world=World(0, 1, 0, torch.device("cpu")), on_step=reports.append)
    seconds = [BATCH * SEQ / r.tokens_per_s for r in reports[3:]]  # the first steps untimed
    print(json.dumps({"tokens_per_s": BATCH * SEQ / statistics.median(seconds)}), flush=True)


def run_plan(workers: int, threads: int, args: argparse.Namespace) -> float:
    """The summed tokens/s of ``workers`` processes of ``threads`` threads, started together."""
    command = [sys.executable, "-m", "bench.bench_workers", "--child", args.rung, str(threads), str(args.steps)]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    procs = [
        subprocess.Popen(command, cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for _ in range(workers)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            if proc.stdout.readline().strip() != "ready":
                raise SystemExit(f"a worker of plan {workers}x{threads} did not start")
        for proc in procs:  # the start, as close together as the pipes allow
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        outs = [proc.communicate()[0] for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    if any(proc.returncode for proc in procs):
        raise SystemExit(f"a worker of plan {workers}x{threads} failed")
    return sum(json.loads(out.strip().splitlines()[-1])["tokens_per_s"] for out in outs)


def default_plans(cores: int) -> list[tuple[int, int]]:
    """All cores as single-thread workers, one worker of all the threads, and halfway."""
    plans = [(cores, 1), (1, cores)]
    if cores > 2 and cores % 2 == 0:
        plans.insert(1, (cores // 2, 2))
    return list(dict.fromkeys(plans))


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        child(argv[1], int(argv[2]), int(argv[3]))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rung", default="64x2", help="d_model x layers (make study's 64x2)")
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 1, help="cores each plan spends")
    parser.add_argument("--plans", default=None, help="WxT,WxT,... (default: from --cores)")
    parser.add_argument("--steps", type=int, default=20, help="steps per worker per round (the first 3 untimed)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; each runs every plan once")
    parser.add_argument("--json", action="store_true", help="print the plans as JSON")
    args = parser.parse_args(argv)
    if args.plans:
        plans = [tuple(int(n) for n in p.split("x")) for p in args.plans.split(",")]
    else:
        plans = default_plans(max(1, args.cores))
    names = [f"{w}x{t}" for w, t in plans]
    rounds: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(args.rounds):
        for name, (w, t) in zip(names, plans, strict=True):
            rounds[name].append(run_plan(w, t, args))
    speed = {name: statistics.median(values) for name, values in rounds.items()}
    best = max(speed, key=speed.__getitem__)
    if args.json:
        print(json.dumps({"rung": args.rung, "plans": speed, "best": best, "rounds": rounds}, indent=2))
        return
    rows = [
        (f"{name} (workers x threads)", f"{s:,.0f} tok/s", f"{s / speed[best]:.2f}x the best")
        for name, s in speed.items()
    ]
    rows.append(("best", best, f"of {len(plans)} plans, {args.rounds} interleaved rounds"))
    title = f"zoo ablate's runs at {args.rung}, {args.steps} steps each, machine tokens/s summed over the workers"
    print(table(title, rows))


if __name__ == "__main__":
    main()

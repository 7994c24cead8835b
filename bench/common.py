"""Timing helpers shared by the benchmarks: interleaved runs, medians, a table."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch


def setup(threads: int = 2) -> None:
    """Fix the thread count so the zoo and its peers compete on equal terms."""
    torch.set_num_threads(threads)
    torch.manual_seed(0)


def interleaved(fns: dict[str, Callable[[], object]], *, repeats: int = 7, warmup: int = 1) -> dict[str, float]:
    """Median seconds per call of each function, alternating them so noise hits all alike."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(ts) for name, ts in times.items()}


def matmul_gflops(shapes: list[tuple[int, int, int]], repeats: int = 5) -> float:
    """Measured fp32 throughput of the (tokens, in, out) products, each timed both as
    ``x @ w.T`` and as ``(w @ x.T).T`` and counted at the faster: the roofline a model made
    of these matmuls can reach on this machine now."""
    best = 0.0
    with torch.inference_mode():
        for m, k, n in sorted(set(shapes)):
            x, w = torch.randn(m, k), torch.randn(n, k)
            times = interleaved({"x w^T": lambda: x @ w.t(), "w x^T": lambda: w @ x.t()}, repeats=repeats)
            count = shapes.count((m, k, n))
            best += count * min(times.values())
    return sum(2 * m * k * n for m, k, n in shapes) / best / 1e9


def table(title: str, rows: list[tuple[str, str, str]]) -> str:
    width = max(len(r[0]) for r in rows)
    lines = [title, "-" * len(title)]
    lines += [f"{name:<{width}}  {value:>14}  {note}" for name, value, note in rows]
    return "\n".join(lines)

"""Timing helpers shared by the benchmarks: interleaved runs, medians, a table."""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Iterator

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


@contextlib.contextmanager
def optimizer_steps() -> Iterator[dict[int, list[float]]]:
    """Seconds of every ``Optimizer.step`` inside the ``with`` block, by ``id(optimizer)``:
    torch's global step hooks, so a loop that builds its own optimizer (the zoo's
    ``run_loop``) is timed as it runs, beside its peers' in the same steps."""
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    seconds: dict[int, list[float]] = {}
    began: dict[int, float] = {}

    def pre(optimizer: torch.optim.Optimizer, args: object, kwargs: object) -> None:
        began[id(optimizer)] = time.perf_counter()

    def post(optimizer: torch.optim.Optimizer, args: object, kwargs: object) -> None:
        seconds.setdefault(id(optimizer), []).append(time.perf_counter() - began.pop(id(optimizer)))

    handles = [register_optimizer_step_pre_hook(pre), register_optimizer_step_post_hook(post)]
    try:
        yield seconds
    finally:
        for handle in handles:
            handle.remove()


def matmul_suite(shapes: list[tuple[int, int, int]]) -> tuple[Callable[[], None], float]:
    """A function running the (tokens, in, out) products back to back, each in the
    orientation that measured faster here (``x @ w.T`` or ``(w @ x.T).T``), and their
    FLOPs: time it beside a model to get the roofline that model's matmuls can reach."""
    steps: list[Callable[[], object]] = []
    with torch.inference_mode():
        for m, k, n in shapes:
            x, w = torch.randn(m, k), torch.randn(n, k)
            ways = {"x w^T": lambda x=x, w=w: x @ w.t(), "w x^T": lambda x=x, w=w: w @ x.t()}
            times = interleaved(ways, repeats=3)
            steps.append(ways[min(times, key=times.__getitem__)])

    def run() -> None:
        with torch.inference_mode():
            for step in steps:
                step()

    return run, float(sum(2 * m * k * n for m, k, n in shapes))


def table(title: str, rows: list[tuple[str, str, str]]) -> str:
    width = max(len(r[0]) for r in rows)
    lines = [title, "-" * len(title)]
    lines += [f"{name:<{width}}  {value:>14}  {note}" for name, value, note in rows]
    return "\n".join(lines)

"""``zoo eval MODEL --tasks NAME,...``: lm-evaluation-harness tasks on a model (``zoo.harness``).

The flags join ``zoo eval``'s (``zoo.cli.train``); with ``--tasks`` the command runs
lm-eval's tasks instead of measuring loss on data, so the data's flags are refused.
lm-eval is imported only when tasks run: ``zoo eval --help`` needs no eval extra.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from zoo.cli.options import positive
from zoo.cli.render import Ui, new_table
from zoo.errors import InputError, printable

#: ``zoo eval`` flags that measure loss on data, and their defaults: none applies to tasks.
DATA_FLAGS = {"data": None, "split": "val", "batches": None, "seq_len": None}


def add_task_flags(p: argparse.ArgumentParser) -> None:
    """``--tasks`` and the flags that go with it, on ``zoo eval``'s parser."""
    p.add_argument(
        "--tasks",
        type=task_list,
        default=None,
        metavar="NAME,NAME,...",
        help="run lm-evaluation-harness tasks (the eval extra) instead of measuring loss on --data (default: none)",
    )
    p.add_argument(
        "--include-path",
        default=None,
        metavar="DIR",
        help="with --tasks: a folder of task YAML files beside lm-eval's own; a task there that names Python "
        "(!function, a .py file beside it) runs only with --trust-task-code (default: lm-eval's only)",
    )
    p.add_argument(
        "--trust-task-code",
        action="store_true",
        help="with --tasks: run the Python a task names (its !function code, a .py beside its YAML) and the "
        "tasks lm-eval marks unsafe (its confirm_run_unsafe_code): only for code you trust (default: refuse)",
    )
    p.add_argument(
        "--limit",
        type=positive,
        default=None,
        metavar="N",
        help="with --tasks: the first N documents of each task (default: all)",
    )
    p.add_argument(
        "--num-fewshot",
        type=_count,
        default=None,
        metavar="N",
        help="with --tasks: examples before each (default: the task's)",
    )
    p.add_argument(
        "--bootstrap-iters",
        type=_count,
        default=100000,
        metavar="N",
        help="with --tasks: resamples for the standard errors lm-eval bootstraps, 0 for none (default 100000)",
    )
    p.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default=None,
        help="with --tasks: where the model runs (default: cuda if there is one)",
    )


def task_list(text: str) -> tuple[str, ...]:
    """``--tasks``: comma-separated task names."""
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    if not names:
        raise argparse.ArgumentTypeError("name at least one task, e.g. --tasks hellaswag,arc_easy")
    return names


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return value


def cmd_eval_tasks(args: argparse.Namespace, ui: Ui) -> int:
    """Run ``--tasks`` on the model and show each task's metrics (``--json``: lm-eval's results)."""
    given = [name for name, default in DATA_FLAGS.items() if getattr(args, name) != default]
    if given:
        flags = ", ".join("--" + name.replace("_", "-") for name in given)
        raise InputError(f"{flags} measure loss on data; --tasks runs lm-eval's tasks instead: drop one or the other")
    from zoo.harness import evaluate_tasks  # lm-eval loads only when tasks run

    with ui.status(f"running {printable(', '.join(args.tasks))} on {printable(args.checkpoint)}"):
        results = evaluate_tasks(
            args.checkpoint,
            args.tasks,
            include_path=args.include_path,
            tokenizer=args.tokenizer,
            batch_size=args.batch_size,
            device=args.device,
            limit=args.limit,
            num_fewshot=args.num_fewshot,
            bootstrap_iters=args.bootstrap_iters,
            trust_task_code=args.trust_task_code,
            version=args.version,
        )
    scores: dict[str, dict[str, Any]] = results["results"]
    if ui.json_mode:
        ui.json({"checkpoint": args.checkpoint, "results": scores, "n-samples": results.get("n-samples", {})})
        return 0
    table = new_table(
        f"{printable(args.checkpoint)} on lm-eval tasks",
        "task",
        "metric",
        "value",
        "± stderr",
        right=("value", "± stderr"),
    )
    for task, metrics in scores.items():
        for key, value in metrics.items():
            metric, _, _ = key.partition(",")
            if key == "alias" or metric.endswith("_stderr") or not isinstance(value, (int, float)):
                continue
            stderr = metrics.get(key.replace(metric, f"{metric}_stderr", 1))
            shown = f"{stderr:.4f}" if isinstance(stderr, (int, float)) and math.isfinite(stderr) else "-"
            table.add_row(printable(task), metric, f"{value:.4f}", shown)
    ui.print(table)
    return 0

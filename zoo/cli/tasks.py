"""``zoo eval MODEL --tasks NAME,...``: lm-evaluation-harness tasks on a model (``zoo.harness``).

The flags (``zoo.cli.parsers.tasks``) join ``zoo eval``'s; with ``--tasks`` the command runs
lm-eval's tasks instead of measuring loss on data, so the data's flags are refused.
lm-eval is imported only when tasks run: ``zoo eval --help`` needs no eval extra.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from zoo.cli.render import Ui, new_table
from zoo.errors import InputError, printable

#: ``zoo eval`` flags that measure loss on data, and their defaults: none applies to tasks.
DATA_FLAGS = {"data": None, "split": "val", "batches": None, "seq_len": None}


def cmd_eval_tasks(args: argparse.Namespace, ui: Ui) -> int:
    """Run ``--tasks`` on the model and show each task's metrics (``--json``: lm-eval's results)."""
    given = [name for name, default in DATA_FLAGS.items() if getattr(args, name) != default]
    if given:
        flags = ", ".join("--" + name.replace("_", "-") for name in given)
        raise InputError(f"{flags} measure loss on data; --tasks runs lm-eval's tasks instead: drop one or the other")
    if args.log_samples and args.output_path is None:
        raise InputError("--log-samples writes the samples beside the results: give --output-path too")
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
            log_samples=args.log_samples,
            output_path=args.output_path,
            apply_chat_template=args.apply_chat_template,
            seed=args.seed,
            trust_task_code=args.trust_task_code,
            version=args.version,
        )
    scores: dict[str, dict[str, Any]] = results["results"]
    written = {"results-file": results["results_file"]} if "results_file" in results else {}
    if ui.json_mode:
        ui.json(
            {"checkpoint": args.checkpoint, "results": scores, "n-samples": results.get("n-samples", {}), **written}
        )
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
    if written:
        ui.line(f"wrote lm-eval's results to {printable(written['results-file'])}", "green")
    return 0

"""The flags of ``zoo eval --tasks`` (lm-evaluation-harness tasks), on ``zoo eval``'s parser
(``zoo.cli.parsers.train``); ``zoo.cli.tasks`` runs them."""

from __future__ import annotations

import argparse

from zoo.cli.options import positive


def add_task_flags(p: argparse.ArgumentParser) -> None:
    """``--tasks`` and the flags that go with it, on ``zoo eval``'s parser."""
    p.add_argument(
        "--tasks",
        type=task_list,
        default=None,
        metavar="NAME,NAME,...",
        help="run lm-evaluation-harness tasks (the eval extra) instead of measuring loss on --data; lm-eval's "
        "spellings of the flags below (--num_fewshot, --batch_size, --output_path, --log_samples, "
        "--apply_chat_template) work too (default: none)",
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
        type=_limit,
        default=None,
        metavar="N",
        help="with --tasks: the first N documents of each task, or a fraction below 1 of them (default: all)",
    )
    p.add_argument(
        "--num-fewshot",
        "--num_fewshot",
        type=_count,
        default=None,
        metavar="N",
        help="with --tasks: examples before each (default: the task's)",
    )
    _add_lm_eval_flags(p)


def _add_lm_eval_flags(p: argparse.ArgumentParser) -> None:
    """The flags lm-eval's own CLI has, with its meaning and its spellings."""
    # lm-eval's spelling of zoo eval's --batch-size (added by zoo.cli.parsers.train): the same value
    p.add_argument("--batch_size", dest="batch_size", type=positive, default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    p.add_argument(
        "--output-path",
        "--output_path",
        default=None,
        metavar="PATH",
        help="with --tasks: write lm-eval's results file there, as lm_eval does (PATH/MODEL/results_DATE.json; "
        "a PATH ending in .json names the file) (default: none written)",
    )
    p.add_argument(
        "--log-samples",
        "--log_samples",
        action="store_true",
        help="with --tasks and --output-path: also write each document's requests and answers "
        "(samples_TASK_DATE.jsonl beside the results) (default: not written)",
    )
    p.add_argument(
        "--apply-chat-template",
        "--apply_chat_template",
        nargs="?",
        const=True,
        default=False,
        metavar="NAME",
        help="with --tasks: put each request in the tokenizer's chat template (NAME: one of its named "
        "templates) (default: plain text)",
    )
    p.add_argument(
        "--seed",
        type=_seeds,
        default=None,
        metavar="N,N,...",
        help="with --tasks: lm-eval's seeds, one for all four or Python's, numpy's, torch's and the few-shot "
        "sampler's (None leaves one unset) (default: lm-eval's 0,1234,1234,1234)",
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


def _limit(text: str) -> int | float:
    """``--limit``: a count of documents, or (as lm-eval reads it) a fraction below 1 of them."""
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if 0 < value < 1:
        return value
    if value < 1 or value != int(value):
        raise argparse.ArgumentTypeError(f"expected an integer >= 1 or a fraction between 0 and 1, got {text!r}")
    return int(value)


def _seeds(text: str) -> tuple[int | None, ...]:
    """``--seed``: one integer for lm-eval's four seeds, or four (``None`` for one left unset)."""
    parts = [part.strip() for part in text.split(",")]
    try:
        values = [None if part.lower() == "none" else int(part) for part in parts]
    except ValueError:
        values = []
    if len(values) not in (1, 4):
        raise argparse.ArgumentTypeError(f"expected one integer or four (integers or None), got {text!r}")
    return tuple(values * 4 if len(values) == 1 else values)

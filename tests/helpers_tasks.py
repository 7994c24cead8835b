"""lm-eval task folders for tests: one task's YAML over local rows or a file named, with
its datasets cache in the folder (imported as ``from helpers_tasks import task_folder``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: Multiple-choice rows, the shape ``task_folder``'s default task reads.
CHOICES = [
    {"question": "Romeo loves", "choices": ["Juliet", "the king"], "answer": 0},
    {"question": "To be, or not to", "choices": ["be", "sing"], "answer": 0},
]
#: A generation task's settings over ``{"prompt", "answer"}`` rows.
GENERATION = {
    "output_type": "generate_until",
    "doc_to_text": "{{prompt}}",
    "doc_to_target": "{{answer}}",
    "doc_to_choice": None,
    "generation_kwargs": {"until": ["\n"], "max_gen_toks": 4, "do_sample": False},
    "metric_list": [{"metric": "exact_match"}],
}


def task_folder(
    root: Path, name: str, rows: list[dict[str, Any]] | bytes | None = None, *, data: Path | None = None, **spec: Any
) -> Path:
    """``root/name/``, holding the task ``name``'s YAML over ``rows`` (a list of records
    written as JSON lines, or raw bytes) or over the file ``data``; ``spec`` overrides
    the multiple-choice defaults (a key set to None is dropped)."""
    folder = root / name
    folder.mkdir(parents=True)
    if data is None:
        data = folder / "rows.jsonl"
        rows = CHOICES if rows is None else rows
        data.write_bytes(rows if isinstance(rows, bytes) else "".join(json.dumps(r) + "\n" for r in rows).encode())
    config = {
        "task": name,
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"test": str(data)}, "cache_dir": str(root / "datasets")},
        "test_split": "test",
        "output_type": "multiple_choice",
        "doc_to_text": "{{question}}",
        "doc_to_choice": "{{choices}}",
        "doc_to_target": "{{answer}}",
        "metric_list": [{"metric": "acc"}],
        **spec,
    }
    (folder / f"{name}.yaml").write_text(json.dumps({k: v for k, v in config.items() if v is not None}))
    return folder


def ending_error(err: str, *needles: str) -> str:
    """The ``error:`` line ``err`` (stderr) ends in, naming each needle, with no traceback or
    "unexpected" bug report before it (datasets' own progress bars and log lines may be)."""
    *before, last = err.rstrip("\n").splitlines() or [""]
    assert last.startswith("error: ") and not any(line.startswith("error: ") for line in before), err
    assert "Traceback" not in err and "unexpected" not in err, err
    for needle in needles:
        assert needle in last, err
    return last

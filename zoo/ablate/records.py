"""The records of an ablation's runs: one ``.json`` file per finished run beside its
checkpoint, with a fingerprint of what was trained, so that a restarted ablation reuses
what is finished (and refuses a record of another run under the same name)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from zoo.ablate.diagnostics import Diagnostics
from zoo.ablate.plan import Job
from zoo.ablate.results import SeedRun, curve_dict
from zoo.checkpoint.store import write_atomically
from zoo.errors import InputError
from zoo.training import CurvePoint, TokenData, open_data, tokens_data


@dataclass(frozen=True)
class Context:
    """What every run shares: the data, the output folder, the device."""

    tokens: tuple[torch.Tensor, torch.Tensor] | Path  # in-memory train and val ids, or a prepared folder
    data: dict[str, Any]  # the description: source, tokenizer, vocabulary, token counts
    out_dir: Path
    device: str
    threads: int | None

    def token_data(self) -> TokenData:
        """The tokens to train on; a prepared folder is mapped by the process that trains,
        so a worker process receives its path, never a copy of its shards."""
        if isinstance(self.tokens, Path):
            return open_data(self.tokens)
        return tokens_data(*self.tokens, source=self.data["source"], tokenizer=self.data["tokenizer"])

    def checkpoint(self, job: Job) -> Path:
        return self.out_dir / f"{job.key}.safetensors"

    def record_path(self, job: Job) -> Path:
        return self.out_dir / f"{job.key}.json"


def fingerprint(job: Job, context: Context) -> dict[str, Any]:
    """What makes a finished run reusable: the same model, training, data and device."""
    settings = {**job.settings.__dict__, "betas": list(job.settings.betas)}
    key = {
        "config": job.config.model_dump(mode="json"),
        "settings": settings,
        "data": context.data,
        "device": context.device,
    }
    return json.loads(json.dumps(key))  # as it reads back from a record


def finished(job: Job, context: Context) -> bool:
    """Whether ``job`` has a record (and checkpoint) from an earlier ablation; refuses a
    record of a different run under the same name rather than overwrite it."""
    path = context.record_path(job)
    if not path.is_file():
        return False
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False  # a torn record: train again
    if record.get("fingerprint") != fingerprint(job, context):
        raise InputError(
            f"{path} records a run with other settings (model, training, data or device) than "
            f"this ablation's {job.label!r}; pass another --out, or delete the folder to start over"
        )
    return job.tune or context.checkpoint(job).is_file()


def read_record(job: Job, context: Context) -> dict[str, Any]:
    path = context.record_path(job)
    try:
        record: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise InputError(f"the run record {path} is missing or unreadable ({err}); run the ablation again") from err
    return record


def write_record(
    job: Job,
    context: Context,
    loss: float | None,
    curve: list[CurvePoint],
    tokens_per_second: float,
    diagnostics: list[Diagnostics] | None = None,
) -> None:
    """Leave ``job``'s record: what it measured, and the fingerprint that makes it reusable."""
    record = {
        "run": job.label,
        "fingerprint": fingerprint(job, context),
        "final_val_loss": loss,
        "curve": curve_dict(curve),
        "tokens_per_second": tokens_per_second,
        "checkpoint": None if job.tune else context.checkpoint(job).name,
        "diagnostics": [d.to_dict() for d in diagnostics or []],
    }
    write_text(context.record_path(job), json.dumps(record, indent=1) + "\n")


def seed_run(job: Job, record: dict[str, Any], context: Context, reused: bool) -> SeedRun:
    curve = [CurvePoint(p["step"], p["train_loss"], p["val_loss"]) for p in record["curve"]]
    return SeedRun(
        seed=job.settings.seed,
        final_val_loss=record["final_val_loss"],
        curve=curve,
        tokens_per_second=record["tokens_per_second"],
        checkpoint=context.out_dir / record["checkpoint"],  # a name: the folder may have moved
        reused=reused,
        diagnostics=[Diagnostics.from_dict(d) for d in record.get("diagnostics", [])],
    )


def write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (``checkpoint.store.write_atomically``)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(path, lambda file: file.write_text(text, encoding="utf-8"))
    except OSError as err:
        raise InputError(f"cannot write {path}: {err.strerror}; pick another out_dir") from err

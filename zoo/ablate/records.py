"""The records of an ablation's runs: one ``.json`` file per finished run beside its
checkpoint, with a fingerprint of what was trained, so that a restarted ablation reuses
what is finished (and refuses a record of another run under the same name).

A record is trusted, and its run reused, only when it reads back through its schema,
its digest matches its contents, and (for a compared run) its checkpoint verifies and
records the same digest, and the losses it holds are what weights score again (its
checkpoint's: the final loss and each --eval-lengths loss on the run's validation
batches; the seed's initial weights: the curve's first point), so a record edited along
with a re-signed checkpoint is not trusted; anything else is trained again, and the
runner says which record and why (``distrust``). The fingerprint holds the
data's content digest, so data edited in place (same length) is not "the same data"."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import torch
import xxhash
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from zoo.ablate.diagnostics import Diagnostics
from zoo.ablate.lengths import length_losses
from zoo.ablate.options import TUNE_HELD_OUT
from zoo.ablate.plan import Job
from zoo.ablate.results import SeedRun, curve_dict
from zoo.checkpoint import inspect, load
from zoo.checkpoint.hashing import bytes_of
from zoo.checkpoint.store import write_atomically
from zoo.errors import CheckpointError, InputError, os_error, printable
from zoo.figures import figure_format
from zoo.files import confined, read_json
from zoo.nn.factory import build
from zoo.nn.registry import Registry
from zoo.training import CurvePoint, TokenData, lm_loss, open_data, tokens_data, validation_batches

RECORD_LIMIT = 16 << 20  # bytes; a record holds one run's curve
#: Largest loss a record holds (nats/token); a language model starts near ln(vocabulary),
#: about 11, so a run past it diverged (``past_limit``, checked before a record is written).
LOSS_LIMIT = 1e6
Loss = Annotated[float, Field(ge=0.0, le=LOSS_LIMIT)]


class CurveRow(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    step: int = Field(ge=0)
    train_loss: Loss | None
    val_loss: Loss


class DiagnosticsRow(BaseModel):
    """One measurement inside a run (``diagnostics.Diagnostics``)."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    step: int = Field(ge=0)
    residual_rms: list[float] = Field(max_length=1 << 16)
    grad_norm: list[float] = Field(max_length=1 << 16)
    attention_entropy: list[float] = Field(default_factory=list, max_length=1 << 16)  # absent in older records


class Record(BaseModel):
    """One run's ``.json`` record, as written by ``write_record``."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    run: str
    fingerprint: dict[str, Any]
    final_val_loss: Loss | None
    curve: list[CurveRow] = Field(max_length=1 << 20)
    tokens_per_second: float = Field(ge=0.0)  # training steps only, evaluation excluded
    train_seconds: float | None = Field(default=None, ge=0.0)  # the steps' wall time; absent in older records
    checkpoint: str | None
    diagnostics: list[DiagnosticsRow] = Field(default_factory=list, max_length=1 << 20)  # absent in older records
    # the loss at each --eval-lengths length, by its token count; None: past a learned table
    eval_lengths: dict[str, Loss | None] = Field(default_factory=dict, max_length=1 << 10)
    digest: str | None = None  # of everything else; None: written by an older zoo


def content_digest(tokens: tuple[torch.Tensor, torch.Tensor] | Path) -> str:
    """The data's content: a prepared folder's manifest digest (its shards checked against
    it when opened), or a digest of in-memory token ids."""
    if isinstance(tokens, Path):
        digest = open_data(tokens).digest
        return digest or ""
    hasher = xxhash.xxh3_128()
    for part in tokens:
        hasher.update(bytes_of(part.to(torch.int64)))
    return f"xxh3_128:{hasher.hexdigest()}"


@dataclass(frozen=True)
class Context:
    """What every run shares: the data, the output folder, the device."""

    tokens: tuple[torch.Tensor, torch.Tensor] | Path  # in-memory train and val ids, or a prepared folder
    data: dict[str, Any]  # the description: source, tokenizer, vocabulary, token counts
    out_dir: Path
    device: str
    threads: int | None
    content: str = ""  # the data's content digest (``content_digest``)

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
    key: dict[str, Any] = {
        "config": job.config.model_dump(mode="json"),
        "settings": settings,
        "data": context.data,
        "content": context.content,
        "device": context.device,
    }
    if job.lengths:  # absent without --eval-lengths, so older records still match
        key["eval_lengths"] = list(job.lengths)
    if job.tune:  # a sweep run scored on the training split's tail, not on the validation windows
        key["tuning_split"] = {"held_out_train_fraction": TUNE_HELD_OUT}
    read: dict[str, Any] = json.loads(json.dumps(key))  # as it reads back from a record
    return read


def finished(job: Job, context: Context, registry: Registry | None = None) -> bool:
    """Whether ``job`` has a trusted record (and checkpoint) from an earlier ablation
    (``distrust`` finds nothing wrong with it)."""
    return distrust(job, context, registry) is None


def distrust(job: Job, context: Context, registry: Registry | None = None) -> str | None:
    """Why ``job``'s record from an earlier ablation is not reused (``""``: it has none),
    or None when it is. A damaged, edited or unverifiable record is not trusted: the run
    is trained again. So is one whose losses are not what its weights score again
    (``_losses_differ``): an edited record whose checkpoint was edited and re-signed to
    match still verifies, its losses do not. A record of a different run under the same
    name is refused rather than overwritten."""
    path = context.record_path(job)
    record = _read(path)
    if record is None:
        return "" if not path.exists() and not path.is_symlink() else "its record does not read as one the zoo wrote"
    reason = _untrusted(job, context, record)
    if reason is not None:
        return reason
    if record.fingerprint != fingerprint(job, context):
        raise InputError(
            f"{context.record_path(job)} records a run with other settings (model, training, data, device or "
            f"--eval-lengths) than "
            f"this ablation's {job.label!r}; pass another --out, or delete the folder to start over"
        )
    return _losses_differ(job, context, record, registry)


#: How far a re-derived loss may be from the recorded one (another device, autocast).
LOSS_RTOL, LOSS_ATOL = 1e-3, 1e-4


def _differs(derived: float | None, recorded: float | None) -> bool:
    if derived is None or recorded is None:
        return derived is not recorded
    return not math.isclose(derived, recorded, rel_tol=LOSS_RTOL, abs_tol=LOSS_ATOL)


@torch.no_grad()
def _losses_differ(job: Job, context: Context, record: Record, registry: Registry | None) -> str | None:
    """What of a compared run's losses its weights do not score again, or None: its
    checkpoint, loaded (verified) and evaluated on the run's validation batches as training
    evaluated it, scores the final loss (the curve's last point) and each --eval-lengths
    loss; the seed's initial weights score the curve's first point."""
    if job.tune:
        return None  # the sweep's runs keep no checkpoint: their records are bound by their digest alone
    if record.final_val_loss is None or not record.curve or record.curve[-1].val_loss != record.final_val_loss:
        return "its final loss is missing or is not its curve's last loss"
    try:
        model = load(context.checkpoint(job), device=context.device, registry=registry)
    except CheckpointError as err:
        return f"its checkpoint does not load ({printable(str(err), 200)})"
    val = context.token_data().val
    derived = _val_loss(model, val, job)
    if _differs(derived, record.final_val_loss):
        return f"its final loss {record.final_val_loss:.6g} is not the {derived:.6g} its checkpoint's weights score"
    if job.lengths:
        again = length_losses(model, val, job.settings, job.lengths)
        for length, loss in again.items():
            if _differs(loss, record.eval_lengths.get(str(length))):
                return f"its loss at {length} tokens (--eval-lengths) is not what its checkpoint's weights score"
    if record.curve[0].step == 0:
        with torch.random.fork_rng(devices=[]):  # the run's initial weights, as execute builds them
            torch.manual_seed(job.settings.seed)
            initial = build(job.config, registry=registry).to(next(model.parameters()).device)
        if _differs(_val_loss(initial, val, job), record.curve[0].val_loss):
            return "its first loss (step 0) is not what the seed's initial weights score"
    return None


def _val_loss(model: torch.nn.Module, val: Any, job: Job) -> float:
    model.eval()
    device = next(model.parameters()).device
    losses = [float(lm_loss(model, x.to(device), y.to(device))) for x, y in validation_batches(val, job.settings)]
    return sum(losses) / len(losses)


def _read(path: Path) -> Record | None:
    """The record at ``path`` through its schema; None when absent or damaged."""
    if not path.exists() and not path.is_symlink():
        return None
    try:
        return Record.model_validate(read_json(path, InputError, "run record", limit=RECORD_LIMIT, follow=False))
    except (InputError, ValidationError):
        return None


def _body_digest(body: dict[str, Any]) -> str:
    text = json.dumps({k: v for k, v in body.items() if k != "digest"}, sort_keys=True)
    return f"xxh3_128:{xxhash.xxh3_128_hexdigest(text.encode())}"


def _untrusted(job: Job, context: Context, record: Record) -> str | None:
    """What is wrong, or None: its digest matches its contents, and a compared run's
    checkpoint verifies and records it."""
    # exclude_unset: a record written before diagnostics existed has none, and its digest did not cover them
    if record.digest is None or record.digest != _body_digest(record.model_dump(mode="json", exclude_unset=True)):
        return "its digest does not match its contents (edited, or written by an older zoo)"
    if job.tune:
        return None if record.checkpoint is None else "a sweep run's record names a checkpoint"
    if record.checkpoint != context.checkpoint(job).name:
        return "it names another checkpoint than its run's"
    try:
        about = inspect(context.checkpoint(job), verify=True).metadata.get("ablation")
    except CheckpointError as err:
        return f"its checkpoint does not verify ({printable(str(err), 200)})"
    if not isinstance(about, dict) or about.get("record_digest") != record.digest:
        return "its checkpoint was written with another record"
    return None


def read_record(job: Job, context: Context) -> dict[str, Any]:
    path = context.record_path(job)
    record = _read(path)
    if record is None:
        raise InputError(f"the run record {path} is missing or damaged; run the ablation again")
    return record.model_dump(mode="json")


def record_body(
    job: Job,
    context: Context,
    loss: float | None,
    curve: list[CurvePoint],
    tokens_per_second: float,
    diagnostics: list[Diagnostics] | None = None,
    lengths: dict[str, float | None] | None = None,
    train_seconds: float = 0.0,
) -> dict[str, Any]:
    """``job``'s record: what it measured (the diagnostics too), the fingerprint that makes it
    reusable, and its digest (which the run's checkpoint records too, binding the two)."""
    body: dict[str, Any] = {
        "run": job.label,
        "fingerprint": fingerprint(job, context),
        "final_val_loss": loss,
        "curve": curve_dict(curve),
        "tokens_per_second": tokens_per_second,
        "train_seconds": train_seconds,
        "checkpoint": None if job.tune else context.checkpoint(job).name,
        "diagnostics": [d.to_dict() for d in diagnostics or []],
    }
    if lengths:  # absent without --eval-lengths, as in older records
        body["eval_lengths"] = lengths
    body = json.loads(json.dumps(body))  # as it reads back
    body["digest"] = _body_digest(body)
    return body


def past_limit(loss: float | None, curve: list[CurvePoint]) -> str | None:
    """Where a finished run's losses leave what a record holds (not finite, negative, or past
    ``LOSS_LIMIT``), as ``"the validation loss reached 3.1e+07 at step 4"``; None when every
    one fits. A run is checked before its record is written, so that every record the zoo
    writes is one it reads back (a run past the limit diverged, and is said so)."""
    for point in curve:
        for what, value in (("training", point.train_loss), ("validation", point.val_loss)):
            if value is not None and not 0.0 <= value <= LOSS_LIMIT:  # NaN fails the test too
                return f"the {what} loss reached {value:.4g} at step {point.step}"
    if loss is not None and not 0.0 <= loss <= LOSS_LIMIT:
        return f"the final validation loss reached {loss:.4g}"
    return None


def write_record(job: Job, context: Context, body: dict[str, Any]) -> None:
    """Leave ``job``'s record (``record_body``), after its checkpoint."""
    write_text(context.record_path(job), json.dumps(body, indent=1) + "\n")


def seed_run(job: Job, record: dict[str, Any], context: Context, reused: bool) -> SeedRun:
    curve = [CurvePoint(p["step"], p["train_loss"], p["val_loss"]) for p in record["curve"]]
    return SeedRun(
        seed=job.settings.seed,
        final_val_loss=record["final_val_loss"],
        curve=curve,
        tokens_per_second=record["tokens_per_second"],
        train_seconds=record.get("train_seconds"),
        checkpoint=confined(context.out_dir, record["checkpoint"], InputError, str(context.record_path(job))),
        reused=reused,
        diagnostics=[Diagnostics.from_dict(d) for d in record.get("diagnostics", [])],
        eval_lengths={int(length): loss for length, loss in (record.get("eval_lengths") or {}).items()},
    )


def write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (``checkpoint.store.write_atomically``)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise os_error(err, "create the folder", path.parent, InputError) from err
    write_atomically(path, lambda file: file.write_text(text, encoding="utf-8"), InputError)


def write_figure(path: Path, fig: Any) -> None:
    """Save the matplotlib figure ``fig`` at ``path`` atomically, in the format its suffix
    names (``figure_format``: ``.png``, ``.svg``, ...; ``write_text``'s errors)."""
    kind = figure_format(path, "the figure")
    write_atomically(path, lambda file: fig.savefig(file, format=kind), InputError)

"""What a run reports per step (``StepReport``), its MFU, and where it goes:
``out/metrics.jsonl`` on rank 0, and the loggers asked for (CSV, TensorBoard, W&B)."""

from __future__ import annotations

import json
import math
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Self

import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from zoo.checkpoint import write_atomically
from zoo.errors import ConfigError, InputError, os_error, printable, quoted
from zoo.files import loads, open_append, open_read
from zoo.nn.config import ModelConfig
from zoo.summary import summarize
from zoo.training.choices import check_loggers
from zoo.training.distributed import World
from zoo.training.settings import TrainSettings

METRICS = "metrics.jsonl"
#: Dense bf16 peak TFLOP/s of known GPUs, for MFU when --peak-tflops is not given.
PEAK_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0, "L4": 121.0, "A10G": 125.0, "4090": 165.0}


@dataclass(frozen=True)
class StepReport:
    """One optimizer step, as progress displays and metrics see it."""

    step: int  # 1-based
    steps: int
    loss: float  # mean training loss over the step's global batch
    lr: float
    tokens: int  # training tokens seen so far
    tokens_per_s: float
    mfu: float | None
    val_loss: float | None  # when evaluated after this step

    def to_dict(self) -> dict[str, Any]:
        row: dict[str, Any] = {
            "step": self.step,
            "loss": self.loss,
            "lr": self.lr,
            "tokens": self.tokens,
            "tokens_per_s": self.tokens_per_s,
        }
        if self.mfu is not None:
            row["mfu"] = self.mfu
        if self.val_loss is not None:
            perplexity = math.exp(min(self.val_loss, 700.0)) if math.isfinite(self.val_loss) else math.nan
            row.update(val_loss=self.val_loss, val_perplexity=perplexity)
        return finite_row(row)


def finite_row(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with each number that is not finite (NaN, an infinity) as None and its key
    listed under ``nonfinite``: JSON has no such numbers, and a reader must tell a value
    that was measured and not finite from one that was not measured."""
    bad = [key for key, value in row.items() if isinstance(value, float) and not math.isfinite(value)]
    if not bad:
        return row
    return {**{key: None if key in bad else value for key, value in row.items()}, "nonfinite": bad}


class MetricsLine(BaseModel):
    """One line of ``metrics.jsonl`` as a reader may use it: a whole step, finite numbers
    (``1e400`` is refused by the JSON reader), other keys kept as they are."""

    model_config = ConfigDict(strict=True, extra="allow", frozen=True)

    step: int = Field(ge=1, le=1 << 62)
    loss: float | None = Field(allow_inf_nan=False)  # None: not finite (named in ``nonfinite``)
    lr: float | None = Field(ge=0, allow_inf_nan=False)
    tokens: int | None = Field(default=None, ge=0)
    val_loss: float | None = Field(default=None, allow_inf_nan=False)
    nonfinite: list[str] = Field(default_factory=list, max_length=64)  # the keys whose numbers were not finite

    @model_validator(mode="after")
    def _nulls_have_their_reason(self) -> Self:
        """A ``null`` loss or rate is one the writer named in ``nonfinite``; any other is damage."""
        unsaid = [key for key in ("loss", "lr") if getattr(self, key) is None and key not in self.nonfinite]
        if unsaid:
            raise ValueError(f"{', '.join(unsaid)} null without being named under nonfinite")
        return self


#: Longest metrics line a reader parses (a line is about 150 bytes).
LINE_LIMIT = 1 << 16


def metrics_line(raw: bytes) -> dict[str, Any] | None:
    """The row one line of ``metrics.jsonl`` holds, or None for a line that is torn, not
    UTF-8, nested past ``MAX_DEPTH``, or not a ``MetricsLine``."""
    if len(raw) > LINE_LIMIT:
        return None
    try:
        text = raw.decode("utf-8")
        try:
            row = loads(text, InputError, METRICS)
        except InputError:
            row = _older_line(text)  # raises InputError in turn for anything but NaN and Infinity
        if not isinstance(row, dict):
            return None
        line = MetricsLine.model_validate(row).model_dump(exclude_none=True)
    except (UnicodeDecodeError, InputError, ValidationError):
        return None
    if not line["nonfinite"]:
        del line["nonfinite"]
    return line


def _older_line(text: str) -> Any:
    """A line as an older zoo wrote it, with bare ``NaN`` or ``Infinity`` (not JSON): its
    object through ``finite_row``, so those numbers read as gaps; None for anything else."""
    row = loads(text, InputError, METRICS, words=True)
    return finite_row(row) if isinstance(row, dict) and "nonfinite" not in row else None


def flops_per_token(config: Any, settings: TrainSettings, world: World) -> float | None:
    """Forward FLOPs per token (from ``zoo.summary``) when a peak is known for MFU."""
    if not isinstance(config, ModelConfig) or device_peak_tflops(settings, world) is None:
        return None
    return summarize(config, context=settings.seq_len).total_flops_per_token


def device_peak_tflops(settings: TrainSettings, world: World) -> float | None:
    if settings.peak_tflops is not None:
        return float(settings.peak_tflops)
    if world.device.type == "cuda":
        name = torch.cuda.get_device_name(world.device)
        return next((peak for key, peak in PEAK_TFLOPS.items() if key in name), None)
    return None


CSV = "metrics.csv"
#: Seconds ``wandb.init`` waits for the W&B server unless WANDB_INIT_TIMEOUT says (W&B's default).
WANDB_INIT_SECONDS = 90.0
CSV_FIELDS = ("step", "loss", "lr", "tokens", "tokens_per_s", "mfu", "val_loss", "val_perplexity")


class MetricsWriter:
    """``out/metrics.jsonl`` (rank 0), and the loggers asked for, each through its own
    library: ``metrics.csv`` (csv), TensorBoard events in ``out/tensorboard``, a W&B run
    in ``out/wandb`` (``WANDB_MODE=offline`` keeps it local). A resumed run first drops
    the lines after its version's step, then appends. An OS error of any of them (disk
    full, file too large, ...) is an ``InputError`` naming the file (``os_error``)."""

    def __init__(
        self,
        out: Path | None,
        is_main: bool,
        resumed_at: int | None,
        loggers: Sequence[str] = (),
        settings: TrainSettings | None = None,
    ) -> None:
        self.file: Any = None
        self.table: Any = None
        self.board: Any = None
        self.wandb: Any = None
        self.restore_hook: Callable[[], None] = lambda: None
        self.out = Path(out or ".")
        loggers = check_loggers(loggers)
        if out is None or not is_main:
            return
        self.file = _reopen(out / METRICS, resumed_at, _line_step)
        if "csv" in loggers:
            self.table = _reopen(out / CSV, resumed_at, _row_step, header=",".join(CSV_FIELDS))
        if "tensorboard" in loggers:
            try:
                from torch.utils.tensorboard import SummaryWriter  # the optional `tensorboard` extra
            except ImportError as err:
                raise ConfigError(_missing("tensorboard", err)) from err
            folder = _own_folder(out / "tensorboard")
            self.board = _logged(folder, lambda: SummaryWriter(str(folder)))
            self.restore_hook = _quiet_board_thread()
        if "wandb" in loggers:
            try:
                self.wandb = _wandb_run(out, settings)
            except BaseException as err:
                self.__exit__(type(err))  # close the files opened above; the W&B error is the one to tell
                raise

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: object, *exc: object) -> None:
        """Close every logger; the first one's OS error is raised once all are closed,
        unless another error is already on its way (that one is the one to tell)."""
        failed: InputError | None = None
        for thing, name in ((self.file, METRICS), (self.table, CSV), (self.board, "tensorboard")):
            if thing is not None:
                try:
                    _logged(self.out / name, thing.close)
                except InputError as err:
                    failed = failed or err
        self.restore_hook()
        if self.wandb is not None:
            self.wandb.finish()
        if failed is not None and kind is None:
            raise failed

    def write(self, report: StepReport) -> None:
        if self.file is None:
            return
        row = report.to_dict()  # a number that is not finite is None here, named under "nonfinite"
        _logged(self.out / METRICS, lambda: self.file.write(json.dumps(row, allow_nan=False) + "\n"))
        if self.table is not None:  # an empty cell where a number was not finite
            cells = ",".join(_cell(row.get(key)) for key in CSV_FIELDS)
            _logged(self.out / CSV, lambda: self.table.write(cells + "\n"))
        scalars = {k: v for k, v in row.items() if k not in ("step", "nonfinite") and v is not None}
        if self.board is not None:
            _logged(self.out / "tensorboard", lambda: self._scalars(scalars, report.step))
        if self.wandb is not None:
            self.wandb.log(scalars, step=report.step)

    def _scalars(self, scalars: dict[str, Any], step: int) -> None:
        for key, value in scalars.items():
            self.board.add_scalar(f"train/{key}", value, step)

    def flush(self) -> None:
        for handle, name in ((self.file, METRICS), (self.table, CSV)):
            if handle is not None:
                _logged(self.out / name, partial(_sync, handle))
        if self.board is not None:
            _logged(self.out / "tensorboard", self.board.flush)


def _quiet_board_thread() -> Callable[[], None]:
    """While a TensorBoard writer is open, its writer thread's OS error (disk full, file
    too large) is not printed as a traceback: the next write raises it, here as a zoo
    error. Returns what puts the previous ``threading.excepthook`` back."""
    try:
        from tensorboard.summary.writer.event_file_writer import _AsyncWriterThread  # type: ignore[import-untyped]
    except ImportError:  # another layout: tracebacks as they come
        return lambda: None
    previous = threading.excepthook

    def hook(args: Any) -> None:
        if not (isinstance(args.thread, _AsyncWriterThread) and issubclass(args.exc_type, OSError)):
            previous(args)

    threading.excepthook = hook
    return lambda: setattr(threading, "excepthook", previous)


def _sync(handle: Any) -> None:
    handle.flush()
    os.fsync(handle.fileno())


def _logged(path: Path, step: Callable[[], Any]) -> Any:
    """``step()``, whose OS error (a buffered write of ``path`` failing at a flush, or
    TensorBoard's writer thread) is an ``InputError`` naming ``path``."""
    try:
        return step()
    except OSError as err:
        raise os_error(err, "write the metrics", path, InputError) from err


def _wandb_run(out: Path, settings: TrainSettings | None) -> Any:
    """A W&B run for ``out``, its server given ``wandb_timeout()`` seconds to answer (one that
    is unreachable or never answers is a zoo error, not a wait without end); W&B's own
    refusals (no API key, a bad project name) as a ``ConfigError`` that says how to fix them."""
    try:
        import wandb  # the optional `wandb` extra
    except ImportError as err:
        raise ConfigError(_missing("wandb", err)) from err
    project = os.environ.get("WANDB_PROJECT", "zoo")
    timeout = wandb_timeout()
    try:
        return wandb.init(
            project=project,
            name=out.resolve().name,
            dir=str(_own_folder(out / "wandb").parent),
            config=settings.to_dict() if settings is not None else None,
            reinit="finish_previous",
            settings=wandb.Settings(init_timeout=timeout),
        )
    except wandb.errors.CommError as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ConfigError(
            f"--log wandb: the W&B server did not answer within {timeout:g} s ({printable(first, 200)}); check "
            f"WANDB_BASE_URL and the network, give it longer with WANDB_INIT_TIMEOUT=SECONDS, or keep the run "
            f"local with WANDB_MODE=offline"
        ) from err
    except wandb.errors.Error as err:
        said = printable(str(err), 300)
        if "api key" in said.lower() or "login" in said.lower():
            fix = "log in with `wandb login` or set WANDB_API_KEY, or set WANDB_MODE=offline to keep the run local"
        elif "project" in said.lower():
            fix = (
                f"set WANDB_PROJECT (now {quoted(project, 60)}) to a name of at most 128 characters "
                "without / \\ # ? % :"
            )
        else:
            fix = "check the WANDB_* settings, or set WANDB_MODE=offline to keep the run local"
        raise ConfigError(f"--log wandb: W&B did not start a run ({said}); {fix}") from err
    except OSError as err:
        raise os_error(err, "start the W&B run in", out / "wandb", ConfigError) from err


def _reopen(path: Path, resumed_at: int | None, step_of: Callable[[str], int], header: str | None = None) -> Any:
    """``path`` replaced by its lines of steps up to ``resumed_at`` (none for a new run;
    ``header`` first), then opened to append. Replaced, never truncated in place: a
    planted link is replaced, not written through."""
    folder = f"{path} is a folder; the zoo writes its run's {path.name} there: remove the folder or move it away"
    if path.is_dir() and not path.is_symlink():
        raise InputError(folder)
    kept = _kept_lines(path, resumed_at, step_of) if resumed_at is not None and os.path.lexists(path) else []
    lines = ([header] if header is not None else []) + kept
    try:
        write_atomically(
            path, lambda file: file.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8"), InputError
        )
    except IsADirectoryError as err:  # made a folder since the check
        raise InputError(folder) from err
    return open_append(path, InputError)


def _own_folder(folder: Path) -> Path:
    if folder.is_symlink():
        raise InputError(f"{folder} is a symbolic link; the zoo does not write through links: remove it")
    if folder.exists() and not folder.is_dir():
        raise InputError(f"{folder} is a file where the logger keeps a folder; remove it (or move it away) and rerun")
    return folder


def _cell(value: Any) -> str:
    return "" if value is None else repr(value) if isinstance(value, float) else str(value)


def wandb_timeout() -> float:
    """Seconds ``wandb.init`` waits for its server: ``WANDB_INIT_TIMEOUT`` (W&B's own
    variable), else ``WANDB_INIT_SECONDS``."""
    text = os.environ.get("WANDB_INIT_TIMEOUT")
    if text is None:
        return WANDB_INIT_SECONDS
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value < math.inf:
        raise ConfigError(f"WANDB_INIT_TIMEOUT={printable(text, 40)!r} must be a number of seconds > 0, such as 90")
    return value


def _missing(extra: str, err: ImportError) -> str:
    return f"--log {extra} needs the {extra} library ({err}); pip install 'zoo-lm[{extra}]'"


def _kept_lines(path: Path, resumed_at: int, step_of: Callable[[str], int]) -> list[str]:
    """The lines of a resumed run's metrics up to its step; damaged lines (a torn last
    line, bad UTF-8, garbage) are dropped, a folder or device in its place is an error."""
    kept = []
    try:
        handle = open_read(path, InputError, "the metrics file", follow=False)
    except InputError as err:
        raise InputError(
            f"{err}; remove it (or move it away) so the resumed run can write its own {path.name}"
        ) from err
    with handle:
        for raw in handle:
            try:
                line = raw.decode("utf-8").rstrip("\n")
            except UnicodeDecodeError:
                continue
            if step_of(line) <= resumed_at:
                kept.append(line)
    return kept


def _line_step(line: str) -> int:
    """The step of one metrics line; ``1 << 62`` (dropped) for anything but a JSON object
    with a whole-number step."""
    if len(line) > 1 << 16:
        return 1 << 62
    try:
        row = json.loads(line)
    except (ValueError, RecursionError):
        return 1 << 62
    step = row.get("step") if isinstance(row, dict) else None
    return step if isinstance(step, int) and not isinstance(step, bool) and step >= 0 else 1 << 62


def _row_step(line: str) -> int:
    """The step of one metrics.csv row; ``1 << 62`` (dropped) for the header or a torn row."""
    first, _, rest = line.partition(",")
    if not first.isdigit() or rest.count(",") != len(CSV_FIELDS) - 2:
        return 1 << 62
    return int(first)

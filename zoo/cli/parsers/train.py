"""The parsers of ``zoo data prepare``, ``zoo train``, ``zoo eval`` and ``zoo plot`` (run by
``zoo.cli.train``): ``zoo train``'s settings flags take their defaults from ``TrainSettings``."""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Callable
from typing import Any

from zoo.cli.commands import HELP
from zoo.cli.options import (
    Commands,
    Handler,
    add_batch_size,
    add_config,
    add_out,
    add_overwrite,
    add_version,
    positive,
    seed,
)
from zoo.cli.parsers.tasks import add_task_flags
from zoo.errors import ZooError
from zoo.figures import FIGURE_FORMATS
from zoo.training.choices import LOGGERS, PRECISION_NAMES, STRATEGIES, check_loggers
from zoo.training.settings import TrainSettings

# TrainSettings field -> (type, metavar, what it is, the default when TrainSettings says None),
# for the flags that map one to one (flag: the field with dashes; warmup_steps is --warmup).
SETTING_FLAGS: dict[str, tuple[Callable[[str], Any], str, str, str | None]] = {
    "steps": (positive, "N", "optimizer steps", None),
    "batch_size": (positive, "N", "sequences per optimizer step, over all ranks", None),
    "micro_batch_size": (
        positive, "N", "sequences per forward on one rank (gradients accumulate)",
        "the whole --batch-size share of each rank in one forward",
    ),
    "seq_len": (positive, "N", "tokens per training sequence", None),
    "lr": (float, "LR", "peak learning rate (AdamW)", None),
    "min_lr_ratio": (float, "FRACTION", "the cosine schedule ends at lr times this", None),
    "warmup_steps": (int, "N", "steps of linear warm-up", "a tenth of --steps, at least 1"),
    "weight_decay": (float, "DECAY", "AdamW weight decay", None),
    "grad_clip": (float, "NORM", "clip the global gradient norm to this; 0 turns clipping off", None),
    "eval_every": (positive, "N", "evaluate on the validation split every N steps (and at the end)", None),
    "eval_batches": (positive, "N", "validation batches per evaluation", None),
    "save_every": (positive, "N", "save a version every N steps", "at the end only"),
    "keep_last": (positive, "N", "keep only the newest N versions", "keep every version"),
    "seed": (seed, "N", "seed of the init, the data order and dropout", None),
    "threads": (positive, "N", "torch CPU threads", "as torch has it: OMP_NUM_THREADS, else one per core"),
    "peak_tflops": (
        float, "TFLOPS", "peak TFLOP/s of one device, for MFU", "a known GPU's peak; on CPU none, so no MFU",
    ),
}  # fmt: skip


def setting_flag(field: str) -> str:
    """A ``TrainSettings`` field's flag: the field with dashes (``--warmup`` for ``warmup_steps``)."""
    return "--warmup" if field == "warmup_steps" else "--" + field.replace("_", "-")


def add_parsers(commands: Commands) -> None:
    """Add the parsers of ``zoo data prepare``, ``train``, ``eval`` and ``plot`` to ``commands``."""
    _add_data_prepare(commands)
    _add_train(commands)
    _add_eval(commands)
    _add_plot(commands)


def _add_data_prepare(commands: Commands) -> None:
    data = commands.sub.add_parser("data", help=HELP["data"], description=HELP["data"])
    data_sub = data.add_subparsers(dest="data_command", metavar="COMMAND", required=True)
    help = "tokenize text files or folders into shards of token ids and a manifest.json"
    p = data_sub.add_parser("prepare", help=help, description=help, parents=[commands.common, commands.json_flag])
    p.set_defaults(handler=Handler("train", "cmd_data_prepare"))
    p.add_argument(
        "inputs",
        nargs="*",
        metavar="INPUT",
        help="text files (one document each), .jsonl or .parquet files (one per record), or folders of them "
        "(default: the bundled Shakespeare)",
    )
    add_out(p, "a new (or empty) folder for the shards and manifest.json", metavar="DIR")
    p.add_argument(
        "--tokenizer",
        default="gpt2",
        metavar="NAME|DIR|ID",
        help="gpt2, bytes, a folder with tokenizer.json, or a hub id (its files are kept in the data folder); "
        "default gpt2",
    )
    p.add_argument(
        "--val-fraction",
        type=float,
        default=0.005,
        metavar="FRACTION",
        help="the share of the corpus's tokens, at its end, kept for validation (default 0.005)",
    )
    p.add_argument(
        "--workers",
        type=positive,
        default=None,
        metavar="N",
        help=f"tokenizing processes (default: one per CPU, at most one per file; {os.cpu_count()} CPUs here)",
    )
    p.add_argument(
        "--field",
        default="text",
        metavar="NAME",
        help="the text field of each record of a .jsonl or .parquet input or a --dataset (default text)",
    )
    p.add_argument(
        "--dataset",
        metavar="DIR|ID",
        help="a Hugging Face dataset (folder or hub id) read through `datasets`, streamed, instead of INPUT files; "
        "offline (HF_HUB_OFFLINE=1) from its cache (default: none, read the INPUT files)",
    )
    p.add_argument(
        "--dataset-config",
        metavar="NAME",
        help="the --dataset's configuration (subset), if it has several (default: its only one)",
    )
    p.add_argument("--split", default="train", metavar="NAME", help="the --dataset's split to read (default train)")


def _add_train(commands: Commands) -> None:
    p = commands.add("train", "cmd_train", [commands.json_flag, commands.sets])
    p.add_argument(
        "name",
        nargs="?",
        metavar="NAME|CHECKPOINT",
        help="a preset to build, or a checkpoint to fine-tune; with --resume and no -o, the run's folder "
        "(`zoo train RUN --resume`) (default: the --config file's, or with --resume the run's own)",
    )
    add_version(p, "a checkpoint folder given as NAME")
    add_config(p, "train")
    p.add_argument(
        "--data",
        default=None,
        metavar="PATH",
        help="a prepared folder, or text files/folders (prepared into a cache) (default: the bundled Shakespeare)",
    )
    # Not required by the parser, so that a --config file may give it; cmd_train insists.
    add_out(
        p,
        "the run's folder: versions, training states, metrics.jsonl, run.toml (no default: give it, or out in "
        "the --config file)",
        metavar="DIR",
        required=False,
    )
    defaults = {f.name: f.default for f in dataclasses.fields(TrainSettings)}  # read, not made: no checks run
    for field, (kind, metavar, what, auto) in SETTING_FLAGS.items():
        default = defaults[field]
        p.add_argument(
            setting_flag(field),
            dest=field,
            type=kind,
            default=None,
            metavar=metavar,
            help=f"{what} (default: {auto})" if default is None else f"{what} (default {default})",
        )
    p.add_argument(
        "--dtype",
        choices=PRECISION_NAMES,
        default="fp32",
        help="fp32 (default), bf16 autocast, fp16 autocast with a grad scaler",
    )
    p.add_argument("--compile", action="store_true", help="torch.compile each block (default: eager)")
    p.add_argument(
        "--activation-checkpointing",
        action="store_true",
        help="recompute block activations in backward (default: keep them)",
    )
    p.add_argument(
        "--strategy",
        choices=STRATEGIES,
        default="auto",
        help="auto (default): single for one process; under torchrun ddp, or fsdp on CUDA when "
        "weights, gradients and AdamW state would not fit in 60%% of a device",
    )
    _add_run_folder(p)
    p.add_argument(
        "--tokenizer",
        default=None,
        metavar="NAME|DIR|ID",
        help="for raw text --data: gpt2, bytes, a folder or a hub id (default: the one a checkpoint was trained "
        "with or carries, else gpt2 for GPT-2's vocabulary size, else bytes)",
    )


def _add_run_folder(p: argparse.ArgumentParser) -> None:
    """``zoo train``'s flags for its --out folder and what it reports there."""
    p.add_argument("--resume", action="store_true", help="continue the run in --out (or RUN) from its newest version")
    add_overwrite(
        p,
        "start a new run in --out whatever it holds (an earlier run, other files): the folder is replaced "
        "whole, everything in it removed (default: refuse a folder that holds anything)",
    )
    p.add_argument(
        "--log-every",
        type=positive,
        default=None,
        metavar="N",
        help="not in a terminal: a progress line every N steps (default: a tenth of --steps, at least 1)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress, only the final line (default: progress)")
    p.add_argument(
        "--log",
        type=logger_list,
        default=(),
        metavar="NAME,NAME,...",
        help=f"loggers beside metrics.jsonl: {', '.join(LOGGERS)} (default: metrics.jsonl only)",
    )


def _add_eval(commands: Commands) -> None:
    p = commands.add("eval", "cmd_eval", [commands.json_flag])
    p.add_argument(
        "checkpoint", metavar="CHECKPOINT|ID", help="a checkpoint file or folder, a Hugging Face folder, or a hub id"
    )
    add_version(p)
    p.add_argument(
        "--data",
        default=None,
        metavar="PATH",
        help="a prepared folder or text (default: the data the run was trained on, as its checkpoint records)",
    )
    p.add_argument("--split", choices=("val", "train"), default="val", help="(default val)")
    p.add_argument("--batches", type=positive, default=None, metavar="N", help="(default: the whole split)")
    add_batch_size(p, "sequences per forward (default 8)", default=8)
    p.add_argument(
        "--seq-len",
        type=positive,
        default=None,
        metavar="N",
        help="tokens per window (default: the --seq-len a run trained at, else the model's max_seq_len, at most 1024)",
    )
    p.add_argument(
        "--tokenizer",
        default=None,
        metavar="NAME|DIR|ID",
        help="for raw text --data or --tasks: gpt2, bytes, a folder or a hub id (default: the one the checkpoint "
        "records, the folder's, else by vocabulary)",
    )
    add_task_flags(p)


def _add_plot(commands: Commands) -> None:
    p = commands.add("plot", "cmd_plot")
    p.add_argument("runs", nargs="+", metavar="RUN", help="`zoo train` run folders (or their metrics.jsonl)")
    add_out(
        p,
        f"the figure to write, in the format its suffix names ({', '.join(FIGURE_FORMATS)})",
        metavar="FILE",
        required=False,
        default="curves.png",
    )
    p.add_argument("--title", default=None, metavar="TEXT", help="(default: the run folders' names)")
    add_overwrite(p, "replace an existing file -o names (default: refuse it)")


def logger_list(text: str) -> tuple[str, ...]:
    """``--log``: comma-separated logger names."""
    try:
        return check_loggers([part.strip() for part in text.split(",") if part.strip()])
    except ZooError as err:
        raise argparse.ArgumentTypeError(str(err)) from None

"""``zoo data prepare``, ``zoo train`` and ``zoo eval``: training data, training, evaluation.

``zoo train`` runs as one process, or as every rank of ``torchrun --nproc_per_node N -m
zoo train ...``; only rank 0 shows progress and writes. Progress goes to stderr, so
``--json`` output on stdout stays clean.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
from importlib import resources
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
)

import zoo
from zoo.checkpoint import versions
from zoo.cli.options import Commands
from zoo.cli.render import Ui, fmt_int, new_table
from zoo.config import parse_sets
from zoo.interop.hub import is_hub_id, local_or_snapshot
from zoo.pipelines import recorded_tokenizer_source
from zoo.text import has_tokenizer
from zoo.training import (
    BUNDLED_CORPUS,
    PRECISIONS,
    STRATEGIES,
    StepReport,
    TrainSettings,
    evaluate,
    prepare,
    train,
)
from zoo.training.metrics import METRICS

# flag -> TrainSettings field, for the flags that map one to one
SETTING_FLAGS = {
    "steps": int,
    "batch_size": int,
    "micro_batch_size": int,
    "seq_len": int,
    "lr": float,
    "min_lr_ratio": float,
    "warmup_steps": int,
    "weight_decay": float,
    "grad_clip": float,
    "eval_every": int,
    "eval_batches": int,
    "save_every": int,
    "keep_last": int,
    "seed": int,
    "threads": int,
    "peak_tflops": float,
}


def add_parsers(commands: Commands) -> None:
    data = commands.sub.add_parser("data", help="prepare training data", description="prepare training data")
    data_sub = data.add_subparsers(dest="data_command", metavar="COMMAND", required=True)
    help = "tokenize text files or folders into shards of token ids and a manifest.json"
    p = data_sub.add_parser("prepare", help=help, description=help, parents=[commands.common, commands.json_flag])
    p.set_defaults(handler=cmd_data_prepare)
    p.add_argument(
        "inputs", nargs="*", metavar="INPUT", help="text files or folders (default: the bundled Shakespeare)"
    )
    p.add_argument("-o", "--output", required=True, metavar="DATA_DIR", help="a new (or empty) folder")
    p.add_argument(
        "--tokenizer",
        default="gpt2",
        metavar="NAME|DIR|ID",
        help="gpt2, bytes, a folder with tokenizer.json, or a hub id (its files are kept in the data folder); "
        "default gpt2",
    )
    p.add_argument("--val-fraction", type=float, default=0.005, help="tail of each file kept for validation (0.005)")
    p.add_argument("--workers", type=int, default=None, metavar="N", help="tokenizing processes (default: CPUs)")

    help = "train a preset or a checkpoint on a corpus; under torchrun, on every rank"
    p = commands.add("train", cmd_train, help, [commands.json_flag])
    p.add_argument("name", metavar="NAME|CHECKPOINT", help="a preset to build, or a checkpoint to fine-tune")
    p.add_argument(
        "--data",
        default=None,
        metavar="PATH",
        help="a prepared folder, or text files/folders (prepared into a cache); default: Shakespeare",
    )
    p.add_argument("--out", required=True, metavar="DIR", help="versions, training states and metrics.jsonl")
    p.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override a config field; repeatable"
    )
    defaults = TrainSettings()
    for field, kind in SETTING_FLAGS.items():
        flag = "--warmup" if field == "warmup_steps" else "--" + field.replace("_", "-")
        default = getattr(defaults, field)
        p.add_argument(
            flag,
            dest=field,
            type=kind,
            default=None,
            metavar="N",
            help=f"default {'auto' if default is None else default}",
        )
    p.add_argument(
        "--dtype",
        choices=tuple(PRECISIONS),
        default="fp32",
        help="fp32 (default), bf16 autocast, fp16 autocast with a grad scaler",
    )
    p.add_argument("--compile", action="store_true", help="torch.compile each block")
    p.add_argument("--activation-checkpointing", action="store_true", help="recompute block activations in backward")
    p.add_argument("--strategy", choices=STRATEGIES, default="auto", help="auto: DDP if it fits, else FSDP2")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its newest version")
    p.add_argument(
        "--tokenizer",
        default=None,
        metavar="NAME|DIR|ID",
        help="for raw text --data: gpt2, bytes, a folder or a hub id (default: the model's)",
    )

    help = "evaluate a checkpoint: loss, perplexity, tokens, bits per byte"
    p = commands.add("eval", cmd_eval, help, [commands.json_flag])
    p.add_argument("checkpoint", help="a checkpoint file or folder, a Hugging Face folder, or a hub id")
    p.add_argument("--data", default=None, metavar="PATH", help="a prepared folder or text; default: Shakespeare")
    p.add_argument("--split", choices=("val", "train"), default="val")
    p.add_argument("--batches", type=int, default=None, metavar="N", help="default: the whole split")
    p.add_argument("--batch-size", type=int, default=8, metavar="N")
    p.add_argument("--seq-len", type=int, default=None, metavar="N", help="default: max_seq_len, at most 1024")
    p.add_argument(
        "--tokenizer",
        default=None,
        metavar="NAME|DIR|ID",
        help="for raw text --data: gpt2, bytes, a folder or a hub id (default: the one the checkpoint records, "
        "the folder's, else by vocabulary)",
    )


def cmd_data_prepare(args: argparse.Namespace, ui: Ui) -> int:
    inputs = args.inputs or [str(resources.files("zoo").joinpath("data", BUNDLED_CORPUS))]
    data = prepare(inputs, args.output, tokenizer=args.tokenizer, val_fraction=args.val_fraction, workers=args.workers)
    if ui.json_mode:
        ui.json(data.describe())
        return 0
    ui.line(
        f"prepared {data.path}: {fmt_int(data.train.tokens)} training and {fmt_int(data.val.tokens)} validation "
        f"tokens ({data.tokenizer}, vocabulary {fmt_int(data.vocab_size)})"
    )
    return 0


def settings_from(args: argparse.Namespace) -> TrainSettings:
    """``TrainSettings`` from the flags given (defaults for the rest)."""
    values: dict[str, Any] = {k: getattr(args, k) for k in SETTING_FLAGS if getattr(args, k) is not None}
    values.update(
        dtype=args.dtype,
        strategy=args.strategy,
        compile=args.compile,
        activation_checkpointing=args.activation_checkpointing,
    )
    return TrainSettings(**values)


def cmd_train(args: argparse.Namespace, ui: Ui) -> int:
    settings = settings_from(args)
    main_rank = int(os.environ.get("RANK", "0")) == 0
    progress = Progress(
        TextColumn("step"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[info]}"),
        TimeRemainingColumn(),
        console=ui.err,
        disable=not main_rank,
    )
    task = progress.add_task("train", total=settings.steps, info="")
    last: list[StepReport] = []

    def on_step(report: StepReport) -> None:
        if not last:
            progress.start()  # after the checks, so an error is the only line
        last[:] = [report]
        info = f"loss {report.loss:.4f}  {report.tokens_per_s:,.0f} tok/s"
        if report.mfu is not None:
            info += f"  MFU {report.mfu:.1%}"
        if report.val_loss is not None:
            info += f"  val {report.val_loss:.4f}"
        progress.update(task, completed=report.step, info=info)

    try:
        result = train(
            args.name,
            args.data,
            settings,
            out=args.out,
            resume=args.resume or None,
            overrides=parse_sets(args.set),
            tokenizer=args.tokenizer,
            on_step=on_step,
        )
        progress.stop()
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not interrupt the wrap-up
        progress.stop()
        done = versions(args.out) if Path(args.out).is_dir() else []
        where = f"the last complete version is {done[-1].path}; continue with --resume" if done else "nothing was saved"
        step = f" after step {last[0].step}" if last else ""
        ui.error(f"interrupted{step}; {where}")
        return 130
    if not main_rank:
        return 0
    final = result.curve[-1]
    saved = result.checkpoint or zoo.versions(args.out)[-1].path
    summary = {
        "step": final.step,
        "val_loss": final.val_loss,
        "val_perplexity": math.exp(min(final.val_loss, 700.0)),
        "tokens_per_second": result.tokens_per_second,
        "checkpoint": str(saved),
        "metrics": str(Path(args.out) / METRICS),
    }
    if ui.json_mode:
        ui.json(summary)
    else:
        ui.line(
            f"step {final.step}: val loss {final.val_loss:.4f} (perplexity {summary['val_perplexity']:.2f}), "
            f"{result.tokens_per_second:,.0f} tokens/s; checkpoint {saved}"
        )
    return 0


def cmd_eval(args: argparse.Namespace, ui: Ui) -> int:
    source = args.checkpoint
    tokenizer = args.tokenizer
    if (Path(source) / "config.json").is_file() or is_hub_id(source):  # a Hugging Face folder or hub id
        folder, _ = local_or_snapshot(source)
        model: zoo.DecoderLM | zoo.EncoderDecoder = zoo.from_hf(folder)
        tokenizer = tokenizer or (str(folder) if has_tokenizer(folder) else None)
    else:
        model = zoo.load(source)
        tokenizer = tokenizer or recorded_tokenizer_source(source)  # the run's own
    result = evaluate(
        model,
        args.data,
        split=args.split,
        seq_len=args.seq_len,
        batch_size=args.batch_size,
        batches=args.batches,
        tokenizer=tokenizer,
    )
    if ui.json_mode:
        ui.json(result.to_dict())
        return 0
    table = new_table(f"{escape(args.checkpoint)} on the {result.split} split", "measure", "value", right=("value",))
    table.add_row("loss", f"{result.loss:.4f}")
    table.add_row("perplexity", f"{result.perplexity:.2f}")
    table.add_row("tokens", fmt_int(result.tokens))
    table.add_row("bits per byte", "-" if result.bits_per_byte is None else f"{result.bits_per_byte:.4f}")
    ui.print(table)
    return 0

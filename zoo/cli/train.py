"""``zoo data prepare``, ``zoo train`` and ``zoo eval``: training data, training, evaluation.

``zoo train`` runs as one process, or as every rank of ``torchrun --nproc_per_node N -m
zoo train ...``; only rank 0 shows progress and writes. Progress goes to stderr, so
``--json`` output on stdout stays clean.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import signal
from importlib import resources
from pathlib import Path
from typing import Any

import zoo
from zoo.checkpoint import CheckpointInfo, inspect, versions
from zoo.checkpoint.store import resolve
from zoo.cli.arguments import refuse_existing_file, refuse_overwriting_inputs
from zoo.cli.configfile import RUN_CONFIG, file_keys, write_config
from zoo.cli.parsers.train import SETTING_FLAGS
from zoo.cli.progress import TrainProgress
from zoo.cli.render import Ui, fmt_int, new_table
from zoo.cli.tasks import cmd_eval_tasks
from zoo.errors import InputError, ZooError, printable
from zoo.interop.hub import is_hub_id, local_or_snapshot
from zoo.nn.sets import parse_sets
from zoo.text.loading import has_tokenizer, recorded_tokenizer_source
from zoo.training import (
    BUNDLED_CORPUS,
    StepReport,
    TrainSettings,
    evaluate,
    prepare,
    train,
)
from zoo.training.curves import CURVES, NO_MATPLOTLIB, distinct_runs, have_matplotlib, plot_runs
from zoo.training.data import tokenizer_cache
from zoo.training.distributed import launcher_int
from zoo.training.metrics import METRICS
from zoo.training.stateful import learning_rate


def cmd_data_prepare(args: argparse.Namespace, ui: Ui) -> int:
    bundled = [] if args.dataset is not None else [str(resources.files("zoo").joinpath("data", BUNDLED_CORPUS))]
    data = prepare(
        args.inputs or bundled,
        args.out,
        tokenizer=args.tokenizer,
        val_fraction=args.val_fraction,
        workers=args.workers,
        field=args.field,
        dataset=args.dataset,
        dataset_config=args.dataset_config,
        split=args.split,
    )
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


def write_run_config(args: argparse.Namespace, settings: TrainSettings) -> Path:
    """``run.toml`` in the out folder: every flag of this run, resolved, so that the folder
    alone repeats it (``--config RUN/run.toml``) or continues it (``--resume``)."""
    resolved = settings.to_dict()
    values: dict[str, Any] = {}
    for dest in dict.fromkeys(action.dest for action in file_keys(args.config_parser).values()):
        if dest in ("resume", "overwrite", "version", "quiet"):
            continue  # how this command line started (and showed itself), not what the run is
        values[dest] = resolved[dest] if dest in resolved else getattr(args, dest, None)
    values["data"] = recorded_path(args.data)
    return write_config(
        Path(args.out) / RUN_CONFIG,
        values,
        f"zoo train settings of this run, resolved (zoo {zoo.__version__}).\n"
        f"Repeat it: zoo train --config {Path(args.out) / RUN_CONFIG} -o NEW_DIR; continue it: zoo train "
        f"{args.out} --resume --steps N",
    )


def recorded_path(data: str | None) -> str | None:
    """``--data`` as the run records it: an existing path made absolute, so that ``zoo
    eval RUN`` finds it from any folder."""
    return str(Path(data).resolve()) if data and Path(data).exists() else data  # "" is no path (Path("") is ".")


def schedule_jump(out: str, settings: TrainSettings) -> str | None:
    """What a resume with another ``--steps`` does to the learning rate where it resumes
    (read before training, said at its first step); None when the plan is the same, nothing
    is saved yet, or nothing is left to train."""
    try:
        newest = zoo.versions(out)[-1] if Path(out).is_dir() else None
    except (ZooError, IndexError):
        return None  # no version, or a damaged one: the resume itself says what is wrong
    training = newest.metadata.get("training") if newest is not None else None
    if not isinstance(training, dict) or not isinstance(training.get("settings"), dict):
        return None
    planned, step = training["settings"].get("steps"), training.get("step")
    if not isinstance(planned, int) or not isinstance(step, int) or planned == settings.steps or planned < 1:
        return None
    if step >= settings.steps:
        return None  # nothing left to train: the run says so itself
    try:  # the other schedule settings cannot change on resume (the resume refuses them)
        before = learning_rate(step, dataclasses.replace(settings, steps=planned))
    except ZooError:
        return None
    after = learning_rate(step, settings)
    if math.isclose(before, after, rel_tol=0.01):
        return None
    return (
        f"--steps {settings.steps} changes the run's plan of {planned} steps: its schedule (warm-up, then cosine "
        f"decay) is planned again for {settings.steps}, so at step {step}, where it resumes, the learning rate goes "
        f"from {before:.3g} to {after:.3g}; resume with --steps {planned} to repeat the planned run"
    )


def cmd_train(args: argparse.Namespace, ui: Ui) -> int:
    settings = settings_from(args)
    main_rank = launcher_int("RANK", 0) == 0
    jump = schedule_jump(args.out, settings) if args.resume and args.out is not None and main_rank else None
    log_every = args.log_every or max(1, settings.steps // 10)
    if args.out is None and args.resume and args.name is not None:
        raise InputError(
            f"--resume continues a run, but {printable(args.name)} holds no {RUN_CONFIG} of one (a run's folder "
            f"has it from its first step): give the run's folder as `zoo train RUN --resume`, or with -o/--out DIR"
        )
    if args.out is None:
        raise InputError("give the run's folder with -o/--out DIR (or out = ... in the --config file)")
    if args.name is None:
        raise InputError(
            "give the model to train: a preset or checkpoint NAME, a --config file with name = ..., "
            "or --resume with the -o of a run (its run.toml names it)"
        )
    inputs = {"the checkpoint": args.name, "--data": args.data, "--config": args.config, "--tokenizer": args.tokenizer}
    refuse_overwriting_inputs(args.out, args.overwrite, inputs)  # before --overwrite removes the folder
    progress = TrainProgress(ui.err, settings.steps, log_every=log_every, quiet=args.quiet, main_rank=main_rank)

    def on_step(report: StepReport) -> None:
        if progress.last is None and main_rank:  # the run has passed its checks and has its folder
            write_run_config(args, settings)
            if jump is not None:  # said once the resume is known to go ahead
                ui.warn(jump)
        progress(report)

    try:
        with progress:
            result = train(
                args.name if args.version is None else str(resolve(args.name, args.version)),
                recorded_path(args.data),
                settings,
                out=args.out,
                resume=args.resume or None,
                overwrite=args.overwrite,
                overrides=parse_sets(args.set),
                tokenizer=args.tokenizer,
                on_step=on_step,
                log=args.log,
            )
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not interrupt the wrap-up
        done = versions(args.out) if Path(args.out).is_dir() else []
        where = f"the last complete version is {done[-1].path}; continue with --resume" if done else "nothing was saved"
        step = f" after step {progress.last.step}" if progress.last else ""
        ui.error(f"interrupted{step}; {where}")
        return 130
    if not main_rank:
        return 0
    final = result.curve[-1]
    saved = result.checkpoint or zoo.versions(args.out)[-1].path
    trained = result.tokens_seen > 0
    summary = {
        "step": final.step,
        "val_loss": final.val_loss,
        "val_perplexity": math.exp(min(final.val_loss, 700.0)),
        "tokens_per_second": result.tokens_per_second if trained else None,
        "checkpoint": str(saved),
        "metrics": str(Path(args.out) / METRICS),
    }
    if have_matplotlib():  # the run's own curves, beside its metrics
        summary["curves"] = str(plot_runs([args.out], Path(args.out) / CURVES, overwrite=True))  # the run's own
    if ui.json_mode:
        ui.json(summary)
        return 0
    if not trained:  # resumed a finished run: no step ran, so there is no speed to report
        ui.line(
            f"{args.out} is already at step {final.step} of --steps {settings.steps}: nothing to train "
            f"(raise --steps to continue); val loss {final.val_loss:.4f} "
            f"(perplexity {summary['val_perplexity']:.2f}); checkpoint {saved}"
        )
    else:
        ui.line(
            f"step {final.step}: val loss {final.val_loss:.4f} (perplexity {summary['val_perplexity']:.2f}), "
            f"{result.tokens_per_second:,.0f} tokens/s; checkpoint {saved}"
        )
    ui.line(f"curves: {summary['curves']}" if "curves" in summary else f"no curves: {NO_MATPLOTLIB}", "dim")
    return 0


def cmd_plot(args: argparse.Namespace, ui: Ui) -> int:
    refuse_existing_file(args.out, args.overwrite)  # plot_runs refuses the rest (format, inputs) before reading
    written = plot_runs(args.runs, args.out, title=args.title, overwrite=args.overwrite)
    ui.line(f"plotted {len(distinct_runs(args.runs))} run(s) to {written}")  # a folder given twice is drawn once
    return 0


def run_data(checkpoint: str, info: CheckpointInfo) -> str:
    """The data a ``zoo train`` checkpoint was trained on, as it recorded; an error naming
    ``--data`` when it recorded none or the data is gone."""
    training = info.metadata.get("training")
    recorded = training.get("data") if isinstance(training, dict) else None
    if not isinstance(recorded, str):
        raise InputError(
            f"{printable(checkpoint)} records no training data (it was not saved by `zoo train`); "
            f"give the data to evaluate on with --data DIR"
        )
    if not Path(recorded).exists():
        raise InputError(
            f"{printable(checkpoint)} was trained on {printable(recorded)}, which is not there from here; "
            f"give the data to evaluate on with --data DIR"
        )
    return recorded


#: Where ``zoo eval``'s sequence length came from, as its output says it.
EVAL_CONTEXTS = {
    "--seq-len": "--seq-len",
    "trained": "the --seq-len the run trained at",
    "max_seq_len": "the model's max_seq_len, at most 1024",
}


def eval_context(given: int | None, model: Any) -> tuple[int, str]:
    """``zoo eval``'s sequence length and where it came from (a key of ``EVAL_CONTEXTS``):
    ``--seq-len``, else the one the run trained at (its record's ``seq_len``, which the
    loaded model's ``generation_config`` keeps as ``trained_context``: a loss at another
    length is not the one training reported), else the model's ``max_seq_len`` up to 1024."""
    if given is not None:
        return given, "--seq-len"
    trained = (getattr(model, "generation_config", None) or {}).get("trained_context")
    if type(trained) is int and trained > 0:
        return trained, "trained"
    return min(getattr(model.config, "max_seq_len", 1024), 1024), "max_seq_len"


def cmd_eval(args: argparse.Namespace, ui: Ui) -> int:
    if args.tasks is not None:
        return cmd_eval_tasks(args, ui)
    source = args.checkpoint
    tokenizer = args.tokenizer
    if (Path(source) / "config.json").is_file() or is_hub_id(source):  # a Hugging Face folder or hub id
        if args.data is None:
            raise InputError(
                f"{printable(source)} is a Hugging Face model and records no training data; "
                f"give the data to evaluate on with --data DIR"
            )
        folder, _ = local_or_snapshot(source)
        model: zoo.DecoderLM | zoo.EncoderDecoder = zoo.from_hf(folder)
        local = (Path(source) / "config.json").is_file()
        own = (str(folder) if local else source) if has_tokenizer(folder) else None  # an id, never its cache path
        tokenizer = tokenizer or own
        data, shown = args.data, str(folder)
    else:
        info = inspect(source, version=args.version, verify=False)
        data = args.data if args.data is not None else run_data(source, info)
        model = zoo.load(info.path)
        tokenizer = tokenizer or recorded_tokenizer_source(info.path, unpack=tokenizer_cache())  # the run's own
        shown = str(info.path)
    seq_len, why = eval_context(args.seq_len, model)
    result = evaluate(
        model,
        data,
        split=args.split,
        seq_len=seq_len,
        batch_size=args.batch_size,
        batches=args.batches,
        tokenizer=tokenizer,
    )
    if ui.json_mode:
        ui.json({**result.to_dict(), "checkpoint": shown, "data": data, "seq_len": seq_len, "seq_len_from": why})
        return 0
    title = f"{shown} on the {result.split} split of {data}, seq_len {seq_len}"
    title += f" ({EVAL_CONTEXTS[why]})" if why != "--seq-len" else ""
    table = new_table(title, "measure", "value", right=("value",))
    table.add_row("loss", f"{result.loss:.4f}")
    table.add_row("perplexity", f"{result.perplexity:.2f}")
    table.add_row("tokens", fmt_int(result.tokens))
    table.add_row("bits per byte", "-" if result.bits_per_byte is None else f"{result.bits_per_byte:.4f}")
    ui.print(table)
    return 0

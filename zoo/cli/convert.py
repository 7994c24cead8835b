"""``zoo convert``: Hugging Face folders and nanoGPT checkpoints to zoo checkpoints, and
zoo checkpoints to Hugging Face folders."""

from __future__ import annotations

import argparse
import json
import os

import zoo
from zoo.checkpoint.store import SUFFIX
from zoo.cli.arguments import (
    refuse_checkpoint_out,
    refuse_overwriting_inputs,
)
from zoo.cli.render import Ui, fmt_int
from zoo.errors import InputError
from zoo.interop.hub import local_or_snapshot
from zoo.pipelines import keep_tokenizer
from zoo.text.loading import has_tokenizer


def cmd_convert(args: argparse.Namespace, ui: Ui) -> int:
    source = args.from_hf or args.from_nanogpt
    model: zoo.DecoderLM | zoo.EncoderDecoder
    if source and args.version is not None:
        raise InputError(
            "--version selects a version of the --to-hf checkpoint folder; --from-hf and --from-nanogpt take none"
        )
    if args.meta is not None and not args.from_nanogpt:
        raise InputError("--meta is nanoGPT's meta.pkl, read with --from-nanogpt; drop it")
    if source:
        refuse_checkpoint_out(args.out, args.overwrite)  # before reading the source
        replaced = args.overwrite and args.out.endswith(SUFFIX)
        inputs: dict[str, object] = {
            "--from-hf": args.from_hf,
            "--from-nanogpt": args.from_nanogpt,
            "--meta": args.meta,
        }
        if replaced and args.from_hf and os.path.isdir(args.from_hf):  # -o HF/model.safetensors: a file it reads
            inputs["a file of --from-hf"] = [
                os.path.join(args.from_hf, name) for name in sorted(os.listdir(args.from_hf))
            ]
        refuse_overwriting_inputs(args.out, replaced, inputs)
        metadata = None
        with ui.status(f"reading {source}"):
            if args.from_hf:
                folder, commit = local_or_snapshot(args.from_hf, args.revision)
                model = zoo.from_hf(folder, allow_nonfinite=args.allow_nonfinite)
            else:
                model = zoo.from_nanogpt(source, allow_nonfinite=args.allow_nonfinite, meta=args.meta)
        if args.from_hf and has_tokenizer(folder) and not args.out.endswith(".safetensors"):
            metadata = {"tokenizer": keep_tokenizer(folder, args.out)}  # beside the versions; a file embeds them
        with ui.status(f"saving to {args.out}"):
            written = zoo.save(model, args.out, metadata=metadata)
        count = fmt_int(model.num_parameters())
        ui.line(f"converted {source} ({count} parameters) to the zoo checkpoint {written}", "green")
    else:
        refuse_overwriting_inputs(args.out, args.overwrite, {"--to-hf": args.to_hf})
        with ui.status(f"loading {args.to_hf}"):
            model = zoo.load(args.to_hf, version=args.version)
        with ui.status(f"writing a Hugging Face model to {args.out}"):
            folder = zoo.to_hf(model, args.out, architecture=args.architecture, overwrite=args.overwrite)
        architecture = json.loads((folder / "config.json").read_text(encoding="utf-8"))["architectures"][0]
        ui.line(f"converted {args.to_hf} to the Hugging Face folder {args.out} ({architecture})", "green")
    return 0

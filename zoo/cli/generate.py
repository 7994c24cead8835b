"""``zoo generate``: text from a checkpoint, a Hugging Face folder or a hub id, streamed as
it comes; its flags (every keyword of ``zoo.generate_text``) are ``zoo.cli.parsers.generate``'s."""

from __future__ import annotations

import argparse
from typing import cast

from rich.text import Text

from zoo.cli.parsers.generate import API_FLAGS, EARLY_STOPPING
from zoo.cli.render import Ui, terminal_text
from zoo.pipelines import generate_text, load_with_tokenizer


def cmd_generate(args: argparse.Namespace, ui: Ui) -> int:
    passed = set(API_FLAGS) - {"do_sample", "num_return_sequences", "tokenizer", "revision"}  # decided below
    options = {key: getattr(args, key) for key in passed if getattr(args, key) is not None}
    if args.early_stopping is not None:
        options["early_stopping"] = EARLY_STOPPING[args.early_stopping]
    # Greedy unless asked to sample; a sampling flag (temperature, top-k, top-p) asks.
    sampling_flags = any(getattr(args, key) is not None for key in ("temperature", "top_k", "top_p"))
    # Neither flag: the model's own choice (its generation_config), else greedy.
    if args.sample or args.greedy or sampling_flags:
        options["do_sample"] = args.sample or (sampling_flags and not args.greedy)
    count = args.num_return_sequences

    with ui.status(f"loading {args.model}"):
        model, own = load_with_tokenizer(
            args.model, revision=args.revision, version=args.version, carried=args.tokenizer is None
        )
    # Given, else the model's own; neither: GPT-2's for GPT-2's vocabulary (generate_text decides).
    tokenizer = args.tokenizer if args.tokenizer is not None else own

    # Control characters a model spells reach a terminal as escapes; raw bytes go to a pipe only with --raw.
    raw = args.raw and not ui.out.is_terminal
    shown = (lambda text: text) if raw else terminal_text
    echo = [] if args.no_echo else [shown(args.prompt)]  # shown once text starts coming

    def write_echo() -> None:
        if echo and not raw:
            ui.out.print(Text(echo[0], style="bold"), end="", soft_wrap=True)
        elif echo:
            ui.out.file.write(echo[0])
        echo.clear()

    def on_text(piece: str) -> None:
        write_echo()
        ui.out.file.write(shown(piece))  # not through rich, which would turn tabs into spaces
        ui.out.file.flush()

    if count == 1:
        generate_text(model, args.prompt, on_text=on_text, tokenizer=tokenizer, **options)
        write_echo()
        ui.out.file.write("\n")
        ui.out.file.flush()
        return 0
    texts = cast(
        list[str], generate_text(model, args.prompt, num_return_sequences=count, tokenizer=tokenizer, **options)
    )
    prompt = list(echo)
    for i, text in enumerate(texts, 1):
        ui.out.print(Text(f"[{i}/{count}] ", style="dim"), end="", soft_wrap=True)
        echo[:] = prompt
        write_echo()
        ui.out.file.write(shown(text) + "\n")
    ui.out.file.flush()
    return 0

"""``zoo generate``: text from a checkpoint or a Hugging Face folder, streamed as it comes."""

from __future__ import annotations

import argparse

from rich.text import Text

from zoo.cli.options import Commands, seed
from zoo.cli.render import Ui, terminal_text
from zoo.pipelines import generate_text


def add_parsers(commands: Commands) -> None:
    p = commands.add("generate", cmd_generate, "generate text from a checkpoint or a Hugging Face folder, streaming")
    p.add_argument("model", metavar="PATH_OR_HF_DIR")
    p.add_argument("--prompt", required=True)
    p.add_argument("--max-new-tokens", type=int, default=None)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--greedy", action="store_true", help="always take the most likely token (the default)")
    mode.add_argument(
        "--sample", action="store_true", help="sample (implied by --temperature, --top-k, --top-p); --seed repeats one"
    )
    p.add_argument("--temperature", type=float, default=None)
    p.add_argument("--top-k", type=int, default=None)
    p.add_argument("--top-p", type=float, default=None)
    p.add_argument("--repetition-penalty", type=float, default=None)
    p.add_argument("--seed", type=seed, default=None, help="seed of the sampling, 0 .. 2**64-1")
    p.add_argument("--no-echo", action="store_true", help="print only the generated text, not the prompt")
    p.add_argument(
        "--raw",
        action="store_true",
        help="when stdout is not a terminal, write the text exactly as generated, control characters included "
        "(default: control characters other than newline and tab are written as escapes such as \\x1b; "
        "on a terminal they always are)",
    )


def cmd_generate(args: argparse.Namespace, ui: Ui) -> int:
    options = {
        key: getattr(args, key)
        for key in ("max_new_tokens", "temperature", "top_k", "top_p", "repetition_penalty", "seed")
        if getattr(args, key) is not None
    }
    # Greedy unless asked to sample; a sampling flag (temperature, top-k, top-p) asks.
    sampling_flags = any(getattr(args, key) is not None for key in ("temperature", "top_k", "top_p"))
    options["do_sample"] = args.sample or (sampling_flags and not args.greedy)

    # Control characters a model spells reach a terminal as escapes; raw bytes go to a pipe only with --raw.
    raw = args.raw and not ui.out.is_terminal
    shown = (lambda text: text) if raw else terminal_text
    echo = [] if args.no_echo else [shown(args.prompt)]  # shown once text starts coming

    def on_text(piece: str) -> None:
        if echo and not raw:
            ui.out.print(Text(echo[0], style="bold"), end="", soft_wrap=True)
        elif echo:
            ui.out.file.write(echo[0])
        ui.out.file.write(shown(piece))  # not through rich, which would turn tabs into spaces
        ui.out.file.flush()
        echo.clear()

    # A Hugging Face folder (config.json) or a zoo checkpoint; generate_text tells them apart.
    generate_text(args.model, args.prompt, on_text=on_text, **options)
    if echo and not raw:
        ui.out.print(Text(echo[0], style="bold"), end="", soft_wrap=True)
    ui.out.file.write("".join(echo) * raw + "\n")
    ui.out.file.flush()
    return 0

"""``zoo generate``: text from a checkpoint or a Hugging Face folder, streamed as it comes."""

from __future__ import annotations

import argparse

from rich.text import Text

import zoo
from zoo.cli.options import Commands, add_seed, add_version, positive
from zoo.cli.render import Ui
from zoo.pipelines import generate_text


def add_parsers(commands: Commands) -> None:
    p = commands.add("generate", cmd_generate, "generate text from a checkpoint or a Hugging Face folder, streaming")
    p.add_argument("model", metavar="PATH_OR_HF_DIR", help="a zoo checkpoint file or folder, or a Hugging Face folder")
    add_version(p)
    p.add_argument("--prompt", required=True, metavar="TEXT", help="the text to continue ('' starts a sample)")
    p.add_argument("--max-new-tokens", type=positive, default=None, metavar="N", help="tokens to generate (default 50)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--greedy", action="store_true", help="always take the most likely token (the default)")
    mode.add_argument(
        "--sample", action="store_true", help="sample (implied by --temperature, --top-k, --top-p); --seed repeats one"
    )
    p.add_argument(
        "--temperature", type=float, default=None, metavar="TEMPERATURE", help="divides the logits (default 1.0)"
    )
    p.add_argument(
        "--top-k", type=positive, default=None, metavar="N", help="sample among the N most likely (default: all)"
    )
    p.add_argument(
        "--top-p",
        type=float,
        default=None,
        metavar="FRACTION",
        help="sample among the most likely tokens holding this share of the probability (default: all)",
    )
    p.add_argument(
        "--repetition-penalty",
        type=float,
        default=None,
        metavar="PENALTY",
        help="divides the logits of tokens seen so far (default 1.0: none)",
    )
    add_seed(p, "seed of the sampling, 0 .. 2**64-1 (default: a fresh one each run)")
    p.add_argument(
        "--tokenizer",
        default=None,
        metavar="NAME|DIR",
        help="gpt2, or a folder with vocab.json and merges.txt (default: the model folder's own, else gpt2)",
    )
    p.add_argument("--no-echo", action="store_true", help="print only the generated text (default: the prompt too)")


def cmd_generate(args: argparse.Namespace, ui: Ui) -> int:
    options = {
        key: getattr(args, key)
        for key in ("max_new_tokens", "temperature", "top_k", "top_p", "repetition_penalty", "seed")
        if getattr(args, key) is not None
    }
    # Greedy unless asked to sample; a sampling flag (temperature, top-k, top-p) asks.
    sampling_flags = any(getattr(args, key) is not None for key in ("temperature", "top_k", "top_p"))
    options["do_sample"] = args.sample or (sampling_flags and not args.greedy)

    echo = [] if args.no_echo else [Text(args.prompt, style="bold")]  # shown once text starts coming

    def on_text(piece: str) -> None:
        ui.out.print(*echo, Text(piece), sep="", end="", soft_wrap=True)
        ui.out.file.flush()
        echo.clear()

    # A Hugging Face folder (config.json) or a zoo checkpoint; generate_text tells them apart.
    model = args.model if args.version is None else zoo.load(args.model, version=args.version)
    generate_text(model, args.prompt, on_text=on_text, tokenizer=args.tokenizer, **options)
    ui.out.print(*echo, soft_wrap=True)
    return 0

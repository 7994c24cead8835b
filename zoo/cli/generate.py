"""``zoo generate``: text from a checkpoint, a Hugging Face folder or a hub id, streamed as it comes."""

from __future__ import annotations

import argparse

from rich.text import Text

from zoo.cli.options import Commands, seed
from zoo.cli.render import Ui
from zoo.errors import printable
from zoo.pipelines import generate_text, load_with_tokenizer


def add_parsers(commands: Commands) -> None:
    p = commands.add(
        "generate",
        cmd_generate,
        "generate text from a checkpoint, a Hugging Face folder or a hub id, streaming",
    )
    p.add_argument(
        "model",
        metavar="MODEL",
        help="a zoo checkpoint (file or run folder), a Hugging Face folder, or a hub id such as openai-community/gpt2",
    )
    p.add_argument("--prompt", required=True, help="the text to continue ('' starts from the start token)")
    p.add_argument(
        "--tokenizer",
        default=None,
        metavar="NAME|DIR|ID",
        help="gpt2, bytes, a folder with tokenizer.json, or a hub id (default: the model's own: the folder's "
        "files, the one a checkpoint records, else GPT-2's for GPT-2's vocabulary)",
    )
    length = p.add_mutually_exclusive_group()
    length.add_argument("--max-new-tokens", type=int, default=None, metavar="N", help="new tokens (default: 50)")
    length.add_argument(
        "--max-length", type=int, default=None, metavar="N", help="prompt plus new tokens, as in transformers"
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--greedy", action="store_true", help="always take the most likely token (the default)")
    mode.add_argument(
        "--sample", action="store_true", help="sample (implied by --temperature, --top-k, --top-p); --seed repeats one"
    )
    p.add_argument("--temperature", type=float, default=None, metavar="T", help="sampling temperature (default: 1.0)")
    p.add_argument("--top-k", type=int, default=None, metavar="K", help="sample among the K likeliest (default: all)")
    p.add_argument(
        "--top-p", type=float, default=None, metavar="P", help="sample within probability mass P (default: 1, all)"
    )
    p.add_argument(
        "--repetition-penalty", type=float, default=None, metavar="R", help="penalise seen tokens (default: 1.0, none)"
    )
    p.add_argument(
        "--num-return-sequences", type=int, default=1, metavar="N", help="continuations to sample (default: 1)"
    )
    p.add_argument(
        "--pad-token-id", type=int, default=None, metavar="ID", help="fills finished sequences (default: end-of-text)"
    )
    p.add_argument(
        "--seed", type=seed, default=None, metavar="N", help="seed of the sampling, 0 .. 2**64-1 (default: none)"
    )
    p.add_argument("--revision", default=None, metavar="REV", help="a hub id's branch, tag or commit (default: main)")
    p.add_argument("--version", type=int, default=None, metavar="N", help="a run folder's version (default: newest)")
    p.add_argument("--no-echo", action="store_true", help="print only the generated text, not the prompt")


def cmd_generate(args: argparse.Namespace, ui: Ui) -> int:
    options = {
        key: getattr(args, key)
        for key in (
            "max_new_tokens",
            "max_length",
            "temperature",
            "top_k",
            "top_p",
            "repetition_penalty",
            "seed",
            "pad_token_id",
        )
        if getattr(args, key) is not None
    }
    # Greedy unless asked to sample; a sampling flag (temperature, top-k, top-p) asks.
    sampling_flags = any(getattr(args, key) is not None for key in ("temperature", "top_k", "top_p"))
    options["do_sample"] = args.sample or (sampling_flags and not args.greedy)
    count = args.num_return_sequences

    with ui.err.status(f"loading {printable(args.model)}"):
        model, own = load_with_tokenizer(args.model, revision=args.revision, version=args.version)
    # Given, else the model's own; neither: GPT-2's for GPT-2's vocabulary (generate_text decides).
    tokenizer = args.tokenizer if args.tokenizer is not None else own

    echo = [] if args.no_echo else [Text(args.prompt, style="bold")]  # shown once text starts coming

    def on_text(piece: str) -> None:
        ui.out.print(*echo, Text(piece), sep="", end="", soft_wrap=True)
        ui.out.file.flush()
        echo.clear()

    if count == 1:
        generate_text(model, args.prompt, on_text=on_text, tokenizer=tokenizer, **options)
        ui.out.print(*echo, soft_wrap=True)
        return 0
    texts = generate_text(model, args.prompt, num_return_sequences=count, tokenizer=tokenizer, **options)
    for i, text in enumerate(texts, 1):
        ui.out.print(Text(f"[{i}/{count}] ", style="dim"), *echo, Text(text), sep="", soft_wrap=True)
    return 0

"""The parser of ``zoo generate`` (run by ``zoo.cli.generate``).

Every keyword of ``zoo.generate_text`` is a flag here with its name and meaning
(``API_FLAGS``), or says why it is not one (``NOT_FLAGS``); a test holds the two to
the function's signature, so a new keyword without a flag fails it.
"""

from __future__ import annotations

import argparse

from zoo.cli.options import Commands, add_revision, add_seed, add_version, at_least, positive

#: Each keyword of ``generate_text`` and the flag that gives it (the flag's dest is the keyword).
API_FLAGS = {
    "max_new_tokens": "--max-new-tokens", "max_length": "--max-length", "min_new_tokens": "--min-new-tokens",
    "do_sample": "--sample", "temperature": "--temperature", "top_k": "--top-k", "top_p": "--top-p",
    "repetition_penalty": "--repetition-penalty", "num_return_sequences": "--num-return-sequences",
    "num_beams": "--num-beams", "length_penalty": "--length-penalty", "early_stopping": "--early-stopping",
    "stop_strings": "--stop", "eos_token_id": "--eos-token-id", "pad_token_id": "--pad-token-id", "seed": "--seed",
    "tokenizer": "--tokenizer", "stop_at_eot": "--no-stop-at-eot", "revision": "--revision",
}  # fmt: skip

#: The keywords of ``generate_text`` that are no flag, and why.
NOT_FLAGS = {
    "generator": "a torch.Generator is a Python object; --seed makes one",
    "on_text": "the command's own: it streams the text to stdout",
}

#: ``--early-stopping``'s words and the ``early_stopping`` each stands for.
EARLY_STOPPING = {"true": True, "false": False, "never": "never"}


def token_ids(text: str) -> list[int]:
    """``--eos-token-id``: a token id, or a comma list of them (``50256`` or ``0,2``)."""
    try:
        ids = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a token id or a comma list of them (0,2), got {text!r}") from None
    if any(i < 0 for i in ids):
        raise argparse.ArgumentTypeError(f"token ids are 0 or more, got {text}")
    return ids


def add_parsers(commands: Commands) -> None:
    """Add the parsers of ``zoo generate`` to ``commands``."""
    p = commands.add(
        "generate",
        "cmd_generate",
    )
    p.add_argument(
        "model",
        metavar="MODEL",
        help="a zoo checkpoint (file or run folder), a Hugging Face folder, or a hub id such as openai-community/gpt2",
    )
    add_version(p, "a run folder")
    p.add_argument(
        "--prompt", required=True, metavar="TEXT", help="the text to continue ('' starts from the start token)"
    )
    p.add_argument(
        "--tokenizer",
        default=None,
        metavar="NAME|DIR|ID",
        help="gpt2, bytes, a folder with tokenizer.json, or a hub id (default: the model's own: the folder's "
        "files, the one a checkpoint records, else GPT-2's for GPT-2's vocabulary, bytes for 256)",
    )
    length = p.add_mutually_exclusive_group()
    length.add_argument("--max-new-tokens", type=positive, default=None, metavar="N", help="new tokens (default 50)")
    length.add_argument(
        "--max-length",
        type=positive,
        default=None,
        metavar="N",
        help="prompt plus new tokens, as in transformers (default: set by --max-new-tokens)",
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--greedy", action="store_true", help="take the most likely token (default: the model's choice)")
    mode.add_argument(
        "--sample", action="store_true", help="sample (implied by --temperature, --top-k, --top-p); --seed repeats one"
    )
    p.add_argument(
        "--temperature", type=float, default=None, metavar="TEMPERATURE", help="divides the logits (default 1.0)"
    )
    p.add_argument(
        "--top-k", type=positive, default=None, metavar="N", help="sample among the N likeliest (default: all)"
    )
    p.add_argument(
        "--top-p",
        type=float,
        default=None,
        metavar="FRACTION",
        help="sample among the likeliest tokens holding this share of the probability (default 1: all)",
    )
    p.add_argument(
        "--repetition-penalty",
        type=float,
        default=None,
        metavar="PENALTY",
        help="divides the logits of tokens seen so far (default 1.0: none)",
    )
    p.add_argument(
        "--num-return-sequences", type=positive, default=1, metavar="N", help="continuations to sample (default 1)"
    )
    p.add_argument(
        "--pad-token-id", type=int, default=None, metavar="ID", help="fills finished sequences (default: end-of-text)"
    )
    add_length_and_beams(p)
    add_seed(p, "seed of the sampling, 0 .. 2**64-1 (default: a fresh one each run)")
    add_revision(p)
    p.add_argument("--no-echo", action="store_true", help="print only the generated text (default: the prompt too)")
    p.add_argument(
        "--raw",
        action="store_true",
        help="when stdout is not a terminal, write the text exactly as generated, control characters included "
        "(default: control characters other than newline and tab are written as escapes such as \\x1b; "
        "on a terminal they always are)",
    )


def add_length_and_beams(p: argparse.ArgumentParser) -> None:
    """The flags of where a sequence ends and of beam search: ``generate_text``'s keywords."""
    p.add_argument(
        "--min-new-tokens",
        type=at_least(0),
        default=None,
        metavar="N",
        help="keep the EOS ids out until N new tokens are made (default 0, or the model's)",
    )
    p.add_argument(
        "--stop",
        dest="stop_strings",
        action="append",
        default=None,
        metavar="TEXT",
        help="end a sequence once its text completes TEXT (kept in the output); repeatable (default: none)",
    )
    ends = p.add_mutually_exclusive_group()
    ends.add_argument(
        "--eos-token-id",
        type=token_ids,
        action="extend",
        default=None,
        metavar="ID",
        help="end a sequence at this token id; repeatable or a comma list (0,2) (default: the model's EOS ids, "
        "else the tokenizer's end-of-text)",
    )
    ends.add_argument(
        "--no-stop-at-eot",
        dest="stop_at_eot",
        action="store_false",
        help="go on past the EOS ids to the length asked for (default: stop at them)",
    )
    p.add_argument(
        "--num-beams",
        type=positive,
        default=None,
        metavar="N",
        help="beam search over N beams; --num-return-sequences up to N of the best (default 1: none, or the model's)",
    )
    p.add_argument(
        "--length-penalty",
        type=float,
        default=None,
        metavar="PENALTY",
        help="with beams, a finished beam's score is its log-probability over its new tokens to this power "
        "(default 1.0)",
    )
    p.add_argument(
        "--early-stopping",
        nargs="?",
        const="true",
        choices=tuple(EARLY_STOPPING),
        default=None,
        help="with beams, stop once N beams have finished (true; the bare flag), once no running beam can beat "
        "the worst finished one at the current length (false), or at the longest length (never) "
        "(default false, or the model's)",
    )

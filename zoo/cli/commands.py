"""The ``zoo`` command table: each command's module and its one-line help.

It imports nothing but argparse, so that ``zoo --help``, ``zoo --version`` and a bare
``zoo`` answer from it without importing torch or a command module; a command that runs
imports its own parser module (``zoo.cli.parsers.<module>``, torch-free, which adds its
parser with the line kept here) and, to run, its handler's (``zoo.cli.<module>``).
"""

from __future__ import annotations

import argparse

__all__ = ["COMMANDS", "HELP", "MODULES", "top_parser"]

#: The command modules of ``zoo.cli`` and the commands each adds with their help, in the
#: order ``zoo --help`` lists them (a test checks this against what each module adds).
COMMANDS: dict[str, dict[str, str]] = {
    "presets": {
        "list": "list presets by family (PATTERN may use wildcards: 'gpt2-*')",
        "components": "list components and the plugin that provides each",
        "plugins": "list plugins: loaded, skipped, and failed (with why)",
        "info": "a config, its parameters by group, its FLOPs per token",
        "compare": "what differs between two configs; parameters, FLOPs",
    },
    "checkpoints": {
        "build": "build a model with its init and save it as a checkpoint",
        "inspect": "a checkpoint: format, config, providers, versions, tensors, digest",
    },
    "convert": {"convert": "convert Hugging Face folders and nanoGPT checkpoints to zoo checkpoints and back"},
    "generate": {"generate": "generate text from a checkpoint, a Hugging Face folder or a hub id, streaming"},
    "ablate": {
        "ablate": "train a base, each single swap (or a cumulative path) toward a target, and the target, over seeds"
    },
    "bench": {"bench": "run the benchmarks of bench/ (all, or one by name), forwarding arguments"},
    "train": {
        "data": "prepare training data",
        "train": "train a preset or a checkpoint on a corpus; under torchrun, on every rank",
        "eval": "evaluate a checkpoint: loss, perplexity, tokens, bits per byte; or lm-eval tasks (--tasks)",
        "plot": "draw runs' train and validation loss and learning rate against steps (and tokens), overlaid",
    },
    "probe": {
        "probe": "measure designs per layer on real text: residual RMS, gradient norms, attention entropy, "
        "update ratios"
    },
}

#: Each command's one-line help, by command.
HELP: dict[str, str] = {command: line for commands in COMMANDS.values() for command, line in commands.items()}
#: Each command's module, by command: its parser in ``zoo.cli.parsers.<module>``, its handler in ``zoo.cli.<module>``.
MODULES: dict[str, str] = {command: module for module, commands in COMMANDS.items() for command in commands}


def top_parser(version: str) -> argparse.ArgumentParser:
    """The ``zoo`` parser with its own flags (``--version``, ``--debug``) and no
    subcommands yet."""
    parser = argparse.ArgumentParser(
        prog="zoo",
        description="A plugin-based model zoo for transformer language models.",
    )
    parser.add_argument("--version", action="version", version=f"zoo {version}")
    parser.add_argument("--debug", action="store_true", default=False, help="show tracebacks of errors")
    return parser

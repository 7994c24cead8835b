"""The ``zoo`` command: look at presets and components, build, inspect, convert,
generate, ablate, train and benchmark.

Every subcommand maps onto the library: ``zoo info gpt2-small --set n_layers=2`` is
``zoo.get_config("gpt2-small", n_layers=2)`` plus ``zoo.summary.summarize``. Errors
the zoo raises on purpose (``ZooError``) print as one red line and exit 1; ``--debug``
shows the traceback. ``--json`` prints machine-readable output instead of tables.

Each command module (``presets``, ``checkpoints``, ``convert``, ``generate``, ``ablate``,
``bench``, ``train``, ``probe``) holds its commands' handlers, and its namesake in
``parsers`` their flags (``add_parsers``, torch-free, naming each handler); ``render`` shows
things, ``options`` holds the flags the commands share and ``arguments`` what their
arguments stand for. Only the parser module of the command given is imported, and its
handler's module once it runs (``zoo info`` loads no training code): ``zoo CMD -h`` imports
no torch and loads no plugin, and ``zoo --help``, ``zoo --version`` and an unknown command
answer from the command table (``commands``) alone.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import signal
import sys
import traceback
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import zoo
from zoo._startup import freeze_imports
from zoo.cli.commands import COMMANDS, HELP, top_parser
from zoo.errors import ZooError

if TYPE_CHECKING:
    from zoo.cli.render import Ui

__all__ = ["build_parser", "main", "run"]


def command_modules(argv: Sequence[str] | None = None) -> list[ModuleType]:
    """The parser modules (``zoo.cli.parsers``) a parser for ``argv`` needs: the one that adds its command
    (the first argument that is not a flag; ``zoo``'s own flags take no value), none for
    the top-level help, ``--version``, a bare ``zoo`` or an unknown command (answered from
    the command table, ``zoo.cli.commands``, without importing torch), and all of them
    without ``argv`` (the whole parser, as tests and the docs walk it)."""
    if argv is None:
        return [importlib.import_module(f"zoo.cli.parsers.{module}") for module in COMMANDS]
    args = list(argv)
    position = next((i for i, a in enumerate(args) if not a.startswith("-")), len(args))
    named = args[position] if position < len(args) else None
    helps = any(a == "-h" or (a.startswith("--h") and "--help".startswith(a)) for a in args[:position])
    wanted = [m for m, commands in COMMANDS.items() if named in commands and not helps]
    return [importlib.import_module(f"zoo.cli.parsers.{module}") for module in wanted]


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The ``zoo`` parser: its own flags, the parent parsers the commands share, and the
    subcommands ``argv`` may run (all of them without ``argv``); where ``argv`` runs no
    command, every command is listed by its help line alone."""
    parser = top_parser(zoo.__version__)
    modules = command_modules(argv)
    if not modules:
        listed = parser.add_subparsers(dest="command", metavar="COMMAND")
        for command, line in HELP.items():
            listed.add_parser(command, help=line)
        return parser
    from zoo.cli.options import make_commands

    commands = make_commands(parser)
    for module in modules:
        module.add_parsers(commands)
    return parser


def load_plugins(ui: Ui, *, quiet: bool) -> None:
    """Load the plugins now; each that failed is one warning line (``zoo plugins`` says
    more), and so is plugin control that names no installed plugin."""
    from zoo.nn.registry import default_registry

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RuntimeWarning)
        registry = default_registry()
    failures = {str(plugin.error) for plugin in registry.plugins if plugin.status == "failed"}
    for warning in caught:  # the registry's own warnings other than the failures said below
        if str(warning.message) not in failures:
            ui.warn(str(warning.message))
    if not quiet:
        for plugin in registry.plugins:
            if plugin.status == "failed":
                ui.warn(f"{plugin.error} (see `zoo plugins`)")


# Python arguments that library messages suggest, and the flags that do the same here.
CLI_HINTS = {
    "verify=False": "--no-verify",
    "overwrite=True": "--overwrite",
    "allow_nonfinite=True": "--allow-nonfinite",
    "(max_new_tokens=": "(--max-new-tokens ",
    "zoo.save(model, FOLDER) creates them": "`zoo build NAME -o FOLDER` or `zoo train NAME -o FOLDER` creates them",
    "load it with zoo.from_hf": "convert it with `zoo convert --from-hf FOLDER -o OUT`",
}


def cli_hints(message: str) -> str:
    """``message`` with the Python arguments it suggests named as the CLI's flags."""
    for python, flag in CLI_HINTS.items():
        message = message.replace(python, flag)
    return message


def quiet_broken_pipe() -> int:
    """The reader of stdout went away (``zoo info | head -1``): stop quietly, status 0.

    stdout is pointed at /dev/null so the interpreter's final flush does not fail again.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 0


def with_config_files(
    parser: argparse.ArgumentParser, argv: Sequence[str] | None, args: argparse.Namespace
) -> argparse.Namespace:
    """``args`` again with the command's config files as the flags' defaults: a resumed
    run's ``run.toml``, then ``--config FILE``; the command line overrides both."""
    command: argparse.ArgumentParser | None = getattr(args, "config_parser", None)
    if command is None:
        return args
    from zoo.cli.configfile import RUN_CONFIG, read_config

    run = resumed_run(args)
    defaults: dict[str, object] = {}
    saved = Path(run or args.out) / RUN_CONFIG if getattr(args, "resume", False) and (run or args.out) else None
    if saved is not None and saved.is_file():
        defaults.update(read_config(saved, command))
    if args.config is not None:
        defaults.update(read_config(args.config, command))
    if not defaults:
        return args
    command.set_defaults(**defaults)
    args = parser.parse_args(argv)
    if run is not None:  # the positional was the run's folder; the model is the one its run.toml names
        args.out, args.name = run, defaults.get("name")
    return args


def resumed_run(args: argparse.Namespace) -> str | None:
    """``zoo train RUN --resume``: the run's folder given as the positional, without
    ``-o``, when it holds the ``run.toml`` a run writes; else None."""
    from zoo.cli.configfile import RUN_CONFIG

    name = getattr(args, "name", None)
    if not getattr(args, "resume", False) or getattr(args, "out", None) is not None or not isinstance(name, str):
        return None
    return name if (Path(name) / RUN_CONFIG).is_file() else None


@contextlib.contextmanager
def warning_lines(ui: Ui) -> Iterator[None]:
    """Python warnings raised while a command runs (``warnings.warn``: generating past
    ``max_seq_len``, past the trained context), each shown as the command's own
    ``warning:`` line on stderr, not as Python's ``FILE:LINE: UserWarning:`` and a line
    of the zoo's source."""
    shown = warnings.showwarning

    def show(message: Warning | str, *args: object, **kwargs: object) -> None:
        ui.warn(cli_hints(str(message)))

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = shown


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``zoo`` command; returns the exit status."""
    parser = build_parser(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if args.command is None:  # bare `zoo`
        parser.print_help()
        return 0
    from zoo.cli.render import Ui

    ui = Ui(json_mode=getattr(args, "json", False))
    try:
        args = with_config_files(parser, argv, args)
        for message in getattr(args, "renamed_flags", []):
            ui.warn(message)
        load_plugins(ui, quiet=args.command == "plugins")
        with warning_lines(ui):
            code: int = args.handler(args, ui)
        return code
    except BrokenPipeError:
        return quiet_broken_pipe()
    except ZooError as err:
        if args.debug:
            from rich.text import Text

            ui.err.print(Text("".join(traceback.format_exception(err)), style="dim"), soft_wrap=True)
        ui.error(cli_hints(str(err)))
        return 1
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C: no traceback over the message
        ui.error("interrupted")
        return 130
    except Exception as err:  # a bug, not a user error: say so, keep it to one line
        if args.debug:
            raise
        ui.error(f"unexpected {type(err).__name__}: {err} (rerun with --debug for the traceback, and please report it)")
        return 2


def run() -> None:
    """The ``zoo`` program: what is imported by now (torch and the zoo) frozen out of the
    collector's way (``zoo._startup``: the process is the command's own), then ``main``
    on ``sys.argv`` (which imports the command's own module)."""
    freeze_imports()
    sys.exit(main())


if __name__ == "__main__":
    run()

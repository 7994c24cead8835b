"""The ``zoo`` command: look at presets and components, build, inspect, convert,
generate, ablate, train and benchmark.

Every subcommand maps onto the library: ``zoo info gpt2-small --set n_layers=2`` is
``zoo.get_config("gpt2-small", n_layers=2)`` plus ``zoo.summary.summarize``. Errors
the zoo raises on purpose (``ZooError``) print as one red line and exit 1; ``--debug``
shows the traceback. ``--json`` prints machine-readable output instead of tables.

Each command module (``presets``, ``checkpoints``, ``convert``, ``generate``, ``ablate``,
``bench``, ``train``, ``probe``) holds its commands' options (``add_parsers``) beside their
handlers; ``render`` shows things, ``options`` holds what the commands share.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import traceback
import warnings
from collections.abc import Sequence

from rich.text import Text

import zoo
from zoo.cli import ablate, bench, checkpoints, convert, generate, presets, probe, train
from zoo.cli.options import Commands
from zoo.cli.render import Ui
from zoo.errors import ZooError
from zoo.registry import default_registry

__all__ = ["build_parser", "main"]

#: The command modules, in the order their commands are listed in ``zoo --help``.
COMMAND_MODULES = (presets, checkpoints, convert, generate, ablate, bench, train, probe)


def build_parser() -> argparse.ArgumentParser:
    """The ``zoo`` parser: its own flags, the parent parsers the commands share, and each
    command module's subcommands."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks of errors")
    json_flag = argparse.ArgumentParser(add_help=False)
    json_flag.add_argument("--json", action="store_true", help="print JSON instead of tables")
    sets = argparse.ArgumentParser(add_help=False)
    sets.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config field; dotted keys reach into components (attention.name=eager); repeatable",
    )
    context = argparse.ArgumentParser(add_help=False)
    context.add_argument(
        "--context", type=int, default=None, metavar="N", help="sequence length for FLOPs/token (default: max_seq_len)"
    )

    parser = argparse.ArgumentParser(
        prog="zoo",
        description="A plugin-based model zoo for transformer language models.",
    )
    parser.add_argument("--version", action="version", version=f"zoo {zoo.__version__}")
    parser.add_argument("--debug", action="store_true", default=False, help="show tracebacks of errors")
    commands = Commands(
        sub=parser.add_subparsers(dest="command", metavar="COMMAND"),
        common=common,
        json_flag=json_flag,
        sets=sets,
        context=context,
    )
    for module in COMMAND_MODULES:
        module.add_parsers(commands)
    return parser


def load_plugins(ui: Ui, *, quiet: bool) -> None:
    """Load the plugins now; each that failed is one warning line (``zoo plugins`` says
    more), and so is plugin control that names no installed plugin."""
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


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``zoo`` command; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:  # bare `zoo`
        parser.print_help()
        return 0
    ui = Ui(json_mode=getattr(args, "json", False))
    try:
        load_plugins(ui, quiet=args.handler is presets.cmd_plugins)
        return args.handler(args, ui)
    except BrokenPipeError:
        return quiet_broken_pipe()
    except ZooError as err:
        if args.debug:
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


if __name__ == "__main__":
    sys.exit(main())

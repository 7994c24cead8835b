"""What the parsers of ``zoo``'s commands share: where they add their subcommands, the
handlers they name, the flags every command spells the same way, and argument types.

Nothing here imports torch: ``zoo CMD -h`` builds the parser from these and the command's
parser module (``zoo.cli.parsers``) alone. What the arguments stand for when a command runs
(the config a NAME names, outputs refused) is ``zoo.cli.arguments``.

The flag vocabulary, defined here once and used by every command:

- ``-o/--out PATH``: every output (file or folder); ``--output`` is an old spelling.
- ``--version N``: the version of a checkpoint folder to read (default: the newest);
  ``--checkpoint-version`` is an old spelling.
- ``--set FIELD=VALUE``: a model config field, repeatable.
- ``--batch-size N``, ``--seed N``, ``--tokenizer NAME|DIR``, ``--data PATH``,
  ``--device``, ``--dtype``, ``--quiet``, ``--config FILE``, ``--overwrite``.

Metavars name what a flag takes (``N``, ``LR``, ``FRACTION``, ``DIR``, ``FILE``, ``PATH``);
every help text states the default, and what "auto" resolves to. An old spelling still
works, hidden from ``--help``, and prints a warning naming the new one.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from zoo.checkpoint.records import check_revision
from zoo.cli.commands import HELP, MODULES
from zoo.errors import InteropError

if TYPE_CHECKING:
    from zoo.cli.render import Ui


@dataclasses.dataclass(frozen=True)
class Handler:
    """A command's handler by name: the function ``name`` of the command module
    ``zoo.cli.<module>``, imported when the command runs, so that building the parser (and
    ``zoo CMD -h``) imports none of what the command runs."""

    module: str
    name: str

    def __call__(self, args: argparse.Namespace, ui: Ui) -> int:
        """Run the handler on the parsed arguments; returns the exit status."""
        handler: Callable[[argparse.Namespace, Ui], int] = getattr(
            importlib.import_module(f"zoo.cli.{self.module}"), self.name
        )
        return handler(args, ui)


#: Metavars the flags use: each names what the flag takes.
METAVARS = frozenset(
    {"N", "LR", "FRACTION", "DIR", "FILE", "PATH", "ID", "NAME", "FIELD=VALUE", "KEY=VALUE", "TEXT",
     "NAME|DIR", "NAME|CHECKPOINT", "PATH_OR_HF_DIR", "PATTERN", "KIND", "TFLOPS", "NORM", "DECAY",
     "TEMPERATURE", "PENALTY", "PRESET", "CHECKPOINT", "INPUT", "AXIS,AXIS,...", "R,R,...", "N|all",
     "FILE|DIR", "ARGS", "A", "B", "REV", "MODEL", "NAME|DIR|ID", "DIR|ID", "NAME,NAME,...", "RUN",
     "CHECKPOINT|ID", "NAME|CHECKPOINT|ID", "DxL,DxL,...", "N,N,...", "LR,LR,...", "KEY=VALUE ...", "KEY=V1,V2,...", "RATIO", "FLOPS"}
)  # fmt: skip


class RenamedFlag(argparse.Action):
    """An old spelling of a flag: hidden from ``--help``, it sets the new flag's value and
    leaves a warning for ``main`` to print (``renamed_flags`` on the namespace)."""

    def __init__(self, option_strings: Sequence[str], dest: str, new: str, **kwargs: Any) -> None:
        self.new = new
        super().__init__(option_strings, dest, default=argparse.SUPPRESS, help=argparse.SUPPRESS, **kwargs)

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option: str | None = None
    ) -> None:
        setattr(namespace, self.dest, values)
        renamed = [*getattr(namespace, "renamed_flags", []), f"{option} is now {self.new}; the old spelling will go"]
        namespace.renamed_flags = renamed


def add_out(
    p: argparse.ArgumentParser, help: str, *, metavar: str = "PATH", required: bool = True, default: str | None = None
) -> None:
    """``-o/--out``: where a command writes (``--output`` is the old spelling)."""
    if not required and default is not None:
        help = f"{help} (default {default})"
    # One of the two is required: a group, so that the old spelling counts as giving it.
    group = p.add_mutually_exclusive_group(required=required)
    group.add_argument("-o", "--out", default=default, metavar=metavar, help=help)
    group.add_argument("--output", dest="out", action=RenamedFlag, new="-o/--out", metavar=metavar)


def add_version(p: argparse.ArgumentParser, what: str = "the checkpoint folder") -> None:
    """``--version N``: which version of a checkpoint folder to read (``--checkpoint-version``
    is the old spelling)."""
    p.add_argument(
        "--version",
        type=positive,
        default=None,
        metavar="N",
        help=f"the version of {what} to read (default: the newest)",
    )
    p.add_argument(
        "--checkpoint-version", dest="version", type=positive, action=RenamedFlag, new="--version", metavar="N"
    )


def add_revision(p: argparse.ArgumentParser, help: str = "a hub id's branch, tag or commit (default: main)") -> None:
    """``--revision REV``: the branch, tag or commit of a hub id to read."""
    p.add_argument("--revision", type=revision, default=None, metavar="REV", help=help)


def add_seed(p: argparse.ArgumentParser, help: str) -> None:
    """``--seed N``: 0 .. 2**64 - 1."""
    p.add_argument("--seed", type=seed, default=None, metavar="N", help=help)


def add_overwrite(p: argparse.ArgumentParser, help: str) -> None:
    """``--overwrite``: replace an output whole instead of refusing it."""
    p.add_argument("--overwrite", action="store_true", help=help)


def add_batch_size(p: argparse.ArgumentParser, help: str, default: int | None = None) -> None:
    """``--batch-size N``: sequences per step."""
    p.add_argument("--batch-size", type=positive, default=default, metavar="N", help=help)


def add_sets(p: argparse.ArgumentParser, dest: str = "set", flag: str = "--set", help: str | None = None) -> None:
    """``--set FIELD=VALUE``, repeatable."""
    p.add_argument(
        flag,
        dest=dest,
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help=help
        or "override a model config field; dotted fields reach into components (attention.name=eager); "
        "repeatable (default: the config as it is)",
    )


def add_config(p: argparse.ArgumentParser, command: str) -> None:
    """``--config FILE``: the command's flags from a TOML file (``zoo.cli.configfile``)."""
    p.add_argument(
        "--config",
        default=None,
        metavar="FILE",
        help=f"a TOML file of `zoo {command}` flags by name (batch_size = 16); flags given here override it "
        "(default: none)",
    )
    p.set_defaults(config_parser=p)


class SubcommandParser(argparse.ArgumentParser):
    """A subcommand's parser: a flag it does not know is its own usage error, with its
    usage line (``zoo generate --nope``), not the top-level ``zoo``'s that argparse shows."""

    given: list[str] = []

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        self.given = list(args or ())
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras

    def error(self, message: str) -> Any:  # NoReturn, as argparse's
        """Say an unknown flag first (before a missing argument it may have been meant to
        give), and where the flags are listed."""
        unknown = self.unknown_flags()
        if unknown:
            message = f"unrecognized arguments: {' '.join(unknown)}"
        if message.startswith("unrecognized"):
            message += f" (see `{self.prog} --help`)"
        super().error(message)

    def unknown_flags(self) -> list[str]:
        """The flags given that name none of this parser's (nor abbreviate one); none for
        a command forwarding its arguments (``zoo bench``), whose flags are another's."""
        if any(action.nargs == argparse.REMAINDER for action in self._actions):
            return []
        known = [flag for action in self._actions for flag in action.option_strings]
        unknown = []
        for arg in self.given[: self.given.index("--")] if "--" in self.given else self.given:
            if not arg.startswith("-") or arg == "-" or self._negative_number_matcher.match(arg):
                continue
            flag = arg.split("=", 1)[0] if arg.startswith("--") else arg[:2]
            if not any(k == flag or (flag.startswith("--") and k.startswith(flag)) for k in known):
                unknown.append(arg)
        return unknown


@dataclasses.dataclass(frozen=True)
class Commands:
    """The ``zoo`` parser's subcommands and the parent parsers the commands share; each
    command module's ``add_parsers`` adds its commands here."""

    sub: argparse._SubParsersAction[argparse.ArgumentParser]
    common: argparse.ArgumentParser  # --debug, on every command
    json_flag: argparse.ArgumentParser  # --json
    sets: argparse.ArgumentParser  # --set KEY=VALUE
    context: argparse.ArgumentParser  # --context N

    def add(self, name: str, handler: str, parents: Sequence[argparse.ArgumentParser] = ()) -> argparse.ArgumentParser:
        """A subcommand ``name`` run by the function ``handler`` of its command module (the
        command table's, ``zoo.cli.commands``), with ``--debug`` and ``parents``' flags; its
        help is the table's line."""
        p = self.sub.add_parser(name, help=HELP[name], description=HELP[name], parents=[self.common, *parents])
        p.set_defaults(handler=Handler(MODULES[name], handler))
        return p


def make_commands(parser: argparse.ArgumentParser) -> Commands:
    """The subcommands of ``parser`` and the parent parsers of the flags they share."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks of errors")
    json_flag = argparse.ArgumentParser(add_help=False)
    json_flag.add_argument("--json", action="store_true", help="print JSON instead of tables")
    sets = argparse.ArgumentParser(add_help=False)
    add_sets(sets)
    context = argparse.ArgumentParser(add_help=False)
    context.add_argument(
        "--context",
        type=int,  # the summary says what a wrong one is
        default=None,
        metavar="N",
        help="sequence length for FLOPs/token (default: max_seq_len)",
    )
    return Commands(
        sub=parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=SubcommandParser),
        common=common,
        json_flag=json_flag,
        sets=sets,
        context=context,
    )


def at_least(least: int) -> Callable[[str], int]:
    """The flag type of a count: an integer >= ``least``."""

    def count(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"must be {least} or more, got {text}")
        return value

    return count


positive = at_least(1)  # a count: an integer >= 1


def revision(text: str) -> str:
    """``--revision``: a branch or tag name git accepts, or a commit (``check_revision``)."""
    try:
        checked = check_revision(text)
    except InteropError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    assert checked is not None
    return checked


def seed(text: str) -> int:
    """``--seed``: an integer torch can seed with, 0 to 2**64 - 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if not 0 <= value < 1 << 64:
        raise argparse.ArgumentTypeError(f"must lie in 0 .. 2**64-1 (18446744073709551615), got {text}")
    return value

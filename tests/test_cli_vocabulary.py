"""One vocabulary of flags across every ``zoo`` subcommand (zoo/cli/options.py):
``-o/--out`` for outputs, ``--version N`` wherever a checkpoint folder is read,
``--set FIELD=VALUE`` wherever a config is made, ``--batch-size``; metavars that name
what a flag takes; every default stated in ``--help``; old spellings still work, hidden,
with a warning naming the new one."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from helpers import subcommands
from zoo.cli import main
from zoo.cli.options import METAVARS

COMMANDS = subcommands()
OUTPUTS = ("build", "convert", "data prepare", "train", "ablate", "plot", "probe")  # what writes files
READS_CHECKPOINTS = ("inspect", "eval", "generate", "convert", "train")  # what reads a checkpoint folder
MAKES_CONFIGS = ("info", "compare", "build", "train", "ablate")  # what builds a config from a name
PENDING: set[str] = set()


def visible(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.option_strings and a.help != argparse.SUPPRESS]


def flags(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {flag: action for action in visible(parser) for flag in action.option_strings}


def test_the_commands_are_found() -> None:
    assert {"list", "info", "build", "inspect", "convert", "data prepare", "train", "eval", "generate"} <= set(COMMANDS)


@pytest.mark.parametrize("command", OUTPUTS)
def test_every_output_is_dash_o_out(command: str) -> None:
    action = flags(COMMANDS[command])["--out"]
    assert action.option_strings == ["-o", "--out"] and action.dest == "out"


def test_every_command_writing_a_file_offers_overwrite() -> None:
    """A ``-o FILE`` output that exists is refused (``refuse_existing_file``): every command
    with one has ``--overwrite`` to say replace it."""
    writes_files = [
        c for c in COMMANDS if "--out" in flags(COMMANDS[c]) and flags(COMMANDS[c])["--out"].metavar == "FILE"
    ]
    assert {"plot", "probe"} <= set(writes_files)
    assert [c for c in writes_files if "--overwrite" not in flags(COMMANDS[c])] == []


@pytest.mark.parametrize("command", sorted(set(COMMANDS) - PENDING))
def test_no_command_shows_an_old_spelling(command: str) -> None:
    shown = set(flags(COMMANDS[command]))
    assert not shown & {"--output", "--checkpoint-version", "--batch", "--layers", "--heads", "--d-model"}, shown


@pytest.mark.parametrize("command", READS_CHECKPOINTS)
def test_a_checkpoint_folder_is_read_at_dash_dash_version(command: str) -> None:
    action = flags(COMMANDS[command])["--version"]
    assert action.metavar == "N" and action.default is None and "newest" in action.help


@pytest.mark.parametrize("command", MAKES_CONFIGS)
def test_set_field_value_wherever_a_config_is_made(command: str) -> None:
    action = flags(COMMANDS[command])["--set"]
    assert action.metavar == "FIELD=VALUE" and isinstance(action, argparse._AppendAction)


def test_batch_size_is_one_name() -> None:
    for command in ("train", "eval", "ablate"):
        assert flags(COMMANDS[command])["--batch-size"].metavar == "N"


@pytest.mark.parametrize("command", sorted(set(COMMANDS) - PENDING))
def test_metavars_name_what_they_take(command: str) -> None:
    for action in visible(COMMANDS[command]):
        if action.nargs == 0 or action.choices is not None:
            continue  # a switch, or a choice shown as {a,b}
        assert action.metavar in METAVARS, (command, action.option_strings, action.metavar)
    for action in COMMANDS[command]._actions:
        if not action.option_strings and action.nargs != argparse.PARSER and action.choices is None:
            assert action.metavar in METAVARS, (command, action.dest, action.metavar)  # positionals too


@pytest.mark.parametrize("command", sorted(set(COMMANDS) - PENDING))
def test_every_default_is_stated(command: str) -> None:
    parser = COMMANDS[command]
    one_of = {id(a) for group in parser._mutually_exclusive_groups if group.required for a in group._group_actions}
    for action in visible(parser):
        if isinstance(action, (argparse._HelpAction, argparse._VersionAction)) or action.required:
            continue
        if id(action) in one_of:
            continue  # one of a group is required: no default
        if action.nargs == 0 and action.dest in {"debug", "json", "resume", "greedy", "sample"}:
            continue  # a switch whose help says what it turns on
        assert action.help and "default" in action.help, (command, action.option_strings, action.help)
        assert "default auto" not in action.help  # say what auto resolves to


def test_old_spellings_work_and_warn(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "m"
    args = ["build", "gpt2-small", "--set", "n_layers=1", "--set", "d_model=32", "--set", "n_heads=2"]
    assert main([*args, "--output", str(folder)]) == 0
    assert main([*args, "-o", str(folder)]) == 0
    err = capsys.readouterr().err
    assert err.count("--output is now -o/--out") == 1
    assert main(["inspect", str(folder), "--checkpoint-version", "1", "--json"]) == 0
    out, err = capsys.readouterr()
    assert "--checkpoint-version is now --version" in err and '"version": 1' in out
    assert main(["inspect", str(folder), "--version", "2", "--json"]) == 0
    out, err = capsys.readouterr()
    assert '"version": 2' in out and "warning" not in err
    assert main(["inspect", str(folder), "--version", "3"]) == 1
    assert "has no version 3; its versions are 1, 2" in capsys.readouterr().err


def test_help_names_every_flag_of_the_vocabulary(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["eval", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for shown in ("--version N", "--batch-size N", "(default 8)", "(default: the newest)", "(default val)"):
        assert shown in text, shown


def test_ablate_takes_the_vocabulary_and_repeats_itself_in_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = "--d-model 16 --layers 1 --heads 2 --batch 2 --seq-len 16 --steps 1 --eval-every 1 --seeds 1"
    args = [*old.split(), "--tokenizer", "bytes", "--max-chars", "4000", "--threads", "1", "--json"]
    assert main(["ablate", "--from", "transformer-2017", "--to", "gpt2-small", *args, "-o", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    for spelling, new in (
        ("--d-model", "--set d_model=N"),
        ("--layers", "--set n_layers=N"),
        ("--batch", "--batch-size"),
    ):
        assert f"warning: {spelling} is now {new}" in err, err
    report = (tmp_path / "report.md").read_text(encoding="utf-8")
    (repeat,) = [line for line in report.splitlines() if "zoo ablate --from" in line]
    for shown in ("--set d_model=16", "--set n_layers=1", "--set n_heads=2", "--batch-size 2", f"-o {tmp_path}"):
        assert shown in repeat, repeat
    assert "--d-model" not in repeat and "--batch " not in repeat
    assert main(["ablate", "--set", "norm_eps=0.1", "-o", str(tmp_path / "x")]) == 1
    assert (
        "zoo ablate sets the scale both sides train at (d_model, n_layers, n_heads, dropout)" in capsys.readouterr().err
    )

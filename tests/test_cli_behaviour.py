"""The CLI's behaviour: usage errors, numbers never clipped, piped output, progress on
stderr, a closed pipe, bare `zoo`, inspect's flags, hints naming flags, plugin control
by distribution name.

(Once ``test_hardening.py``, by the items of issue 9.)
"""

from __future__ import annotations

import argparse
import importlib
import io
import json
import sys
from pathlib import Path

import pytest

import zoo
from helpers import ZOO, edit_metadata, run, subcommands, tiny
from zoo.cli import main
from zoo.cli.commands import HELP, MODULES
from zoo.cli.options import Handler
from zoo.cli.presets import cmd_list
from zoo.cli.render import PipeConsole, Ui

ROOT = Path(__file__).resolve().parents[1]


def test_a_huge_seed_is_a_usage_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["build", "gpt2-small", "-o", str(tmp_path / "x"), "--seed", "1180591620717411303424"])
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert "--seed" in err and "2**64-1" in err and "unexpected" not in err


def test_numbers_are_never_clipped_in_a_narrow_terminal() -> None:
    ui = Ui()
    buffer = io.StringIO()
    ui.out = PipeConsole(file=buffer, width=60, force_terminal=True, color_system=None, highlight=False)
    assert cmd_list(type("Args", (), {"pattern": "gpt2-*"})(), ui) == 0
    text = buffer.getvalue()
    assert "1,557,611,200" in text and "774,030,080" in text


def test_piped_output_is_not_width_limited() -> None:
    result = run([*ZOO, "list"], {"COLUMNS": "40"})
    assert result.returncode == 0 and "1,557,611,200" in result.stdout
    assert "GPT-2 XL: 48 layers, d_model 1600, 25 heads" in result.stdout  # descriptions whole too


def test_progress_goes_to_stderr_and_results_to_stdout(tmp_path: Path) -> None:
    source = "".join(path.read_text(encoding="utf-8") for path in (ROOT / "zoo/cli").glob("*.py"))
    assert "ui.out.status" not in source and "console=ui.out" not in source
    result = run([*ZOO, "build", "gpt2-small", "--set", "n_layers=1", "-o", str(tmp_path / "m.safetensors")])
    assert result.returncode == 0 and result.stdout.count("\n") == 1 and "saved to" in result.stdout


def test_a_closed_pipe_exits_quietly() -> None:
    result = run(["bash", "-c", f"{sys.executable} -m zoo info gpt2-small | head -1; exit ${{PIPESTATUS[0]}}"])
    assert result.returncode == 0 and result.stderr == ""
    assert result.stdout.startswith("gpt2-small")


def test_bare_zoo_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: zoo") and "inspect" in out


def test_inspect_selects_versions_with_its_own_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    zoo.save(tiny(), tmp_path / "run")
    zoo.save(tiny(), tmp_path / "run")
    assert main(["inspect", str(tmp_path / "run"), "--version", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["version"] == 1
    assert main(["inspect", str(tmp_path / "run"), "--checkpoint-version", "2", "--json"]) == 0  # the old spelling
    out, err = capsys.readouterr()
    assert json.loads(out)["version"] == 2 and "--checkpoint-version is now --version" in err


def test_error_hints_name_cli_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = zoo.save(tiny(), tmp_path / "m.safetensors")
    path.write_bytes(edit_metadata(path.read_bytes(), signed=False, zoo_digest=None))
    assert main(["inspect", str(path)]) == 1
    err = capsys.readouterr().err
    assert "--no-verify" in err and "verify=False" not in err


def test_an_hf_folder_given_as_a_checkpoint_gets_the_commands_that_read_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The library's hints (zoo.save, zoo.from_hf) reach the CLI as the commands that do the same."""
    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    assert main(["inspect", str(folder)]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "zoo build NAME -o FOLDER" in err and "zoo convert --from-hf FOLDER -o OUT" in err, err
    assert "zoo.save" not in err and "zoo.from_hf" not in err, err


def test_plugin_control_accepts_distribution_names_and_warns_about_unknown_ones() -> None:
    skipped = run([*ZOO, "plugins", "--json"], {"ZOO_DISABLE_PLUGINS": "zoo-lm-modern"})
    modern = [p for p in json.loads(skipped.stdout) if p["name"] == "modern"]
    assert modern and modern[0]["status"] == "skipped"
    allowed = run([*ZOO, "plugins", "--json"], {"ZOO_PLUGINS": "zoo_lm.modern"})  # pip's spelling rules
    assert [p["status"] for p in json.loads(allowed.stdout) if p["name"] == "modern"] == ["loaded"]
    unknown = run([*ZOO, "list"], {"ZOO_DISABLE_PLUGINS": "no-such-plugin"})
    assert unknown.returncode == 0 and "'no-such-plugin'" in unknown.stderr and "warning" in unknown.stderr


def test_the_command_table_names_what_each_module_adds() -> None:
    """``zoo.cli.commands.COMMANDS`` is how a command finds its parser module without importing
    the rest: each module adds exactly the commands listed for it, and ``zoo --help`` lists
    them in the table's order."""
    from zoo.cli import build_parser, command_modules
    from zoo.cli.commands import COMMANDS
    from zoo.cli.options import make_commands

    def names(parser: argparse.ArgumentParser) -> tuple[str, ...]:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        return tuple(sub.choices)

    for module_name, listed in COMMANDS.items():
        parser = argparse.ArgumentParser()
        (module,) = command_modules([next(iter(listed))])
        assert module.__name__ == f"zoo.cli.parsers.{module_name}"
        module.add_parsers(make_commands(parser))
        assert names(parser) == tuple(listed)
    everything = tuple(name for listed in COMMANDS.values() for name in listed)
    assert names(build_parser()) == everything
    assert names(build_parser(["--debug", "no-such-command"])) == everything  # argparse lists them all
    assert names(build_parser(["--he", "info"])) == everything  # the top-level help, before the command
    assert names(build_parser(["info", "--help"])) == tuple(COMMANDS["presets"])  # the command's own help


def test_a_command_imports_its_own_module_only_and_the_program_freezes_its_imports() -> None:
    """``zoo info`` loads no training, ablation-running or probing code, and ``zoo`` (``run``) moves
    its imports out of the collector's way (``zoo._startup``); ``main`` does not."""
    script = (
        "import gc, sys\n"
        "from zoo.cli import main, run\n"
        "main(['info', 'gpt2-small'])\n"
        "assert gc.get_freeze_count() == 0, 'main froze'\n"
        "loaded = sorted(m for m in sys.modules if m.startswith(('zoo.cli.', 'zoo.training', 'zoo.ablate', 'zoo.probe')))\n"
        "print('LOADED', ' '.join(loaded), file=sys.stderr)\n"
        "sys.argv = ['zoo', 'list', 'gpt2-small']\n"
        "try:\n"
        "    run()\n"
        "except SystemExit as exit:\n"
        "    print('FROZEN', gc.get_freeze_count(), exit.code, file=sys.stderr)\n"
    )
    result = run([sys.executable, "-c", script])
    assert result.returncode == 0, result.stderr
    loaded = next(line for line in result.stderr.splitlines() if line.startswith("LOADED")).split()[1:]
    assert "zoo.cli.presets" in loaded
    heavy = ("zoo.training", "zoo.ablate.runner", "zoo.ablate.ablation", "zoo.probe", "zoo.cli.train", "zoo.cli.ablate")
    assert not [m for m in loaded if m.startswith(heavy)], loaded
    frozen, code = next(line for line in result.stderr.splitlines() if line.startswith("FROZEN")).split()[1:]
    assert int(frozen) > 100_000 and code == "0"  # torch alone leaves hundreds of thousands


TORCH_FREE_SCRIPT = """
import sys
from zoo.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as exit:
    code = exit.code
print("TORCH", "torch" in sys.modules, "COMMANDS", any(m.startswith("zoo.cli.") and m not in
      ("zoo.cli.commands",) for m in sys.modules), "CODE", code, file=sys.stderr)
"""


@pytest.mark.parametrize(
    ("argv", "code"),
    [(["--help"], 0), (["-h"], 0), (["--version"], 0), ([], 0), (["--he", "info"], 0), (["no-such-command"], 2)],
    ids=["help", "h", "version", "bare", "help-before-a-command", "unknown-command"],
)
def test_help_and_version_answer_without_importing_torch(argv: list[str], code: int) -> None:
    """``zoo --help``, ``--version``, a bare ``zoo`` and an unknown command answer from the
    command table: no torch, no command module; the help they print is the whole parser's."""
    result = run([sys.executable, "-c", TORCH_FREE_SCRIPT, *argv])
    said = next(line for line in result.stderr.splitlines() if line.startswith("TORCH")).split()
    assert said == ["TORCH", "False", "COMMANDS", "False", "CODE", str(code)], result.stderr
    if argv in (["--help"], []):
        from zoo.cli import build_parser

        assert result.stdout == build_parser().format_help()  # every module's parser, torch and all
    if argv == ["--version"]:
        assert result.stdout == f"zoo {zoo.__version__}\n"
    if code == 2:
        assert "invalid choice: 'no-such-command'" in result.stderr and "generate" in result.stderr


def parser_of(words: list[str]) -> argparse.ArgumentParser:
    """The whole parser's (``build_parser()``, every module's) parser of the command ``words``."""
    from zoo.cli import build_parser

    parser = build_parser()
    for word in words:
        (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        parser = sub.choices[word]
    return parser


#: Every command line with a parser of its own: the command table's commands, and ``data prepare``.
COMMAND_LINES = sorted(set(subcommands()) | set(HELP))

COMMAND_HELP_SCRIPT = """
import sys
from zoo.cli import main
from zoo.cli.commands import MODULES
try:
    code = main(sys.argv[1:])
except SystemExit as exit:
    code = exit.code
plugins = [m for m in sys.modules if m.startswith(("zoo.plugins", "zoo.nn.registry", "zoo_modern"))]
print("TORCH", "torch" in sys.modules, "PLUGINS", plugins != [], "HANDLER", f"zoo.cli.{MODULES[sys.argv[1]]}" in
      sys.modules, "CODE", code, file=sys.stderr)
"""


@pytest.mark.parametrize("command", COMMAND_LINES)
def test_every_commands_help_answers_without_torch(command: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``zoo CMD -h`` builds the command's parser alone (``zoo.cli.parsers``): no torch, no
    plugin, not the module that runs the command; and prints the whole parser's help for it."""
    monkeypatch.setenv("COLUMNS", "100")  # the same width in both processes
    result = run([sys.executable, "-c", COMMAND_HELP_SCRIPT, *command.split(), "-h"], {"COLUMNS": "100"})
    said = next(line for line in result.stderr.splitlines() if line.startswith("TORCH")).split()
    assert said == ["TORCH", "False", "PLUGINS", "False", "HANDLER", "False", "CODE", "0"], result.stderr
    assert result.stdout == parser_of(command.split()).format_help()
    assert result.stdout.startswith(f"usage: zoo {command} ")


def test_every_command_names_a_handler_of_its_own_module() -> None:
    """Each runnable command's parser names its handler (``zoo.cli.options.Handler``): a
    function of the command table's module for it, found when the command runs."""
    for command, parser in subcommands().items():
        handler = parser.get_default("handler")
        assert isinstance(handler, Handler), command
        assert handler.module == MODULES[command.split()[0]], command
        assert callable(getattr(importlib.import_module(f"zoo.cli.{handler.module}"), handler.name)), command


def test_import_zoo_imports_no_torch_until_a_name_needs_it() -> None:
    """``import zoo`` loads the errors and the version only; ``zoo.build`` then loads what it needs
    (the decode loop and the tokenizer reader register themselves on first use)."""
    script = (
        "import sys\n"
        "import zoo\n"
        "assert 'torch' not in sys.modules, 'import zoo imported torch'\n"
        "assert issubclass(zoo.ConfigError, zoo.ZooError)\n"
        "assert 'torch' not in sys.modules, 'the errors imported torch'\n"
        "model = zoo.build('gpt2-small', n_layers=1, d_model=32, n_heads=2, vocab_size=50, max_seq_len=16)\n"
        "import torch\n"
        "out = model.generate(torch.tensor([[1, 2, 3]]), 4)\n"
        "print('SHAPE', tuple(out.shape), 'DECODING', 'zoo.decoding' in sys.modules)\n"
    )
    result = run([sys.executable, "-c", script])
    assert result.returncode == 0, result.stderr
    assert "SHAPE (1, 7) DECODING True" in result.stdout


@pytest.mark.parametrize("workers", ["1", "2"])
def test_ablate_off_a_terminal_prints_a_line_per_run_as_it_starts_and_ends(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], workers: str
) -> None:
    """Into a log (CI, `> log 2>&1`), no bar drawn once at the end: each run's start, and
    its end with the final validation loss its record holds, every loss in full."""
    from helpers import TINY_ABLATION

    out = tmp_path / "out"
    assert main(["ablate", *TINY_ABLATION, "--seeds", "2", "--workers", workers, "--json", "-o", str(out)]) == 0
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    runs = [(s["checkpoint"], s["final_val_loss"]) for run in doc["runs"] for s in run["seeds"]]
    lines = captured.err.splitlines()
    started = [line for line in lines if line.startswith("started ")]
    finished = [line for line in lines if line.startswith("finished ")]
    assert len(started) == len(finished) == len(runs) + 2  # the control's two seeds besides
    losses = sorted(float(line.split("val loss ")[1].split()[0]) for line in finished)
    assert all(any(abs(loss - round(v, 4)) < 1e-9 for loss in losses) for _, v in runs)
    assert finished[-1].endswith(f"({len(finished)} done)") and "…" not in captured.err

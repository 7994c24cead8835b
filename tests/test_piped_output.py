"""Output that is not going to a terminal (a pipe, a file) is its content only: no line
padded past its last character, no blank first line, titles and captions on lines of
their own, never wrapped to a table's width; JSON numbers are numbers."""

from __future__ import annotations

import json

import pytest

from zoo.cli import main
from zoo.cli.render import Ui, new_table

COMMANDS = [
    ["list"],
    ["list", "gpt2-*"],
    ["components"],
    ["plugins"],
    ["info", "gpt2-small"],
    ["info", "transformer-2017-base"],
    ["compare", "transformer-2017", "gpt2-small"],
]


def check_plain(text: str) -> list[str]:
    lines = text.splitlines()
    assert lines and lines[0].strip(), f"blank first line: {text[:200]!r}"
    assert lines[-1].strip(), "blank last line"
    padded = [line for line in lines if line != line.rstrip()]
    assert not padded, f"{len(padded)} line(s) padded with spaces, e.g. {padded[0]!r}"
    return lines


@pytest.mark.parametrize("argv", COMMANDS, ids=" ".join)
def test_piped_tables_are_not_padded(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 0
    lines = check_plain(capsys.readouterr().out)
    if argv[0] == "info":  # the caption of the FLOPs table: one line, not folded to the table's width
        (caption,) = [line for line in lines if line.startswith("FLOPs: matmuls")]
        assert "attention scores" in caption and caption.endswith(" M")


def test_a_title_wider_than_its_table_stays_on_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    title = "runs/a-rather-long-run-name/v0003.safetensors on the val split of runs/data (seq_len 64)"
    table = new_table(title, "measure", "value", right=("value",))
    table.add_row("loss", "4.1234")
    table.caption = "a caption that is also much wider than the two columns of this table"
    Ui().print(table)
    lines = check_plain(capsys.readouterr().out)
    assert lines[0] == title and lines[-1] == table.caption
    assert [line.split() for line in lines[1:-1] if "─" not in line] == [["measure", "value"], ["loss", "4.1234"]]


def test_list_json_numbers_are_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "--json"]) == 0
    entries = json.loads(capsys.readouterr().out)
    for entry in entries:
        for key in ("layers", "d_model", "n_heads", "d_ff", "vocab_size", "parameters"):
            assert type(entry[key]) is int, (entry["name"], key, entry[key])
        assert entry["encoder_layers"] is None or type(entry["encoder_layers"]) is int
    by_name = {e["name"]: e for e in entries}
    assert by_name["gpt2-large"]["layers"] == 36 and by_name["gpt2-large"]["encoder_layers"] is None
    assert (by_name["transformer-2017-base"]["layers"], by_name["transformer-2017-base"]["encoder_layers"]) == (6, 6)

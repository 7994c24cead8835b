"""What a run leaves beside its versions, and how it is repeated: the loggers of
``--log`` (written and read back through their own libraries; W&B offline), its curves
(``curves.png``; ``zoo plot`` overlays runs), and config files (``--config`` for train
and ablate; ``run.toml`` written into ``--out`` and read back by ``--resume``)."""

from __future__ import annotations

import csv
import json
import tomllib
from pathlib import Path

import pytest

import zoo
import zoo.training
from helpers import error_line
from zoo.cli import main

TINY = "--set n_layers=1 --set d_model=32 --set n_heads=2 --set max_seq_len=32 --set vocab_size=256"
SHAPE = "--batch-size 2 --seq-len 16 --threads 1 --eval-batches 1 --tokenizer bytes --quiet"
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("data")
    text = folder / "text.txt"
    text.write_text("It was the best of times, it was the worst of times. " * 300, encoding="utf-8")
    assert main(["data", "prepare", str(text), "-o", str(folder / "data"), "--tokenizer", "bytes"]) == 0
    return folder / "data"


def rows(run: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]


def test_loggers_write_through_their_libraries(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    run = tmp_path / "run"
    argv = ["train", "gpt2-small", *TINY.split(), *SHAPE.split(), "--data", str(data), "-o", str(run)]
    assert main([*argv, "--steps", "4", "--eval-every", "2", "--log", "csv,tensorboard,wandb"]) == 0
    assert f"curves: {run / 'curves.png'}" in capsys.readouterr().out
    expected = rows(run)
    assert [r["step"] for r in expected] == [1, 2, 3, 4]

    with open(run / "metrics.csv", newline="", encoding="utf-8") as handle:
        table = list(csv.DictReader(handle))
    assert [int(r["step"]) for r in table] == [1, 2, 3, 4]
    assert [float(r["loss"]) for r in table] == [r["loss"] for r in expected]
    assert [r["val_loss"] != "" for r in table] == [False, True, False, True]

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    assert [e.step for e in events.Scalars("train/loss")] == [1, 2, 3, 4]
    assert [e.value for e in events.Scalars("train/loss")] == pytest.approx([r["loss"] for r in expected])

    (offline,) = (run / "wandb").glob("offline-run-*")
    (records,) = offline.glob("run-*.wandb")
    assert records.stat().st_size > 0

    assert (run / "curves.png").read_bytes().startswith(PNG)
    with pytest.raises(SystemExit):
        main([*argv, "--log", "csv,tensorbord"])
    assert "unknown logger 'tensorbord'" in capsys.readouterr().err


def test_config_files_run_toml_and_resume(data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "run.toml"
    config.write_text(
        f'name = "gpt2-small"\ndata = "{data}"\nsteps = 3\nbatch-size = 2\nseq_len = 16\neval_every = 3\n'
        'eval_batches = 1\ntokenizer = "bytes"\nthreads = 1\nquiet = true\nlog = ["csv"]\n\n'
        "[set]\nn_layers = 1\nd_model = 32\nn_heads = 2\nmax_seq_len = 32\nvocab_size = 256\n",
        encoding="utf-8",
    )
    run = tmp_path / "run"
    assert main(["train", "--config", str(config), "-o", str(run), "--steps", "4", "--eval-every", "2"]) == 0
    assert [r["step"] for r in rows(run)] == [1, 2, 3, 4]  # the command line overrode the file's steps
    assert (run / "metrics.csv").is_file()  # and the file's log = ["csv"] held
    saved = tomllib.loads((run / "run.toml").read_text(encoding="utf-8"))
    assert saved["steps"] == 4 and saved["eval_every"] == 2 and saved["batch_size"] == 2
    assert "warmup_steps" not in saved  # auto (a tenth of the steps) stays auto, so --steps can grow
    assert saved["set"] == {"n_layers": 1, "d_model": 32, "n_heads": 2, "max_seq_len": 32, "vocab_size": 256}
    assert saved["data"] == str(data) and saved["name"] == "gpt2-small" and "resume" not in saved
    assert "quiet" not in saved  # how that command showed itself: a resume is not silent for it

    # The folder alone continues the run and repeats it.
    assert main(["train", "-o", str(run), "--resume", "--steps", "6"]) == 0
    assert [r["step"] for r in rows(run)] == [1, 2, 3, 4, 5, 6]
    assert tomllib.loads((run / "run.toml").read_text(encoding="utf-8"))["steps"] == 6
    again = tmp_path / "again"
    assert main(["train", "--config", str(run / "run.toml"), "-o", str(again)]) == 0
    assert [r["step"] for r in rows(again)] == [1, 2, 3, 4, 5, 6]  # 6 steps from scratch, same settings
    capsys.readouterr()

    assert main(["plot", str(run), str(again), "-o", str(tmp_path / "both.png")]) == 0
    assert f"plotted 2 run(s) to {tmp_path / 'both.png'}" in capsys.readouterr().out
    assert (tmp_path / "both.png").read_bytes().startswith(PNG)

    placed = tmp_path / "placed.toml"  # -o/--out given by the file alone
    placed.write_text(config.read_text(encoding="utf-8").replace("steps = 3", f'steps = 1\nout = "{tmp_path / "p"}"'))
    assert main(["train", "--config", str(placed)]) == 0
    assert [r["step"] for r in rows(tmp_path / "p")] == [1]
    capsys.readouterr()

    bad = tmp_path / "bad.toml"
    bad.write_text("stpes = 3\n", encoding="utf-8")
    assert main(["train", "gpt2-small", "--config", str(bad), "-o", str(tmp_path / "x")]) == 1
    err = capsys.readouterr().err
    assert "'stpes' is not a flag of `zoo train`. Did you mean 'steps'" in err


def test_ablate_reads_the_same_format(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "study.toml"
    config.write_text(
        'from = "transformer-2017"\nto = "gpt2-small"\nsteps = 1\nbatch_size = 2\nseq_len = 16\neval_every = 1\n'
        'seeds = 1\ntokenizer = "bytes"\nmax_chars = 4000\nthreads = 1\n\n[set]\nd_model = 16\nn_layers = 1\n'
        "n_heads = 2\n",
        encoding="utf-8",
    )
    assert main(["ablate", "--config", str(config), "-o", str(tmp_path / "study"), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["settings"]["steps"] == 1 and result["settings"]["batch_size"] == 2
    report = (tmp_path / "study" / "report.md").read_text(encoding="utf-8")
    assert "--set d_model=16 --set n_layers=1 --set n_heads=2" in report


#: Config files of the wrong kinds: (what the file holds, what the one error line names).
WRONG_FILES = {
    "text for a number": ('steps = "2"', ["steps", "--steps takes a whole number, got the string '2'", "steps = 2"]),
    "a number for a folder": ("out = 5", ["out", "--out takes text", "got a number (5)", 'out = "5"']),
    "a float as text": ('lr = "3e-3"', ["lr", "--lr takes a number, got the string '3e-3'"]),
    "a list for a folder": ("data = [1]", ["data", "--data takes text"]),
    "both spellings": ("batch_size = 2\nbatch-size = 4", ["'batch_size' and 'batch-size' both set --batch-size"]),
}


@pytest.mark.parametrize("command", ["train", "ablate"])
@pytest.mark.parametrize("case", list(WRONG_FILES))
def test_a_config_value_of_the_wrong_kind_is_one_line_naming_the_key(
    command: str, case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every command that reads --config: text where a flag takes a number (``workers =
    "2"``), a number where it takes text (``out = 5``, which would be a folder named 5),
    and one flag set twice by its two spellings, each refused naming the key and the fix,
    before anything runs."""
    text, needles = WRONG_FILES[case]
    config = tmp_path / "c.toml"
    config.write_text(text + "\n", encoding="utf-8")
    args = ["train", "gpt2-small"] if command == "train" else ["ablate"]
    assert main([*args, "--config", str(config)]) == 1
    error_line(capsys, str(config), *needles)
    assert not (tmp_path / "5").exists()
    if command == "ablate":  # a flag only ablate has
        config.write_text('workers = "2"\n', encoding="utf-8")
        assert main(["ablate", "--config", str(config)]) == 1
        error_line(capsys, "workers", "--workers takes a whole number, got the string '2'", "workers = 2")


@pytest.mark.parametrize("flag", ["--lr-sweep", "--lr-grid", "--eval-lengths", "--warmup-sweep"])
@pytest.mark.parametrize("where", ["command line", "config file"])
def test_a_list_flag_of_only_commas_is_refused(
    flag: str, where: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--lr-sweep ','`` (no rate between the commas) is refused naming the flag, not
    read as an empty sweep."""
    if where == "command line":
        with pytest.raises(SystemExit):
            main(["ablate", flag, ",", "-o", str(tmp_path / "a")])
        err = capsys.readouterr().err
        assert f"argument {flag}: expected at least one value" in err and "got ','" in err
    else:
        (tmp_path / "c.toml").write_text(f'{flag.removeprefix("--")} = ","\n', encoding="utf-8")
        assert main(["ablate", "--config", str(tmp_path / "c.toml"), "-o", str(tmp_path / "a")]) == 1
        error_line(capsys, flag.removeprefix("--"), "expected at least one value")
    assert not (tmp_path / "a").exists()


def test_dataset_config_without_a_dataset_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "t.txt").write_text("some text to prepare " * 50, encoding="utf-8")
    out = tmp_path / "p"
    assert main(["data", "prepare", str(tmp_path / "t.txt"), "-o", str(out), "--dataset-config", "en"]) == 1
    error_line(capsys, "--dataset-config", "no --dataset is given", "pass --dataset DIR|ID too")
    with pytest.raises(zoo.ConfigError, match="dataset_config='en' .*no --dataset"):
        zoo.training.prepare([tmp_path / "t.txt"], out, tokenizer="bytes", dataset_config="en")
    assert not out.exists()

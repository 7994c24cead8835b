"""The loggers and the run's own files fail clearly: a metrics file or logger folder of
the wrong kind (fresh and resumed), W&B without a key or with a bad project name, a
``--config`` value no flag takes, ``--out .``, and two ``zoo data prepare -o`` of one
folder at once. Each ends in one zoo error line that says the fix, and loses nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from zoo.checkpoint.owned import writing_beside
from zoo.cli import main
from zoo.errors import InputError

TINY = "--set n_layers=1 --set d_model=32 --set n_heads=2 --set max_seq_len=32 --set vocab_size=256"
SHAPE = "--batch-size 2 --seq-len 16 --threads 1 --eval-batches 1 --tokenizer bytes --quiet --steps 2"


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("data")
    text = folder / "text.txt"
    text.write_text("It was the best of times, it was the worst of times. " * 300, encoding="utf-8")
    assert main(["data", "prepare", str(text), "-o", str(folder / "data"), "--tokenizer", "bytes"]) == 0
    return folder / "data"


def train(data: Path, out: Path, *more: str) -> list[str]:
    return ["train", "gpt2-small", *TINY.split(), *SHAPE.split(), "--data", str(data), "-o", str(out), *more]


def error_of(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The one error line ``zoo ARGV`` ends in (status 1: a zoo error, not a crash)."""
    capsys.readouterr()
    assert main(argv) == 1
    said = " ".join(capsys.readouterr().err.split())
    assert said.startswith("error:") and "unexpected" not in said, said
    return said


WRONG_KIND = [
    ("csv", "metrics.jsonl", "folder"),
    ("csv", "metrics.csv", "folder"),
    ("tensorboard", "tensorboard", "file"),
    ("wandb", "wandb", "file"),
]


def plant(path: Path, kind: str) -> None:
    """A user's folder (with a file in it) or file where a logger writes."""
    if kind == "folder":
        path.mkdir()
        (path / "keep.txt").write_text("mine")
    else:
        path.write_text("mine")


def kept(path: Path, kind: str) -> bool:
    return (path / "keep.txt").read_text() == "mine" if kind == "folder" else path.read_text() == "mine"


@pytest.mark.parametrize(("log", "name", "kind"), WRONG_KIND)
def test_resuming_onto_a_logger_path_of_the_wrong_kind_is_a_zoo_error(
    data: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    log: str,
    name: str,
    kind: str,
) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    run = tmp_path / "run"
    assert main(train(data, run)) == 0
    if (run / name).is_file():
        (run / name).unlink()
    plant(run / name, kind)
    said = error_of(train(data, run, "--log", log, "--resume", "--steps", "3"), capsys)
    assert name in said and "remove" in said, said
    assert kept(run / name, kind)


@pytest.mark.parametrize(("log", "name", "kind"), WRONG_KIND)
def test_a_fresh_run_onto_a_logger_path_of_the_wrong_kind_is_a_zoo_error(
    data: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    log: str,
    name: str,
    kind: str,
) -> None:
    """A fresh run in a folder the zoo made (its marker, no versions) where the name is taken."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    run = tmp_path / "run"
    assert main([*train(data, run), "--steps", "1"]) == 0
    for entry in run.iterdir():
        if entry.name != ".zoo-folder.json" and entry.is_file():
            entry.unlink()
    plant(run / name, kind)
    said = error_of(train(data, run, "--log", log), capsys)
    assert name in said and "remove" in said, said
    assert kept(run / name, kind)


def test_wandb_without_a_key_says_how_to_log_in(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("wandb")
    for name in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_PROJECT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    said = error_of(train(data, tmp_path / "run", "--log", "wandb"), capsys)
    assert "wandb login" in said and "WANDB_API_KEY" in said and "WANDB_MODE=offline" in said, said


@pytest.mark.parametrize("project", ["a/b", "x#?%:", "p" * 200])
def test_wandb_with_a_bad_project_name_names_wandb_project(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], project: str
) -> None:
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_PROJECT", project)
    said = error_of(train(data, tmp_path / "run", "--log", "wandb"), capsys)
    assert "WANDB_PROJECT" in said and "128 characters" in said, said


@pytest.mark.parametrize(
    "value",
    ["1979-05-27T07:32:00Z", "1979-05-27", "07:32:00", "{ a = 1 }", "[1979-05-27]"],
)
def test_a_set_value_toml_has_but_a_field_cannot_take_names_the_key(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    config = tmp_path / "study.toml"
    config.write_text(f"[set]\nn_layers = 1\nd_model = {value}\n", encoding="utf-8")
    said = error_of([*train(data, tmp_path / "run"), "--config", str(config)], capsys)
    assert "set.d_model" in said and "quote it" in said, said
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("out", [".", ".."])
def test_out_the_current_folder_is_never_replaced(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], out: str
) -> None:
    here = tmp_path / "thesis"
    (here / "sub").mkdir(parents=True)
    (here / "thesis.tex").write_text("mine")
    monkeypatch.chdir(here if out == "." else here / "sub")
    said = error_of(train(data, Path(out), "--overwrite"), capsys)
    assert "current folder" in said and "cd to its parent" in said, said
    said = error_of(["data", "prepare", str(here / "thesis.tex"), "-o", out], capsys)
    assert (here / "thesis.tex").read_text() == "mine" and (here / "sub").is_dir()
    assert sorted(p.name for p in here.iterdir()) == ["sub", "thesis.tex"]


def test_out_dot_in_an_empty_current_folder_trains_there(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(train(data, Path("."))) == 0
    assert (tmp_path / "v0001.safetensors").is_file() and (tmp_path / "metrics.jsonl").is_file()


def test_a_second_data_prepare_of_one_folder_is_refused_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = tmp_path / "text.txt"
    text.write_text("some words to prepare " * 200, encoding="utf-8")
    target = tmp_path / "prepared"
    with writing_beside(target, InputError):  # the first `zoo data prepare -o prepared`, still running
        said = error_of(["data", "prepare", str(text), "-o", str(target), "--tokenizer", "bytes"], capsys)
    assert "in use" in said and "another output folder" in said, said
    assert not target.exists()
    assert main(["data", "prepare", str(text), "-o", str(target), "--tokenizer", "bytes"]) == 0  # once it is done
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prepared", "text.txt"]  # no lock file left


def test_two_data_prepares_at_once_end_in_one_result_and_one_zoo_error(tmp_path: Path) -> None:
    text = tmp_path / "text.txt"
    text.write_text("some words to prepare " * 20000, encoding="utf-8")
    command = [sys.executable, "-m", "zoo", "data", "prepare", str(text), "-o", str(tmp_path / "p"), "--workers", "1"]
    both = [subprocess.Popen(command, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    said = [process.communicate(timeout=300)[1] for process in both]
    codes = sorted(process.returncode for process in both)
    assert codes in ([0, 0], [0, 1]), said  # two one after the other, or one refused
    assert not any("unexpected" in s or "Traceback" in s for s in said), said
    assert (tmp_path / "p" / "manifest.json").is_file()


def test_zoo_training_is_there_after_a_bare_import_zoo() -> None:
    done = subprocess.run(
        [sys.executable, "-c", "import zoo; print(zoo.training.prepare.__name__, zoo.training.open_data.__name__)"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.stdout.split() == ["prepare", "open_data"], done.stderr

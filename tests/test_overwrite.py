"""Outputs: what a command replaces or removes is never what it reads, never what the
user keeps, and never travels in a file (issue 29, class 1, "inputs are never outputs").

- ``--overwrite`` is refused when an input of the command (prepared data, the checkpoint
  it fine-tunes or reads, the corpus, the config file, the runs it plots) is the output
  or lies inside it, for every command that has ``--overwrite``;
- ``overwrite = true`` in a ``--config`` file or a run's ``run.toml`` is refused: a
  destructive switch is said on the command line only;
- a single-file output is a regular file or absent (a FIFO, a socket, a folder, an empty
  name, a missing folder are refused, even with ``--overwrite``), in the CLI and the API;
- ``zoo build``/``zoo convert -o DIR`` add no version to a user's non-empty folder, nor
  to a folder made for another output; a user's file is never replaced unasked or written
  through a planted link.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
from collections.abc import Callable
from pathlib import Path

import pytest

import zoo
from helpers import error_line, not_a_regular_file, prepared_bytes, tiny
from zoo.cli import build_parser, main
from zoo.errors import CheckpointError, ConfigError, InputError
from zoo.training import TrainSettings, train
from zoo.training.curves import plot_runs

MODEL = ["--set", "n_layers=1", "--set", "d_model=32", "--set", "n_heads=2", "--set", "vocab_size=256"]
MODEL += ["--set", "max_seq_len=32", "--set", "dropout=0.0"]
OVERRIDES = dict(n_layers=1, d_model=32, n_heads=2, vocab_size=256, max_seq_len=32, dropout=0.0)
SETTINGS = TrainSettings(steps=2, batch_size=2, seq_len=16, eval_every=2, eval_batches=1, save_every=2, threads=1)
TRAIN = ["--steps", "2", "--batch-size", "2", "--seq-len", "16", "--eval-every", "2", "--eval-batches", "1"]
TRAIN += ["--threads", "1", "--quiet"]
ABLATE = ["--steps", "2", "--seeds", "1", "--tokenizer", "bytes"]
PROBE = ["--tokenizer", "bytes", "--batch-size", "1", "--seq-len", "8"]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return prepared_bytes(tmp_path_factory.mktemp("data"), 8_000)


@pytest.fixture(scope="module")
def run(data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished tiny run (a version, its state, metrics.jsonl); copy it before editing."""
    out = tmp_path_factory.mktemp("run") / "run"
    train("gpt2-small", data, SETTINGS, out=out, overrides=OVERRIDES)
    return out


def files(folder: Path) -> dict[str, bytes]:
    """Every regular file under ``folder``, by relative path, with its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def one_error_line(capsys: pytest.CaptureFixture[str], *needles: str) -> str:
    """stderr is one ``error:`` line (a ZooError, not a traceback) naming each needle."""
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert "unexpected" not in err and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err
    return err


# -- 1. an input inside what --overwrite removes -----------------------------------------------


def _train_data(folder: Path, data: Path, run: Path) -> list[str]:
    shutil.copytree(data, folder / "prep")
    return ["train", "gpt2-small", *MODEL, *TRAIN, "--data", str(folder / "prep"), "--out", str(folder)]


def _train_checkpoint(folder: Path, data: Path, run: Path) -> list[str]:
    zoo.save(tiny(vocab_size=256), folder / "base.safetensors")
    return ["train", str(folder / "base.safetensors"), *TRAIN, "--data", str(data), "--out", str(folder)]


def _train_config(folder: Path, data: Path, run: Path) -> list[str]:
    (folder / "run.toml").write_text(f'name = "gpt2-small"\ndata = "{data}"\nsteps = 2\n', encoding="utf-8")
    return ["train", "--config", str(folder / "run.toml"), *MODEL, *TRAIN, "--out", str(folder)]


def _ablate_corpus(folder: Path, data: Path, run: Path) -> list[str]:
    (folder / "corpus.txt").write_text(zoo.training.bundled_corpus()[:4000], encoding="utf-8")
    return ["ablate", *ABLATE, "--data", str(folder / "corpus.txt"), "--out", str(folder)]


def _ablate_config(folder: Path, data: Path, run: Path) -> list[str]:
    (folder / "study.toml").write_text("steps = 2\nseeds = 1\n", encoding="utf-8")
    return ["ablate", "--config", str(folder / "study.toml"), "--tokenizer", "bytes", "--out", str(folder)]


def _convert_to_hf(folder: Path, data: Path, run: Path) -> list[str]:
    zoo.save(tiny(), folder / "model.safetensors")
    return ["convert", "--to-hf", str(folder / "model.safetensors"), "-o", str(folder)]


def _convert_from_hf(folder: Path, data: Path, run: Path) -> list[str]:
    hf = zoo.to_hf(tiny(), folder / "hf")  # -o names the weights file the folder --from-hf reads
    return ["convert", "--from-hf", str(hf), "-o", str(hf / "model.safetensors")]


def _convert_from_nanogpt(folder: Path, data: Path, run: Path) -> list[str]:
    zoo.save(tiny(), folder / "ckpt.safetensors")  # a file -o names is the file --from-nanogpt reads
    return ["convert", "--from-nanogpt", str(folder / "ckpt.safetensors"), "-o", str(folder / "ckpt.safetensors")]


def _build(folder: Path, data: Path, run: Path) -> list[str]:
    zoo.save(tiny(), folder / "model.safetensors")  # build reuses its config, then would replace it
    return ["build", str(folder / "model.safetensors"), "-o", str(folder / "model.safetensors")]


def _probe_json(folder: Path, data: Path, run: Path) -> list[str]:
    zoo.save(tiny(vocab_size=256), folder / "model.safetensors")
    return ["probe", str(folder / "model.safetensors"), *PROBE, "-o", str(folder / "model.safetensors")]


def _probe_plot(folder: Path, data: Path, run: Path) -> list[str]:
    zoo.save(tiny(vocab_size=256), folder / "model.safetensors")
    return ["probe", str(folder / "model.safetensors"), *PROBE, "--plot", str(folder / "model.safetensors")]


def _plot(folder: Path, data: Path, run: Path) -> list[str]:
    shutil.copytree(run, folder / "run")
    metrics = str(folder / "run" / "metrics.jsonl")
    return ["plot", metrics, "-o", metrics]


#: Every command with --overwrite, each with the input it would otherwise destroy.
INSIDE: dict[str, Callable[[Path, Path, Path], list[str]]] = {
    "train --data": _train_data,
    "train CHECKPOINT": _train_checkpoint,
    "train --config": _train_config,
    "ablate --data": _ablate_corpus,
    "ablate --config": _ablate_config,
    "convert --to-hf": _convert_to_hf,
    "convert --from-hf": _convert_from_hf,
    "convert --from-nanogpt": _convert_from_nanogpt,
    "build": _build,
    "probe -o": _probe_json,
    "probe --plot": _probe_plot,
    "plot": _plot,
}


def commands_with_overwrite() -> set[str]:
    """Every ``zoo`` subcommand whose parser has ``--overwrite``."""
    found = set()
    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                if any("--overwrite" in a.option_strings for a in sub._actions):
                    found.add(name)
    return found


def test_every_command_with_overwrite_is_covered() -> None:
    assert commands_with_overwrite() == {case.split()[0] for case in INSIDE}


@pytest.mark.parametrize("case", list(INSIDE))
def test_overwrite_refuses_an_output_holding_an_input(
    case: str, data: Path, run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--overwrite`` would remove the prepared data, the checkpoint, the corpus, the
    config or the metrics the command reads: refused, and every file is kept."""
    folder = tmp_path / "proj"
    folder.mkdir()
    (folder / "thesis.tex").write_text("precious")
    argv = INSIDE[case](folder, data, run)
    before = files(folder)
    assert main([*argv, "--overwrite"]) == 1
    one_error_line(capsys, "the command would delete what it reads", "--overwrite")
    assert files(folder) == before


@pytest.mark.parametrize(
    "argv",
    [["build", "{run}", "-o", "{run}/v0001.safetensors"],
     ["probe", "{run}", *PROBE, "-o", "{run}/v0001.safetensors"],
     ["probe", "{run}", *PROBE, "--plot", "{run}/v0001.state.safetensors"]],
    ids=["build", "probe -o", "probe --plot"],
)  # fmt: skip
def test_overwrite_refuses_a_version_of_the_checkpoint_folder_it_reads(
    argv: list[str], run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``zoo build RUN -o RUN/v0001.safetensors --overwrite`` would replace the trained
    version with a fresh init, ``zoo probe`` with its JSON: the output is a version (or a
    state) of the folder read, refused, every file kept; a new file in it is written."""
    folder = tmp_path / "run"
    shutil.copytree(run, folder)
    before = files(folder)
    assert main([arg.replace("{run}", str(folder)) for arg in argv] + ["--overwrite"]) == 1
    one_error_line(capsys, "a checkpoint folder the command reads", "would delete what it reads")
    assert files(folder) == before
    assert main(["build", str(folder), "-o", str(folder / "v0009.safetensors"), "--overwrite"]) == 0


def test_an_input_reached_through_a_link_is_still_inside(data: Path, tmp_path: Path) -> None:
    """A path outside that links into the folder names what the folder holds."""
    folder = tmp_path / "proj"
    folder.mkdir()
    shutil.copytree(data, folder / "prep")
    (tmp_path / "link").symlink_to(folder / "prep")
    argv = ["train", "gpt2-small", *MODEL, *TRAIN, "--data", str(tmp_path / "link"), "--out", str(folder)]
    assert main([*argv, "--overwrite"]) == 1
    assert (folder / "prep" / "manifest.json").is_file()


def test_overwrite_still_replaces_a_folder_holding_no_input(data: Path, tmp_path: Path) -> None:
    folder = tmp_path / "old"
    folder.mkdir()
    (folder / "notes.txt").write_text("replace me")
    argv = ["train", "gpt2-small", *MODEL, *TRAIN, "--data", str(data), "--out", str(folder), "--overwrite"]
    assert main(argv) == 0
    assert not (folder / "notes.txt").exists() and zoo.versions(folder)


# -- 2. a destructive switch never comes from a file ---------------------------------------------


@pytest.mark.parametrize("command", ["train", "ablate"])
def test_overwrite_in_a_config_file_is_refused(
    command: str, data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A shared config with ``out = <a folder>`` and ``overwrite = true`` would wipe the
    folder of whoever runs it."""
    folder = tmp_path / "papers"
    folder.mkdir()
    (folder / "thesis.tex").write_text("precious")
    config = tmp_path / "shared.toml"
    config.write_text(f'out = "{folder}"\noverwrite = true\ndata = "{data}"\n', encoding="utf-8")
    argv = ["train", "gpt2-small", *MODEL, *TRAIN] if command == "train" else ["ablate", *ABLATE]
    assert main([*argv, "--config", str(config)]) == 1
    one_error_line(capsys, "overwrite = true is refused", "only from the command line", "--overwrite")
    assert files(folder) == {"thesis.tex": b"precious"}


def test_every_command_with_a_config_file_is_covered() -> None:
    with_config = set()
    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            with_config |= {n for n, sub in action.choices.items() if sub.get_default("config_parser") is not None}
    assert with_config == {"train", "ablate"}


def test_overwrite_in_a_run_toml_is_refused_on_resume(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    shutil.copytree(run, out)
    saved = out / "run.toml"
    saved.write_text('name = "gpt2-small"\nsteps = 2\noverwrite = true\n', encoding="utf-8")
    before = files(out)
    assert main(["train", "-o", str(out), "--resume", "--steps", "4", "--quiet"]) == 1
    one_error_line(capsys, "run.toml", "overwrite = true is refused")
    assert files(out) == before


def test_overwrite_false_in_a_file_is_harmless(data: Path, tmp_path: Path) -> None:
    config = tmp_path / "run.toml"
    config.write_text(f'overwrite = false\ndata = "{data}"\n', encoding="utf-8")
    argv = ["train", "gpt2-small", *MODEL, *TRAIN, "--config", str(config), "-o", str(tmp_path / "out")]
    assert main(argv) == 0


# -- 3. a single-file output is a regular file or absent ---------------------------------------


#: Every CLI single-file writer: the command line writing to the path given.
WRITERS: dict[str, Callable[[Path, str], list[str]]] = {
    "plot -o": lambda run, out: ["plot", str(run), "-o", out],
    "probe -o": lambda run, out: ["probe", "gpt2-small", *MODEL, *PROBE, "-o", out],
    "probe --plot": lambda run, out: ["probe", "gpt2-small", *MODEL, *PROBE, "--plot", out],
    "build -o": lambda run, out: ["build", "gpt2-small", *MODEL, "-o", out],
}
CHECKPOINT_WRITERS = {"build -o"}  # -o FILE.safetensors; another -o is a folder of versions (zoo convert: below)


def _socket(path: Path) -> Path:
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.close()  # the socket file stays
    return path


def _non_regular(path: Path, kind: str) -> Path:
    return _socket(path) if kind == "socket" else not_a_regular_file(path, kind)


def _writer_cases() -> list[tuple[str, str]]:
    cases = []
    for writer in WRITERS:
        kinds = ["fifo", "socket"] + ([] if writer in CHECKPOINT_WRITERS else ["folder"])
        cases += [(writer, kind) for kind in kinds]
    return cases


def _out_name(writer: str) -> str:
    return "out.safetensors" if writer in CHECKPOINT_WRITERS else "out.png" if "plot" in writer else "out.json"


@pytest.mark.parametrize(("writer", "kind"), _writer_cases())
@pytest.mark.parametrize("overwrite", [False, True])
def test_a_single_file_output_that_is_not_a_regular_file_is_refused(
    writer: str,
    kind: str,
    overwrite: bool,
    run: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A FIFO (as /dev/null would be, as root), a socket or a folder at ``-o`` is never
    replaced by a regular file, even with ``--overwrite``."""
    out = _non_regular(tmp_path / _out_name(writer), kind)
    argv = WRITERS[writer](run, str(out))
    assert main([*argv, *(["--overwrite"] if overwrite else [])]) == 1
    what = {"fifo": "is a FIFO", "socket": "is a socket", "folder": "is a folder"}[kind]
    one_error_line(capsys, what)
    assert os.path.lexists(out) and not out.is_file() and not out.is_symlink()


@pytest.mark.parametrize("kind", ["fifo", "socket"])
def test_convert_from_hf_refuses_a_checkpoint_file_that_is_not_regular(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hf = zoo.to_hf(tiny(), tmp_path / "hf")
    out = _non_regular(tmp_path / "out.safetensors", kind)
    assert main(["convert", "--from-hf", str(hf), "-o", str(out), "--overwrite"]) == 1
    one_error_line(capsys, f"is a {'FIFO' if kind == 'fifo' else kind}")
    assert not out.is_file()


@pytest.mark.parametrize("command", ["build", "convert"])
def test_an_empty_checkpoint_out_is_refused(command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``-o ''`` is no path, not the current folder."""
    if command == "build":
        argv = ["build", "gpt2-small", *MODEL]
    else:
        argv = ["convert", "--from-hf", str(zoo.to_hf(tiny(), tmp_path / "hf"))]
    assert main([*argv, "-o", ""]) == 1
    one_error_line(capsys, "-o '' names no file")


FILE_WRITERS = [w for w in WRITERS if w not in CHECKPOINT_WRITERS]


@pytest.mark.parametrize("writer", FILE_WRITERS)
@pytest.mark.parametrize(
    ("where", "needle"),
    [("", "names no file"), ("missing/out.png", "does not exist"), ("file.txt/out.png", "is not a folder")],
    ids=["empty", "missing folder", "under a file"],
)
def test_a_single_file_output_in_no_folder_is_refused(
    writer: str, where: str, needle: str, run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "file.txt").write_text("precious")
    out = str(tmp_path / where) if where else ""
    assert main(WRITERS[writer](run, out)) == 1
    one_error_line(capsys, needle)
    assert not (tmp_path / "missing").exists() and (tmp_path / "file.txt").read_text() == "precious"


@pytest.mark.parametrize("writer", FILE_WRITERS)
def test_a_single_file_output_in_a_read_only_folder_is_refused(
    writer: str, run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    if os.geteuid() == 0:  # root writes anyway: the folder reads as read-only as it would to a user
        access = os.access
        monkeypatch.setattr(os, "access", lambda p, mode: access(p, mode) and Path(p) != locked)
    try:
        assert main(WRITERS[writer](run, str(locked / "out.png"))) == 1
        one_error_line(capsys, "permission denied; make the folder writable")
    finally:
        locked.chmod(0o755)
    assert os.listdir(locked) == []


def test_build_creates_the_missing_folder_of_a_checkpoint_file(tmp_path: Path) -> None:
    out = tmp_path / "new" / "model.safetensors"
    assert main(["build", "gpt2-small", *MODEL, "-o", str(out)]) == 0
    assert zoo.load(out).config.d_model == 32


# -- the API follows the CLI ------------------------------------------------------------------


def test_plot_runs_keeps_a_file_unless_overwrite(run: Path, tmp_path: Path) -> None:
    mine = tmp_path / "mine.png"
    mine.write_bytes(b"precious")
    with pytest.raises(InputError, match=r"mine\.png exists; pass overwrite=True"):
        plot_runs([run], mine)
    assert mine.read_bytes() == b"precious"
    assert plot_runs([run], mine, overwrite=True).read_bytes().startswith(b"\x89PNG")


def test_plot_runs_takes_overwrite_as_a_boolean_only(run: Path, tmp_path: Path) -> None:
    mine = tmp_path / "mine.png"
    mine.write_bytes(b"precious")
    with pytest.raises(InputError, match="overwrite must be True or False, got 'no'"):
        plot_runs([run], mine, overwrite="no")  # type: ignore[arg-type]
    assert mine.read_bytes() == b"precious"


def test_plot_runs_never_writes_onto_a_fifo_or_its_own_metrics(run: Path, tmp_path: Path) -> None:
    fifo = not_a_regular_file(tmp_path / "fifo.png", "fifo")
    with pytest.raises(InputError, match="is a FIFO"):
        plot_runs([run], fifo, overwrite=True)
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    before = files(copy)
    with pytest.raises(InputError, match="would delete what it reads"):
        plot_runs([copy / "metrics.jsonl"], copy / "metrics.jsonl", overwrite=True)
    assert files(copy) == before


def test_probe_writers_follow_the_cli(tmp_path: Path) -> None:
    import torch

    from zoo.probe import plot, probe, write_json

    result = probe(tiny(vocab_size=256), torch.randint(0, 256, (2, 8)), label="tiny", source="random ids")
    mine = tmp_path / "mine.json"
    mine.write_bytes(b"precious")
    for write in (lambda p, **k: write_json([result], p, **k), lambda p, **k: plot([result], p, **k)):
        with pytest.raises(InputError, match="exists; pass overwrite=True"):
            write(mine)
        assert mine.read_bytes() == b"precious"
        with pytest.raises(InputError, match="is a FIFO"):
            write(not_a_regular_file(tmp_path / f"fifo{id(write)}", "fifo"), overwrite=True)


def test_zoo_save_never_replaces_a_fifo(tmp_path: Path) -> None:
    fifo = not_a_regular_file(tmp_path / "model.safetensors", "fifo")
    with pytest.raises(CheckpointError, match="is a FIFO"):
        zoo.save(tiny(), fifo)
    assert not fifo.is_file()


# -- 4. a user's folder gets no version ---------------------------------------------------------


@pytest.mark.parametrize("command", ["build", "convert"])
def test_no_version_is_added_to_a_users_folder(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "papers"
    folder.mkdir()
    (folder / "thesis.tex").write_text("precious")
    if command == "build":
        argv = ["build", "gpt2-small", *MODEL]
    else:
        argv = ["convert", "--from-hf", str(zoo.to_hf(tiny(), tmp_path / "hf"))]
    for overwrite in ([], ["--overwrite"]):
        assert main([*argv, "-o", str(folder), *overwrite]) == 1
        one_error_line(capsys, "not checkpoint versions", "thesis.tex")
        assert files(folder) == {"thesis.tex": b"precious"}


def test_a_folder_of_versions_gets_the_next_one(tmp_path: Path) -> None:
    folder = tmp_path / "ckpt"
    zoo.save(tiny(), folder)
    assert main(["build", "gpt2-small", *MODEL, "-o", str(folder)]) == 0
    assert [v.version for v in zoo.versions(folder)] == [1, 2]


def test_read_config_itself_refuses_overwrite(tmp_path: Path) -> None:
    """The refusal is in read_config, which both --config and run.toml go through: a ConfigError."""
    config = tmp_path / "x.toml"
    config.write_text("overwrite = true\n")
    from zoo.cli.configfile import read_config

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["train"]
    with pytest.raises(ConfigError, match="only from the command line"):
        read_config(config, sub)


def test_the_api_refuses_overwriting_what_it_reads(data: Path, tmp_path: Path) -> None:
    """``train(..., overwrite=True)`` and ``run_ablation(..., overwrite=True)`` follow the CLI."""
    from zoo.ablate import run_ablation

    folder = tmp_path / "proj"
    folder.mkdir()
    shutil.copytree(data, folder / "prep")
    zoo.save(tiny(vocab_size=256), folder / "base.safetensors")
    (folder / "corpus.txt").write_text(zoo.training.bundled_corpus()[:4000], encoding="utf-8")
    before = files(folder)
    with pytest.raises(InputError, match="would delete what it reads"):
        train("gpt2-small", folder / "prep", SETTINGS, out=folder, overwrite=True, overrides=OVERRIDES)
    with pytest.raises(InputError, match="would delete what it reads"):
        train(folder / "base.safetensors", data, SETTINGS, out=folder, overwrite=True)
    with pytest.raises(InputError, match="would delete what it reads"):
        run_ablation(data=folder / "corpus.txt", out_dir=folder, steps=2, seeds=1, tokenizer="bytes", overwrite=True)
    assert files(folder) == before


# -- a user's files: never replaced unasked, never written through a link ----------------------


def test_build_refuses_a_file_it_did_not_write_unless_overwrite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mine = tmp_path / "mine.safetensors"
    mine.write_bytes(b"precious")
    assert main(["build", "gpt2-small", *MODEL, "-o", str(mine)]) == 1
    error_line(capsys, "exists", "--overwrite")
    assert mine.read_bytes() == b"precious"
    assert main(["build", "gpt2-small", *MODEL, "-o", str(mine), "--overwrite"]) == 0
    assert zoo.load(mine).config.d_model == 32


PROBE_ARGV = ["probe", "gpt2-small", *MODEL, *PROBE]


@pytest.mark.parametrize(
    ("command", "magic"),
    [
        (lambda run, out: ["plot", str(run), "-o", str(out)], b"\x89PNG"),
        (lambda run, out: [*PROBE_ARGV, "-o", str(out)], b"{"),
        (lambda run, out: [*PROBE_ARGV, "--plot", str(out)], b"\x89PNG"),
    ],
    ids=["plot -o", "probe -o", "probe --plot"],
)
def test_every_single_file_output_refuses_an_existing_file_unless_overwrite(
    run: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    command: Callable[[Path, Path], list[str]],
    magic: bytes,
) -> None:
    """``zoo build -o FILE`` (above), ``zoo plot -o``, ``zoo probe -o`` and ``--plot``: a file
    the user has is never replaced unasked, and the refusal comes before any work."""
    mine = tmp_path / ("mine.json" if magic == b"{" else "mine.png")  # a figure's suffix names its format
    mine.write_bytes(b"precious")

    def work(*args: object, **kwargs: object) -> None:
        raise AssertionError("the command worked before refusing its output")

    with monkeypatch.context() as patched:
        patched.setattr("zoo.cli.probe.probe_designs", work)
        patched.setattr("zoo.cli.train.plot_runs", work)
        assert main(command(run, mine)) == 1
    error_line(capsys, f"{mine.name} exists", "--overwrite")
    assert mine.read_bytes() == b"precious"
    assert main([*command(run, mine), "--overwrite"]) == 0
    assert mine.read_bytes().startswith(magic)


def test_a_planted_run_toml_link_is_replaced_not_written_through(data: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim.toml"
    victim.write_text("precious")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "run.toml").symlink_to(victim)
    assert main(["train", "gpt2-small", *MODEL, "--data", str(data), "-o", str(tmp_path / "run"), *TRAIN]) == 0
    assert victim.read_text() == "precious" and not (tmp_path / "run" / "run.toml").is_symlink()


def test_a_plot_output_link_is_replaced_not_written_through(run: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim.png"
    victim.write_text("precious")
    (tmp_path / "link.png").symlink_to(victim)
    assert main(["plot", str(run), "-o", str(tmp_path / "link.png")]) == 1  # refused: it exists
    assert main(["plot", str(run), "-o", str(tmp_path / "link.png"), "--overwrite"]) == 0
    assert victim.read_text() == "precious"
    assert (tmp_path / "link.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize("owner", ["train", "hf-export"])
@pytest.mark.parametrize("command", ["build", "convert", "zoo.save"])
def test_no_version_is_added_to_a_folder_made_for_another_output(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], owner: str, command: str
) -> None:
    """A version saved into a run folder would become the run's newest (with no training
    state: its resume broken); into an export folder, a mix of the two."""
    folder = tmp_path / "out"
    if owner == "train":
        shutil.copytree(run, folder)
    else:
        zoo.to_hf(tiny(vocab_size=256), folder)
    before = sorted(os.listdir(folder))
    if command == "zoo.save":
        with pytest.raises(CheckpointError, match=rf"made by zoo[ .]\S+ \({owner} folder\)"):
            zoo.save(tiny(), folder)
    else:
        source = zoo.to_hf(tiny(), tmp_path / "hf")
        argv = ["build", "gpt2-small", *MODEL] if command == "build" else ["convert", "--from-hf", str(source)]
        assert main([*argv, "-o", str(folder)]) == 1
        error_line(capsys, "was made by", "save to another folder")
    assert sorted(os.listdir(folder)) == before


def test_ablate_refuses_a_train_run_before_training(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    shutil.copytree(run, out)
    assert main(["ablate", "-o", str(out), "--steps", "2", "--seeds", "1", "--tokenizer", "bytes"]) == 1
    error_line(capsys, "made by zoo train (train)", "--overwrite")

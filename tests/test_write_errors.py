"""OS errors of every writer, mapped once (``zoo.errors.os_error``): a file-size limit hit
for real (``RLIMIT_FSIZE`` in a subprocess, ``SIGXFSZ`` ignored, so writes fail with
EFBIG) by each writer of the zoo ends in a zoo error that names the file and the fix,
and leaves no temporary file behind; the mapping itself for each errno it explains."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from zoo.errors import InputError, ZooError, os_error

# One worker for the whole file: its module fixture (every writer under the limit) runs once, not once per worker.
pytestmark = pytest.mark.xdist_group("write-errors")

# Every case writes more than LIMIT bytes to one file, once its inputs are made (imports,
# models, prefilled files) and the limit set. Each prints {case: outcome} as JSON.
LIMIT = 4096
_SCRIPT = r"""
import contextlib, io, json, resource, signal, sys
from pathlib import Path

import torch

import zoo
import zoo.cli
from zoo.ablate.records import write_figure, write_text
from zoo.cli.configfile import write_config
from zoo.errors import ZooError
from zoo.training.metrics import CSV, CSV_FIELDS, MetricsWriter, StepReport

root, limit = Path(sys.argv[1]), int(sys.argv[2])
torch.manual_seed(0)
model = zoo.build("gpt2-small", vocab_size=97, max_seq_len=64, d_model=32, n_layers=2, n_heads=4)
corpus = root / "corpus.txt"
corpus.write_text("the zoo writes what it is asked to, or says why not. " * 400)
data = zoo.training.prepare(corpus, root / "data", tokenizer="bytes", workers=1).path  # before the limit
run = root / "run"
run.mkdir()
(run / "metrics.jsonl").write_text(
    "".join(json.dumps({"step": s, "loss": 3.0, "lr": 1e-3, "tokens": 64 * s}) + "\n" for s in range(1, 9))
)
from matplotlib.figure import Figure

figure = Figure(figsize=(4, 3))
figure.subplots().plot([1, 2, 3], [3, 1, 2])
figure.savefig(io.BytesIO(), format="png")  # fonts cached before the limit

def report(step):
    return StepReport(step, 10_000, 3.25, 1e-3, 64 * step, 1234.5, None, None)

def logger(name, loggers, resumed_at=None):
    out = root / name
    out.mkdir(exist_ok=True)
    with MetricsWriter(out, True, resumed_at, loggers) as writer:
        for step in range((resumed_at or 0) + 1, (resumed_at or 0) + 400):
            writer.write(report(step))
            if step % 20 == 0:
                writer.flush()

def cli(*argv):
    said = io.StringIO()
    with contextlib.redirect_stderr(said):
        code = zoo.cli.main(list(argv))
    if code != 1:
        raise SystemExit(f"{argv[0]} exited {code}, not 1: {said.getvalue()}")
    raise ZooError(" ".join(said.getvalue().split()))

(root / "csv").mkdir()
rows = [",".join(CSV_FIELDS)] + [f"{s},3.25,0.001,{64 * s},1234.5,,," for s in range(1, 400)]
while len("\n".join(rows)) > limit - 60:
    rows.pop()
(root / "csv" / CSV).write_text("\n".join(rows) + "\n")
prefilled = len(rows) - 1

CASES = {
    "checkpoint file": lambda: zoo.save(model, root / "model.safetensors"),
    "checkpoint version": lambda: zoo.save(model, root / "versions"),
    "hf export": lambda: zoo.to_hf(model, root / "hf"),
    "metrics.jsonl": lambda: logger("jsonl", ()),
    "metrics.csv": lambda: logger("csv", ("csv",), resumed_at=prefilled),
    "tensorboard events": lambda: logger("board", ("tensorboard",)),
    "run.toml": lambda: write_config(root / "run.toml", {"name": "x" * (2 * limit)}, "a config"),
    "ablation record": lambda: write_text(root / "ablation" / "run.json", "{}" + " " * (2 * limit)),
    "ablation figure": lambda: write_figure(root / "ablation" / "deltas.png", figure),
    "zoo plot": lambda: cli("plot", str(run), "-o", str(root / "curves.png")),
    "zoo data prepare": lambda: cli("data", "prepare", str(corpus), "-o", str(root / "prepared"), "--workers", "1"),
    "zoo train": lambda: cli(
        "train", "gpt2-small", "--set", "n_layers=1", "--set", "d_model=32", "--set", "n_heads=2",
        "--set", "vocab_size=256", "--data", str(data), "--steps", "2",
        "--out", str(root / "trained"),
    ),
}
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
outcomes = {}
for name, case in CASES.items():
    try:
        case()
        outcomes[name] = {"error": None}
    except ZooError as err:
        outcomes[name] = {"error": type(err).__name__, "message": str(err)}
    except Exception as err:
        outcomes[name] = {"error": f"raw {type(err).__name__}", "message": str(err)}
leftovers = sorted(str(p.relative_to(root)) for p in root.rglob("*") if ".tmp" in p.name or "zoo-new" in p.name)
print(json.dumps({"outcomes": outcomes, "leftovers": leftovers}))
"""
WRITERS = [
    "checkpoint file",
    "checkpoint version",
    "hf export",
    "metrics.jsonl",
    "metrics.csv",
    "tensorboard events",
    "run.toml",
    "ablation record",
    "ablation figure",
    "zoo plot",
    "zoo data prepare",
    "zoo train",
]
# What each message must name: the file (or folder) that hit the limit.
NAMED = {
    "checkpoint file": "model.safetensors",
    "checkpoint version": "versions",
    "hf export": "hf",
    "metrics.jsonl": "metrics.jsonl",
    "metrics.csv": "metrics.csv",
    "tensorboard events": "tensorboard",
    "run.toml": "run.toml",
    "ablation record": "run.json",
    "ablation figure": "deltas.png",
    "zoo plot": "curves.png",
    "zoo data prepare": "prepared",
    "zoo train": "trained",
}


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every writer run once under a file-size limit of LIMIT bytes, in one subprocess."""
    pytest.importorskip("resource")
    pytest.importorskip("matplotlib")
    pytest.importorskip("tensorboard")
    root = tmp_path_factory.mktemp("limited")
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(root), str(LIMIT)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "ZOO_DATA_CACHE": str(root / "cache"), "MPLBACKEND": "Agg"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["stderr"] = done.stderr
    return result


@pytest.mark.parametrize("writer", WRITERS)
def test_a_file_size_limit_is_a_zoo_error_naming_the_file_and_the_fix(limited: dict[str, Any], writer: str) -> None:
    outcome = limited["outcomes"][writer]
    assert outcome["error"] is not None and not outcome["error"].startswith("raw"), outcome
    message = outcome["message"]
    assert "EFBIG" in message and "ulimit -f" in message, message  # what happened, and the fix
    assert NAMED[writer] in message, message


def test_no_writer_leaves_a_temporary_file_behind(limited: dict[str, Any]) -> None:
    assert limited["leftovers"] == []


def test_no_writer_prints_a_traceback(limited: dict[str, Any]) -> None:
    """TensorBoard's writer thread fails first; its traceback is not printed over the zoo's error."""
    assert "Traceback" not in limited["stderr"] and "Exception in thread" not in limited["stderr"], limited["stderr"]


@pytest.mark.parametrize(
    ("number", "said"),
    [
        (errno.ENOSPC, "disk is full"),
        (errno.EFBIG, "ulimit -f"),
        (errno.EROFS, "read-only"),
        (errno.EACCES, "chmod u+w"),
        (errno.EPERM, "not permitted"),
        (errno.EBUSY, "busy"),
        (errno.ENAMETOOLONG, "shorter"),
        (errno.EISDIR, "is a folder"),
        (errno.EDQUOT, "quota"),
    ],
)
def test_each_os_error_says_what_happened_and_how_to_fix_it(number: int, said: str) -> None:
    err = os_error(OSError(number, "raw words"), "write", Path("out/x.json"), InputError)
    assert isinstance(err, InputError)
    text = str(err)
    assert text.startswith("cannot write out/x.json: ") and said in text and errno.errorcode[number] in text


def test_an_os_error_without_an_explanation_keeps_its_own_words() -> None:
    text = str(os_error(OSError(errno.ECHILD, "No child processes"), "write", "f\x1b[31m"))
    assert "No child processes" in text and "ECHILD" in text and "\x1b" not in text


def test_a_read_only_folder_refuses_every_write_with_the_fix(tmp_path: Path) -> None:
    """A read-only filesystem for real (a read-only bind mount; chmod does not stop root),
    where mounting works; else skipped."""
    import zoo
    from zoo.ablate.records import write_text
    from zoo.cli.configfile import write_config
    from zoo.training.metrics import MetricsWriter

    text = tmp_path / "text.txt"
    text.write_text("words " * 500)
    model = zoo.build("gpt2-small", vocab_size=97, d_model=32, n_layers=1, n_heads=2)
    folder = tmp_path / "ro"
    folder.mkdir()
    if subprocess.run(["mount", "--bind", str(folder), str(folder)], capture_output=True).returncode != 0:
        pytest.skip("cannot bind-mount a folder here")
    try:
        if subprocess.run(["mount", "-o", "remount,bind,ro", str(folder)], capture_output=True).returncode != 0:
            pytest.skip("cannot remount a folder read-only here")
        writers = {
            "checkpoint": lambda: zoo.save(model, folder / "m.safetensors"),
            "checkpoint version": lambda: zoo.save(model, folder / "versions"),
            "hf export": lambda: zoo.to_hf(model, folder / "hf"),
            "run.toml": lambda: write_config(folder / "run.toml", {"steps": 1}, "x"),
            "metrics": lambda: MetricsWriter(folder, True, None, ["csv"]),
            "record": lambda: write_text(folder / "run.json", "{}"),
            "prepared data": lambda: zoo.training.prepare(text, folder / "data", tokenizer="bytes", workers=1),
        }
        for name, write in writers.items():
            with pytest.raises(ZooError, match="read-only.*EROFS") as caught:
                write()
            assert "remount it read-write" in str(caught.value), name
        assert list(folder.iterdir()) == []
    finally:
        subprocess.run(["umount", str(folder)], capture_output=True)


def test_a_zoo_error_is_what_reaches_the_caller(limited: dict[str, Any]) -> None:
    """The API callers catch their own subclasses of ZooError, never a raw OSError."""
    kinds = {outcome["error"] for outcome in limited["outcomes"].values()}
    assert kinds <= {cls.__name__ for cls in _zoo_errors()}, kinds


def _zoo_errors() -> list[type[ZooError]]:
    found, stack = [], [ZooError]
    while stack:
        cls = stack.pop()
        found.append(cls)
        stack.extend(cls.__subclasses__())
    return found


@pytest.mark.parametrize(
    ("target", "said"),
    [
        ("folder", "is a folder, not a file name"),
        ("missing/curves.png", "the folder missing does not exist; create it first"),
        ("", "names no file: give the path of the file to write"),
        ("..", "is a folder, not a file name"),
    ],
)
def test_zoo_plot_onto_a_folder_a_missing_folder_or_no_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], target: str, said: str
) -> None:
    pytest.importorskip("matplotlib")
    from zoo.cli import main

    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "loss": 3.0, "lr": 1e-3}) + "\n")
    (tmp_path / "folder").mkdir()
    monkeypatch.chdir(tmp_path)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    assert main(["plot", str(run), "-o", target]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert said in err and "unexpected" not in err, err
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # nothing written, nothing left


def test_a_full_disk_is_a_zoo_error_naming_the_fix(tmp_path: Path) -> None:
    """ENOSPC for real: a 64 KiB tmpfs, where mounting works; else skipped."""
    import zoo
    from zoo.errors import CheckpointError
    from zoo.training.metrics import MetricsWriter, StepReport

    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        model = zoo.build("gpt2-small", vocab_size=512, d_model=64, n_layers=1, n_heads=2)  # > 64 KiB of weights
        with pytest.raises(CheckpointError, match=r"the disk is full .*free some space.*ENOSPC"):
            zoo.save(model, disk / "m.safetensors")
        assert list(disk.iterdir()) == []  # the temporary file is gone
        with pytest.raises(InputError, match=r"cannot write the metrics .*metrics.jsonl: the disk is full"):  # noqa: PT012
            with MetricsWriter(disk, True, None) as writer:
                for step in range(1, 10_000):
                    writer.write(StepReport(step, 10_000, 3.25, 1e-3, 64 * step, 1234.5, None, None))
                    if step % 50 == 0:
                        writer.flush()
    finally:
        subprocess.run(["umount", str(disk)], capture_output=True)

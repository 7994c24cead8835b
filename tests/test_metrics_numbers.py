"""Numbers stay numbers: a metric that is not finite is written to metrics.jsonl as JSON
``null`` with its key under ``nonfinite`` (an empty cell in metrics.csv) and plotted as a
gap that the legend names; a figure's suffix decides its format or is refused; the two
outputs of ``zoo probe`` are never one file; an ablation that diverges past what a record
holds says so (and says so again when run again) instead of rejecting its own record; a
``metrics.jsonl`` that is a folder is a zoo error wherever it is read or appended."""

from __future__ import annotations

import csv
import json
import math
import shutil
from pathlib import Path
from typing import Any

import pytest

import zoo
from helpers import TINY_ABLATION, prepared_bytes
from zoo.cli import main
from zoo.training import StepReport, TrainSettings
from zoo.training.curves import curves_figure, read_metrics
from zoo.training.metrics import MetricsWriter

MODEL = ["--set", "n_layers=1", "--set", "d_model=32", "--set", "n_heads=2", "--set", "vocab_size=256"]
MODEL += ["--set", "max_seq_len=32", "--set", "dropout=0.0"]
FLAGS = ["--steps", "2", "--batch-size", "2", "--seq-len", "16", "--eval-every", "2", "--eval-batches", "1"]
FLAGS += ["--threads", "1", "--quiet"]
PROBE = ["probe", "gpt2-small", *MODEL, "--tokenizer", "bytes", "--batch-size", "1", "--seq-len", "16"]
MAGIC = {".png": b"\x89PNG", ".svg": b"<?xml", ".pdf": b"%PDF", ".jpg": b"\xff\xd8", ".JPEG": b"\xff\xd8"}


def strict(line: str) -> Any:
    """``line`` as JSON proper: ``NaN`` and ``Infinity`` are not JSON."""

    def refuse(name: str) -> None:
        raise AssertionError(f"{name} in a metrics line: {line}")

    return json.loads(line, parse_constant=refuse)


def said(capsys: Any) -> str:
    captured = capsys.readouterr()
    return " ".join((captured.out + captured.err).split())


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return prepared_bytes(tmp_path_factory.mktemp("data"), 8_000)


@pytest.fixture(scope="module")
def run(data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny run whose MFU overflows to infinity (a peak of 1e-320 TFLOP/s), with metrics.csv."""
    out = tmp_path_factory.mktemp("run") / "run"
    flags = [*FLAGS, "--peak-tflops", "1e-320", "--log", "csv"]
    assert main(["train", "gpt2-small", *MODEL, "--data", str(data), "-o", str(out), *flags]) == 0
    return out


def test_an_infinite_mfu_is_written_as_null_with_its_reason(run: Path) -> None:
    lines = [strict(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in lines] == [1, 2]
    for row in lines:
        assert row["mfu"] is None and row["nonfinite"] == ["mfu"] and math.isfinite(row["loss"])
    with (run / "metrics.csv").open() as handle:
        table = list(csv.DictReader(handle))
    assert [row["mfu"] for row in table] == ["", ""] and all(float(row["loss"]) > 0 for row in table)
    assert [row["step"] for row in read_metrics(run)] == [1, 2]  # no line dropped by the reader


def written_with_gaps(folder: Path, older: bool) -> Path:
    """A run folder whose step 2 has a NaN loss and whose step 4 an infinite validation loss:
    written by the zoo's own MetricsWriter, or as an older zoo wrote them (bare NaN, Infinity)."""
    folder.mkdir()
    losses = [5.0, math.nan, 4.0, 3.5]
    reports = [
        StepReport(step, 4, loss, 1e-3, 32 * step, 100.0, None, {2: 4.5, 4: math.inf}.get(step))
        for step, loss in enumerate(losses, 1)
    ]
    if older:
        lines = [json.dumps({k: v for k, v in r.__dict__.items() if k not in ("steps", "mfu")}) for r in reports]
        (folder / "metrics.jsonl").write_text("\n".join(lines) + "\n")
        assert "NaN" in lines[1] and "Infinity" in lines[3]
    else:
        with MetricsWriter(folder, True, None) as writer:
            for report in reports:
                writer.write(report)
        for line in (folder / "metrics.jsonl").read_text().splitlines():
            strict(line)
    return folder


@pytest.mark.parametrize("older", [False, True], ids=["written now", "older zoo's NaN and Infinity"])
def test_non_finite_numbers_are_gaps_that_the_legend_names(older: bool, tmp_path: Path, capsys: Any) -> None:
    folder = written_with_gaps(tmp_path / "run", older)
    rows = read_metrics(folder)
    assert [row["step"] for row in rows] == [1, 2, 3, 4]
    assert "loss" not in rows[1] and rows[1]["nonfinite"] == ["loss"] and "nonfinite" not in rows[0]
    fig = curves_figure([folder])
    train_line, val_line, *_ = fig.axes[0].get_lines()
    ys = list(train_line.get_ydata())
    assert ys[0] == 5.0 and math.isnan(ys[1]) and ys[2:] == [4.0, 3.5]
    assert list(val_line.get_xdata()) == [2, 4] and math.isnan(val_line.get_ydata()[1])
    legend = [text.get_text() for text in fig.axes[0].get_legend().get_texts()]
    assert len(legend) == 1 and "gaps" in legend[0]
    assert "loss at 1 step" in legend[0] and "val_loss at 1 step" in legend[0]
    assert main(["plot", str(folder), "-o", str(tmp_path / "fig.png")]) == 0
    assert (tmp_path / "fig.png").read_bytes().startswith(MAGIC[".png"])


@pytest.mark.parametrize(
    "line",
    ['{"step": 5, "loss": null, "lr": 0.001}', '{"step": 5, "loss": 1.0, "lr": null, "nonfinite": ["loss"]}'],
    ids=["null loss, no reason", "null lr, another reason"],
)
def test_a_null_without_its_reason_is_damage_and_skipped(line: str, tmp_path: Path) -> None:
    folder = written_with_gaps(tmp_path / "run", older=False)
    with (folder / "metrics.jsonl").open("a") as handle:
        handle.write(line + "\n")
    assert [row["step"] for row in read_metrics(folder)] == [1, 2, 3, 4]


@pytest.mark.parametrize("suffix", sorted(MAGIC))
def test_zoo_plot_writes_the_format_its_suffix_names(suffix: str, run: Path, tmp_path: Path) -> None:
    figure = tmp_path / f"fig{suffix}"
    assert main(["plot", str(run), "-o", str(figure)]) == 0
    data = figure.read_bytes()
    assert data.startswith(MAGIC[suffix]) and (b"<svg" in data) == (suffix == ".svg")


def test_zoo_probe_plot_writes_the_format_its_suffix_names(tmp_path: Path) -> None:
    figure = tmp_path / "probe.svg"
    assert main([*PROBE, "--metrics", "residual", "--plot", str(figure)]) == 0
    assert figure.read_bytes().startswith(b"<?xml") and b"<svg" in figure.read_bytes()


@pytest.mark.parametrize("name", ["fig.txt", "fig", "fig.png.bak", "fig.eps"])
@pytest.mark.parametrize("command", ["plot", "probe"])
def test_a_suffix_that_names_no_format_is_refused(
    command: str, name: str, run: Path, tmp_path: Path, capsys: Any
) -> None:
    figure = tmp_path / name
    argv = ["plot", str(run), "-o", str(figure)] if command == "plot" else [*PROBE, "--plot", str(figure)]
    assert main(argv) == 1
    shown = said(capsys)
    assert ("-o" if command == "plot" else "--plot") in shown and ".png, .svg, .pdf" in shown
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("spelling", ["same", "dotted", "link"])
def test_probe_refuses_one_file_for_both_outputs(spelling: str, tmp_path: Path, capsys: Any) -> None:
    out = tmp_path / "probe.png"
    plot = {"same": out, "dotted": tmp_path / "." / "probe.png", "link": tmp_path / "link.png"}[spelling]
    if spelling == "link":
        plot.symlink_to(out)
    assert main([*PROBE, "-o", str(out), "--plot", str(plot)]) == 1
    assert "same file" in said(capsys)
    assert not out.exists()


def test_an_ablation_that_diverges_past_a_records_bound_says_so_each_time(tmp_path: Path, capsys: Any) -> None:
    out = tmp_path / "diverged"
    argv = ["ablate", *TINY_ABLATION, "--seeds", "1", "--swaps", "placement", "--lr", "1e3", "--out", str(out)]
    for _ in range(2):  # run again: the same verdict, never "missing or damaged"
        assert main(argv) == 1
        shown = said(capsys)
        assert "training diverged" in shown and "--lr" in shown and "past the 1e+06" in shown
        assert "damaged" not in shown
        assert list(out.glob("[!.]*.json")) == []  # no record the zoo would reject (.zoo-folder.json is its own)


@pytest.mark.slow
def test_a_diverged_rate_of_the_sweep_is_recorded_and_read_back(tmp_path: Path, capsys: Any) -> None:
    out = tmp_path / "swept"
    argv = ["ablate", *TINY_ABLATION, "--seeds", "1", "--swaps", "placement", "--out", str(out)]
    argv += ["--lr-grid", "1e3,3e-3", "--json"]
    assert main(argv) == 0
    first = json.loads(capsys.readouterr().out)
    assert main(argv) == 0  # every run reused: its records read back
    again = json.loads(capsys.readouterr().out)
    assert again["runs"] == first["runs"] and all(run["lr"] == 3e-3 for run in again["runs"])


def folder_for_metrics(run: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    (copy / "metrics.jsonl").unlink()
    (copy / "metrics.jsonl").mkdir()
    return copy


@pytest.mark.parametrize("reader", ["plot RUN", "plot RUN/metrics.jsonl", "train --resume"])
def test_a_metrics_file_that_is_a_folder_is_a_zoo_error(reader: str, run: Path, tmp_path: Path, capsys: Any) -> None:
    folder = folder_for_metrics(run, tmp_path)
    figure = str(tmp_path / "fig.png")
    argv = {
        "plot RUN": ["plot", str(folder), "-o", figure],
        "plot RUN/metrics.jsonl": ["plot", str(folder / "metrics.jsonl"), "-o", figure],
        "train --resume": ["train", "--resume", "-o", str(folder), "--steps", "4", "--quiet"],
    }[reader]
    assert main(argv) == 1
    shown = said(capsys)
    assert "metrics.jsonl is a folder" in shown and "unexpected" not in shown
    assert (folder / "metrics.jsonl").is_dir() and not Path(figure).exists()


def test_a_new_run_onto_a_metrics_folder_is_a_zoo_error(tmp_path: Path) -> None:
    out = tmp_path / "run"
    (out / "metrics.jsonl").mkdir(parents=True)
    settings = TrainSettings(steps=1, batch_size=2, seq_len=16, eval_every=1, eval_batches=1)
    overrides = dict(n_layers=1, d_model=32, n_heads=2, vocab_size=256, max_seq_len=32)
    with pytest.raises(zoo.ZooError, match="metrics.jsonl is a folder"):
        zoo.train("gpt2-small", None, settings, out=out, overrides=overrides)
    assert (out / "metrics.jsonl").is_dir()


@pytest.mark.parametrize("peak", ["inf", "nan", "1e400", "0"])
def test_a_peak_that_is_not_a_finite_positive_number_is_refused_before_the_run(
    peak: str, data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An infinite --peak-tflops is refused by the settings, naming the flag, before the
    run's folder is made (it used to train, then fail writing run.toml: "cannot write inf")."""
    out = tmp_path / "run"
    assert (
        main(["train", "gpt2-small", *MODEL, "--data", str(data), "-o", str(out), *FLAGS, "--peak-tflops", peak]) == 1
    )
    assert "must be a finite number > 0 (or None) (--peak-tflops)" in said(capsys)
    assert not out.exists()
    with pytest.raises(zoo.ConfigError, match="peak_tflops=True must be a finite number"):
        TrainSettings(peak_tflops=True)


@pytest.mark.parametrize("twice", ["same", "dotted", "linked"])
def test_zoo_plot_draws_a_run_given_twice_once(
    twice: str, run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from zoo.training.curves import curves_figure, distinct_runs

    other = {"same": run, "dotted": run / ".", "linked": tmp_path / "link"}[twice]
    if twice == "linked":
        other.symlink_to(run, target_is_directory=True)
    assert distinct_runs([run, other]) == [run]
    figure = tmp_path / "fig.png"
    assert main(["plot", str(run), str(other), "-o", str(figure)]) == 0
    assert "plotted 1 run(s)" in capsys.readouterr().out
    assert len(curves_figure(distinct_runs([run, other])).axes[0].get_legend().get_texts()) == 1

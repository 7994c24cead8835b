"""Training progress a person can read, and no silent defaults: plain flushed lines when
stderr is not a terminal, a live bar with the evaluations kept above it in one,
``--quiet`` and ``--log-every``; a resumed finished run says so (no "0 tokens/s");
``zoo eval RUN`` evaluates on the run's own data or refuses naming ``--data``, and its
title names the version, the data and the sequence length; an ablation with nothing to
swap says so before it trains."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from rich.console import Console

import zoo
from zoo.cli import main
from zoo.cli.progress import TrainProgress
from zoo.training import StepReport

TINY = ["--set", "n_layers=1", "--set", "d_model=32", "--set", "n_heads=2", "--set", "max_seq_len=32"]
BYTES = [*TINY, "--set", "vocab_size=256", "--tokenizer", "bytes"]
SHAPE = ["--batch-size", "2", "--seq-len", "16", "--threads", "1", "--eval-batches", "1"]
STEP = re.compile(r"^step +(\d+)/(\d+)  loss \d+\.\d{4}  lr \d\.\d\de-\d\d  [\d,]+ tokens/s$")
EVAL = re.compile(r"^step +(\d+)/(\d+)  val loss \d+\.\d{4}  perplexity \d+\.\d\d$")


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("data") / "data"
    text = folder.parent / "text.txt"
    text.write_text("The quick brown fox jumps over the lazy dog. " * 400, encoding="utf-8")
    assert main(["data", "prepare", str(text), "-o", str(folder), "--tokenizer", "bytes", "--val-fraction", "0.1"]) == 0
    return folder


def test_plain_lines_per_log_interval_and_per_evaluation(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = ["train", "gpt2-small", *BYTES, *SHAPE, "--data", str(data), "-o", str(tmp_path / "run")]
    assert main([*run, "--steps", "6", "--eval-every", "3", "--log-every", "2"]) == 0
    lines = capsys.readouterr().err.splitlines()
    steps = [int(m.group(1)) for line in lines if (m := STEP.match(line))]
    evals = [int(m.group(1)) for line in lines if (m := EVAL.match(line))]
    assert steps == [1, 2, 4, 6] and evals == [3, 6], lines  # the first step, every 2nd, the last
    assert all(STEP.match(line) or EVAL.match(line) for line in lines), lines  # nothing else, no bar
    assert lines[-1].startswith("step 6/6  val loss")

    # Finished: resuming it trains nothing and says so, without a speed of 0.
    assert main([*run, "--steps", "6", "--eval-every", "3", "--resume"]) == 0
    out, err = capsys.readouterr()
    assert "nothing to train" in out and "already at step 6" in out and "tokens/s" not in out + err

    assert main([*run, "--steps", "8", "--eval-every", "3", "--resume", "--quiet"]) == 0
    out, err = capsys.readouterr()  # --quiet: no progress; the one line is the stretched schedule's warning
    assert err.startswith("warning: --steps 8 changes the run's plan of 6 steps") and err.count("\n") == 1, err
    assert out.startswith("step 8: val loss")


def test_a_terminal_keeps_every_evaluation_above_the_bar() -> None:
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=100, color_system=None)
    with TrainProgress(console, 4, log_every=1, quiet=False, main_rank=True) as progress:
        for step in range(1, 5):
            val = 4.0 - step / 10 if step % 2 == 0 else None
            progress(StepReport(step, 4, 5.0 - step / 10, 1e-3, step * 32, 1000.0, None, val))
    text = buffer.getvalue()
    assert "step 2/4  val loss 3.8000" in text and "step 4/4  val loss 3.6000" in text
    assert "━" in text and "4/4" in text  # the bar
    assert "lr 1.00e-03" not in text  # no plain step lines in a terminal: the bar shows them


def test_other_ranks_and_quiet_show_nothing() -> None:
    for quiet, main_rank in ((True, True), (False, False)):
        buffer = io.StringIO()
        console = Console(file=buffer, force_terminal=False)
        with TrainProgress(console, 2, log_every=1, quiet=quiet, main_rank=main_rank) as progress:
            progress(StepReport(1, 2, 5.0, 1e-3, 32, 1000.0, None, 4.0))
        assert buffer.getvalue() == ""


def test_eval_uses_the_runs_data_or_refuses(data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    args = ["train", "gpt2-small", *BYTES, *SHAPE, "--data", str(data), "-o", str(run), "--quiet"]
    assert main([*args, "--steps", "2", "--eval-every", "2", "--save-every", "1"]) == 0
    capsys.readouterr()
    assert main(["eval", str(run), "--version", "1", "--seq-len", "16", "--batches", "1"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == f"{run}/v0001.safetensors on the val split of {data}, seq_len 16"

    built = tmp_path / "built.safetensors"
    zoo.save(zoo.build("gpt2-small", n_layers=1, d_model=32, n_heads=2, vocab_size=256), built)
    assert main(["eval", str(built)]) == 1
    err = capsys.readouterr().err
    assert "records no training data" in err and "--data" in err


def test_an_ablation_with_nothing_to_swap_says_so_first(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tiny = "--set d_model=16 --set n_layers=1 --set n_heads=2 --seq-len 16 --steps 1 --batch-size 2 --eval-every 1"
    args = [*tiny.split(), "--seeds", "1", "--tokenizer", "bytes", "--max-chars", "4000", "--threads", "1"]
    assert main(["ablate", "--from", "gpt2-small", "--to", "gpt2-small", *args, "-o", str(tmp_path / "aa")]) == 0
    out, err = capsys.readouterr()
    assert err.startswith("warning: gpt2-small and gpt2-small differ in nothing: no swap to train")
    assert "one design twice" in out  # and among the notes after the table
    with pytest.raises(SystemExit):  # refused at parse, before anything
        main(["ablate", "--from", "gpt2-small", "--to", "gpt2-medium", "--seeds", "0"])
    assert "must be 1 or more" in capsys.readouterr().err

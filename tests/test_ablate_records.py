"""An ablation's records and checkpoints are reused only when they hold: an edited
record whose checkpoint was edited and re-signed to match is trained again (its loss is
re-derived from the weights), a garbage base checkpoint is never reused, a killed
worker is a zoo error naming the run and how to resume, and a data path holding
Markdown or HTML reaches report.md escaped."""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import safetensors.torch
import torch

from helpers import forge_record, resign, split_file
from zoo.ablate import AblationResult, run_ablation
from zoo.ablate.docs import region_markdown
from zoo.ablate.report import report_markdown
from zoo.checkpoint.store import write_safetensors

# One worker for the whole file: its module fixtures (runs, data, answers) are built once, not once per worker.
pytestmark = pytest.mark.xdist_group("ablate-records")

SCALE: dict[str, Any] = dict(d_model=16, layers=1, heads=2, seq_len=16, steps=8, batch=8, lr=1e-2, eval_every=8)
HOSTILE = "d```x<script>y"  # a folder name: ``` and HTML in the data path
BASE = "00-base-gpt2-small"


def ablate(out: Path, data: Path) -> AblationResult:
    return run_ablation("gpt2-small", "gpt2-small", **SCALE, data=data, out_dir=out, tokenizer="bytes", seeds=1)


@pytest.fixture(scope="module")
def done(tmp_path_factory: pytest.TempPathFactory) -> tuple[AblationResult, Path]:
    root = tmp_path_factory.mktemp("ablation")
    folder = root / HOSTILE
    folder.mkdir()
    data = folder / "corpus.txt"
    data.write_text("It was the best of times, it was the worst of times. " * 200, encoding="utf-8")
    return ablate(root / "out", data), data


def copy(result: AblationResult, to: Path) -> Path:
    shutil.copytree(result.results_path.parent, to)
    return to


def losses(result: AblationResult) -> list[float | None]:
    return [seed.final_val_loss for run in result.runs for seed in run.seeds]


def test_an_honest_folder_is_reused_whole(done: tuple[AblationResult, Path], tmp_path: Path) -> None:
    """The loss re-derived from each checkpoint matches its record: nothing trains again."""
    result, data = done
    again = ablate(copy(result, tmp_path / "out"), data)
    assert again.trained == [] and sorted(again.reused) == sorted(result.trained)
    assert losses(again) == losses(result)


def test_an_edited_record_with_a_re_signed_checkpoint_is_trained_again(
    done: tuple[AblationResult, Path], tmp_path: Path
) -> None:
    result, data = done
    out = copy(result, tmp_path / "out")
    record_path = out / f"{BASE}.json"

    def better(record: dict[str, Any]) -> None:
        record["final_val_loss"] = record["curve"][-1]["val_loss"] = 0.25  # a far better base than it was

    forge_record(out, BASE, better)  # both verify, and the checkpoint names the edited record
    again = ablate(out, data)
    assert again.trained == [BASE]  # the forged record was not trusted
    assert losses(again) == losses(result)  # and the true loss is back
    assert json.loads(record_path.read_text())["final_val_loss"] == result.runs[0].seeds[0].final_val_loss


def _no_final(record: dict[str, Any]) -> None:
    record["final_val_loss"] = None


def _first(record: dict[str, Any]) -> None:
    record["curve"][0]["val_loss"] = 0.5  # "it started low": the first point, scored by the seed's weights


def _last_only(record: dict[str, Any]) -> None:
    record["curve"][-1]["val_loss"] = 0.25  # the curve's end, not the final loss


#: A record edited (digest and checkpoint re-signed) in each loss a report reads, and what the note says.
FORGED = {
    "no final loss": (_no_final, "its final loss is missing or is not its curve's last loss"),
    "first loss": (_first, "its first loss (step 0) is not what the seed's initial weights score"),
    "curve's last loss": (_last_only, "its final loss is missing or is not its curve's last loss"),
}


@pytest.mark.parametrize("forged", FORGED)
def test_every_loss_a_report_reads_from_a_record_is_scored_again(
    done: tuple[AblationResult, Path], tmp_path: Path, forged: str
) -> None:
    """Each forged loss: the row trains again (never a raw error, never the forged number),
    and the result and report.md say which record was not reused, why, and that it retrained."""
    result, data = done
    out = copy(result, tmp_path / "out")
    edit, why = FORGED[forged]
    forge_record(out, BASE, edit)
    again = ablate(out, data)
    assert again.trained == [BASE] and losses(again) == losses(result)
    assert again.runs[0].seeds[0].curve == result.runs[0].seeds[0].curve
    (note,) = [note for note in again.notes if note.startswith(f"{BASE}.json was not reused")]
    assert why in note and "trained again" in note
    assert f"{BASE}.json was not reused: {why}" in (out / "report.md").read_text().replace("\\", "")


@pytest.mark.parametrize("garbage", ["bytes", "empty", "truncated", "another run's weights"])
def test_a_garbage_base_checkpoint_is_never_reused(
    done: tuple[AblationResult, Path], tmp_path: Path, garbage: str
) -> None:
    result, data = done
    out = copy(result, tmp_path / "out")
    checkpoint = out / f"{BASE}.safetensors"
    raw = checkpoint.read_bytes()
    if garbage == "bytes":
        checkpoint.write_bytes(os.urandom(len(raw)))
    elif garbage == "empty":
        checkpoint.write_bytes(b"")
    elif garbage == "truncated":
        checkpoint.write_bytes(raw[: len(raw) // 2])
    else:  # well-formed and signed, with the base's metadata, but weights of another training
        header, _ = split_file(raw)
        tensors = {name: tensor.clone() for name, tensor in safetensors.torch.load(raw).items()}
        torch.manual_seed(1)
        for tensor in tensors.values():
            if tensor.is_floating_point():
                tensor.add_(torch.randn_like(tensor))
        write_safetensors(checkpoint, tensors, header["__metadata__"])
        checkpoint.write_bytes(resign(checkpoint.read_bytes()))
    again = ablate(out, data)
    assert again.trained == [BASE] and losses(again) == losses(result)
    cause = "its final loss" if garbage == "another run's weights" else "its checkpoint does not verify"
    assert any(note.startswith(f"{BASE}.json was not reused: {cause}") for note in again.notes), again.notes


def test_a_data_path_with_markdown_or_html_is_escaped_in_the_reports(done: tuple[AblationResult, Path]) -> None:
    result, _ = done
    written = result.report_path.read_text(encoding="utf-8")
    for text in (written, report_markdown(result), region_markdown(result, {})):
        blocks = re.findall(r"^(`{3,})bash\n(.*?)\n\1$", text, flags=re.S | re.M)
        assert blocks and all(HOSTILE in code and len(fence) > 3 for fence, code in blocks)  # fences outlast ```
        outside = re.sub(r"^(`{3,})bash\n.*?\n\1$", "", text, flags=re.S | re.M)
        assert "```" not in outside and "<script>" not in outside, outside


def _workers_of(pid: int) -> list[int]:
    """The spawned worker processes under ``pid`` (their command line runs spawn_main)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            line = (entry / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if parent == pid and b"spawn_main" in line:
            found.append(int(entry.name))
    return found


def _two_workers(out: Path, steps: int, **popen: Any) -> tuple[subprocess.Popen[Any], list[int]]:
    """`zoo ablate` training 2 seeds on 2 workers for ``steps`` steps, as a process, and the
    workers it has started once they are up (fewer if it ends or 240 s pass first)."""
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in {**SCALE, "steps": steps}.items()]
    command = [sys.executable, "-m", "zoo", "ablate", "--from=gpt2-small", "--to=gpt2-small", *flags]
    command += ["--seeds=2", "--workers=2", "--tokenizer=bytes", "--max-chars=20000", f"--out={out}"]
    process = subprocess.Popen(command, **popen)
    deadline = time.monotonic() + 240
    while len(workers := _workers_of(process.pid)) < 2 and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return process, workers


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the workers through /proc")
def test_a_killed_worker_is_a_zoo_error_naming_the_run_and_how_to_resume(tmp_path: Path) -> None:
    process, workers = _two_workers(tmp_path / "out", 400, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert workers, "no worker process started"
    os.kill(workers[0], signal.SIGKILL)
    _, said = process.communicate(timeout=240)
    said = " ".join(said.split())
    assert process.returncode == 1, said
    assert "unexpected" not in said and "BrokenProcessPool" not in said, said
    assert re.search(r"the worker process training run '.+' stopped", said), said
    assert "run the same command again (the same --out) to resume" in said and "--workers" in said, said


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the workers through /proc")
def test_a_killed_ablation_takes_its_workers_with_it(tmp_path: Path) -> None:
    """SIGKILL (or SIGTERM) of `zoo ablate` skips its clean-up; its workers notice and end
    rather than train on for nobody, and nothing they leave is reused as finished."""
    out = tmp_path / "out"
    process, workers = _two_workers(out, 4000, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert len(workers) == 2, "the workers did not start"
    process.kill()
    process.wait(timeout=60)
    deadline = time.monotonic() + 30
    while (alive := [pid for pid in workers if Path(f"/proc/{pid}").exists()]) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in alive:  # clean up before failing
        os.kill(pid, signal.SIGKILL)
    assert not alive, f"workers {alive} outlived the ablation"
    assert not list(out.glob("[0-9]*.json")), "a run cut short left a record"


def test_each_record_holds_its_training_throughput(done: tuple[AblationResult, Path]) -> None:
    """A record's tokens/s is its training steps' tokens over their wall time (evaluation
    excluded); ablation.json carries it per seed, its mean per variant, and the line shown."""
    result, _ = done
    s = result.settings
    saved = json.loads(result.results_path.read_text())
    seeds = []
    for run, shown in zip(result.runs, saved["runs"], strict=True):
        for seed in run.seeds:
            record = json.loads((result.results_path.parent / seed.checkpoint.with_suffix(".json").name).read_text())
            assert record["tokens_per_second"] > 0 and record["train_seconds"] > 0
            assert record["tokens_per_second"] == pytest.approx(
                s.steps * s.batch_size * s.seq_len / record["train_seconds"], rel=1e-9
            )
            assert seed.tokens_per_second == record["tokens_per_second"]
            seeds.append(record["tokens_per_second"])
        assert shown["tokens_per_second"] == pytest.approx(sum(x.tokens_per_second for x in run.seeds) / len(run.seeds))
    control = [s.tokens_per_second for s in result.control.seeds] if result.control else []
    mean = sum(seeds + control) / len(seeds + control)
    assert saved["throughput"] == {"tokens_per_second": pytest.approx(mean), "runs_at_once": 1}
    line = f"throughput: {mean:,.0f} tokens/s per run (1 run at once)"
    assert result.throughput() == line
    assert f"Throughput: {mean:,.0f} tokens/s per run (1 run at once)" in result.report_path.read_text()


PRESET = "p`x|y<script>alert(1)</script>```z"  # a preset or run name with a fence, a cell bar and HTML
SOURCE = "/d|ir/```x<script>y|z.txt"


def _outside_code(line: str) -> str:
    """``line`` without its code spans and backslash escapes (what renders as markup):
    a span opens at a run of backticks and closes at the next run of the same length."""
    plain, i = [], 0
    while i < len(line):
        if line[i] == "\\":
            i += 2
            continue
        if line[i] == "`":
            run = len(line[i:]) - len(line[i:].lstrip("`"))
            close = re.compile(rf"(?<!`)`{{{run}}}(?!`)").search(line, i + run)
            assert close, f"a code span that never closes: {line}"
            i = close.end()
            continue
        plain.append(line[i])
        i += 1
    return "".join(plain)


def _cells(line: str) -> int:
    """The cells of a table row as a Markdown table splits it: at every '|' no backslash escapes."""
    return len(re.findall(r"(?<!\\)(?:\\\\)*\|", line)) - 1


def test_names_and_paths_with_fences_bars_and_html_are_inert_in_the_reports(
    done: tuple[AblationResult, Path],
) -> None:
    """A preset name, run names and a data path holding ``` ` ``, ``|`` and ``<script>``:
    every table keeps its columns, every fence closes where it should, and no HTML tag
    is left outside code."""
    import dataclasses

    result, _ = done
    runs = [dataclasses.replace(run, name=f"{PRESET}{i}") for i, run in enumerate(result.runs)]
    control = result.control and dataclasses.replace(result.control, name=PRESET)
    hostile = dataclasses.replace(
        result, base=PRESET, target=PRESET + "2", runs=runs, control=control,
        data={**result.data, "source": SOURCE, "tokenizer": PRESET},
        differences=[(PRESET, PRESET, PRESET + "|")],
    )  # fmt: skip
    for text in (report_markdown(hostile), region_markdown(hostile, {})):
        assert "alert(1)" in text  # the names are shown, escaped
        prose = re.sub(r"^(`{3,})\w*\n.*?\n\1$", "", text, flags=re.S | re.M)
        lines = prose.splitlines()
        for i, line in enumerate(lines):
            plain = _outside_code(line)
            assert not re.search(r"<[A-Za-z/!]", plain) and "`" not in plain, line
            if line.startswith("|") and i + 1 < len(lines) and lines[i + 1].startswith("|-"):
                width = _cells(line)
                for row in itertools.takewhile(lambda row: row.startswith("|"), lines[i + 1 :]):
                    assert _cells(row) == width, row


def test_a_name_with_a_bar_is_never_a_code_span_that_splits_a_table_cell() -> None:
    """A table splits at a ``|`` even inside a code span: such a name is escaped text."""
    from zoo.ablate.results import md, md_code, md_row

    assert md_code("attention=gqa") == "`attention=gqa`"
    assert md_code("a|b`c") == md("a|b`c") == "a\\|b\\`c"
    row = md_row([PRESET, "4.1 | 2", md_code(PRESET)])
    assert _cells(row) == 3, row

"""bench/bench_gpu.py (`zoo bench gpu`) on the CPU: the batch probe's search, the MFU
arithmetic, the phase runner's budgets and partial report, the table, the refusal
without CUDA, and each phase's own code run on a tiny model (its --rehearse mode)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from bench import __main__ as bench_main
from bench import bench_gpu
from bench.bench_gpu import (
    BY_NAME,
    Phase,
    initial_context,
    largest_batch,
    mfu,
    render_table,
    run_phase_process,
    run_phases,
    summary_rows,
)

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("threshold", [0, 1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 100, 255, 256, 257, 1000])
@pytest.mark.parametrize("start", [1, 8, 64])
def test_largest_batch_finds_the_threshold(threshold: int, start: int) -> None:
    calls: list[int] = []

    def fits(size: int) -> bool:
        calls.append(size)
        return size <= threshold

    best, tried = largest_batch(fits, start=start, limit=256)
    assert best == min(threshold, 256)
    assert sorted(calls) == sorted(tried) and len(calls) == len(set(calls))  # each size tried once
    assert len(calls) <= 2 * math.ceil(math.log2(256)) + 2
    assert all(tried[size] == (size <= threshold) for size in tried)


def test_mfu_is_three_forward_flops_per_token_over_the_peak() -> None:
    # 10k tokens/s x 3 x 1 GFLOP per token = 30 TFLOP/s of a 100 TFLOP/s peak
    assert mfu(10_000, 1e9, 100.0) == pytest.approx(0.30)
    assert mfu(10_000, 1e9, None) is None


def test_phases_feed_the_next_and_the_report_is_written_after_each(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    seen: list[dict[str, Any]] = []

    def runner(phase: Phase, budget: float, context: dict[str, Any]) -> dict[str, Any]:
        seen.append(context)
        if phase.name == "second":
            assert json.loads(out.read_text())["phases"]["first"]["status"] == "ok"  # written before this one
            return {"status": "failed", "error": "boom"}
        return {"status": "ok", "feeds": {"batch": 24}}

    phases = [Phase("first", 10, dict), Phase("second", 10, dict), Phase("third", 10, dict)]
    report = run_phases(phases, out, {"batch": 8}, runner=runner)
    assert [c["batch"] for c in seen] == [8, 24, 24]
    assert json.loads(out.read_text()) == report
    assert [r["status"] for r in report["phases"].values()] == ["ok", "failed", "ok"]


def test_no_time_left_skips_the_remaining_phases(tmp_path: Path) -> None:
    report = run_phases([Phase("first", 10, dict)], tmp_path / "r.json", {}, total_budget_s=1.0)
    assert report["phases"]["first"]["status"] == "skipped"
    assert json.loads((tmp_path / "r.json").read_text())["phases"]["first"]["status"] == "skipped"


def test_a_phase_past_its_budget_is_stopped_and_reported() -> None:
    """A real child process: it cannot even import torch in half a second."""
    result = run_phase_process(BY_NAME["batch-probe"], 0.5, initial_context(rehearse=True))
    assert result["status"] == "timeout" and "budget" in result["error"]


def test_a_failing_phase_reports_its_error() -> None:
    result = run_phase_process(BY_NAME["train-zoo"], 120, {"device": "cpu"})  # no shape: KeyError in the child
    assert result["status"] == "failed" and "KeyError" in result["stderr_tail"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines without CUDA")
def test_without_cuda_the_command_refuses_clearly(tmp_path: Path) -> None:
    out = tmp_path / "gpu.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench.bench_gpu", "-o", str(out)], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 2
    assert "needs a CUDA GPU" in done.stderr and "--rehearse" in done.stderr
    assert "needs a CUDA GPU" in json.loads(out.read_text())["error"]


SAMPLE: dict[str, Any] = {
    "context": {"seq": 1024},
    "phases": {
        "environment": {"status": "ok", "device": "NVIDIA H200", "memory_gib": 139.8, "torch": "2.13.0"},
        "cuda-tests": {"status": "ok", "passed": 9, "failed": 0, "skipped": 0},
        "batch-probe": {"status": "ok", "batch": 48},
        "train-zoo": {"status": "ok", "tokens_per_s": 600_000.0, "mfu": 0.45, "peak_memory_gib": 80.0},
        "train-transformers": {"status": "ok", "tokens_per_s": 450_000.0, "mfu": 0.34},
        "train-x-transformers": {"status": "timeout", "error": "ran past its 65 s budget"},
        "ddp": {"status": "ok", "tokens_per_s": 400_000.0, "loss": 10.9, "backend": "nccl"},
        "fsdp2": {"status": "failed", "error": "exit status 1"},
        "decode": {"status": "ok", "zoo_tokens_per_s": 300.0, "transformers_tokens_per_s": 200.0, "same_tokens": True},
    },
}


def test_the_table_shows_each_figure_beside_its_goal() -> None:
    rows = {row[0]: row for row in summary_rows(SAMPLE)}
    assert rows["train-zoo"][2:] == ("MFU >= 40%", "met")
    assert rows["zoo / faster peer"][1:] == ("1.33x", ">= 1.2x", "met")  # the faster peer that finished
    assert rows["train-x-transformers"][1] == "timeout"
    assert rows["fsdp2 (world size 1)"][1:] == ("failed", "runs", "exit status 1")
    assert rows["decode zoo vs transformers"][3] == "met" and "1.50x" in rows["decode zoo vs transformers"][1]
    assert rows["largest batch"][1] == "48 x 1024"
    table = render_table(SAMPLE)
    assert table.splitlines()[0].split() == ["what", "figure", "goal", "verdict"]
    slow = json.loads(json.dumps(SAMPLE))
    slow["phases"]["train-zoo"]["mfu"] = 0.2
    assert {row[0]: row for row in summary_rows(slow)}["train-zoo"][3] == "MISSED"


@pytest.mark.parametrize("name", ["batch-probe", "train-zoo", "train-transformers", "train-x-transformers", "decode"])
def test_each_phase_runs_on_a_tiny_model_on_the_cpu(name: str) -> None:
    pytest.importorskip("x_transformers")
    context = initial_context(rehearse=True)
    result = BY_NAME[name].run(context)
    if name == "batch-probe":
        assert result["batch"] == context["batch_limit"] and result["feeds"] == {"batch": result["batch"]}
    elif name == "decode":
        assert result["same_tokens"] and result["zoo_tokens_per_s"] > 0 and result["transformers_tokens_per_s"] > 0
    else:
        assert result["tokens_per_s"] > 0 and result["batch"] == context["batch"]
        expected = mfu(result["tokens_per_s"], bench_gpu._flops_per_token(context), context["peak_tflops"])
        assert result["mfu"] == pytest.approx(expected)
    if name == "train-zoo":  # zoo's own loop reports the same MFU arithmetic
        assert result["loop_mfu"] is not None and result["loop_mfu"] > 0


def test_the_gpu_run_is_not_part_of_the_cpu_suite() -> None:
    assert "gpu" in bench_main.available() and "gpu" in bench_main.SEPARATE


@pytest.mark.slow
def test_the_whole_command_rehearses_on_the_cpu(tmp_path: Path) -> None:
    out = tmp_path / "gpu.json"
    phases = "environment,batch-probe,train-zoo,train-transformers,train-x-transformers,ddp,fsdp2,decode"
    done = subprocess.run(
        [sys.executable, "-m", "bench.bench_gpu", "--rehearse", "--only", phases, "-o", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    report = json.loads(out.read_text())
    assert done.returncode == 0, (done.stdout[-2000:], report)
    assert all(r["status"] == "ok" for r in report["phases"].values())
    assert report["phases"]["ddp"]["backend"] == "gloo" and "zoo / faster peer" in done.stdout

"""The GPU run, one prepared command (<= 8 minutes on one GPU): CUDA tests, training MFU against peers, DDP, FSDP2, decode.

``zoo bench gpu`` (``python -m bench.bench_gpu``) runs these phases, each in its own
process under its own time budget, and writes the JSON after every phase, so a phase
that fails or runs out of time leaves the others' figures (and says what happened):

- environment: torch, CUDA, the GPU, its memory and bf16 peak (for MFU);
- cuda tests: ``pytest -m cuda`` (tests/test_cuda.py: bf16 autocast, torch.compile,
  flash attention through SDPA, decoding, the training loop, ``ablate --device cuda``);
- batch probe: the largest batch of 1024-token sequences whose gpt2-small training
  step (bf16 autocast, eager) fits in the GPU's memory;
- training: gpt2-small, bf16 autocast, torch.compile, seq 1024, that batch: zoo's loop
  (``zoo.training.run_loop``, the code ``zoo train`` runs) against a transformers GPT-2 loop
  and an x-transformers loop of the same shape, with the same AdamW; tokens/s, MFU
  (3x the forward's FLOPs per token, from ``zoo.summary``, over the GPU's bf16 peak)
  and peak memory of each;
- ddp and fsdp2: ``torchrun --nproc_per_node 1 -m zoo train`` at world size 1 on nccl;
- decode: greedy gpt2-small, 32-token prompt + 128 new, ``model.generate`` against
  transformers ``generate`` on the same weights, tokens compared.

Goals printed beside the figures: MFU >= 40%; zoo's tokens/s >= 1.2x the faster peer's;
decode >= 1.2x transformers. Without CUDA the command refuses (exit status 2);
``--rehearse`` runs the same phases on the CPU with a tiny model, to check the command
itself before a GPU is at hand.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

TOTAL_BUDGET_S = 480.0
SEQ = 1024
MFU_GOAL = 0.40
PEER_GOAL = 1.2
DECODE_GOAL = 1.2
TINY = {"n_layers": 2, "d_model": 64, "n_heads": 4, "vocab_size": 512, "max_seq_len": 128}
ROOT = Path(__file__).resolve().parent.parent


# ---------------------------------------------------------------- shared logic (tested on the CPU)


def largest_batch(fits: Callable[[int], bool], *, start: int = 8, limit: int = 512) -> tuple[int, dict[int, bool]]:
    """The largest batch in [1, limit] for which ``fits`` holds, assuming it holds up to
    some size and not above: doubling from ``start`` (halving if that fails), then
    bisecting between the last size that fitted and the first that did not. Returns it
    (0 if not even 1 fits) and every size tried."""
    tried: dict[int, bool] = {}

    def trial(size: int) -> bool:
        if size not in tried:
            tried[size] = fits(size)
        return tried[size]

    size = max(1, min(start, limit))
    if trial(size):
        low, high = size, None
        while high is None and low < limit:
            nxt = min(low * 2, limit)
            if trial(nxt):
                low = nxt
            else:
                high = nxt
        if high is None:
            return low, tried
    else:
        high = size
        low = 0
        while high > 1:
            nxt = high // 2
            if trial(nxt):
                low = nxt
                break
            high = nxt
        if low == 0:
            return 0, tried
    while high - low > 1:  # low fits, high does not
        mid = (low + high) // 2
        if trial(mid):
            low = mid
        else:
            high = mid
    return low, tried


def mfu(tokens_per_s: float, flops_per_token: float, peak_tflops: float | None) -> float | None:
    """Model FLOPs utilisation of training: 3x the forward's FLOPs (forward, and backward
    at twice the forward) per token, at ``tokens_per_s``, over the peak."""
    if not peak_tflops:
        return None
    return tokens_per_s * 3 * flops_per_token / (peak_tflops * 1e12)


def write_report(path: Path, report: dict[str, Any]) -> None:
    """The report as JSON, written atomically (a reader never sees half of it)."""
    from zoo.checkpoint.store import write_atomically

    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(report, indent=2, sort_keys=False) + "\n"
    write_atomically(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


@dataclass(frozen=True)
class Phase:
    """One part of the run: its name, its time budget, and what it does (in its own process)."""

    name: str
    budget_s: float
    run: Callable[[dict[str, Any]], dict[str, Any]]


def run_phase_process(phase: Phase, budget_s: float, context: dict[str, Any]) -> dict[str, Any]:
    """Run one phase as ``python -m bench.bench_gpu --phase NAME`` within ``budget_s``."""
    context = {**context, "budget_s": budget_s}  # for the phases that run commands of their own
    with tempfile.TemporaryDirectory() as folder:
        result_file = Path(folder) / "result.json"
        command = [
            sys.executable,
            "-m",
            "bench.bench_gpu",
            "--phase",
            phase.name,
            "--context",
            json.dumps(context),
            "--result",
            str(result_file),
        ]
        start = time.perf_counter()
        try:
            done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=budget_s, check=False)
        except subprocess.TimeoutExpired as err:
            tail = (err.stderr or b"")[-1500:]
            return {
                "status": "timeout",
                "budget_s": round(budget_s, 1),
                "error": f"ran past its {budget_s:.0f} s budget",
                "stderr_tail": tail.decode(errors="replace") if isinstance(tail, bytes) else str(tail),
            }
        elapsed = time.perf_counter() - start
        if done.returncode != 0 or not result_file.is_file():
            return {
                "status": "failed",
                "seconds": round(elapsed, 1),
                "budget_s": round(budget_s, 1),
                "error": f"exit status {done.returncode}",
                "stderr_tail": done.stderr[-1500:],
            }
        result = json.loads(result_file.read_text(encoding="utf-8"))
        result.setdefault("status", "ok")
        result["seconds"] = round(elapsed, 1)
        result["budget_s"] = round(budget_s, 1)
        return result


def run_phases(
    phases: list[Phase],
    out: Path,
    context: dict[str, Any],
    *,
    total_budget_s: float = TOTAL_BUDGET_S,
    runner: Callable[[Phase, float, dict[str, Any]], dict[str, Any]] = run_phase_process,
    on_phase: Callable[[str, dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Run the phases in order, each within its budget and what is left of the total,
    writing the report after each. A phase's results feed the context of the next
    (the probed batch size, the peak FLOP/s)."""
    deadline = time.monotonic() + total_budget_s
    report: dict[str, Any] = {"context": dict(context), "total_budget_s": total_budget_s, "phases": {}}
    for phase in phases:
        left = deadline - time.monotonic()
        budget = min(phase.budget_s, left)
        if budget < 5:
            result: dict[str, Any] = {"status": "skipped", "error": f"no time left of the {total_budget_s:.0f} s"}
        else:
            result = runner(phase, budget, dict(context))
        report["phases"][phase.name] = result
        context.update(result.get("feeds", {}))
        report["context"] = dict(context)
        write_report(out, report)
        if on_phase is not None:
            on_phase(phase.name, result)
    return report


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _verdict(ok: bool | None) -> str:
    return "-" if ok is None else ("met" if ok else "MISSED")


def summary_rows(report: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(what, figure, goal, verdict) rows of the short table."""
    phases = report.get("phases", {})
    rows: list[tuple[str, str, str, str]] = []
    env = phases.get("environment", {})
    if env.get("status") == "ok":
        rows.append(("device", f"{env['device']} ({env['memory_gib']:.0f} GiB)", f"torch {env['torch']}", ""))
    tests = phases.get("cuda-tests", {})
    if tests:
        if tests.get("status") == "ok":
            figure = f"{tests['passed']} passed, {tests['failed']} failed, {tests['skipped']} skipped"
            rows.append(("cuda tests", figure, "all pass", _verdict(tests["failed"] == 0 and tests["passed"] > 0)))
        else:
            rows.append(("cuda tests", tests.get("status", "?"), "all pass", tests.get("error", "")))
    probe = phases.get("batch-probe", {})
    if probe:
        figure = f"{probe.get('batch')} x {report['context'].get('seq', SEQ)}" if probe.get("status") == "ok" else "-"
        rows.append(("largest batch", figure, "probed", probe.get("status", "?")))
    speeds: dict[str, float] = {}
    for name in ("train-zoo", "train-transformers", "train-x-transformers"):
        result = phases.get(name, {})
        if result.get("status") == "ok":
            speeds[name] = result["tokens_per_s"]
            memory = result.get("peak_memory_gib")
            figure = f"{result['tokens_per_s']:,.0f} tok/s, MFU {_pct(result.get('mfu'))}"
            if memory is not None:
                figure += f", {memory:.1f} GiB peak"
            goal = f"MFU >= {MFU_GOAL:.0%}" if name == "train-zoo" else ""
            ok = result.get("mfu") >= MFU_GOAL if name == "train-zoo" and result.get("mfu") is not None else None
            rows.append((name, figure, goal, _verdict(ok)))
        elif result:
            rows.append((name, result.get("status", "?"), "", result.get("error", "")))
    peers = [speeds[p] for p in ("train-transformers", "train-x-transformers") if p in speeds]
    if "train-zoo" in speeds and peers:
        ratio = speeds["train-zoo"] / max(peers)
        rows.append(("zoo / faster peer", f"{ratio:.2f}x", f">= {PEER_GOAL}x", _verdict(ratio >= PEER_GOAL)))
    for name in ("ddp", "fsdp2"):
        result = phases.get(name, {})
        if result.get("status") == "ok":
            figure = f"{result['tokens_per_s']:,.0f} tok/s, loss {result['loss']:.2f}, {result['backend']}"
            rows.append((f"{name} (world size 1)", figure, "runs", "met"))
        elif result:
            rows.append((f"{name} (world size 1)", result.get("status", "?"), "runs", result.get("error", "")))
    decode = phases.get("decode", {})
    if decode.get("status") == "ok":
        ratio = decode["zoo_tokens_per_s"] / decode["transformers_tokens_per_s"]
        figure = f"{decode['zoo_tokens_per_s']:,.0f} vs {decode['transformers_tokens_per_s']:,.0f} tok/s"
        same = "same tokens" if decode["same_tokens"] else "TOKENS DIFFER"
        rows.append(("decode zoo vs transformers", f"{figure} ({ratio:.2f}x, {same})", f">= {DECODE_GOAL}x", ""))
        rows[-1] = (*rows[-1][:3], _verdict(ratio >= DECODE_GOAL and decode["same_tokens"]))
    elif decode:
        rows.append(("decode", decode.get("status", "?"), "", decode.get("error", "")))
    return rows


def render_table(report: dict[str, Any]) -> str:
    rows = summary_rows(report)
    header = ("what", "figure", "goal", "verdict")
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(4)]
    lines = ["  ".join(str(cell).ljust(w) for cell, w in zip(row, widths)).rstrip() for row in [header, *rows]]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


# ---------------------------------------------------------------- the phases (each in its own process)


def _device(context: dict[str, Any]) -> torch.device:
    return torch.device(context["device"])


def _overrides(context: dict[str, Any]) -> dict[str, Any]:
    return {**(TINY if context.get("rehearse") else {}), "dropout": 0.0, "max_seq_len": max(context["seq"], 64)}


def _config(context: dict[str, Any]) -> Any:
    import zoo

    return zoo.get_config("gpt2-small", **_overrides(context))


def _peak_memory_gib(device: torch.device) -> float | None:
    return torch.cuda.max_memory_allocated(device) / (1 << 30) if device.type == "cuda" else None


def _reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def _random_tokens(vocab: int, n: int = 1 << 21) -> torch.Tensor:
    return torch.randint(0, vocab, (n,), generator=torch.Generator().manual_seed(1))


def phase_environment(context: dict[str, Any]) -> dict[str, Any]:
    from zoo._version import __version__
    from zoo.training.metrics import PEAK_TFLOPS

    device = _device(context)
    result: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda, "zoo": __version__}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        name = props.name
        peak = next((p for key, p in PEAK_TFLOPS.items() if key in name), None)
        result.update(
            device=name,
            memory_gib=props.total_memory / (1 << 30),
            capability=f"{props.major}.{props.minor}",
            bf16_peak_tflops=peak,
            flash_sdp=torch.backends.cuda.flash_sdp_enabled(),
        )
    else:
        peak = context.get("peak_tflops")
        result.update(device="cpu (rehearsal)", memory_gib=0.0, bf16_peak_tflops=peak)
    result["feeds"] = {"peak_tflops": context.get("peak_tflops") or peak}
    return result


def phase_cuda_tests(context: dict[str, Any]) -> dict[str, Any]:
    import xml.etree.ElementTree as ET

    with tempfile.TemporaryDirectory() as folder:
        junit = Path(folder) / "cuda.xml"
        command = [
            sys.executable,
            "-m",
            "pytest",
            "-m",
            "cuda",
            "-q",
            "-p",
            "no:cacheprovider",
            "-o",
            "addopts=",
            f"--junitxml={junit}",
            "tests/test_cuda.py",
        ]
        budget = float(context.get("budget_s", 60)) - 5
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=budget, check=False)
        if not junit.is_file():
            raise RuntimeError(f"pytest wrote no report (exit {done.returncode}): {done.stdout[-1500:]}")
        suite = ET.parse(junit).getroot()
        suite = suite if suite.tag == "testsuite" else suite[0]
        total, failed = int(suite.get("tests", 0)), int(suite.get("failures", 0)) + int(suite.get("errors", 0))
        skipped = int(suite.get("skipped", 0))
        failures = [
            f"{case.get('name')}: {(case[0].get('message') or '')[:300]}"
            for case in suite.iter("testcase")
            if len(case) and case[0].tag in ("failure", "error")
        ]
    return {
        "passed": total - failed - skipped,
        "failed": failed,
        "skipped": skipped,
        "failures": failures,
        "exit_status": done.returncode,
    }


def training_step(model: Any, logits_of: Callable[[torch.Tensor], torch.Tensor], context: dict[str, Any]) -> Any:
    """One optimizer step of ``model`` (forward, cross-entropy, backward, clip, AdamW) as
    a function of the batch; bf16 autocast on CUDA (as zoo's loop with --dtype bf16)."""
    import torch.nn.functional as F

    device = _device(context)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1)
    low = torch.bfloat16 if context["dtype"] == "bf16" else None

    def step(windows: torch.Tensor) -> float:
        with torch.autocast(device.type, dtype=low, enabled=low is not None):
            logits = logits_of(windows[:, :-1])
            loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), windows[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        return float(loss.item())  # waits for the step

    return step


def step_fits(step: Callable[[torch.Tensor], float], batch: int, seq: int, vocab: int, device: torch.device) -> bool:
    """Whether a training step over ``batch`` x ``seq`` tokens fits in memory (twice, so
    the optimizer's state is there too)."""
    try:
        windows = torch.randint(0, vocab, (batch, seq + 1), device=device)
        step(windows)
        step(windows)
        return True
    except torch.OutOfMemoryError:
        return False
    finally:
        if device.type == "cuda":
            torch.cuda.empty_cache()


def phase_batch_probe(context: dict[str, Any]) -> dict[str, Any]:
    import zoo

    device = _device(context)
    config = _config(context)
    model = zoo.build(config, device=device).train()
    step = training_step(model, model, context)
    limit = int(context.get("batch_limit", 256))
    best, tried = largest_batch(
        lambda b: step_fits(step, b, context["seq"], config.vocab_size, device), start=8, limit=limit
    )
    if best == 0:
        raise RuntimeError(f"not even one sequence of {context['seq']} tokens fits a training step")
    return {"batch": best, "tried": {str(k): v for k, v in sorted(tried.items())}, "feeds": {"batch": best}}


def _timed_steps(step: Callable[[torch.Tensor], float], context: dict[str, Any], vocab: int) -> list[float]:
    """Tokens/s of each timed step, after the warm-up steps (compilation)."""
    device = _device(context)
    tokens = _random_tokens(vocab)
    generator = torch.Generator().manual_seed(0)
    batch, seq = context["batch"], context["seq"]
    speeds = []
    for i in range(context["warmup"] + context["steps"]):
        start = time.perf_counter()
        starts = torch.randint(0, tokens.numel() - seq - 1, (batch,), generator=generator)
        windows = tokens[starts[:, None] + torch.arange(seq + 1)].to(device)
        loss = step(windows)
        if not math.isfinite(loss):
            raise RuntimeError(f"the loss is {loss} at step {i + 1}")
        if i >= context["warmup"]:
            speeds.append(batch * seq / (time.perf_counter() - start))
    return speeds


def _steps_or_halved(
    make_step: Callable[[], Callable[[torch.Tensor], float]], context: dict[str, Any], vocab: int
) -> list[float]:
    """Timed steps at the probed batch; if the peer runs out of memory there, at half of it
    (the batch used is in the result)."""
    try:
        return _timed_steps(make_step(), context, vocab)
    except torch.OutOfMemoryError:
        if context["batch"] < 2:
            raise
        context["batch"] //= 2
        torch.cuda.empty_cache()
        return _timed_steps(make_step(), context, vocab)


def _flops_per_token(context: dict[str, Any]) -> float:
    from zoo.summary import summarize

    return summarize(_config(context), context=context["seq"]).total_flops_per_token


def _peer_result(speeds: list[float], context: dict[str, Any], device: torch.device) -> dict[str, Any]:
    speed = statistics.median(speeds)
    return {
        "tokens_per_s": speed,
        "mfu": mfu(speed, _flops_per_token(context), context.get("peak_tflops")),
        "peak_memory_gib": _peak_memory_gib(device),
        "batch": context["batch"],
        "seq": context["seq"],
        "compiled": bool(context["compile"]),
    }


def phase_train_zoo(context: dict[str, Any]) -> dict[str, Any]:
    import zoo
    from zoo.training import StepReport, TrainSettings, World, run_loop, tokens_data

    device = _device(context)
    _reset_peak(device)
    config = _config(context)
    torch.manual_seed(0)
    model = zoo.build(config, device=device)
    steps = context["warmup"] + context["steps"]
    settings = TrainSettings(
        steps=steps,
        batch_size=context["batch"],
        seq_len=context["seq"],
        lr=1e-4,
        eval_every=steps,
        eval_batches=1,
        dtype=context["dtype"],
        compile=bool(context["compile"]),
        peak_tflops=context.get("peak_tflops"),
    )
    tokens = _random_tokens(config.vocab_size)
    reports: list[StepReport] = []
    run_loop(
        model, tokens_data(tokens, tokens[: 1 << 16]), settings, world=World(0, 1, 0, device), on_step=reports.append
    )
    timed = reports[context["warmup"] :]
    if not all(math.isfinite(r.loss) for r in reports):
        raise RuntimeError("a non-finite training loss")
    speed = statistics.median(r.tokens_per_s for r in timed)
    return {
        "tokens_per_s": speed,
        "mfu": mfu(speed, _flops_per_token(context), context.get("peak_tflops")),
        "loop_mfu": statistics.median(r.mfu for r in timed) if all(r.mfu is not None for r in timed) else None,
        "peak_memory_gib": _peak_memory_gib(device),
        "loss_first_last": [reports[0].loss, reports[-1].loss],
        "batch": context["batch"],
        "seq": context["seq"],
        "compiled": bool(context["compile"]),
    }


def phase_train_transformers(context: dict[str, Any]) -> dict[str, Any]:
    from transformers import GPT2Config, GPT2LMHeadModel

    device = _device(context)
    _reset_peak(device)
    c = _config(context)
    torch.manual_seed(0)
    hf_config = GPT2Config(
        n_layer=c.n_layers,
        n_embd=c.d_model,
        n_head=c.n_heads,
        n_positions=c.max_seq_len,
        vocab_size=c.vocab_size,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        attn_implementation="sdpa",
    )
    model = GPT2LMHeadModel(hf_config).to(device).train()
    forward = torch.compile(model) if context["compile"] else model
    speeds = _steps_or_halved(
        lambda: training_step(model, lambda idx: forward(idx).logits, context), context, c.vocab_size
    )
    return _peer_result(speeds, context, device)


def phase_train_x_transformers(context: dict[str, Any]) -> dict[str, Any]:
    from x_transformers import Decoder, TransformerWrapper

    device = _device(context)
    _reset_peak(device)
    c = _config(context)
    torch.manual_seed(0)
    model = TransformerWrapper(
        num_tokens=c.vocab_size,
        max_seq_len=c.max_seq_len,
        tie_embedding=True,
        attn_layers=Decoder(dim=c.d_model, depth=c.n_layers, heads=c.n_heads, attn_flash=True),
    ).to(device)
    model.train()
    forward = torch.compile(model) if context["compile"] else model
    speeds = _steps_or_halved(lambda: training_step(model, forward, context), context, c.vocab_size)
    return _peer_result(speeds, context, device)


def _torchrun(context: dict[str, Any], strategy: str) -> dict[str, Any]:
    """``zoo train`` at world size 1 through torchrun; its metrics.jsonl read back."""
    from zoo.training.metrics import METRICS

    steps = max(4, context["warmup"] + 3)
    batch = max(1, min(context["batch"], 16))
    sets = [f"--set={k}={v}" for k, v in _overrides(context).items()]
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "run"
        command = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            "1",
            "-m",
            "zoo",
            "train",
            "gpt2-small",
            *sets,
            "--out",
            str(out),
            "--strategy",
            strategy,
            "--dtype",
            context["dtype"],
            "--steps",
            str(steps),
            "--batch-size",
            str(batch),
            "--seq-len",
            str(context["seq"]),
            "--eval-every",
            str(steps),
            "--eval-batches",
            "1",
            "--lr",
            "1e-4",
        ]
        if context.get("data"):
            command += ["--data", context["data"]]
        if context.get("tokenizer"):
            command += ["--tokenizer", context["tokenizer"]]
        budget = float(context.get("budget_s", 60)) - 5
        env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=budget, check=False, env=env)
        if done.returncode != 0:
            raise RuntimeError(f"torchrun exit {done.returncode}: {done.stderr[-1500:]}")
        rows = [json.loads(line) for line in (out / METRICS).read_text(encoding="utf-8").splitlines() if line.strip()]
    steps_rows = [r for r in rows if "tokens_per_s" in r]
    if not steps_rows:
        raise RuntimeError("zoo train wrote no step metrics")
    timed = steps_rows[min(2, len(steps_rows) - 1) :]
    return {
        "tokens_per_s": statistics.median(r["tokens_per_s"] for r in timed),
        "loss": steps_rows[-1]["loss"],
        "steps": len(steps_rows),
        "batch": batch,
        "backend": "nccl" if _device(context).type == "cuda" else "gloo",
    }


def phase_ddp(context: dict[str, Any]) -> dict[str, Any]:
    return _torchrun(context, "ddp")


def phase_fsdp2(context: dict[str, Any]) -> dict[str, Any]:
    return _torchrun(context, "fsdp")


def phase_decode(context: dict[str, Any]) -> dict[str, Any]:
    from transformers import GenerationConfig, GPT2Config, GPT2LMHeadModel
    from transformers.utils import logging as hf_logging

    import zoo

    hf_logging.disable_progress_bar()
    device = _device(context)
    c = _config(context)
    torch.manual_seed(0)
    theirs = GPT2LMHeadModel(
        GPT2Config(
            n_layer=c.n_layers, n_embd=c.d_model, n_head=c.n_heads, n_positions=c.max_seq_len, vocab_size=c.vocab_size
        )
    ).eval()
    with tempfile.TemporaryDirectory() as folder:
        theirs.save_pretrained(folder)
        ours = zoo.from_hf(folder).to(device)
    theirs.to(device)
    new = int(context.get("new_tokens", 128))
    prompt = torch.randint(0, c.vocab_size, (1, 32), device=device)
    greedy = GenerationConfig(max_new_tokens=new, do_sample=False, eos_token_id=None, pad_token_id=0)
    outputs: dict[str, torch.Tensor] = {}

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def run_zoo() -> None:
        outputs["zoo"] = ours.generate(prompt, new)
        sync()

    def run_hf() -> None:
        with torch.inference_mode():
            outputs["hf"] = theirs.generate(prompt, generation_config=greedy)
        sync()

    times: dict[str, list[float]] = {"zoo": [], "hf": []}
    for i in range(4):  # the first round warms up
        for name, fn in (("zoo", run_zoo), ("hf", run_hf)):
            start = time.perf_counter()
            fn()
            if i:
                times[name].append(time.perf_counter() - start)
    zoo_s, hf_s = statistics.median(times["zoo"]), statistics.median(times["hf"])
    return {
        "zoo_tokens_per_s": new / zoo_s,
        "transformers_tokens_per_s": new / hf_s,
        "same_tokens": bool(torch.equal(outputs["zoo"].cpu(), outputs["hf"].cpu())),
        "new_tokens": new,
        "dtype": "fp32",
    }


PHASES: list[Phase] = [
    Phase("environment", 25, phase_environment),
    Phase("cuda-tests", 75, phase_cuda_tests),
    Phase("batch-probe", 40, phase_batch_probe),
    Phase("train-zoo", 75, phase_train_zoo),
    Phase("train-transformers", 65, phase_train_transformers),
    Phase("train-x-transformers", 65, phase_train_x_transformers),
    Phase("ddp", 40, phase_ddp),
    Phase("fsdp2", 40, phase_fsdp2),
    Phase("decode", 40, phase_decode),
]
BY_NAME = {phase.name: phase for phase in PHASES}


def initial_context(rehearse: bool) -> dict[str, Any]:
    """What every phase starts from: device, shape, precision, steps."""
    if rehearse:
        return {
            "device": "cpu",
            "rehearse": True,
            "seq": 32,
            "dtype": "fp32",
            "compile": False,
            "warmup": 1,
            "steps": 2,
            "batch": 2,
            "batch_limit": 4,
            "new_tokens": 8,
            "tokenizer": "bytes",  # the bundled text as bytes: ids < 256 fit the tiny vocabulary
            "peak_tflops": 0.1,  # a stand-in peak, so the MFU arithmetic runs
        }
    return {"device": "cuda", "seq": SEQ, "dtype": "bf16", "compile": True, "warmup": 3, "steps": 12, "batch": 8}


def run_one_phase(name: str, context: dict[str, Any], result_file: Path) -> int:
    """The child side: run one phase, write its result."""
    torch.manual_seed(0)
    result = BY_NAME[name].run(context)
    result_file.write_text(json.dumps(result), encoding="utf-8")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="zoo bench gpu", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "-o", "--out", default="runs/bench-gpu.json", metavar="FILE", help="default runs/bench-gpu.json"
    )
    parser.add_argument(
        "--only", default=None, metavar="PHASES", help=f"comma-separated phases (default all: {', '.join(BY_NAME)})"
    )
    parser.add_argument("--budget-s", type=float, default=TOTAL_BUDGET_S, metavar="N", help="default 480 (8 minutes)")
    parser.add_argument("--rehearse", action="store_true", help="run the phases on the CPU with a tiny model")
    parser.add_argument("--data", default=None, metavar="DIR", help="prepared data for ddp/fsdp2 (default: zoo's)")
    parser.add_argument("--phase", help=argparse.SUPPRESS)
    parser.add_argument("--context", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.phase:
        return run_one_phase(args.phase, json.loads(args.context), Path(args.result))
    out = Path(args.out)
    context = initial_context(args.rehearse)
    if args.data:
        context["data"] = args.data
    if not args.rehearse and not torch.cuda.is_available():
        why = (
            f"torch {torch.__version__} is a CPU build"
            if torch.version.cuda is None
            else f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no GPU"
        )
        message = (
            f"zoo bench gpu needs a CUDA GPU, and {why}; run it on a machine with one (after `make`), "
            f"or pass --rehearse to try the command on the CPU with a tiny model"
        )
        write_report(out, {"error": message, "phases": {}})
        sys.stderr.write(message + "\n")
        return 2
    names = [n.strip() for n in args.only.split(",")] if args.only else list(BY_NAME)
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        sys.stderr.write(f"unknown phase(s) {', '.join(unknown)}; phases: {', '.join(BY_NAME)}\n")
        return 2

    def progress(name: str, result: dict[str, Any]) -> None:
        note = result.get("error", "") if result.get("status") != "ok" else ""
        sys.stdout.write(f"{name}: {result.get('status')} ({result.get('seconds', 0)} s) {note}\n".rstrip() + "\n")
        sys.stdout.flush()

    report = run_phases([BY_NAME[n] for n in names], out, context, total_budget_s=args.budget_s, on_phase=progress)
    sys.stdout.write("\n" + render_table(report) + f"\n\nwritten to {out}\n")
    failed = [n for n, r in report["phases"].items() if r.get("status") != "ok"]
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

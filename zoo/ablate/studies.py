"""Studies over a grid: one ablation per cell of scale rungs x learning rates x warm-ups.

``run_study(base, target, scales=[(64, 2), (128, 4)], lr_sweep=[1e-3, 3e-3])`` runs the
ablation of ``base`` -> ``target`` (every swap, the target and the control, over the
same seeds) once per cell, each in a folder of its own under ``out_dir``. A cell whose
runs have records is read back and never trained again, so a ladder grows rung by rung,
and rungs may be trained on different machines (``--scales 192x6`` alone on a GPU box)
and gathered into one folder. Then it says, per swap, how its Δ moves with training
FLOPs along the rungs (grows, shrinks, flips, flat within noise), and shows the final
loss against the rate (or the warm-up) per variant: the whole curve, each point a full
budget, not a short proxy.

A rung ``64x2`` is d_model 64 and 2 layers, with heads at the base scale's head size
(``d_model / heads``). Its budget: ``tokens_per_param`` (training tokens = R x the
base's non-embedding parameters at that rung), ``flops_per_run`` (every run the same
training FLOPs), or else the same ``steps`` for every rung.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from zoo.ablate.ablation import run_ablation
from zoo.ablate.ladder import Cell, Rung, StudyResult, ladder
from zoo.ablate.options import DEFAULT_SCALE
from zoo.ablate.plan import ablation_data, at_scale
from zoo.ablate.results import TRAIN_FLOPS_FACTOR, AblationResult
from zoo.ablate.runner import ProgressCallback
from zoo.ablate.study_report import write_study_report
from zoo.bounds import check_steps
from zoo.errors import ConfigError
from zoo.nn.config import resolve_config
from zoo.nn.registry import Registry, default_registry
from zoo.summary import summarize

__all__ = ["non_embedding_parameters", "run_study"]


def run_study(
    base: str = "transformer-2017",
    target: str = "gpt2-small",
    *,
    out_dir: Path,
    scales: Sequence[tuple[int, int]] | None = None,
    tokens_per_param: float | None = None,
    flops_per_run: float | None = None,
    lr_sweep: Sequence[float] | None = None,
    warmup_sweep: Sequence[int | None] | None = None,
    d_model: int = DEFAULT_SCALE["d_model"],
    layers: int = DEFAULT_SCALE["layers"],
    heads: int = DEFAULT_SCALE["heads"],
    steps: int = DEFAULT_SCALE["steps"],
    lr: float = DEFAULT_SCALE["lr"],
    eval_every: int = DEFAULT_SCALE["eval_every"],
    warmup: int | None = None,
    seq_len: int = DEFAULT_SCALE["seq_len"],
    batch: int = DEFAULT_SCALE["batch"],
    on_progress: ProgressCallback | None = None,
    registry: Registry | None = None,
    **options: Any,
) -> StudyResult:
    """Run ``run_ablation`` in every cell of ``scales`` x ``lr_sweep`` x ``warmup_sweep``
    (each default: the one given by ``d_model``/``layers``, ``lr``, ``warmup``), each cell
    in ``out_dir / cell.name``; then write ``study.json``, ``scale.png`` (Δ against training
    FLOPs per swap, with a ladder), ``sweep.png`` (final loss against rate or warm-up per
    variant, with a sweep) and ``report.md`` into ``out_dir``.

    ``tokens_per_param`` or ``flops_per_run`` set each rung's steps (see the module);
    ``eval_every`` keeps the base scale's number of evaluations. Other ``options`` go to
    ``run_ablation`` unchanged (seeds, data, workers, device, correction, swaps, ...). A
    cell whose runs are finished trains nothing.
    """
    registry = registry or default_registry()
    _check_study(options, tokens_per_param, flops_per_run, d_model, heads)
    rungs = ladder(scales or [(d_model, layers)], d_model // heads)
    rates = sorted({float(r) for r in lr_sweep}) if lr_sweep else [lr]
    if any(not 0 < r < math.inf for r in rates):
        raise ConfigError(f"learning rates must be > 0, got {rates} (--lr-sweep 1e-3,3e-3,1e-2)")
    warmups = list(dict.fromkeys(warmup_sweep)) if warmup_sweep else [warmup]
    tokens_per_step = batch * seq_len
    budget = _budget(tokens_per_param, flops_per_run, steps)
    evaluations = max(1, steps // max(1, eval_every))
    out_dir = Path(out_dir)
    vocab = _vocab(options) if flops_per_run is not None else 256  # the head's FLOPs need the data's vocabulary
    cells = []
    for rung in rungs:
        rung_steps = _rung_steps(base, rung, seq_len, vocab, tokens_per_step, budget, registry)
        for w in warmups:
            if w is not None and not 0 <= w <= rung_steps:
                raise ConfigError(
                    f"warm-up {w} is longer than rung {rung.name}'s {rung_steps} steps; lower --warmup-sweep"
                )
        rung_every = max(1, rung_steps // evaluations)
        cells += [Cell(rung, r, w, rung_steps, rung_every) for r in rates for w in warmups]
    done, trained, reused = _run_cells(base, target, cells, seq_len, batch, out_dir, on_progress, registry, options)
    study = StudyResult(
        base=base,
        target=target,
        cells=done,
        rungs=rungs,
        rates=rates,
        warmups=warmups,
        budget={**budget, "tokens_per_step": tokens_per_step},
        command=_study_command(
            done[0][1].command,
            d_model,
            layers,
            heads,
            steps,
            eval_every,
            lr,
            warmup,
            scales,
            tokens_per_param,
            flops_per_run,
            lr_sweep,
            warmup_sweep,
            out_dir,
        ),
        results_path=out_dir / "study.json",
        trained=trained,
        reused=reused,
        main_process=done[0][1].main_process,
    )
    if study.main_process:
        write_study_report(study)
    return study


def _check_study(
    options: dict[str, Any], tokens_per_param: float | None, flops_per_run: float | None, d_model: int, heads: int
) -> None:
    """Refuse a study that cannot be run as asked, before anything trains."""
    if options.get("tune_lr") or options.get("lr_grid") is not None:
        raise ConfigError("a study trains every rate for the full budget; drop --tune-lr/--lr-grid, or --lr-sweep")
    if tokens_per_param is not None and flops_per_run is not None:
        raise ConfigError("pick one budget rule: --tokens-per-param or --flops-per-run, not both")
    for name, value in (("tokens_per_param", tokens_per_param), ("flops_per_run", flops_per_run)):
        if value is not None and not (isinstance(value, (int, float)) and 0 < value < math.inf):
            raise ConfigError(f"{name}={value!r} must be a number > 0 (--{name.replace('_', '-')})")
    if heads < 1 or d_model % heads:
        raise ConfigError(f"d_model {d_model} must be a multiple of heads {heads} (--set d_model, --set n_heads)")


def _run_cells(
    base: str,
    target: str,
    cells: list[Cell],
    seq_len: int,
    batch: int,
    out_dir: Path,
    on_progress: ProgressCallback | None,
    registry: Registry,
    options: dict[str, Any],
) -> tuple[list[tuple[Cell, AblationResult]], list[str], list[str]]:
    """One ablation per cell, each in its own folder; finished cells train nothing."""
    done: list[tuple[Cell, AblationResult]] = []
    trained: list[str] = []
    reused: list[str] = []
    for cell in cells:
        shown = None if on_progress is None else _prefixed(on_progress, cell.name)
        result = run_ablation(
            base,
            target,
            d_model=cell.rung.d_model,
            layers=cell.rung.layers,
            heads=cell.rung.heads,
            steps=cell.steps,
            eval_every=cell.eval_every,
            lr=cell.lr,
            warmup=cell.warmup,
            seq_len=seq_len,
            batch=batch,
            out_dir=out_dir / cell.name,
            on_progress=shown,
            registry=registry,
            **options,
        )
        done.append((cell, result))
        trained += [f"{cell.name}/{key}" for key in result.trained]
        reused += [f"{cell.name}/{key}" for key in result.reused]
    return done, trained, reused


def _budget(tokens_per_param: float | None, flops_per_run: float | None, steps: int) -> dict[str, Any]:
    if tokens_per_param is not None:
        return {"rule": "tokens_per_param", "value": float(tokens_per_param)}
    if flops_per_run is not None:
        return {"rule": "flops_per_run", "value": float(flops_per_run)}
    return {"rule": "steps", "value": steps}


def _vocab(options: dict[str, Any]) -> int:
    """The data's vocabulary size, as every cell will see it."""
    _, described = ablation_data(
        options.get("data"),
        options.get("tokenizer", "auto"),
        options.get("vocab_limit", 1024),
        options.get("max_chars"),
        [],
    )
    return int(described["vocab_size"])


def non_embedding_parameters(base: str, rung: Rung, seq_len: int, vocab: int, registry: Registry) -> int:
    """The base's parameters at ``rung`` without the token and position tables and the head
    (Kaplan et al.'s N, which budgets are counted in)."""
    summary = summarize(_rung_config(base, rung, seq_len, vocab, registry), context=seq_len, registry=registry)
    return summary.total_parameters - summary.parameters["embeddings"] - summary.parameters["head"]


def _rung_config(base: str, rung: Rung, seq_len: int, vocab: int, registry: Registry) -> Any:
    scale = {
        "d_model": rung.d_model,
        "n_layers": rung.layers,
        "n_heads": rung.heads,
        "vocab_size": vocab,
        "max_seq_len": seq_len,
    }
    return at_scale(resolve_config(base, registry=registry), scale, registry)


def _rung_steps(
    base: str, rung: Rung, seq_len: int, vocab: int, tokens_per_step: int, budget: dict[str, Any], registry: Registry
) -> int:
    """The steps of every run at ``rung`` under the budget rule."""
    if budget["rule"] == "tokens_per_param":
        tokens = budget["value"] * non_embedding_parameters(base, rung, seq_len, vocab, registry)
    elif budget["rule"] == "flops_per_run":
        config = _rung_config(base, rung, seq_len, vocab, registry)
        per_token = summarize(config, context=seq_len, registry=registry).total_flops_per_token
        tokens = budget["value"] / (TRAIN_FLOPS_FACTOR * per_token)
    else:
        return int(budget["value"])
    flag = "--" + budget["rule"].replace("_", "-")
    if not math.isfinite(tokens / tokens_per_step):
        raise ConfigError(f"{flag} {budget['value']:g} asks for more steps than can be counted; lower {flag}")
    steps = max(1, int(round(tokens / tokens_per_step)))
    check_steps(steps, f"{budget['value']:g} at rung {rung.name}", flag)
    return steps


def _prefixed(on_progress: ProgressCallback, name: str) -> ProgressCallback:
    return lambda run, step, total, loss: on_progress(f"{name} {run}", step, total, loss)


def _study_command(
    cell_command: str,
    d_model: int,
    layers: int,
    heads: int,
    steps: int,
    eval_every: int,
    lr: float,
    warmup: int | None,
    scales: Sequence[tuple[int, int]] | None,
    tokens_per_param: float | None,
    flops_per_run: float | None,
    lr_sweep: Sequence[float] | None,
    warmup_sweep: Sequence[int | None] | None,
    out_dir: Path,
) -> str:
    """The ``zoo ablate`` command that repeats the study: a cell's, with the study's own
    sizes, rate, warm-up and output folder, and the ladder and sweep flags."""
    values: dict[str, object] = {
        "--set d_model": d_model,
        "--set n_layers": layers,
        "--set n_heads": heads,
        "--steps": steps,
        "--eval-every": eval_every,
        "--lr": f"{lr:g}",
        "--warmup": warmup,
    }
    kept: list[str] = []
    words = iter(shlex.split(cell_command))
    for word in words:  # a cell's own sizes, rate, warm-up and folder give way to the study's
        value = next(words, "") if word in ("--set", "-o", "--out", *values) else None
        key = f"--set {value.split('=')[0]}" if word == "--set" and value else word
        if word in ("-o", "--out") or key in values:
            continue
        kept += [word] if value is None else [word, value]
    for key, given in values.items():
        if given is not None:
            flag, _, field = key.partition(" ")
            kept += [flag, f"{field}={given}"] if field else [flag, str(given)]
    if scales:
        kept += ["--scales", ",".join(f"{d}x{n}" for d, n in scales)]
    if tokens_per_param is not None:
        kept += ["--tokens-per-param", f"{tokens_per_param:g}"]
    if flops_per_run is not None:
        kept += ["--flops-per-run", f"{flops_per_run:g}"]
    if lr_sweep:
        kept += ["--lr-sweep", ",".join(f"{r:g}" for r in lr_sweep)]
    if warmup_sweep:
        kept += ["--warmup-sweep", ",".join("auto" if w is None else str(w) for w in warmup_sweep)]
    kept += ["-o", str(out_dir)]
    return shlex.join(kept)

"""Studies over a grid: one ablation per cell of scale rungs x learning rates x warm-ups.

``run_study(base, target, scales=[(64, 2), (128, 4)], lr_sweep=[1e-3, 3e-3])`` runs the
ablation of ``base`` -> ``target`` (every swap, the target and the control, over the
same seeds) once per cell, each in a folder of its own under ``out_dir``. A cell whose
runs have records is read back and never trained again, so a ladder grows rung by rung,
and rungs may be trained on different machines (``--scales 192x6`` alone on a GPU box)
and gathered into one folder. Then it says, per swap, how its Δ moves with training
FLOPs along the rungs (grows, shrinks, flips, from corrected tests only), and shows the final
loss against the rate (or the warm-up) per variant: the whole curve, each point a full
budget, not a short proxy.

A rung ``64x2`` is d_model 64 and 2 layers, with heads at the base scale's head size
(``d_model / heads``). Its budget: ``tokens_per_param`` (training tokens = R x the
base's non-embedding parameters at that rung), ``flops_per_run`` (every run the same
training FLOPs), or else the same ``steps`` for every rung.
"""

from __future__ import annotations

import math
from dataclasses import fields, replace
from typing import Any

from zoo.ablate.ablation import run_options
from zoo.ablate.ladder import Cell, Rung, StudyResult, ladder
from zoo.ablate.options import (
    FLAG_OPTIONS,
    Options,
    StudyOptions,
    make_options,
    record,
    refuse_unknown,
    split_options,
    study_command,
    with_options,
)
from zoo.ablate.plan import ablation_data, at_scale, resolve_presets
from zoo.ablate.results import TRAIN_FLOPS_FACTOR, AblationResult
from zoo.ablate.runner import ProgressCallback
from zoo.ablate.study_report import write_study_report
from zoo.bounds import check_steps
from zoo.errors import ConfigError, checked_types
from zoo.nn.config import ModelConfig, resolve_config
from zoo.nn.registry import Registry, default_registry
from zoo.summary import summarize

__all__ = ["non_embedding_parameters", "run_study"]


@checked_types()
def run_study(
    base: str = "transformer-2017",
    target: str = "gpt2-small",
    *,
    on_progress: ProgressCallback | None = None,
    registry: Registry | None = None,
    overwrite: bool = False,
    **options: Any,
) -> StudyResult:
    """Run ``run_ablation`` in every cell of ``scales`` x ``lr_sweep`` x ``warmup_sweep``
    (each default: the one given by ``d_model``/``layers``, ``lr``, ``warmup``), each cell
    in ``out_dir / cell.name``; then write ``study.json``, ``scale.png`` (Δ against training
    FLOPs per swap, with a ladder), ``sweep.png`` (final loss against rate or warm-up per
    variant, with a sweep) and ``report.md`` into ``out_dir``.

    ``options``: the study's own (``zoo.ablate.options.StudyOptions``: ``scales``,
    ``tokens_per_param``, ``flops_per_run``, ``lr_sweep``, ``warmup_sweep``) and
    ``run_ablation``'s, which every cell shares (``out_dir`` required). ``tokens_per_param``
    or ``flops_per_run`` set each rung's steps (see the module); ``eval_every`` keeps the
    base scale's number of evaluations. A cell whose runs are finished trains nothing. The
    presets are resolved once, for every rung and cell.
    """
    registry = registry or default_registry()
    refuse_unknown(options, [*FLAG_OPTIONS, *(f.name for f in fields(StudyOptions))], "run_study")
    own, shared = split_options(options)
    study = make_options(StudyOptions, own, "run_study")
    o = make_options(Options, {"base": base, "target": target, **shared}, "run_study")
    _check_study(o, study)
    presets = resolve_presets(o, registry)
    cells, rungs, rates, warmups, budget = _cells(o, study, presets[0], registry)
    done, trained, reused = _run_cells(o, cells, presets, on_progress, registry, overwrite)
    result = StudyResult(
        base=base,
        target=target,
        cells=done,
        rungs=rungs,
        rates=rates,
        warmups=warmups,
        budget={**budget, "tokens_per_step": o.batch * o.seq_len},
        command=study_command(o, study),
        results_path=o.out_dir / "study.json",
        trained=trained,
        reused=reused,
        main_process=done[0][1].main_process,
        options={**record(o), **record(study)},
    )
    if result.main_process:
        write_study_report(result)
    return result


with_options(run_study, StudyOptions, Options)


def _cells(
    o: Options, study: StudyOptions, base: ModelConfig, registry: Registry
) -> tuple[list[Cell], list[Rung], list[float], list[int | None], dict[str, Any]]:
    """The study's cells (rung x rate x warm-up, each with its steps), rungs, rates,
    warm-ups and budget rule."""
    rungs = ladder(study.scales or [(o.d_model, o.layers)], o.d_model // o.heads)
    rates = sorted({float(r) for r in study.lr_sweep}) if study.lr_sweep else [o.lr]
    if any(not 0 < r < math.inf for r in rates):
        raise ConfigError(f"learning rates must be > 0, got {rates} (--lr-sweep 1e-3,3e-3,1e-2)")
    warmups = list(dict.fromkeys(study.warmup_sweep)) if study.warmup_sweep else [o.warmup]
    budget = _budget(study.tokens_per_param, study.flops_per_run, o.steps)
    evaluations = max(1, o.steps // max(1, o.eval_every))
    vocab = _vocab(o) if study.flops_per_run is not None else 256  # the head's FLOPs need the data's vocabulary
    cells = []
    for rung in rungs:
        rung_steps = _rung_steps(base, rung, o.seq_len, vocab, o.batch * o.seq_len, budget, registry)
        for w in warmups:
            if w is not None and not 0 <= w <= rung_steps:
                raise ConfigError(
                    f"warm-up {w} is longer than rung {rung.name}'s {rung_steps} steps; lower --warmup-sweep"
                )
        rung_every = max(1, rung_steps // evaluations)
        parameters = non_embedding_parameters(base, rung, o.seq_len, vocab, registry)
        cells += [Cell(rung, r, w, rung_steps, rung_every, parameters) for r in rates for w in warmups]
    return cells, rungs, rates, warmups, budget


def _check_study(o: Options, study: StudyOptions) -> None:
    """Refuse a study that cannot be run as asked, before anything trains."""
    if o.tune_lr and study.lr_sweep:
        raise ConfigError(
            "a rate sweep trains every rate for the full budget; drop --tune-lr/--lr-grid (each variant at its own "
            "short sweep's rate, in every cell), or --lr-sweep"
        )
    tokens_per_param, flops_per_run = study.tokens_per_param, study.flops_per_run
    if tokens_per_param is not None and flops_per_run is not None:
        raise ConfigError("pick one budget rule: --tokens-per-param or --flops-per-run, not both")
    for name, value in (("tokens_per_param", tokens_per_param), ("flops_per_run", flops_per_run)):
        if value is not None and not (isinstance(value, (int, float)) and 0 < value < math.inf):
            raise ConfigError(f"{name}={value!r} must be a number > 0 (--{name.replace('_', '-')})")
    if o.heads < 1 or o.d_model % o.heads:
        raise ConfigError(f"d_model {o.d_model} must be a multiple of heads {o.heads} (--set d_model, --set n_heads)")


def _run_cells(
    o: Options,
    cells: list[Cell],
    presets: tuple[ModelConfig, ModelConfig],
    on_progress: ProgressCallback | None,
    registry: Registry,
    overwrite: bool,
) -> tuple[list[tuple[Cell, AblationResult]], list[str], list[str]]:
    """One ablation per cell, each in its own folder; finished cells train nothing."""
    done: list[tuple[Cell, AblationResult]] = []
    trained: list[str] = []
    reused: list[str] = []
    for cell in cells:
        shown = None if on_progress is None else _prefixed(on_progress, cell.name)
        at_cell = replace(
            o,
            d_model=cell.rung.d_model,
            layers=cell.rung.layers,
            heads=cell.rung.heads,
            steps=cell.steps,
            eval_every=cell.eval_every,
            lr=cell.lr,
            warmup=cell.warmup,
            out_dir=o.out_dir / cell.name,
        )
        result = run_options(at_cell, on_progress=shown, registry=registry, overwrite=overwrite, presets=presets)
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


def _vocab(o: Options) -> int:
    """The data's vocabulary size, as every cell will see it."""
    _, described = ablation_data(o.data, o.tokenizer, o.vocab_limit, o.max_chars, [])
    return int(described["vocab_size"])


def non_embedding_parameters(base: str | ModelConfig, rung: Rung, seq_len: int, vocab: int, registry: Registry) -> int:
    """The base's parameters at ``rung`` without the token and position tables and the head
    (Kaplan et al.'s N, which budgets are counted in)."""
    summary = summarize(_rung_config(base, rung, seq_len, vocab, registry), context=seq_len, registry=registry)
    return summary.total_parameters - summary.parameters["embeddings"] - summary.parameters["head"]


def _rung_config(base: str | ModelConfig, rung: Rung, seq_len: int, vocab: int, registry: Registry) -> ModelConfig:
    scale = {
        "d_model": rung.d_model,
        "n_layers": rung.layers,
        "n_heads": rung.heads,
        "vocab_size": vocab,
        "max_seq_len": seq_len,
    }
    config = base if isinstance(base, ModelConfig) else resolve_config(base, registry=registry)
    return at_scale(config, scale, registry)


def _rung_steps(
    base: ModelConfig,
    rung: Rung,
    seq_len: int,
    vocab: int,
    tokens_per_step: int,
    budget: dict[str, Any],
    registry: Registry,
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

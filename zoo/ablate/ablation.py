"""``run_ablation``: plan the study, train its runs (the sweep first, when asked), read
their records back into statistics, and write the report."""

from __future__ import annotations

import contextlib
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from zoo._version import __version__
from zoo.ablate.advice import edge_sentence
from zoo.ablate.baselines import Baselines, ngram_baselines
from zoo.ablate.lengths import correct_lengths, extrapolation, scored_tokens
from zoo.ablate.options import EDGE_EXTENSIONS, FINALISTS, Options, make_options, record, with_options
from zoo.ablate.plan import Job, Plan, beyond_edge, make_plan
from zoo.ablate.records import Context, content_digest, read_record, seed_run
from zoo.ablate.report import write_report
from zoo.ablate.results import (
    LEVEL,
    TRAIN_FLOPS_FACTOR,
    AblationResult,
    AblationRun,
    SwapInteraction,
    swap_interactions,
    unlearned_interactions,
)
from zoo.ablate.runner import ProgressCallback, Runner, join_world
from zoo.ablate.stats import adjust_optional, mean_interval, paired_difference
from zoo.ablate.stats import require as require_statistics
from zoo.ablate.tuning import TuneRun, best_tune, chosen_rate, finalists, sweep_edges, sweep_noise
from zoo.checkpoint.owned import LOCK, MARKER, claim, refuse_inputs_inside
from zoo.errors import ConfigError, InputError, ZooError, checked_types
from zoo.files import read_json
from zoo.nn.config import ModelConfig
from zoo.nn.registry import Registry, default_registry
from zoo.summary import summarize
from zoo.training import validation_batches
from zoo.training.distributed import World, barrier, broadcast_text

ABLATE_KIND = "ablate"  # the kind of output folder an ablation owns


@checked_types()
def run_ablation(
    base: str = "transformer-2017",
    target: str = "gpt2-small",
    *,
    on_progress: ProgressCallback | None = None,
    command: str | None = None,
    registry: Registry | None = None,
    overwrite: bool = False,
    **options: Any,
) -> AblationResult:
    """Train base, each single swap toward target (or a cumulative path), and target,
    each with ``seeds`` seeds; save every run and report means, intervals and paired
    differences.

    ``options``: the fields of ``zoo.ablate.options.Options`` by name (``out_dir`` is
    required), each also a flag of ``zoo ablate``: ``d_model``, ``layers``, ``heads``,
    ``seq_len``, ``steps``, ``batch``, ``lr``, ``eval_every``, ``seeds``, ``seed``, ... .

    ``base``/``target``: preset names (decoder-only). ``data``: a folder prepared by
    ``zoo data prepare`` (``zoo.training.prepare``), trained on as it is: its manifest's
    tokenizer and vocabulary size every model, its validation split is the held-out
    part; or a UTF-8 text file (default: the bundled Shakespeare) tokenised in memory
    (``zoo.training.load_corpus``), its last 10% held out. For a text file only:
    ``tokenizer`` is ``"auto"`` (GPT-2 when the ``text`` extra is installed, else
    bytes), ``"gpt2"`` or ``"bytes"``; with GPT-2, ``vocab_limit`` keeps the most
    frequent tokens and spells the rest as bytes (None keeps every token);
    ``max_chars`` keeps only the start of the text. With a prepared folder,
    ``tokenizer`` other than ``"auto"`` must be the manifest's, ``max_chars`` must be
    None and ``vocab_limit`` is not used.

    ``seeds``: runs per variant, with seeds ``seed .. seed + seeds - 1`` (init and data
    order). ``tune_lr``: first train every variant briefly (``tune_fraction`` of the
    steps, seed ``seed + TUNE_SEED_OFFSET``, not a compared seed) at each rate of
    ``lr_grid`` (default: ``lr`` times ``LR_GRID_FACTORS``; a grid implies
    ``tune_lr``), then train it at its best rate; otherwise every run uses ``lr``. ``path``: True for the cumulative path in
    the default order, or a sequence of axes giving its order (axes left out follow in
    the default order). ``order``: the table's rows by ``"effect"`` size or in
    ``"plan"`` order. ``swaps``: train only these single swaps (axes), not every one;
    ``"a+b"`` is one row with both swapped, and with both single swaps trained too its
    interaction Δ(a+b) - Δ(a) - Δ(b) is tested (``AblationResult.interactions``).

    Every study has a ``control`` row: the base again at seeds ``seed +
    CONTROL_SEED_OFFSET + i``, set beside the base's seed ``seed + i``: its difference
    shows the spread of the base over seeds (its seeds share nothing with the base's, so
    it is no check of the swaps' paired intervals). ``correction``: ``"holm"`` (default),
    ``"bonferroni"``, ``"bh"`` or ``"none"``, over the tests of every row but the base and
    the interactions (``zoo.ablate.stats.adjust_p``); a row's ``*`` follows its adjusted p. ``warmup``: the
    learning-rate warm-up steps (default: a tenth of the steps).

    ``workers``: runs trained at once, each in a process of its own (results identical
    to ``workers=1``). Under ``torchrun`` the runs are spread over the ranks instead;
    rank 0 writes the report. ``device``: ``"cpu"``, or ``"cuda"`` to train on GPUs
    (one per worker or rank, round robin). ``threads``: torch CPU threads per run
    (default 1: models this small run fastest on one thread, and the curves then do not
    depend on the core count; None leaves torch's setting).

    ``on_progress(run, step, steps, loss)`` is called with ``step=0, loss=None`` when a
    run starts, after every update with its training loss, and once more with
    ``step=steps`` and the final validation loss when the run is done (``run`` names
    the variant, its seed or the swept rate). Under ``torchrun`` it is called on rank 0
    only: for rank 0's own runs as they train, and for the other ranks' runs once each
    phase is over (their final call only).

    Writes to ``out_dir``: ``NN-<run>.safetensors`` (the first seed) and
    ``NN-<run>-seedK.safetensors`` per run, each with a ``.json`` record of its curve,
    ``tune/`` records of the sweep, ``ablation.json``, ``ablation.png``, ``deltas.png``
    and ``report.md``. Restarted with the same ``out_dir``, it trains only the runs
    that have no record yet.
    """
    given = make_options(Options, {"base": base, "target": target, **options}, "run_ablation")
    return run_options(given, on_progress=on_progress, command=command, registry=registry, overwrite=overwrite)


with_options(run_ablation, Options)


def run_options(
    options: Options,
    *,
    on_progress: ProgressCallback | None = None,
    command: str | None = None,
    registry: Registry | None = None,
    overwrite: bool = False,
    presets: tuple[ModelConfig, ModelConfig] | None = None,
) -> AblationResult:
    """``run_ablation`` of ``options``; ``presets``: the base's and the target's configs
    when the caller has resolved them already (a study, once for all its cells)."""
    if not isinstance(overwrite, bool):
        raise ConfigError(f"overwrite must be True or False, got {overwrite!r}")
    # overwrite stays out of the repeat command: rerunning a report's command never wipes its folder
    registry = registry or default_registry()
    return _run(options, on_progress, command or options.command(), registry, overwrite, presets)


def _run(
    options: Options,
    on_progress: ProgressCallback | None,
    command: str,
    registry: Registry,
    overwrite: bool = False,
    presets: tuple[ModelConfig, ModelConfig] | None = None,
) -> AblationResult:
    """Plan, train the sweep (if any) and the seeds, collect, report."""
    if overwrite:  # the corpus inside the folder overwrite replaces: refused before it is read
        refuse_inputs_inside(options.out_dir, [("data", options.data)], InputError)
    plan = make_plan(options, registry, presets)
    if options.seeds > 1:
        require_statistics()  # refused before training every run, not after
    world = join_world()
    if options.workers > 1 and world.size > 1:
        plan.notes.append("under torchrun each rank trains its share of the runs one at a time; workers is ignored")
    if options.seeds == 1:
        plan.notes.append(
            "one seed: no confidence intervals and no significance; use seeds >= 2 (3 or more to trust them)"
        )
    with contextlib.ExitStack() as stack:
        _claim(options.out_dir, world, stack, overwrite)
        content = content_digest(plan.tokens)
        context = Context(plan.tokens, plan.data, options.out_dir, options.device, options.threads, content)
        return _train_and_report(plan, options, context, world, registry, on_progress, command)


def _claim(out_dir: Path, world: World, stack: contextlib.ExitStack, overwrite: bool = False) -> None:
    """The out folder, owned for the ablation (``zoo.checkpoint.owned``): a marker, and a
    lock held until ``stack`` closes; a folder the zoo did not make is refused unless
    ``overwrite``, which replaces it whole with an empty one. Rank 0 claims, every rank
    gets its verdict."""
    failure = ""
    if world.is_main:
        try:
            owned = claim(
                out_dir,
                ABLATE_KIND,
                "zoo ablate",
                error=InputError,
                adopt=_older_ablation,
                what="the output folder (--out)",
                hint="give a new folder, the folder of this ablation to restart it, or --overwrite to replace it whole",
                overwrite=overwrite,
            )
            stack.callback(owned.release)
        except ZooError as err:
            failure = str(err)
    failure = broadcast_text(failure, world)
    if failure:
        raise InputError(failure)


_ABLATION_FILE = re.compile(r"[^/]+\.(safetensors|json)|tune|ablation\.png|deltas\.png|report\.md|\..*\.tmp")


def _older_ablation(folder: Path) -> bool:
    """Whether ``folder`` (no marker) is an ablation of an older zoo: only the files one
    writes, and its ``ablation.json`` or a run record reads as one."""
    names = [p.name for p in folder.iterdir() if p.name not in (LOCK, MARKER)]
    if not names or not all(_ABLATION_FILE.fullmatch(name) for name in names):
        return False
    for name in names:
        if name.endswith(".json"):
            try:
                data = read_json(folder / name, InputError, "record", limit=64 << 20, follow=False)
            except InputError:
                continue
            if isinstance(data, dict) and ({"runs", "command"} <= data.keys() or {"run", "fingerprint"} <= data.keys()):
                return True
    return False


def _train_and_report(
    plan: Plan,
    options: Options,
    context: Context,
    world: World,
    registry: Registry,
    on_progress: ProgressCallback | None,
    command: str,
) -> AblationResult:
    runner = Runner(context, options.workers, world, registry, on_progress, launcher=options.launcher)
    tunes = _tune(plan, runner)
    lrs, flat = _rates(plan, tunes, options.lr)
    jobs = plan.seed_jobs(lrs)
    control_jobs = plan.control_jobs(lrs[0])  # the base's rate
    runner.run([*(job for per_variant in jobs for job in per_variant), *control_jobs])
    runs = _collect(plan, jobs, lrs, tunes, runner, registry)
    control = _control(plan, control_jobs, runs[0], runner)
    result = _result(plan, runs, command, runner, control)
    for run, kept in zip(runs, flat, strict=True):
        run.flat_sweep = kept
        if kept:
            result.notes.append(
                f"{run.name}: its sweep is flat (at the base's rate {run.lr:g} it ends within the base's seed noise, "
                f"{sweep_noise(runs[0].tune):.4f}, of its best rate), so it trained at the base's rate"
            )
    result.judge_learning(
        plan.options.read_unlearned
    )  # before the tests: a row that did not learn is in no interaction
    result.interactions = corrected(runs, plan.options.correction, control, swap_interactions(runs))
    result.notes += [f"interaction of {left}" for left in unlearned_interactions(runs)]
    _extrapolation(plan, runs)
    if result.main_process:
        write_report(result)
    barrier(world)  # the other ranks return once the report exists
    return result


def _tune(plan: Plan, runner: Runner) -> list[list[TuneRun]]:
    """The sweep, when the plan has one: per variant, its final loss at each rate of the grid,
    then in rounds at rates past an edge its best rate sits on (``_extend``)."""
    if not plan.grid:
        return [[] for _ in plan.variants]
    jobs = plan.tune_jobs()
    runner.run([job for per_variant in jobs for job in per_variant])
    tunes = [[_tune_run(job, runner) for job in per_variant] for per_variant in jobs]
    tunes = _extend(plan, runner, tunes)
    # Successive halving: the best short runs train again for the whole budget; the best of
    # those wins. The base's first: every other variant also trains at the base's rate, and
    # the base at it under the next seed, so a flat sweep can keep the base's rate (_rates).
    base = [plan.tune_job(0, rate, full=True) for rate in finalists(tunes[0], FINALISTS)]
    runner.run(base)
    tunes[0] = _with_full(tunes[0], base, runner)
    base_rate = _best_rate(plan.variants[0].name, tunes[0])
    final = [[plan.tune_job(0, base_rate, reseeded=True)]] + [
        [plan.tune_job(i, rate, full=True) for rate in dict.fromkeys([*finalists(tune, FINALISTS), base_rate])]
        for i, tune in enumerate(tunes[1:], start=1)
    ]
    runner.run([job for per_variant in final for job in per_variant])
    return [_with_full(tune, jobs, runner) for tune, jobs in zip(tunes, final)]


def _with_full(tune: list[TuneRun], jobs: list[Job], runner: Runner) -> list[TuneRun]:
    """``tune`` with the full-length (and reseeded) runs of ``jobs`` read back, in rate order."""
    runs = [_tune_run(job, runner, full=True, reseeded=job.key.endswith("-reseed")) for job in jobs]
    return sorted([*tune, *runs], key=lambda t: (t.lr, t.full, t.reseeded))


def _rates(plan: Plan, tunes: list[list[TuneRun]], lr: float) -> tuple[list[float], list[bool]]:
    """Each variant's rate and whether its flat sweep kept the base's (``chosen_rate``);
    ``lr`` for every variant without a sweep."""
    if not tunes[0]:
        return [lr for _ in tunes], [False for _ in tunes]
    base_rate = _best_rate(plan.variants[0].name, tunes[0])
    noise = sweep_noise(tunes[0])
    rates, flat = [base_rate], [False]
    for variant, tune in zip(plan.variants[1:], tunes[1:], strict=True):
        rate, kept = chosen_rate(tune, base_rate, noise)
        rates.append(_best_rate(variant.name, tune) if rate is None else rate)
        flat.append(kept)
    return rates, flat


def _tune_run(job: Job, runner: Runner, extended: bool = False, full: bool = False, reseeded: bool = False) -> TuneRun:
    return TuneRun(job.settings.lr, read_record(job, runner.context)["final_val_loss"], extended, full, reseeded)


def _extend(plan: Plan, runner: Runner, tunes: list[list[TuneRun]]) -> list[list[TuneRun]]:
    """While a variant's best rate is the lowest or highest it trained, train one more rate
    past that edge at the grid's spacing (``beyond_edge``), up to ``EDGE_EXTENSIONS`` per
    side. Each round's runs go through the runner together (``--workers`` apply), and each
    is a sweep run with a record: a restarted ablation makes the same choices from the same
    records, and trains nothing again."""
    added = [{"low": 0, "high": 0} for _ in tunes]
    while True:
        extension = []
        for index, tune in enumerate(tunes):
            rates = [t.lr for t in tune]
            for side in sweep_edges(tune):
                if added[index][side] < EDGE_EXTENSIONS:
                    added[index][side] += 1
                    extension.append((index, plan.tune_job(index, beyond_edge(rates, side))))
        if not extension:
            return tunes
        runner.run([job for _, job in extension])
        for index, job in extension:
            tunes[index] = sorted([*tunes[index], _tune_run(job, runner, extended=True)], key=lambda t: t.lr)


def _best_rate(name: str, tune: list[TuneRun]) -> float:
    best = best_tune(tune)
    if best is None:
        raise ConfigError(
            f"every learning rate of the sweep diverged for {name!r} ({', '.join(f'{t.lr:g}' for t in tune)}); "
            f"pass lower rates with --lr-grid"
        )
    return best.lr


def _collect(
    plan: Plan, jobs: list[list[Job]], lrs: list[float], tunes: list[list[TuneRun]], runner: Runner, registry: Registry
) -> list[AblationRun]:
    """Every variant's seeds read back from their records, with its statistics and cost."""
    runs: list[AblationRun] = []
    settings = plan.settings
    for variant, mine, lr, tune in zip(plan.variants, jobs, lrs, tunes):
        context = runner.context
        seed_runs = [seed_run(job, read_record(job, context), context, job.key in runner.reused) for job in mine]
        summary = summarize(variant.config, context=settings.seq_len, registry=registry)
        losses = [s.final_val_loss for s in seed_runs]
        previous = runs[-1].losses() if runs and plan.options.on_path else None
        runs.append(
            AblationRun(
                name=variant.name,
                axis=variant.axis,
                config=variant.config,
                lr=lr,
                seeds=seed_runs,
                loss=mean_interval(losses, LEVEL),
                delta_vs_base=paired_difference(runs[0].losses() if runs else losses, losses, LEVEL),
                delta_vs_previous=paired_difference(previous, losses, LEVEL) if previous else None,
                parameters=summary.total_parameters,
                flops_per_token=summary.total_flops_per_token,
                train_flops=TRAIN_FLOPS_FACTOR
                * summary.total_flops_per_token
                * settings.steps
                * settings.tokens_per_step,
                tune=tune,
            )
        )
    return runs


def _extrapolation(plan: Plan, runs: list[AblationRun]) -> None:
    """Each variant's losses at the eval lengths, as intervals and paired tests (every
    longer length against its own loss at T, and against the base's), corrected together."""
    if not plan.lengths:
        return
    base = [s.eval_lengths for s in runs[0].seeds]
    found = [
        extrapolation([s.eval_lengths for s in run.seeds], None if i == 0 else base, plan.lengths, v.refused, LEVEL)
        for i, (run, v) in enumerate(zip(runs, plan.variants))
    ]
    for run, extrapolated in zip(runs, correct_lengths(found, plan.options.correction)):
        run.extrapolation = replace(extrapolated, scored_tokens=scored_tokens(plan.settings))


def _control(plan: Plan, jobs: list[Job], base: AblationRun, runner: Runner) -> AblationRun:
    """The control row: the base's config under its own seeds, set beside the base's seeds in order."""
    context = runner.context
    seed_runs = [seed_run(job, read_record(job, context), context, job.key in runner.reused) for job in jobs]
    losses = [s.final_val_loss for s in seed_runs]
    return AblationRun(
        name="control",
        axis="control",
        config=base.config,
        lr=base.lr,
        seeds=seed_runs,
        loss=mean_interval(losses, LEVEL),
        delta_vs_base=paired_difference(base.losses(), losses, LEVEL),
        delta_vs_previous=None,
        parameters=base.parameters,
        flops_per_token=base.flops_per_token,
        train_flops=base.train_flops,
    )


def corrected(
    runs: list[AblationRun],
    method: str,
    control: AblationRun | None = None,
    interactions: list[SwapInteraction] | None = None,
) -> list[SwapInteraction]:
    """``runs`` (and ``control``) with every tested difference's ``p_adjusted`` set: one
    family for the differences to the base (every row but the base, the control included)
    and the ``interactions`` of paired rows, so the table's claim, at most a 5% chance of
    any false mark, covers every mark the report shows; on a path, one for the steps.
    Returns the interactions, adjusted."""
    tested = [*runs[1:], *([control] if control is not None else [])]
    interactions = interactions or []
    p_values = [run.delta_vs_base.p_value for run in tested] + [i.delta.p_value for i in interactions]
    adjusted = adjust_optional(p_values, method)
    to_base, to_interactions = adjusted[: len(tested)], adjusted[len(tested) :]
    steps = [run.delta_vs_previous.p_value for run in tested if run.delta_vs_previous is not None]
    to_previous = iter(adjust_optional(steps, method))
    for run, p in zip(tested, to_base):
        run.delta_vs_base = replace(run.delta_vs_base, p_adjusted=p)
        if run.delta_vs_previous is not None:
            run.delta_vs_previous = replace(run.delta_vs_previous, p_adjusted=next(to_previous))
    return [replace(i, delta=replace(i.delta, p_adjusted=p)) for i, p in zip(interactions, to_interactions)]


def _result(plan: Plan, runs: list[AblationRun], command: str, runner: Runner, control: AblationRun) -> AblationResult:
    o, notes = plan.options, [*plan.notes, *runner.distrusted]
    if not plan.grid:
        notes.append(f"one learning rate for every run: {o.lr:g} (tune_lr / --tune-lr sweeps one per variant)")
    for run in runs:
        if run.on_edge:
            notes.append(edge_sentence(run, run.name))
    if len({run.train_flops for run in runs}) > 1:
        notes.append(
            "every run sees the same tokens, but the variants differ in compute per token "
            "(see parameters and FLOPs): a gain may be bought with compute"
        )
    return AblationResult(
        base=o.base,
        target=o.target,
        mode=plan.mode,
        differences=plan.differences,
        runs=runs,
        settings=plan.settings,
        seeds=plan.seeds,
        scale={"d_model": o.d_model, "layers": o.layers, "heads": o.heads},
        data=plan.data,
        tuning=plan.tuning,
        command=command,
        options=record(o),
        version=str(__version__),
        order=o.order,
        results_path=o.out_dir / "ablation.json",
        plot_path=None,
        delta_plot_path=None,
        report_path=None,
        notes=notes,
        trained=runner.trained,
        reused=runner.reused,
        runs_at_once=runner.at_once,
        main_process=runner.world.is_main,
        correction=o.correction,
        control=control,
        baselines=_baselines(plan, runner) if runner.world.is_main else None,
        eval_lengths=list(plan.lengths),
    )


#: Reference rows already measured in this process, by data content and eval windows: a
#: study's cells (and a resumed ablation) share their data, and counting it takes seconds.
_MEASURED: dict[tuple[str, int, int, int, int], Baselines] = {}


def _baselines(plan: Plan, runner: Runner) -> Baselines:
    """The n-gram reference rows on the very windows every run was evaluated on."""
    s, vocab = plan.settings, plan.variants[0].config.vocab_size
    key = (runner.context.content, s.seq_len, s.batch_size, s.eval_batches, vocab)
    if not runner.context.content or key not in _MEASURED:
        data = runner.context.token_data()
        found = ngram_baselines(data.train, data.val, validation_batches(data.val, s), vocab)
        if not runner.context.content:
            return found
        _MEASURED[key] = found
    return _MEASURED[key]

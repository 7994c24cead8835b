"""The plan of an ablation: its options, checked; the base and target presets resolved to
configs once, at the shared scale; the variants (each single swap, or a cumulative path);
the data every run trains on; and the jobs, one per variant, seed and swept rate.

Everything after the plan works on its configs, never on the preset names again.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from zoo.ablate.compare import SIZE_AXES, diff_configs
from zoo.ablate.lengths import at_lengths, check_factors, check_split, lengths_of
from zoo.ablate.options import (
    CONTROL_SEED_OFFSET,
    FINALISTS,
    LAUNCHERS,
    LR_GRID_FACTORS,
    ORDERS,
    TUNE_HELD_OUT,
    TUNE_SEED_OFFSET,
    Options,
)
from zoo.ablate.stats import CORRECTIONS
from zoo.ablate.swaps import Variant, cumulative_path, paired_swaps, picked_swaps, single_swaps
from zoo.bounds import check_elements, check_threads, count
from zoo.errors import ConfigError, InputError, command, printable
from zoo.nn.config import ModelConfig, resolve_config
from zoo.nn.registry import Registry, default_registry
from zoo.training import (
    STDLIB_CORPUS,
    TokenSplit,
    TrainSettings,
    bundled_corpus,
    load_corpus,
    open_data,
    read_text,
    stdlib_corpus,
)
from zoo.training.shards import input_paths

#: Bytes the plan holds per run at the least: its Job and its TrainSettings, each a
#: dataclass of 56 bytes with a 296-byte __dict__ (sys.getsizeof).
RUN_BYTES = 2 * (56 + 296)
#: The step past an edge of a sweep of one rate (which has no spacing of its own): the default grid's.
EDGE_FACTOR = 2.0


def check_options(options: Options) -> None:
    """Refuse settings no run could use, all problems in one message."""
    problems = []
    if isinstance(options.seeds, bool) or not isinstance(options.seeds, int) or options.seeds < 1:
        problems.append(f"seeds={options.seeds!r} must be an integer >= 1 (--seeds)")
    if isinstance(options.workers, bool) or not isinstance(options.workers, int) or options.workers < 1:
        problems.append(f"workers={options.workers!r} must be an integer >= 1 (--workers)")
    if options.launcher not in LAUNCHERS:
        problems.append(f"launcher={options.launcher!r} must be one of {', '.join(LAUNCHERS)} (--launcher)")
    if options.order not in ORDERS:
        problems.append(f"order={options.order!r} must be one of {', '.join(ORDERS)} (--order)")
    if options.device not in ("cpu", "cuda"):
        problems.append(f"device={options.device!r} must be 'cpu' or 'cuda' (--device)")
    elif options.device == "cuda" and not torch.cuda.is_available():
        problems.append("device='cuda' but torch sees no GPU; use --device cpu")
    if not isinstance(options.tune_fraction, (int, float)) or not 0.0 < options.tune_fraction <= 1.0:
        problems.append(f"tune_fraction={options.tune_fraction!r} must be within (0, 1] (--tune-fraction)")
    if options.correction not in CORRECTIONS:
        problems.append(f"correction={options.correction!r} must be one of {', '.join(CORRECTIONS)} (--correction)")
    if options.warmup is not None and (
        isinstance(options.warmup, bool)
        or not isinstance(options.warmup, int)
        or not 0 <= options.warmup <= options.steps
    ):
        problems.append(f"warmup={options.warmup!r} must be an integer within [0, steps={options.steps}] (--warmup)")
    if options.swaps is not None and options.on_path:
        problems.append("swaps picks single swaps; a cumulative path takes its axes from path (--path AXIS,...)")
    if (factors := check_factors(options.eval_lengths)) is not None:
        problems.append(factors)
    if problems:
        raise ConfigError(f"invalid ablation settings: {'; '.join(problems)}")
    check_threads(options.threads)
    check_elements(
        2 * options.seeds,
        RUN_BYTES,
        f"the plan of {count(options.seeds)} seeds' runs of the base and the target",
        "--seeds",
    )


@dataclass(frozen=True)
class Job:
    """One training run: a variant's config at one seed and rate."""

    key: str  # file stem inside the output folder
    label: str  # the name progress reports show
    axis: str  # the variant's axis: "base", "target" or the swapped field
    config: ModelConfig
    settings: TrainSettings
    tune: bool  # a run of the learning-rate sweep: no checkpoint, divergence allowed
    lengths: tuple[int, ...] = ()  # where it is evaluated once trained (--eval-lengths): T, 2T, ...


@dataclass
class Plan:
    """The whole study before anything trains: variants, settings, seeds and the sweep."""

    options: Options
    differences: list[tuple[str, Any, Any]]
    variants: list[Variant]
    settings: TrainSettings  # shared by every run; its seed is the first, its lr the base rate
    grid: list[float]  # the sweep's rates; empty without tune_lr
    tokens: tuple[torch.Tensor, torch.Tensor] | Path  # in-memory train and val ids, or a prepared folder
    data: dict[str, Any]  # the description: source, tokenizer, vocabulary, token counts
    notes: list[str] = field(default_factory=list)

    @property
    def mode(self) -> str:
        return "path" if self.options.on_path else "swaps"

    @property
    def seeds(self) -> list[int]:
        return list(range(self.options.seed, self.options.seed + self.options.seeds))

    @property
    def lengths(self) -> tuple[int, ...]:
        """The lengths every compared run is evaluated at (``--eval-lengths``); none without."""
        return lengths_of(self.options.seq_len, self.options.eval_lengths)

    @property
    def tuning(self) -> dict[str, Any] | None:
        """The sweep's grid, steps, budget fraction and seed; None without one."""
        if not self.grid:
            return None
        steps = max(1, round(self.options.steps * self.options.tune_fraction))
        seed = self.options.seed + TUNE_SEED_OFFSET
        return {
            "grid": self.grid,
            "steps": steps,
            "fraction": self.options.tune_fraction,
            "seed": seed,
            "finalists": FINALISTS,
            "scored_on": f"the last {TUNE_HELD_OUT:.0%} of the training tokens, held out of every sweep run's training "
            "(never the validation windows the tables report)",
        }

    def tune_jobs(self) -> list[list[Job]]:
        """Per variant, a short run at each rate of the grid."""
        if self.tuning is None:
            return [[] for _ in self.variants]
        return [[self.tune_job(index, rate) for rate in self.grid] for index in range(len(self.variants))]

    def tune_job(self, index: int, rate: float, *, full: bool = False, reseeded: bool = False) -> Job:
        """The sweep's short run of variant ``index`` at ``rate`` (a rate of the grid, or one
        past its edge: ``beyond_edge``); a ``--warmup`` keeps its share of the steps there.
        ``full``: a finalist's run, for the whole budget on the run's own schedule;
        ``reseeded``: that run under the next seed (the sweep's noise). Each trains without
        the training split's tail and is scored on it (``TUNE_HELD_OUT``)."""
        tuning = self.tuning
        if tuning is None:
            raise ConfigError("this ablation has no learning-rate sweep (--tune-lr)")
        full = full or reseeded
        steps, seed = (self.settings.steps if full else tuning["steps"]), tuning["seed"] + int(reseeded)
        warmup = self.settings.warmup_steps  # the sweep's schedule is the run's, shrunk to its steps
        warmup = None if warmup is None else round(warmup * steps / self.settings.steps)
        short = replace(self.settings, steps=steps, eval_every=steps, seed=seed, warmup_steps=warmup, lr=rate)
        v = self.variants[index]
        return Job(
            f"tune/{index:02d}-{slug(v.name)}-lr{rate:g}{'-full' if full else ''}{'-reseed' if reseeded else ''}",
            f"tune {v.name} lr={rate:g}{' full length' if full else ''}{' seed +1' if reseeded else ''}",
            v.axis,
            v.config,
            short,
            tune=True,
        )

    def seed_jobs(self, lrs: list[float]) -> list[list[Job]]:
        """Per variant, a run at each seed, at the variant's rate."""
        jobs = []
        for index, (v, lr) in enumerate(zip(self.variants, lrs)):
            prefix = v.axis if v.axis in ("base", "target") else ("path" if self.options.on_path else "swap")
            prefix = "pair" if "+" in v.axis else prefix
            stem = f"{index:02d}-{prefix}-{slug(v.name)}"
            one = self.options.seeds == 1
            jobs.append(
                [
                    Job(
                        stem + ("" if s == 0 else f"-seed{s}"),
                        v.name if one and s == 0 else f"{v.name} seed {s}",
                        v.axis,
                        v.config,
                        replace(self.settings, seed=s, lr=lr),
                        tune=False,
                        lengths=self.lengths,
                    )
                    for s in self.seeds
                ]
            )
        return jobs

    def control_jobs(self, lr: float) -> list[Job]:
        """The A/A control: the base again at the base's rate, at seeds ``seed +
        CONTROL_SEED_OFFSET + i`` (files ``control-<base>-seedK``, so the variants keep
        their numbers)."""
        base = self.variants[0]
        return [
            Job(
                f"control-{slug(self.options.base)}-seed{s}",
                f"control seed {s}",
                "control",
                base.config,
                replace(self.settings, seed=s, lr=lr),
                tune=False,
                lengths=self.lengths,
            )
            for s in self.control_seeds
        ]

    @property
    def control_seeds(self) -> list[int]:
        return [s + CONTROL_SEED_OFFSET for s in self.seeds]


def make_plan(options: Options, registry: Registry, presets: tuple[ModelConfig, ModelConfig] | None = None) -> Plan:
    """Resolve the presets once (unless ``presets`` are their configs, resolved already),
    scale them, list their differences and the variants."""
    check_options(options)
    if options.workers > 1 and registry is not default_registry():
        raise ConfigError(
            "workers > 1 trains in fresh processes, which see the installed plugins only, not a "
            "registry built in this one; use workers=1 with a custom registry"
        )
    base_config, target_config = presets or resolve_presets(options, registry)
    for name, config in ((options.base, base_config), (options.target, target_config)):
        if config.architecture != "decoder":
            raise ConfigError(
                f"{name!r} is an {config.architecture} model; an ablation trains language models "
                f"on one text, so both sides must be decoder-only presets (see `zoo list`)"
            )
    notes: list[str] = []
    o = options
    settings = TrainSettings(
        steps=o.steps,
        batch_size=o.batch,
        seq_len=o.seq_len,
        lr=o.lr,
        eval_every=o.eval_every,
        eval_batches=o.eval_batches,
        seed=o.seed,
        threads=o.threads,
        warmup_steps=o.warmup,
    )
    grid = lr_grid(o.lr, o.lr_grid) if o.tune_lr else []
    tokens, described = ablation_data(o.data, o.tokenizer, o.vocab_limit, o.max_chars, notes)
    scale = {
        "d_model": o.d_model,
        "n_layers": o.layers,
        "n_heads": o.heads,
        "vocab_size": described["vocab_size"],
        "max_seq_len": o.seq_len,
        **({} if o.dropout is None else {"dropout": o.dropout}),
    }
    small_base = at_scale(base_config, scale, registry)
    small_target = at_scale(target_config, scale, registry)
    # Named from the configs trained (after --set and the scale), never the presets' full size.
    differences = diff_configs(small_base, small_target, registry=registry)
    shared = SIZE_AXES | {"architecture"} | ({"dropout"} if options.dropout is not None else set())
    swappable = [(axis, value) for axis, _, value in differences if axis not in shared]  # --set dropout: both
    if not swappable:
        notes.append(no_swaps(options.base, options.target, differences))
    ends = Variant(o.base, "base", small_base), Variant(o.target, "target", small_target)
    if o.on_path:
        variants = cumulative_path(ends, swappable, o.path or [], notes, registry)
    else:
        singles, pairs = picked_swaps(swappable, o.swaps, registry)
        variants = single_swaps(ends, singles, notes, registry)
        variants[-1:-1] = paired_swaps(ends, pairs, notes, registry)
    if o.eval_lengths:
        variants = _for_lengths(variants, tokens, o.seq_len * max(o.eval_lengths), registry)
    return Plan(o, differences, variants, settings, grid, tokens, described, notes)


def _for_lengths(
    variants: list[Variant], tokens: tuple[torch.Tensor, torch.Tensor] | Path, longest: int, registry: Registry
) -> list[Variant]:
    """The variants built to run ``longest`` tokens where their positions can
    (``lengths.at_lengths``), after checking the validation split holds such a window."""
    check_split(open_data(tokens).val if isinstance(tokens, Path) else TokenSplit((tokens[1],)), longest)
    found = []
    for v in variants:
        config, refused = at_lengths(v.config, longest, registry)
        found.append(replace(v, config=config, refused=refused))
    return found


def resolve_presets(options: Options, registry: Registry) -> tuple[ModelConfig, ModelConfig]:
    """The configs of the base and the target presets, as named."""
    return resolve_config(options.base, registry=registry), resolve_config(options.target, registry=registry)


def ablation_data(
    data: str | os.PathLike[str] | None,
    tokenizer: str,
    vocab_limit: int | None,
    max_chars: int | None,
    notes: list[str],
) -> tuple[tuple[torch.Tensor, torch.Tensor] | Path, dict[str, Any]]:
    """What every run trains on, and its description (the report's data and tokenizer):
    a prepared folder as it is (each process maps its shards), or a text file tokenised
    here into in-memory training and validation ids."""
    if data is not None:
        input_paths([data])  # '' is not the current folder
    if data is not None and Path(data).is_dir():
        return _prepared_data(Path(data), tokenizer, max_chars, notes)
    if data is not None and str(data) == STDLIB_CORPUS and not Path(data).exists():
        text, source = stdlib_corpus()  # a second corpus with no download (a file of that name wins)
    else:
        text = read_text(Path(data)) if data is not None else bundled_corpus()
        source = str(data) if data is not None else "bundled Shakespeare"
    corpus = load_corpus(text, tokenizer=tokenizer, vocab_limit=vocab_limit, max_chars=max_chars, source=source)
    if corpus.tokenizer == "gpt2":
        kept = corpus.vocab_size - (256 if corpus.byte_fallback else 0)
        spelled = (
            f", the rarer {corpus.byte_fallback:.0%} of tokens spelled out as bytes" if corpus.byte_fallback else ""
        )
        notes.append(f"GPT-2 tokens: the {kept} most frequent in the text, renumbered{spelled}")
    elif tokenizer == "auto":
        notes.append(
            "byte tokens (vocabulary 256): the GPT-2 tokenizer is not installed; `pip install 'zoo-lm[text]'` adds it"
        )
    return (corpus.train, corpus.val), corpus.describe()


def _prepared_data(
    folder: Path, tokenizer: str, max_chars: int | None, notes: list[str]
) -> tuple[Path, dict[str, Any]]:
    prepared = open_data(folder)  # a folder without a manifest: an error that says how to prepare it
    if max_chars is not None:
        raise ConfigError(
            f"max_chars={max_chars} cuts a text file, but {printable(str(folder))} is a prepared folder; "
            f"drop --max-chars, or prepare a shorter text with `zoo data prepare`"
        )
    if tokenizer not in ("auto", prepared.tokenizer):
        raise InputError(
            f"{printable(str(folder))} was prepared with the {prepared.tokenizer!r} tokenizer, not "
            f"{tokenizer!r}; drop --tokenizer (a prepared folder brings its own), or prepare the text "
            f"again with {command('zoo', 'data', 'prepare', '--tokenizer', tokenizer)}"
        )
    notes.append(
        f"prepared data: its {prepared.tokenizer} tokenizer and vocabulary ({prepared.vocab_size:,}) for every "
        f"run; --vocab-limit applies to text files only"
    )
    return folder, prepared.describe()


def lr_grid(lr: float, grid: list[float] | None) -> list[float]:
    """The sweep's rates, sorted: ``grid``, or ``lr`` times ``LR_GRID_FACTORS``."""
    rates = [lr * f for f in LR_GRID_FACTORS] if grid is None else list(grid)
    bad = [r for r in rates if isinstance(r, bool) or not isinstance(r, (int, float)) or not 0 < r < math.inf]
    if not rates or bad:
        raise ConfigError(f"the learning-rate grid needs rates > 0, got {list(rates)!r}; e.g. --lr-grid 1e-3,3e-3,1e-2")
    return sorted({float(r) for r in rates})


def beyond_edge(rates: list[float], side: str) -> float:
    """The next rate past the ``"low"`` or ``"high"`` edge of the sorted ``rates``, at the
    spacing of the two rates nearest that edge (``EDGE_FACTOR`` for a grid of one rate),
    rounded to the 6 significant digits its run's name shows."""
    if side not in ("low", "high"):
        raise ConfigError(f"a sweep's edge is 'low' or 'high', not {side!r}")
    edge = rates[0] if side == "low" else rates[-1]
    factor = EDGE_FACTOR if len(rates) < 2 else (rates[1] / rates[0] if side == "low" else rates[-1] / rates[-2])
    return float(f"{(edge / factor if side == 'low' else edge * factor):.6g}")


def no_swaps(base: str, target: str, differences: list[tuple[str, Any, Any]]) -> str:
    """What to say when ``base`` and ``target`` differ in nothing an ablation swaps."""
    what = "only in sizes, which the ablation sets for both" if differences else "in nothing"
    return (
        f"{base} and {target} differ {what}: no swap to train, so the two rows are one design "
        f"twice (a control of the noise between runs); `zoo compare {base} PRESET` shows what a --to would change"
    )


def swapless(base: str, target: str, registry: Registry) -> str | None:
    """``no_swaps``'s message when the two presets differ in nothing an ablation swaps."""
    differences = diff_configs(
        resolve_config(base, registry=registry), resolve_config(target, registry=registry), registry=registry
    )
    if any(axis not in SIZE_AXES and axis != "architecture" for axis, _, _ in differences):
        return None
    return no_swaps(base, target, differences)


def at_scale(config: ModelConfig, scale: dict[str, Any], registry: Registry) -> ModelConfig:
    """``config`` at the shared scale; d_ff keeps the config's own d_ff / d_model ratio,
    grouped-query attention its query heads per key/value head (where the heads allow), and
    the other sizes relative to the model's follow it (``zoo.nn.sizes``)."""
    d_ff = max(1, round(config.d_ff * scale["d_model"] / config.d_model))
    return resolve_config(config, {**scale, "d_ff": d_ff, **kv_heads_at_scale(config, scale)}, registry=registry)


def kv_heads_at_scale(config: ModelConfig, scale: dict[str, Any]) -> dict[str, Any]:
    """The attention's ``n_kv_heads`` for the scale's ``n_heads``: as many query heads per
    key/value head as the config has, or the nearest number of key/value heads below that
    divides the heads (Qwen3's 16 heads over 8 at 4 heads: 2). Nothing without the option."""
    kv = config.attention.options.get("n_kv_heads")
    heads = int(scale.get("n_heads", config.n_heads))
    if not kv or heads == config.n_heads:
        return {}
    target = max(1, heads // max(1, config.n_heads // int(kv)))
    while heads % target:
        target -= 1
    return {"attention": {"n_kv_heads": target}}


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")[:60]

"""Ablations: which of the differences between two designs matter, measured by training.

``run_ablation("transformer-2017", "gpt2-small")`` lists the differences between the
two configs (``diff_configs``), then trains at one small scale shared by every run:

- the base design,
- the base with each single difference swapped to the target's choice,
- the target design,

all with the same seed, the same data in the same order, and the same token budget.
Sizes (d_model, layers, heads, d_ff, vocabulary, context) are set by the shared scale,
so they are reported as differences but never swapped. Each run is saved as a zoo
checkpoint; the curves go to a JSON file and, with matplotlib installed, to a PNG plot.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from zoo.factory import build
from zoo.checkpoint import save
from zoo.config import ModelConfig, resolve_config
from zoo.errors import ConfigError, InputError, ZooError
from zoo.registry import KINDS, Registry, default_registry
from zoo.training import Corpus, CurvePoint, TrainSettings, bundled_corpus, load_corpus, read_text
from zoo.training import fit as train

# The order of rows in a comparison: architecture, components, switches, then sizes.
AXES: tuple[str, ...] = (
    "architecture",
    "attention",
    "position",
    "activation",
    "placement",
    "norm",
    "mlp",
    "init",
    "embedding_scale",
    "head_output",
    "tie_embeddings",
    "final_norm",
    "bias",
    "norm_eps",
    "dropout",
    "vocab_size",
    "max_seq_len",
    "d_model",
    "n_layers",
    "n_encoder_layers",
    "n_heads",
    "d_ff",
)

#: Differences the shared training scale overrides, so an ablation never swaps them.
SIZE_AXES = frozenset({"vocab_size", "max_seq_len", "d_model", "n_layers", "n_encoder_layers", "n_heads", "d_ff"})

#: The default scale: the nine runs of transformer-2017 -> gpt2-small take about a
#: minute of one CPU core (GPT-2 tokens with a 1024 + 256 vocabulary, or bytes).
DEFAULT_SCALE: dict[str, Any] = dict(
    d_model=64, layers=2, heads=4, seq_len=64, steps=150, batch=16, lr=3e-3, eval_every=25
)
#: The scale of ``make demo``: the same runs, a fraction of the steps.
DEMO_SCALE: dict[str, Any] = dict(
    d_model=48, layers=2, heads=4, seq_len=48, steps=60, batch=12, lr=4e-3, eval_every=15
)

ProgressCallback = Callable[[str, int, int, float | None], None]


@dataclass
class AblationRun:
    """One trained model of an ablation.

    ``axis`` is ``"base"``, ``"target"`` or the config field swapped to the target's
    value; ``delta_vs_base`` is its final validation loss minus the base's (negative:
    better than the base).
    """

    name: str
    axis: str
    config: ModelConfig
    final_val_loss: float
    perplexity: float
    parameters: int
    tokens_per_second: float
    delta_vs_base: float
    curve: list[CurvePoint]
    checkpoint: Path

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "axis": self.axis,
            "config": self.config.model_dump(mode="json"),
            "final_val_loss": self.final_val_loss,
            "perplexity": self.perplexity,
            "parameters": self.parameters,
            "tokens_per_second": self.tokens_per_second,
            "delta_vs_base": self.delta_vs_base,
            "curve": [{"step": p.step, "train_loss": p.train_loss, "val_loss": p.val_loss} for p in self.curve],
            "checkpoint": str(self.checkpoint),
        }


@dataclass
class AblationResult:
    """Every run of an ablation, the differences behind them, and where the outputs are.

    ``plot_path`` is None when no plot could be drawn; ``notes`` then says why (and
    records anything else worth knowing, such as a swap that could not be built).
    """

    base: str
    target: str
    differences: list[tuple[str, Any, Any]]
    runs: list[AblationRun]
    settings: TrainSettings
    scale: dict[str, int]  # d_model, layers, heads shared by every run
    data: dict[str, Any]
    results_path: Path
    plot_path: Path | None
    notes: list[str] = field(default_factory=list)

    def run(self, name_or_axis: str) -> AblationRun:
        """The run called ``name_or_axis``, or the one that swapped that axis."""
        for run in self.runs:
            if name_or_axis in (run.name, run.axis):
                return run
        names = ", ".join(repr(n) for run in self.runs for n in dict.fromkeys((run.name, run.axis)))
        raise InputError(f"this ablation has no run or axis {name_or_axis!r}; it has {names}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "base": self.base,
            "target": self.target,
            "differences": [
                {"axis": axis, "base": a, "target": b, "swapped": axis not in SIZE_AXES}
                for axis, a, b in self.differences
            ],
            "scale": self.scale,
            "settings": {**self.settings.__dict__, "betas": list(self.settings.betas)},
            "data": self.data,
            "runs": [run.to_dict() for run in self.runs],
            "plot": str(self.plot_path) if self.plot_path else None,
            "notes": self.notes,
        }


# -- differences ---------------------------------------------------------------------


def diff_configs(a: ModelConfig, b: ModelConfig, *, registry: Registry | None = None) -> list[tuple[str, Any, Any]]:
    """The fields where ``a`` and ``b`` differ, as ``(axis, value_a, value_b)``, in the
    order of ``AXES``.

    Components appear by name, with any option that differs from its default in
    brackets (``"sinusoidal"``, ``"gqa(n_kv_heads=2)"``); dropout as a number when its
    three rates agree; every other field as its value.
    """
    registry = registry or default_registry()
    rows = []
    for axis in (*AXES, *(name for name in ModelConfig.model_fields if name not in AXES)):
        value_a, value_b = _shown(a, axis, registry), _shown(b, axis, registry)
        if value_a != value_b:
            rows.append((axis, value_a, value_b))
    return rows


def _shown(config: ModelConfig, axis: str, registry: Registry) -> Any:
    value = getattr(config, axis)
    if axis in KINDS:
        options = value.options
        try:
            defaults = registry.get(axis, value.name).options_model().model_dump()
        except (ZooError, ValueError):  # a component whose options have no defaults
            defaults = {}
        changed = {k: v for k, v in options.items() if defaults.get(k, object()) != v}
        return f"{value.name}({', '.join(f'{k}={v!r}' for k, v in changed.items())})" if changed else value.name
    if axis == "dropout":
        rates = value.model_dump()
        return rates["embedding"] if len(set(rates.values())) == 1 else rates
    return value


def _swap_value(config: ModelConfig, axis: str) -> Any:
    """The exact value of ``axis`` in ``config``, as an override (components with options)."""
    value = getattr(config, axis)
    return value.model_dump() if hasattr(value, "model_dump") else value


# -- the runner ----------------------------------------------------------------------


def run_ablation(
    base: str = "transformer-2017",
    target: str = "gpt2-small",
    *,
    d_model: int = DEFAULT_SCALE["d_model"],
    layers: int = DEFAULT_SCALE["layers"],
    heads: int = DEFAULT_SCALE["heads"],
    seq_len: int = DEFAULT_SCALE["seq_len"],
    steps: int = DEFAULT_SCALE["steps"],
    batch: int = DEFAULT_SCALE["batch"],
    lr: float = DEFAULT_SCALE["lr"],
    eval_every: int = DEFAULT_SCALE["eval_every"],
    data: Path | None = None,
    out_dir: Path,
    seed: int = 0,
    on_progress: ProgressCallback | None = None,
    tokenizer: str = "auto",
    vocab_limit: int | None = 1024,
    max_chars: int | None = None,
    threads: int | None = 1,
    registry: Registry | None = None,
) -> AblationResult:
    """Train base, each single swap toward target, and target; save and report all runs.

    ``base``/``target``: preset names (decoder-only). ``data``: a UTF-8 text file
    (default: the bundled Shakespeare). ``tokenizer``: ``"auto"`` (GPT-2 when the
    ``text`` extra is installed, else bytes), ``"gpt2"`` or ``"bytes"``; with GPT-2,
    ``vocab_limit`` keeps the most frequent tokens and spells the rest as bytes (see
    ``zoo.train.load_corpus``; None keeps every token); ``max_chars`` keeps only the
    start of the text. ``threads``: torch CPU threads while training (default 1: models
    this small run fastest on one thread, notably on a busy machine, and the curves
    then do not depend on the core count; None leaves torch's setting).

    ``on_progress(run_name, step, steps, loss)`` is called with ``step=0, loss=None``
    when a run starts, after every update with its training loss, and once more with
    ``step=steps`` and the final validation loss when the run is done.

    Writes ``<out_dir>/NN-<run>.safetensors`` per run, ``ablation.json`` and
    ``ablation.png``.
    """
    registry = registry or default_registry()
    base_config = resolve_config(base, registry=registry)
    target_config = resolve_config(target, registry=registry)
    for name, config in ((base, base_config), (target, target_config)):
        if config.architecture != "decoder":
            raise ConfigError(
                f"{name!r} is an {config.architecture} model; an ablation trains language models "
                f"on one text, so both sides must be decoder-only presets (see `zoo list`)"
            )
    settings = TrainSettings(
        steps=steps, batch_size=batch, seq_len=seq_len, lr=lr, eval_every=eval_every, seed=seed, threads=threads
    )
    text = read_text(data) if data is not None else bundled_corpus()
    corpus = load_corpus(
        text,
        tokenizer=tokenizer,
        vocab_limit=vocab_limit,
        max_chars=max_chars,
        source=str(data) if data else "bundled Shakespeare",
    )
    scale = dict(d_model=d_model, n_layers=layers, n_heads=heads, vocab_size=corpus.vocab_size, max_seq_len=seq_len)
    small_base = _at_scale(base_config, scale, registry)
    small_target = _at_scale(target_config, scale, registry)
    differences = diff_configs(base_config, target_config, registry=registry)

    notes: list[str] = []
    if corpus.tokenizer == "gpt2":
        kept = corpus.vocab_size - (256 if corpus.byte_fallback else 0)
        spelled = f", the rarer {corpus.byte_fallback:.0%} of tokens spelled out as bytes" if corpus.byte_fallback else ""
        notes.append(f"GPT-2 tokens: the {kept} most frequent in the text, renumbered{spelled}")
    elif tokenizer == "auto":
        notes.append("byte tokens (vocabulary 256): the GPT-2 tokenizer is not installed; `pip install 'zoo[text]'` adds it")
    plan: list[tuple[str, str, ModelConfig]] = [(base, "base", small_base)]
    for axis, _, value in differences:
        if axis in SIZE_AXES or axis == "architecture":
            continue
        try:
            swapped = resolve_config(small_base, {axis: _swap_value(small_target, axis)}, registry=registry)
        except ZooError as err:
            notes.append(f"swap {axis}={value} skipped: it cannot be applied alone ({err})")
            continue
        plan.append((f"{axis}={value}", axis, swapped))
    plan.append((target, "target", small_target))

    out_dir = Path(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InputError(f"cannot create the output folder {out_dir}: {err.strerror}; pick another out_dir") from err
    runs: list[AblationRun] = []
    for index, (name, axis, config) in enumerate(plan):
        runs.append(_train_one(index, name, axis, config, corpus, settings, out_dir, on_progress, registry))
    for run in runs:
        run.delta_vs_base = run.final_val_loss - runs[0].final_val_loss

    plot_path = plot_curves(runs, out_dir / "ablation.png", title=f"{base} -> {target}", notes=notes)
    result = AblationResult(
        base=base,
        target=target,
        differences=differences,
        runs=runs,
        settings=settings,
        scale={"d_model": d_model, "layers": layers, "heads": heads},
        data=corpus.describe(),
        results_path=out_dir / "ablation.json",
        plot_path=plot_path,
        notes=notes,
    )
    _write_json(result)
    return result


def _at_scale(config: ModelConfig, scale: dict[str, Any], registry: Registry) -> ModelConfig:
    """``config`` at the shared scale; d_ff keeps the config's own d_ff / d_model ratio."""
    d_ff = max(1, round(config.d_ff * scale["d_model"] / config.d_model))
    return resolve_config(config, {**scale, "d_ff": d_ff}, registry=registry)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")[:60]


def _train_one(
    index: int,
    name: str,
    axis: str,
    config: ModelConfig,
    corpus: Corpus,
    settings: TrainSettings,
    out_dir: Path,
    on_progress: ProgressCallback | None,
    registry: Registry,
) -> AblationRun:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(settings.seed)
        model = build(config, registry=registry)
    report = (lambda step, loss: on_progress(name, step, settings.steps, loss)) if on_progress else None
    if report is not None:
        report(0, None)
    result = train(model, corpus.train, corpus.val, settings, on_step=report)
    if report is not None:
        report(settings.steps, result.final_val_loss)
    prefix = axis if axis in ("base", "target") else "swap"
    path = out_dir / f"{index:02d}-{prefix}-{_slug(name)}.safetensors"
    loss = result.final_val_loss
    about = {"run": name, "axis": axis, "steps": settings.steps, "final_val_loss": loss, "data": corpus.describe()}
    save(model, path, metadata={"ablation": about}, registry=registry)
    return AblationRun(
        name=name,
        axis=axis,
        config=config,
        final_val_loss=loss,
        perplexity=math.exp(loss) if loss < 700 else math.inf,
        parameters=model.num_parameters(),
        tokens_per_second=result.tokens_per_second,
        delta_vs_base=0.0,
        curve=result.curve,
        checkpoint=path,
    )


def _write_json(result: AblationResult) -> None:
    text = json.dumps(result.to_dict(), indent=2)
    tmp = result.results_path.with_suffix(".json.tmp")
    try:
        tmp.write_text(text + "\n", encoding="utf-8")
        tmp.replace(result.results_path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise InputError(f"cannot write {result.results_path}: {err.strerror}; pick another out_dir") from err


def plot_curves(runs: list[AblationRun], path: Path, *, title: str, notes: list[str]) -> Path | None:
    """Validation loss against step for every run, as a PNG; None (and a note) without
    matplotlib. Draws on a standalone ``Figure``, leaving pyplot's global state alone."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        notes.append("no plot: matplotlib is not installed; `pip install 'zoo[plot]'` adds it")
        return None
    fig = Figure(figsize=(8, 5), dpi=120)
    ax = fig.add_subplot()
    for run in runs:
        steps = [p.step for p in run.curve]
        losses = [p.val_loss for p in run.curve]
        style = {"linewidth": 2.5} if run.axis in ("base", "target") else {"linewidth": 1.2, "alpha": 0.85}
        ax.plot(steps, losses, label=f"{run.name} ({run.final_val_loss:.3f})", **style)
    ax.set_xlabel("step")
    ax.set_ylabel("validation loss (nats/token)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    return path

"""Diagnostics over hook points: what a design does to its residual stream, its gradients
and its attention, measured on a batch of real text.

``probe(model, tokens)`` measures one model; ``probe_designs`` builds presets (with
overrides and variants) or loads models (a checkpoint, a run folder, a Hugging Face
folder or a hub id, through ``zoo.pipelines.load_model``, as ``zoo generate`` and
``zoo eval --tasks`` load theirs) and probes each on the same batch of the bundled
corpus. Per layer:

- the residual stream's RMS, sqrt(mean(x^2)), entering block 0 (the embeddings) and
  leaving each block (``hook_resid_pre`` / ``hook_resid_post``);
- the gradient norm of each weight group (attention, MLP, the placement's norms; the
  embeddings, final norm and head apart) after one backward pass of the next-token loss;
- the attention entropy of each head, -sum p log p over the keys in nats, averaged over
  queries and the batch (``attn.hook_pattern``); none for a block whose token mixer has
  no scores (a short convolution), which a note says;
- for a checkpoint folder with two versions or more, the update-to-weight ratio
  ||W_new - W_old|| / ||W_old|| of each group between the newest two (or ``version`` and
  the one before it).

Dropout is off (the model is in eval mode) so that a measurement is repeatable.
"""

from __future__ import annotations

import io
import json
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from importlib import resources
from itertools import product
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from zoo.bounds import check_bytes, check_elements
from zoo.checkpoint import load, versions, write_atomically
from zoo.checkpoint.store import check_output_file
from zoo.errors import ConfigError, InputError, ZooError, checked_types, printable, quoted
from zoo.figures import block_axis, figure_format, fit_text, log_scale, plain_text
from zoo.measures import METRICS as METRICS  # declared there, torch-free (zoo probe -h lists them)
from zoo.nn.config import ModelConfig, get_config
from zoo.nn.factory import build
from zoo.nn.hooks import cache_bytes, hook_points, run_with_cache, stacks
from zoo.nn.inputs import INDEX_DTYPES, check_inputs, check_tensor, not_finite_loss, position_limit
from zoo.nn.sets import parse_sets
from zoo.pipelines import is_hf_source, load_model

__all__ = ["Design", "ProbeResult", "corpus_batch", "plot", "probe", "probe_designs", "write_json"]

#: The most designs one probe builds and compares (targets x variants x the --vary grid).
MAX_DESIGNS = 1024
#: The layer groups gradient norms and update ratios are reported for.
GROUPS = ("attention", "mlp", "norm")


@dataclass(frozen=True)
class Design:
    """One thing to probe: a config built fresh, or a model to load (``load_model``'s
    sources: a checkpoint file or folder, a Hugging Face folder, a hub id)."""

    label: str
    config: ModelConfig | None = None  # a preset with overrides
    source: str | None = None  # or what load_model reads
    version: int | None = None  # which version of a checkpoint folder (default: the newest)
    seed: int = 0
    revision: str | None = None  # a hub id's branch, tag or commit (default: main)


@dataclass
class ProbeResult:
    """What ``probe`` measured on one model."""

    label: str
    tokens: str  # what it was measured on: "4 x 128 tokens of the bundled corpus (bytes)"
    layers: int
    loss: float  # next-token cross-entropy, nats
    residual_rms: list[float]  # L + 1: the embeddings, then after each block
    grad_norm: dict[str, list[float]]  # group -> per layer
    grad_norm_other: dict[str, float]  # embedding, final_norm, head
    attention_entropy: list[list[float]]  # per layer, per head (nats)
    update_ratio: dict[str, list[float]] | None = None  # group -> per layer; checkpoints only
    update_between: tuple[int, int] | None = None  # the versions compared
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def group_of(name: str, blocks: str) -> tuple[int, str] | None:
    """(layer, group) of a parameter under ``blocks`` ("blocks."), or None outside the blocks."""
    match = re.match(rf"{re.escape(blocks)}(\d+)\.([^.]+)", name)
    if match is None:
        return None
    part = match.group(2)
    group = "attention" if part.endswith("attn") else "mlp" if part == "mlp" else "norm"
    return int(match.group(1)), group


def _other_group(name: str) -> str:
    if name.startswith(("tok_emb", "position")):
        return "embedding"
    return "head" if name.startswith("head") else "final_norm"


def grouped_norms(
    model: nn.Module, tensors: Mapping[str, Tensor], layers: int
) -> tuple[dict[str, list[float]], dict[str, float]]:
    """The L2 norm of ``tensors`` (by parameter name) per layer group and per other group."""
    blocks = stacks(model)[-1].blocks
    squares = {g: [0.0] * layers for g in GROUPS}
    other: dict[str, float] = {}
    for name, tensor in tensors.items():
        value = float(tensor.detach().double().pow(2).sum())
        where = group_of(name, blocks)
        if where is None:
            key = _other_group(name)
            other[key] = other.get(key, 0.0) + value
        else:
            squares[where[1]][where[0]] += value
    return {g: [math.sqrt(v) for v in vs] for g, vs in squares.items()}, {k: math.sqrt(v) for k, v in other.items()}


def next_token_loss(model: nn.Module, output: Tensor, tokens: Tensor, targets: Tensor | None = None) -> Tensor:
    """Mean cross-entropy of ``output`` (B, S, V) at predicting ``tokens`` shifted by one,
    or ``targets`` (B, S) when given (every position then has its target)."""
    config: Any = getattr(model, "config", None)
    logits = output[:, :-1].flatten(0, 1) if targets is None else output.flatten(0, 1)
    target = tokens[:, 1:].flatten() if targets is None else targets.flatten()
    if config is not None and config.head_output == "log_softmax":
        return F.nll_loss(logits, target)
    return F.cross_entropy(logits, target)


def entropy(pattern: Tensor) -> Tensor:
    """Per head entropy (nats) of attention weights (B, H, S, S_k), averaged over batch and queries."""
    p = pattern.double()
    return -(p * torch.where(p > 0, p.log(), 0.0)).sum(-1).mean(dim=(0, 2))


@checked_types()
def probe(
    model: nn.Module,
    tokens: Tensor,
    *,
    targets: Tensor | None = None,
    label: str = "model",
    source: str = "the given tokens",
) -> ProbeResult:
    """Measure ``model`` (a decoder-only zoo model) on ``tokens`` (B, S); see the module's
    doc. The gradients are of the loss at predicting ``tokens`` shifted by one, or
    ``targets`` (B, S) when given; a frozen model (no parameter requires grad) has none
    and is refused, a partly frozen one's frozen tensors count 0 and are named in ``notes``."""
    m: Any = model
    if not hasattr(m, "blocks"):
        raise ConfigError(
            f"{label}: zoo probe measures decoder-only models; {type(model).__name__} is an "
            f"encoder-decoder (its hook points are there for your own studies: model.run_with_cache)"
        )
    _check_tokens(m, tokens, targets, label)
    if torch.is_inference_mode_enabled():
        raise InputError(
            f"{label}: the probe measures gradients, which torch.inference_mode() turns off; call it outside "
            f"that block (torch.no_grad() is fine: the probe turns gradients on for itself)"
        )
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if not named:
        raise InputError(
            f"{label}: every parameter has requires_grad=False (a frozen model), so there are no gradient norms to "
            f"measure; unfreeze it for the probe: model.requires_grad_(True) (the probe leaves .grad as it was)"
        )
    layers = len(m.blocks)
    was_training = model.training
    model.eval()  # after the refusals: a refused model keeps its mode
    wanted = ["blocks.0.hook_resid_pre"] + [f"blocks.{i}.hook_resid_post" for i in range(layers)]
    patterns = [f"blocks.{i}.attn.hook_pattern" for i in range(layers)]
    points = set(hook_points(model))
    mixers = [i for i, name in enumerate(patterns) if name not in points]  # token mixers without scores
    wanted += [name for i, name in enumerate(patterns) if i not in mixers]
    try:
        with torch.enable_grad():
            output, cache = run_with_cache(model, tokens, names=wanted)
            loss = next_token_loss(model, output, tokens, targets)
            # autograd.grad, not backward: the model's own .grad stay as they were
            found = torch.autograd.grad(loss, [p for _, p in named], allow_unused=True)
    finally:
        model.train(was_training)
    value = loss.item()
    if not math.isfinite(value):
        raise InputError(f"{label}: {not_finite_loss(model, value)}")
    grads = {n: g for (n, _), g in zip(named, found, strict=True) if g is not None}
    grad_norm, grad_other = grouped_norms(model, grads, layers)
    rms = [float(cache[n].double().pow(2).mean().sqrt()) for n in wanted[: layers + 1]]
    heads = [[] if i in mixers else entropy(cache[patterns[i]]).tolist() for i in range(layers)]
    measured = [
        *grad_other.values(),
        *(x for vs in grad_norm.values() for x in vs),
        *rms,
        *(x for h in heads for x in h),
    ]
    if not all(math.isfinite(v) for v in measured):  # they would reach -o as NaN, which no JSON reader takes
        raise InputError(
            f"{label}: the loss is {value:.3g}, but its gradients or activations overflow "
            f"{next(model.parameters()).dtype} (not finite), so there is nothing to compare; probe a design whose "
            f"scales are in range"
        )
    result = ProbeResult(label, source, layers, value, rms, grad_norm, grad_other, heads)
    if mixers:  # a token mixer without attention scores (a short convolution): nothing to measure
        result.notes.append(
            f"block(s) {', '.join(map(str, mixers))} mix tokens without attention scores (attends=False): "
            f"no attention entropy there"
        )
    frozen = [n for n, p in model.named_parameters() if not p.requires_grad]
    if frozen:  # their groups' norms leave them out: said, so a 0 is not read as a vanished gradient
        shown = ", ".join(printable(n, 60) for n in frozen[:4]) + (" ..." if len(frozen) > 4 else "")
        result.notes.append(
            f"{len(frozen)} frozen weight tensor(s) (requires_grad=False) count 0 in the gradient norms: {shown}"
        )
    return result


def _check_tokens(model: Any, tokens: Tensor, targets: Tensor | None, label: str) -> None:
    """Refuse tokens the model cannot read, and targets that are not one id per position."""
    check_inputs(model, tokens, name="tokens")
    if targets is None:
        if tokens.shape[1] < 2:
            raise InputError(
                f"{label}: the probe's loss predicts each next token, so it needs at least 2 tokens per row "
                f"(got {tokens.shape[1]}); give more tokens, or targets= of their shape"
            )
        return
    check_tensor(targets, "targets", f"of token ids of the shape of tokens {tuple(tokens.shape)}")
    if targets.shape != tokens.shape or targets.dtype not in INDEX_DTYPES:
        raise InputError(
            f"{label}: targets must be integer token ids of the shape of tokens {tuple(tokens.shape)} (one per "
            f"position), got {targets.dtype} of shape {tuple(targets.shape)}"
        )
    check_inputs(model, targets, name="targets")


# -- text, designs, many models ------------------------------------------------------------


@checked_types()
def corpus_batch(vocab_size: int, batch_size: int, seq_len: int, tokenizer: str = "auto") -> tuple[Tensor, str]:
    """``batch_size`` windows of ``seq_len`` tokens spread evenly over the bundled corpus,
    and a description of them. ``tokenizer``: ``bytes`` (256 ids), ``gpt2`` (the ``text``
    extra; a vocabulary of 50257) or ``auto`` (gpt2 when the vocabulary holds it and it is
    installed, else bytes)."""
    if tokenizer not in ("auto", "bytes", "gpt2"):
        raise ConfigError(f"unknown tokenizer {tokenizer!r}; use auto, bytes or gpt2 (--tokenizer)")
    if batch_size < 1 or seq_len < 2:
        raise ConfigError(f"a probe needs --batch-size >= 1 and --seq-len >= 2, got {batch_size} and {seq_len}")
    text = resources.files("zoo.data").joinpath("shakespeare.txt").read_text(encoding="utf-8")
    name = tokenizer
    ids: list[int] | None = None
    if tokenizer in ("auto", "gpt2") and vocab_size >= 50257:
        try:
            from zoo.text.loading import tokenizer as text_tokenizer

            ids, name = text_tokenizer("gpt2").encode(text), "gpt2"
        except (ImportError, ZooError):
            if tokenizer == "gpt2":
                raise ConfigError(
                    "the GPT-2 tokenizer needs the text extra: pip install 'zoo-lm[text]'; or use --tokenizer bytes"
                ) from None
    elif tokenizer == "gpt2":
        raise ConfigError(
            f"the GPT-2 tokenizer needs vocab_size >= 50257, the model has {vocab_size}; use --tokenizer bytes"
        )
    if ids is None:
        if vocab_size < 256:
            raise ConfigError(
                f"byte tokens need vocab_size >= 256, the model has {vocab_size}, so the bundled corpus cannot be "
                f"its text; for a preset, --set vocab_size=256 (a saved model's vocabulary is its own)"
            )
        ids, name = list(text.encode("utf-8")), "bytes"
    flat = torch.tensor(ids, dtype=torch.long)
    if flat.numel() < seq_len:
        raise ConfigError(f"--seq-len {seq_len} is longer than the corpus ({flat.numel()} tokens)")
    starts = torch.linspace(0, flat.numel() - seq_len, batch_size).long()
    batch = torch.stack([flat[s : s + seq_len] for s in starts.tolist()])
    return batch, f"{batch_size} x {seq_len} tokens of the bundled corpus ({name})"


def describe(sets: Mapping[str, str]) -> str:
    return " ".join(f"{k}={v}" for k, v in sets.items())


@checked_types()
def designs(
    targets: Sequence[str],
    *,
    sets: Sequence[str] = (),
    variants: Sequence[str] = (),
    vary: Sequence[str] = (),
    version: int | None = None,
    seed: int = 0,
    revision: str | None = None,
) -> list[Design]:
    """The designs to probe: each target (a preset name, else whatever ``load_model``
    reads: a checkpoint file or run folder, a Hugging Face folder, a hub id) with the
    ``sets`` (``FIELD=VALUE``) applied, times each variant (space-separated ``FIELD=VALUE``
    items; none: the target as it is), times every combination of the ``vary`` items
    (``FIELD=V1,V2,...``). ``version`` and ``revision`` pick what a loaded target reads."""
    for name, values in (("targets", targets), ("sets", sets), ("variants", variants), ("vary", vary)):
        if isinstance(values, str) or not all(isinstance(v, str) for v in values):
            raise InputError(f"{name} must be a sequence of strings, got {quoted(values, 60)}; give {name}=[...]")
    if not targets:
        raise ConfigError("name at least one preset, checkpoint, Hugging Face folder or hub id to probe")
    if not 0 <= seed < 1 << 64:
        raise ConfigError(f"seed={seed} must lie in 0 .. 2**64-1 (--seed)")
    grid, variant_sets = _grid(vary), [_variant_items(v) for v in variants] or [[]]
    count = len(targets) * len(variant_sets) * math.prod(len(choices) for choices in grid)
    if count > MAX_DESIGNS:
        raise ConfigError(
            f"{count:,} designs ({len(targets)} target(s) x {len(variant_sets)} variant(s) x every combination of "
            f"--vary) are more than the {MAX_DESIGNS:,} one probe compares; give fewer --vary values or --variant flags"
        )
    found: list[Design] = []
    presets = _preset_names()
    for target in targets:
        # A preset's name wins (as zoo info's); else what load_model reads; else an unknown preset.
        loaded = target not in presets and (os.path.lexists(target) or is_hf_source(target))
        for variant in variant_sets:
            for combo in product(*grid) if grid else [()]:
                items = [*sets, *variant, *(f"{k}={v}" for k, v in combo)]
                extra = describe(dict(i.split("=", 1) for i in [*variant, *(f"{k}={v}" for k, v in combo)]))
                shown = Path(target).name if loaded and os.path.lexists(target) else target
                label = f"{shown}{' ' + extra if extra else ''}"
                if loaded:
                    if items:
                        raise ConfigError(
                            f"{target} is a saved model (a checkpoint or a Hugging Face model): --set, --variant "
                            f"and --vary change presets, not saved weights; probe a preset with them, or drop them"
                        )
                    found.append(Design(label, source=target, version=version, seed=seed, revision=revision))
                else:
                    config = get_config(target, **parse_sets(items))
                    found.append(Design(label, config=config, seed=seed))
    given = [flag for flag, value in (("--version", version), ("--revision", revision)) if value is not None]
    if given and all(d.source is None for d in found):
        raise ConfigError(
            f"{' and '.join(given)} {'pick' if len(given) > 1 else 'picks'} what a saved model reads (a checkpoint "
            f"folder's version, a hub id's "
            f"revision), but every target is a preset, built fresh; drop {' and '.join(given)}"
        )
    return found


def _grid(vary: Sequence[str]) -> list[list[tuple[str, str]]]:
    """The ``(FIELD, VALUE)`` choices of each ``--vary FIELD=V1,V2,...``."""
    grid = []
    for item in vary:
        key, sep, values = item.partition("=")
        choices = [v.strip() for v in values.split(",")]
        if not sep or not key.strip() or not values or not all(choices):
            raise ConfigError(
                f"--vary {quoted(item, 80)}: expected FIELD=V1,V2,... with no empty value, e.g. --vary n_layers=12,24,48"
            )
        grid.append([(key.strip(), v) for v in choices])
    return grid


def _variant_items(variant: str) -> list[str]:
    """The space-separated ``FIELD=VALUE`` items of one ``--variant``."""
    items = variant.split()
    for item in items:
        key, sep, _ = item.partition("=")
        if not sep or not key:
            raise ConfigError(
                f"--variant {quoted(variant, 80)}: {quoted(item, 40)} is not FIELD=VALUE; give space-separated "
                f"FIELD=VALUE items, e.g. --variant 'n_layers=4 d_model=64'"
            )
    return items


def _preset_names() -> list[str]:
    from zoo.nn.registry import default_registry

    return default_registry().preset_names("*")


def _update_ratio(
    design: Design, model: nn.Module, layers: int
) -> tuple[dict[str, list[float]], tuple[int, int]] | str:
    """Update-to-weight ratios between ``design``'s version and the one before, for a
    checkpoint folder, or the note saying why there are none (a Hugging Face model or a
    single version; two versions whose weights differ in names or shapes)."""
    assert design.source is not None
    single = "no update ratio: {} (it needs a checkpoint folder with two versions or more)"
    if is_hf_source(design.source) or not Path(design.source).is_dir():
        return single.format("a Hugging Face model" if is_hf_source(design.source) else "a single version")
    numbers = [v.version for v in versions(design.source)]
    newer = design.version if design.version is not None else numbers[-1]
    older = [n for n in numbers if n < newer]
    if not older:
        return single.format("a single version")
    previous = load(design.source, version=older[-1], verify=False)
    old = dict(previous.named_parameters())
    new = dict(model.named_parameters())
    if {n: p.shape for n, p in old.items()} != {n: p.shape for n, p in new.items()}:
        return (
            f"no update ratio: versions {older[-1]} and {newer} are different models (their weights differ in names "
            f"or shapes), so no training step leads from one to the other"
        )
    updates = {n: new[n].detach() - old[n].detach() for n in new}
    up_norm, _ = grouped_norms(model, updates, layers)
    weight_norm, _ = grouped_norms(model, old, layers)
    ratio = {g: [u / w if w else 0.0 for u, w in zip(up_norm[g], weight_norm[g], strict=True)] for g in GROUPS}
    return ratio, (older[-1], newer)


@checked_types()
def probe_designs(
    found: Iterable[Design], *, batch_size: int = 4, seq_len: int = 128, tokenizer: str = "auto"
) -> list[ProbeResult]:
    """Probe every design on the same batch of the bundled corpus (per vocabulary size)."""
    results = []
    batches: dict[int, tuple[Tensor, str]] = {}
    given: object = found  # a str is an Iterable too
    found = [] if isinstance(given, (str, bytes)) else list(found)
    if isinstance(given, (str, bytes)) or not all(isinstance(d, Design) for d in found):
        shown = given if isinstance(given, (str, bytes)) else found
        raise InputError(f"found must be Designs (as zoo.probe.designs makes them), got {quoted(shown, 60)}")
    for design in found:
        if design.source is not None:
            model: Any = load_model(design.source, version=design.version, revision=design.revision)
        else:
            assert design.config is not None
            torch.manual_seed(design.seed)
            model = build(design.config)
        config, table = model.config, position_limit(model)
        if table is not None and seq_len > table:
            raise ConfigError(
                f"{design.label}: --seq-len {seq_len} exceeds max_seq_len={config.max_seq_len}, the rows of its "
                f"{config.position.name} position table; give --seq-len {table} or less"
            )
        _check_probe_size(model, batch_size, seq_len, design.label)
        if config.vocab_size not in batches:
            batches[config.vocab_size] = corpus_batch(config.vocab_size, batch_size, seq_len, tokenizer)
        tokens, source = batches[config.vocab_size]
        result = probe(model, tokens, label=design.label, source=source)
        if seq_len > config.max_seq_len:  # no table (refused above otherwise): computed, but never seen
            result.notes.append(
                f"--seq-len {seq_len} runs past max_seq_len={config.max_seq_len}: {config.position.name} positions "
                f"have no table, so they are computed, but the model was built for {config.max_seq_len}"
            )
        if design.source is not None:
            ratio = _update_ratio(design, model, result.layers)
            if isinstance(ratio, str):
                result.notes.append(ratio)
            else:
                result.update_ratio, result.update_between = ratio
        results.append(result)
    return results


def _check_probe_size(model: nn.Module, batch_size: int, seq_len: int, label: str) -> None:
    """Refuse a batch the probe cannot hold before it is made: its int64 rows (made twice:
    rows, then stacked) in RAM, and the points the probe caches (``cache_bytes``)."""
    layers = len(getattr(model, "blocks", ()))
    wanted = ["blocks.0.hook_resid_pre", "hook_logits"] + [
        f"blocks.{i}.{point}" for i in range(layers) for point in ("hook_resid_post", "attn.hook_pattern")
    ]
    flags, fix = "--batch-size x --seq-len", "lower --batch-size or --seq-len"
    what = f"{label}: {batch_size:,} x {seq_len:,} tokens"
    check_elements(2 * batch_size * seq_len, 8, f"{what} of the bundled corpus", flags, key="", fix=fix)
    device = next(model.parameters()).device
    nbytes = cache_bytes(model, wanted, batch_size, seq_len)
    check_bytes(nbytes, f"{what}: the activations the probe keeps", flags, key="", device=device, fix=fix)


def write_json(results: Sequence[ProbeResult], path: str | os.PathLike[str], *, overwrite: bool = False) -> Path:
    """The results as one JSON file, written atomically; an existing file is replaced only
    with ``overwrite`` (``check_output_file``: anything but a regular file never is)."""
    target = check_output_file(path, InputError, overwrite=overwrite, what="the probe's JSON file")
    text = json.dumps({"probes": [r.to_dict() for r in results]}, indent=1)
    return write_atomically(target, lambda p: p.write_text(text + "\n", encoding="utf-8"), InputError)


# -- plots -------------------------------------------------------------------------------------


@plain_text()
def plot(
    results: Sequence[ProbeResult],
    path: str | os.PathLike[str],
    *,
    metrics: Sequence[str] = METRICS,
    overwrite: bool = False,
) -> Path:
    """The designs side by side, one panel per metric (those measured), written atomically in
    the format ``path``'s suffix names (``figure_format``); titles say what was measured and
    on which tokens. Needs matplotlib. An existing file is replaced only with ``overwrite``
    (as ``write_json``)."""
    check_output_file(path, InputError, overwrite=overwrite, what="the probe's plot")
    kind = figure_format(Path(path), "--plot")
    unknown = sorted(set(metrics) - set(METRICS))
    if unknown:
        raise ConfigError(f"unknown plot metric(s) {', '.join(unknown)}; choose from {', '.join(METRICS)}")
    panels = [m for m in metrics if m != "update" or any(r.update_ratio for r in results)]
    if not panels:  # only "update", and no design has two versions to compare
        raise ConfigError(
            "nothing to plot: no design has an update ratio (that needs a checkpoint folder with two versions or "
            "more); add residual, grad or entropy to --metrics"
        )
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ConfigError("plots need matplotlib: pip install 'zoo-lm[plot]'") from None
    entries = len(results) * (2 if any(m in ("grad", "update") for m in panels) else 1)
    fig = Figure(figsize=(max(7.0, 5.6 * len(panels)), 4.0 + 0.17 * entries), dpi=110)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    colours = [f"C{i % 10}" for i in range(len(results))]
    for ax, metric in zip(axes, panels, strict=True):
        for result, colour in zip(results, colours, strict=True):
            _draw(ax, metric, result, colour, width=1.0 + 2.0 * (len(results) - results.index(result)) / len(results))
        block_axis(ax, residual=metric == "residual")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), frameon=False)
    sources = sorted({r.tokens for r in results})
    fig.suptitle(f"zoo probe, measured on {'; '.join(sources)}", fontsize=9)
    fit_text(fig)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format=kind)
    return write_atomically(Path(path), lambda p: p.write_bytes(buffer.getvalue()), InputError)


def _draw(ax: Any, metric: str, result: ProbeResult, colour: str, *, width: float) -> None:
    """One design's lines on one panel; earlier designs are drawn wider, so lines that
    coincide (the same weights at another depth) stay visible."""
    if metric == "residual":
        ax.plot(range(result.layers + 1), result.residual_rms, color=colour, linewidth=width, label=result.label)
        log_scale(ax, "y")
        ax.set_title("residual stream RMS (entering block 0, then after each block)", fontsize=9)
    elif metric == "grad":
        layers = range(result.layers)
        ax.plot(
            layers, result.grad_norm["attention"], color=colour, linewidth=width, label=f"{result.label}: attention"
        )
        ax.plot(
            layers, result.grad_norm["mlp"], color=colour, linewidth=width, linestyle="--", label=f"{result.label}: MLP"
        )
        log_scale(ax, "y")
        ax.set_title("gradient norm per layer after one backward (next-token loss)", fontsize=9)
    elif metric == "entropy":
        measured = [(i, h) for i, h in enumerate(result.attention_entropy) if h]  # a mixer's blocks have none
        blocks = [i for i, _ in measured]
        mean = [sum(h) / len(h) for _, h in measured]
        low, high = [min(h) for _, h in measured], [max(h) for _, h in measured]
        ax.plot(blocks, mean, color=colour, linewidth=width, label=result.label)
        ax.fill_between(blocks, low, high, color=colour, alpha=0.15, linewidth=0)
        ax.set_title("attention entropy (nats): head mean, band min..max", fontsize=9)
    elif metric == "update" and result.update_ratio is not None:
        layers = range(result.layers)
        between = result.update_between
        label = f"{result.label} v{between[0]}->v{between[1]}" if between else result.label
        ax.plot(layers, result.update_ratio["attention"], color=colour, linewidth=width, label=f"{label}: attention")
        ax.plot(
            layers, result.update_ratio["mlp"], color=colour, linewidth=width, linestyle="--", label=f"{label}: MLP"
        )
        log_scale(ax, "y")
        ax.set_title("update-to-weight ratio ||dW|| / ||W|| between versions", fontsize=9)

"""Train a language model on a text: data, schedule, loop and evaluation.

A small, complete training loop in the nanoGPT manner:

- data: a token stream split into a training part and a held-out tail; training
  batches are random windows drawn from a generator of their own (so every model
  trained with the same seed sees the same windows in the same order), validation
  uses fixed, evenly spaced windows;
- AdamW, with weight decay on matrices (linear and embedding weights) and none on
  biases and norm gains;
- linear warmup, then cosine decay to ``min_lr_ratio * lr``;
- gradients clipped to a global norm;
- validation loss every ``eval_every`` steps (and before the first step);
- deterministic on CPU: torch's deterministic algorithms are on while training, the
  random state (dropout) is forked from, and restored to, the caller's, and the
  thread count can be pinned (``threads``), since the order of a multithreaded
  reduction may depend on it.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from zoo.errors import ConfigError, InputError, ZooError

BUNDLED_CORPUS = "shakespeare.txt"
BYTE_PIECES: tuple[bytes, ...] = tuple(bytes([b]) for b in range(256))  # byte token i is bytes([i])


@dataclass(frozen=True)
class TrainSettings:
    """How to train: steps, batch shape, optimiser, schedule and evaluation."""

    steps: int = 200
    batch_size: int = 16
    seq_len: int = 64
    lr: float = 3e-3
    min_lr_ratio: float = 0.1  # cosine decays to lr * min_lr_ratio
    warmup_steps: int | None = None  # None: a tenth of the steps
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    grad_clip: float = 1.0  # max global gradient norm; 0 turns clipping off
    eval_every: int = 50
    eval_batches: int = 4  # validation windows: eval_batches * batch_size
    seed: int = 0
    threads: int | None = None  # torch CPU threads while training; None: leave as set

    def __post_init__(self) -> None:
        optional = ("warmup_steps", "threads")
        wrong = [
            f"{name}={value!r} must be an integer"
            for name in ("steps", "batch_size", "seq_len", "eval_every", "eval_batches", "seed", *optional)
            if not _is_int(value := getattr(self, name)) and not (name in optional and value is None)
        ] + [
            f"{name}={value!r} must be a finite number"
            for name in ("lr", "min_lr_ratio", "weight_decay", "grad_clip")
            if not isinstance(value := getattr(self, name), (int, float)) or isinstance(value, bool) or not math.isfinite(value)
        ]
        if wrong:
            raise ConfigError(f"invalid training settings: {'; '.join(wrong)}")
        problems = [
            f"{name}={getattr(self, name)} must be > 0"
            for name in ("steps", "batch_size", "seq_len", "lr", "eval_every", "eval_batches")
            if getattr(self, name) <= 0
        ]
        if self.threads is not None and self.threads <= 0:
            problems.append(f"threads={self.threads} must be > 0 (or None)")
        if not 0.0 <= self.min_lr_ratio <= 1.0:
            problems.append(f"min_lr_ratio={self.min_lr_ratio} must be within [0, 1]")
        if self.warmup_steps is not None and not 0 <= self.warmup_steps <= self.steps:
            problems.append(f"warmup_steps={self.warmup_steps} must be within [0, steps={self.steps}]")
        if self.weight_decay < 0 or self.grad_clip < 0:
            problems.append("weight_decay and grad_clip must be >= 0")
        if problems:
            raise ConfigError(f"invalid training settings: {'; '.join(problems)}")

    @property
    def warmup(self) -> int:
        return self.warmup_steps if self.warmup_steps is not None else max(1, self.steps // 10)

    @property
    def tokens_per_step(self) -> int:
        return self.batch_size * self.seq_len


@dataclass(frozen=True)
class CurvePoint:
    """Losses after ``step`` updates: the mean training loss since the previous point
    (None before the first step) and the validation loss."""

    step: int
    train_loss: float | None
    val_loss: float


@dataclass
class TrainResult:
    """The curve of one training run and its throughput."""

    curve: list[CurvePoint]
    tokens_per_second: float  # training steps only, evaluation excluded
    train_seconds: float
    tokens_seen: int

    @property
    def final_val_loss(self) -> float:
        return self.curve[-1].val_loss


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# -- data ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Corpus:
    """A tokenised text split into training tokens and a held-out validation tail.

    ``pieces[i]`` is the bytes of model token ``i``, so ``decode`` needs nothing else:
    bytes for the byte tokenizer, GPT-2 tokens (and bytes for the rare ones) for GPT-2.
    """

    train: Tensor  # (N_train,) int64
    val: Tensor  # (N_val,) int64
    tokenizer: str  # "bytes" or "gpt2"
    source: str
    pieces: list[bytes] = field(repr=False)
    byte_fallback: float = 0.0  # share of GPT-2 tokens spelled out as bytes

    @property
    def vocab_size(self) -> int:
        return len(self.pieces)

    def decode(self, ids: Iterable[int]) -> str:
        return b"".join(self.pieces[i] for i in ids).decode("utf-8", errors="replace")

    def describe(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "tokenizer": self.tokenizer,
            "vocab_size": self.vocab_size,
            "byte_fallback": self.byte_fallback,
            "train_tokens": int(self.train.numel()),
            "val_tokens": int(self.val.numel()),
        }


def bundled_corpus() -> str:
    """The bundled public-domain corpus: seven Shakespeare plays as plain text (~930 kB)."""
    return resources.files("zoo").joinpath("data", BUNDLED_CORPUS).read_text(encoding="utf-8")


def read_text(path: Path) -> str:
    """The UTF-8 text of ``path``, with an error that says what to pass instead."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError as err:
        raise InputError(f"data file {path} does not exist; pass a UTF-8 text file") from err
    except UnicodeDecodeError as err:
        raise InputError(f"data file {path} is not UTF-8 text ({err.reason} at byte {err.start})") from err
    except OSError as err:
        raise InputError(f"cannot read data file {path}: {err.strerror}") from err


def gpt2_tokenizer() -> Any | None:
    """GPT-2's tokenizer when the ``text`` extra is installed, else None."""
    try:
        import zoo

        return zoo.tokenizer("gpt2")
    except (ImportError, ZooError):
        return None


def load_corpus(
    text: str,
    *,
    tokenizer: str = "auto",
    vocab_limit: int | None = 1024,
    val_fraction: float = 0.1,
    max_chars: int | None = None,
    source: str = "text",
) -> Corpus:
    """Tokenise ``text`` and split off the last ``val_fraction`` for validation.

    ``tokenizer``: ``"gpt2"``, ``"bytes"`` or ``"auto"`` (GPT-2 when installed, else
    bytes). With GPT-2 the model's vocabulary is the ``vocab_limit`` most frequent GPT-2
    tokens of the text, renumbered in the order of GPT-2's ids, plus the 256 bytes:
    every rarer token is spelled out in its bytes. The text is still represented
    exactly, while the embedding and output layer of a small model shrink from 50257
    rows (or the ~11k the bundled text uses) to ~1.3k, which is most of its compute.
    ``vocab_limit=None`` keeps every token the text uses and needs no bytes.
    """
    if not isinstance(text, str):
        raise InputError(f"text must be a str, got {type(text).__name__}; decode bytes first or use read_text(path)")
    if vocab_limit is not None and not _is_int(vocab_limit):
        raise ConfigError(f"vocab_limit={vocab_limit!r} must be an integer (or None)")
    if max_chars is not None and (not _is_int(max_chars) or max_chars < 0):
        raise ConfigError(f"max_chars={max_chars!r} must be an integer >= 0 (or None for the whole text)")
    if not isinstance(val_fraction, (int, float)) or not 0.0 < val_fraction < 1.0:
        raise ConfigError(f"val_fraction={val_fraction} must be between 0 and 1")
    if vocab_limit is not None and vocab_limit <= 0:
        raise ConfigError(f"vocab_limit={vocab_limit} must be > 0 (or None for every token the text uses)")
    if tokenizer not in ("auto", "gpt2", "bytes"):
        raise ConfigError(f"unknown tokenizer {tokenizer!r}; use 'auto', 'gpt2' or 'bytes'")
    if max_chars is not None:
        text = text[:max_chars]
    gpt2 = gpt2_tokenizer() if tokenizer != "bytes" else None
    if gpt2 is None and tokenizer == "gpt2":
        raise ConfigError(
            "the GPT-2 tokenizer is not available; install the extra with "
            "`pip install 'zoo-lm[text]'`, or use tokenizer='bytes'"
        )
    fallback = 0.0
    if gpt2 is None:
        raw = bytearray(text.encode("utf-8"))
        tokens = torch.frombuffer(raw, dtype=torch.uint8).long() if raw else torch.zeros(0, dtype=torch.long)
        pieces, name = list(BYTE_PIECES), "bytes"
    else:
        tokens, pieces, fallback = _gpt2_tokens(gpt2, text, vocab_limit)
        name = "gpt2"
    n_val = int(tokens.numel() * val_fraction)
    if n_val < 2 or tokens.numel() - n_val < 2:
        raise InputError(
            f"{source} has only {tokens.numel()} tokens: too few to split into training and "
            f"validation parts; use a longer text"
        )
    return Corpus(tokens[:-n_val], tokens[-n_val:], name, source, pieces, fallback)


def _gpt2_tokens(gpt2: Any, text: str, vocab_limit: int | None) -> tuple[Tensor, list[bytes], float]:
    """GPT-2 ids of ``text`` renumbered to the kept tokens, the rest spelled as bytes."""
    ids = torch.tensor(gpt2.encode(text), dtype=torch.long)
    used, inverse, counts = torch.unique(ids, sorted=True, return_inverse=True, return_counts=True)
    used_bytes = [gpt2.token_bytes(i) for i in used.tolist()]
    if vocab_limit is None or used.numel() <= vocab_limit:
        return inverse, used_bytes, 0.0
    # The most frequent tokens (ties: lower id), then renumbered in GPT-2's order. ``used``
    # is sorted, so a lower index is a lower id.
    n_used = counts.tolist()
    kept = sorted(sorted(range(len(n_used)), key=lambda i: (-n_used[i], i))[:vocab_limit])
    pieces = [used_bytes[i] for i in kept] + list(BYTE_PIECES)
    spelled: list[list[int]] = [[vocab_limit + b for b in piece] for piece in used_bytes]
    for new, i in enumerate(kept):
        spelled[i] = [new]
    tokens = torch.tensor([t for i in inverse.tolist() for t in spelled[i]], dtype=torch.long)
    dropped = 1.0 - float(counts[kept].sum()) / ids.numel()
    return tokens, pieces, dropped


def _check_length(tokens: Tensor, seq_len: int, part: str) -> None:
    if tokens.numel() < seq_len + 1:
        raise InputError(
            f"the {part} split has {tokens.numel()} tokens, fewer than seq_len + 1 = {seq_len + 1}; "
            f"use a longer text or a shorter seq_len"
        )


def training_batches(tokens: Tensor, settings: TrainSettings) -> Iterator[tuple[Tensor, Tensor]]:
    """Random (inputs, targets) windows, each (B, S), in an order fixed by ``settings.seed``."""
    _check_length(tokens, settings.seq_len, "training")
    generator = torch.Generator().manual_seed(settings.seed)
    span = torch.arange(settings.seq_len + 1)  # (S + 1,)
    while True:
        starts = torch.randint(0, tokens.numel() - settings.seq_len, (settings.batch_size,), generator=generator)
        windows = tokens[starts[:, None] + span]  # (B, S + 1)
        yield windows[:, :-1], windows[:, 1:]


def validation_batches(tokens: Tensor, settings: TrainSettings) -> list[tuple[Tensor, Tensor]]:
    """Fixed, evenly spaced (inputs, targets) windows covering the validation tokens."""
    _check_length(tokens, settings.seq_len, "validation")
    count = settings.eval_batches * settings.batch_size
    starts = torch.linspace(0, tokens.numel() - settings.seq_len - 1, count).long()
    windows = tokens[starts[:, None] + torch.arange(settings.seq_len + 1)]  # (count, S + 1)
    return [(w[:, :-1], w[:, 1:]) for w in windows.split(settings.batch_size)]


# -- optimisation --------------------------------------------------------------------


def parameter_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """AdamW groups: decay on matrices (dim >= 2), none on biases and norm gains."""
    params = [p for p in model.parameters() if p.requires_grad]  # tied weights once
    return [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]


def learning_rate(step: int, settings: TrainSettings) -> float:
    """The learning rate of update ``step`` (0-based): linear warmup, then cosine decay."""
    peak, floor, warmup = settings.lr, settings.lr * settings.min_lr_ratio, settings.warmup
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, settings.steps - warmup)
    return floor + 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0))) * (peak - floor)


def lm_loss(model: nn.Module, inputs: Tensor, targets: Tensor) -> Tensor:
    """Mean next-token cross-entropy; right for logits and for log-probabilities alike
    (log_softmax of log-probabilities is the identity)."""
    out = model(inputs)  # (B, S, V)
    return F.cross_entropy(out.flatten(0, 1), targets.flatten())


@torch.no_grad()
def evaluate(model: nn.Module, batches: list[tuple[Tensor, Tensor]]) -> float:
    """Mean loss over ``batches``, in eval mode (no dropout); restores the mode after."""
    was_training = model.training
    model.eval()
    try:
        total = sum(lm_loss(model, x, y).item() for x, y in batches)
    finally:
        model.train(was_training)
    return total / len(batches)


@contextlib.contextmanager
def deterministic(seed: int, threads: int | None = None) -> Iterator[None]:
    """Deterministic kernels, a seeded random state and ``threads`` CPU threads, all
    restored on exit."""
    previous, previous_threads = torch.are_deterministic_algorithms_enabled(), torch.get_num_threads()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        torch.use_deterministic_algorithms(True)
        if threads is not None:
            torch.set_num_threads(threads)
        try:
            yield
        finally:
            torch.use_deterministic_algorithms(previous)
            torch.set_num_threads(previous_threads)


def train(
    model: nn.Module,
    train_tokens: Tensor,
    val_tokens: Tensor,
    settings: TrainSettings,
    *,
    on_step: Callable[[int, float], None] | None = None,
) -> TrainResult:
    """Train ``model`` (token ids (B, S) -> (B, S, V)) as a next-token predictor.

    ``on_step(step, train_loss)`` is called after every update. The model is left in
    eval mode.
    """
    _check_length(train_tokens, settings.seq_len, "training")
    _check_length(val_tokens, settings.seq_len, "validation")
    for part, tokens in (("training", train_tokens), ("validation", val_tokens)):
        if tokens.is_floating_point() or tokens.is_complex() or tokens.dtype == torch.bool or int(tokens.min()) < 0:
            raise InputError(
                f"the {part} tokens must be non-negative integer token ids, got dtype {tokens.dtype} "
                f"with minimum {tokens.min().item()}; pass a Corpus's train and val tensors"
            )
    device = next(model.parameters()).device
    vocab = getattr(getattr(model, "config", None), "vocab_size", None)
    if vocab is not None and (top := max(int(train_tokens.max()), int(val_tokens.max()))) >= vocab:
        raise InputError(
            f"the data has token ids up to {top}, "
            f"outside the model's vocabulary of {vocab}; build the model with the corpus's vocab_size"
        )
    val_batches = [(x.to(device), y.to(device)) for x, y in validation_batches(val_tokens, settings)]
    batches = training_batches(train_tokens, settings)
    optimizer = torch.optim.AdamW(
        parameter_groups(model, settings.weight_decay), lr=settings.lr, betas=settings.betas
    )
    seconds, since_eval = 0.0, []
    with deterministic(settings.seed, settings.threads):
        curve = [CurvePoint(0, None, evaluate(model, val_batches))]
        model.train()
        for step in range(settings.steps):
            start = time.perf_counter()
            lr = learning_rate(step, settings)
            for group in optimizer.param_groups:
                group["lr"] = lr
            x, y = next(batches)
            loss = lm_loss(model, x.to(device), y.to(device))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if settings.grad_clip > 0:
                nn.utils.clip_grad_norm_(model.parameters(), settings.grad_clip)
            optimizer.step()
            value = loss.item()
            seconds += time.perf_counter() - start
            if not math.isfinite(value):
                raise ConfigError(
                    f"the training loss became {value} at step {step + 1}: training diverged; "
                    f"lower the learning rate (lr={settings.lr}) or raise warmup_steps"
                )
            since_eval.append(value)
            done = step + 1
            if on_step is not None:
                on_step(done, value)
            if done % settings.eval_every == 0 or done == settings.steps:
                train_loss = sum(since_eval) / len(since_eval)
                curve.append(CurvePoint(done, train_loss, evaluate(model, val_batches)))
                since_eval = []
    model.eval()
    tokens = settings.steps * settings.tokens_per_step
    return TrainResult(curve, tokens / seconds if seconds else 0.0, seconds, tokens)

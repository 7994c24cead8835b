"""The training loop: data order, schedule, weight decay, clipping, evaluation, determinism."""

from __future__ import annotations

import math
from importlib import resources
from typing import Any

import pytest
import torch

import zoo
from zoo.training import (
    CurvePoint,
    TrainSettings,
    bundled_corpus,
    learning_rate,
    load_corpus,
    parameter_groups,
    training_batches,
    validation_batches,
)
from zoo.training import (
    fit as train,
)

TEXT = bundled_corpus()[:40_000]
SETTINGS = TrainSettings(steps=30, batch_size=8, seq_len=32, lr=3e-3, eval_every=10, eval_batches=2, threads=1)


def small_lm(vocab: int = 256, **overrides: Any) -> zoo.DecoderLM:
    torch.manual_seed(0)
    sizes = dict(vocab_size=vocab, max_seq_len=32, d_model=32, n_layers=1, n_heads=2, dropout=0.1)
    return zoo.build("gpt2-small", **{**sizes, **overrides})


@pytest.fixture(scope="module")
def corpus() -> Any:
    return load_corpus(TEXT, tokenizer="bytes")


def test_bundled_corpus_is_public_domain_shakespeare_under_1mb() -> None:
    data = resources.files("zoo").joinpath("data", "shakespeare.txt").read_bytes()
    assert len(data) <= 1_000_000
    text = data.decode("utf-8")
    assert text.startswith("Hamlet\n") and "HAMLET:\nTo be, or not to be" in text
    assert "**" not in text and "#" not in text  # plain text, not the Markdown it came from


def test_bytes_corpus_keeps_the_tail_for_validation(corpus: Any) -> None:
    raw = torch.tensor(list(TEXT.encode("utf-8")))
    assert corpus.vocab_size == 256 and corpus.tokenizer == "bytes" and corpus.byte_fallback == 0.0
    assert corpus.val.numel() == int(raw.numel() * 0.1)
    assert torch.equal(torch.cat([corpus.train, corpus.val]), raw)


def test_gpt2_corpus_keeps_frequent_tokens_and_spells_the_rest_in_bytes() -> None:
    try:
        tokenizer = zoo.tokenizer("gpt2")
    except zoo.ZooError as err:
        pytest.skip(f"GPT-2 tokenizer not installed: {err}")
    text = TEXT[:5000]
    ids = tokenizer.encode(text)
    every = load_corpus(text, tokenizer="gpt2", vocab_limit=None)
    assert every.vocab_size == len(set(ids)) and every.byte_fallback == 0.0
    assert every.pieces == [tokenizer.token_bytes(i) for i in sorted(set(ids))]
    assert torch.cat([every.train, every.val]).numel() == len(ids)
    limited = load_corpus(text, tokenizer="gpt2", vocab_limit=100)
    assert limited.vocab_size == 100 + 256 and limited.pieces[100:] == [bytes([b]) for b in range(256)]
    frequent = sorted(set(ids), key=lambda i: (-ids.count(i), i))[:100]
    assert limited.pieces[:100] == [tokenizer.token_bytes(i) for i in sorted(frequent)]
    assert limited.byte_fallback == pytest.approx(1 - sum(ids.count(i) for i in frequent) / len(ids))
    for corpus in (every, limited):  # both represent the text exactly
        assert corpus.decode(torch.cat([corpus.train, corpus.val]).tolist()) == text


def test_unknown_tokenizer_and_short_text_are_refused() -> None:
    with pytest.raises(zoo.ConfigError, match="unknown tokenizer 'bpe'"):
        load_corpus(TEXT, tokenizer="bpe")
    with pytest.raises(zoo.InputError, match="too few to split"):
        load_corpus("ab", tokenizer="bytes")
    with pytest.raises(zoo.ConfigError, match="vocab_limit=0"):
        load_corpus(TEXT, vocab_limit=0)
    with pytest.raises(zoo.InputError, match="too few to split"):
        load_corpus("", tokenizer="bytes")
    with pytest.raises(zoo.InputError, match="text must be a str"):
        load_corpus(TEXT.encode(), tokenizer="bytes")  # type: ignore[arg-type]


def test_training_batches_are_shifted_windows_in_a_seeded_order(corpus: Any) -> None:
    first = training_batches(corpus.train, SETTINGS)
    again = training_batches(corpus.train, SETTINGS)
    other = training_batches(corpus.train, TrainSettings(**{**SETTINGS.__dict__, "seed": 1}))
    x, y = next(first)
    assert x.shape == y.shape == (8, 32)
    assert torch.equal(x[:, 1:], y[:, :-1])  # targets are the next tokens
    assert torch.equal(x, next(again)[0]) and not torch.equal(x, next(other)[0])
    assert not torch.equal(x, next(first)[0])  # the order moves on


def test_validation_windows_are_fixed_and_span_the_split(corpus: Any) -> None:
    batches = validation_batches(corpus.val, SETTINGS)
    assert len(batches) == SETTINGS.eval_batches and all(x.shape == (8, 32) for x, _ in batches)
    assert torch.equal(batches[0][0][0], corpus.val[:32])
    assert torch.equal(batches[-1][1][-1], corpus.val[-32:])  # the last window ends at the end


def test_warmup_then_cosine_to_the_floor() -> None:
    s = TrainSettings(steps=100, lr=1.0, warmup_steps=10, min_lr_ratio=0.1)
    rates = [learning_rate(i, s) for i in range(s.steps)]
    assert rates[0] == pytest.approx(0.1) and rates[9] == pytest.approx(1.0)
    assert all(a < b for a, b in zip(rates[:9], rates[1:10], strict=True))  # warmup rises
    assert all(a >= b for a, b in zip(rates[10:-1], rates[11:], strict=True))  # then decays
    assert rates[55] == pytest.approx(0.1 + 0.45 * (1 + math.cos(math.pi * 0.5)))
    assert learning_rate(s.steps, s) == pytest.approx(0.1)


def test_weight_decay_on_matrices_only() -> None:
    model = small_lm()
    decay, no_decay = parameter_groups(model, 0.1)
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(p.dim() == 2 for p in decay["params"]) and all(p.dim() == 1 for p in no_decay["params"])
    names = {id(p): n for n, p in model.named_parameters()}
    assert "tok_emb.weight" in {names[id(p)] for p in decay["params"]}  # the tied head, once
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))


def test_training_lowers_the_validation_loss_and_is_deterministic(corpus: Any) -> None:
    first = train(small_lm(), corpus.train, corpus.val, SETTINGS)
    again = train(small_lm(), corpus.train, corpus.val, SETTINGS)
    assert [p.step for p in first.curve] == [0, 10, 20, 30]
    assert first.curve[0].train_loss is None and first.curve[0].val_loss == pytest.approx(math.log(256), abs=0.3)
    assert first.final_val_loss < first.curve[0].val_loss - 1.0
    assert first.curve == again.curve  # bit for bit
    assert first.tokens_seen == 30 * 8 * 32 and first.tokens_per_second > 0


def test_training_leaves_global_state_as_it_found_it(corpus: Any) -> None:
    torch.manual_seed(123)
    threads = torch.get_num_threads()
    expected = torch.rand(3)
    torch.manual_seed(123)
    model = small_lm()  # reseeds: draw again after training instead
    torch.manual_seed(123)
    train(model, corpus.train, corpus.val, TrainSettings(**{**SETTINGS.__dict__, "steps": 2, "eval_every": 2}))
    assert torch.equal(torch.rand(3), expected)
    assert not torch.are_deterministic_algorithms_enabled()
    assert torch.get_num_threads() == threads
    assert not model.training


def test_gradients_are_clipped_every_step(corpus: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    norms: list[float] = []
    clip = torch.nn.utils.clip_grad_norm_

    def spy(params: Any, max_norm: float, *args: Any, **kwargs: Any) -> torch.Tensor:
        params = list(params)
        total = clip(params, max_norm, *args, **kwargs)
        norms.append(float(torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in params]))))
        return total

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", spy)
    settings = TrainSettings(**{**SETTINGS.__dict__, "steps": 3, "eval_every": 3, "grad_clip": 0.05})
    train(small_lm(), corpus.train, corpus.val, settings)
    assert len(norms) == 3 and max(norms) <= 0.05 + 1e-6


def test_on_step_reports_every_update(corpus: Any) -> None:
    seen: list[tuple[int, float]] = []
    settings = TrainSettings(**{**SETTINGS.__dict__, "steps": 4, "eval_every": 2})
    result = train(small_lm(), corpus.train, corpus.val, settings, on_step=lambda s, loss: seen.append((s, loss)))
    assert [s for s, _ in seen] == [1, 2, 3, 4]
    assert result.curve[1] == CurvePoint(2, pytest.approx((seen[0][1] + seen[1][1]) / 2), result.curve[1].val_loss)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (dict(steps=0), "steps=0 must be > 0"),
        (dict(warmup_steps=50, steps=10), "warmup_steps=50"),
        (dict(min_lr_ratio=2.0), "min_lr_ratio=2.0"),
        (dict(threads=0), "threads=0"),
        (dict(steps="3"), "steps='3' must be an integer"),
        (dict(batch_size=2.5), "batch_size=2.5 must be an integer"),
        (dict(lr=float("nan")), "lr=nan must be a finite number"),
    ],
)
def test_invalid_settings_are_refused(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(zoo.ConfigError, match=message):
        TrainSettings(**settings)


def test_data_the_model_cannot_hold_is_refused(corpus: Any) -> None:
    with pytest.raises(zoo.InputError, match="outside the model's vocabulary of 100"):
        train(small_lm(vocab=100), corpus.train, corpus.val, SETTINGS)
    with pytest.raises(zoo.InputError, match="fewer than seq_len"):
        train(small_lm(), corpus.train, corpus.val[:20], SETTINGS)
    with pytest.raises(zoo.InputError, match="non-negative integer token ids"):
        train(small_lm(), torch.cat([torch.tensor([-1]), corpus.train]), corpus.val, SETTINGS)


def test_divergence_stops_training_with_advice(corpus: Any) -> None:
    settings = TrainSettings(**{**SETTINGS.__dict__, "lr": 1e30, "warmup_steps": 0})
    with pytest.raises(zoo.ConfigError, match=r"training diverged; lower the learning rate \(lr=1e\+30\)"):
        train(small_lm(), corpus.train, corpus.val, settings)

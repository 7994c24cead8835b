"""The n-gram reference rows of an ablation (``zoo.ablate.baselines``): the counts and the
interpolation equal a plain dictionary count, the weights are chosen on held-out training
tokens, and ``zoo ablate`` reports the rows and labels a table whose models do not beat the
bigram."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch

from helpers import TINY_ABLATION
from zoo.ablate.baselines import DISCOUNTS, GRID, ORDER, _KneserNey, ngram_baselines
from zoo.cli import main
from zoo.training import TokenSplit, TrainSettings, bundled_corpus, tokens_data, validation_batches


def reference(
    fit: list[int], vocab: int, contexts: list[tuple[int | None, int, int]], l2: float, l3: float
) -> tuple[float, ...]:
    """Unigram, bigram and trigram mean losses by plain counting (the definition, by hand)."""
    uni, bi, tri = Counter(fit), Counter(zip(fit, fit[1:])), Counter(zip(fit, fit[1:], fit[2:]))
    bi_ctx, tri_ctx = Counter(fit[:-1]), Counter(zip(fit, fit[1:-1]))
    losses: list[list[float]] = [[], [], []]
    for t, u, w in contexts:
        p1 = (uni[w] + 1) / (len(fit) + vocab)
        p2 = l2 * bi[u, w] / bi_ctx[u] + (1 - l2) * p1 if bi_ctx[u] else p1
        p3 = l3 * tri[t, u, w] / tri_ctx[t, u] + (1 - l3) * p2 if t is not None and tri_ctx[t, u] else p2
        for i, p in enumerate((p1, p2, p3)):
            losses[i].append(-math.log(p))
    return tuple(sum(v) / len(v) for v in losses)


def windows(tokens: torch.Tensor, seq: int, batch: int, count: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    split = TokenSplit((tokens,))
    return validation_batches(split, TrainSettings(batch_size=batch, seq_len=seq, eval_batches=count))


@pytest.mark.parametrize("vocab", [7, 40, 3000])  # dense tables, and sorted keys (vocab**2 > 2**22)
def test_the_losses_equal_counting_by_hand(vocab: int) -> None:
    g = torch.Generator().manual_seed(vocab)
    # A skewed stream with structure, so that bigrams and trigrams help and some contexts go unseen.
    base = torch.randint(0, vocab, (4000,), generator=g)
    train = torch.where(torch.rand(4000, generator=g) < 0.5, base, base.roll(1) % vocab)
    val = torch.randint(0, vocab, (600,), generator=g)
    batches = windows(val, 16, 4, 3)
    result = ngram_baselines(TokenSplit((train,)), TokenSplit((val,)), batches, vocab)
    contexts = [
        (int(x[i, j - 1]) if j else None, int(x[i, j]), int(y[i, j]))
        for x, y in batches
        for i in range(x.shape[0])
        for j in range(x.shape[1])
    ]
    l2, l3 = result.lambdas
    assert l3 is not None
    expected = reference(train.tolist(), vocab, contexts, l2, l3)
    assert (result.unigram, result.bigram, result.trigram) == pytest.approx(expected, rel=1e-9)
    assert result.eval_tokens == len(contexts) and result.tokens_counted == 4000
    # The weights: the grid's best on the last tenth of the training tokens, counted on the rest.
    cut = 4000 * 9 // 10
    fit, tail = train[:cut].tolist(), train[cut - 1 :].tolist()
    held = [(tail[j - 1] if j else None, tail[j], tail[j + 1]) for j in range(len(tail) - 1)]
    best2 = min(GRID, key=lambda lam: reference(fit, vocab, held, lam, 0.5)[1])
    best3 = min(GRID, key=lambda lam: reference(fit, vocab, held, best2, lam)[2])
    assert (l2, l3) == (best2, best3)


def kneser_ney(fit: list[int], vocab: int, d: float, context: tuple[int, ...], w: int) -> float:
    """P(w | context) of interpolated Kneser–Ney by hand (``context`` oldest first, at most
    ORDER - 1 tokens): raw counts at the order the context allows, continuation counts below."""
    grams = [Counter(tuple(fit[i : i + k]) for i in range(len(fit) - k + 1)) for k in range(ORDER + 1)]
    cont = [Counter(g[1:] for g in grams[k + 1]) for k in range(ORDER)]  # distinct (k+1)-grams a k-gram ends

    def level(counts: Counter[tuple[int, ...]], h: tuple[int, ...], lower: float) -> float:
        total = sum(c for g, c in counts.items() if g[:-1] == h)
        distinct = sum(1 for g in counts if g[:-1] == h)
        return (max(counts[(*h, w)] - d, 0) + d * distinct * lower) / total if total else lower

    p = 1.0 / vocab
    for k in range(1, len(context) + 1):
        p = level(cont[k], context[len(context) - k + 1 :] if k > 1 else (), p)
    return level(grams[len(context) + 1], context, p)


@pytest.mark.parametrize("vocab", [5, 40])  # dense tables, and sorted keys (vocab**3 > 2**22 at 40: 4- and 5-grams)
def test_the_fivegram_is_kneser_ney_by_hand_and_a_distribution(vocab: int) -> None:
    g = torch.Generator().manual_seed(vocab)
    base = torch.randint(0, vocab, (1500,), generator=g)
    train = torch.where(torch.rand(1500, generator=g) < 0.6, base, (base.roll(2) + base.roll(1)) % vocab)
    val = torch.randint(0, vocab, (200,), generator=g)
    batches = windows(val, 8, 2, 2)
    result = ngram_baselines(TokenSplit((train,)), TokenSplit((val,)), batches, vocab)
    assert result.discount in DISCOUNTS and result.fivegram is not None
    fit = train.tolist()
    losses = [
        -math.log(kneser_ney(fit, vocab, result.discount, tuple(x[i, max(0, j - 3) : j + 1].tolist()), int(y[i, j])))
        for x, y in batches
        for i in range(x.shape[0])
        for j in range(x.shape[1])
    ]
    assert result.fivegram == pytest.approx(sum(losses) / len(losses), rel=1e-9)
    # Every history's probabilities over the vocabulary sum to one, at every order a target meets.
    model = _KneserNey([train], vocab, ORDER)
    for seen in range(ORDER):
        context = torch.tensor([[1, 2, 3, 4]]).expand(vocab, 4)
        probs = [
            math.exp(-model.scorer(context[w : w + 1], torch.tensor([seen]), torch.tensor([w]))(0.7))
            for w in range(vocab)
        ]
        assert math.fsum(probs) == pytest.approx(1.0, abs=1e-12)


def test_bytes_of_the_bundled_text_score_as_the_literature_of_this_corpus_expects() -> None:
    text = torch.frombuffer(bytearray(bundled_corpus().encode()), dtype=torch.uint8).to(torch.int64)
    cut = len(text) * 99 // 100
    data = tokens_data(text[:cut], text[cut:])
    result = ngram_baselines(data.train, data.val, windows(text[cut:], 64, 16, 4), 256)
    assert result.unigram > result.bigram > (result.trigram or 0.0) > (result.fivegram or 0.0) > 1.2
    assert result.bigram == pytest.approx(2.50, abs=0.1) and result.trigram == pytest.approx(2.03, abs=0.1)
    # Character 5-grams of Shakespeare: about 2.2-2.3 bits a character.
    assert result.fivegram == pytest.approx(1.56, abs=0.1)


def test_bits_per_byte_from_the_split() -> None:
    tokens = torch.randint(0, 50, (3000,), generator=torch.Generator().manual_seed(0))
    val = TokenSplit((tokens[2000:],), n_bytes=2000)  # two bytes a token
    result = ngram_baselines(TokenSplit((tokens[:2000],)), val, windows(tokens[2000:], 16, 2, 2), 50)
    assert result.bits_per_byte(result.bigram) == pytest.approx(result.bigram / math.log(2) / 2)
    unknown = ngram_baselines(
        TokenSplit((tokens[:2000],)), TokenSplit((tokens[2000:],)), windows(tokens[2000:], 16, 2, 2), 50
    )
    assert unknown.bytes_per_token is None and unknown.bits_per_byte(1.0) is None


def test_zoo_ablate_reports_the_reference_rows_and_labels_an_under_trained_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "ablation"
    assert main(["ablate", *TINY_ABLATION, "--swaps", "placement", "--seeds", "2", "-o", str(out), "--json"]) == 0
    shown: dict[str, Any] = json.loads(capsys.readouterr().out)
    saved = json.loads((out / "ablation.json").read_text())
    for doc in (shown, saved):
        b = doc["baselines"]
        assert b["unigram"] > b["bigram"] > b["trigram"] > 0
        # Two steps of a 16-wide model learn nothing: both ends are labelled.
        assert b["under_trained"] == ["transformer-2017", "gpt2-small"]
    report = (out / "report.md").read_text()
    for name in ("unigram", "bigram", "trigram"):
        assert f"| {name} (reference) |  | {shown['baselines'][name]:.4f} |" in report
    assert "**Under-trained**" in report

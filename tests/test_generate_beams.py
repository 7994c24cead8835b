"""Beam search equal to transformers' token for token, on random GPT-2 and Llama models:
``num_beams``, ``length_penalty``, ``early_stopping``, ``num_return_sequences``, EOS,
left padding, and sampled beams."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import torch

import zoo
from helpers import random_hf_model

transformers = pytest.importorskip("transformers")

VOCAB = 120


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def pair(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, zoo.DecoderLM]:
    return random_hf_model(tmp_path_factory.mktemp(request.param), request.param, VOCAB)


def prompts(batch: int = 2, seq: int = 6, seed: int = 1) -> torch.Tensor:
    return torch.randint(1, VOCAB, (batch, seq), generator=torch.Generator().manual_seed(seed))


def theirs(reference: Any, ids: torch.Tensor, **options: Any) -> torch.Tensor:
    with torch.no_grad():
        out: torch.Tensor = reference.generate(ids, do_sample=options.pop("do_sample", False), **options)
    return out


SETTINGS = [
    dict(num_beams=nb, length_penalty=lp, early_stopping=es, num_return_sequences=n)
    for nb, lp, es, n in itertools.product([2, 4], [1.0, 0.0, 2.0, -1.0], [False, True, "never"], [1, 2])
]


def frequent_tokens(model: zoo.DecoderLM, ids: torch.Tensor) -> list[int]:
    """Two tokens greedy decoding says early: EOS ids that end beams part way."""
    free = model.generate(ids, 12, eos_token_id=[])
    return [int(free[0, ids.shape[1] + 2]), int(free[1, ids.shape[1] + 5])]


@pytest.mark.parametrize("with_eos", [False, True], ids=["to-the-end", "eos"])
def test_beam_search_equals_transformers_for_every_setting(pair: tuple[Any, zoo.DecoderLM], with_eos: bool) -> None:
    reference, model = pair
    ids = prompts()
    eos = {"eos_token_id": frequent_tokens(model, ids)} if with_eos else {"eos_token_id": []}
    shorter = 0
    for options in SETTINGS:
        ours = model.generate(ids, 12, **options, **eos)
        expected = theirs(
            reference, ids, max_new_tokens=12, pad_token_id=0, **options, eos_token_id=eos["eos_token_id"] or None
        )
        assert torch.equal(ours, expected), options
        shorter += ours.shape[1] < ids.shape[1] + 12
    assert shorter > 0 if with_eos else shorter == 0  # EOS ended some searches early


def test_beams_of_left_padded_prompts_equal_transformers(pair: tuple[Any, zoo.DecoderLM]) -> None:
    reference, model = pair
    ids = prompts(3, 7, seed=5)
    mask = torch.ones_like(ids)
    mask[0, :3], mask[2, :5] = 0, 0
    ids = ids.masked_fill(mask == 0, 0)
    options = dict(num_beams=3, num_return_sequences=2, length_penalty=0.5)
    ours = model.generate(ids, 10, attention_mask=mask, **options)
    assert torch.equal(ours, theirs(reference, ids, attention_mask=mask, max_new_tokens=10, pad_token_id=0, **options))


def test_sampled_beams_equal_transformers_with_the_same_seed(pair: tuple[Any, zoo.DecoderLM]) -> None:
    reference, model = pair
    ids = prompts()
    options = dict(num_beams=3, do_sample=True, temperature=0.7, top_k=20, top_p=0.9, repetition_penalty=1.3)
    torch.manual_seed(3)
    ours = model.generate(ids, 10, **options)
    torch.manual_seed(3)
    assert torch.equal(ours, theirs(reference, ids, max_new_tokens=10, pad_token_id=0, **options))
    assert not torch.equal(ours, model.generate(ids, 10, num_beams=3))


def test_beams_find_a_likelier_sequence_than_greedy(pair: tuple[Any, zoo.DecoderLM]) -> None:
    """Not only equal: with no length penalty the best beam's log-probability is at least greedy's."""
    _, model = pair
    ids = prompts(1)

    def logprob(seq: torch.Tensor) -> float:
        with torch.no_grad():
            lp = torch.log_softmax(model(seq[None]).float(), dim=-1)[0, :-1]
        return float(lp.gather(-1, seq[1:, None]).squeeze(-1)[ids.shape[1] - 1 :].sum())

    greedy = model.generate(ids[0], 10)
    beam = model.generate(ids[0], 10, num_beams=4, length_penalty=0.0, early_stopping="never")
    assert beam.shape == greedy.shape and logprob(beam) >= logprob(greedy) - 1e-4


@pytest.mark.parametrize(
    ("options", "words"),
    [
        (dict(num_beams=2, num_return_sequences=3), "at most num_beams"),
        (dict(num_beams=0), "num_beams must be an integer >= 1"),
        (dict(num_beams=2, early_stopping="soon"), "early_stopping must be True, False, None or 'never'"),
        (dict(num_beams=2, on_token=print), "drop on_token"),
    ],
)
def test_bad_beam_settings_are_input_errors(
    pair: tuple[Any, zoo.DecoderLM], options: dict[str, Any], words: str
) -> None:
    with pytest.raises(zoo.InputError, match=words):
        pair[1].generate(prompts(), 4, **options)

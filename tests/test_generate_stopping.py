"""Where generation stops, as transformers decides: EOS, pad and the other settings of
``generation_config.json`` (else ``config.json``), ``min_new_tokens`` and stop strings,
token for token against transformers on random GPT-2 and Llama models."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

import zoo
from helpers import random_hf_model, train_tokenizer

transformers = pytest.importorskip("transformers")

VOCAB = 120


def prompts(batch: int = 2, seq: int = 6, seed: int = 1, vocab: int = VOCAB) -> torch.Tensor:
    return torch.randint(1, vocab, (batch, seq), generator=torch.Generator().manual_seed(seed))


def theirs(reference: Any, ids: torch.Tensor, **options: Any) -> torch.Tensor:
    with torch.no_grad():
        out: torch.Tensor = reference.generate(ids, attention_mask=torch.ones_like(ids), **options)
    return out


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def family(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def spoken(family: str, folder: Path) -> list[int]:
    """Two tokens the random model says early from ``prompts()``: EOS ids that fire."""
    _, model = random_hf_model(folder, family, VOCAB)
    free = model.generate(prompts(), 12, eos_token_id=[])
    return [int(free[0, 8]), int(free[1, 9])]


def test_eos_and_pad_come_from_generation_config_json(family: str, tmp_path: Path) -> None:
    eos = spoken(family, tmp_path / "probe")
    reference, model = random_hf_model(tmp_path / "m", family, VOCAB, eos_token_id=eos, pad_token_id=3)
    assert model.generation_config == {"bos_token_id": 1, "eos_token_id": eos, "pad_token_id": 3}
    ours = model.generate(prompts(), 12)
    assert torch.equal(ours, theirs(reference, prompts(), max_new_tokens=12))
    assert ours.shape[1] < 6 + 12 and bool((ours == 3).any())  # stopped, padded with 3
    assert torch.equal(model.generate(prompts(), 12, eos_token_id=[]), model.generate(prompts(), 12, eos_token_id=()))
    assert model.generate(prompts(), 12, eos_token_id=[]).shape == (2, 18)  # [] stops at nothing
    (tmp_path / "m" / "generation_config.json").unlink()  # config.json's ids, as transformers reads them
    assert zoo.from_hf(tmp_path / "m").generation_config == {"bos_token_id": 1, "eos_token_id": eos, "pad_token_id": 3}


def test_sampling_settings_of_generation_config_json_are_honoured(family: str, tmp_path: Path) -> None:
    reference, _ = random_hf_model(tmp_path / "m", family, VOCAB)
    settings = {"do_sample": True, "temperature": 0.7, "top_k": 7, "top_p": 0.9, "max_new_tokens": 9}
    file = tmp_path / "m" / "generation_config.json"
    file.write_text(json.dumps({**json.loads(file.read_text()), **settings}))
    reference = type(reference).from_pretrained(tmp_path / "m").eval()
    model = zoo.from_hf(tmp_path / "m")
    torch.manual_seed(4)
    ours = model.generate(prompts())
    torch.manual_seed(4)
    assert torch.equal(ours, theirs(reference, prompts()))
    assert ours.shape == (2, 6 + 9)
    torch.manual_seed(4)
    assert not torch.equal(ours, model.generate(prompts(), do_sample=False))  # a call's setting wins


def test_min_new_tokens_equals_transformers(family: str, tmp_path: Path) -> None:
    eos = spoken(family, tmp_path / "probe")
    reference, model = random_hf_model(tmp_path / "m", family, VOCAB)
    for least in (0, 3, 8):
        ours = model.generate(prompts(), 12, eos_token_id=eos, min_new_tokens=least, pad_token_id=0)
        expected = theirs(
            reference, prompts(), max_new_tokens=12, eos_token_id=eos, min_new_tokens=least, pad_token_id=0
        )
        assert torch.equal(ours, expected), least
        new = ours[:, 6 : 6 + least]
        assert not bool(torch.isin(new, torch.tensor(eos)).any())
    for beams in (2, 3):
        ours = model.generate(prompts(), 12, eos_token_id=eos, min_new_tokens=5, num_beams=beams, pad_token_id=0)
        expected = theirs(
            reference, prompts(), max_new_tokens=12, eos_token_id=eos, min_new_tokens=5, num_beams=beams, pad_token_id=0
        )
        assert torch.equal(ours, expected)


@pytest.fixture(scope="module")
def bpe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return train_tokenizer(tmp_path_factory.mktemp("bpe"), "bpe", 400, eos_token="<|endoftext|>")


def readable_end(tok: zoo.Tokenizer, ids: list[int], after: int) -> str:
    """A stop string the row completes part way: the last two or three characters of
    its text after ``after`` tokens or more, where they are letters or spaces (text with
    U+FFFD, bytes of an unfinished character, is left out: transformers' matching of it
    is its own)."""
    for end in range(after, len(ids)):
        text = tok.decode(ids[:end])[-3:]
        if len(text) >= 2 and all(c.isalpha() or c == " " for c in text):
            return text
    raise AssertionError("no readable text")


@pytest.mark.parametrize("beams", [1, 3])
@pytest.mark.parametrize("with_eos", [False, True], ids=["no-eos", "eos"])
def test_stop_strings_equal_transformers(family: str, bpe: Path, tmp_path: Path, with_eos: bool, beams: int) -> None:
    pytest.importorskip("tokenizers")
    reference, model = random_hf_model(tmp_path / "m", family, 400)
    tok, hf_tok = zoo.tokenizer(bpe), transformers.AutoTokenizer.from_pretrained(bpe)
    ids = prompts(3, 6, vocab=300)
    free = model.generate(ids, 16, eos_token_id=[])
    stops = [readable_end(tok, free[0, 6:].tolist(), 3), readable_end(tok, free[1, 6:].tolist(), 7)]
    eos = [int(free[2, 10])] if with_eos else None
    options = dict(stop_strings=stops, num_beams=beams, pad_token_id=0)
    ours = model.generate(ids, 16, tokenizer=tok, eos_token_id=eos or [], **options)
    expected = theirs(reference, ids, max_new_tokens=16, tokenizer=hf_tok, eos_token_id=eos, **options)
    expected = expected.masked_fill(expected == -1, 0)  # beams without EOS: transformers fills -1, the zoo the pad id
    assert torch.equal(ours, expected), (stops, ours, expected)
    if with_eos:  # rows 0 and 1 stopped at their stop strings, padded after them
        assert not torch.equal(ours, model.generate(ids, ours.shape[1] - 6, eos_token_id=eos, num_beams=beams))


def test_stop_strings_need_a_tokenizer_and_strings(tmp_path: Path) -> None:
    _, model = random_hf_model(tmp_path / "m", "gpt2", VOCAB)
    with pytest.raises(zoo.InputError, match="stop_strings need the tokenizer"):
        model.generate(prompts(), 4, stop_strings=["ab"])
    with pytest.raises(zoo.InputError, match="non-empty string"):
        model.generate(prompts(), 4, stop_strings=[""], tokenizer=zoo.tokenizer("bytes"))
    with pytest.raises(zoo.InputError, match="min_new_tokens must be an integer >= 0"):
        model.generate(prompts(), 4, min_new_tokens=-1)

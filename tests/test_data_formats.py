"""``zoo data prepare`` reads JSON Lines, Parquet and Hugging Face datasets (one document a
record) and gives the very tokens it gives for the same documents as text files; a record
without its text field, or a file that is not what its suffix says, is one clear error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from zoo.cli import main
from zoo.errors import InputError
from zoo.training import open_data, prepare

DOCS = [
    "First Citizen:\nBefore we proceed any further, hear me speak.\n",
    "All:\nSpeak, speak.\n",
    "ROMEO: ünïcode ✓\n",
]


def tokens(folder: Path) -> tuple[list[int], list[int]]:
    data = open_data(folder)
    return (
        torch.cat([s.to(torch.int64) for s in data.train.shards]).tolist(),
        torch.cat([s.to(torch.int64) for s in data.val.shards]).tolist(),
    )


@pytest.fixture(scope="module")
def as_text(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The documents as text files, one each (the reference every format must equal)."""
    root = tmp_path_factory.mktemp("text")
    folder = root / "docs"
    folder.mkdir()
    for i, doc in enumerate(DOCS):
        (folder / f"{i}.txt").write_text(doc, encoding="utf-8")
    return prepare([folder], root / "prepared", tokenizer="bytes", val_fraction=0.2, workers=1).path  # type: ignore[return-value]


def write_jsonl(path: Path, field: str = "text") -> Path:
    path.write_text("".join(json.dumps({field: d, "id": i}) + "\n" for i, d in enumerate(DOCS)), encoding="utf-8")
    return path


def write_parquet(path: Path, field: str = "text") -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"id": list(range(len(DOCS))), field: DOCS}), path)
    return path


@pytest.mark.parametrize("writer", [write_jsonl, write_parquet], ids=["jsonl", "parquet"])
def test_a_record_file_prepares_as_its_documents_as_text_files(writer, tmp_path: Path, as_text: Path) -> None:  # type: ignore[no-untyped-def]
    source = writer(tmp_path / f"corpus{'.jsonl' if writer is write_jsonl else '.parquet'}")
    out = tmp_path / "prepared"
    assert main(["data", "prepare", str(source), "-o", str(out), "--tokenizer", "bytes", "--val-fraction", "0.2"]) == 0
    assert tokens(out) == tokens(as_text)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["documents"] == len(DOCS)


def test_another_field_is_named_with_field(tmp_path: Path, as_text: Path) -> None:
    source = write_jsonl(tmp_path / "c.jsonl", field="content")
    out = tmp_path / "prepared"
    with pytest.raises(InputError, match="line 1 has no field 'text'.*'content'.*--field"):
        prepare([source], out, tokenizer="bytes", val_fraction=0.2, workers=1)
    prepare([source], out, tokenizer="bytes", val_fraction=0.2, workers=1, field="content")
    assert tokens(out) == tokens(as_text)


@pytest.mark.parametrize(
    ("name", "content", "match"),
    [
        ("bad.jsonl", '{"text": "a"}\n{"text": \n', "line 2 is not valid JSON"),
        ("list.jsonl", "[1, 2]\n", "line 1 is not a JSON object"),
        ("number.jsonl", '{"text": 5}\n', "field 'text' is int, not text"),
        ("fake.parquet", "not parquet at all", "is not a Parquet file"),
    ],
)
def test_a_damaged_record_file_is_one_clear_error(tmp_path: Path, name: str, content: str, match: str) -> None:
    (tmp_path / name).write_text(content, encoding="utf-8")
    with pytest.raises(InputError, match=match):
        prepare([tmp_path / name], tmp_path / "out", tokenizer="bytes", workers=1)
    assert not (tmp_path / "out").exists()


def test_a_parquet_file_without_the_column_names_its_columns(tmp_path: Path) -> None:
    source = write_parquet(tmp_path / "c.parquet", field="body")
    with pytest.raises(InputError, match="no column 'text' \\(its columns: 'id', 'body'\\)"):
        prepare([source], tmp_path / "out", tokenizer="bytes", workers=1)


def test_a_local_dataset_through_datasets_offline(
    tmp_path: Path, as_text: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dataset folder (data files, as a hub snapshot holds them), read by ``datasets``
    offline, streamed: the same tokens as the text files."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    dataset = tmp_path / "my-dataset"
    (dataset / "data").mkdir(parents=True)
    write_parquet(dataset / "data" / "train-00000-of-00001.parquet")
    out = tmp_path / "prepared"
    args = [
        "data",
        "prepare",
        "--dataset",
        str(dataset),
        "-o",
        str(out),
        "--tokenizer",
        "bytes",
        "--val-fraction",
        "0.2",
    ]
    assert main(args) == 0
    assert tokens(out) == tokens(as_text)
    assert main([*args[:-2], "--split", "test", "-o", str(tmp_path / "other")]) != 0  # no such split: refused
    assert not (tmp_path / "other").exists()


def test_files_and_a_dataset_together_are_refused(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="input files or --dataset, not both"):
        prepare([write_jsonl(tmp_path / "c.jsonl")], tmp_path / "out", dataset="x/y")


def records(count: int, seed: int = 0) -> list[str]:
    """``count`` short records of varied length and characters (some beyond ASCII)."""
    words = ["the", "king", "speak", "ünïcode", "✓", "hear", "me", "ROMEO:", "\n", "ay,", "proceed"]
    return [" ".join(words[(seed + i * 7 + j * 3) % len(words)] for j in range(3 + i % 9)) for i in range(count)]


def split_as(folder: Path) -> tuple[list[int], list[int], int, int]:
    manifest = json.loads((folder / "manifest.json").read_text())
    return (*tokens(folder), manifest["splits"]["train"]["bytes"], manifest["splits"]["val"]["bytes"])


@pytest.mark.parametrize("tokenizer", ["bytes", "gpt2"])
@pytest.mark.parametrize("writer", [write_jsonl, write_parquet], ids=["jsonl", "parquet"])
@pytest.mark.parametrize("fraction", [0.005, 0.3])
def test_records_split_as_their_text_joined_in_one_file(
    writer, tokenizer: str, fraction: float, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """The validation split of a record file is the tail of the corpus, as that of one
    text file holding the records joined by the separator the zoo ends each record with
    (``<|endoftext|>`` for GPT-2, nothing for bytes): the same tokens in each split, and
    the same bytes; the records before it keep their ends."""
    if tokenizer == "gpt2":
        pytest.importorskip("tiktoken")
    texts = records(300)
    global DOCS
    saved, DOCS = DOCS, texts
    try:
        source = writer(tmp_path / f"corpus{'.jsonl' if writer is write_jsonl else '.parquet'}")
    finally:
        DOCS = saved
    joined = tmp_path / "joined.txt"
    joined.write_text(("<|endoftext|>" if tokenizer == "gpt2" else "").join(texts), encoding="utf-8")
    ours = prepare([source], tmp_path / "records", tokenizer=tokenizer, val_fraction=fraction, workers=1)
    prepare([joined], tmp_path / "one", tokenizer=tokenizer, val_fraction=fraction, workers=1)
    train, val, train_bytes, val_bytes = split_as(tmp_path / "records")
    assert (train, val) == tokens(tmp_path / "one")
    eot = 50256 if tokenizer == "gpt2" else -1  # the text "<|endoftext|>" spells 13 bytes in the joined file
    assert (train_bytes + 13 * train.count(eot), val_bytes + 13 * max(val.count(eot) - 1, 0)) == split_as(
        tmp_path / "one"
    )[2:]
    assert len(val) == int((len(train) + len(val)) * fraction) > 0
    whole = prepare([source], tmp_path / "whole", tokenizer=tokenizer, val_fraction=0.5, workers=1)
    first = tokens(whole.path)[0]  # type: ignore[arg-type]
    assert train[: len(first)] == first  # the records at the start are whole in every split
    assert ours.train.tokens + ours.val.tokens == len(train) + len(val)


def test_twenty_thousand_short_records_prepare_at_the_default_fraction(tmp_path: Path) -> None:
    """20,000 records of about 140 bytes: too short each for a validation tail of 0.005,
    the corpus is not; the validation split is the corpus's last 0.5%, whole records."""
    texts = [text.ljust(142, ".") for text in records(20_000)]
    source = tmp_path / "corpus.jsonl"
    source.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    out = tmp_path / "prepared"
    assert main(["data", "prepare", str(source), "-o", str(out), "--tokenizer", "bytes", "--workers", "1"]) == 0
    train, val = tokens(out)
    total = sum(len(t.encode()) for t in texts)
    assert len(train) + len(val) == total and len(val) == int(total * 0.005)
    assert bytes(train + val) == "".join(texts).encode()  # one stream: its tail is the validation split
    assert split_as(out)[2:] == (len(train), len(val))


@pytest.mark.parametrize("tokenizer", ["bytes", "gpt2"])
def test_a_validation_tail_across_shards_is_cut_and_renamed_with_their_digests(tokenizer: str, tmp_path: Path) -> None:
    """Small shards: the validation tail begins inside one shard (cut, its digests taken
    again) and takes the shards after it (renamed); every byte verifies."""
    if tokenizer == "gpt2":
        pytest.importorskip("tiktoken")
    folder = tmp_path / "texts"
    folder.mkdir()
    for n in range(40):  # documents of a few hundred tokens: shards of 900 cut between them
        (folder / f"{n:02d}.txt").write_text("\n".join(records(12 + n % 5, seed=n)), encoding="utf-8")
    options: dict[str, Any] = dict(tokenizer=tokenizer, val_fraction=0.37, workers=1)
    data = prepare([folder], tmp_path / "p", shard_tokens=900, **options)
    prepare([folder], tmp_path / "q", **options)
    assert len(data.val.shards) > 2 and len(data.train.shards) > 2
    assert (
        tokens(tmp_path / "p") == tokens(tmp_path / "q")
        and split_as(tmp_path / "p")[2:] == split_as(tmp_path / "q")[2:]
    )
    assert open_data(tmp_path / "p", verify=True).val.tokens == int((data.train.tokens + data.val.tokens) * 0.37)
    names = sorted(p.name for p in (tmp_path / "p").glob("*.bin"))
    assert names == [f"train-{i:05d}.bin" for i in range(len(data.train.shards))] + [
        f"val-{i:05d}.bin" for i in range(len(data.val.shards))
    ]

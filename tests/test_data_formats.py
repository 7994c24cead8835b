"""``zoo data prepare`` reads JSON Lines, Parquet and Hugging Face datasets (one document a
record) and gives the very tokens it gives for the same documents as text files; a record
without its text field, or a file that is not what its suffix says, is one clear error."""

from __future__ import annotations

import json
from pathlib import Path

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
        ("bad.jsonl", '{"text": "a"}\n{"text": \n', "line 2 is not JSON"),
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

"""A checkpoint's tokenizer record names no path (``zoo.checkpoint.records``): a record
that names a folder, a file outside the run or a folder as a hub id is refused, naming
the field and the fix, by every reader of the record; a tokenizer the user gives
(``--tokenizer``, ``tokenizer=``) still works past a refused record."""

from __future__ import annotations

import base64
import hashlib
import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import zoo
from helpers import error_line, tiny
from zoo.checkpoint.tokenizer import byte_files
from zoo.cli import main
from zoo.errors import RecordError
from zoo.pipelines import recorded_tokenizer
from zoo.training.models import model_of
from zoo.training.settings import TrainSettings

SECRET = b'{"secret": 1}\n'
SECRET_SHA = hashlib.sha256(SECRET).hexdigest()
BYTES_SHA = hashlib.sha256(byte_files()["tokenizer.json"]).hexdigest()

#: Each hostile record, with the field its refusal names.
RECORDS: dict[str, tuple[Callable[[Path], Any], str]] = {
    "name an absolute folder": (lambda other: {"name": str(other)}, "tokenizer.name"),
    "name a relative folder": (lambda other: {"name": "../other"}, "tokenizer.name"),
    "name a folder as a string": (lambda other: str(other), "tokenizer.name"),
    "hub an absolute folder": (lambda other: {"hub": str(other)}, "tokenizer.hub"),
    "hub a relative folder": (lambda other: {"hub": "../other"}, "tokenizer.hub"),
    "hub a revision path": (lambda other: {"hub": "org/tok", "revision": "../../refs"}, "tokenizer.revision"),
    "hub a revision number": (lambda other: {"hub": "org/tok", "revision": 3}, "tokenizer.revision"),
    "files outside the run": (lambda other: {"files": {"../../secret.json": SECRET_SHA}}, "tokenizer.files"),
    "files an absolute path": (lambda other: {"files": {"/etc/passwd": SECRET_SHA}}, "tokenizer.files"),
    "files in a subfolder": (lambda other: {"files": {"sub/tokenizer.json": BYTES_SHA}}, "tokenizer.files"),
    "files without a sha256": (lambda other: {"files": {"tokenizer.json": "../x"}}, "tokenizer.files.tokenizer.json"),
    "embedded outside": (lambda other: {"embedded": {"../x.json": base64.b64encode(b"{}").decode()}}, "tokenizer.embedded"),
    "two kinds": (lambda other: {"name": "gpt2", "hub": str(other)}, "tokenizer"),
    "a field no record has": (lambda other: {"name": "gpt2", "path": str(other)}, "tokenizer.path"),
}  # fmt: skip


@pytest.fixture
def other(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A tokenizer folder that is not the checkpoint's (the byte-level BPE's files), at
    ``tmp/other``, and the working folder ``tmp/work``, from which ``../other`` reaches it."""
    folder = tmp_path / "other"
    folder.mkdir()
    for name, data in byte_files().items():
        (folder / name).write_bytes(data)
    (tmp_path / "secret.json").write_bytes(SECRET)  # RUN/tokenizer/../../secret.json
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    return folder


def saved(tmp_path: Path, record: Any) -> Path:
    """A run folder ``tmp/run`` saved by ``zoo.save`` with ``record`` as its tokenizer."""
    return zoo.save(tiny(vocab_size=256), tmp_path / "run", metadata={"tokenizer": record})


def _cli(args: list[str], capsys: pytest.CaptureFixture[str], field: str) -> None:
    assert main(args) != 0
    error_line(capsys, field, "--tokenizer")


#: Every reader of a checkpoint's record: each must refuse a hostile one.
READERS: dict[str, Callable[[Path, Path, pytest.CaptureFixture[str], str], None]] = {
    "generate_text": lambda ckpt, tmp, capsys, field: zoo.generate_text(ckpt, "hi", max_new_tokens=2),
    "zoo generate": lambda ckpt, tmp, capsys, field: _cli(
        ["generate", str(ckpt), "--prompt", "hi", "--max-new-tokens", "2"], capsys, field
    ),
    "zoo eval": lambda ckpt, tmp, capsys, field: _cli(
        ["eval", str(ckpt), "--data", str(_text(tmp)), "--split", "train", "--seq-len", "8", "--batches", "1"],
        capsys,
        field,
    ),
    "model.tokenizer": lambda ckpt, tmp, capsys, field: zoo.load(ckpt).tokenizer,
    "recorded_tokenizer": lambda ckpt, tmp, capsys, field: recorded_tokenizer(ckpt),
    "to_hf": lambda ckpt, tmp, capsys, field: zoo.to_hf(zoo.load(ckpt), tmp / "export"),
    "save again": lambda ckpt, tmp, capsys, field: zoo.save(zoo.load(ckpt), tmp / "again.safetensors"),
    "fine-tune": lambda ckpt, tmp, capsys, field: model_of(str(ckpt.parent), {}, TrainSettings(), None),
    "lm-eval's zoo model": lambda ckpt, tmp, capsys, field: _harness(str(ckpt)),
}


def _harness(pretrained: str, **options: Any) -> Any:
    """``zoo eval --tasks``'s model (``zoo.harness.ZooLM``), as lm-evaluation-harness makes it."""
    pytest.importorskip("lm_eval")
    from zoo.harness import ZooLM

    return ZooLM(pretrained=pretrained, **options)


def _text(tmp: Path) -> Path:
    file = tmp / "text.txt"
    file.write_text("hello there, some text to evaluate on. " * 20)
    return file


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("kind", RECORDS)
def test_every_reader_refuses_a_record_that_names_a_path(
    kind: str, reader: str, other: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make, field = RECORDS[kind]
    ckpt = saved(tmp_path, make(other))
    if reader.startswith("zoo "):
        READERS[reader](ckpt, tmp_path, capsys, f"metadata {field} is")
        return
    with pytest.raises(RecordError, match=f"metadata {field.replace('.', '[.]')} is .*names no path.*--tokenizer"):
        READERS[reader](ckpt, tmp_path, capsys, field)
    assert not (tmp_path / "export").exists() and not (tmp_path / "again.safetensors").exists()


def test_a_refusal_says_nothing_of_a_file_outside_the_run(other: Path, tmp_path: Path) -> None:
    """Whether ``../../secret.json`` exists or matches, the refusal reads the same: it is
    refused by its name, never opened."""
    ckpt = saved(tmp_path, {"files": {"../../secret.json": SECRET_SHA}})
    messages = []
    for state in ("matches", "differs", "missing"):
        if state == "differs":
            (tmp_path / "secret.json").write_bytes(b"other")
        if state == "missing":
            (tmp_path / "secret.json").unlink()
        with pytest.raises(RecordError) as caught:
            recorded_tokenizer(ckpt)
        messages.append(str(caught.value))
    assert len(set(messages)) == 1 and "missing" not in messages[0] and "changed" not in messages[0]


def test_a_hub_record_is_never_read_as_a_local_folder(
    other: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``{"hub": "org/tok"}`` with a folder ``org/tok`` in the working folder: the hub
    cache is asked (and holds nothing, offline), the folder is not read."""
    (tmp_path / "work" / "org").mkdir()
    (tmp_path / "work" / "org" / "tok").symlink_to(other)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-home"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for record in ({"hub": "org/tok"}, {"name": "org/tok"}):
        ckpt = saved(tmp_path, record)
        for read in (recorded_tokenizer, lambda path: zoo.load(path).tokenizer):
            with pytest.raises(zoo.ZooError, match="not in the hub cache"):
                read(ckpt)


@pytest.mark.parametrize("kind", ["name an absolute folder", "hub an absolute folder", "files outside the run"])
def test_a_given_tokenizer_goes_past_a_refused_record(
    kind: str, other: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ckpt = saved(tmp_path, RECORDS[kind][0](other))
    assert isinstance(zoo.generate_text(ckpt, "hi", max_new_tokens=2, tokenizer="bytes"), str)
    assert main(["generate", str(ckpt), "--prompt", "hi", "--max-new-tokens", "2", "--tokenizer", str(other)]) == 0
    args = [
        "--data",
        str(_text(tmp_path)),
        "--split",
        "train",
        "--seq-len",
        "8",
        "--batches",
        "1",
        "--tokenizer",
        "bytes",
    ]
    assert main(["eval", str(ckpt), *args]) == 0
    assert model_of(str(ckpt.parent), {}, TrainSettings(), None, given=True)[1] is None
    if importlib.util.find_spec("lm_eval") is not None:
        with pytest.raises(
            zoo.ConfigError, match="'bytes' has no end-of-text token"
        ):  # past the record, to the given one
            _harness(str(ckpt), tokenizer="bytes")
    capsys.readouterr()


@pytest.mark.parametrize(
    "record",
    [{"name": "gpt2"}, {"name": "bytes"}, "bytes", {"name": "tokens"}, {"files": {"tokenizer.json": BYTES_SHA}}],
)
def test_records_of_names_and_kept_files_still_read(record: Any, other: Path, tmp_path: Path) -> None:
    ckpt = saved(tmp_path, record)
    if isinstance(record, dict) and "files" in record:
        (tmp_path / "run" / "tokenizer").mkdir()
        (tmp_path / "run" / "tokenizer" / "tokenizer.json").write_bytes(byte_files()["tokenizer.json"])
    found = recorded_tokenizer(ckpt)
    name = record if isinstance(record, str) else record.get("name")
    if name == "tokens":  # in-memory data's description: no tokenizer to load
        assert found is None
    else:
        assert found is not None and found.decode(found.encode("hi there")) == "hi there"
    assert zoo.load(ckpt).tokenizer_record == {
        **({"name": record} if isinstance(record, str) else record),
        **({"folder": str(tmp_path / "run" / "tokenizer")} if isinstance(record, dict) and "files" in record else {}),
    }

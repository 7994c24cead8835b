"""Where ``zoo data prepare`` reads documents from: text files, JSON Lines and Parquet
files (one document per record, its text in a named field), and Hugging Face datasets
through the ``datasets`` library (streamed; offline from its cache under
``HF_DATASETS_OFFLINE=1`` / ``HF_HUB_OFFLINE=1``, as ``datasets`` itself decides).

A text file is one document; a record is one document, so a ``.jsonl`` of three records
prepares exactly as three text files holding the same texts, in the same order.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from zoo.errors import ConfigError, InputError, ZooError, checked_types, printable, quoted
from zoo.files import open_read

#: File suffixes read as records (one document each) rather than as one text.
RECORD_SUFFIXES = {".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet"}
#: The field of a record that holds its text, unless ``--field`` names another.
DEFAULT_FIELD = "text"


@checked_types()
def read_text(path: str | os.PathLike[str]) -> str:
    """The UTF-8 text of the regular file ``path`` (a byte-order mark at its start dropped:
    it marks the encoding, it is not text), with an error that says what to pass instead."""
    try:
        with open_read(path, InputError, "data file") as handle:
            data: bytes = handle.read()
    except OSError as err:
        raise InputError(f"cannot read data file {quoted(str(path))}: {err.strerror or err}") from err
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise InputError(
            f"data file {quoted(str(path))} is not UTF-8 text ({err.reason} at byte {err.start}); convert it to "
            f"UTF-8, or leave it out of the corpus"
        ) from err


def utf8(text: str, where: str) -> bytes:
    """``text`` as UTF-8 bytes, refusing what no UTF-8 spells: a lone surrogate (a JSON
    ``"\\ud800"`` escape, a string from a dataset) names its place."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise InputError(
            f"{where} holds a lone surrogate ({quoted(err.object[err.start : err.end])} at character {err.start}), "
            f"which is not text: no UTF-8 spells it; fix or drop that text"
        ) from err


def documents(path: Path, field: str = DEFAULT_FIELD) -> Iterator[str]:
    """The documents of one input file: its text, or each record's ``field``."""
    kind = RECORD_SUFFIXES.get(path.suffix.lower())
    if kind is None:
        yield read_text(path)
    elif kind == "jsonl":
        yield from _jsonl(path, field)
    else:
        yield from _parquet(path, field)


def _text_of(record: Any, field: str, where: str) -> str:
    if not isinstance(record, dict):
        raise InputError(f"{where} is not a JSON object with a {field!r} field; each line must be one record")
    if field not in record:
        keys = ", ".join(repr(printable(k, 40)) for k in list(record)[:8]) or "none"
        raise InputError(
            f"{where} has no field {field!r} (its fields: {keys}); name the text field with --field (of zoo data "
            f"prepare)"
        )
    text = record[field]
    if not isinstance(text, str):
        raise InputError(
            f"{where}: field {field!r} is {type(text).__name__}, not text; name a text field with --field (of zoo "
            f"data prepare)"
        )
    return text


def _jsonl(path: Path, field: str) -> Iterator[str]:
    """Each line's record's ``field``, the file opened as ``read_text``'s (a regular file,
    a leading byte-order mark dropped)."""
    try:
        with open_read(path, InputError, "data file") as raw, io.TextIOWrapper(raw, encoding="utf-8-sig") as handle:
            for number, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                where = f"{quoted(str(path))} line {number}"
                try:  # json's own parser: a record's other fields may hold NaN or long numbers, as Python writes them
                    record = json.loads(line)
                except (ValueError, RecursionError) as err:
                    raise InputError(
                        f"{where} is not valid JSON ({printable(str(err), 120)}); each line must be one record"
                    ) from err
                yield _text_of(record, field, where)
    except UnicodeDecodeError as err:
        raise InputError(f"data file {quoted(str(path))} is not UTF-8 ({err.reason} at byte {err.start})") from err
    except OSError as err:
        raise InputError(f"cannot read data file {quoted(str(path))}: {err.strerror or err}") from err


def _parquet(path: Path, field: str) -> Iterator[str]:
    try:
        import pyarrow.parquet as pq
    except ImportError as err:
        raise ConfigError(f"reading {quoted(str(path))} needs pyarrow: `pip install 'zoo-lm[data]'`") from err
    try:
        table = pq.ParquetFile(path)
    except Exception as err:  # pyarrow's ArrowInvalid and OSError: not a Parquet file
        raise InputError(f"{quoted(str(path))} is not a Parquet file ({printable(str(err), 120)})") from err
    names = table.schema_arrow.names
    if field not in names:
        shown = ", ".join(repr(printable(n, 40)) for n in names[:8])
        raise InputError(
            f"{quoted(str(path))} has no column {field!r} (its columns: {shown}); name it with --field (of zoo data "
            f"prepare)"
        )
    for texts in _column_batches(table, field, path):
        for number, text in enumerate(texts):
            if not isinstance(text, str):
                raise InputError(
                    f"{quoted(str(path))}: column {field!r} holds {type(text).__name__} (row {number} of a batch), "
                    f"not text; name a text column with --field (of zoo data prepare)"
                )
            yield text


def _column_batches(table: Any, field: str, path: Path) -> Iterator[list[Any]]:
    """The values of column ``field`` of the Parquet file ``table``, a batch at a time; a
    page damaged past its footer is an error naming the file (never a write error)."""
    damaged = f"{quoted(str(path))} is damaged: a page of its column {field!r} cannot be read"
    for batch in _read(table.iter_batches(columns=[field]), damaged, "write it again, or leave it out of the corpus"):
        yield batch.column(0).to_pylist()


def _read(items: Iterator[Any], damaged: str, fix: str) -> Iterator[Any]:
    """``items``, each read error of the library behind them (pyarrow's, datasets') an
    ``InputError``: ``damaged`` (what cannot be read), the error, then ``fix``; a zoo error
    passes as it is. Raised while reading, so never taken for an error writing the output."""
    while True:
        try:
            item = next(items, _END)
        except ZooError:
            raise
        except Exception as err:  # pyarrow's ArrowException and OSError, datasets' own: the data is damaged
            raise InputError(f"{damaged} ({type(err).__name__}: {printable(str(err), 160)}); {fix}") from err
        if item is _END:
            return
        yield item


_END = object()


def dataset_documents(name: str, config: str | None, split: str, field: str = DEFAULT_FIELD) -> Iterator[str]:
    """Each record's ``field`` of a Hugging Face dataset (a hub id or a local folder), streamed."""
    try:
        import datasets
    except ImportError as err:
        raise ConfigError("--dataset needs the datasets library: `pip install 'zoo-lm[data]'`") from err
    try:
        stream = datasets.load_dataset(name, config, split=split, streaming=True)
    except Exception as err:  # datasets raises many types: not found, offline, no such split or config
        raise InputError(
            f"cannot open dataset {quoted(name)} (config {config!r}, split {split!r}): {printable(str(err), 300)}; "
            "check --dataset, --dataset-config and --split (offline, the dataset must be in the datasets cache)"
        ) from err
    damaged = f"dataset {quoted(name)} is damaged: a record of split {split!r} cannot be read"
    fix = "fetch or write the dataset again (check --dataset, --dataset-config and --split)"
    for number, record in enumerate(_read(iter(stream), damaged, fix)):
        yield _text_of(record, field, f"dataset {quoted(name)} record {number}")

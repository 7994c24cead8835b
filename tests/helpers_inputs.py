"""Hostile inputs for the probe and the corpus readers: a folder of damaged, odd and
special files (``hostile_folder``), a fingerprint of a folder's files to show none was
removed or rewritten (``fingerprint``), and the CLI run in-process under a time limit,
so that a hang fails the test instead of stalling it (``cli``).

Imported as ``from helpers_inputs import ...`` (pytest puts tests/ on sys.path).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import zoo
from zoo.cli import main

#: The model every probe case builds: one layer of 16 dimensions, byte tokens.
TINY_PROBE = ["--set", "n_layers=1", "--set", "d_model=16", "--set", "n_heads=2", "--set", "vocab_size=256"]
PROBE = ["probe", "gpt2-small", *TINY_PROBE, "--tokenizer", "bytes", "--batch-size", "1", "--seq-len", "8"]

#: Lines of ``.jsonl`` files, by name: wrong field types, nulls, nesting, odd encodings.
RECORDS = {
    "number": '{"text": 5}\n',
    "null": '{"text": null}\n',
    "nested": '{"text": {"a": "b"}}\n',
    "array": "[1, 2]\n",
    "absent": '{"body": "some text"}\n',
    "broken": '{"text": "a"}\n{"text": \n',
    "deep": "[" * 50_000 + "]" * 50_000 + "\n",
    "nan": '{"text": NaN}\n',
    "bigint": '{"text": 1' + "0" * 5000 + "}\n",
    "surrogate": '{"text": "ab\\ud800cd"}\n' * 50,
    "nul": '{"text": "a\\u0000b"}\n' * 50,
    "empty_record": '{"text": ""}\n',
    "bom": "\ufeff" + '{"text": "hello world"}\n' * 50,
    "crlf": '{"text": "hello world"}\r\n' * 50,
    "other_fields": ('{"id": ' + "9" * 60 + ', "score": NaN, "meta": {"a": [1]}, "text": "hello world"}\n') * 50,
}


def hostile_folder(root: Path) -> Path:
    """``root`` filled with the inputs the cases name: text files empty, binary, with NUL
    bytes, Latin-1, with a byte-order mark, too short; a FIFO, a symbolic link loop, folders
    empty and looping; ``.jsonl`` files of ``RECORDS``; Parquet files of wrong column types
    or a damaged page; checkpoints garbage and truncated, a folder of no versions, one of two
    versions that are different models, Hugging Face folders with a broken ``config.json``;
    and a file the probe must not replace."""
    root.mkdir(parents=True, exist_ok=True)
    text = "hello world, this is a line of text.\n" * 40
    files = {
        "empty.txt": b"",
        "binary.txt": bytes(range(256)) * 4,
        "nul.txt": b"hello\0world" * 100,
        "latin1.txt": "caf\xe9 ".encode("latin-1") * 100,
        "bom.txt": b"\xef\xbb\xbf" + text.encode(),
        "plain.txt": text.encode(),
        "short.txt": b"ab",
        "keep.json": b'{"mine": true}\n',
        "garbage.safetensors": b"garbage" * 10,
    }
    for name, data in files.items():
        (root / name).write_bytes(data)
    for name, lines in RECORDS.items():
        (root / f"{name}.jsonl").write_text(lines, encoding="utf-8", newline="")
    os.mkfifo(root / "fifo.txt")
    (root / "loop").symlink_to(root / "loop")
    (root / "emptydir").mkdir()
    (root / "loopdir").mkdir()
    (root / "loopdir" / "self").symlink_to(root / "loopdir")
    (root / "loopdir" / "a.txt").write_text(text)
    (root / "noversions").mkdir()
    (root / "noversions" / "notes.txt").write_text("not a checkpoint")
    for name, config in (("hf_broken", b"{broken"), ("hf_list", b"[1, 2]"), ("hf_binary", b"\xff\xfe")):
        (root / name).mkdir()
        (root / name / "config.json").write_bytes(config)
    model = zoo.build("gpt2-small", n_layers=1, d_model=16, n_heads=2, vocab_size=256, max_seq_len=32)
    zoo.save(model, root / "good.safetensors")
    raw = (root / "good.safetensors").read_bytes()
    (root / "truncated.safetensors").write_bytes(raw[: len(raw) // 2])
    zoo.save(
        zoo.build("gpt2-small", n_layers=1, d_model=16, n_heads=2, vocab_size=97), root / "small_vocab.safetensors"
    )
    zoo.save(model, root / "two_models")  # a folder whose versions are different models: no update between them
    zoo.save(zoo.build("gpt2-small", n_layers=1, d_model=32, n_heads=2, vocab_size=256), root / "two_models")
    _parquet(root)
    return root


def _parquet(root: Path) -> None:
    """Parquet files whose ``text`` column is not text, or absent; a file that only claims to be one."""
    (root / "fake.parquet").write_bytes(b"PAR1 not parquet PAR1")
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return
    pq.write_table(pa.table({"text": [1, 2, 3]}), root / "numbers.parquet")
    pq.write_table(pa.table({"text": ["a", None, "b"]}), root / "nulls.parquet")
    pq.write_table(pa.table({"text": [{"a": "x"}]}), root / "struct.parquet")
    pq.write_table(pa.table({"body": ["a"]}), root / "absent.parquet")
    pq.write_table(pa.table({"text": pa.array([b"ab\xff"], pa.binary())}), root / "binary.parquet")
    table = pa.table({"text": ["some text " * 50] * 400})
    pq.write_table(table, root / "corrupt.parquet", row_group_size=100, compression="none")
    raw = bytearray((root / "corrupt.parquet").read_bytes())
    raw[len(raw) // 3 : len(raw) // 3 + 2000] = b"\xff" * 2000  # a page damaged, the footer intact
    (root / "corrupt.parquet").write_bytes(bytes(raw))


def fingerprint(root: Path) -> dict[str, str]:
    """Each entry under ``root`` (not following links): a regular file by its SHA-256,
    anything else by its kind, so that a file removed, rewritten or replaced shows."""
    seen: dict[str, str] = {}
    for folder, names, files in os.walk(root):
        for name in names + files:
            path = Path(folder) / name
            if path.is_symlink():
                seen[str(path)] = f"link to {os.readlink(path)}"
            elif path.is_file():
                seen[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
            else:
                seen[str(path)] = "fifo" if path.is_fifo() else "folder" if path.is_dir() else "other"
    return seen


@contextmanager
def time_limit(seconds: int) -> Iterator[None]:
    """Fail with ``TimeoutError`` when the block runs past ``seconds`` (a hang, say on a FIFO)."""

    def expired(signum: int, frame: object) -> None:
        raise TimeoutError(f"no answer within {seconds} s: the command hangs")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def cli(argv: list[str], seconds: int = 30) -> int:
    """``zoo ARGV`` in this process, its exit status; a hang fails within ``seconds``."""
    with time_limit(seconds):
        return main(argv)


def manifest_tokens(folder: Path) -> tuple[int, int]:
    """The training and validation tokens a prepared folder's manifest counts."""
    splits = json.loads((folder / "manifest.json").read_text())["splits"]
    return splits["train"]["tokens"], splits["val"]["tokens"]

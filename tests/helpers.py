"""Helpers shared by the test modules: tiny configs that build in milliseconds, and
byte-level edits of checkpoint files (re-signed with a fresh digest unless ``signed=False``).

Imported as ``from helpers import TINY, tiny`` (pytest puts tests/ on sys.path);
fixtures live in conftest.py, plain helpers here.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import safetensors.torch
import torch

import zoo
from zoo.checkpoint import digest

# Small enough for every test to build many models; big enough to have heads and layers.
TINY: dict[str, Any] = dict(vocab_size=97, max_seq_len=64, d_model=32, n_layers=2, n_heads=4, dropout=0.0)


def tiny(name: str = "gpt2-small", **overrides: Any) -> zoo.DecoderLM:
    """Preset ``name`` shrunk to TINY sizes, with overrides, seeded."""
    torch.manual_seed(0)
    return zoo.build(name, **{**TINY, **overrides}).eval()


def split_file(raw: bytes) -> tuple[dict[str, Any], bytes]:
    """A safetensors file's JSON header (as a dict) and its data section."""
    (length,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8 : 8 + length]), raw[8 + length :]


def join_file(header: dict[str, Any], data: bytes) -> bytes:
    """The inverse of ``split_file``: header padded with spaces to 8 bytes, as safetensors does."""
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def resign(raw: bytes) -> bytes:
    """``raw`` with ``zoo.digest`` recomputed over its (possibly edited) contents."""
    header, data = split_file(raw)
    tensors = safetensors.torch.load(raw)
    header["__metadata__"]["zoo.digest"] = digest(header["__metadata__"], tensors)
    return join_file(header, data)


def edit_metadata(raw: bytes, *, signed: bool = True, **changes: str | None) -> bytes:
    """Set (or with ``None`` remove) metadata entries; ``zoo_config`` means ``zoo.config``."""
    header, data = split_file(raw)
    for key, value in changes.items():
        key = key.replace("zoo_", "zoo.", 1)
        if value is None:
            header["__metadata__"].pop(key, None)
        else:
            header["__metadata__"][key] = value
    edited = join_file(header, data)
    return resign(edited) if signed else edited


def edit_config(raw: bytes, *, signed: bool = True, **changes: Any) -> bytes:
    """Update fields of ``zoo.config`` (its JSON object) with ``changes``."""
    header, _ = split_file(raw)
    config = json.loads(header["__metadata__"]["zoo.config"])
    config.update(changes)
    return edit_metadata(raw, signed=signed, zoo_config=json.dumps(config))


def edit_tensors(raw: bytes, change: Callable[[dict[str, torch.Tensor]], None], *, signed: bool = True) -> bytes:
    """Rewrite the tensors through ``change(tensors)`` (in place), keeping the metadata."""
    header, _ = split_file(raw)
    tensors = safetensors.torch.load(raw)
    change(tensors)
    edited = safetensors.torch.save(tensors, metadata=header["__metadata__"])
    return resign(edited) if signed else edited


# -- a Hugging Face hub cache, laid out as huggingface_hub lays it out ----------------------


def put_in_hub_cache(
    cache: Path, repo_id: str, folder: Path, *, revision: str = "main", commit: str | None = None
) -> str:
    """Store the files of ``folder`` (a model transformers saved) in the hub cache ``cache``
    as the client does: ``models--ORG--NAME/blobs/HASH`` (git's sha1 for small files,
    sha256 for weights, as LFS names them), ``snapshots/COMMIT/PATH`` relative symlinks
    to the blobs, and ``refs/REVISION`` holding the commit. Returns the commit."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    if commit is None:
        listing = hashlib.sha1()
        for p in files:
            listing.update(p.relative_to(folder).as_posix().encode() + hashlib.sha256(p.read_bytes()).digest())
        commit = listing.hexdigest()
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    for p in files:
        data = p.read_bytes()
        if p.suffix in (".safetensors", ".bin"):
            blob = hashlib.sha256(data).hexdigest()
        else:
            blob = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        (repo / "blobs" / blob).write_bytes(data)
        link = repo / "snapshots" / commit / p.relative_to(folder)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(repo / "blobs" / blob, link.parent))
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / revision).write_text(commit)  # no newline, as the client writes it
    return commit


def bundled_lines(count: int | None = None) -> list[str]:
    """Lines of the bundled corpus (Shakespeare), blank ones dropped."""
    from zoo.training.data import bundled_corpus

    lines = [line for line in bundled_corpus().splitlines() if line.strip()]
    return lines[:count] if count else lines


def train_tokenizer(folder: Path, kind: str = "bpe", vocab_size: int = 400, **special: str) -> Path:
    """A ``tokenizer.json`` trained with Hugging Face ``tokenizers`` on the bundled text,
    saved by transformers (with tokenizer_config.json) into ``folder``: ``kind`` is
    ``"bpe"`` (byte-level, GPT-2's design), ``"wordpiece"`` (BERT's) or ``"metaspace"``
    (a SentencePiece-style BPE with byte fallback, Llama's design). ``special``: the
    special tokens by role, e.g. ``eos_token="<|endoftext|>"``."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tokens = list(dict.fromkeys(special.values()))
    if kind == "bpe":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size, special_tokens=tokens, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        )
    elif kind == "wordpiece":
        tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
        tok.normalizer = normalizers.BertNormalizer(lowercase=False)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.decoder = decoders.WordPiece()
        trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=["[UNK]", *tokens])
    elif kind == "metaspace":
        tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>", fuse_unk=True))
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
        tok.decoder = decoders.Sequence(
            [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
        )
        bytes_ = [f"<0x{b:02X}>" for b in range(256)]
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<unk>", *tokens, *bytes_])
    else:
        raise ValueError(kind)
    tok.train_from_iterator(bundled_lines(3000), trainer=trainer)
    bos = special.get("bos_token")
    if bos is not None:
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, tok.token_to_id(bos))]
        )
    extra = {"unk_token": "[UNK]"} if kind == "wordpiece" else {"unk_token": "<unk>"} if kind == "metaspace" else {}
    PreTrainedTokenizerFast(tokenizer_object=tok, **extra, **special).save_pretrained(folder)
    return folder


#: The zoo command, as a fresh Python process runs it.
ZOO = [sys.executable, "-m", "zoo"]


def run(
    command: list[str], env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``command`` in a subprocess with ``env`` added to this one's, its output as text."""
    return subprocess.run(
        command, capture_output=True, text=True, timeout=300, env={**os.environ, **(env or {})}, cwd=cwd
    )

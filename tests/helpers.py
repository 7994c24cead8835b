"""Helpers shared by the test modules: tiny configs that build in milliseconds, and
byte-level edits of checkpoint files (re-signed with a fresh digest unless ``signed=False``).

Imported as ``from helpers import TINY, tiny`` (pytest puts tests/ on sys.path);
fixtures live in conftest.py, plain helpers here.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
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

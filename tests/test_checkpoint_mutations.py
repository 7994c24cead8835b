"""The mutation suite: hundreds of damaged variants of real checkpoints, each of which
``zoo.load`` and ``inspect`` must refuse with a CheckpointError naming the file, and
nothing else.

Two real checkpoints (a tied GPT-2-style model and an untied post-norm 2017-style one)
are damaged family by family: truncation, byte flips in the header and in the data,
header-length lies, trailing bytes, edited metadata and config JSON, changed dtypes and
shapes, dropped and added tensors, raised formats. "Signed" variants get a correct
digest for their edited contents, so the checks behind the digest are what must catch
them; those also run with ``verify=False``. Variants only the digest can catch run with
``verify=True`` and, with ``verify=False``, must either load or raise a CheckpointError:
never a raw SafetensorError, KeyError, RuntimeError or JSONDecodeError.
"""

from __future__ import annotations

import io
import itertools
import json
import random
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import safetensors.torch
import torch

import zoo
from helpers import tiny
from test_checkpoint import edit_config, edit_metadata, edit_tensors, join_file, split_file
from zoo import CheckpointError
from zoo.checkpoint import FORMAT, inspect


class Variant(NamedTuple):
    label: str
    raw: bytes
    digest_only: bool  # True: only the digest can tell (run with verify=True)


Family = Callable[[bytes, bool], Iterator[Variant]]  # (checkpoint bytes, slow) -> variants
Change = Callable[[dict[str, torch.Tensor]], None]  # edits a file's tensors in place


# -- the families ----------------------------------------------------------------------


def _header_end(raw: bytes) -> int:
    return 8 + struct.unpack("<Q", raw[:8])[0]


def truncations(raw: bytes, slow: bool) -> Iterator[Variant]:
    end = _header_end(raw)
    header_step, data_step = (1, 97) if slow else (79, (len(raw) - end) // 30)
    cuts = {*range(0, 17), *range(17, end, header_step), *range(end, len(raw), data_step)}
    cuts |= {end - 1, end, end + 1, len(raw) - 1}
    for cut in sorted(cuts):
        yield Variant(f"truncated at {cut}", raw[:cut], False)


def header_flips(raw: bytes, slow: bool) -> Iterator[Variant]:
    end = _header_end(raw)
    masks = (0x01, 0x20, 0x80, 0xFF) if slow else (0x01, 0x80)
    positions = range(0, end) if slow else range(0, end, 59)
    for position in positions:
        for mask in masks:
            flipped = bytearray(raw)
            flipped[position] ^= mask
            yield Variant(f"header byte {position} ^ {mask:#04x}", bytes(flipped), True)


def data_flips(raw: bytes, slow: bool) -> Iterator[Variant]:
    end = _header_end(raw)
    rng = random.Random(len(raw))
    for i in range(400 if slow else 60):
        position = rng.randrange(end, len(raw))
        flipped = bytearray(raw)
        flipped[position] ^= (0x01, 0x80, 0xFF)[i % 3]
        yield Variant(f"data byte {position} flipped", bytes(flipped), True)


def length_lies(raw: bytes, slow: bool) -> Iterator[Variant]:
    length = _header_end(raw) - 8
    for lie in (0, 1, 7, 8, length - 8, length - 1, length + 1, length + 8, len(raw) - 8, len(raw),
                2**31, 2**32 + length, 2**63, 2**64 - 1):  # fmt: skip
        yield Variant(f"header length {lie}", struct.pack("<Q", lie) + raw[8:], False)


def trailing_bytes(raw: bytes, slow: bool) -> Iterator[Variant]:
    for extra in (b"\0", b"\0" * 8, b" " * 8, bytes(range(256)), raw):
        yield Variant(f"{len(extra)} trailing bytes", raw + extra, False)


def metadata_edits(raw: bytes, slow: bool) -> Iterator[Variant]:
    for key in ("zoo.format", "zoo.version", "zoo.created", "zoo.config", "zoo.components", "zoo.ties", "zoo.metadata"):
        yield Variant(f"{key} removed", edit_metadata(raw, **{key.replace(".", "_"): None}), False)
    yield Variant("zoo.digest removed", edit_metadata(raw, signed=False, zoo_digest=None), True)
    for value in (str(FORMAT + 1), "3", "999", "10000000000", "-1", "x", "", "1.0", " 1", "01", "0", "１"):
        yield Variant(f"zoo.format = {value!r}", edit_metadata(raw, zoo_format=value), False)
    for value in ("", "sha256:" + "0" * 64, "xxh3_128:" + "0" * 32, "xxh3_128:zz", "XXH3_128:00"):
        yield Variant(f"zoo.digest = {value!r}", edit_metadata(raw, signed=False, zoo_digest=value), True)
    bad_json = ("{", "[]", "null", '"text"', "1", "[" * 100_000, '{"a":' * 50_000, "NaN", "{}x")
    for key in ("zoo.config", "zoo.components", "zoo.ties", "zoo.metadata"):
        for value in bad_json:
            yield Variant(f"{key} = {value[:12]!r}", edit_metadata(raw, **{key.replace(".", "_"): value}), False)
    for value in ('{"attention": 1}', '{"attention": {"name": 5}}', '{"norm": []}'):
        yield Variant(f"zoo.components = {value}", edit_metadata(raw, zoo_components=value), False)
    for value in ('{"head.weight": "blocks.0.attn.qkv.weight"}', '{"a": 1}', '{"tok_emb.weight": "head.weight"}'):
        yield Variant(f"zoo.ties = {value}", edit_metadata(raw, zoo_ties=value), False)
    for value in ("yesterday", "", "2024-13-45T00:00:00"):
        yield Variant(f"zoo.created = {value!r}", edit_metadata(raw, zoo_created=value), False)
    # Plausible edits only the digest can see.
    yield Variant("zoo.version edited", edit_metadata(raw, signed=False, zoo_version="0.0.9"), True)
    yield Variant("zoo.metadata edited", edit_metadata(raw, signed=False, zoo_metadata='{"step": 1}'), True)
    yield Variant("zoo.created edited", edit_metadata(raw, signed=False, zoo_created="2001-01-01T00:00:00+00:00"), True)
    yield Variant("unknown key added", edit_metadata(raw, signed=False, zoo_extra="1"), True)


# Config edits that no tiny model of either base can load, each with a correct digest.
BAD_CONFIG: list[dict[str, Any]] = [
    *({"vocab_size": v} for v in (0, -1, 10**9, "x", 1.5, None, 98)),
    *({"d_model": v} for v in (0, 33, 64, 2**20)),
    *({"n_layers": v} for v in (0, 1, 3, 10**6)),
    *({"n_heads": v} for v in (0, 3, 5, 64)),
    *({"d_ff": v} for v in (0, 64, -3)),
    {"max_seq_len": 0}, {"max_seq_len": 2**30},
    {"dropout": 1.5}, {"dropout": {"attention": -0.1}}, {"dropout": {"typo": 0.1}},
    {"norm_eps": 0}, {"norm_eps": "tiny"}, {"embedding_scale": "x"}, {"head_output": "probs"},
    {"final_norm": "maybe"}, {"bias": "maybe"}, {"architecture": "rnn"}, {"architecture": "encoder_decoder"},
    {"secret": 1}, {"__class__": "os.system"},
    *({kind: name} for kind in zoo.KINDS for name in ("", "nope", "os.system", "../plugins/x")),
    {"attention": {"name": "sdpa", "flash": True}}, {"position": {"name": "sinusoidal", "base": -1}},
    {"attention": 5}, {"norm": {"eps": 1}},
]  # fmt: skip


def config_edits(raw: bytes, slow: bool) -> Iterator[Variant]:
    config = json.loads(split_file(raw)[0]["__metadata__"]["zoo.config"])
    for change in BAD_CONFIG:
        yield Variant(f"config {change}", edit_config(raw, **change), False)
    yield Variant("config: bias flipped", edit_config(raw, bias=not config["bias"]), False)
    yield Variant("config: ties flipped", edit_config(raw, tie_embeddings=not config["tie_embeddings"]), False)
    yield Variant("config: dropout edited, unsigned", edit_config(raw, signed=False, dropout=0.25), True)
    yield Variant("config: norm_eps edited, unsigned", edit_config(raw, signed=False, norm_eps=1e-3), True)


def replacing(name: str, make: Callable[[torch.Tensor], torch.Tensor]) -> Change:
    """A change for ``edit_tensors`` that replaces tensor ``name`` by ``make(it)``."""

    def change(tensors: dict[str, torch.Tensor]) -> None:
        tensors[name] = make(tensors[name])

    return change


def adding(name: str, make: Callable[[dict[str, torch.Tensor]], torch.Tensor]) -> Change:
    def change(tensors: dict[str, torch.Tensor]) -> None:
        tensors[name] = make(tensors)

    return change


def reshaped(tensor: torch.Tensor) -> torch.Tensor:
    """Same elements, another shape: (n,) -> (n, 1), (a, b) -> (a * b,)."""
    return tensor.reshape(-1, 1) if tensor.dim() == 1 else tensor.reshape(-1)


def tensor_edits(raw: bytes, slow: bool) -> Iterator[Variant]:
    names = sorted(safetensors.torch.load(raw))
    for name in names[:: 1 if slow else 2]:
        yield Variant(f"{name} dropped", edit_tensors(raw, lambda t, n=name: t.pop(n)), False)
    extras = ["extra.weight", f"{names[0]}.copy", "blocks.7.attn.qkv.weight", "head.bias"]
    if "head.weight" not in names:
        extras.append("head.weight")  # a tied weight stored twice
    for extra in extras:
        yield Variant(f"{extra} added", edit_tensors(raw, adding(extra, lambda t: t["tok_emb.weight"].clone())), False)
    for name in names[:: 1 if slow else 6]:
        for dtype in (torch.int32, torch.int64, torch.uint8, torch.bool):
            yield Variant(f"{name} as {dtype}", edit_tensors(raw, replacing(name, lambda t, d=dtype: t.to(d))), False)
        for dtype in (torch.float16, torch.bfloat16, torch.float64):  # a mixed-precision file is legal once signed
            change = replacing(name, lambda t, d=dtype: t.to(d))
            yield Variant(f"{name} as {dtype}, unsigned", edit_tensors(raw, change, signed=False), True)
        yield Variant(f"{name} reshaped", edit_tensors(raw, replacing(name, reshaped)), False)
        shifted = replacing(name, lambda t: t + 0.001)
        yield Variant(f"{name} values changed, unsigned", edit_tensors(raw, shifted, signed=False), True)


def header_json_edits(raw: bytes, slow: bool) -> Iterator[Variant]:
    """Edits of the safetensors header itself, keeping the data section as it is."""
    header, data = split_file(raw)
    entries = {k: v for k, v in header.items() if k != "__metadata__"}
    pairs = {}
    for name, entry in sorted(entries.items()):
        pairs.setdefault((entry["dtype"], tuple(entry["shape"])), []).append(name)
    tensors = safetensors.torch.load(raw)
    swappable = [
        (a, b) for names in pairs.values() for a, b in itertools.combinations(names, 2)
        if not torch.equal(tensors[a], tensors[b])  # swapping equal tensors changes nothing
    ]
    for a, b in swappable[: None if slow else 6]:
        yield Variant(f"{a} and {b} swapped", join_file({**header, a: header[b], b: header[a]}, data), True)

    def edited(name: str, **changes: Any) -> bytes:
        """The file with header entry ``name`` changed, data untouched."""
        return join_file({**header, name: {**header[name], **changes}}, data)

    for name, entry in sorted(entries.items())[:: 1 if slow else 5]:
        start, stop = entry["data_offsets"]
        for dtype in ("I32", "U32", "F16", "I8", "BOOL", "F64", "Q4", ""):
            yield Variant(f"{name} dtype {dtype}", edited(name, dtype=dtype), False)
        for shape in ([*entry["shape"][::-1], 1], [entry["shape"][0] * 2], [0], [-1], ["x"], []):
            yield Variant(f"{name} shape {shape}", edited(name, shape=shape), False)
        for offsets in ([start, stop - 1], [start + 1, stop], [start, stop + 4], [stop, start], [0, len(data) + 4]):
            yield Variant(f"{name} offsets {offsets}", edited(name, data_offsets=offsets), False)
        yield Variant(f"{name} one offset", edited(name, data_offsets=[start]), False)
    yield Variant("no __metadata__", join_file(entries, data), False)
    yield Variant("zoo.format as a number", edited("__metadata__", **{"zoo.format": 1}), False)
    yield Variant("__metadata__ a list", join_file({**header, "__metadata__": [1]}, data), False)
    text = json.dumps(header, separators=(",", ":")).encode() + b"}x"
    text += b" " * (-len(text) % 8)
    yield Variant("header followed by garbage", struct.pack("<Q", len(text)) + text + data, False)


def foreign_files(raw: bytes, slow: bool) -> Iterator[Variant]:
    rng = random.Random(0)
    yield Variant("empty file", b"", False)
    yield Variant("8 zero bytes", b"\0" * 8, False)
    yield Variant("random bytes", bytes(rng.randrange(256) for _ in range(4096)), False)
    yield Variant("a JSON file", b'{"vocab_size": 97}', False)
    yield Variant("an empty safetensors file", join_file({}, b""), False)
    yield Variant("plain safetensors weights", safetensors.torch.save(safetensors.torch.load(raw)), False)
    pickled = io.BytesIO()
    torch.save(tiny().state_dict(), pickled)
    yield Variant("a torch.save pickle", pickled.getvalue(), False)


FAMILIES: list[Family] = [
    truncations, header_flips, data_flips, length_lies, trailing_bytes,
    metadata_edits, config_edits, tensor_edits, header_json_edits, foreign_files,
]  # fmt: skip


# -- running them ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def bases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """Two real checkpoints: tied GPT-2-style, and untied post-norm 2017-style."""
    folder = tmp_path_factory.mktemp("bases")
    return {
        "tied": zoo.save(tiny(), folder / "tied.safetensors").read_bytes(),
        "untied": zoo.save(tiny("transformer-2017", tie_embeddings=False), folder / "untied.safetensors").read_bytes(),
    }


def refusals(variants: Iterator[Variant], folder: Path) -> tuple[int, list[str]]:
    """Load every variant; returns how many ran and what went wrong."""
    failures, count = [], 0
    for index, variant in enumerate(variants):
        count += 1
        path = folder / f"variant-{index}.safetensors"
        path.write_bytes(variant.raw)
        calls = [(zoo.load, True), (inspect, True)] + ([] if variant.digest_only else [(zoo.load, False)])
        for call, verify in calls:
            try:
                call(path, verify=verify)
            except CheckpointError as err:
                if str(path) not in str(err):
                    failures.append(f"{variant.label} ({call.__name__}): message lacks the path: {err}")
            except Exception as err:  # the bug this suite hunts
                failures.append(f"{variant.label} ({call.__name__}, verify={verify}): {type(err).__name__}: {err}")
            else:
                failures.append(f"{variant.label} ({call.__name__}, verify={verify}): no error")
        if variant.digest_only:  # unverified, it may load; but only a CheckpointError may escape
            try:
                zoo.load(path, verify=False)
            except CheckpointError:
                pass
            except Exception as err:
                failures.append(f"{variant.label} (verify=False): {type(err).__name__}: {err}")
        path.unlink()  # a new inode for the next variant; loaded models keep their mapping
    return count, failures


# How many variants each family makes per base in the default run, at least.
MINIMUM = {
    truncations: 80, header_flips: 120, data_flips: 60, length_lies: 14, trailing_bytes: 5,
    metadata_edits: 70, config_edits: 70, tensor_edits: 40, header_json_edits: 100, foreign_files: 7,
}  # fmt: skip


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.__name__)
@pytest.mark.parametrize("base", ["tied", "untied"])
def test_every_variant_is_refused(base: str, family: Family, bases: dict[str, bytes], tmp_path: Path) -> None:
    count, failures = refusals(family(bases[base], False), tmp_path)
    assert count >= MINIMUM[family]
    assert not failures, f"{len(failures)} of {count} variants:\n" + "\n".join(failures[:30])


def test_default_run_has_at_least_500_variants(bases: dict[str, bytes]) -> None:
    # Count what test_every_variant_is_refused actually feeds to load: distinct damaged files.
    assert set(MINIMUM) == set(FAMILIES)
    distinct = {v.raw for raw in bases.values() for family in FAMILIES for v in family(raw, False)}
    assert not distinct & set(bases.values()), "a variant equals its undamaged base"
    assert len(distinct) >= 500


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.__name__)
@pytest.mark.parametrize("base", ["tied", "untied"])
def test_every_variant_is_refused_exhaustive(base: str, family: Family, bases: dict[str, bytes], tmp_path: Path) -> None:
    count, failures = refusals(family(bases[base], True), tmp_path)
    assert not failures, f"{len(failures)} of {count} variants:\n" + "\n".join(failures[:30])


def test_a_damaged_version_leaves_the_others_loadable(tmp_path: Path) -> None:
    run = tmp_path / "run"
    model = tiny()
    zoo.save(model, run)
    latest = zoo.save(model, run)
    raw = bytearray(latest.read_bytes())
    raw[len(raw) // 2] ^= 0x10
    latest.unlink()
    latest.write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match="v0002.safetensors is damaged"):
        zoo.load(run)
    assert torch.equal(zoo.load(run, version=1).tok_emb.weight, model.tok_emb.weight)
    assert [v.version for v in zoo.versions(run)] == [1, 2]  # headers are intact

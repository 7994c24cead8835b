"""Checkpoints at their limits: allocation checked before materialising, mixed and float8
dtypes, a downgrade that drops the digest, two files for one version, long names and
deep metadata, and the digest helpers against the file on disk.

(Once ``test_hardening.py``, by the items of issue 9.)
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import safetensors.torch
import torch

import zoo
from helpers import edit_config, edit_metadata, edit_tensors, join_file, split_file, tiny
from zoo import CheckpointError, ConfigError
from zoo.checkpoint import digest, inspect


def big_config_file(tmp_path: Path, **config: Any) -> Path:
    """A signed checkpoint with no tensors whose config is legal but large."""
    raw = edit_tensors(zoo.save(tiny(), tmp_path / "small.safetensors").read_bytes(), lambda t: t.clear())
    path = tmp_path / "huge.safetensors"
    path.write_bytes(edit_config(raw, **config))
    return path


def test_strict_false_refuses_to_allocate_what_the_file_does_not_hold(tmp_path: Path) -> None:
    path = big_config_file(tmp_path, d_model=2048, n_layers=10, n_heads=16, vocab_size=50257, max_seq_len=1024)
    assert path.stat().st_size < 4096
    with pytest.raises(CheckpointError, match=r"strict=False.*allocate and initialise [0-9.]+ GiB"):
        zoo.load(path, strict=False)
    with pytest.raises(CheckpointError, match="missing"):
        zoo.load(path)  # strict: the missing tensors are the error


def test_a_build_larger_than_memory_is_refused_before_allocating() -> None:
    config = dict(d_model=16384, n_layers=30, n_heads=64, vocab_size=50257, max_seq_len=1024)
    assert zoo.build("gpt2-small", device="meta", **config).num_parameters() < 200e9  # legal
    with pytest.raises(ConfigError, match=r"would allocate [0-9.]+ GiB on cpu, but only"):
        zoo.build("gpt2-small", **config)


def test_save_refuses_mixed_float_dtypes_and_float8(tmp_path: Path) -> None:
    model = tiny()
    model.blocks[0].to(torch.bfloat16)
    with pytest.raises(CheckpointError, match="mixes floating-point dtypes.*bfloat16.*float32"):
        zoo.save(model, tmp_path / "mixed.safetensors")
    model = tiny()
    model.blocks[0].mlp.to(torch.float8_e4m3fn)
    with pytest.raises(CheckpointError, match="float8_e4m3fn.*not float8"):
        zoo.save(model, tmp_path / "f8.safetensors")
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float64, torch.float16])
def test_load_refuses_a_mixed_dtype_file_unless_dtype_is_given(dtype: torch.dtype, tmp_path: Path) -> None:
    raw = zoo.save(tiny(), tmp_path / "m.safetensors").read_bytes()
    path = tmp_path / "mixed.safetensors"
    path.write_bytes(
        edit_tensors(raw, lambda t: t.update({"blocks.0.mlp.up.weight": t["blocks.0.mlp.up.weight"].to(dtype)}))
    )
    with pytest.raises(
        CheckpointError, match=f"mixes floating-point dtypes.*{str(dtype).removeprefix('torch.')}.*dtype="
    ):
        zoo.load(path)
    model = zoo.load(path, dtype="fp32")
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert model(torch.tensor([[1, 2, 3]])).isfinite().all()


def test_load_refuses_float8_tensors(tmp_path: Path) -> None:
    raw = zoo.save(tiny(), tmp_path / "m.safetensors").read_bytes()
    path = tmp_path / "f8.safetensors"
    f8 = torch.float8_e4m3fn
    path.write_bytes(
        edit_tensors(raw, lambda t: t.update({k: v.to(f8) for k, v in t.items() if v.is_floating_point()}))
    )
    for dtype in (None, "fp32"):
        with pytest.raises(CheckpointError, match="float8_e4m3fn.*not float8"):
            zoo.load(path, dtype=dtype)


class PassThroughMigration:
    """A migration plugin that upgrades format 0 by leaving the file as it is."""

    @zoo.hookimpl
    def zoo_migrate_checkpoint(self, metadata: dict[str, str], tensors: dict[str, Any], from_format: int) -> Any:
        return (metadata, tensors) if from_format == 0 else None


def test_a_file_downgraded_to_format_0_without_its_digest_never_loads_verified(tmp_path: Path) -> None:
    model = tiny()
    raw = zoo.save(model, tmp_path / "m.safetensors").read_bytes()
    tampered = edit_tensors(raw, lambda t: t["blocks.0.attn.qkv.weight"].add_(1.0), signed=False)
    path = tmp_path / "tampered.safetensors"
    path.write_bytes(edit_metadata(tampered, signed=False, zoo_format="0", zoo_digest=None))
    registry = zoo.Registry(plugins=[PassThroughMigration()])
    with pytest.raises(CheckpointError, match=f"{path} cannot be verified.*format 0"):
        zoo.load(path, registry=registry)
    with pytest.raises(CheckpointError, match="cannot be verified"):
        inspect(path, registry=registry)
    loaded = zoo.load(path, registry=registry, verify=False)  # the caller's explicit choice
    assert not torch.equal(loaded.blocks[0].attn.qkv.weight, model.blocks[0].attn.qkv.weight)


def test_two_files_for_one_version_are_an_error_naming_both(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    first = zoo.save(tiny(), run_dir)
    (run_dir / "v1.safetensors").write_bytes(zoo.save(tiny(n_layers=1), tmp_path / "other.safetensors").read_bytes())
    for call in (lambda: zoo.load(run_dir, version=1), lambda: zoo.load(run_dir), lambda: zoo.versions(run_dir),
                 lambda: inspect(run_dir), lambda: zoo.save(tiny(), run_dir)):  # fmt: skip
        with pytest.raises(CheckpointError, match=r"two files for version 1: v0001.safetensors and v1.safetensors"):
            call()
    assert first.name == "v0001.safetensors"


def test_too_long_names_are_checkpoint_errors(tmp_path: Path) -> None:
    name = "n" * 300
    for call in (lambda: zoo.load(tmp_path / f"{name}.safetensors"), lambda: zoo.save(tiny(), tmp_path / name),
                 lambda: zoo.versions(tmp_path / name), lambda: zoo.save(tiny(), tmp_path / f"{name}.safetensors"),
                 lambda: zoo.load(tmp_path / name / "x.safetensors")):  # fmt: skip
        with pytest.raises(CheckpointError, match=r"is 3\d\d bytes long.*use a shorter name") as caught:
            call()
        assert len(str(caught.value)) < 600


def test_a_legal_long_name_saves_although_its_temporary_name_would_not_fit(tmp_path: Path) -> None:
    limit = os.pathconf(tmp_path, "PC_NAME_MAX")
    path = tmp_path / ("é" * ((limit - len(".safetensors")) // 2) + ".safetensors")  # 2 bytes a character
    assert limit - 2 < len(os.fsencode(path.name)) <= limit
    model = tiny()
    zoo.save(model, path)
    assert torch.equal(zoo.load(path).tok_emb.weight, model.tok_emb.weight)
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary left behind


def test_deeply_nested_metadata_is_a_checkpoint_error(tmp_path: Path) -> None:
    deep: Any = "x"
    for _ in range(5000):
        deep = {"a": deep}
    with pytest.raises(CheckpointError, match="nests more than 8 levels"):
        zoo.save(tiny(), tmp_path / "m.safetensors", metadata={"deep": deep})
    shallow = {"a": {"b": {"c": [1, 2, {"d": "e"}]}}}
    path = zoo.save(tiny(), tmp_path / "ok.safetensors", metadata=shallow)
    assert inspect(path).metadata == shallow
    raw = path.read_bytes()
    path.write_bytes(edit_metadata(raw, zoo_metadata='{"a":' * 5000 + "1" + "}" * 5000))
    with pytest.raises(CheckpointError, match="zoo.metadata is not valid JSON"):
        inspect(path)


def test_digest_helpers_still_agree_with_the_written_file(tmp_path: Path) -> None:
    """The ctypes byte view hashes exactly the bytes on disk."""
    path = zoo.save(tiny(), tmp_path / "m.safetensors")
    header, _ = split_file(path.read_bytes())
    assert digest(header["__metadata__"], safetensors.torch.load_file(path)) == header["__metadata__"]["zoo.digest"]
    assert join_file(header, b"")[:8]  # the helpers stay importable together

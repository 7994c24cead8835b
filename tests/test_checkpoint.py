"""Checkpoints: round trips over presets and components, versions, provenance, migration.

The helpers at the top read and rewrite real safetensors files at the byte level (the
8-byte header length, the JSON header, the data); ``resign`` recomputes the digest so
a test can reach the checks behind it. test_checkpoint_mutations.py uses them too.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import pickle
import struct
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import safetensors.torch
import torch
from torch import nn

import zoo
from helpers import TINY, edit_config, edit_metadata, edit_tensors, join_file, split_file, tiny
from zoo import CheckpointError
from zoo.checkpoint import FORMAT, digest, inspect
from zoo.nn.factory import dtype_arg


@pytest.fixture(autouse=True, scope="module")
def one_thread() -> Iterator[None]:
    """Tiny models run fastest on one thread; two spin-wait badly on a busy machine."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


# -- comparing models ------------------------------------------------------------------


def logits(model: nn.Module, idx: torch.Tensor) -> torch.Tensor:
    if model.config.architecture == "encoder_decoder":
        return model(idx, idx)
    return model(idx)


def assert_same_model(model: nn.Module, loaded: nn.Module) -> None:
    """Same class, config, tensors (buffers included), ties and logits."""
    assert type(loaded) is type(model)
    assert loaded.config == model.config
    ours, theirs = dict(model.named_buffers()), dict(loaded.named_buffers())
    ours.update(model.state_dict())
    theirs.update(loaded.state_dict())
    assert ours.keys() == theirs.keys()
    for name, tensor in ours.items():
        assert theirs[name].dtype == tensor.dtype, name
        assert torch.equal(theirs[name], tensor), name
    assert not any(t.is_meta for t in itertools.chain(loaded.parameters(), loaded.buffers()))
    if model.config.tie_embeddings:
        assert loaded.head.weight is loaded.tok_emb.weight
    else:
        assert loaded.head.weight is not loaded.tok_emb.weight
    assert not loaded.training
    idx = torch.randint(0, model.config.vocab_size, (2, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(logits(loaded, idx), logits(model.eval(), idx))


# -- round trips -----------------------------------------------------------------------


@pytest.mark.parametrize("preset", zoo.list_models())
def test_every_preset_round_trips(preset: str, tmp_path: Path) -> None:
    model = tiny(preset)
    path = zoo.save(model, tmp_path / "model.safetensors")
    assert path == tmp_path / "model.safetensors"
    assert_same_model(model, zoo.load(path))


@pytest.mark.parametrize("component", zoo.components(), ids=lambda c: f"{c.kind}-{c.name}")
def test_every_component_round_trips(component: zoo.Component, tmp_path: Path) -> None:
    model = tiny("gpt2-small", **{component.kind: component.name})  # every component fits TINY
    assert_same_model(model, zoo.load(zoo.save(model, tmp_path / "ckpt")))


@pytest.mark.parametrize("overrides", [dict(tie_embeddings=False), dict(tie_embeddings=False, bias=False)])
def test_untied_model_round_trips(overrides: dict[str, Any], tmp_path: Path) -> None:
    model = tiny(**overrides)
    path = zoo.save(model, tmp_path / "untied.safetensors")
    info = inspect(path)
    assert info.ties == {} and "head.weight" in {t.name for t in info.tensors}
    assert_same_model(model, zoo.load(path))


def test_tied_weight_is_stored_once(tmp_path: Path) -> None:
    model = tiny()
    path = zoo.save(model, tmp_path / "tied.safetensors")
    info = inspect(path)
    assert info.ties == {"head.weight": "tok_emb.weight"}
    names = {t.name for t in info.tensors}
    assert "head.weight" not in names and "tok_emb.weight" in names
    stored = sum(t.numel() * t.element_size() for t in model.parameters())  # parameters() dedups ties
    header_length = struct.unpack("<Q", path.read_bytes()[:8])[0]
    assert path.stat().st_size == 8 + header_length + stored


def test_dtype_converts_on_load_and_bf16_round_trips(tmp_path: Path) -> None:
    model = tiny()
    path = zoo.save(model, tmp_path / "fp32.safetensors")
    for dtype in (torch.bfloat16, torch.float16, "bf16", "fp32"):
        loaded = zoo.load(path, dtype=dtype)
        want = dtype_arg(dtype)
        assert {p.dtype for p in loaded.parameters()} == {want}
        assert loaded.head.weight is loaded.tok_emb.weight
        assert torch.equal(loaded.tok_emb.weight, model.tok_emb.weight.to(want))
    half = zoo.load(path, dtype=torch.bfloat16)
    assert_same_model(half, zoo.load(zoo.save(half, tmp_path / "bf16.safetensors")))
    with pytest.raises(CheckpointError, match="floating-point dtype"):
        zoo.load(path, dtype=torch.int8)


def test_loaded_weights_are_memory_mapped_not_copied(tmp_path: Path) -> None:
    model = tiny(d_model=64)
    path = zoo.save(model, tmp_path / "m.safetensors")
    loaded = zoo.load(path, verify=False)
    # A memory-mapped storage is not resizable and is backed by the file, not malloc.
    storage = loaded.tok_emb.weight.untyped_storage()
    assert not storage.resizable()
    converted = zoo.load(path, dtype=torch.bfloat16)
    assert converted.tok_emb.weight.untyped_storage().resizable()  # a real copy


@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")  # torch's own imports
def test_compiled_and_ddp_models_save_under_plain_names(tmp_path: Path) -> None:
    model = tiny()
    compiled = torch.compile(model)
    assert any(k.startswith("_orig_mod.") for k in compiled.state_dict())
    path = zoo.save(compiled, tmp_path / "compiled.safetensors")
    assert all(not t.name.startswith(("_orig_mod.", "module.")) for t in inspect(path).tensors)
    assert_same_model(model, zoo.load(path))

    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available():
        pytest.skip("torch.distributed is not available")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    try:
        wrapped = torch.compile(nn.parallel.DistributedDataParallel(model))
        path = zoo.save(wrapped, tmp_path / "ddp.safetensors")
    finally:
        dist.destroy_process_group()
    assert all(not t.name.startswith(("_orig_mod.", "module.")) for t in inspect(path).tensors)
    assert_same_model(model, zoo.load(path))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_models_save_and_load_on_a_device(tmp_path: Path) -> None:
    model = tiny().cuda()
    path = zoo.save(model, tmp_path / "cuda.safetensors")
    loaded = zoo.load(path, device="cuda", dtype=torch.bfloat16)
    assert loaded.tok_emb.weight.device.type == "cuda" and loaded.tok_emb.weight.dtype == torch.bfloat16
    assert loaded.head.weight is loaded.tok_emb.weight
    assert torch.equal(loaded.tok_emb.weight, model.tok_emb.weight.to(torch.bfloat16))
    assert_same_model(model.cpu(), zoo.load(path))


# -- versions --------------------------------------------------------------------------


def test_directory_keeps_numbered_versions(tmp_path: Path) -> None:
    run = tmp_path / "run"
    models = []
    for step in range(3):
        model = tiny()
        with torch.no_grad():
            model.tok_emb.weight.add_(step)
        models.append(model)
        assert zoo.save(model, run, metadata={"step": step, "note": f"s{step}"}) == run / f"v{step + 1:04d}.safetensors"
    found = zoo.versions(run)
    assert [v.version for v in found] == [1, 2, 3]
    assert [v.metadata for v in found] == [{"step": s, "note": f"s{s}"} for s in range(3)]
    assert all(v.format == FORMAT and v.zoo_version == zoo.__version__ for v in found)
    assert found[0].created <= found[1].created <= found[2].created
    assert found[0].created.tzinfo is not None
    assert_same_model(models[2], zoo.load(run))
    assert_same_model(models[0], zoo.load(run, version=1))
    (run / "v0002.safetensors").unlink()  # a deleted version's number is never reused
    assert zoo.save(models[0], run) == run / "v0004.safetensors"
    assert sorted(p.name for p in run.iterdir()) == ["v0001.safetensors", "v0003.safetensors", "v0004.safetensors"]


def test_single_file_is_replaced_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "model.safetensors"
    zoo.save(tiny(), path, metadata={"run": 1})
    zoo.save(tiny(), path, metadata={"run": 2})
    assert inspect(path).metadata == {"run": 2}
    assert list(path.parent.iterdir()) == [path]
    umask = os.umask(0o022)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask  # as any new file, not safetensors' 0600


def test_inspect_reports_the_header(tmp_path: Path) -> None:
    model = tiny()
    run = tmp_path / "run"
    zoo.save(model, run, metadata={"step": 10})
    zoo.save(model, run, metadata={"step": 20})
    info = inspect(run, version=1)
    assert (info.path, info.version, info.format) == (run / "v0001.safetensors", 1, FORMAT)
    assert info.config == model.config and info.metadata == {"step": 10}
    assert info.digest_ok is True and inspect(run, verify=False).digest_ok is None
    assert [v.version for v in info.versions] == [1, 2]
    assert info.components["attention"] == zoo.checkpoint.ComponentRecord(
        "sdpa", "zoo.plugins.attention", "zoo-lm", zoo.__version__
    )
    assert set(info.components) == set(zoo.KINDS)
    shapes = {t.name: t.shape for t in info.tensors}
    assert shapes["blocks.0.attn.qkv.weight"] == (3 * 32, 32)
    assert {t.dtype for t in info.tensors} == {"float32"}
    assert info.file_size == info.path.stat().st_size
    assert inspect(run / "v0002.safetensors").versions is None


# -- provenance ------------------------------------------------------------------------

SQUARED_RELU = '''
import torch
import zoo


class SquaredReLU(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x) ** 2


def squared_relu():
    """ReLU squared (So et al., 2021, Primer)."""
    return SquaredReLU()


@zoo.hookimpl
def zoo_register_components(register):
    register("activation", "squared_relu", squared_relu)
'''


@pytest.fixture
def plugin_distribution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[zoo.Registry]:
    """A throwaway installed distribution zoo-ckpt-testplugin 1.2.3 (a real entry point);
    yields a registry that loads it (and no other third-party plugin)."""
    monkeypatch.delenv("ZOO_PLUGINS", raising=False)
    monkeypatch.delenv("ZOO_DISABLE_PLUGINS", raising=False)
    site = tmp_path / "site"
    (site / "zoo_ckpt_testplugin").mkdir(parents=True)
    (site / "zoo_ckpt_testplugin" / "__init__.py").write_text(textwrap.dedent(SQUARED_RELU))
    info = site / "zoo_ckpt_testplugin-1.2.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: zoo-ckpt-testplugin\nVersion: 1.2.3\n")
    (info / "entry_points.txt").write_text("[zoo]\nckpt_testplugin = zoo_ckpt_testplugin\n")
    monkeypatch.syspath_prepend(str(site))
    yield zoo.Registry(allow=["ckpt_testplugin"])
    sys.modules.pop("zoo_ckpt_testplugin", None)


def test_missing_plugin_error_names_its_distribution(plugin_distribution: zoo.Registry, tmp_path: Path) -> None:
    registry = plugin_distribution
    torch.manual_seed(0)
    model = zoo.build("gpt2-small", registry=registry, activation="squared_relu", **TINY).eval()
    path = zoo.save(model, tmp_path / "primer.safetensors", registry=registry)
    record = inspect(path, registry=registry).components["activation"]
    assert (record.name, record.plugin, record.distribution, record.version) == (
        "squared_relu",
        "ckpt_testplugin",
        "zoo-ckpt-testplugin",
        "1.2.3",
    )
    assert_same_model(model, zoo.load(path, registry=registry))

    builtins_only = zoo.Registry(entry_points=False)
    with pytest.raises(CheckpointError) as err:
        zoo.load(path, registry=builtins_only)
    message = str(err.value)
    assert str(path) in message and "activation 'squared_relu' comes from" in message
    assert "pip install zoo-ckpt-testplugin (1.2.3 wrote this checkpoint)" in message
    info = inspect(path, registry=builtins_only)  # still inspectable: config stays a dict
    assert isinstance(info.config, dict) and info.config["activation"]["name"] == "squared_relu"


def test_missing_unpackaged_plugin_says_to_pass_a_registry(tmp_path: Path) -> None:
    class Plugin:
        @zoo.hookimpl
        def zoo_register_components(self, register: Any) -> None:
            register("activation", "negrelu", lambda: nn.ReLU())

    registry = zoo.Registry(entry_points=False, plugins=[Plugin()])
    model = zoo.build("gpt2-small", registry=registry, activation="negrelu", **TINY)
    path = zoo.save(model, tmp_path / "m.safetensors", registry=registry)
    with pytest.raises(CheckpointError, match=r"comes from plugin 'Plugin-0', which is not an installed distribution"):
        zoo.load(path, registry=zoo.Registry(entry_points=False))
    with pytest.raises(CheckpointError, match="Pass the registry the model was built with"):
        zoo.save(model, tmp_path / "other.safetensors", registry=zoo.Registry(entry_points=False))


@pytest.mark.skipif(importlib.util.find_spec("zoo_modern") is None, reason="zoo-modern is not installed")
def test_installed_third_party_plugin_is_recorded(tmp_path: Path) -> None:
    model = tiny(position="rotary", mlp="swiglu")
    path = zoo.save(model, tmp_path / "modern.safetensors")
    records = inspect(path).components
    assert records["position"].distribution == records["mlp"].distribution == "zoo-lm-modern"
    with pytest.raises(
        CheckpointError,
        match="position 'rotary' and mlp 'swiglu' come from the distribution zoo-lm-modern .*pip install zoo-lm-modern",
    ):
        zoo.load(path, registry=zoo.Registry(entry_points=False))


# -- formats and migrations ------------------------------------------------------------


def test_newer_format_is_refused_naming_its_writer(tmp_path: Path) -> None:
    raw = zoo.save(tiny(), tmp_path / "m.safetensors").read_bytes()
    future = tmp_path / "future.safetensors"
    future.write_bytes(edit_metadata(raw, zoo_format=str(FORMAT + 1), zoo_version="9.4.0"))
    for verify in (True, False):
        with pytest.raises(CheckpointError) as err:
            zoo.load(future, verify=verify)
        assert f"format {FORMAT + 1}, written by zoo 9.4.0" in str(err.value)
        assert "pip install -U zoo-lm" in str(err.value) and str(future) in str(err.value)


def write_format0(model: nn.Module, path: Path, *, signed: bool = True) -> None:
    """A synthetic older layout: config under ``zoo.model_config`` with the activation
    called ``gelu_approx``, tensors under ``transformer.``, head stored, and a digest
    over it all (``signed``) or none."""
    config = model.config.model_dump(mode="json")
    config["activation"] = {"name": "gelu_approx"}
    tensors = {f"transformer.{k}": v.clone() for k, v in model.state_dict().items()}
    metadata = {"zoo.format": "0", "zoo.version": "0.0.1", "zoo.model_config": json.dumps(config)}
    if signed:
        metadata["zoo.digest"] = digest(metadata, tensors)
    safetensors.torch.save_file(tensors, path, metadata=metadata)


class LayoutMigration:
    """Format 0 -> 1: moves the config, strips the prefix, drops the stored tied head."""

    @zoo.hookimpl
    def zoo_migrate_checkpoint(self, metadata: dict[str, str], tensors: dict[str, Any], from_format: int) -> Any:
        if from_format != 0:
            return None
        config = json.loads(metadata["zoo.model_config"])
        ties = {"head.weight": "tok_emb.weight"} if config.get("tie_embeddings", True) else {}
        upgraded = {
            "zoo.version": metadata["zoo.version"],
            "zoo.created": "2019-02-14T00:00:00+00:00",
            "zoo.config": json.dumps(config),
            "zoo.components": "{}",
            "zoo.ties": json.dumps(ties),
            "zoo.metadata": json.dumps({"migrated_from": from_format}),
        }
        renamed = {k.removeprefix("transformer."): v for k, v in tensors.items()}
        return upgraded, {k: v for k, v in renamed.items() if k not in ties}


class ActivationRename:
    """Runs after LayoutMigration at the same step: renames an old component."""

    @zoo.hookimpl
    def zoo_migrate_checkpoint(self, metadata: dict[str, str], tensors: dict[str, Any], from_format: int) -> Any:
        if from_format != 0 or "zoo.config" not in metadata:
            return None
        config = json.loads(metadata["zoo.config"])
        if config["activation"]["name"] == "gelu_approx":
            config["activation"] = {"name": "gelu_tanh"}
        return {**metadata, "zoo.config": json.dumps(config)}, tensors


def test_older_format_loads_through_chained_migrations(tmp_path: Path) -> None:
    model = tiny()
    old = tmp_path / "old.safetensors"
    write_format0(model, old)
    registry = zoo.Registry(entry_points=False, plugins=[LayoutMigration(), ActivationRename()])
    assert_same_model(model, zoo.load(old, registry=registry))
    info = inspect(old, registry=registry)
    assert (info.format, info.digest_ok, info.metadata) == (0, True, {"migrated_from": 0})
    # Saved again, it is a current-format file that needs no plugin.
    again = zoo.save(zoo.load(old, registry=registry), tmp_path / "again.safetensors")
    assert inspect(again).format == FORMAT


def test_older_format_without_a_migration_is_an_error(tmp_path: Path) -> None:
    old = tmp_path / "old.safetensors"
    write_format0(tiny(), old)
    with pytest.raises(CheckpointError, match="format 0 .*no installed plugin migrates format 0 to 1"):
        zoo.load(old, registry=zoo.Registry(entry_points=False))
    only_layout = zoo.Registry(entry_points=False, plugins=[LayoutMigration()])
    with pytest.raises(CheckpointError, match="unknown activation component 'gelu_approx'"):
        zoo.load(old, registry=only_layout)


@pytest.mark.parametrize(
    ("result", "match"),
    [(ValueError("bad step"), "plugin 'Broken-0' failed to migrate .* ValueError: bad step"),
     ("not a tuple", "plugin 'Broken-0' migrated format 0 but returned str")],
)  # fmt: skip
def test_a_failing_migration_is_reported_with_its_plugin(result: Any, match: str, tmp_path: Path) -> None:
    class Broken:
        @zoo.hookimpl
        def zoo_migrate_checkpoint(self, metadata: Any, tensors: Any, from_format: int) -> Any:
            if isinstance(result, Exception):
                raise result
            return result

    old = tmp_path / "old.safetensors"
    write_format0(tiny(), old)
    with pytest.raises(CheckpointError, match=match):
        zoo.load(old, registry=zoo.Registry(entry_points=False, plugins=[Broken()]))


# -- what load refuses -----------------------------------------------------------------


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    return zoo.save(tiny(), tmp_path / "model.safetensors")


def test_missing_unexpected_and_mismatched_are_listed_together(saved: Path, tmp_path: Path) -> None:
    def damage(tensors: dict[str, torch.Tensor]) -> None:
        del tensors["blocks.1.mlp.up.bias"]
        tensors["blocks.9.attn.extra"] = torch.zeros(3)
        tensors["final_norm.weight"] = torch.ones(31)
        tensors["blocks.0.attn.out.weight"] = tensors["blocks.0.attn.out.weight"].to(torch.int32)

    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(edit_tensors(saved.read_bytes(), damage))
    with pytest.raises(CheckpointError) as err:
        zoo.load(bad)
    message = str(err.value)
    for expected in (
        "missing: blocks.1.mlp.up.bias",
        "unexpected: blocks.9.attn.extra",
        "final_norm.weight has shape (31,), expected (32,)",
        "blocks.0.attn.out.weight has dtype int32, expected a floating-point dtype",
        str(bad),
    ):
        assert expected in message


def test_strict_false_ignores_extras_and_initialises_missing(saved: Path, tmp_path: Path) -> None:
    def damage(tensors: dict[str, torch.Tensor]) -> None:
        del tensors["blocks.1.mlp.up.weight"]
        tensors["unused.weight"] = torch.zeros(2)

    partial = tmp_path / "partial.safetensors"
    partial.write_bytes(edit_tensors(saved.read_bytes(), damage))
    model, loaded = tiny(), zoo.load(partial, strict=False)
    fresh = loaded.blocks[1].mlp.up.weight
    assert torch.isfinite(fresh).all() and 0.005 < fresh.std() < 0.05  # gpt2 init: N(0, 0.02)
    assert torch.equal(loaded.blocks[0].mlp.up.weight, model.blocks[0].mlp.up.weight)
    assert loaded.head.weight is loaded.tok_emb.weight


def test_shape_mismatch_is_an_error_even_when_not_strict(saved: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(edit_tensors(saved.read_bytes(), lambda t: t.update({"final_norm.bias": torch.zeros(4)})))
    with pytest.raises(CheckpointError, match=r"final_norm.bias has shape \(4,\), expected \(32,\)"):
        zoo.load(bad, strict=False)


def test_verify_catches_a_flipped_byte_that_verify_false_would_load(saved: Path, tmp_path: Path) -> None:
    raw = bytearray(saved.read_bytes())
    raw[-5] ^= 0x40  # inside the last tensor's data
    flipped = tmp_path / "flipped.safetensors"
    flipped.write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match="do not match the digest"):
        zoo.load(flipped)
    altered = zoo.load(flipped, verify=False)  # the documented escape hatch
    assert not all(
        torch.equal(a, b) for a, b in zip(altered.state_dict().values(), tiny().state_dict().values(), strict=True)
    )


def test_two_tensors_swapped_in_the_header_are_caught(saved: Path, tmp_path: Path) -> None:
    header, data = split_file(saved.read_bytes())
    a, b = "blocks.0.attn.qkv.weight", "blocks.1.attn.qkv.weight"
    header[a], header[b] = header[b], header[a]
    swapped = tmp_path / "swapped.safetensors"
    swapped.write_bytes(join_file(header, data))
    with pytest.raises(CheckpointError, match="do not match the digest"):
        zoo.load(swapped)


@pytest.mark.parametrize(
    ("change", "match"),
    [(dict(n_heads=5), "d_model=32 is not divisible by n_heads=5"),
     (dict(secret="x"), "secret: Extra inputs are not permitted"),
     (dict(vocab_size=10**9), "vocab_size: Input should be less than or equal"),
     (dict(attention="os.system"), "config names the attention component 'os.system' but"),
     (dict(n_layers=3), "missing: blocks.2."),
     (dict(tie_embeddings=False), "missing: head.weight")],
)  # fmt: skip
def test_invalid_config_is_a_checkpoint_error(saved: Path, tmp_path: Path, change: dict[str, Any], match: str) -> None:
    bad = tmp_path / "config.safetensors"
    bad.write_bytes(edit_config(saved.read_bytes(), **change))
    with pytest.raises(CheckpointError, match=match) as err:
        zoo.load(bad)
    assert str(bad) in str(err.value)


def test_load_runs_no_pickle(saved: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the load path must not unpickle")

    for target, name in ((pickle, "load"), (pickle, "loads"), (pickle, "Unpickler"), (torch, "load")):
        monkeypatch.setattr(target, name, refuse)
    assert_same_model(tiny(), zoo.load(saved))


def test_path_errors_say_what_to_do(tmp_path: Path, saved: Path) -> None:
    with pytest.raises(CheckpointError, match="no checkpoint at .*nowhere"):
        zoo.load(tmp_path / "nowhere")
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / ".v.1234-abcd.tmp").write_bytes(b"partial")  # a crashed save's leftover
    with pytest.raises(CheckpointError, match="holds no checkpoint versions"):
        zoo.load(empty)
    assert zoo.versions(empty) == []
    (empty / "config.json").write_text("{}")
    with pytest.raises(CheckpointError, match="zoo.from_hf"):
        zoo.load(empty)
    run = tmp_path / "run"
    zoo.save(tiny(), run)
    with pytest.raises(CheckpointError, match="has no version 7; its versions are 1"):
        zoo.load(run, version=7)
    for version in (0, -1, True, "1"):
        with pytest.raises(CheckpointError, match="version must be a positive integer"):
            zoo.load(run, version=version)
    with pytest.raises(CheckpointError, match="selects a version of a checkpoint directory"):
        zoo.load(saved, version=1)
    with pytest.raises(CheckpointError, match="is a file, not a checkpoint directory"):
        zoo.versions(saved)
    with pytest.raises(CheckpointError, match="does not exist"):
        zoo.versions(tmp_path / "nowhere")
    (tmp_path / "model.pt").write_bytes(b"x")
    with pytest.raises(CheckpointError, match="is a file, not a checkpoint directory"):
        zoo.save(tiny(), tmp_path / "model.pt")
    plain = tmp_path / "plain.safetensors"
    safetensors.torch.save_file({"w": torch.zeros(2)}, plain)
    with pytest.raises(CheckpointError, match="not a zoo checkpoint: its metadata has no zoo.format"):
        zoo.load(plain)


def test_save_refuses_what_it_could_not_load(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="saves zoo models"):
        zoo.save(nn.Linear(2, 2), tmp_path / "x.safetensors")
    model = tiny()
    model.head.weight = nn.Parameter(model.tok_emb.weight.detach().clone())
    with pytest.raises(CheckpointError, match="head.weight should be tied to tok_emb.weight .*tie_weights"):
        zoo.save(model, tmp_path / "x.safetensors")
    model = tiny()
    model.final_norm = nn.LayerNorm(16)
    with pytest.raises(CheckpointError, match=r"final_norm.weight has shape \(16,\), expected \(32,\)"):
        zoo.save(model, tmp_path / "x.safetensors")
    with pytest.raises(CheckpointError, match="meta device"):
        zoo.save(zoo.build("gpt2-small", device="meta", **TINY), tmp_path / "x.safetensors")
    with pytest.raises(CheckpointError, match="JSON-serialisable"):
        zoo.save(tiny(), tmp_path / "x.safetensors", metadata={"when": object()})
    with pytest.raises(CheckpointError, match="string keys"):
        zoo.save(tiny(), tmp_path / "x.safetensors", metadata={1: "x"})
    assert not list(tmp_path.iterdir())  # nothing written, not even a temporary file


@pytest.mark.parametrize("path", ["", 3, None])
def test_a_path_that_is_not_one_is_a_checkpoint_error(path: Any, tiny_model: zoo.DecoderLM) -> None:
    for call in (lambda: zoo.save(tiny_model, path), lambda: zoo.load(path), lambda: zoo.versions(path)):
        with pytest.raises(zoo.CheckpointError, match="give a file or directory path"):
            call()

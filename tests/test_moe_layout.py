"""zoo-modern's MoE experts stacked, one tensor per projection per layer (as transformers 5
holds them): checkpoints of the older per-expert layout migrate on load and compute what
they did; transformers' stacked files read as its per-expert ones do, and export writes
the names ``save_pretrained`` writes; init schemes draw each expert as a linear layer; the
grouped dispatch has the dense path's gradients; a 48-layer, 128-expert preset is 96
expert tensors, not 6,144 modules."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import safetensors.torch
import torch
from family_cases.moe import CASES

import zoo
from helpers import edit_metadata, perturbed_transformers_model
from zoo.checkpoint import FORMAT, inspect
from zoo.nn.hooks import hook_points

transformers = pytest.importorskip("transformers")
pytest.importorskip("zoo_modern")

FIXTURES = Path(__file__).parent / "fixtures"
OLD = ("moe-format1-gpt2", "moe-format1-llama")  # written by the per-expert code (zoo-modern before stacking)
TINY: dict[str, Any] = {"vocab_size": 97, "max_seq_len": 32, "d_model": 32, "n_layers": 2, "n_heads": 4}
ROUTING = {"name": "moe", "n_experts": 4, "top_k": 2, "hidden": 16}


@pytest.mark.parametrize("name", OLD)
def test_a_checkpoint_of_per_expert_modules_loads_stacked_and_computes_as_it_did(name: str, tmp_path: Path) -> None:
    old = FIXTURES / f"{name}.safetensors"
    expected = safetensors.torch.load_file(FIXTURES / "moe-format1-logits.safetensors")
    model = zoo.load(old).eval()
    with torch.no_grad():
        torch.testing.assert_close(model(expected[f"{name}.idx"]), expected[f"{name}.logits"], rtol=0, atol=1e-5)
    stored = safetensors.torch.load_file(old)
    experts = model.blocks[1].mlp.experts
    for e in range(model.config.mlp.options["n_experts"]):
        gate, up = experts.gate_up.weight[e].chunk(2)
        assert torch.equal(gate, stored[f"blocks.1.mlp.experts.{e}.gate.weight"])
        assert torch.equal(up, stored[f"blocks.1.mlp.experts.{e}.up.weight"])
        assert torch.equal(experts.down.weight[e], stored[f"blocks.1.mlp.experts.{e}.down.weight"])
        if experts.down.bias is not None:
            assert torch.equal(experts.down.bias[e], stored[f"blocks.1.mlp.experts.{e}.down.bias"])
    assert (inspect(old).format, FORMAT) == (1, 2)
    again = zoo.save(model, tmp_path / "again.safetensors")  # the current format: no migration needed
    assert inspect(again).format == FORMAT
    assert any(n.endswith("experts.gate_up.weight") for n in safetensors.torch.load_file(again))


def test_a_format_1_file_without_experts_needs_no_plugin_to_load(tmp_path: Path) -> None:
    model = zoo.build("gpt2-small", **TINY)
    saved = zoo.save(model, tmp_path / "dense.safetensors")
    (tmp_path / "old.safetensors").write_bytes(edit_metadata(saved.read_bytes(), zoo_format="1"))
    loaded = zoo.load(tmp_path / "old.safetensors", registry=zoo.Registry(entry_points=False))
    assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), model.state_dict().values()))


def test_a_per_expert_file_missing_an_expert_tensor_is_refused_naming_the_migration(tmp_path: Path) -> None:
    with safetensors.safe_open(FIXTURES / "moe-format1-llama.safetensors", "pt") as f:
        header, tensors = f.metadata(), {name: f.get_tensor(name) for name in f.keys()}  # noqa: SIM118
    del tensors["blocks.0.mlp.experts.1.up.weight"]
    safetensors.torch.save_file(tensors, tmp_path / "damaged.safetensors", metadata=header)
    with pytest.raises(zoo.ZooError, match=r"format 1 to 2.*blocks\.0\.mlp\.experts holds 8 weight tensors"):
        zoo.load(tmp_path / "damaged.safetensors", verify=False)


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_transformers_stacked_files_read_and_export_writes_save_pretrained_names(case: Any, tmp_path: Path) -> None:
    hf = perturbed_transformers_model(case.config, case.model, {**case.fields, "vocab_size": 97})
    hf.save_pretrained(tmp_path / "stacked", save_original_format=False)  # transformers 5's own layout
    hf.save_pretrained(tmp_path / "per-expert")  # what save_pretrained writes by default
    names = set(safetensors.torch.load_file(tmp_path / "stacked" / "model.safetensors"))
    assert any(n.endswith("experts.gate_up_proj") for n in names)
    idx = torch.randint(0, 97, (2, 9), generator=torch.Generator().manual_seed(1))
    model = zoo.from_hf(tmp_path / "stacked")
    with torch.no_grad():
        torch.testing.assert_close(model(idx), hf(idx).logits, atol=1e-4, rtol=0)
    out = zoo.to_hf(model, tmp_path / "out", architecture=case.model)
    written = set(safetensors.torch.load_file(out / "model.safetensors"))
    per_expert = set(safetensors.torch.load_file(tmp_path / "per-expert" / "model.safetensors"))
    assert written == per_expert
    if case.id not in STACKED_ONLY:
        assert written != names
    else:  # GPT-OSS, Llama 4 and Granite-MoE-SWA store their experts stacked, save_pretrained's default too
        assert per_expert == names


STACKED_ONLY = ("gpt-oss", "llama4", "granitemoe-swa")


@pytest.mark.parametrize("init", ["gpt2", "xavier", "torch"])
def test_init_draws_each_expert_as_one_linear_layer(init: str) -> None:
    torch.manual_seed(0)
    model = zoo.build("llama-style-small", **{**TINY, "d_model": 256, "init": init}, mlp={**ROUTING, "hidden": 512})
    gate_up = model.blocks[0].mlp.experts.gate_up.weight  # (4, 1024, 256): one layer of 256 -> 1024 per expert
    down = model.blocks[0].mlp.experts.down.weight  # (4, 256, 512)
    if init == "gpt2":  # N(0, 0.02); the down projections write into the stream: N(0, 0.02 / sqrt(2 L))
        assert gate_up.std().item() == pytest.approx(0.02, rel=0.02)
        assert down.std().item() == pytest.approx(0.02 / math.sqrt(2 * 2), rel=0.02)
        return
    # xavier: U(+-sqrt(6 / (fan_in + fan_out))) of one layer; torch: U(+-1 / sqrt(fan_in))
    bound = math.sqrt(6 / (256 + 1024)) if init == "xavier" else 1 / math.sqrt(256)
    for e in range(4):
        assert bound * 0.99 < gate_up[e].abs().max().item() <= bound


def test_grouped_dispatch_has_the_dense_paths_gradients() -> None:
    torch.manual_seed(0)
    block = zoo.build("gpt2-small", **TINY, mlp={**ROUTING, "shared_hidden": 8}).blocks[0].mlp
    x = torch.randn(11, TINY["d_model"], generator=torch.Generator().manual_seed(2))
    chosen = block.router(x).topk(2).indices
    weights = torch.rand(chosen.shape, generator=torch.Generator().manual_seed(3))
    grads = []
    for path in (block.dispatch, block.dense):
        block.zero_grad()
        (path(x, weights, chosen) ** 2).sum().backward()
        grads.append([p.grad.clone() for p in block.experts.parameters()])
    assert len(grads[0]) == 4  # gate_up and down, weight and bias
    for grouped, dense in zip(*grads, strict=True):
        torch.testing.assert_close(grouped, dense, rtol=1e-5, atol=1e-6)


def test_an_moe_with_a_shared_expert_has_no_activation_or_output_points() -> None:
    """Each expert has its own activation: the MLP's points are the router's logits alone."""
    model = zoo.build("llama-style-small", **TINY, mlp={**ROUTING, "shared_hidden": 8})
    assert [p for p in hook_points(model) if p.startswith("blocks.0.mlp.")] == ["blocks.0.mlp.hook_router"]


def test_qwen3_30b_a3b_is_96_expert_tensors() -> None:
    model = zoo.build("qwen3-30b-a3b", device="meta")  # 6,144 expert modules, 1.3 s, before stacking
    experts = [name for name, _ in model.named_parameters() if ".experts." in name]
    assert len(experts) == 48 * 2 and model.blocks[0].mlp.experts.gate_up.weight.shape == (128, 2 * 768, 2048)
    assert sum(1 for _ in model.modules()) < 1_000

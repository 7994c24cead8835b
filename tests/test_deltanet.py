"""The gated DeltaNet mixer beyond the parity cases (tests/family_cases/hybrids.py): against
transformers' ``Qwen3NextGatedDeltaNet`` and OLMo Hybrid's, the chunked form against the recurrence
step by step, its cache (the convolution's inputs and the state), padding, attention's output gate,
and what the three families' converters refuse, one line each, naming the field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor

import zoo
from helpers import TINY, tiny
from zoo.interop.hf import config_from_hf
from zoo.nn.attention import AttentionContext
from zoo.plugin import ModelConfig

transformers = pytest.importorskip("transformers")
pytest.importorskip("zoo_modern")

from transformers.models.qwen3_next.modeling_qwen3_next import (  # noqa: E402
    Qwen3NextAttention,
    Qwen3NextGatedDeltaNet,
)

from zoo_modern.deltanet import GatedDeltaNet, delta_chunks, delta_step  # noqa: E402
from zoo_modern.families.deltanet_hybrids import gated_qkv, grouped_in_proj, stacked  # noqa: E402
from zoo_modern.qknorm import QkNormAttention  # noqa: E402

HF: dict[str, Any] = {
    "vocab_size": 64,
    "hidden_size": 32,
    "num_hidden_layers": 1,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 8,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "linear_key_head_dim": 8,
    "linear_value_head_dim": 6,
    "layer_types": ["linear_attention"],
}


def randn(*shape: int, seed: int = 0) -> Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def perturbed(module: torch.nn.Module) -> torch.nn.Module:
    with torch.no_grad():
        for i, (_, p) in enumerate(module.named_parameters()):
            p.copy_(randn(*p.shape, seed=i) * 0.3 + 1.0 * (p.ndim == 1))
    return module.eval()


def layer_config(attention: dict[str, Any]) -> ModelConfig:
    return tiny(d_model=32, n_heads=4, attention=attention).config


def mixer_pair(fields: dict[str, Any]) -> tuple[Any, GatedDeltaNet]:
    """transformers' mixer with random weights, and the zoo's with the same (in_proj reordered)."""
    config = transformers.Qwen3NextConfig(**{**HF, **fields})
    reference = perturbed(Qwen3NextGatedDeltaNet(config, layer_idx=0))
    sizes = {"n_k_heads": config.linear_num_key_heads, "n_v_heads": config.linear_num_value_heads}
    sizes |= {"k_head_dim": config.linear_key_head_dim, "v_head_dim": config.linear_value_head_dim}
    sizes |= {"conv_kernel": config.linear_conv_kernel_dim, "chunk_size": fields.get("chunk", 64)}
    mixer = GatedDeltaNet(32, 4, **sizes, norm_eps=config.rms_norm_eps).eval()
    rule = grouped_in_proj("attn.in_proj.weight", ("in_proj_qkvz.weight", "in_proj_ba.weight"), layer_config({"name": "gated_deltanet", **sizes}))  # fmt: skip
    state = dict(reference.state_dict())
    in_proj = rule.load([state.pop("in_proj_qkvz.weight"), state.pop("in_proj_ba.weight")])
    state = {k.replace("conv1d.", "conv."): v for k, v in state.items()} | {"in_proj.weight": in_proj}
    mixer.load_state_dict(state)  # strict: every other parameter under the same name
    saved = rule.save(in_proj)
    assert torch.equal(saved[0], reference.in_proj_qkvz.weight) and torch.equal(saved[1], reference.in_proj_ba.weight)
    return reference, mixer


@pytest.mark.parametrize(
    "fields",
    [{}, {"chunk": 4}, {"linear_num_value_heads": 2, "linear_conv_kernel_dim": 3, "chunk": 5}],
    ids=["one-chunk", "chunks-of-4", "equal-heads"],
)
def test_the_mixer_equals_transformers_gated_deltanet(fields: dict[str, Any]) -> None:
    reference, mixer = mixer_pair(fields)
    x = randn(2, 11, 32, seed=1)
    with torch.no_grad():
        expected = reference(x)
        torch.testing.assert_close(mixer(x, AttentionContext()), expected, rtol=0, atol=1e-5)
    assert expected.abs().max() > 0.1  # not a vanishing output that any mixer would match


@pytest.mark.parametrize("chunk", [1, 3, 7, 32])
def test_the_chunked_form_equals_the_recurrence_step_by_step(chunk: int) -> None:
    q, k = randn(2, 10, 3, 4, seed=1), torch.nn.functional.normalize(randn(2, 10, 3, 4, seed=2), dim=-1)
    v, start = randn(2, 10, 3, 5, seed=3), randn(2, 3, 4, 5, seed=5)
    log_g, beta = -torch.rand(2, 10, 3) * 0.5, torch.rand(2, 10, 3)
    got, final = delta_chunks(q, k, v, log_g, beta, chunk, start)
    state, steps = start, []
    for t in range(10):
        out, state = delta_step(q[:, t], k[:, t], v[:, t], log_g[:, t], beta[:, t], state)
        steps.append(out)
    torch.testing.assert_close(got, torch.stack(steps, dim=1), rtol=0, atol=1e-5)
    torch.testing.assert_close(final, state, rtol=0, atol=1e-5)
    assert not torch.allclose(final, start, atol=1e-3)  # the state moved


def test_a_full_write_replaces_what_the_state_recalls_for_the_key() -> None:
    """beta = 1, no decay: after writing v under a unit key k, reading k returns v exactly."""
    k = torch.nn.functional.normalize(randn(1, 1, 4, seed=1), dim=-1)
    v, state = randn(1, 1, 5, seed=2), randn(1, 1, 4, 5, seed=3)
    out, _ = delta_step(k, k, v, torch.zeros(1, 1), torch.ones(1, 1), state)
    torch.testing.assert_close(out, v, rtol=0, atol=1e-5)


def test_the_cache_keeps_the_convolutions_inputs_and_the_state() -> None:
    spec = {"name": "gated_deltanet", "n_v_heads": 8, "conv_kernel": 3}
    model = tiny(attention=spec, mlp="none")
    mixer = model.blocks[0].attn
    cache = model.new_cache()
    with torch.no_grad():
        model(torch.randint(0, TINY["vocab_size"], (2, 13)), cache=cache)
    assert cache.length == 13 and [layer.stored for layer in cache.layers] == [2] * TINY["n_layers"]
    assert all(layer.state.shape == (2, 8, mixer.dk, mixer.dv) for layer in cache.layers)
    per_layer = 2 * 2 * mixer.conv_dim * 4 + 2 * 8 * mixer.dk * mixer.dv * 4  # inputs, state: float32
    assert cache.nbytes == TINY["n_layers"] * per_layer


def test_left_padding_never_reaches_a_real_token() -> None:
    model = tiny(attention={"name": "gated_deltanet", "chunk_size": 4}, position="none")
    real = torch.randint(0, TINY["vocab_size"], (1, 6))
    padded = torch.cat([torch.randint(0, TINY["vocab_size"], (1, 3)), real], dim=1)
    mask = torch.tensor([[0, 0, 0] + [1] * 6])
    with torch.no_grad():
        torch.testing.assert_close(model(padded, attention_mask=mask)[:, 3:], model(real), rtol=0, atol=1e-5)


def test_unequal_head_counts_are_refused_with_the_fix() -> None:
    with pytest.raises(ValueError, match=r"n_v_heads=3 is a multiple of n_k_heads=2"):
        GatedDeltaNet(32, 4, n_k_heads=2, n_v_heads=3)


def test_the_output_gate_equals_transformers_qwen3_next_attention() -> None:
    """q_proj's query and gate per head, QK-norm scaled by 1 + w, rotary on a quarter of each head."""
    config = transformers.Qwen3NextConfig(**{**HF, "layer_types": ["full_attention"], "partial_rotary_factor": 0.5})
    config._attn_implementation = "eager"
    reference = perturbed(Qwen3NextAttention(config, layer_idx=0))
    spec = {"name": "qknorm", "head_dim": 8, "n_kv_heads": 2, "qk_norm_offset": True, "output_gate": True}
    model = tiny(
        d_model=32, n_heads=4, attention=spec, position={"name": "rotary", "rotary_dim": 4}, norm_eps=1e-6, bias=False
    )
    attn = model.blocks[0].attn
    assert isinstance(attn, QkNormAttention) and attn.gate_dim == 32
    rule = gated_qkv("attn.qkv.weight", ("q", "k", "v"), model.config)
    state = reference.state_dict()
    qkv = rule.load([state["q_proj.weight"], state["k_proj.weight"], state["v_proj.weight"]])
    assert all(
        torch.equal(a, b) for a, b in zip(rule.save(qkv), [state[f"{p}_proj.weight"] for p in "qkv"], strict=True)
    )
    with torch.no_grad():
        attn.load_state_dict({"qkv.weight": qkv, "out.weight": state["o_proj.weight"]} | {f"{p}_norm.weight": state[f"{p}_norm.weight"] for p in "qk"})  # fmt: skip
    x = randn(2, 7, 32, seed=1)
    rotary = transformers.models.qwen3_next.modeling_qwen3_next.Qwen3NextRotaryEmbedding(config)
    positions = torch.arange(7)[None].expand(2, -1)
    mask = torch.full((7, 7), -torch.inf).triu(1)[None, None]
    with torch.no_grad():
        expected, _ = reference(x, rotary(x, positions), mask)
        got = attn(x, AttentionContext(None, True, model.position, model.position.prepare(positions)))
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)


@pytest.mark.parametrize("negative", [True, False], ids=["beta-to-2", "beta-to-1"])
def test_the_mixer_equals_olmo_hybrids_gated_deltanet(negative: bool) -> None:
    """Six projections stacked into in_proj, beta doubled with ``negative_eigenvalues``, the norm's 1e-5."""
    from transformers.models.olmo_hybrid.modeling_olmo_hybrid import OlmoHybridGatedDeltaNet

    fields = {"hidden_size": 32, "num_attention_heads": 4, "num_hidden_layers": 2, "linear_allow_neg_eigval": negative}
    config = transformers.OlmoHybridConfig(**fields, pad_token_id=None, eos_token_id=None)
    reference = perturbed(OlmoHybridGatedDeltaNet(config, layer_idx=0))
    sizes = {"n_k_heads": 4, "n_v_heads": 4, "k_head_dim": 6, "v_head_dim": 12, "chunk_size": 5}
    spec = {"name": "gated_deltanet", **sizes, "negative_eigenvalues": negative, "gate_norm_eps": 1e-5}
    mixer = GatedDeltaNet(32, 4, **{k: v for k, v in spec.items() if k != "name"}).eval()
    assert mixer.norm.eps == 1e-5 and mixer.beta_scale == (2.0 if negative else 1.0)
    rule = stacked("attn.in_proj.weight", tuple(f"{p}_proj.weight" for p in "qkvgba"), layer_config(spec))
    state = reference.state_dict()
    in_proj = rule.load([state[f"{p}_proj.weight"] for p in "qkvgba"])
    renamed = {"conv1d.weight": "conv.weight", "o_norm.weight": "norm.weight", "o_proj.weight": "out_proj.weight"}
    mine = {renamed.get(k, k): v for k, v in state.items() if k in renamed or k in ("A_log", "dt_bias")}
    mixer.load_state_dict(mine | {"in_proj.weight": in_proj})
    x = randn(2, 9, 32, seed=1)
    with torch.no_grad():
        torch.testing.assert_close(mixer(x, AttentionContext()), reference(x), rtol=0, atol=1e-5)


QWEN3_NEXT: dict[str, Any] = {
    "architectures": ["Qwen3NextForCausalLM"],
    "model_type": "qwen3_next",
    **{k: v for k, v in HF.items() if k != "layer_types"},
    "num_hidden_layers": 4,
    "intermediate_size": 40,
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 16,
    "shared_expert_intermediate_size": 24,
}


def test_qwen3_next_reads_the_interval_the_sizes_and_its_gated_attention() -> None:
    fields = config_from_hf({**QWEN3_NEXT, "full_attention_interval": 2})
    delta = {"name": "gated_deltanet", "n_k_heads": 2, "n_v_heads": 4, "k_head_dim": 8, "v_head_dim": 6}
    assert fields["layer_pattern"] == [{"attention": delta | {"conv_kernel": 4}}, {}]  # layers 1 and 3 attend
    assert fields["attention"]["output_gate"] is True and fields["attention"]["qk_norm_offset"] is True
    assert fields["position"]["rotary_dim"] == 2 and fields["norm"] == "rmsnorm_offset"  # a quarter of 8
    assert fields["mlp"]["shared_hidden"] == 24 and fields["mlp"]["normalize_top_k"] is True


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"layer_types": ["linear_attention", "mamba", "full_attention", "full_attention"]}, "layer_types"),
        ({"layer_types": ["full_attention"] * 3}, "layer_types"),
        ({"linear_num_value_heads": 3}, "linear_num_value_heads"),
        ({"full_attention_interval": 0}, "full_attention_interval"),
        ({"decoder_sparse_step": 2}, "decoder_sparse_step"),
        ({"mlp_only_layers": [0]}, "mlp_only_layers"),
        ({"attention_bias": True}, "attention_bias"),
    ],
)
def test_qwen3_next_settings_the_zoo_does_not_model_are_refused_by_name(change: dict[str, Any], named: str) -> None:
    with pytest.raises(zoo.InteropError, match=rf"config.json: {named}=") as caught:
        config_from_hf({**QWEN3_NEXT, **change})
    assert "\n" not in str(caught.value)


def test_olmo_hybrid_refuses_a_model_of_one_kind_of_layer() -> None:
    olmo = {"architectures": ["OlmoHybridForCausalLM"], "model_type": "olmo_hybrid", "vocab_size": 64}
    olmo |= {"hidden_size": 32, "num_attention_heads": 4, "num_hidden_layers": 2, "intermediate_size": 40}
    assert config_from_hf(olmo)["layer_pattern"][0]["placement"] == "pre"  # DeltaNet, then attention (the last)
    with pytest.raises(zoo.InteropError, match=r"config.json: layer_types=.*both kinds of layer"):
        config_from_hf({**olmo, "layer_types": ["linear_attention"] * 2})


def test_export_refuses_what_each_family_cannot_write(tmp_path: Path) -> None:
    fields = {**config_from_hf(QWEN3_NEXT), "max_seq_len": 64}
    delta = fields["layer_pattern"][0]
    wider = {"attention": {**delta["attention"], "v_head_dim": 8}}
    flipping = {"attention": {**delta["attention"], "negative_eigenvalues": True}}
    for pattern, attention, blocker in (
        ([delta, wider, delta, {}], {}, "DeltaNet layers whose sizes differ"),
        ([delta, {"mlp": "swiglu"}], {}, "layer 1 changes mlp"),
        ([flipping, {}], {}, r"layer 0's DeltaNet has negative_eigenvalues=True"),
        ([delta, {}], {"output_gate": False}, "output_gate=False"),
    ):
        model = zoo.build({**fields, "layer_pattern": pattern, "attention": {**fields["attention"], **attention}})
        with pytest.raises(zoo.InteropError, match=blocker):
            zoo.to_hf(model, tmp_path / "out", architecture="Qwen3NextForCausalLM")
    with pytest.raises(zoo.InteropError, match=r"layer 0's DeltaNet has gate_norm_eps=None"):
        zoo.to_hf(zoo.build(fields), tmp_path / "olmo", architecture="OlmoHybridForCausalLM")
    out = zoo.to_hf(zoo.build(fields), tmp_path / "ok", architecture="Qwen3NextForCausalLM")
    written = json.loads((out / "config.json").read_text())
    assert written["layer_types"] == ["linear_attention"] * 3 + ["full_attention"]
    assert (written["linear_num_value_heads"], written["linear_value_head_dim"]) == (4, 6)


def test_the_multi_token_prediction_weights_are_read_past_as_transformers_does(tmp_path: Path) -> None:
    """Qwen3-Next's released files hold ``mtp.*`` layers its model never loads; the zoo reads past them too."""
    from safetensors.torch import load_file, save_file

    config = transformers.Qwen3NextConfig(**{k: v for k, v in QWEN3_NEXT.items() if k != "architectures"})
    reference = transformers.Qwen3NextForCausalLM(config).eval()
    reference.save_pretrained(tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    save_file({**weights, "mtp.fc.weight": torch.ones(32, 64)}, tmp_path / "model.safetensors", {"format": "pt"})
    model = zoo.from_hf(tmp_path)
    idx = torch.randint(0, 64, (1, 7), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(model(idx), reference(idx).logits, atol=1e-4, rtol=0)
    save_file({**weights, "extra.fc.weight": torch.ones(32, 64)}, tmp_path / "model.safetensors", {"format": "pt"})
    with pytest.raises(zoo.InteropError, match=r"tensors .* does not have.*'extra.fc.weight'"):
        zoo.from_hf(tmp_path)  # any other stored tensor is still refused by name


def test_the_output_gate_gates_cross_attention_too_and_cached_decoding_is_exact() -> None:
    """In an encoder-decoder the gate is read from the target, keys and values from the memory
    (the rows between); decoding token by token with the cache equals the whole target."""
    spec = {"name": "qknorm", "qk_norm": "none", "output_gate": True}
    sizes = {"d_model": 32, "n_heads": 4, "n_layers": 1, "d_ff": 64, "vocab_size": 64, "max_seq_len": 32}
    torch.manual_seed(0)
    model = zoo.build("transformer-2017-base", **sizes, attention=spec).eval()
    src, tgt = torch.randint(0, 64, (2, 6)), torch.randint(0, 64, (2, 5))
    with torch.no_grad():
        memory = model.encode(src)
        full = model.decode(tgt, memory)
        cache = model.new_cache()
        steps = [model.decode(tgt[:, t : t + 1], memory, cache=cache) for t in range(5)]
        torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=0, atol=1e-5)
        for module in model.modules():
            if isinstance(module, QkNormAttention):
                module.qkv.weight[-module.gate_dim :].zero_()  # every gate sigmoid(bias) alone
        assert not torch.allclose(model.decode(tgt, memory), full, atol=1e-3)  # the gates weighed on it

"""Mixture of experts: zoo-modern's ``moe`` MLP (routing, shared expert, dispatch, the cache
and padding), its load-balancing loss against transformers' and in training, and the
MoE converters' refusals."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from family_cases import all_cases

import zoo
import zoo.cli
from helpers import prepared_bytes, released_model
from zoo.interop.hf import config_from_hf
from zoo.interop.pretrained import config_mismatches
from zoo.nn.config import preset_pretrained, validate_config
from zoo.nn.marks import auxiliary_loss
from zoo.summary import summarize
from zoo.training import lm_loss

transformers = pytest.importorskip("transformers")
moe_module = pytest.importorskip("zoo_modern.moe")
mixtral = pytest.importorskip("transformers.models.mixtral.modeling_mixtral")

TINY: dict[str, Any] = {"vocab_size": 97, "max_seq_len": 64, "d_model": 32, "n_layers": 2, "n_heads": 4}
ROUTING = {"name": "moe", "n_experts": 4, "top_k": 2, "hidden": 16}
VARIANTS = {
    "mixtral": ROUTING,
    "unnormalized": {**ROUTING, "normalize_top_k": False},
    "shared": {**ROUTING, "top_k": 1, "shared_hidden": 24},
    "shared-ungated": {**ROUTING, "shared_hidden": 24, "shared_gate": False},
    # GPT-OSS's: a router bias, the product clamped (a limit the random inputs pass) and sharpened
    "clamped": {**ROUTING, "router_bias": True, "alpha": 1.702, "limit": 0.3, "up_shift": 1.0},
    # Llama 4's: sigmoid scores, not renormalised, weighting each expert's input; an ungated shared expert
    "weighted-inputs": {**ROUTING, "scoring": "sigmoid", "normalize_top_k": False, "weight_input": True}
    | {"shared_hidden": 24, "shared_gate": False},
}


def tiny(mlp: dict[str, Any], seed: int = 0, **overrides: Any) -> zoo.DecoderLM:
    torch.manual_seed(seed)
    return zoo.build("llama-style-small", **{**TINY, "mlp": mlp, "dropout": 0.0, **overrides})


def ids(*shape: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, TINY["vocab_size"], shape, generator=torch.Generator().manual_seed(seed))


def reference_moe(block: Any, x: torch.Tensor) -> torch.Tensor:
    """The MoE layer written out token by token, from its definition."""
    out = []
    for token in x.reshape(-1, x.shape[-1]):
        logits = block.router(token)
        weights, chosen = (logits.softmax(-1) if block.scoring == "softmax" else logits.sigmoid()).topk(block.top_k)
        if block.normalize_top_k:
            weights = weights / weights.sum()
        if block.weight_input:  # Llama 4: the weight scales what the expert reads
            y = sum(expert(block, int(e), w * token) for w, e in zip(weights, chosen, strict=True))
        else:
            y = sum(w * expert(block, int(e), token) for w, e in zip(weights, chosen, strict=True))
        if block.shared is not None:
            gate = torch.sigmoid(block.shared_gate(token)) if block.shared_gate is not None else 1.0
            y = y + gate * block.shared(token)
        out.append(y)
    return torch.stack(out).view(x.shape)


def expert(block: Any, e: int, token: torch.Tensor) -> torch.Tensor:
    """Expert ``e`` of the stack on one token: down(silu(gate x) * up x), gate_up's rows [gate | up];
    with GPT-OSS's options, down(g * sigmoid(alpha g) * (u + shift)), g <= limit and |u| <= limit."""
    gate_up, down, unit = block.experts.gate_up, block.experts.down, block.experts.unit
    gate, up = (gate_up.weight[e] @ token + (0 if gate_up.bias is None else gate_up.bias[e])).chunk(2)
    if unit.limit is not None:
        gate, up = torch.minimum(gate, torch.tensor(unit.limit)), torch.clamp(up, -unit.limit, unit.limit)
    product = gate * torch.sigmoid(unit.alpha * gate) * (up + unit.shift)
    return down.weight[e] @ product + (0 if down.bias is None else down.bias[e])


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_routing_matches_its_definition_token_by_token(variant: str) -> None:
    block = tiny(VARIANTS[variant]).blocks[0].mlp.eval()
    x = torch.randn(2, 5, TINY["d_model"], generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        torch.testing.assert_close(block(x), reference_moe(block, x), rtol=1e-5, atol=1e-6)
        flat, chosen = x.reshape(-1, x.shape[-1]), block.router(x).reshape(-1, 4).topk(block.top_k).indices
        weights = torch.rand(chosen.shape, generator=torch.Generator().manual_seed(4))
        torch.testing.assert_close(block.dense(flat, weights, chosen), block.dispatch(flat, weights, chosen))


def test_top_k_eps_is_added_to_the_sum_the_sigmoid_weights_are_renormalised_by() -> None:
    """``top_k_eps`` (LFM2-MoE's 1e-6; by default DeepSeek's 1e-20 with sigmoid scores)."""
    scores = torch.tensor([[0.02, 0.01, 0.005, 0.001]])
    for eps, want in ((None, 1e-20), (1e-2, 1e-2)):
        options = {**ROUTING, "scoring": "sigmoid", "top_k_eps": eps}
        block = tiny({k: v for k, v in options.items() if v is not None}).blocks[0].mlp
        weights, chosen = block.route(scores)
        assert chosen.tolist() == [[0, 1]]
        torch.testing.assert_close(weights, torch.tensor([[0.02, 0.01]]) / (0.03 + want))


def test_sparsemixer_routing_equals_phimoes_at_inference() -> None:
    """``scoring = "sparsemixer"`` chooses and weighs as transformers' ``sparsemixer`` (Phi-3.5-MoE)
    in eval mode, near ties (masked by ``mixer_eps``) included."""
    phimoe = pytest.importorskip("transformers.models.phimoe.modeling_phimoe")
    options = {**ROUTING, "n_experts": 6, "scoring": "sparsemixer", "normalize_top_k": False, "mixer_eps": 0.05}
    block = tiny(options).blocks[0].mlp.eval()
    logits = torch.randn(64, 6, generator=torch.Generator().manual_seed(5))
    logits[:8, 1] = logits[:8, 0] * 0.97  # within 2 * mixer_eps of the best: kept in its softmax
    weights, chosen = block.sparse_mix(logits)
    theirs, their_chosen = phimoe.sparsemixer(logits, jitter_eps=0.05, training=False, top_k=2)
    assert torch.equal(chosen, their_chosen)
    torch.testing.assert_close(weights, theirs)
    assert not torch.allclose(weights[:, 0], torch.ones(64))  # some first weights share their softmax


def test_shared_average_halves_the_sum_of_the_routed_and_shared_outputs() -> None:
    """``shared_average`` (Cohere 2-MoE's "average"): (routed + shared) / 2, the same weights summed otherwise."""
    mlp = {**ROUTING, "shared_hidden": 24, "shared_gate": False}
    summed, averaged = tiny(mlp).blocks[0].mlp.eval(), tiny({**mlp, "shared_average": True}).blocks[0].mlp.eval()
    averaged.load_state_dict(summed.state_dict())
    x = torch.randn(2, 5, TINY["d_model"], generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        torch.testing.assert_close(averaged(x), summed(x) / 2)
        assert not torch.allclose(averaged(x), summed(x))


def test_a_fused_shared_expert_is_the_unfused_one_with_gate_and_up_stacked() -> None:
    """``shared_fused`` (Granite-MoE's ``shared_mlp.input_linear``): one projection, rows
    [gate | up], the same sums as separate gate and up holding its halves."""
    fused = tiny({**ROUTING, "shared_hidden": 24, "shared_gate": False, "shared_fused": True}).blocks[0].mlp.eval()
    split = tiny({**ROUTING, "shared_hidden": 24, "shared_gate": False}, seed=1).blocks[0].mlp.eval()
    assert not hasattr(fused.shared, "gate") and fused.shared.gate_up.weight.shape == (48, TINY["d_model"])
    with torch.no_grad():
        for name in ("router.weight", "experts.gate_up.weight", "experts.down.weight", "shared.down.weight"):
            split.get_parameter(name).copy_(fused.get_parameter(name))
        split.shared.gate.weight.copy_(fused.shared.gate_up.weight[:24])
        split.shared.up.weight.copy_(fused.shared.gate_up.weight[24:])
        x = torch.randn(2, 5, TINY["d_model"], generator=torch.Generator().manual_seed(3))
        torch.testing.assert_close(fused(x), split(x))
        torch.testing.assert_close(fused(x), reference_moe(fused, x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_cached_decoding_and_padding_are_exact(variant: str) -> None:
    model = tiny(VARIANTS[variant]).eval()
    idx = ids(2, 10)
    with torch.no_grad():
        full = model(idx)
        cache = model.new_cache()
        steps = [model(idx[:, :4], cache=cache)] + [model(idx[:, i : i + 1], cache=cache) for i in range(4, 10)]
        torch.testing.assert_close(torch.cat(steps, 1), full, rtol=1e-5, atol=1e-5)
        padded = torch.cat([torch.zeros(1, 3, dtype=torch.long), idx[:1]], 1)
        mask = torch.cat([torch.zeros(1, 3, dtype=torch.long), torch.ones(1, 10, dtype=torch.long)], 1)
        positions = torch.cat([torch.zeros(1, 3, dtype=torch.long), torch.arange(10)[None]], 1)
        out = model(padded, attention_mask=mask, positions=positions)
        torch.testing.assert_close(out[:, 3:], full[:1], rtol=1e-5, atol=1e-5)


def test_clamped_product_is_gpt_oss_and_reaches_its_limit() -> None:
    """The experts' ``GatedUnit`` at GPT-OSS's options is transformers' ``_apply_gate`` (on its
    interleaved columns); at the defaults it is SwiGLU's; the clamp changes large inputs."""
    gpt_oss = pytest.importorskip("transformers.models.gpt_oss.modeling_gpt_oss")
    config = transformers.GptOssConfig(hidden_size=8, intermediate_size=6, num_local_experts=2)
    theirs = gpt_oss.GptOssExperts(config)
    gate, up = torch.randn(2, 5, 6, generator=torch.Generator().manual_seed(5)).mul(6).unbind(0)
    unit = moe_module.GatedUnit(1.702, 7.0, 1.0)
    interleaved = torch.stack([gate, up], dim=-1).flatten(-2)  # gate at the even columns
    torch.testing.assert_close(unit(gate, up), theirs._apply_gate(interleaved))
    torch.testing.assert_close(moe_module.GatedUnit()(gate, up), F.silu(gate) * up)
    assert not torch.allclose(unit(gate, up), moe_module.GatedUnit(1.702, None, 1.0)(gate, up))
    block = tiny(VARIANTS["clamped"]).blocks[0].mlp
    assert block.router.bias is not None and block.experts.unit == moe_module.GatedUnit(1.702, 0.3, 1.0)


def test_router_logits_are_a_hook_point_that_reroutes() -> None:
    model = tiny(ROUTING).eval()
    idx = ids(1, 6)
    out, cache = model.run_with_cache(idx, names=["blocks.0.hook_resid_mid", "blocks.0.mlp.hook_router"])
    logits, block = cache["blocks.0.mlp.hook_router"], model.blocks[0]
    assert logits.shape == (1, 6, 4)
    with torch.no_grad():  # pre-norm: the MLP reads the normed stream
        torch.testing.assert_close(logits, block.mlp.router(block.mlp_residual.norm(cache["blocks.0.hook_resid_mid"])))
    forced = torch.tensor([9.0, 8.0, 0.0, 0.0]).expand_as(logits)  # every token to experts 0 and 1
    with model.hooks({"blocks.0.mlp.hook_router": lambda x, name: forced.clone()}), torch.no_grad():
        rerouted = model(idx)
    assert not torch.allclose(rerouted, out)


def test_balance_loss_equals_transformers_load_balancing_loss() -> None:
    model = tiny({**ROUTING, "n_experts": 6, "top_k": 3, "aux_loss_weight": 0.3}, n_layers=3).train()
    idx = ids(3, 7)
    _, cache = model.run_with_cache(idx, names=lambda name: name.endswith("hook_router"), detach=False)
    for i, block in enumerate(model.blocks):
        gate_logits = cache[f"blocks.{i}.mlp.hook_router"].reshape(-1, 6)
        expected = mixtral.load_balancing_loss_func((gate_logits,), 6, 3)
        torch.testing.assert_close(block.mlp.last_balance_loss, expected)
    total = sum(block.mlp.last_balance_loss for block in model.blocks)
    torch.testing.assert_close(auxiliary_loss(model), 0.3 * total / 3)  # the weight times the layers' mean
    model.eval()
    model(idx)
    assert auxiliary_loss(model) is None  # an eval forward keeps no training term


def test_training_loss_adds_the_weighted_term_and_its_gradient_reaches_the_router() -> None:
    model = tiny({**ROUTING, "aux_loss_weight": 0.5}).train()
    x, y = ids(2, 9), ids(2, 9, seed=2)
    loss = lm_loss(model, x, y)
    cross_entropy = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
    aux = sum(block.mlp.last_balance_loss for block in model.blocks) * 0.5 / 2
    torch.testing.assert_close(loss, cross_entropy + aux)
    router = model.blocks[0].mlp.router.weight
    (with_term,) = torch.autograd.grad(lm_loss(model, x, y), router)
    (without,) = torch.autograd.grad(F.cross_entropy(model(x).flatten(0, 1), y.flatten()), router)
    (term,) = torch.autograd.grad(aux_of(model, x), router)
    assert term.abs().sum() > 0
    torch.testing.assert_close(with_term - without, term, rtol=1e-4, atol=1e-7)
    unweighted = tiny({**ROUTING, "aux_loss_weight": 0.0}).train()
    torch.testing.assert_close(lm_loss(unweighted, x, y), F.cross_entropy(unweighted(x).flatten(0, 1), y.flatten()))


def aux_of(model: zoo.DecoderLM, x: torch.Tensor) -> torch.Tensor:
    model(x)
    term = auxiliary_loss(model)
    assert term is not None
    return term


def first_loss(data: Path, out: Path, weight: float) -> float:
    """The first step's training loss of ``zoo train`` on a tiny MoE (before any update)."""
    sets = ["n_layers=1", "d_model=16", "n_heads=4", "vocab_size=256", "max_seq_len=32", "mlp.name=moe"]
    sets += ["mlp.n_experts=4", "mlp.top_k=2", "mlp.hidden=16", f"mlp.aux_loss_weight={weight}"]
    argv = ["train", "llama-style-small", *(w for s in sets for w in ("--set", s)), "--seq-len", "16"]
    argv += ["--steps", "2", "--batch-size", "2", "--eval-batches", "1", "--eval-every", "2", "--quiet"]
    assert zoo.cli.main([*argv, "--data", str(data), "-o", str(out)]) == 0
    assert zoo.load(out).config.mlp.options["aux_loss_weight"] == weight
    return float(json.loads((out / "metrics.jsonl").read_text().splitlines()[0])["loss"])


def test_zoo_train_adds_the_weighted_balance_loss(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    data = prepared_bytes(tmp_path / "data", 4_000)
    plain, weighted = first_loss(data, tmp_path / "plain", 0.0), first_loss(data, tmp_path / "weighted", 1.0)
    # Same seed, same batch, same weights: the first loss differs by the balance loss alone,
    # about top_k (2) for a router at initialisation (exactly top_k when balanced).
    assert 1.5 < weighted - plain < 4.0


# -- converters -------------------------------------------------------------------------


def saved_config(tmp_path: Path, config: Any, **fields: Any) -> Path:
    """A folder holding a transformers config.json with ``fields`` changed (no weights needed:
    the config is refused before any are read)."""
    folder = tmp_path / "hf"
    folder.mkdir()
    data = {**config.to_dict(), **fields}
    (folder / "config.json").write_text(json.dumps(data), encoding="utf-8")
    return folder


MIXTRAL = {"hidden_size": 32, "intermediate_size": 24, "num_hidden_layers": 2, "num_attention_heads": 4}
QWEN2_MOE = {**MIXTRAL, "moe_intermediate_size": 16, "shared_expert_intermediate_size": 24, "num_experts": 4}
REFUSALS = [
    ("MixtralConfig", MIXTRAL, {"router_jitter_noise": 0.1}, "router_jitter_noise"),
    ("Qwen2MoeConfig", QWEN2_MOE, {"decoder_sparse_step": 2}, "decoder_sparse_step"),
    ("Qwen2MoeConfig", QWEN2_MOE, {"mlp_only_layers": [1]}, "mlp_only_layers"),
    ("Qwen2MoeConfig", QWEN2_MOE, {"qkv_bias": False}, "qkv_bias"),
    ("Qwen2MoeConfig", QWEN2_MOE, {"num_experts": 0}, "num_experts"),
    ("Qwen3MoeConfig", QWEN2_MOE, {"mlp_only_layers": [0]}, "mlp_only_layers"),
    ("OlmoeConfig", {**MIXTRAL, "num_experts": 4}, {"clip_qkv": 8.0}, "clip_qkv"),
]


@pytest.mark.parametrize(("config", "sizes", "change", "field"), REFUSALS, ids=[f"{r[0]}-{r[3]}" for r in REFUSALS])
def test_converters_refuse_what_they_cannot_map(
    config: str, sizes: dict[str, Any], change: dict[str, Any], field: str, tmp_path: Path
) -> None:
    hf = getattr(transformers, config)(**sizes, vocab_size=97)
    folder = saved_config(tmp_path, hf, **change, architectures=[config.replace("Config", "ForCausalLM")])
    with pytest.raises(zoo.InteropError, match=field):
        zoo.from_hf(folder)


SMALL = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}
ROPE = {"rope_type": "default", "rope_theta": 10000.0}
#: The families on the parts GPT-OSS, Llama 4 and DeepSeek brought, and what each refuses.
PARTS_REFUSALS = [
    (
        "GptOssConfig",
        "GptOssForCausalLM",
        {"quantization_config": {"quant_method": "mxfp4"}},
        "quantization_config.*Mxfp4Config",
    ),
    ("Llama4TextConfig", "Llama4ForCausalLM", {"interleave_moe_layer_step": 2}, "interleave_moe_layer_step"),
    ("Llama4TextConfig", "Llama4ForCausalLM", {"moe_layers": [1]}, "moe_layers"),
    ("Llama4TextConfig", "Llama4ForCausalLM", {"layer_types": ["sliding_attention"] * 2}, "layer_types"),
    ("Ministral3Config", "Ministral3ForCausalLM", {"rope_parameters": ROPE}, "llama_4_scaling_beta"),
    ("Apertus1p5TextConfig", "Apertus1p5TextForCausalLM", {"output_vocab_size": 50}, "output_vocab_size"),
    (
        "SolarOpenConfig",
        "SolarOpenForCausalLM",
        {"rope_parameters": {**ROPE, "partial_rotary_factor": 0.5}},
        "partial_rotary_factor",
    ),  # fmt: skip
    ("Glm4MoeLiteConfig", "Glm4MoeLiteForCausalLM", {"mlp_layer_types": ["dense", "mixed"]}, "mlp_layer_types"),
]


@pytest.mark.parametrize(("config", "model", "change", "field"), PARTS_REFUSALS, ids=[r[3] for r in PARTS_REFUSALS])
def test_the_families_on_the_new_parts_refuse_what_they_cannot_map(
    config: str, model: str, change: dict[str, Any], field: str, tmp_path: Path
) -> None:
    hf = getattr(transformers, config)(**SMALL, vocab_size=97)
    folder = saved_config(tmp_path, hf, **change, architectures=[model])
    with pytest.raises(zoo.InteropError, match=field):
        zoo.from_hf(folder)


#: Settings a case leaves at transformers' default, changed: the zoo must compute them too.
CHANGED = [("flint", {"rms_norm_eps": 1e-2}), ("llama4", {"rms_norm_eps": 1e-2})]  # the QK-norm's epsilon too


@pytest.mark.parametrize(("case", "change"), CHANGED, ids=[f"{c}-{next(iter(v))}" for c, v in CHANGED])
def test_a_changed_setting_gives_transformers_logits(case: str, change: dict[str, Any], tmp_path: Path) -> None:
    family = next(c for c in all_cases() if c.id == case)
    config = getattr(transformers, family.config)(**{**family.fields, **change, "vocab_size": 97})
    torch.manual_seed(0)
    reference = getattr(transformers, family.model)(config).eval()
    with torch.no_grad():
        for name, p in reference.named_parameters():  # norm scales around 1, the rest around 0
            p.copy_(torch.randn_like(p) * 0.2 + (1.0 if "norm" in name and p.dim() == 1 else 0.0))
    reference.save_pretrained(tmp_path)
    with torch.no_grad():
        torch.testing.assert_close(zoo.from_hf(tmp_path)(ids(2, 12)), reference(ids(2, 12)).logits, atol=1e-4, rtol=0)


@pytest.mark.parametrize("name", ["sinks", "chunked"])
def test_attention_with_sinks_or_chunks_takes_the_configs_epsilon_and_dropouts(name: str) -> None:
    attention = tiny(ROUTING, norm_eps=1e-2, dropout={"attention": 0.25}, attention={"name": name, "qk_norm": "head"})
    attn = attention.blocks[0].attn
    assert (attn.q_norm.eps, attn.k_norm.eps, attn.attn_dropout) == (1e-2, 1e-2, 0.25)


#: Fields a config.json may leave out, where transformers' default is not the zoo's usual one.
LEFT_OUT = [("hy-v3", "rms_norm_eps"), ("hy-v3", "rope_parameters"), ("minicpm5-moe", "rope_parameters")]
LEFT_OUT += [("mellum", "rope_parameters"), ("diffllama", "rms_norm_eps")]
LEFT_OUT += [(case, field) for case in ("flint", "kolibri1") for field in ("sliding_window", "layer_types")]


@pytest.mark.parametrize(("case", "field"), LEFT_OUT, ids=[f"{c}-{f}" for c, f in LEFT_OUT])
def test_a_field_left_out_reads_as_transformers_default(case: str, field: str) -> None:
    family = next(c for c in all_cases() if c.id == case)
    config_class = getattr(transformers, family.config)
    given = {k: v for k, v in config_class(**family.fields, vocab_size=97).to_dict().items() if k != field}
    filled = config_class.from_dict({k: v for k, v in given.items() if k != "transformers_version"}).to_dict()
    arch = {"architectures": [family.model]}
    assert config_from_hf({**given, **arch}) == config_from_hf({**filled, **arch})


def test_export_refuses_an_moe_the_architecture_cannot_hold(tmp_path: Path) -> None:
    with pytest.raises(zoo.InteropError, match="shared expert"):
        zoo.to_hf(tiny({**ROUTING, "shared_hidden": 8}), tmp_path / "out", architecture="MixtralForCausalLM")
    with pytest.raises(zoo.InteropError, match="renormalises"):
        zoo.to_hf(tiny({**ROUTING, "normalize_top_k": False}), tmp_path / "out2", architecture="MixtralForCausalLM")


# -- presets of the released weights ------------------------------------------------------------

RELEASED = {
    "mistralai/Mixtral-8x7B-v0.1": {
        "architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "vocab_size": 32000, "hidden_size": 4096,
        "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
        "max_position_embeddings": 32768, "rms_norm_eps": 1e-5, "rope_theta": 1e6, "sliding_window": None,
        "num_local_experts": 8, "num_experts_per_tok": 2, "router_aux_loss_coef": 0.02,
        "output_router_logits": False, "tie_word_embeddings": False, "hidden_act": "silu", "attention_dropout": 0.0,
    },
    "Qwen/Qwen1.5-MoE-A2.7B": {
        "architectures": ["Qwen2MoeForCausalLM"], "model_type": "qwen2_moe", "vocab_size": 151936,
        "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 24, "num_attention_heads": 16,
        "num_key_value_heads": 16, "max_position_embeddings": 8192, "rms_norm_eps": 1e-6, "rope_theta": 1e6,
        "use_sliding_window": False, "sliding_window": 32768, "max_window_layers": 21, "decoder_sparse_step": 1,
        "num_experts": 60, "num_experts_per_tok": 4, "moe_intermediate_size": 1408,
        "shared_expert_intermediate_size": 5632, "norm_topk_prob": False, "router_aux_loss_coef": 0.001,
        "output_router_logits": False, "tie_word_embeddings": False, "hidden_act": "silu", "attention_dropout": 0.0,
    },
    "Qwen/Qwen3-30B-A3B": {
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "vocab_size": 151936,
        "hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 48, "num_attention_heads": 32,
        "num_key_value_heads": 4, "head_dim": 128, "max_position_embeddings": 40960, "rms_norm_eps": 1e-6,
        "rope_theta": 1e6, "use_sliding_window": False, "sliding_window": None, "max_window_layers": 48,
        "decoder_sparse_step": 1, "mlp_only_layers": [], "num_experts": 128, "num_experts_per_tok": 8,
        "moe_intermediate_size": 768, "norm_topk_prob": True, "router_aux_loss_coef": 0.001,
        "output_router_logits": False, "attention_bias": False, "tie_word_embeddings": False, "hidden_act": "silu",
        "attention_dropout": 0.0,
    },
    "allenai/OLMoE-1B-7B-0924": {
        "architectures": ["OlmoeForCausalLM"], "model_type": "olmoe", "vocab_size": 50304, "hidden_size": 2048,
        "intermediate_size": 1024, "num_hidden_layers": 16, "num_attention_heads": 16, "num_key_value_heads": 16,
        "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "num_experts": 64,
        "num_experts_per_tok": 8, "norm_topk_prob": False, "clip_qkv": None, "router_aux_loss_coef": 0.01,
        "output_router_logits": False, "attention_bias": False, "tie_word_embeddings": False, "hidden_act": "silu",
        "attention_dropout": 0.0,
    },
}  # fmt: skip
PRESETS = {
    "mixtral-8x7b": "mistralai/Mixtral-8x7B-v0.1",
    "qwen1.5-moe-a2.7b": "Qwen/Qwen1.5-MoE-A2.7B",
    "qwen3-30b-a3b": "Qwen/Qwen3-30B-A3B",
    "olmoe-1b-7b": "allenai/OLMoE-1B-7B-0924",
}


@pytest.mark.parametrize(("preset", "repo"), sorted(PRESETS.items()))
def test_each_preset_has_as_many_parameters_as_its_released_model(
    preset: str, repo: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert preset_pretrained(preset) == repo
    expected = released_model(RELEASED[repo]).num_parameters()
    assert zoo.build(preset, device="meta").num_parameters() == expected
    assert zoo.cli.main(["list", preset, "--json"]) == 0  # counted from one layer (zoo.summary.layered_counts)
    assert [entry["parameters"] for entry in json.loads(capsys.readouterr().out)] == [expected]


@pytest.mark.parametrize(("preset", "repo"), sorted(PRESETS.items()))
def test_each_preset_is_the_config_of_its_released_weights(preset: str, repo: str) -> None:
    hf = RELEASED[repo]
    assert config_mismatches(zoo.get_config(preset), validate_config(config_from_hf(hf)), hf) == []


def test_summary_counts_every_expert_and_the_flops_of_the_routed_ones() -> None:
    """``zoo info``'s numbers: parameters are all experts', FLOPs per token those of the
    router and the top_k experts a token uses (Mixtral 8x7B: 46.7 B parameters, 12.9 B used)."""
    summary = summarize("mixtral-8x7b", context=64)
    assert summary.total_parameters == 46_702_792_704
    d, hidden, layers, experts, top_k = 4096, 14336, 32, 8, 2
    assert summary.parameters["mlp"] == layers * (d * experts + experts * 3 * d * hidden)
    assert summary.flops_per_token["mlp"] == 2 * layers * (d * experts + top_k * 3 * d * hidden)


GPT_OSS_20B = {  # openai/gpt-oss-20b's config.json, its quantization_config left out (dequantised)
    "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "attention_bias": True, "attention_dropout": 0.0,
    "eos_token_id": 200002, "experts_per_token": 4, "head_dim": 64, "hidden_act": "silu", "hidden_size": 2880,
    "initial_context_length": 4096, "initializer_range": 0.02, "intermediate_size": 2880,
    "layer_types": ["sliding_attention", "full_attention"] * 12, "max_position_embeddings": 131072,
    "num_attention_heads": 64, "num_experts_per_tok": 4, "num_hidden_layers": 24, "num_key_value_heads": 8,
    "num_local_experts": 32, "output_router_logits": False, "pad_token_id": 199999, "rms_norm_eps": 1e-05,
    "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0, "original_max_position_embeddings": 4096,
                     "rope_type": "yarn", "truncate": False},
    "rope_theta": 150000, "router_aux_loss_coef": 0.9, "sliding_window": 128, "swiglu_limit": 7.0,
    "tie_word_embeddings": False, "use_cache": True, "vocab_size": 201088,
}  # fmt: skip


def test_gpt_oss_20b_reads_as_its_released_shape() -> None:
    """The released GPT-OSS 20B config: heads of 64 at d_model 2880, windows on every other layer,
    YaRN, 32 clamped experts with biases; as many parameters as transformers' model of it."""
    config = validate_config(config_from_hf(GPT_OSS_20B))
    assert (config.head_dim, config.attention.name, config.mlp.options["limit"]) == (64, "sinks", 7.0)
    assert [config.layer(i).attention.options.get("window") for i in range(3)] == [128, None, 128]
    assert config.position.options["scaling"]["kind"] == "yarn"
    theirs = transformers.GptOssConfig(**GPT_OSS_20B)
    with torch.device("meta"):
        expected = transformers.GptOssForCausalLM(theirs).num_parameters()
    assert zoo.build(config, device="meta").num_parameters() == expected


def test_llama4_scout_text_reads_as_its_released_shape() -> None:
    """Llama 4 Scout's text model: 48 layers of 16 experts (top 1) and a shared one, chunked
    rotary layers with NoPE every fourth; as many parameters as transformers' model of it."""
    scout = {"hidden_size": 5120, "num_hidden_layers": 48, "num_attention_heads": 40, "num_key_value_heads": 8}
    scout |= {"intermediate_size": 8192, "num_local_experts": 16, "num_experts_per_tok": 1, "vocab_size": 202048}
    scout |= {"rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 16.0}}
    scout["rope_parameters"] |= {
        "low_freq_factor": 1.0,
        "high_freq_factor": 1.0,
        "original_max_position_embeddings": 8192,
    }
    theirs = transformers.Llama4TextConfig(**scout)
    config = validate_config(config_from_hf({**theirs.to_dict(), "architectures": ["Llama4ForCausalLM"]}))
    kinds = [(config.layer(i).attention.name, config.layer(i).position.name) for i in range(4)]
    assert kinds == [("chunked", "rotary")] * 3 + [("qknorm", "none")]
    assert config.mlp.options["weight_input"] and config.mlp.options["shared_hidden"] == 8192
    with torch.device("meta"):
        expected = transformers.Llama4ForCausalLM(theirs).num_parameters()
    assert zoo.build(config, device="meta").num_parameters() == expected

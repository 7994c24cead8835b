"""zoo-modern's parts for the families of 2024 (attention ``qknorm``, mlp ``glu``, norm
``rmsnorm_offset``, placement ``post_sublayer``), what their converters refuse, and the
presets of their released weights. Parity with transformers is tests/test_families.py's
(cases in tests/family_cases/modern.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import zoo
from helpers import TINY, released_model, tiny
from zoo.interop.hf import config_from_hf
from zoo.interop.pretrained import config_mismatches
from zoo.nn.attention import AttentionContext, SdpaAttention
from zoo.nn.config import preset_pretrained, validate_config

transformers = pytest.importorskip("transformers")
zoo_modern = pytest.importorskip("zoo_modern")
from zoo_modern.mlp import GLU  # noqa: E402
from zoo_modern.norms import OffsetRMSNorm  # noqa: E402
from zoo_modern.placement import PostSublayerNorm  # noqa: E402
from zoo_modern.qknorm import QkNormAttention  # noqa: E402


def seeded(module: nn.Module, seed: int = 0) -> nn.Module:
    """``module`` with every parameter random (norm scales included)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    return module


# -- components ----------------------------------------------------------------------------


def test_offset_rmsnorm_scales_by_one_plus_its_weight() -> None:
    norm = seeded(OffsetRMSNorm(16, 1e-6))
    x = torch.randn(2, 5, 16)
    expected = x / (x.pow(2).mean(-1, keepdim=True) + 1e-6).sqrt() * (1 + norm.weight)
    torch.testing.assert_close(norm(x), expected)
    norm.reset_parameters()  # a fresh one is the identity scale: plain RMSNorm without weights
    torch.testing.assert_close(norm(x), nn.RMSNorm(16, eps=1e-6)(x))
    assert norm(x.to(torch.bfloat16)).dtype == torch.bfloat16


def test_post_sublayer_normalises_what_the_sublayer_adds() -> None:
    placement = PostSublayerNorm(nn.RMSNorm(8))
    sublayer = nn.Linear(8, 8)
    x = torch.randn(2, 3, 8) * 5
    torch.testing.assert_close(placement(x, sublayer), x + nn.functional.rms_norm(sublayer(x), (8,)))
    model = tiny(placement="post_sublayer", norm="rmsnorm")
    assert type(model.blocks[0].attn_residual).__name__ == "PostSublayerNorm" and model.final_norm is not None


@pytest.mark.parametrize(
    ("activation", "gate"),
    [("silu", nn.functional.silu), ("gelu_tanh", lambda t: nn.functional.gelu(t, approximate="tanh")),
     ("gelu", nn.functional.gelu), ("relu", nn.functional.relu)],
)  # fmt: skip
def test_glu_gates_with_the_configured_activation(activation: str, gate: Any) -> None:
    model = tiny(mlp={"name": "glu", "hidden": 24}, activation=activation)
    mlp = seeded(model.blocks[0].mlp)
    x = torch.randn(2, 3, TINY["d_model"])
    expected = mlp.down(gate(mlp.gate(x)) * mlp.up(x))
    torch.testing.assert_close(mlp(x), expected)


def test_fused_glu_is_the_glu_of_its_stacked_weights() -> None:
    separate = seeded(GLU(16, 24, nn.GELU(approximate="tanh"), bias=True, dropout=0.0))
    fused = GLU(16, 24, nn.GELU(approximate="tanh"), bias=True, dropout=0.0, fused=True)
    with torch.no_grad():
        fused.gate_up.weight.copy_(torch.cat([separate.gate.weight, separate.up.weight]))
        fused.gate_up.bias.copy_(torch.cat([separate.gate.bias, separate.up.bias]))
        fused.down.load_state_dict(separate.down.state_dict())
    x = torch.randn(2, 3, 16)
    torch.testing.assert_close(fused(x), separate(x))


def test_qknorm_without_its_options_is_zoos_attention_weight_for_weight() -> None:
    plain = seeded(SdpaAttention(32, 4, n_kv_heads=2))
    modern = QkNormAttention(32, 4, n_kv_heads=2, qk_norm="none")
    modern.load_state_dict(plain.state_dict())
    x = torch.randn(2, 6, 32)
    ctx = AttentionContext(is_causal=True)
    torch.testing.assert_close(modern(x, ctx), plain(x, ctx))
    scaled = QkNormAttention(32, 4, n_kv_heads=2, qk_norm="none", scale=0.5)
    scaled.load_state_dict(plain.state_dict())
    assert not torch.allclose(scaled(x, ctx), plain(x, ctx))
    default = QkNormAttention(32, 4, n_kv_heads=2, qk_norm="none", scale=8**-0.5)  # 1/sqrt(head_dim)
    default.load_state_dict(plain.state_dict())
    torch.testing.assert_close(default(x, ctx), plain(x, ctx))


@pytest.mark.parametrize(("qk_norm", "q_width", "k_width"), [("head", 16, 16), ("whole", 64, 32)])
def test_qknorm_heads_wider_than_d_model_over_n_heads(qk_norm: str, q_width: int, k_width: int) -> None:
    attention = {"name": "qknorm", "head_dim": 16, "n_kv_heads": 2, "qk_norm": qk_norm}
    model = tiny(attention=attention, position="rotary", norm="rmsnorm")
    attn = model.blocks[0].attn
    assert model.config.head_dim == 16 and model.position.rotary_dim == 16  # rotary turns the whole wide head
    assert attn.qkv.weight.shape == (64 + 2 * 32, 32) and attn.out.weight.shape == (32, 64)
    assert (attn.q_norm.weight.shape[0], attn.k_norm.weight.shape[0]) == (q_width, k_width)
    idx = torch.randint(0, TINY["vocab_size"], (2, 10))
    with torch.no_grad():
        full = model(idx)
        cache = model.new_cache()
        steps = [model(idx[:, :6], cache=cache), model(idx[:, 6:], cache=cache)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=0)
    _, acts = model.run_with_cache(idx, names=["blocks.0.attn.hook_q", "blocks.0.attn.hook_z"])
    assert acts["blocks.0.attn.hook_q"].shape == (2, 4, 10, 16) and acts["blocks.0.attn.hook_z"].shape == (2, 10, 4, 16)


def test_pre_scaled_adds_a_scaled_sublayer_output() -> None:
    model = tiny(placement={"name": "pre_scaled", "residual_scale": 0.25}, norm="rmsnorm")
    placement, sublayer = model.blocks[0].mlp_residual, model.blocks[0].mlp
    x = torch.randn(2, 3, TINY["d_model"])
    torch.testing.assert_close(placement(x, sublayer), x + 0.25 * sublayer(placement.norm(x)))
    plain = tiny(placement="pre", norm="rmsnorm")
    unit = tiny(placement="pre_scaled", norm="rmsnorm")  # seeded alike: the same weights
    idx = torch.randint(0, TINY["vocab_size"], (2, 8))
    torch.testing.assert_close(unit(idx), plain(idx))


def test_numeric_embedding_and_logit_scales_multiply() -> None:
    idx = torch.randint(0, TINY["vocab_size"], (2, 8))
    base = tiny(position="rotary")
    scaled = tiny(position="rotary", logit_scale=0.125)
    torch.testing.assert_close(scaled(idx), base(idx) * 0.125)
    _, plain = base.run_with_cache(idx, names=["hook_embed"])
    _, times = tiny(position="rotary", embedding_scale=12.0).run_with_cache(idx, names=["hook_embed"])
    torch.testing.assert_close(times["hook_embed"], plain["hook_embed"] * 12.0)
    for bad in ({"embedding_scale": 0.0}, {"embedding_scale": True}, {"logit_scale": -1.0}, {"logit_scale": "x"}):
        with pytest.raises(zoo.ConfigError, match=next(iter(bad))):
            tiny(**bad)


def test_interleaved_rotary_pairs_reorder_into_halves_and_back() -> None:
    from zoo_modern.families.llama_like import halves_to_interleaved, interleaved_to_halves

    rows = torch.arange(2 * 6.0)[:, None]  # two heads of six rows: pairs (0, 1), (2, 3), (4, 5)
    halves = interleaved_to_halves(rows, 2)
    assert halves[:6, 0].tolist() == [0, 2, 4, 1, 3, 5] and halves[6:, 0].tolist() == [6, 8, 10, 7, 9, 11]
    assert torch.equal(halves_to_interleaved(halves, 2), rows)


def test_gemmas_embeddings_are_scaled_in_the_models_dtype_as_transformers_does(tmp_path: Path) -> None:
    """sqrt(d_model) rounded to bfloat16 first (5.65625 for d_model 32), not the exact factor."""
    config = transformers.GemmaConfig(**{k: v for k, v in GEMMA.items() if k not in ("architectures", "model_type")})
    torch.manual_seed(0)
    reference = transformers.GemmaForCausalLM(config).eval()
    reference.save_pretrained(tmp_path)
    model = zoo.from_hf(tmp_path, dtype=torch.bfloat16)
    idx = torch.randint(0, 64, (2, 8))
    _, acts = model.run_with_cache(idx, names=["hook_embed"])
    with torch.no_grad():
        theirs = reference.to(torch.bfloat16).model.embed_tokens(idx)
    assert torch.equal(acts["hook_embed"], theirs)
    assert not torch.equal(model.tok_emb(idx) * 32**0.5, theirs)  # the exact factor rounds otherwise


# -- converter refusals -----------------------------------------------------------------------

QWEN3 = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 32, "intermediate_size": 40,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
         "vocab_size": 64, "max_position_embeddings": 64, "rms_norm_eps": 1e-6}  # fmt: skip
GEMMA = {**QWEN3, "architectures": ["GemmaForCausalLM"], "model_type": "gemma", "hidden_act": "gelu_pytorch_tanh"}
OLMO2 = {**QWEN3, "architectures": ["Olmo2ForCausalLM"], "model_type": "olmo2"}
PHI3 = {**QWEN3, "architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "head_dim": None}
COHERE = {**PHI3, "architectures": ["CohereForCausalLM"], "model_type": "cohere", "layer_norm_eps": 1e-5}
GRANITE = {**PHI3, "architectures": ["GraniteForCausalLM"], "model_type": "granite", "residual_multiplier": 0.5}


@pytest.mark.parametrize(
    ("hf", "field"),
    [
        ({**QWEN3, "attention_bias": True}, "attention_bias"),
        ({**QWEN3, "rope_scaling": {"rope_type": "longrope", "short_factor": [1.0], "long_factor": [1.0]}}, "rope_scaling.rope_type"),
        ({**QWEN3, "use_sliding_window": True, "sliding_window": 8, "layer_types": ["x", "y"]}, "layer_types"),
        ({**GEMMA, "use_bidirectional_attention": True}, "use_bidirectional_attention"),
        ({**GEMMA, "hidden_act": "swish"}, "hidden_act"),
        ({**OLMO2, "attention_bias": True}, "attention_bias"),
        ({**PHI3, "rope_scaling": {"rope_type": "longrope", "short_factor": [1.0], "long_factor": [1.0]}},
         "rope_scaling.rope_type"),
        ({**PHI3, "partial_rotary_factor": 0.75}, "partial_rotary_factor"),
        ({**COHERE, "use_qk_norm": True}, "use_qk_norm"),
        ({**COHERE, "logit_scale": -1.0}, "logit_scale"),
        ({**GRANITE, "mlp_bias": True}, "mlp_bias"),
        ({**GRANITE, "head_dim": 16}, "head_dim"),
        ({**GRANITE, "logits_scaling": 0}, "logits_scaling"),
    ],
)  # fmt: skip
def test_converters_refuse_what_they_would_compute_differently(hf: dict[str, Any], field: str) -> None:
    with pytest.raises(zoo.InteropError, match=rf"\b{field}="):
        config_from_hf(hf)


@pytest.mark.parametrize(
    ("architecture", "overrides", "words"),
    [
        ("Qwen3ForCausalLM", {"attention": {"name": "qknorm", "qk_norm": "whole"}}, "qk_norm='head'"),
        ("Olmo2ForCausalLM", {"placement": "pre"}, "post_sublayer"),
        ("GemmaForCausalLM", {"norm": "rmsnorm"}, "rmsnorm_offset"),
        ("Phi3ForCausalLM", {"mlp": {"name": "glu", "fused": False}}, "gate_up_proj"),
        ("GraniteForCausalLM", {"placement": "pre"}, "pre_scaled"),
        ("CohereForCausalLM", {"placement": {"name": "parallel", "shared_norm": False}}, "shared_norm"),
        ("CohereForCausalLM", {"embedding_scale": 2.0}, "embedding_scale"),
        ("Qwen3ForCausalLM", {"logit_scale": 0.5}, "logit_scale"),
        ("Olmo2ForCausalLM", {"embedding_scale": 2.0}, "embedding_scale"),
    ],
)
def test_export_refuses_what_the_architecture_cannot_express(
    architecture: str, overrides: dict[str, Any], words: str, tmp_path: Path
) -> None:
    model = tiny(**{**exportable(architecture), **overrides})
    with pytest.raises(zoo.InteropError, match=words):
        zoo.to_hf(model, tmp_path / "out", architecture=architecture)


def exportable(architecture: str) -> dict[str, Any]:
    """Tiny zoo config fields that ``architecture`` writes."""
    hf = {"Qwen3ForCausalLM": QWEN3, "GemmaForCausalLM": GEMMA, "Olmo2ForCausalLM": OLMO2, "Phi3ForCausalLM": PHI3,
          "GraniteForCausalLM": GRANITE, "CohereForCausalLM": COHERE}  # fmt: skip
    fields = config_from_hf(hf[architecture])
    return {k: v for k, v in fields.items() if k not in TINY}


# -- presets of the released weights ------------------------------------------------------------

RELEASED = {
    "Qwen/Qwen3-0.6B": {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 151936, "hidden_size": 1024,
        "intermediate_size": 3072, "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8,
        "head_dim": 128, "max_position_embeddings": 40960, "rms_norm_eps": 1e-6, "rope_theta": 1000000,
        "tie_word_embeddings": True, "attention_bias": False, "hidden_act": "silu", "use_sliding_window": False,
        "sliding_window": None, "max_window_layers": 28, "attention_dropout": 0.0,
    },
    "google/gemma-2b": {
        "architectures": ["GemmaForCausalLM"], "model_type": "gemma", "vocab_size": 256000, "hidden_size": 2048,
        "intermediate_size": 16384, "num_hidden_layers": 18, "num_attention_heads": 8, "num_key_value_heads": 1,
        "head_dim": 256, "max_position_embeddings": 8192, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
        "hidden_act": "gelu", "attention_bias": False, "attention_dropout": 0.0,
    },
    "allenai/OLMo-2-0425-1B": {
        "architectures": ["Olmo2ForCausalLM"], "model_type": "olmo2", "vocab_size": 100352, "hidden_size": 2048,
        "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 16, "num_key_value_heads": 16,
        "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "rope_theta": 500000, "tie_word_embeddings": False,
        "attention_bias": False, "hidden_act": "silu", "attention_dropout": 0.0,
    },
    "microsoft/Phi-3-mini-4k-instruct": {
        "architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "vocab_size": 32064, "hidden_size": 3072,
        "intermediate_size": 8192, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
        "max_position_embeddings": 4096, "original_max_position_embeddings": 4096, "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0, "rope_scaling": None, "sliding_window": 2047, "tie_word_embeddings": False,
        "hidden_act": "silu", "attention_dropout": 0.0, "resid_pdrop": 0.0, "embd_pdrop": 0.0,
    },
    "ibm-granite/granite-3.0-2b-base": {
        "architectures": ["GraniteForCausalLM"], "model_type": "granite", "vocab_size": 49155, "hidden_size": 2048,
        "intermediate_size": 8192, "num_hidden_layers": 40, "num_attention_heads": 32, "num_key_value_heads": 8,
        "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": True,
        "embedding_multiplier": 12.0, "residual_multiplier": 0.22, "attention_multiplier": 0.015625,
        "logits_scaling": 8.0, "attention_bias": False, "mlp_bias": False, "hidden_act": "silu",
        "attention_dropout": 0.1,
    },
    "CohereForAI/c4ai-command-r-v01": {
        "architectures": ["CohereForCausalLM"], "model_type": "cohere", "vocab_size": 256000, "hidden_size": 8192,
        "intermediate_size": 22528, "num_hidden_layers": 40, "num_attention_heads": 64, "num_key_value_heads": 64,
        "max_position_embeddings": 8192, "layer_norm_eps": 1e-5, "rope_theta": 8000000.0, "logit_scale": 0.0625,
        "tie_word_embeddings": True, "use_qk_norm": False, "attention_bias": False, "hidden_act": "silu",
        "attention_dropout": 0.0,
    },
}  # fmt: skip
PRESETS = {"qwen3-0.6b": "Qwen/Qwen3-0.6B", "gemma-2b": "google/gemma-2b", "olmo-2-1b": "allenai/OLMo-2-0425-1B",
           "phi-3-mini": "microsoft/Phi-3-mini-4k-instruct", "granite-3-2b": "ibm-granite/granite-3.0-2b-base",
           "command-r": "CohereForAI/c4ai-command-r-v01"}  # fmt: skip


@pytest.mark.parametrize(("preset", "repo"), sorted(PRESETS.items()))
def test_each_preset_has_as_many_parameters_as_its_released_model(preset: str, repo: str) -> None:
    assert preset_pretrained(preset) == repo
    reference = released_model(RELEASED[repo])
    assert zoo.build(preset, device="meta").num_parameters() == reference.num_parameters()


@pytest.mark.parametrize(("preset", "repo"), sorted(PRESETS.items()))
def test_each_preset_is_the_config_of_its_released_weights(preset: str, repo: str) -> None:
    hf = RELEASED[repo]
    assert config_mismatches(zoo.get_config(preset), validate_config(config_from_hf(hf)), hf) == []


def test_phi3_minis_sliding_window_is_every_layers_attention_window(tmp_path: Path) -> None:
    """Phi-3 mini 4k attends over the last 2,047 of 4,096 positions: read, kept and written back."""
    config = validate_config(config_from_hf(RELEASED["microsoft/Phi-3-mini-4k-instruct"]))
    assert config.attention.options["window"] == 2047 and not config.layer_pattern
    fields = exportable("Phi3ForCausalLM")
    model = tiny(**{**fields, "attention": {**fields["attention"], "window": 12}})
    zoo.to_hf(model, tmp_path / "out", architecture="Phi3ForCausalLM")
    assert json.loads((tmp_path / "out" / "config.json").read_text())["sliding_window"] == 12
    assert config_from_hf({**PHI3, "sliding_window": 64})["attention"].get("window") is None  # covers the context


@pytest.mark.parametrize(("heads", "kv"), [(4, 2), (8, 4), (2, 1), (6, 3)])
def test_an_ablation_scale_keeps_query_heads_per_key_value_head(heads: int, kv: int) -> None:
    """`zoo ablate --to qwen3-0.6b` trains at 4 heads: 16 heads over 8 key/value heads become 4 over 2."""
    from zoo.ablate.plan import at_scale

    scaled = at_scale(
        zoo.get_config("qwen3-0.6b"), {"d_model": 48, "n_layers": 1, "n_heads": heads}, zoo.default_registry()
    )
    assert (scaled.n_heads, scaled.attention.options["n_kv_heads"]) == (heads, kv)
    assert (
        at_scale(
            zoo.get_config("gpt2-small"), {"d_model": 48, "n_layers": 1, "n_heads": heads}, zoo.default_registry()
        ).attention.options
        == {}
    )


LLAMA = {**QWEN3, "architectures": ["LlamaForCausalLM"], "model_type": "llama"}
SLIDING_QWEN3 = {**QWEN3, "use_sliding_window": True, "sliding_window": 8}


@pytest.mark.parametrize("kinds", [["full_attention"], ["full_attention", "sliding_attention", "full_attention"]])
@pytest.mark.parametrize(
    "hf", [QWEN3, SLIDING_QWEN3, GEMMA, OLMO2, PHI3, COHERE, GRANITE, LLAMA], ids=lambda hf: hf["model_type"]
)
def test_layer_types_not_one_per_layer_are_refused_as_transformers_refuses_them(
    hf: dict[str, Any], kinds: list[str], tmp_path: Path
) -> None:
    """``layer_types`` shorter or longer than ``num_hidden_layers``: transformers' config
    refuses it, and so does every reader, whether the family reads layer_types or not,
    in one line saying what to give; ``from_hf`` refuses it before reading weights."""
    given = {**hf, "layer_types": kinds}
    with pytest.raises(Exception, match="num_hidden_layers.*must be equal to the number of `layer_types`"):  # noqa: PT011
        transformers.AutoConfig.for_model(given["model_type"], **{k: v for k, v in given.items() if k != "model_type"})
    message = f"has {len(kinds)} entries but num_hidden_layers is 2 .*give 2 of 'full_attention' or 'sliding_attention'"
    with pytest.raises(zoo.InteropError, match=message) as err:
        config_from_hf(given)
    assert "\n" not in str(err.value)
    (tmp_path / "config.json").write_text(json.dumps(given))
    with pytest.raises(zoo.InteropError, match=message):
        zoo.from_hf(tmp_path)
    both = {**hf, "layer_types": ["full_attention", "full_attention"]}
    transformers.AutoConfig.for_model(both["model_type"], **{k: v for k, v in both.items() if k != "model_type"})
    if hf["model_type"] == "qwen3":  # one per layer: read by the families that read it, refused as unread by others
        assert config_from_hf(both)["n_layers"] == 2
    else:
        with pytest.raises(zoo.InteropError, match="converter does not read this setting"):
            config_from_hf(both)

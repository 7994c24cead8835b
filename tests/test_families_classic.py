"""The classic families' parts and converters beyond the parity harness (tests/test_families.py):
rotary scaling and ALiBi slopes against transformers' own functions, each converter's
refusals, export blockers of the new switches, and each released checkpoint's preset
against its config.json (same model, same parameter count as transformers' on the meta device)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import torch

import zoo
from zoo.errors import InteropError
from zoo.interop.hf import config_from_hf
from zoo.interop.pretrained import config_mismatches, pretrained_presets
from zoo.nn.config import validate_config

transformers = pytest.importorskip("transformers")
pytest.importorskip("zoo_modern")
rope_utils = pytest.importorskip("transformers.modeling_rope_utils")

from zoo_modern.positions import Rotary, alibi_slopes  # noqa: E402

# -- rotary scaling and ALiBi, against transformers ---------------------------------------

SCALINGS = [
    {"rope_type": "linear", "factor": 4.0},
    {"rope_type": "dynamic", "factor": 2.0},
    {
        "rope_type": "llama3",
        "factor": 32.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 16,
    },
    {  # Llama 4 Scout's: equal factors, no band to blend over
        "rope_type": "llama3",
        "factor": 16.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 1.0,
        "original_max_position_embeddings": 16,
    },
    {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32},
    {
        "rope_type": "yarn",
        "factor": 8.0,
        "original_max_position_embeddings": 16,
        "beta_fast": 16.0,
        "beta_slow": 2.0,
        "truncate": False,
    },
    {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32, "mscale": 0.7, "mscale_all_dim": 1.0},
]


@pytest.mark.parametrize("scaling", SCALINGS, ids=[f"{s['rope_type']}-{i}" for i, s in enumerate(SCALINGS)])
@pytest.mark.parametrize("fraction", [1.0, 0.5])
def test_rotary_scaling_is_transformers_frequencies_and_attention_factor(
    scaling: dict[str, Any], fraction: float
) -> None:
    hf = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 256,
        "num_attention_heads": 4,
        "num_hidden_layers": 1,
        "intermediate_size": 64,
        "vocab_size": 32,
        "max_position_embeddings": 128,
        "rope_parameters": {"rope_theta": 500000.0, **scaling},
    }
    fields = {k: v for k, v in hf.items() if k not in ("architectures", "model_type")}
    rope = {**scaling, "rope_theta": 500000.0, "partial_rotary_factor": fraction}
    reference = transformers.LlamaConfig(**{**fields, "rope_parameters": rope})
    inv_freq, factor = rope_utils.ROPE_INIT_FUNCTIONS[scaling["rope_type"]](reference, "cpu")
    position = config_from_hf(hf)["position"]
    rotary = Rotary(64, position["base"], rotary_dim=int(64 * fraction), scaling=position["scaling"])
    angles = rotary.angles(torch.arange(100)[None])[0, 1]  # position 1: the inverse frequencies
    torch.testing.assert_close(angles, inv_freq, atol=0, rtol=1e-6)
    assert rotary.scale == pytest.approx(factor, rel=1e-12)


def test_dynamic_rotary_grows_its_base_only_past_the_pretraining_context() -> None:
    rotary = Rotary(16, 10000.0, scaling={"kind": "dynamic", "factor": 2.0, "original_max_seq_len": 8})
    plain = Rotary(16, 10000.0)
    short, long = torch.arange(8)[None], torch.arange(16)[None]
    assert torch.equal(rotary.angles(short), plain.angles(short))
    grown = 10000.0 * (2.0 * 16 / 8 - 1) ** (16 / 14)
    torch.testing.assert_close(rotary.angles(long), Rotary(16, grown).angles(long), atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("n_heads", range(1, 41))
def test_alibi_slopes_are_blooms_for_any_number_of_heads(n_heads: int) -> None:
    bloom = pytest.importorskip("transformers.models.bloom.modeling_bloom")
    ours = torch.tensor(alibi_slopes(n_heads))
    torch.testing.assert_close(ours, bloom._get_alibi_slopes(n_heads, torch.device("cpu")), atol=0, rtol=1e-6)


def test_interleaved_rotary_turns_neighbouring_pairs() -> None:
    """Interleaved rotary on [a, b, c, d] is halves rotary on [a, c, b, d], re-interleaved."""
    x = torch.randn(1, 2, 5, 8)
    halves, pairs = Rotary(8), Rotary(8, interleaved=True)
    state = halves.prepare(torch.arange(5)[None])
    order = torch.tensor([0, 2, 4, 6, 1, 3, 5, 7])  # neighbours (2i, 2i+1) -> (i, i + 4)
    expected, _ = halves.rotate(x[..., order], x[..., order], state)
    got, _ = pairs.rotate(x, x, state)
    torch.testing.assert_close(got, expected[..., torch.argsort(order)])


# -- refusals ----------------------------------------------------------------------------

TINY = {"hidden_size": 32, "num_attention_heads": 4, "num_hidden_layers": 1, "intermediate_size": 48, "vocab_size": 64}
GPTJ = {"architectures": ["GPTJForCausalLM"], "model_type": "gptj", "n_embd": 32, "n_head": 4, "n_layer": 1, "rotary_dim": 4, "vocab_size": 64}  # fmt: skip
PHI = {"architectures": ["PhiForCausalLM"], "model_type": "phi", **TINY}
STABLELM = {"architectures": ["StableLmForCausalLM"], "model_type": "stablelm", **TINY}
OPT = {"architectures": ["OPTForCausalLM"], "model_type": "opt", "hidden_size": 32, "num_attention_heads": 4, "num_hidden_layers": 1, "ffn_dim": 48, "vocab_size": 64}  # fmt: skip
BIGCODE = {"architectures": ["GPTBigCodeForCausalLM"], "model_type": "gpt_bigcode", "n_embd": 32, "n_head": 4, "n_layer": 1, "vocab_size": 64}  # fmt: skip
BLOOM = {"architectures": ["BloomForCausalLM"], "model_type": "bloom", "hidden_size": 32, "n_head": 4, "n_layer": 1, "vocab_size": 64}  # fmt: skip
LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", **TINY}
MPT = {"architectures": ["MPTForCausalLM"], "model_type": "mpt", "d_model": 32, "n_heads": 4, "n_layers": 1, "vocab_size": 64}  # fmt: skip
FALCON = {"architectures": ["FalconForCausalLM"], "model_type": "falcon", "hidden_size": 32, "num_attention_heads": 4, "num_hidden_layers": 1, "vocab_size": 64}  # fmt: skip

REFUSED = [
    (GPTJ, {"rotary_dim": 3}, "rotary_dim"),
    (GPTJ, {"rotary_dim": None}, "rotary_dim"),
    (GPTJ, {"activation_function": "gelu_10"}, "activation_function"),
    (PHI, {"qk_layernorm": True}, "qk_layernorm"),
    (PHI, {"rope_parameters": {"rope_type": "linear", "factor": 2.0}}, "rope_parameters.rope_type"),
    (PHI, {"partial_rotary_factor": 0.01}, "partial_rotary_factor"),
    (STABLELM, {"qk_layernorm": True}, "qk_layernorm"),
    (STABLELM, {"use_parallel_residual": True}, "use_parallel_residual"),
    (STABLELM, {"hidden_act": "gelu"}, "hidden_act"),
    (OPT, {"word_embed_proj_dim": 16}, "word_embed_proj_dim"),
    (OPT, {"enable_bias": False}, "enable_bias"),
    (OPT, {"layer_norm_elementwise_affine": False}, "layer_norm_elementwise_affine"),
    (OPT, {"_remove_final_layer_norm": "yes"}, "_remove_final_layer_norm"),
    (BIGCODE, {"scale_attn_weights": False}, "scale_attn_weights"),
    (BIGCODE, {"add_cross_attention": True}, "add_cross_attention"),
    (BLOOM, {"apply_residual_connection_post_layernorm": True}, "apply_residual_connection_post_layernorm"),
    (FALCON, {"alibi": True}, "alibi"),
    (FALCON, {"new_decoder_architecture": True, "parallel_attn": False}, "parallel_attn"),
    (FALCON, {"multi_query": False, "num_kv_heads": 2}, "num_kv_heads"),
    (FALCON, {"rope_parameters": {"rope_type": "default", "partial_rotary_factor": 0.5}}, "partial_rotary_factor"),
    (MPT, {"attn_config": {"clip_qkv": 6.0}}, "attn_config.clip_qkv"),
    (MPT, {"attn_config": {"alibi_bias_max": 16}}, "attn_config.alibi_bias_max"),
    (MPT, {"attn_config": {"alibi": False}}, "attn_config.alibi"),
    (MPT, {"attn_config": {"qk_ln": True}}, "attn_config.qk_ln"),
    (MPT, {"attn_config": {"softmax_scale": 0.5}}, "attn_config.softmax_scale"),
    (MPT, {"logit_scale": 0.5}, "logit_scale"),
    (MPT, {"expansion_ratio": 2}, "expansion_ratio"),
    (LLAMA, {"rope_parameters": {"rope_type": "longrope", "factor": 2.0}}, "rope_parameters.rope_type"),
    (LLAMA, {"rope_parameters": {"rope_type": "linear", "factor": -1.0}}, "rope_parameters.factor"),
    (LLAMA, {"rope_scaling": {"type": "linear", "factor": "two"}}, "rope_scaling.factor"),
]


@pytest.mark.parametrize(("base", "change", "field"), REFUSED, ids=[f"{b['model_type']}-{f}" for b, _, f in REFUSED])
def test_settings_the_zoo_would_compute_otherwise_are_refused_by_name(
    base: dict[str, Any], change: dict[str, Any], field: str
) -> None:
    assert config_from_hf(base)  # the base config converts
    with pytest.raises(InteropError, match=rf"\b{field.replace('.', '[.]')}\b"):
        config_from_hf({**base, **change})


@pytest.mark.parametrize(
    ("architecture", "switch"),
    [
        ("GPT2LMHeadModel", {"head_bias": True}),
        ("GPT2LMHeadModel", {"embedding_norm": True}),
        ("LlamaForCausalLM", {"head_bias": True}),
        ("GPTJForCausalLM", {"head_bias": False}),
        ("BloomForCausalLM", {"embedding_norm": False}),
    ],
)
def test_export_refuses_a_head_bias_or_embedding_norm_the_format_lacks(
    architecture: str, switch: dict[str, Any], tmp_path: Path
) -> None:
    fields = config_from_hf({"architectures": [architecture], **released_config_for(architecture)})
    with pytest.raises(InteropError, match=next(iter(switch))):
        zoo.to_hf(zoo.build({**fields, **switch}), tmp_path / "refused", architecture=architecture)
    assert not (tmp_path / "refused").exists()
    assert (zoo.to_hf(zoo.build(fields), tmp_path / "out", architecture=architecture) / "config.json").is_file()


def test_llama_export_refuses_interleaved_rotary(tmp_path: Path) -> None:
    fields = config_from_hf(LLAMA)
    model = zoo.build({**fields, "position": {**fields["position"], "interleaved": True}})
    with pytest.raises(InteropError, match="interleaved"):
        zoo.to_hf(model, tmp_path / "out", architecture="LlamaForCausalLM")


def released_config_for(architecture: str) -> dict[str, Any]:
    """A small config.json of ``architecture`` (for the blocker checks)."""
    small = {c["architectures"][0]: c for c in (GPTJ, PHI, STABLELM, OPT, BIGCODE, BLOOM, LLAMA)}
    small["GPT2LMHeadModel"] = {"model_type": "gpt2", "n_embd": 32, "n_head": 4, "n_layer": 1, "vocab_size": 64}
    return {k: v for k, v in small[architecture].items() if k != "architectures"}


# -- presets of released checkpoints -------------------------------------------------------

# The released config.json of each checkpoint (the fields that shape the model), as on the hub.
RELEASED: dict[str, dict[str, Any]] = {
    "EleutherAI/gpt-j-6b": {
        "architectures": ["GPTJForCausalLM"], "model_type": "gptj", "vocab_size": 50400, "n_positions": 2048,
        "n_embd": 4096, "n_layer": 28, "n_head": 16, "rotary_dim": 64, "n_inner": None,
        "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5, "resid_pdrop": 0.0, "embd_pdrop": 0.0,
        "attn_pdrop": 0.0, "tie_word_embeddings": False, "bos_token_id": 50256, "eos_token_id": 50256,
    },
    "microsoft/phi-2": {
        "architectures": ["PhiForCausalLM"], "model_type": "phi", "vocab_size": 51200, "hidden_size": 2560,
        "intermediate_size": 10240, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
        "max_position_embeddings": 2048, "partial_rotary_factor": 0.4, "rope_theta": 10000.0,
        "layer_norm_eps": 1e-5, "hidden_act": "gelu_new", "qk_layernorm": False, "resid_pdrop": 0.1,
        "embd_pdrop": 0.0, "attention_dropout": 0.0, "tie_word_embeddings": False,
        "bos_token_id": 50256, "eos_token_id": 50256,
    },
    "stabilityai/stablelm-2-1_6b": {
        "architectures": ["StableLmForCausalLM"], "model_type": "stablelm", "vocab_size": 100352,
        "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 24, "num_attention_heads": 32,
        "num_key_value_heads": 32, "max_position_embeddings": 4096, "rope_theta": 10000,
        "partial_rotary_factor": 0.25, "layer_norm_eps": 1e-5, "use_qkv_bias": True, "qk_layernorm": False,
        "use_parallel_residual": False, "hidden_act": "silu", "hidden_dropout": 0.0, "attention_dropout": 0.0,
        "tie_word_embeddings": False, "bos_token_id": 100257, "eos_token_id": 100257,
    },
    "facebook/opt-125m": {
        "architectures": ["OPTForCausalLM"], "model_type": "opt", "vocab_size": 50272, "hidden_size": 768,
        "num_hidden_layers": 12, "num_attention_heads": 12, "ffn_dim": 3072, "max_position_embeddings": 2048,
        "do_layer_norm_before": True, "word_embed_proj_dim": 768, "activation_function": "relu",
        "dropout": 0.1, "attention_dropout": 0.0, "enable_bias": True, "layer_norm_elementwise_affine": True,
        "_remove_final_layer_norm": False, "pad_token_id": 1, "bos_token_id": 2, "eos_token_id": 2,
    },
    "bigcode/gpt_bigcode-santacoder": {
        "architectures": ["GPTBigCodeForCausalLM"], "model_type": "gpt_bigcode", "vocab_size": 49280,
        "n_positions": 2048, "n_embd": 2048, "n_layer": 24, "n_head": 16, "n_inner": 8192,
        "activation_function": "gelu_pytorch_tanh", "multi_query": True, "layer_norm_epsilon": 1e-5,
        "scale_attn_weights": True, "resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.1,
        "bos_token_id": 49152, "eos_token_id": 49152,
    },
    "bigscience/bloom-560m": {
        "architectures": ["BloomForCausalLM"], "model_type": "bloom", "vocab_size": 250880, "hidden_size": 1024,
        "n_layer": 24, "n_head": 16, "layer_norm_epsilon": 1e-5, "apply_residual_connection_post_layernorm": False,
        "hidden_dropout": 0.0, "attention_dropout": 0.0, "pretraining_tp": 1, "slow_but_exact": False,
        "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 3,
    },
    "tiiuae/falcon-7b": {
        "architectures": ["FalconForCausalLM"], "model_type": "falcon", "vocab_size": 65024, "hidden_size": 4544,
        "num_hidden_layers": 32, "num_attention_heads": 71, "multi_query": True, "new_decoder_architecture": False,
        "parallel_attn": True, "alibi": False, "bias": False, "layer_norm_epsilon": 1e-5,
        "apply_residual_connection_post_layernorm": False, "hidden_dropout": 0.0, "attention_dropout": 0.0,
        "bos_token_id": 11, "eos_token_id": 11,
    },
    "mosaicml/mpt-7b": {
        "architectures": ["MPTForCausalLM"], "model_type": "mpt", "vocab_size": 50432, "d_model": 4096,
        "n_heads": 32, "n_layers": 32, "expansion_ratio": 4, "max_seq_len": 2048, "emb_pdrop": 0, "resid_pdrop": 0,
        "no_bias": True, "logit_scale": None, "learned_pos_emb": True, "norm_type": "low_precision_layernorm",
        "attn_config": {"alibi": True, "alibi_bias_max": 8, "attn_impl": "torch", "attn_pdrop": 0,
                        "attn_type": "multihead_attention", "attn_uses_sequence_id": False, "clip_qkv": None,
                        "prefix_lm": False, "qk_ln": False, "softmax_scale": None},
        "tie_word_embeddings": True, "bos_token_id": None, "eos_token_id": None,
    },
    "meta-llama/Llama-3.2-1B": {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 128256, "hidden_size": 2048,
        "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8,
        "head_dim": 64, "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
        "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                         "original_max_position_embeddings": 8192, "rope_type": "llama3"},
        "hidden_act": "silu", "attention_bias": False, "mlp_bias": False, "tie_word_embeddings": True,
        "bos_token_id": 128000, "eos_token_id": 128001,
    },
}  # fmt: skip
PRESETS = {repo: preset for preset, repo in pretrained_presets().items() if repo in RELEASED}


def test_each_classic_family_has_a_preset_of_its_released_weights() -> None:
    assert sorted(PRESETS) == sorted(RELEASED)


@pytest.mark.parametrize("repo", sorted(RELEASED))
def test_each_preset_is_its_released_config_with_transformers_parameter_count(repo: str) -> None:
    hf = RELEASED[repo]
    preset = zoo.get_config(PRESETS[repo])
    assert config_mismatches(preset, validate_config(config_from_hf(hf)), hf) == []
    reference_config = transformers.AutoConfig.for_model(
        hf["model_type"], **{k: v for k, v in hf.items() if k not in ("architectures", "model_type")}
    )
    with torch.device("meta"):
        reference = transformers.AutoModelForCausalLM.from_config(reference_config)
    assert zoo.build(PRESETS[repo], device="meta").num_parameters() == reference.num_parameters()


def test_the_preset_comments_state_the_parameter_count() -> None:
    """Each preset's header says its size; keep the number true."""
    for repo, preset in PRESETS.items():
        text = (resources.files("zoo_modern") / "presets" / f"{preset}.toml").read_text()
        count = zoo.build(preset, device="meta").num_parameters()
        assert f"{count:,} parameters" in text, (repo, count)


# -- the engine's switches ---------------------------------------------------------------


def test_head_bias_and_embedding_norm_are_parameters_that_count_and_compile() -> None:
    base = {"vocab_size": 97, "max_seq_len": 32, "d_model": 32, "n_layers": 1, "n_heads": 4, "dropout": 0.0}
    plain = zoo.build(base)
    model = zoo.build({**base, "head_bias": True, "embedding_norm": True})
    names = {name for name, _ in model.named_parameters()} - {name for name, _ in plain.named_parameters()}
    assert names == {"head.bias", "embed_norm.weight", "embed_norm.bias"}
    with torch.no_grad():
        model.head.bias.fill_(3.0)
        idx = torch.randint(0, 97, (2, 8))
        torch._dynamo.reset()
        fast = torch.compile(model, fullgraph=True, backend="eager")
        torch.testing.assert_close(fast(idx), model(idx))
        x = model.embed_norm(model.position.embed(model.tok_emb(idx), torch.arange(8)[None]))
        for block in model.blocks:
            x = block(x, zoo.plugin.AttentionContext(is_causal=True))
        torch.testing.assert_close(model(idx), model.head(model.final_norm(x)))
        unbiased = torch.nn.functional.linear(model.final_norm(x), model.head.weight)
        torch.testing.assert_close(model(idx), unbiased + 3.0, atol=1e-5, rtol=0)

"""The presets of the newer families' released checkpoints (Mamba-2, Mamba, Falcon-Mamba,
Bamba, Nemotron-H, LFM2, DeepSeek-V2-Lite and V3, ERNIE 4.5 0.3B): each is the config its released
``config.json`` reads into, and has as many parameters as transformers' model of that
config built on the meta device. The configs are typed in, as the hub serves them (there
is no network here); DeepSeek's carry their YaRN ``rope_scaling`` with ``mscale_all_dim``,
and V3's its FP8 ``quantization_config``, refused by name."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import pytest
import torch

import zoo
import zoo.cli
from helpers import released_model
from zoo.interop.hf import config_from_hf
from zoo.interop.pretrained import config_mismatches
from zoo.nn.config import preset_pretrained, validate_config

transformers = pytest.importorskip("transformers")
zoo_modern = pytest.importorskip("zoo_modern")
from zoo_modern.rope_scaling import scaled_frequencies  # noqa: E402

YARN_V2 = {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096, "beta_fast": 32, "beta_slow": 1}
YARN_V2 |= {"mscale": 0.707, "mscale_all_dim": 0.707}
FP8 = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}
IDS = {"bos_token_id": 0, "eos_token_id": 0, "pad_token_id": 0, "use_cache": True}
#: What transformers' Mamba files hold to initialise weights only.
MAMBA_INIT = {"time_step_min": 0.001, "time_step_max": 0.1, "time_step_floor": 0.0001, "initializer_range": 0.1}
MAMBA_INIT |= {"time_step_init_scheme": "random", "time_step_scale": 1.0, "rescale_prenorm_residual": False}
RELEASED: dict[str, dict[str, Any]] = {
    "mistralai/Mamba-Codestral-7B-v0.1": {
        **IDS, **MAMBA_INIT, "architectures": ["Mamba2ForCausalLM"], "model_type": "mamba2", "vocab_size": 32768,
        "hidden_size": 4096, "num_hidden_layers": 64, "num_heads": 128, "head_dim": 64, "state_size": 128,
        "expand": 2, "n_groups": 8, "conv_kernel": 4, "chunk_size": 256, "use_bias": False, "use_conv_bias": True,
        "layer_norm_epsilon": 1e-5, "hidden_act": "silu", "tie_word_embeddings": False, "residual_in_fp32": True,
        "rms_norm": True, "norm_before_gate": True, "time_step_limit": [0.0, math.inf], "time_step_rank": 256,
    },
    "state-spaces/mamba-2.8b-hf": {
        **IDS, **MAMBA_INIT, "architectures": ["MambaForCausalLM"], "model_type": "mamba", "vocab_size": 50280,
        "hidden_size": 2560, "num_hidden_layers": 64, "intermediate_size": 5120, "state_size": 16, "expand": 2,
        "conv_kernel": 4, "time_step_rank": 160, "use_bias": False, "use_conv_bias": True,
        "layer_norm_epsilon": 1e-5, "hidden_act": "silu", "residual_in_fp32": True,
    },
    "tiiuae/falcon-mamba-7b": {
        **IDS, **MAMBA_INIT, "architectures": ["FalconMambaForCausalLM"], "model_type": "falcon_mamba",
        "vocab_size": 65024, "hidden_size": 4096, "num_hidden_layers": 64, "intermediate_size": 8192,
        "state_size": 16, "expand": 2, "conv_kernel": 4, "time_step_rank": 256, "use_bias": False,
        "use_conv_bias": True, "layer_norm_epsilon": 1e-5, "mixer_rms_eps": 1e-6, "hidden_act": "silu",
        "tie_word_embeddings": False, "residual_in_fp32": True, "eos_token_id": 11, "pad_token_id": 11,
    },
    "ibm-ai-platform/Bamba-9B": {
        **IDS, "architectures": ["BambaForCausalLM"], "model_type": "bamba", "vocab_size": 128256,
        "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
        "num_key_value_heads": 8, "attn_layer_indices": [9, 18, 27], "attn_rotary_emb": 64, "mamba_n_heads": 128,
        "mamba_d_head": 64, "mamba_d_state": 128, "mamba_expand": 2, "mamba_n_groups": 1, "mamba_d_conv": 4,
        "mamba_chunk_size": 256, "mamba_conv_bias": True, "mamba_proj_bias": False,
        "max_position_embeddings": 262144, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "tie_word_embeddings": False, "attention_bias": False, "attention_dropout": 0.0, "hidden_act": "silu",
        "num_logits_to_keep": 1, "use_mamba_kernels": True, "initializer_range": 0.02,
    },
    "nvidia/Nemotron-H-8B-Base-8K": {
        **IDS, "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h", "vocab_size": 131072,
        "hidden_size": 4096, "intermediate_size": 21504, "num_hidden_layers": 52, "num_attention_heads": 32,
        "num_key_value_heads": 8, "attention_head_dim": 128,
        "hybrid_override_pattern": "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-",
        "mamba_num_heads": 128, "mamba_head_dim": 64, "ssm_state_size": 128, "n_groups": 8, "expand": 2,
        "conv_kernel": 4, "chunk_size": 128, "use_bias": False, "use_conv_bias": True, "mamba_proj_bias": False,
        "mamba_hidden_act": "silu", "mlp_hidden_act": "relu2", "layer_norm_epsilon": 1e-5,
        "max_position_embeddings": 8192, "attention_bias": False, "mlp_bias": False, "attention_dropout": 0.0,
        "hidden_dropout": 0.0, "residual_in_fp32": False, "rescale_prenorm_residual": True,
        "tie_word_embeddings": False, "time_step_limit": [0.0, math.inf], "time_step_min": 0.001,
        "time_step_max": 0.1, "time_step_floor": 0.0001, "initializer_range": 0.02,
    },
    "LiquidAI/LFM2-1.2B": {
        **IDS, "architectures": ["Lfm2ForCausalLM"], "model_type": "lfm2", "vocab_size": 65536, "hidden_size": 2048,
        "intermediate_size": 12288, "block_ff_dim": 12288, "block_auto_adjust_ff_dim": True,
        "block_ffn_dim_multiplier": 1.0, "block_multiple_of": 256, "num_hidden_layers": 16,
        "num_attention_heads": 32, "num_heads": 32, "num_key_value_heads": 8, "max_position_embeddings": 128000,
        "norm_eps": 1e-5, "block_norm_eps": 1e-5, "rope_theta": 1000000.0, "theta": 1000000.0, "conv_L_cache": 3,
        "conv_bias": False, "conv_dim": 2048, "conv_dim_out": 2048, "block_dim": 2048,
        "layer_types": [*["conv", "conv", "full_attention"] * 3, *["conv", "full_attention"] * 3, "conv"],
        "tie_embedding": True, "use_pos_enc": True, "block_use_swiglu": True, "block_mlp_init_scale": 1.0,
        "block_out_init_scale": 1.0, "block_use_xavier_init": True, "conv_use_xavier_init": True,
        "initializer_range": 0.02,
    },
    "baidu/ERNIE-4.5-0.3B-PT": {
        "architectures": ["Ernie4_5ForCausalLM"], "model_type": "ernie4_5", "vocab_size": 103424,
        "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 18, "num_attention_heads": 16,
        "num_key_value_heads": 2, "head_dim": 128, "max_position_embeddings": 131072, "rms_norm_eps": 1e-5,
        "rope_theta": 500000, "tie_word_embeddings": True, "use_bias": False, "hidden_act": "silu",
        "torch_dtype": "bfloat16", "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "use_cache": False,
    },
    "deepseek-ai/DeepSeek-V2-Lite": {
        **IDS, "architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2", "vocab_size": 102400,
        "hidden_size": 2048, "intermediate_size": 10944, "moe_intermediate_size": 1408, "num_hidden_layers": 27,
        "num_attention_heads": 16, "num_key_value_heads": 16, "n_routed_experts": 64, "n_shared_experts": 2,
        "num_experts_per_tok": 6, "first_k_dense_replace": 1, "moe_layer_freq": 1, "n_group": 1, "topk_group": 1,
        "topk_method": "greedy", "norm_topk_prob": False, "routed_scaling_factor": 1.0, "scoring_func": "softmax",
        "aux_loss_alpha": 0.001, "seq_aux": True, "kv_lora_rank": 512, "q_lora_rank": None,
        "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "max_position_embeddings": 163840,
        "rope_theta": 10000, "rope_scaling": YARN_V2, "rms_norm_eps": 1e-6, "attention_bias": False,
        "attention_dropout": 0.0, "hidden_act": "silu", "tie_word_embeddings": False, "pretraining_tp": 1,
        "initializer_range": 0.02, "bos_token_id": 100000, "eos_token_id": 100001,
    },
    "deepseek-ai/DeepSeek-V3": {
        **IDS, "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "vocab_size": 129280,
        "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61,
        "num_attention_heads": 128, "num_key_value_heads": 128, "n_routed_experts": 256, "n_shared_experts": 1,
        "num_experts_per_tok": 8, "first_k_dense_replace": 3, "moe_layer_freq": 1, "n_group": 8, "topk_group": 4,
        "topk_method": "noaux_tc", "norm_topk_prob": True, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid",
        "ep_size": 1, "aux_loss_alpha": 0.001, "seq_aux": True, "num_nextn_predict_layers": 1,
        "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
        "v_head_dim": 128, "max_position_embeddings": 163840, "rope_theta": 10000,
        "rope_scaling": {**YARN_V2, "mscale": 1.0, "mscale_all_dim": 1.0}, "rms_norm_eps": 1e-6,
        "attention_bias": False, "attention_dropout": 0.0, "hidden_act": "silu", "tie_word_embeddings": False,
        "initializer_range": 0.02, "bos_token_id": 0, "eos_token_id": 1, "quantization_config": FP8,
    },
}  # fmt: skip
PRESETS = {
    "mamba-codestral-7b": "mistralai/Mamba-Codestral-7B-v0.1",
    "mamba-2.8b": "state-spaces/mamba-2.8b-hf",
    "falcon-mamba-7b": "tiiuae/falcon-mamba-7b",
    "bamba-9b": "ibm-ai-platform/Bamba-9B",
    "nemotron-h-8b": "nvidia/Nemotron-H-8B-Base-8K",
    "lfm2-1.2b": "LiquidAI/LFM2-1.2B",
    "deepseek-v2-lite": "deepseek-ai/DeepSeek-V2-Lite",
    "deepseek-v3": "deepseek-ai/DeepSeek-V3",
    "ernie-4.5-0.3b": "baidu/ERNIE-4.5-0.3B-PT",
}


def unquantized(repo: str) -> dict[str, Any]:
    """The released config as its bf16 conversion holds it: no ``quantization_config``."""
    return {k: v for k, v in RELEASED[repo].items() if k != "quantization_config"}


@pytest.mark.parametrize(("preset", "repo"), sorted(PRESETS.items()))
def test_each_preset_has_as_many_parameters_as_its_released_model(
    preset: str, repo: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert preset_pretrained(preset) == repo
    expected = released_model(unquantized(repo)).num_parameters()
    started = time.perf_counter()
    assert zoo.build(preset, device="meta").num_parameters() == expected
    assert time.perf_counter() - started < 20  # stacked experts: DeepSeek-V3's 671 B in 1 s or so
    assert zoo.cli.main(["list", preset, "--json"]) == 0
    assert [entry["parameters"] for entry in json.loads(capsys.readouterr().out)] == [expected]


@pytest.mark.parametrize(("preset", "repo"), sorted(PRESETS.items()))
def test_each_preset_is_the_config_of_its_released_weights(preset: str, repo: str) -> None:
    hf = unquantized(repo)
    assert config_mismatches(zoo.get_config(preset), validate_config(config_from_hf(hf)), hf) == []
    wrong = {**hf, "vocab_size": hf["vocab_size"] + 1}
    found = config_mismatches(zoo.get_config(preset), validate_config(config_from_hf(wrong)), wrong)
    assert len(found) == 1 and found[0].startswith("vocab_size (the preset has")


def test_each_preset_header_states_its_computed_parameter_count() -> None:
    """The header comment's count is the built model's, not a guess."""
    presets = Path(zoo_modern.__file__).parent / "presets"
    for preset in PRESETS:
        lines = (presets / f"{preset}.toml").read_text().splitlines()
        header = " ".join(" ".join(line.lstrip("#").split()) for line in lines if line.startswith("#"))
        count = zoo.build(preset, device="meta").num_parameters()
        assert f"{count:,} parameters" in header, preset


@pytest.mark.parametrize("repo", ["deepseek-ai/DeepSeek-V2-Lite", "deepseek-ai/DeepSeek-V3"])
def test_deepseeks_yarn_scales_scores_and_rotary_as_transformers_does(repo: str) -> None:
    """The released YaRN (factor 40 over 4,096 positions): every score scaled by
    192^-1/2 * mscale(40, mscale_all_dim)^2, cos/sin by mscale / mscale_all_dim's ratio (1
    here), and the same stretched frequencies, as transformers' model of the config has them."""
    reference = released_model(unquantized(repo)).model
    model = zoo.build(PRESETS_OF[repo], device="meta")
    m = 0.1 * RELEASED[repo]["rope_scaling"]["mscale_all_dim"] * math.log(40) + 1
    assert model.blocks[0].attn.scale == pytest.approx(m * m / math.sqrt(192), rel=1e-12)
    assert model.blocks[0].attn.scale == pytest.approx(reference.layers[0].self_attn.scaling, rel=1e-12)
    rotary = model.position
    assert rotary.scale == pytest.approx(reference.rotary_emb.attention_scaling) and rotary.scale == 1.0
    theirs, _ = transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS["yarn"](reference.config)
    ours = scaled_frequencies(rotary.rotary_dim, rotary.base, rotary.scaling)
    assert ours.shape == (32,) and torch.allclose(ours, theirs, rtol=1e-6, atol=0)
    assert not torch.allclose(ours, 10000.0 ** -(torch.arange(0, 64, 2) / 64))  # stretched, not plain rotary


def test_deepseek_v3s_released_fp8_config_is_refused_naming_the_field_and_the_fix(tmp_path: Path) -> None:
    message = r"quantization_config \(quant_method 'fp8'\).*bf16"
    with pytest.raises(zoo.InteropError, match=message) as err:
        config_from_hf(RELEASED["deepseek-ai/DeepSeek-V3"])
    assert "\n" not in str(err.value)
    (tmp_path / "config.json").write_text(json.dumps(RELEASED["deepseek-ai/DeepSeek-V3"]))
    with pytest.raises(zoo.InteropError, match=message):  # before looking for weights
        zoo.from_hf(tmp_path)
    assert config_from_hf(unquantized("deepseek-ai/DeepSeek-V3"))["n_layers"] == 61  # the bf16 conversion reads


PRESETS_OF = {repo: preset for preset, repo in PRESETS.items()}


def test_a_released_layer_pattern_shrinks_with_the_model() -> None:
    """`zoo ablate --to deepseek-v3` at d_model 64, 4 heads: the leading dense layers' SwiGLU and the
    latent attention's head widths follow (18,432 of 7,168 -> 165 of 64; 64 of 56 a head -> 18 of 16),
    as do Nemotron-H's scans inside its pattern (heads of 64 of 128 -> 8 of 16, 8 groups -> 1)."""
    small = zoo.get_config("deepseek-v3", d_model=64, n_heads=4, n_layers=4)
    widths = [small.layer(i).mlp.options.get("hidden") for i in range(4)]
    assert widths == [165, 165, 165, 18]  # then the experts: 2,048 -> 18
    assert (small.attention.options["qk_rope_head_dim"], small.position.options["rotary_dim"]) == (18, 18)
    own = [{"mlp": {"name": "swiglu", "hidden": 7}}]
    given = zoo.get_config("deepseek-v3", d_model=64, n_heads=4, layer_pattern=own)
    assert given.layer(0).mlp.options["hidden"] == 7  # a pattern of one's own stays as given
    scan = zoo.get_config("nemotron-h-8b", d_model=64, n_heads=4).layer(0).attention.options
    assert (scan["head_dim"], scan["n_groups"]) == (8, 1)

"""LFM2's converter beyond the parity cases (tests/family_cases/hybrids.py): its MLP width
rule against transformers', its layer kinds, and the settings it refuses, one line each,
naming the field."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

import zoo
from zoo.interop.hf import config_from_hf

transformers = pytest.importorskip("transformers")
pytest.importorskip("zoo_modern")

from transformers.models.lfm2.modeling_lfm2 import Lfm2MLP  # noqa: E402

from zoo_modern.families.hybrids import ff_width  # noqa: E402

HF: dict[str, Any] = {
    "architectures": ["Lfm2ForCausalLM"],
    "model_type": "lfm2",
    "vocab_size": 64,
    "hidden_size": 32,
    "intermediate_size": 96,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "layer_types": ["conv", "conv", "full_attention", "conv"],
}


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"block_multiple_of": 16, "block_ffn_dim_multiplier": 1.5},
        {"block_ffn_dim_multiplier": None},
        {"block_auto_adjust_ff_dim": False},
        {"intermediate_size": 12288, "block_multiple_of": 256},  # LFM2-1.2B's
    ],
)
def test_the_mlp_width_is_transformers_rule(fields: dict[str, Any]) -> None:
    defaults = transformers.Lfm2Config(**HF).to_dict()
    config = SimpleNamespace(**{**defaults, **fields})  # transformers' config class refuses a null multiplier now
    width = Lfm2MLP(config).w1.out_features  # type: ignore[arg-type]
    assert ff_width(vars(config), config.intermediate_size) == width
    assert config_from_hf({**HF, **fields})["mlp"]["hidden"] == width


def test_layer_types_become_a_pattern_of_convolutions() -> None:
    fields = config_from_hf({**HF, "conv_L_cache": 5, "conv_bias": True})
    conv = {"attention": {"name": "short_conv", "kernel_size": 5, "conv_bias": True}}
    assert fields["layer_pattern"] == [conv, conv, {}]  # repeated: layer 3 is entry 0
    assert fields["attention"]["name"] == "qknorm" and fields["attention"]["n_kv_heads"] == 2
    alike = config_from_hf({**HF, "layer_types": None, "full_attn_idxs": [1, 3]})
    assert alike["layer_pattern"] == [{"attention": {"name": "short_conv", "kernel_size": 3, "conv_bias": False}}, {}]
    assert config_from_hf({**HF, "layer_types": ["full_attention"] * 4})["layer_pattern"] == []


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"layer_types": ["conv", "mamba", "conv", "conv"]}, "layer_types"),
        ({"layer_types": ["conv"] * 3}, "layer_types"),
        ({"head_dim": 16}, "head_dim"),
        ({"conv_L_cache": 1}, "conv_L_cache"),
        ({"conv_L_cache": None}, "conv_L_cache"),
        ({"attention_bias": True}, "attention_bias"),
        ({"rope_parameters": {"rope_type": "longrope", "rope_theta": 1e6}}, "rope_parameters.rope_type"),
    ],
)
def test_settings_the_zoo_does_not_model_are_refused_by_name(change: dict[str, Any], named: str) -> None:
    with pytest.raises(zoo.InteropError, match=rf"config.json: {named}=") as caught:
        config_from_hf({**HF, **change})
    assert "\n" not in str(caught.value)


def test_a_released_config_reads_with_its_older_names() -> None:
    released = {**HF, "block_ff_dim": 12288, "tie_embedding": False, "block_dim": 32, "conv_dim": 32}
    released |= {"block_use_swiglu": True, "block_norm_eps": 1e-5, "num_heads": 4, "use_pos_enc": True, "theta": 1e6}
    config = transformers.Lfm2Config(**released)
    fields = config_from_hf(released)
    assert fields["mlp"]["hidden"] == Lfm2MLP(config).w1.out_features == 8192
    assert fields["tie_embeddings"] is False and config.tie_word_embeddings is False


def test_export_refuses_a_pattern_lfm2_cannot_write(tmp_path: Path) -> None:
    fields = {**config_from_hf(HF), "max_seq_len": 64}
    conv = fields["layer_pattern"][0]
    other = {"attention": {**conv["attention"], "kernel_size": 4}}
    for pattern, blocker in (
        ([conv, other, {}, conv], "more than one kernel_size"),
        ([conv, {"norm": "layernorm"}], "layer 1 changes norm"),
    ):
        model = zoo.build({**fields, "layer_pattern": pattern})
        with pytest.raises(zoo.InteropError, match=blocker):
            zoo.to_hf(model, tmp_path / "out", architecture="Lfm2ForCausalLM")


def test_export_writes_the_width_with_the_rule_off(tmp_path: Path) -> None:
    model = zoo.build({**config_from_hf(HF), "max_seq_len": 64})
    out = zoo.to_hf(model, tmp_path / "out", architecture="Lfm2ForCausalLM")
    config = json.loads((out / "config.json").read_text())
    assert config["layer_types"] == HF["layer_types"] and config["block_auto_adjust_ff_dim"] is False
    assert config["intermediate_size"] == model.config.mlp.options["hidden"] == 256
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    idx = torch.randint(0, 64, (1, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(model.eval()(idx), reloaded(idx).logits, atol=1e-4, rtol=0)


def test_left_padding_differs_from_transformers_only_with_conv_bias(tmp_path: Path) -> None:
    """transformers zeroes a padded input, so with ``conv_bias`` in_proj's bias of the padding
    reaches the real tokens; ``short_conv`` zeroes b * h, so padding never does (documented)."""
    gaps = []
    for bias in (False, True):
        config = transformers.Lfm2Config(**{**HF, "conv_bias": bias, "max_position_embeddings": 64})
        torch.manual_seed(0)
        reference = transformers.Lfm2ForCausalLM(config).eval()
        with torch.no_grad():
            for name, p in reference.named_parameters():
                if name.endswith("bias"):
                    p.normal_(0.0, 0.5)
        reference.save_pretrained(tmp_path / str(bias))
        model = zoo.from_hf(tmp_path / str(bias))
        idx = torch.randint(0, 64, (2, 10), generator=torch.Generator().manual_seed(1))
        mask = torch.ones_like(idx)
        mask[1, :3] = 0
        with torch.no_grad():
            gaps.append(
                (model(idx, attention_mask=mask) - reference(idx, attention_mask=mask).logits)[:, 3:].abs().max()
            )
    assert gaps[0] < 1e-4 < gaps[1]


# -- Bamba -------------------------------------------------------------------------------------

BAMBA: dict[str, Any] = {
    "architectures": ["BambaForCausalLM"],
    "model_type": "bamba",
    "vocab_size": 64,
    "hidden_size": 32,
    "intermediate_size": 48,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "attn_layer_indices": [1],
    "mamba_n_heads": 8,
    "mamba_d_head": 8,
    "mamba_d_state": 8,
    "mamba_chunk_size": 4,
    "max_position_embeddings": 64,
}


def perturbed(model: Any, seed: int = 0) -> Any:
    """``model`` with every weight random (norm scales around 1), in eval mode."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.2 + (1.0 if "norm" in name else 0.0))
    return model.eval()


def test_bamba_reads_scans_and_the_attention_layers_as_a_pattern() -> None:
    fields = config_from_hf({**BAMBA, "num_hidden_layers": 4, "mamba_d_conv": 3})
    scan = fields["layer_pattern"][0]["attention"]
    assert fields["layer_pattern"][1:] == [{}, fields["layer_pattern"][0]]  # layer 3 repeats entry 0
    assert scan == {"name": "mamba2", "head_dim": 8, "d_state": 8, "expand": 2, "n_groups": 1, "conv_kernel": 3} | {
        "chunk_size": 4, "conv_bias": True, "proj_bias": False
    }  # fmt: skip
    assert (fields["attention"]["n_kv_heads"], fields["position"]["rotary_dim"]) == (2, 4)  # half of 8 turns


def test_bamba_rotates_half_of_each_head_where_config_json_names_no_share(tmp_path: Path) -> None:
    """Bamba-9B's config.json has a top-level rope_theta and no rope_parameters: transformers
    fixes the share at 0.5 then, even over a top-level partial_rotary_factor."""
    torch.manual_seed(0)
    reference = perturbed(transformers.BambaForCausalLM(transformers.BambaConfig(**BAMBA)))
    reference.save_pretrained(tmp_path)
    written = json.loads((tmp_path / "config.json").read_text())
    del written["rope_parameters"]
    (tmp_path / "config.json").write_text(json.dumps({**written, "rope_theta": 500.0, "partial_rotary_factor": 1.0}))
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    model = zoo.from_hf(tmp_path)
    assert model.config.position.options == {"base": 500.0, "rotary_dim": 4}
    idx = torch.randint(0, 64, (2, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(model(idx), reloaded(idx).logits, atol=1e-4, rtol=0)
        assert not torch.allclose(reloaded(idx).logits, reference(idx).logits, atol=1e-3)  # the base was read


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"mamba_n_heads": 4}, "mamba_n_heads"),
        ({"mamba_n_groups": 3}, "mamba_n_groups"),
        ({"mamba_d_head": "wide"}, "mamba_d_head"),
        ({"attn_layer_indices": [3]}, "attn_layer_indices"),
        ({"time_step_limit": [0.0, 1.0]}, "time_step_limit"),
        ({"z_loss_coefficient": 0.1}, "z_loss_coefficient"),
        ({"mamba_d_state": "8"}, "mamba_d_state"),
        ({"mlp_bias": True}, "mlp_bias"),
    ],
)
def test_bamba_settings_the_zoo_does_not_model_are_refused_by_name(change: dict[str, Any], named: str) -> None:
    with pytest.raises(zoo.InteropError, match=rf"config.json: {named}=") as caught:
        config_from_hf({**BAMBA, **change})
    assert "\n" not in str(caught.value)


def test_bamba_export_refuses_scans_that_differ(tmp_path: Path) -> None:
    fields = config_from_hf(BAMBA)
    scan = fields["layer_pattern"][0]
    other = {"attention": {**scan["attention"], "d_state": 4}}
    for pattern, blocker in (
        ([scan, {}, other], "scan layers whose mamba2 options differ"),
        ([scan, {"mlp": "none"}], "layer 1 changes mlp"),
        ([scan, {"attention": "eager"}], "layer 1's attention differs"),
        ([{"attention": {**scan["attention"], "d_inner": 48}}, {}], "a scan of d_inner=48"),
    ):
        with pytest.raises(zoo.InteropError, match=blocker):
            zoo.to_hf(
                zoo.build({**fields, "layer_pattern": pattern}), tmp_path / "out", architecture="BambaForCausalLM"
            )
    out = zoo.to_hf(zoo.build(fields), tmp_path / "ok", architecture="BambaForCausalLM")
    written = json.loads((out / "config.json").read_text())
    assert (written["attn_layer_indices"], written["mamba_n_heads"], written["mamba_d_head"]) == ([1], 8, 8)


# -- Nemotron-H --------------------------------------------------------------------------------

NEMOTRON: dict[str, Any] = {
    "architectures": ["NemotronHForCausalLM"],
    "model_type": "nemotron_h",
    "vocab_size": 64,
    "hidden_size": 32,
    "intermediate_size": 48,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 8,
    "mamba_num_heads": 8,
    "mamba_head_dim": 8,
    "ssm_state_size": 8,
    "n_groups": 2,
    "chunk_size": 4,
    "layers_block_type": ["linear_attention", "mlp", "full_attention"],
}


def test_nemotron_h_reads_its_letters_and_older_names_as_transformers_does() -> None:
    older = {k: v for k, v in NEMOTRON.items() if k not in ("layers_block_type", "n_groups", "num_key_value_heads")}
    older["num_attention_heads"] = 16
    older |= {"hybrid_override_pattern": "M-M*", "mamba_n_groups": 4, "mamba_d_conv": 3, "num_hidden_layers": 52}
    config = transformers.NemotronHConfig(**older)
    fields = config_from_hf(older)
    assert fields["n_layers"] == config.num_hidden_layers == 4  # the letters count the layers, not num_hidden_layers
    scan = fields["layer_pattern"][0]["attention"]
    assert (scan["n_groups"], scan["conv_kernel"]) == (config.n_groups, config.conv_kernel) == (4, 3)
    assert fields["layer_pattern"][1:] == [{"attention": "none", "mlp": "standard"}, fields["layer_pattern"][0], {}]
    assert fields["attention"]["n_kv_heads"] == config.num_key_value_heads == 8  # transformers' default
    assert fields["activation"] == "relu2" and fields["position"] == "none"


def test_squared_relu_is_transformers_relu2() -> None:
    x = torch.linspace(-3, 3, 13)
    act = zoo.build("gpt2-small", n_layers=1, d_model=16, n_heads=2, vocab_size=8, activation="relu2").blocks[0].mlp.act
    torch.testing.assert_close(act(x), transformers.activations.ACT2FN["relu2"](x), rtol=0, atol=0)
    assert act(x)[-1] == 9.0 and act(x)[0] == 0.0


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"layers_block_type": ["linear_attention", "moe", "full_attention"]}, "layers_block_type"),
        ({"layers_block_type": None, "hybrid_override_pattern": "M*X"}, "hybrid_override_pattern"),
        ({"mamba_num_heads": 3}, "n_groups"),  # 3 heads in 2 groups
        ({"mamba_hidden_act": "gelu"}, "mamba_hidden_act"),
        ({"num_nextn_predict_layers": 1}, "num_nextn_predict_layers"),
        ({"mlp_hidden_act": "tanh"}, "mlp_hidden_act"),
        ({"time_step_limit": [0.0, 0.5]}, "time_step_limit"),
    ],
)
def test_nemotron_h_settings_the_zoo_does_not_model_are_refused_by_name(change: dict[str, Any], named: str) -> None:
    with pytest.raises(zoo.InteropError, match=rf"config.json: {named}=") as caught:
        config_from_hf({**NEMOTRON, **change})
    assert "\n" not in str(caught.value)


def test_nemotron_h_export_writes_the_kinds_and_refuses_other_layers(tmp_path: Path) -> None:
    fields = {**config_from_hf(NEMOTRON), "max_seq_len": 64}
    scan, mlp = fields["layer_pattern"][:2]
    for pattern, blocker in (
        ([scan, {"mlp": "standard"}, {}], "layer 1 changes mlp"),
        ([scan, {**mlp, "norm": "layernorm"}, {}], "layer 1 changes attention, mlp, norm"),
        ([scan, {"attention": {**scan["attention"], "d_state": 4}}, {}], "scan layers whose mamba2 options differ"),
    ):
        with pytest.raises(zoo.InteropError, match=blocker):
            zoo.to_hf(zoo.build({**fields, "layer_pattern": pattern}), tmp_path / "out", architecture="NemotronHForCausalLM")  # fmt: skip
    model = perturbed(zoo.build(fields))
    out = zoo.to_hf(model, tmp_path / "ok", architecture="NemotronHForCausalLM")
    written = json.loads((out / "config.json").read_text())
    assert written["layers_block_type"] == NEMOTRON["layers_block_type"] and written["n_groups"] == 2
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    idx = torch.randint(0, 64, (2, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(model(idx), reloaded(idx).logits, atol=1e-4, rtol=0)

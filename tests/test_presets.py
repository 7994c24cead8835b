"""Every preset validates, builds on the meta device, and has its exact size."""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch

import zoo
import zoo.cli
from helpers import TINY, tiny
from zoo.summary import count_parameters, layered_counts, meta_model

EXPECTED_PARAMETERS = {
    "gpt2-small": 124_439_808,
    "gpt2-medium": 354_823_168,
    "gpt2-large": 774_030_080,
    "gpt2-xl": 1_557_611_200,
    "transformer-2017": 44_645_888,
    "transformer-2017-base": 63_082_496,
}


@pytest.mark.parametrize("name", zoo.list_models())
def test_every_preset_validates_and_builds_on_meta(name: str) -> None:
    config = zoo.get_config(name)
    model = zoo.build(name, device="meta")
    assert model.config == config
    assert all(p.is_meta for p in model.parameters())
    if name in EXPECTED_PARAMETERS:
        assert model.num_parameters() == EXPECTED_PARAMETERS[name]


@pytest.mark.parametrize("name", zoo.list_models())
def test_every_preset_runs_at_tiny_size(name: str) -> None:
    model = tiny(name)  # its head layout fitted to tiny's heads (helpers.tiny_layout)
    idx = torch.randint(0, TINY["vocab_size"], (2, 8))
    out = model(idx, idx) if model.config.architecture == "encoder_decoder" else model(idx)
    assert out.shape[-1] == TINY["vocab_size"] and torch.isfinite(out).all()


def test_builtin_presets_are_all_known() -> None:
    assert set(EXPECTED_PARAMETERS) <= set(zoo.list_models())


def test_gpt2_small_is_gpt2() -> None:
    c = zoo.get_config("gpt2-small")
    assert (c.vocab_size, c.max_seq_len, c.d_model, c.n_layers, c.n_heads, c.d_ff) == (50257, 1024, 768, 12, 12, 3072)
    assert (c.placement.name, c.position.name, c.activation.name, c.norm.name) == (
        "pre",
        "learned",
        "gelu_tanh",
        "layernorm",
    )
    assert c.tie_embeddings and c.head_output == "logits" and c.embedding_scale == "none"
    model = zoo.build("gpt2-small", device="meta")
    assert model.head.weight is model.tok_emb.weight


def test_transformer_2017_is_the_chapter_01_decoder() -> None:
    c = zoo.get_config("transformer-2017")
    assert (c.d_model, c.n_layers, c.n_heads, c.d_ff, c.vocab_size) == (512, 6, 8, 2048, 50257)
    assert (c.placement.name, c.position.name, c.activation.name, c.init.name) == (
        "post",
        "sinusoidal",
        "relu",
        "xavier",
    )
    assert c.embedding_scale == "sqrt_d_model" and c.head_output == "log_softmax"
    model = zoo.build("transformer-2017", device="meta")
    assert isinstance(model.final_norm, torch.nn.Identity)  # post-norm: no final norm


def test_log_softmax_head_returns_log_probabilities() -> None:
    out = tiny("transformer-2017")(torch.randint(0, TINY["vocab_size"], (2, 6)))
    torch.testing.assert_close(out.exp().sum(-1), torch.ones(2, 6))


def test_embedding_scale_multiplies_by_sqrt_d_model() -> None:
    scaled = tiny("gpt2-small", embedding_scale="sqrt_d_model", position="none", n_layers=1)
    assert scaled.embed_scale == pytest.approx(TINY["d_model"] ** 0.5)


def test_swapping_gpt2_toward_2017() -> None:
    model = zoo.build("gpt2-small", device="meta", placement="post", position="sinusoidal", activation="relu")
    c = model.config
    assert (c.placement.name, c.position.name, c.activation.name) == ("post", "sinusoidal", "relu")
    # Learned positions are gone (1024 x 768) and so is the final norm (2 x 768).
    assert model.num_parameters() == 124_439_808 - 1024 * 768 - 2 * 768


def test_meta_build_of_xl_is_structure_only() -> None:
    """device="meta" gives gpt2-xl no storage and no draws, which is why it is instant
    (timed by `zoo bench startup`, not here: a timed test fails on a busy machine)."""
    model = zoo.build("gpt2-xl", device="meta")
    assert all(t.is_meta for t in (*model.parameters(), *model.buffers()))
    assert model.num_parameters() == 1_557_611_200


def test_build_with_dtype_and_device() -> None:
    model = zoo.build("gpt2-small", dtype=torch.bfloat16, **TINY)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert model.head.weight is model.tok_emb.weight


# -- a preset built smaller: its absolute sizes follow d_model and n_heads (zoo.nn.sizes) --------

SMALL = ["--set", "d_model=64", "--set", "n_layers=2", "--set", "n_heads=4", "--set", "vocab_size=512"]


def info(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    capsys.readouterr()
    assert zoo.cli.main(["info", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("name", zoo.list_models())
def test_every_preset_built_small_is_small(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`--set d_model=64 --set n_layers=2 --set n_heads=4`, as `zoo ablate --to` builds a family:
    its MLP widths, head widths, rotated dimensions and key/value heads follow, so the
    model is small (its released sizes would make Mixtral's MLP alone 44M parameters)."""
    found = info(capsys, name, *SMALL)
    assert found["parameters"]["total"] < 5_000_000, found["config"]
    released = zoo.get_config(name)
    assert found["config"]["d_ff"] == max(1, round(released.d_ff * 64 / released.d_model))


def test_sizes_relative_to_the_model_scale_with_it_and_given_ones_stay(capsys: pytest.CaptureFixture[str]) -> None:
    released = zoo.get_config("qwen3-0.6b")  # 16 heads of 128 over 8 key/value heads, MLP 3072 of d_model 1024
    assert (released.attention.options["head_dim"], released.mlp.options["hidden"]) == (128, 3072)
    small = info(capsys, "qwen3-0.6b", *SMALL)["config"]
    assert small["attention"]["head_dim"] == 32  # 128 * (64 / 4) / (1024 / 16)
    assert small["attention"]["n_kv_heads"] == 2  # 2 query heads per key/value head, as released
    assert (small["d_ff"], small["mlp"]["hidden"]) == (192, 192)  # 3072 * 64 / 1024
    given = info(capsys, "qwen3-0.6b", *SMALL, "--set", "attention.head_dim=24", "--set", "mlp.hidden=100")["config"]
    assert (given["attention"]["head_dim"], given["mlp"]["hidden"]) == (24, 100)
    assert info(capsys, "qwen3-0.6b", "--set", "vocab_size=512")["config"]["attention"]["head_dim"] == 128
    swapped = info(capsys, "qwen3-0.6b", *SMALL, "--set", "mlp.name=standard")["config"]["mlp"]
    assert swapped == {"name": "standard"}  # another component: the old one's options go
    # a count that still divides the heads stays: gpt2-small-modern's 4 key/value heads at 4 heads
    assert info(capsys, "gpt2-small-modern", *SMALL)["config"]["attention"]["n_kv_heads"] == 4
    # a head's rotated dimensions follow its width, an even number: GPT-J's 64 of 256 at 16
    assert zoo.get_config("phi-2", d_model=64, n_heads=4).position.options["rotary_dim"] == 6  # 32 of 80


@pytest.mark.parametrize("name", zoo.list_models())
def test_counts_from_one_layer_per_design_equal_the_whole_model(name: str) -> None:
    """`zoo list` counts a decoder from one layer per layer_pattern entry; at a depth
    that is no multiple of the pattern, every group equals the model built whole."""
    released = zoo.get_config(name)
    grouped = {"n_groups": 2, "top_groups": 1} if released.mlp.options.get("n_groups", 1) > 1 else {}
    few = {"n_experts": 4 if grouped else 3, "top_k": 1, **grouped}  # builds fast whole (DeepSeek-V3's groups kept)
    few_experts = {"mlp": few} if released.mlp.name == "moe" else {}
    config = zoo.get_config(name, n_layers=2 * len(released.layer_pattern) + 3, vocab_size=97, **few_experts)
    assert layered_counts(config) == count_parameters(*meta_model(config))[0]


def test_counts_from_one_layer_per_design_follow_a_pattern_that_changes_the_parameters() -> None:
    pattern = [{}, {"mlp": "standard", "norm": "layernorm"}, {"attention": {"name": "gqa", "n_kv_heads": 1}}]
    config = zoo.get_config("llama-style-small", **{**TINY, "n_layers": 7}, layer_pattern=pattern)
    whole = count_parameters(*meta_model(config))[0]
    assert layered_counts(config) == whole
    plain = zoo.get_config("llama-style-small", **{**TINY, "n_layers": 7})
    assert layered_counts(plain) != layered_counts(config)

"""The engine's features for families (issue 28, item 4 and per-layer components): sliding
windows (masks, the rolling KV cache), a component pattern over the layers, soft-capping
of scores and logits, the score scale; and the converters that need them refusing what
they cannot write."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor

import zoo
import zoo.cli
from helpers import TINY, split_file, tiny
from zoo.nn.attention import MASKED, make_mask
from zoo.nn.config import preset_pretrained, validate_config

pytest.importorskip("zoo_modern")


def reference_visible(q_len: int, k_len: int, window: int | None, padding: Tensor | None) -> Tensor:
    """(B, q_len, k_len) booleans, one pair at a time: query i sits at key slot
    k_len - q_len + i and sees slot j iff i - window < j <= i and j is a real token."""
    batch = 1 if padding is None else padding.shape[0]
    visible = torch.zeros(batch, q_len, k_len, dtype=torch.bool)
    for b in range(batch):
        for i in range(q_len):
            slot = k_len - q_len + i
            for j in range(k_len):
                inside = j <= slot and (window is None or j > slot - window)
                visible[b, i, j] = inside and (padding is None or bool(padding[b, j]))
    return visible


@pytest.mark.parametrize("window", [1, 3, 5, 40, None])
@pytest.mark.parametrize(("q_len", "cached"), [(6, 0), (1, 0), (1, 7), (4, 5), (6, 2)])
@pytest.mark.parametrize("padded", [False, True])
def test_window_mask_matches_a_pair_by_pair_reference(
    window: int | None, q_len: int, cached: int, padded: bool
) -> None:
    k_len = cached + q_len
    padding = None
    if padded:
        padding = torch.ones(2, k_len, dtype=torch.bool)
        padding[1, : min(2, k_len - 1)] = False  # left padding in the second row
    mask, is_causal = make_mask(
        q_len=q_len,
        k_len=k_len,
        n_heads=2,
        causal=True,
        key_padding=padding,
        encoding=None,
        dtype=torch.float32,
        device=torch.device("cpu"),
        window=window,
    )
    if mask is None:  # the fast path: nothing or only the causal structure to mask
        assert padding is None and (window is None or window >= k_len) and is_causal == (q_len > 1)
        got = torch.ones(1, q_len, k_len, dtype=torch.bool).tril(k_len - q_len)
    else:
        assert not is_causal and set(mask.unique().tolist()) <= {0.0, MASKED}
        got = (mask == 0).all(dim=1)  # (B, q_len, k_len)
    want = reference_visible(q_len, k_len, window, padding)
    assert torch.equal(got.expand_as(want), want)


def windowed(window: int = 4, **overrides: Any) -> zoo.DecoderLM:
    return tiny("llama-style-small", attention={"name": "sdpa", "n_kv_heads": 2, "window": window}, **overrides)


def naive_greedy(model: zoo.DecoderLM, prompt: Tensor, new: int) -> Tensor:
    """Greedy decoding by recomputing the whole sequence each step (no cache)."""
    out = prompt
    with torch.no_grad():
        for _ in range(new):
            out = torch.cat([out, model(out)[:, -1].argmax(-1, keepdim=True)], dim=1)
    return out


@pytest.mark.parametrize("kernel", ["sdpa", "eager"])
def test_a_window_limits_what_a_query_sees_exactly(kernel: str) -> None:
    model = windowed(4, n_layers=1)
    idx = torch.randint(0, TINY["vocab_size"], (1, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        base = model(idx)
        changed = idx.clone()
        changed[0, 0] = (idx[0, 0] + 1) % TINY["vocab_size"]  # only positions 0..3 see token 0
        other = model(changed)
        full = zoo.build(model.config, attention={"window": None})
        full.load_state_dict(model.state_dict())
    assert not torch.allclose(base[0, :4], other[0, :4])
    torch.testing.assert_close(base[0, 4:], other[0, 4:], rtol=0, atol=0)
    assert not torch.allclose(full.eval()(idx)[0, 4:], base[0, 4:])  # the window changes later positions
    eager = model
    if kernel == "eager":
        eager = zoo.build(model.config, attention={"name": "eager", "n_kv_heads": 2, "window": 4})
    eager.load_state_dict(model.state_dict())
    torch.testing.assert_close(eager.eval()(idx), base, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("window", [1, 3, 5])
def test_cached_decoding_past_the_window_equals_the_full_forward_with_padding(window: int) -> None:
    model = windowed(window, n_layers=2)
    gen = torch.Generator().manual_seed(1)
    idx = torch.randint(0, TINY["vocab_size"], (2, 14), generator=gen)
    mask = torch.ones(2, 14, dtype=torch.long)
    mask[1, :3] = 0
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        full = model(idx, attention_mask=mask, positions=positions)
        cache = model.new_cache()
        steps = [model(idx[:, :6], attention_mask=mask[:, :6], positions=positions[:, :6], cache=cache)]
        steps += [model(idx[:, 6:9], attention_mask=mask[:, :9], positions=positions[:, 6:9], cache=cache)]
        for t in range(9, 14):
            steps.append(
                model(
                    idx[:, t : t + 1], attention_mask=mask[:, : t + 1], positions=positions[:, t : t + 1], cache=cache
                )
            )
    torch.testing.assert_close(torch.cat(steps, dim=1)[mask.bool()], full[mask.bool()], rtol=1e-5, atol=1e-5)
    assert cache.length == 14 and all(layer.stored == window - 1 for layer in cache.layers)


def test_the_rolling_cache_holds_no_more_than_the_window() -> None:
    model = windowed(4)
    prompt = torch.randint(0, TINY["vocab_size"], (1, 3), generator=torch.Generator().manual_seed(2))
    cache = model.new_cache()
    sizes = []
    with torch.no_grad():
        token = prompt
        for _ in range(30):
            token = model(token, cache=cache, last_only=True).argmax(-1)
            sizes.append(cache.nbytes)
            assert all(layer.keys is not None and layer.keys.shape[2] <= 3 for layer in cache.layers)
    assert cache.length == 32 and len(set(sizes[1:])) == 1  # constant once the window is full
    per_position = 2 * 2 * model.config.head_dim * 4 * model.config.n_layers  # k and v, 2 heads, float32
    assert sizes[-1] == 3 * per_position
    full = tiny("llama-style-small", attention={"name": "sdpa", "n_kv_heads": 2})
    full_cache = full.new_cache()
    with torch.no_grad():
        full(torch.cat([prompt, prompt.new_zeros(1, 29)], 1), cache=full_cache)
    assert full_cache.nbytes == 32 * per_position  # a full layer keeps every position


def test_greedy_generation_past_the_window_equals_recomputing() -> None:
    model = windowed(3, n_layers=2)
    prompt = torch.randint(0, TINY["vocab_size"], (2, 5), generator=torch.Generator().manual_seed(3))
    assert torch.equal(model.generate(prompt, 12), naive_greedy(model, prompt, 12))


# -- a component per layer -----------------------------------------------------------------


def test_a_layer_pattern_repeats_over_the_layers() -> None:
    pattern = [{"attention": {"window": 3}}, {}, {"attention": {"name": "eager", "window": 2}}]
    model = tiny("llama-style-small", n_layers=5, layer_pattern=pattern)
    assert [block.window for block in model.blocks] == [3, None, 2, 3, None]
    assert [type(block.attn).__name__ for block in model.blocks] == [
        "SdpaAttention",
        "SdpaAttention",
        "EagerAttention",
        "SdpaAttention",
        "SdpaAttention",
    ]
    assert model.blocks[2].attn.n_kv_heads == model.config.n_heads  # another component: its own options only
    cache = model.new_cache()
    assert [type(layer).__name__ for layer in cache.layers] == [
        "RollingLayerCache",
        "LayerCache",
        "RollingLayerCache",
        "RollingLayerCache",
        "LayerCache",
    ]
    prompt = torch.randint(0, TINY["vocab_size"], (1, 4), generator=torch.Generator().manual_seed(4))
    assert torch.equal(model.generate(prompt, 10), naive_greedy(model, prompt, 10))


@pytest.mark.parametrize(
    ("entry", "model_wide"),
    [
        ({"position": "none"}, {"position": "none"}),
        ({"position": {"base": 500.0}}, {"position": {"name": "rotary", "base": 500.0}}),
        ({"attention": {"window": 3}}, {"attention": {"window": 3}}),
    ],
    ids=["nope", "rotary-base", "window"],
)
def test_a_pattern_entry_for_every_layer_is_the_model_wide_component(
    entry: dict[str, Any], model_wide: dict[str, Any]
) -> None:
    patterned = tiny("llama-style-small", layer_pattern=[entry])
    plain = tiny("llama-style-small", **model_wide)
    plain.load_state_dict(patterned.state_dict())
    idx = torch.randint(0, TINY["vocab_size"], (2, 9), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        torch.testing.assert_close(patterned(idx), plain(idx), rtol=1e-5, atol=1e-5)
        base = tiny("llama-style-small")
        base.load_state_dict(patterned.state_dict())
        assert not torch.allclose(base(idx), patterned(idx))


def test_no_rotary_in_some_layers_decodes_through_the_cache() -> None:
    model = tiny("llama-style-small", n_layers=4, layer_pattern=[{}, {}, {}, {"position": "none"}])  # SmolLM3's NoPE
    assert list(model.layer_positions) == ["3"]
    prompt = torch.randint(0, TINY["vocab_size"], (2, 5), generator=torch.Generator().manual_seed(6))
    assert torch.equal(model.generate(prompt, 8), naive_greedy(model, prompt, 8))


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ([{"atention": {"window": 2}}], r"layer_pattern\.0\.atention: Extra inputs are not permitted"),
        ([{"attention": {"window": 0}}], r"layer_pattern\[0\]\.attention\.window: Input should be greater than 0"),
        ([{"attention": {"windw": 2}}], r"layer_pattern\[0\]\.attention 'sdpa' options.*windw"),
        ([{"init": "gpt2"}], r"layer_pattern\.0\.init: Extra inputs"),
        ([{"attention": {"n_kv_heads": 3}}], r"n_kv_heads=3 must divide n_heads=4"),
        ([{"attention": 7}], r"layer_pattern\.0\.attention"),
        ("window", r"layer_pattern"),
    ],
    ids=["unknown-kind", "bad-window", "unknown-option", "init", "component-check", "not-a-spec", "str"],
)
def test_a_bad_layer_pattern_is_refused_clearly(pattern: Any, message: str) -> None:
    with pytest.raises(zoo.ConfigError, match=message):
        zoo.get_config("gpt2-small", **{**TINY, "layer_pattern": pattern})


def test_a_pattern_longer_than_the_model_uses_its_first_entries() -> None:
    """gemma-3-1b cut to 2 layers: both local (the first two of its six entries)."""
    model = zoo.build("gemma-3-1b", n_layers=2, d_model=64, n_heads=4, vocab_size=97, d_ff=64, mlp={"hidden": 64},
                      attention={"head_dim": 16}, device="meta")  # fmt: skip
    assert [block.window for block in model.blocks] == [512, 512] and sorted(model.layer_positions) == ["0", "1"]


def test_an_unknown_component_in_a_pattern_is_refused_with_the_choices() -> None:
    with pytest.raises(zoo.UnknownComponentError, match="Available attention components"):
        zoo.get_config("gpt2-small", **{**TINY, "layer_pattern": [{"attention": "flash9"}]})


def test_an_encoder_decoder_refuses_a_layer_pattern() -> None:
    with pytest.raises(zoo.ConfigError, match="layer_pattern is set, but an 'encoder_decoder' model"):
        zoo.get_config("transformer-2017-base", **{**TINY, "layer_pattern": [{}]})


def test_a_patterned_config_survives_a_checkpoint(tmp_path: Path) -> None:
    pattern = [{"attention": {"window": 3}}, {"position": "none"}]
    model = tiny("llama-style-small", n_layers=4, layer_pattern=pattern, logit_softcap=5.0)
    path = zoo.save(model, tmp_path / "m.safetensors")
    header, _ = split_file(path.read_bytes())
    saved = json.loads(header["__metadata__"]["zoo.config"])
    assert saved["layer_pattern"] == pattern and saved["logit_softcap"] == 5.0
    loaded = zoo.load(path)
    assert loaded.config == model.config and [b.window for b in loaded.blocks] == [3, None, 3, None]
    idx = torch.randint(0, TINY["vocab_size"], (1, 9), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        torch.testing.assert_close(loaded.eval()(idx), model(idx), rtol=0, atol=0)


def test_zoo_info_shows_the_layer_pattern(capsys: pytest.CaptureFixture[str]) -> None:
    pattern = json.dumps([{"attention": {"window": 4}}, {}])
    assert zoo.cli.main(["info", "gpt2-small", "--set", "n_layers=3", "--set", f"layer_pattern={pattern}"]) == 0
    out = capsys.readouterr().out
    assert "layers 0, 2" in out and "window=4" in out and "layer 1" in out and "(the model's)" in out


# -- soft-capping and the score scale ---------------------------------------------------------


def test_logit_softcap_caps_the_logits() -> None:
    capped = tiny("llama-style-small", logit_softcap=0.2)
    plain = tiny("llama-style-small")
    plain.load_state_dict(capped.state_dict())
    idx = torch.randint(0, TINY["vocab_size"], (2, 7), generator=torch.Generator().manual_seed(8))
    with torch.no_grad():
        raw, got = plain(idx), capped(idx)
    torch.testing.assert_close(got, 0.2 * torch.tanh(raw / 0.2))
    assert got.abs().max() < 0.2 < raw.abs().max()


@pytest.mark.parametrize("attention", ["sdpa", "eager", "gqa"])
def test_attention_softcap_and_scale_follow_the_math(attention: str) -> None:
    """Scores capped as softcap * tanh(scores * scale / softcap), on the fused kernel too
    (which falls back to the math)."""
    softcap, scale = 0.5, 0.3
    model = tiny("llama-style-small", n_layers=1, attention={"name": attention, "softcap": softcap, "scale": scale})
    idx = torch.randint(0, TINY["vocab_size"], (1, 6), generator=torch.Generator().manual_seed(9))
    names = ["blocks.0.attn.hook_q", "blocks.0.attn.hook_k", "blocks.0.attn.hook_scores"]
    with torch.no_grad():
        logits, acts = model.run_with_cache(idx, names=names)
        plain = model(idx)
    torch.testing.assert_close(plain, logits)  # no hook: the same numbers as the explicit path
    q, k = acts[names[0]], acts[names[1]]
    k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
    want = softcap * torch.tanh(q @ k.transpose(-2, -1) * scale / softcap)
    future = torch.ones(6, 6, dtype=torch.bool).triu(1)
    got = acts[names[2]]
    torch.testing.assert_close(got[..., ~future], want[..., ~future], rtol=1e-5, atol=1e-6)
    assert got.abs()[..., ~future].max() < softcap
    default = tiny("llama-style-small", n_layers=1, attention={"name": attention, "scale": 1 / math.sqrt(8)})
    unscaled = tiny("llama-style-small", n_layers=1, attention=attention)
    unscaled.load_state_dict(default.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(default(idx), unscaled(idx), rtol=1e-5, atol=1e-6)  # head_dim 8


def test_an_architecture_without_a_feature_refuses_to_export_it(tmp_path: Path) -> None:
    for overrides, name in [
        ({"attention": {"window": 4}}, "window"),
        ({"logit_softcap": 3.0}, "logit_softcap"),
        ({"attention": {"softcap": 3.0}}, "softcap"),
        ({"layer_pattern": [{"attention": {"window": 4}}, {}]}, "layer_pattern"),
    ]:
        with pytest.raises(zoo.InteropError, match=rf"as GPT2LMHeadModel.*{name} \(GPT2LMHeadModel has none\)"):
            zoo.to_hf(tiny(**overrides), tmp_path / name)


def test_mistral_refuses_a_window_in_some_layers_only(tmp_path: Path) -> None:
    model = tiny(
        "llama-style-small",
        attention={"name": "sdpa", "n_kv_heads": 2},
        layer_pattern=[{"attention": {"window": 4}}, {}],
    )
    with pytest.raises(zoo.InteropError, match="layer_pattern \\(MistralForCausalLM has none\\)"):
        zoo.to_hf(model, tmp_path / "m", architecture="MistralForCausalLM")


def test_qwen2_refuses_malformed_layer_types(tmp_path: Path) -> None:
    from zoo.interop.hf import config_from_hf

    hf = {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "hidden_size": 32,
        "num_attention_heads": 4,
        "num_hidden_layers": 2,
        "intermediate_size": 40,
        "vocab_size": 97,
        "use_sliding_window": True,
        "sliding_window": 4,
    }
    with pytest.raises(zoo.InteropError, match="layer_types"):
        config_from_hf({**hf, "layer_types": ["sliding_attention"]})
    with pytest.raises(zoo.InteropError, match="max_window_layers"):
        config_from_hf({**hf, "max_window_layers": -1})
    assert config_from_hf({**hf, "max_window_layers": 1})["layer_pattern"] == [{}, {"attention": {"window": 4}}]


def test_a_patterned_model_compiles_to_one_graph() -> None:
    """Windows, NoPE layers and capped logits: one graph for forward and a decode step."""
    pattern = [{"attention": {"window": 3}}, {"position": "none", "attention": {"softcap": 30.0}}]
    model = tiny("llama-style-small", layer_pattern=pattern, logit_softcap=10.0)
    idx = torch.randint(0, TINY["vocab_size"], (2, 8), generator=torch.Generator().manual_seed(10))
    torch._dynamo.reset()
    fast = torch.compile(model, fullgraph=True, backend="eager")
    with torch.no_grad():
        torch.testing.assert_close(fast(idx), model(idx), rtol=1e-5, atol=1e-5)
        eager_cache, compiled_cache = model.new_cache(), model.new_cache()
        model(idx, cache=eager_cache)
        model(idx, cache=compiled_cache)
        step = idx[:, :1]
        expected = model(step, cache=eager_cache)
        got = torch.compile(lambda i: model(i, cache=compiled_cache), fullgraph=True, backend="eager")(step)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


# -- converters' refusals and presets -----------------------------------------------------------

STARCODER2 = {
    "architectures": ["Starcoder2ForCausalLM"], "model_type": "starcoder2", "hidden_size": 32,
    "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2, "intermediate_size": 48,
    "vocab_size": 97,
}  # fmt: skip


GEMMA2 = {**STARCODER2, "architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", "head_dim": 16}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"attention_bias": True}, "attention_bias"),
        ({"hidden_activation": "swish"}, "hidden_act"),
        ({"layer_types": ["sliding_attention"]}, "layer_types"),
        ({"use_bidirectional_attention": True}, "use_bidirectional_attention"),
        (
            {"rope_scaling": {"rope_type": "longrope", "short_factor": [1.0], "long_factor": [1.0]}},
            "rope_scaling.rope_type",
        ),
    ],
)
def test_gemma2_refuses_what_it_would_compute_differently(change: dict[str, Any], field: str) -> None:
    from zoo.interop.hf import config_from_hf

    with pytest.raises(zoo.InteropError, match=rf"{re.escape(field)}"):
        config_from_hf({**GEMMA2, **change})


GEMMA3 = {**GEMMA2, "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text"}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"rope_scaling": {"rope_type": "linear", "factor": 8.0}}, "rope_parameters.full_attention.rope_type"),
        (
            {
                "rope_parameters": {
                    "full_attention": {"rope_type": "yarn"},
                    "sliding_attention": {"rope_type": "default"},
                }
            },
            "rope_parameters.full_attention.rope_type",
        ),
        ({"use_bidirectional_attention": True}, "use_bidirectional_attention"),
        ({"hidden_activation": "relu6"}, "hidden_act"),
    ],
)
def test_gemma3_refuses_what_it_would_compute_differently(change: dict[str, Any], field: str) -> None:
    from zoo.interop.hf import config_from_hf

    with pytest.raises(zoo.InteropError, match=rf"{re.escape(field)}"):
        config_from_hf({**GEMMA3, **change})


def test_gemma3_reads_five_local_layers_to_one_global_with_their_rotary_base() -> None:
    from zoo.interop.hf import config_from_hf

    fields = config_from_hf({**GEMMA3, "num_hidden_layers": 8, "sliding_window": 8, "max_position_embeddings": 64})
    local = {"attention": {"window": 8}, "position": {"base": 10000.0}}
    assert fields["layer_pattern"] == [local] * 5 + [{}] and fields["position"]["base"] == 1e6
    assert "softcap" not in fields["attention"] and fields["logit_softcap"] is None  # Gemma 3 caps neither
    model = zoo.build(validate_config(fields), device="meta")
    assert sorted(model.layer_positions) == ["0", "1", "2", "3", "4"]
    assert [block.window for block in model.blocks] == [8, 8, 8, 8, 8, None, 8, 8]


GPT_NEO = {"architectures": ["GPTNeoForCausalLM"], "model_type": "gpt_neo", "hidden_size": 32, "num_layers": 2,
           "num_heads": 4, "vocab_size": 97}  # fmt: skip


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"attention_types": [[["global", "local"], 2]]}, "attention_types"),
        ({"attention_types": [[["global", "sparse"], 1]]}, "attention_types"),
        ({"attention_types": "global"}, "attention_types"),
        ({"activation_function": "swish"}, "activation_function"),
    ],
)
def test_gpt_neo_refuses_what_it_would_compute_differently(change: dict[str, Any], field: str) -> None:
    from zoo.interop.hf import config_from_hf

    with pytest.raises(zoo.InteropError, match=rf"{re.escape(field)}"):
        config_from_hf({**GPT_NEO, **change})


SMOLLM3 = {"architectures": ["SmolLM3ForCausalLM"], "model_type": "smollm3", "hidden_size": 32,
           "intermediate_size": 40, "num_hidden_layers": 4, "num_attention_heads": 4, "vocab_size": 97}  # fmt: skip


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"no_rope_layers": [1, 0]}, "no_rope_layers"),
        ({"no_rope_layers": [1, 2, 1, 0]}, "no_rope_layers"),
        ({"layer_types": ["full_attention"]}, "layer_types"),
        ({"mlp_bias": True}, "mlp_bias"),
    ],
)
def test_smollm3_refuses_what_it_would_compute_differently(change: dict[str, Any], field: str) -> None:
    from zoo.interop.hf import config_from_hf

    with pytest.raises(zoo.InteropError, match=rf"{re.escape(field)}"):
        config_from_hf({**SMOLLM3, **change})


def test_smollm3_has_no_rotary_in_every_fourth_layer() -> None:
    from zoo.interop.hf import config_from_hf

    fields = config_from_hf({**SMOLLM3, "num_hidden_layers": 8})
    assert fields["layer_pattern"] == [{}, {}, {}, {"position": "none"}] and fields["tie_embeddings"] is True


def test_gemma2_reads_its_local_and_global_layers_as_a_two_entry_pattern() -> None:
    from zoo.interop.hf import config_from_hf

    fields = config_from_hf({**GEMMA2, "num_hidden_layers": 5, "sliding_window": 8, "max_position_embeddings": 64})
    assert fields["layer_pattern"] == [{"attention": {"window": 8}}, {}]
    assert fields["logit_softcap"] == 30.0 and fields["attention"]["softcap"] == 50.0
    assert fields["attention"]["scale"] == 256**-0.5  # query_pre_attn_scalar's default


def test_gemma2_refuses_to_export_two_window_sizes(tmp_path: Path) -> None:
    config = zoo.get_config("gemma-2-2b", **{**TINY, "n_heads": 4, "d_ff": 64, "mlp": {"hidden": 64}})
    two = zoo.build(config, layer_pattern=[{"attention": {"window": 4}}, {"attention": {"window": 8}}], device="meta")
    with pytest.raises(zoo.InteropError, match="more than one window size"):
        zoo.interop.hf.config_to_hf(two.config, architecture="Gemma2ForCausalLM")


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"use_bias": False}, "use_bias"),
        ({"hidden_act": "swish"}, "hidden_act"),
        ({"partial_rotary_factor": 0.5}, "partial_rotary_factor"),
        ({"rope_parameters": {"rope_type": "linear", "factor": 2.0}}, "rope_parameters.rope_type"),
    ],
)
def test_starcoder2_refuses_what_it_would_compute_differently(change: dict[str, Any], field: str) -> None:
    from zoo.interop.hf import config_from_hf

    with pytest.raises(zoo.InteropError, match=rf"{re.escape(field)}"):
        config_from_hf({**STARCODER2, **change})


#: The released configs of the presets' weights (their config.json fields that size the model).
RELEASED: dict[str, dict[str, Any]] = {
    "starcoder2-3b": {
        **STARCODER2, "hidden_size": 3072, "num_attention_heads": 24, "num_key_value_heads": 2,
        "num_hidden_layers": 30, "intermediate_size": 12288, "vocab_size": 49152, "max_position_embeddings": 16384,
        "rope_theta": 999999.4420358813, "sliding_window": 4096, "norm_epsilon": 1e-5,
        "hidden_act": "gelu_pytorch_tanh", "use_bias": True, "tie_word_embeddings": True,
    },
    "gemma-2-2b": {
        "architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", "vocab_size": 256000, "hidden_size": 2304,
        "intermediate_size": 9216, "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4,
        "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh", "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "query_pre_attn_scalar": 256, "sliding_window": 4096,
        "final_logit_softcapping": 30.0, "attn_logit_softcapping": 50.0, "tie_word_embeddings": True,
    },
    "gemma-3-1b": {
        "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "vocab_size": 262144,
        "hidden_size": 1152, "intermediate_size": 6912, "num_hidden_layers": 26, "num_attention_heads": 4,
        "num_key_value_heads": 1, "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh",
        "max_position_embeddings": 32768, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
        "rope_local_base_freq": 10000.0, "query_pre_attn_scalar": 256, "sliding_window": 512,
        "sliding_window_pattern": 6, "final_logit_softcapping": None, "attn_logit_softcapping": None,
        "rope_scaling": None, "tie_word_embeddings": True,
    },
    "gpt-neo-125m": {
        "architectures": ["GPTNeoForCausalLM"], "model_type": "gpt_neo", "vocab_size": 50257, "hidden_size": 768,
        "num_layers": 12, "num_heads": 12, "attention_types": [[["global", "local"], 6]], "window_size": 256,
        "max_position_embeddings": 2048, "intermediate_size": None, "activation_function": "gelu_new",
        "layer_norm_epsilon": 1e-5, "embed_dropout": 0.0, "attention_dropout": 0.0, "resid_dropout": 0.0,
        "tie_word_embeddings": True,
    },
    "smollm3-3b": {
        "architectures": ["SmolLM3ForCausalLM"], "model_type": "smollm3", "vocab_size": 128256, "hidden_size": 2048,
        "intermediate_size": 11008, "num_hidden_layers": 36, "num_attention_heads": 16, "num_key_value_heads": 4,
        "hidden_act": "silu", "max_position_embeddings": 65536, "rms_norm_eps": 1e-6, "rope_theta": 5000000.0,
        "no_rope_layer_interval": 4, "use_sliding_window": False, "tie_word_embeddings": True,
        "attention_bias": False, "mlp_bias": False,
    },
}  # fmt: skip


@pytest.mark.parametrize("preset", sorted(RELEASED))
def test_each_preset_is_its_released_config_with_transformers_parameter_count(preset: str) -> None:
    from zoo.interop.hf import config_from_hf
    from zoo.interop.pretrained import config_mismatches

    transformers = pytest.importorskip("transformers")
    hf = RELEASED[preset]
    assert preset_pretrained(preset) is not None
    assert config_mismatches(zoo.get_config(preset), validate_config(config_from_hf(hf)), hf) == []
    config_class = transformers.CONFIG_MAPPING[hf["model_type"]]
    fields = {k: v for k, v in hf.items() if k not in ("architectures", "model_type")}
    with torch.device("meta"):
        reference = getattr(transformers, hf["architectures"][0])(config_class(**fields))
    model = zoo.build(preset, device="meta")
    assert model.num_parameters() == reference.num_parameters()


def test_a_model_type_alias_reads_with_its_table_and_is_not_inherited() -> None:
    """InternLM3's and IQuest-Coder's configs name Llama's classes: the Llama table reads them
    (by architecture or model type alone); a family derived from Llama does not."""
    from zoo.interop.hf import converter_for

    assert converter_for({"architectures": ["LlamaForCausalLM"], "model_type": "internlm3"}).model_type == "llama"
    assert converter_for({"model_type": "iquestcoder"}).architecture == "LlamaForCausalLM"
    with pytest.raises(zoo.InteropError, match="contradicts itself"):
        converter_for({"architectures": ["MistralForCausalLM"], "model_type": "internlm3"})

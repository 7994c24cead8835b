"""zoo-modern (examples/zoo-modern), the example third-party plugin.

It is installed like any user's plugin, so its components also run through the
registry-parametrised tests in test_components.py. Here: that it arrives through its
entry point and only uses zoo's public API, and that each component does what its
paper says (checked against Hugging Face's LLaMA and BLOOM where they implement it).
"""

from __future__ import annotations

import importlib.metadata as metadata
import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch

import zoo
from helpers import TINY, tiny
from zoo.nn.attention import SdpaAttention

MODERN = {
    ("position", "rotary"),
    ("position", "alibi"),
    ("position", "sinusoidal_halves"),
    ("mlp", "swiglu"),
    ("mlp", "moe"),
    ("attention", "gqa"),
    ("placement", "sandwich"),
    ("placement", "parallel"),
    ("attention", "qknorm"),
    ("mlp", "glu"),
    ("norm", "rmsnorm_offset"),
    ("placement", "post_sublayer"),
    ("placement", "pre_scaled"),
    ("attention", "sinks"),
    ("attention", "chunked"),
    ("attention", "short_conv"),
    ("attention", "mamba2"),
    ("mlp", "none"),
    ("attention", "mla"),
    ("attention", "none"),
    ("attention", "mamba"),
    ("activation", "relu2"),
    ("norm", "layernorm_plain"),
    ("placement", "sandwich_scaled"),
    ("norm", "rmsnorm_plain"),
    ("activation", "xielu"),
    ("attention", "gated_deltanet"),
    ("attention", "diff"),
}
PACKAGE = Path(__file__).resolve().parents[1] / "examples" / "zoo-modern"


def random_ids(batch: int, seq: int) -> torch.Tensor:
    return torch.randint(0, TINY["vocab_size"], (batch, seq))


# -- packaging and provenance ------------------------------------------------------------


def test_plugin_arrives_through_its_entry_point_with_its_distribution() -> None:
    (ep,) = [ep for ep in metadata.entry_points(group="zoo") if ep.name == "modern"]
    assert ep.value == "zoo_modern.plugin" and ep.dist is not None and ep.dist.name == "zoo-lm-modern"
    version = metadata.version("zoo-lm-modern")
    provided = {(c.kind, c.name) for c in zoo.components() if c.plugin.distribution == "zoo-lm-modern"}
    assert provided == MODERN
    for kind, name in MODERN:
        assert zoo.default_registry().get(kind, name).provider == f"zoo-lm-modern {version}"
    preset = zoo.default_registry().preset("gpt2-small-modern")
    assert (preset.plugin.name, preset.plugin.distribution) == ("modern", "zoo-lm-modern")


def test_rotary_scores_depend_only_on_relative_position() -> None:
    rotary = tiny(position="rotary").position
    dk = TINY["d_model"] // TINY["n_heads"]
    q, k = torch.randn(2, TINY["n_heads"], 24, dk), torch.randn(2, TINY["n_heads"], 24, dk)
    positions = torch.arange(24)[None]

    def scores(offset_q: int, offset_k: int) -> torch.Tensor:
        rq, _ = rotary.rotate(q, q, rotary.prepare(positions + offset_q))
        _, rk = rotary.rotate(k, k, rotary.prepare(positions + offset_k))
        return rq @ rk.transpose(-2, -1)  # (B, H, 24, 24): query at i + offset_q, key at j + offset_k

    reference = scores(0, 0)
    for shift in (1, 7, 500):  # the same differences, far from the origin
        torch.testing.assert_close(scores(shift, shift), reference, rtol=0, atol=2e-4)
    assert not torch.allclose(scores(3, 0), reference, atol=1e-2)  # a different difference
    rq, rk = rotary.rotate(q, k, rotary.prepare(positions + 11))
    torch.testing.assert_close(rq.norm(dim=-1), q.norm(dim=-1))  # a rotation keeps lengths
    torch.testing.assert_close(rotary.rotate(q, k, rotary.prepare(torch.zeros(1, 24, dtype=torch.long))), (q, k))


def test_rotary_angles_follow_theta_and_its_base_option() -> None:
    for base in (10000.0, 500000.0):
        rotary = tiny(position={"name": "rotary", "base": base}).position
        dk = TINY["d_model"] // TINY["n_heads"]
        positions = torch.arange(0, 1000, 37)[None]
        theta = base ** (-torch.arange(0, dk, 2, dtype=torch.float64) / dk)
        expected = positions[..., None].double() * theta  # (1, S, dk/2)
        torch.testing.assert_close(rotary.angles(positions).double(), expected, rtol=1e-6, atol=1e-4)


def test_rotary_needs_an_even_head_dim() -> None:
    with pytest.raises(zoo.ConfigError, match="head_dim = d_model / n_heads must be even, got 5"):
        tiny(position="rotary", d_model=20, n_heads=4)


def test_modern_stack_equals_hf_llama_with_the_same_weights() -> None:
    """rotary + RMSNorm + SwiGLU + GQA, pre-norm, no biases: exactly LLaMA's architecture."""
    from transformers import LlamaConfig, LlamaForCausalLM

    model = tiny("gpt2-small-modern", attention={"n_kv_heads": 2}, mlp={"multiple_of": 16})
    c = model.config
    d, kv = c.d_model, 2 * c.head_dim
    hidden = model.blocks[0].mlp.gate.out_features
    assert hidden == 96  # int(2/3 * 128) = 85, rounded up to a multiple of 16
    hf = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=c.vocab_size,
            hidden_size=d,
            intermediate_size=hidden,
            num_hidden_layers=c.n_layers,
            num_attention_heads=c.n_heads,
            num_key_value_heads=2,
            max_position_embeddings=c.max_seq_len,
            rms_norm_eps=c.norm_eps,
            tie_word_embeddings=True,
            hidden_act="silu",
            attention_bias=False,
            mlp_bias=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
    ).eval()
    state = {"model.embed_tokens.weight": model.tok_emb.weight, "model.norm.weight": model.final_norm.weight}
    for i, block in enumerate(model.blocks):
        q, k, v = block.attn.qkv.weight.split((d, kv, kv))
        layer = f"model.layers.{i}."
        state |= {
            layer + "input_layernorm.weight": block.attn_residual.norm.weight,
            layer + "self_attn.q_proj.weight": q,
            layer + "self_attn.k_proj.weight": k,
            layer + "self_attn.v_proj.weight": v,
            layer + "self_attn.o_proj.weight": block.attn.out.weight,
            layer + "post_attention_layernorm.weight": block.mlp_residual.norm.weight,
            layer + "mlp.gate_proj.weight": block.mlp.gate.weight,
            layer + "mlp.up_proj.weight": block.mlp.up.weight,
            layer + "mlp.down_proj.weight": block.mlp.down.weight,
        }
    missing, unexpected = hf.load_state_dict(state, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}  # tied to the embedding
    idx = random_ids(2, 40)
    with torch.no_grad():
        torch.testing.assert_close(model(idx), hf(idx).logits, rtol=0, atol=1e-5)


# -- ALiBi ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n_heads", "exponents"),
    [
        (4, [2, 4, 6, 8]),  # 2^(-8/n) ... 2^(-8)
        (8, [1, 2, 3, 4, 5, 6, 7, 8]),
        (16, [k / 2 for k in range(1, 17)]),
        (6, [2, 4, 6, 8, 1, 3]),  # 4 heads' slopes, then every other of 8 heads'
        (12, [1, 2, 3, 4, 5, 6, 7, 8, 0.5, 1.5, 2.5, 3.5]),  # 8 heads', then every other of 16's
    ],
)
def test_alibi_slopes_are_the_papers(n_heads: int, exponents: list[float]) -> None:
    model = tiny(position="alibi", n_heads=n_heads, d_model=4 * n_heads)
    expected = torch.tensor([2.0**-e for e in exponents])
    torch.testing.assert_close(model.position.slopes, expected)


def test_alibi_slopes_match_bloom_for_every_head_count() -> None:
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    from zoo_modern import alibi_slopes

    for n_heads in range(1, 41):
        bloom = build_alibi_tensor(torch.ones(1, 2), n_heads, torch.float32)[:, 0, 1]  # slope * position 1
        torch.testing.assert_close(torch.tensor(alibi_slopes(n_heads)), bloom, msg=f"{n_heads} heads")


def test_alibi_bias_penalises_distance_for_the_newest_queries() -> None:
    alibi = tiny(position="alibi").position
    bias = alibi.score_bias(4, 3, 7)  # 3 new queries at slots 4, 5, 6 of 7
    assert bias.shape == (4, 3, 7)
    for h, slope in enumerate(alibi.slopes.tolist()):
        for i in range(3):
            for j in range(7):
                assert bias[h, i, j].item() == pytest.approx(-slope * abs(4 + i - j))


def test_alibi_attention_without_content_is_softmax_of_the_bias() -> None:
    """With q = k = 0, what remains of attention is exactly ALiBi's recency preference."""
    model = tiny(position="alibi", attention="eager", n_layers=1)
    with torch.no_grad():
        model.blocks[0].attn.qkv.weight.zero_()
        model.blocks[0].attn.qkv.bias.zero_()
        (weights,) = model.attention_maps(random_ids(1, 9))
    distance = (torch.arange(9)[:, None] - torch.arange(9)[None]).float()
    for h, slope in enumerate(model.position.slopes.tolist()):
        expected = torch.softmax((-slope * distance).masked_fill(distance < 0, float("-inf")), dim=-1)
        torch.testing.assert_close(weights[0, h], expected)


# -- grouped-query attention ---------------------------------------------------------------


@pytest.mark.parametrize("position", ["learned", "rotary", "alibi"])
@pytest.mark.parametrize("kernel", ["sdpa", "eager"])
def test_gqa_with_all_kv_heads_is_standard_attention(kernel: str, position: str) -> None:
    standard = tiny(attention=kernel, position=position)
    grouped = tiny(attention={"name": "gqa", "n_kv_heads": TINY["n_heads"], "kernel": kernel}, position=position)
    grouped.load_state_dict(standard.state_dict())  # same names, same shapes: strict load
    idx = random_ids(2, 16)
    with torch.no_grad():
        torch.testing.assert_close(grouped(idx), standard(idx), rtol=0, atol=1e-6)


def test_gqa_cache_stores_only_the_kv_heads() -> None:
    idx = random_ids(2, 12)
    sizes = {}
    for n_kv in (1, 2, 4):
        model = tiny(attention={"name": "gqa", "n_kv_heads": n_kv})
        cache = model.new_cache()
        with torch.no_grad():
            model(idx, cache=cache)
        assert cache[0].keys.shape[1] == n_kv
        sizes[n_kv] = cache.nbytes
    reference = tiny(attention="sdpa")
    cache = reference.new_cache()
    with torch.no_grad():
        reference(idx, cache=cache)
    # (keys + values) x layers x batch x positions x head_dim x 4 bytes, per kv head
    per_head = 2 * TINY["n_layers"] * 2 * 12 * (TINY["d_model"] // TINY["n_heads"]) * 4
    assert cache.nbytes == per_head * TINY["n_heads"]
    for n_kv, size in sizes.items():
        assert size == per_head * n_kv == cache.nbytes * n_kv // TINY["n_heads"]


@pytest.mark.parametrize("position", ["rotary", "alibi"])
def test_grouped_kernels_agree_with_padding_and_cache(position: str) -> None:
    """n_kv_heads=2 of 4: both kernels map query head h to kv head h // 2."""
    sdpa = tiny(attention={"name": "gqa", "n_kv_heads": 2}, position=position)
    eager = tiny(attention={"name": "gqa", "n_kv_heads": 2, "kernel": "eager"}, position=position)
    eager.load_state_dict(sdpa.state_dict())
    idx = random_ids(2, 15)
    mask = torch.ones(2, 15, dtype=torch.long)
    mask[1, :4] = 0
    with torch.no_grad():
        torch.testing.assert_close(eager(idx), sdpa(idx), rtol=0, atol=1e-5)
        torch.testing.assert_close(
            eager(idx, attention_mask=mask)[1, 4:], sdpa(idx, attention_mask=mask)[1, 4:], rtol=0, atol=1e-5
        )
        cache = eager.new_cache()
        steps = [eager(idx[:, :6], cache=cache)] + [eager(idx[:, t : t + 1], cache=cache) for t in range(6, 15)]
        torch.testing.assert_close(torch.cat(steps, dim=1), sdpa(idx), rtol=0, atol=1e-4)
    maps = eager.attention_maps(idx)
    assert maps[0].shape == (2, TINY["n_heads"], 15, 15)


def test_gqa_cross_attention_matches_standard_attention() -> None:
    """Keys and values from an encoder's memory (the 2017 encoder-decoder's use), cached once."""
    standard = tiny(attention="sdpa").blocks[0].attn
    grouped = tiny(attention={"name": "gqa", "n_kv_heads": TINY["n_heads"]}).blocks[0].attn
    grouped.load_state_dict(standard.state_dict())
    x, memory = torch.randn(2, 5, TINY["d_model"]), torch.randn(2, 9, TINY["d_model"])
    ctx = zoo.AttentionContext(memory=memory)
    cache = tiny().new_cache()[0]
    with torch.no_grad():
        expected = standard(x, ctx)
        torch.testing.assert_close(grouped(x, ctx), expected)
        torch.testing.assert_close(grouped(x, ctx.for_layer(cache)), expected)
        torch.testing.assert_close(grouped(x, ctx.for_layer(cache)), expected)  # from the cache
    assert cache.length == 9


def test_gqa_refuses_kv_heads_that_do_not_divide_the_heads() -> None:
    with pytest.raises(zoo.ConfigError, match=r"n_kv_heads=3 must divide n_heads=4.*pick one of 1, 2, 4"):
        tiny(attention={"name": "gqa", "n_kv_heads": 3})
    with pytest.raises(zoo.ConfigError, match="n_kv_heads"):
        tiny(attention={"name": "gqa", "n_kv_heads": 0})


# -- SwiGLU and sandwich norm ----------------------------------------------------------------


def test_swiglu_hidden_size_rounds_two_thirds_of_d_ff() -> None:
    modern = zoo.build("gpt2-small-modern", device="meta")
    assert modern.blocks[0].mlp.gate.out_features == 2048  # 2/3 * 3072, as LLaMA rounds it
    assert tiny(mlp="swiglu").blocks[0].mlp.gate.out_features == 256  # 85 rounded up to 256
    assert tiny(mlp={"name": "swiglu", "multiple_of": 32}).blocks[0].mlp.up.out_features == 96
    assert tiny(mlp={"name": "swiglu", "hidden": 40}).blocks[0].mlp.down.in_features == 40


def test_swiglu_is_silu_gate_times_up() -> None:
    mlp = tiny(mlp="swiglu").blocks[0].mlp
    x = torch.randn(2, 3, TINY["d_model"])
    gate, up = mlp.gate(x), mlp.up(x)
    torch.testing.assert_close(mlp(x), mlp.down(gate * torch.sigmoid(gate) * up))


def test_sandwich_normalises_what_each_sublayer_adds() -> None:
    model = tiny(placement="sandwich", norm="rmsnorm", norm_eps=1e-12)  # eps would dominate tiny outputs
    block = model.blocks[0]
    x = torch.randn(2, 6, TINY["d_model"]) * 10
    added = block.mlp_residual(x, block.mlp) - x
    torch.testing.assert_close(added, block.mlp_residual.norm_out(block.mlp(block.mlp_residual.norm_in(x))))
    rms = added.pow(2).mean(-1).sqrt()
    torch.testing.assert_close(rms, torch.ones_like(rms), rtol=1e-3, atol=1e-3)  # norm weights start at 1
    assert isinstance(model.final_norm, torch.nn.RMSNorm)


# -- parallel attention and MLP -------------------------------------------------------------


def norm_keys(model: torch.nn.Module) -> set[str]:
    return {name for name in model.state_dict() if "residual.norm" in name}


def test_parallel_shared_norm_is_gpt_j_one_norm_per_layer() -> None:
    neox = tiny(position="rotary", placement="parallel")
    gpt_j = tiny(position="rotary", placement={"name": "parallel", "shared_norm": True})
    layers, d = TINY["n_layers"], TINY["d_model"]
    both = {
        f"blocks.{i}.{half}_residual.norm.{p}"
        for i in range(layers)
        for half in ("attn", "mlp")
        for p in ("weight", "bias")
    }
    assert norm_keys(neox) == both  # GPT-NeoX: ln1 and ln2, named as for pre-norm
    assert norm_keys(gpt_j) == {name for name in both if ".attn_" in name}  # GPT-J: ln1 only
    assert neox.num_parameters() - gpt_j.num_parameters() == layers * 2 * d  # one LayerNorm less per layer
    assert set(neox.state_dict()) - set(gpt_j.state_dict()) == both - norm_keys(gpt_j)
    block = gpt_j.blocks[0]
    assert block.mlp_residual.norm is None and block.attn_residual.norm is not None
    x, ctx = torch.randn(2, 5, d), zoo.AttentionContext(is_causal=True)
    h = block.attn_residual.norm(x)
    torch.testing.assert_close(block(x, ctx), x + block.attn(h, ctx) + block.mlp(h))


class FailsOnce:
    """A plugin whose attention fails the first time it is made: a build that dies after
    the layer's placements exist."""

    def __init__(self) -> None:
        self.failures = [RuntimeError("attention failed on purpose")]

    @zoo.hookimpl
    def zoo_register_components(self, register: Any) -> None:
        def attention(d_model: int, n_heads: int, bias: bool) -> torch.nn.Module:
            if self.failures:
                raise self.failures.pop()
            return SdpaAttention(d_model=d_model, n_heads=n_heads, bias=bias)

        register("attention", "fails_once", attention)


@pytest.mark.parametrize("shared_norm", [True, False])
def test_a_failed_build_leaves_no_half_layer_behind(shared_norm: bool) -> None:
    """A layer's two placements are made together: nothing from a build that failed
    half way pairs with the next build's (same config, same registry)."""
    registry = zoo.Registry(plugins=[FailsOnce()])
    overrides = {"position": "rotary", "placement": {"name": "parallel", "shared_norm": shared_norm}}
    config = zoo.get_config("gpt2-small", registry=registry, **TINY, **overrides, attention="fails_once")
    with pytest.raises(RuntimeError, match="on purpose") as failed:
        zoo.build(config, registry=registry)
    assert failed.traceback  # still holds the failed build's frames, and the placements they made
    model = zoo.build(config, registry=registry)
    reference = tiny(**overrides)
    assert set(model.state_dict()) == set(reference.state_dict())
    assert model.num_parameters() == reference.num_parameters()
    assert len(norm_keys(model)) == TINY["n_layers"] * (2 if shared_norm else 4)
    model(random_ids(2, 6))


# -- the preset ----------------------------------------------------------------------------


def test_modern_preset_is_gpt2_small_modernised() -> None:
    c = zoo.get_config("gpt2-small-modern")
    small = zoo.get_config("gpt2-small")
    assert (c.vocab_size, c.max_seq_len, c.d_model, c.n_layers, c.n_heads) == (
        small.vocab_size,
        small.max_seq_len,
        small.d_model,
        small.n_layers,
        small.n_heads,
    )
    assert (c.position.name, c.norm.name, c.mlp.name, c.attention.name) == ("rotary", "rmsnorm", "swiglu", "gqa")
    assert c.attention.options["n_kv_heads"] == 4 and not c.bias
    # 50257 x 768 tied embedding + 12 x (qkv 768 x 1280, out 768 x 768, SwiGLU 3 x 768 x 2048,
    # two RMSNorms) + the final RMSNorm
    assert zoo.build("gpt2-small-modern", device="meta").num_parameters() == 114_114_048


def test_modern_preset_trains_saves_loads_and_generates(tmp_path: Path) -> None:
    model = tiny("gpt2-small-modern", attention={"n_kv_heads": 2}).train()
    batch = random_ids(4, 33)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(10):
        logits = model(batch[:, :-1])  # (B, 32, V)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[0] > math.log(TINY["vocab_size"]) - 0.5  # starts near chance
    assert losses[-1] < losses[0] - 0.5 and losses[-1] == min(losses), losses

    model.eval()
    path = zoo.save(model, tmp_path / "modern.safetensors")
    loaded = zoo.load(path)
    assert loaded.config == model.config
    with torch.no_grad():
        torch.testing.assert_close(loaded(batch), model(batch), rtol=0, atol=0)

    prompt = batch[:2, :6]
    generated = loaded.generate(prompt, 12)
    assert generated.shape == (2, 18) and torch.equal(generated[:, :6], prompt)
    with torch.no_grad():  # greedy by full recompute, no cache: the same tokens
        expected = prompt
        for _ in range(12):
            expected = torch.cat([expected, model(expected)[:, -1:].argmax(-1)], dim=1)
    assert torch.equal(generated, expected)


def test_checkpoint_records_zoo_modern_and_names_it_when_missing(tmp_path: Path) -> None:
    from safetensors import safe_open

    path = zoo.save(tiny("gpt2-small-modern"), tmp_path / "modern.safetensors")
    with safe_open(path, framework="pt") as handle:
        records = json.loads(handle.metadata()["zoo.components"])
    version = metadata.version("zoo-lm-modern")
    for kind in ("attention", "position", "mlp"):
        assert (records[kind]["distribution"], records[kind]["version"], records[kind]["plugin"]) == (
            "zoo-lm-modern",
            version,
            "modern",
        )
    assert records["norm"]["distribution"] == "zoo-lm"  # rmsnorm is built in

    for registry in (zoo.Registry(entry_points=False), zoo.Registry(allow=[])):
        with pytest.raises(zoo.CheckpointError) as caught:
            zoo.load(path, registry=registry)
        message = str(caught.value)
        assert str(path) in message and "'gqa'" in message and "'rotary'" in message
        assert "pip install zoo-lm-modern" in message and f"{version} wrote this checkpoint" in message
    assert isinstance(zoo.load(path), zoo.DecoderLM)  # with the plugin, it loads

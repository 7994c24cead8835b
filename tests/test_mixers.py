"""The 2025 token mixers of zoo-modern: attention sinks (GPT-OSS), chunked local attention
(Llama 4), the short convolution (LFM2), Mamba-2's and Mamba's scans, Qwen3-Next's gated DeltaNet
(more in test_mamba2, test_mamba and test_deltanet), each against a reference written out here or
transformers' own module, swapped into GPT-2, trained, decoded with the cache, probed.

The registry-wide tests (test_components, test_hooks, test_compile, test_checkpoint,
test_flop_counter, test_generate) cover them as every other component."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch import Tensor

import zoo
from helpers import TINY, tiny
from zoo.cli import main
from zoo.decoding import Sampling, stream
from zoo.nn.attention import AttentionContext, make_mask
from zoo.probe import probe
from zoo_modern.local_attention import ChunkedAttention, SinkAttention, chunk_mask
from zoo_modern.short_conv import ShortConv

NEW = ["sinks", "chunked", "short_conv", "mamba2", "mamba", "gated_deltanet", "diff"]
# Options small enough that 5 prompt tokens and 8 new ones cross windows, chunks and kernels.
DECODED: list[Any] = [
    "sinks",
    {"name": "sinks", "window": 4, "n_kv_heads": 2},
    {"name": "chunked", "chunk_size": 4},
    {"name": "chunked", "chunk_size": 5, "n_kv_heads": 1},
    {"name": "sinks", "head_dim": 16, "qkv_bias": True},  # GPT-OSS's heads, wider than d_model / n_heads
    {"name": "chunked", "chunk_size": 4, "qk_norm": "head", "qk_norm_plain": True, "qk_norm_after": True},  # Llama 4's
    {"name": "qknorm", "qk_norm": "none", "temperature": 0.5, "temperature_floor": 2},  # Llama 4's NoPE layers
    {
        "name": "qknorm",
        "temperature": 0.5,
        "temperature_floor": 2,
        "temperature_offset": 0,
        "temperature_by_token": True,
    },
    "short_conv",
    {"name": "short_conv", "kernel_size": 5, "conv_bias": True},
    {"name": "mamba2", "d_state": 8, "chunk_size": 3},
    {"name": "mamba2", "n_groups": 2, "conv_kernel": 2, "proj_bias": False, "head_dim": 4},
    {"name": "mamba", "d_state": 4},
    {"name": "mamba", "conv_kernel": 2, "dt_rank": 3, "bcdt_norm": True, "proj_bias": False},
    {"name": "gated_deltanet", "chunk_size": 3},
    {"name": "gated_deltanet", "n_k_heads": 2, "n_v_heads": 4, "v_head_dim": 6, "conv_kernel": 2},
    "diff",
    {"name": "diff", "n_kv_heads": 2, "lambda_init": 0.3, "qk_norm": "head"},
]


def case_id(spec: Any) -> str:
    return spec if isinstance(spec, str) else "-".join(map(str, spec.values()))


def ids(*shape: int, seed: int = 1) -> Tensor:
    return torch.randint(0, TINY["vocab_size"], shape, generator=torch.Generator().manual_seed(seed))


# -- registered, listed, swapped into GPT-2 ---------------------------------------------------


@pytest.mark.parametrize("name", NEW)
def test_zoo_components_lists_it(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["components", "attention"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.split()[:2] == ["attention", name])
    assert "zoo-lm-modern" in row


# What each adds to gpt2-small's 12 layers of d = 768: a sink per head; nothing; the depthwise kernel of 3
# taps and its bias per channel, beside in_proj (3d x d) and out_proj, attention's qkv and out in size.
EXTRA_PARAMETERS = {"sinks": 12 * 12, "chunked": 0, "short_conv": 12 * (3 + 1) * 768}
# Mamba-2's, head_dim 64: in_proj to z, x (2d each), B, C (128 each) and 24 time steps, the kernel of 4 and
# its bias over x, B, C, A_log, D and dt_bias per head, the gated norm, out_proj (2d -> d), less attention's.
EXTRA_PARAMETERS["mamba2"] = 12 * (769 * 3352 + 5 * 1792 + 3 * 24 + 1536 + 1537 * 768 - 769 * 4 * 768)
# Mamba's, dt_rank 48: in_proj to x and z (2d each), the kernel of 4 and its bias over x, x_proj to the rank
# and B, C (16 each), dt_proj back with its bias, A_log (16 per channel), D, out_proj, less attention's.
# Gated DeltaNet's, heads of 64: in_proj to q, k, v, z (d each) and b, a (12 each), the kernel of 4 over
# q, k and v (no bias), A_log and dt_bias per head, the norm over one head, out_proj, less attention's.
EXTRA_PARAMETERS["gated_deltanet"] = 12 * (768 * 3096 + 2304 * 4 + 24 + 64 + 768 * 768 - 769 * 4 * 768)
# Differential attention's four lambda vectors of head_dim (64) per layer; its pair norm has no scale.
EXTRA_PARAMETERS["diff"] = 12 * 4 * 64
EXTRA_PARAMETERS["mamba"] = 12 * (769 * 3072 + 5 * 1536 + 1536 * 80 + 49 * 1536 + 1536 * 16 + 1536 + 1537 * 768 - 769 * 4 * 768)  # fmt: skip


@pytest.mark.parametrize("name", NEW)
def test_it_swaps_into_gpt2_and_three_steps_lower_the_loss(name: str) -> None:
    full = zoo.build("gpt2-small", attention=name, device="meta")  # full size, no memory
    gpt2 = zoo.build("gpt2-small", device="meta")
    assert full.num_parameters() - gpt2.num_parameters() == EXTRA_PARAMETERS[name]
    model = tiny(attention=name).train()
    assert type(model.blocks[0].attn).__module__.startswith("zoo_modern.")
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    batch = ids(4, 24, seed=3)
    losses = []
    for _ in range(3):
        logits = model(batch[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[2] < losses[0], losses


@pytest.mark.parametrize("name", ["chunked", "short_conv", "mamba2", "mamba", "gated_deltanet"])
def test_a_causal_only_mixer_is_refused_in_an_encoder_decoder(name: str) -> None:
    with pytest.raises(zoo.ConfigError, match=rf"'{name}'.*decoder-only"):
        zoo.get_config("transformer-2017-base", attention=name)
    zoo.get_config("transformer-2017-base", attention="sinks")  # a softmax with sinks fits anywhere


def test_chunks_and_a_sliding_window_do_not_combine() -> None:
    with pytest.raises(zoo.ConfigError, match=r"attention.window=3 with 'chunked'"):
        tiny(attention={"name": "chunked", "chunk_size": 4, "window": 3})


# -- incremental decoding ------------------------------------------------------------------


@pytest.mark.parametrize("spec", DECODED, ids=case_id)
def test_greedy_decoding_with_the_cache_equals_recomputing_the_whole_sequence(spec: Any) -> None:
    model = tiny(attention=spec)
    seq = ids(2, 5, seed=4)
    steps = list(stream(model, seq, 8, sampling=Sampling()))  # greedy
    assert len(steps) == 8
    with torch.no_grad():
        for step in steps:
            torch.testing.assert_close(step.scores, model(seq)[:, -1], rtol=0, atol=1e-5)
            assert torch.equal(step.tokens, step.scores.argmax(-1))
            seq = torch.cat([seq, step.tokens[:, None]], dim=1)
    assert torch.equal(model.generate(seq[:, :5], 8), seq)  # generate's own loop: the same tokens


def test_temperature_scales_each_query_by_its_slot() -> None:
    """q at slot p times 1 + t * log1p(floor((p + 1) / floor)) (Llama 4's tuning), keys untouched."""
    spec = {"name": "qknorm", "qk_norm": "none", "temperature": 0.5, "temperature_floor": 3}
    tuned, plain = tiny(attention=spec), tiny(attention={**spec, "temperature": 0.0})
    names = ["blocks.0.attn.hook_q", "blocks.0.attn.hook_k"]
    _, ours = tuned.run_with_cache(ids(1, 9), names=names)
    _, theirs = plain.run_with_cache(ids(1, 9), names=names)
    factor = 1 + 0.5 * torch.log1p(torch.floor((torch.arange(9.0) + 1) / 3))  # 1 for slots 0-1, then grows
    torch.testing.assert_close(ours[names[0]], theirs[names[0]] * factor[:, None])
    torch.testing.assert_close(ours[names[1]], theirs[names[1]])
    assert factor[1] == 1 and factor[2] > 1


def test_a_temperature_by_token_reads_a_left_padded_row_as_alone() -> None:
    """With ``temperature_by_token`` (Ministral 3's position ids) the slots count from each
    row's first real token, so padding changes nothing; by slot (Llama 4's) it shifts them."""
    spec = {"name": "qknorm", "qk_norm": "none", "temperature": 8.0, "temperature_floor": 1, "temperature_offset": 0}
    real = ids(1, 7)
    padded, mask = torch.cat([ids(1, 3, seed=9), real], dim=1), torch.tensor([[0, 0, 0] + [1] * 7])
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    outs = []
    for by_token in (True, False):
        model = tiny(attention={**spec, "temperature_by_token": by_token})
        with torch.no_grad():
            outs.append((model(padded, attention_mask=mask, positions=positions)[:, 3:], model(real)))
    torch.testing.assert_close(*outs[0], atol=1e-5, rtol=0)
    assert not torch.allclose(*outs[1], atol=1e-4)


@pytest.mark.parametrize(
    ("spec", "kept"),
    [({"name": "chunked", "chunk_size": 4}, 3), ({"name": "short_conv", "kernel_size": 5}, 4), ("sinks", 13)],
    ids=["chunked", "short_conv", "sinks"],
)
def test_the_cache_keeps_what_a_later_position_reads(spec: Any, kept: int) -> None:
    """A chunk's last chunk_size - 1 keys; a convolution's last kernel_size - 1 inputs."""
    model = tiny(attention=spec)
    cache = model.new_cache()
    with torch.no_grad():
        model(ids(2, 13), cache=cache)
    assert cache.length == 13 and [layer.stored for layer in cache.layers] == [kept] * TINY["n_layers"]
    if spec == "sinks":
        return
    width = TINY["d_model"] * (1 if spec["name"] == "short_conv" else 2)  # b * h alone; keys and values
    assert cache.nbytes == TINY["n_layers"] * 2 * kept * width * 4  # layers x batch x positions x float32s


def test_reordering_the_cache_moves_the_convolution_state_with_its_row() -> None:
    """Beam search's ``cache.reorder``: row 1's state, kept twice, decodes as row 1 does."""
    model = tiny(attention={"name": "short_conv", "kernel_size": 4})
    seq, nxt = ids(2, 6, seed=7), ids(2, 1, seed=8)
    cache = model.new_cache()
    with torch.no_grad():
        model(seq, cache=cache)
        cache.reorder(torch.tensor([1, 1]))
        step = model(nxt[[1, 1]], cache=cache)[:, -1]
        full = model(torch.cat([seq[1:], nxt[1:]], dim=1))[:, -1]
    torch.testing.assert_close(step, full.expand(2, -1), rtol=0, atol=1e-5)


# -- references ----------------------------------------------------------------------------


def naive_attention(attn: Any, x: Tensor, allowed: Tensor, sinks: Tensor | None = None) -> Tensor:
    """The layer written out with loops over heads: q, k, v from the fused projection,
    scores over the ``allowed`` (S, S) keys, a softmax with an optional sink logit per
    head in its denominator, the weighted values, the output projection."""
    batch, seq, d = x.shape
    heads, kv_heads, dk = attn.n_heads, attn.n_kv_heads, d // attn.n_heads
    q, k, v = attn.qkv(x).split([d, kv_heads * dk, kv_heads * dk], dim=-1)
    out = torch.zeros(batch, seq, d)
    for h in range(heads):
        g = h // (heads // kv_heads)  # the key/value head this query head reads
        qh, kh, vh = q[..., h * dk : (h + 1) * dk], k[..., g * dk : (g + 1) * dk], v[..., g * dk : (g + 1) * dk]
        scores = (qh @ kh.transpose(-2, -1) / math.sqrt(dk)).masked_fill(~allowed, -math.inf)  # (B, S, S)
        exp = scores.exp()
        denominator = exp.sum(-1, keepdim=True) + (0.0 if sinks is None else sinks[h].exp())
        out[..., h * dk : (h + 1) * dk] = (exp / denominator) @ vh
    result: Tensor = attn.out(out)
    return result


def causal(seq: int, window: int | None = None) -> Tensor:
    i, j = torch.arange(seq)[:, None], torch.arange(seq)[None]
    return (j <= i) & (j > i - (window or seq))


@pytest.mark.parametrize(("window", "n_kv_heads"), [(None, None), (3, 2)])
def test_sinks_equal_a_naive_softmax_with_the_sink_in_its_denominator(window: int | None, n_kv_heads: Any) -> None:
    torch.manual_seed(0)
    attn = SinkAttention(16, 4, n_kv_heads=n_kv_heads, window=window).eval()
    with torch.no_grad():
        attn.sinks.copy_(torch.tensor([-1.0, 0.0, 1.5, 3.0]))
    x = torch.randn(2, 9, 16)
    mask = make_mask(
        q_len=9, k_len=9, n_heads=4, causal=True, key_padding=None, encoding=None, dtype=x.dtype, device=x.device,
        window=window,
    )  # fmt: skip
    with torch.no_grad():
        got = attn(x, AttentionContext(*mask))
        expected = naive_attention(attn, x, causal(9, window), attn.sinks)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)


def test_the_sink_softmax_equals_transformers_gpt_oss_eager_attention() -> None:
    """``ctx.attend`` with sinks against GPT-OSS's own kernel, grouped heads and a window's mask."""
    from types import SimpleNamespace

    from transformers.models.gpt_oss.modeling_gpt_oss import eager_attention_forward

    torch.manual_seed(0)
    q, k, v = torch.randn(2, 4, 7, 8), torch.randn(2, 2, 7, 8), torch.randn(2, 2, 7, 8)
    sinks = torch.randn(4)
    mask, _ = make_mask(
        q_len=7, k_len=7, n_heads=4, causal=True, key_padding=None, encoding=None, dtype=q.dtype, device=q.device,
        window=3,
    )  # fmt: skip
    module = SimpleNamespace(num_key_value_groups=2, sinks=sinks, training=False)
    expected, weights = eager_attention_forward(module, q, k, v, mask, scaling=8**-0.5)
    got = AttentionContext(mask=mask).attend(q, k, v, sinks=sinks)  # (B, H, S, dk); transformers' is (B, S, H, dk)
    torch.testing.assert_close(got, expected.transpose(1, 2), rtol=0, atol=1e-6)
    assert (weights.sum(-1) < 1).all()


def test_a_sink_at_minus_infinity_is_plain_attention() -> None:
    torch.manual_seed(0)
    attn = SinkAttention(16, 4).eval()
    with torch.no_grad():
        attn.sinks.fill_(-math.inf)
        x = torch.randn(2, 7, 16)
        plain = zoo.EagerAttention(16, 4).eval()
        plain.load_state_dict({k: v for k, v in attn.state_dict().items() if k != "sinks"})
        ctx = AttentionContext(is_causal=True)
        torch.testing.assert_close(attn(x, ctx), plain(x, ctx), rtol=0, atol=1e-6)


@pytest.mark.parametrize(("chunk_size", "n_kv_heads"), [(3, None), (4, 2), (16, None)])
def test_chunked_attention_equals_a_naive_softmax_within_each_chunk(chunk_size: int, n_kv_heads: Any) -> None:
    torch.manual_seed(0)
    attn = ChunkedAttention(16, 4, chunk_size=chunk_size, n_kv_heads=n_kv_heads).eval()
    x = torch.randn(2, 10, 16)
    i, j = torch.arange(10)[:, None], torch.arange(10)[None]
    allowed = (j <= i) & (j // chunk_size == i // chunk_size)
    with torch.no_grad():
        got = attn(x, AttentionContext(is_causal=True))
        torch.testing.assert_close(got, naive_attention(attn, x, allowed), rtol=0, atol=1e-5)
        if chunk_size >= 10:  # one chunk: causal attention
            torch.testing.assert_close(got, naive_attention(attn, x, causal(10)), rtol=0, atol=1e-5)


def test_chunks_start_at_the_first_position_in_the_model() -> None:
    """Through the model: a query after the chunk boundary ignores the chunk before."""
    model = tiny(attention={"name": "chunked", "chunk_size": 4}, position="none")
    seq = ids(1, 8)
    changed = seq.clone()
    changed[0, :4] = (changed[0, :4] + 1) % TINY["vocab_size"]  # the whole first chunk
    with torch.no_grad():
        a, b = model(seq), model(changed)
    torch.testing.assert_close(a[:, 4:], b[:, 4:], rtol=0, atol=1e-6)  # the second chunk never saw the first
    assert not torch.allclose(a[:, :4], b[:, :4])


def test_chunks_start_at_each_rows_first_real_token_as_transformers_overlay() -> None:
    """A left-padded row reads as it would alone (transformers' chunked_overlay), in the
    forward and in cached decoding."""
    from transformers.masking_utils import chunked_causal_mask_function

    model = tiny(attention={"name": "chunked", "chunk_size": 3})
    real = ids(1, 7)
    padded, mask = torch.cat([ids(1, 2, seed=9), real], dim=1), torch.tensor([[0, 0] + [1] * 7])
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        alone = model(real)
        torch.testing.assert_close(
            model(padded, attention_mask=mask, positions=positions)[:, 2:], alone, atol=1e-5, rtol=0
        )
        cache = model.new_cache()
        model(padded[:, :5], attention_mask=mask[:, :5], positions=positions[:, :5], cache=cache)
        steps = [
            model(padded[:, t : t + 1], attention_mask=mask[:, : t + 1], positions=positions[:, t : t + 1], cache=cache)
            for t in range(5, 9)
        ]
    torch.testing.assert_close(torch.cat(steps, dim=1), alone[:, 3:], atol=1e-5, rtol=0)
    attend = chunked_causal_mask_function(3, torch.tensor([2]))
    i, j = torch.arange(9)[:, None], torch.arange(9)[None]
    ctx = AttentionContext(is_causal=True, padding=mask.bool())
    ours = chunk_mask(ctx, torch.zeros(1, 1, 9, 8), torch.zeros(1, 1, 9, 8), 3)[0, 0] == 0
    assert torch.equal(ours, attend(0, 0, i, j))


@pytest.mark.parametrize("bias", [False, True])
def test_short_conv_equals_transformers_lfm2_short_conv(bias: bool) -> None:
    from transformers import Lfm2Config
    from transformers.models.lfm2.modeling_lfm2 import Lfm2ShortConv

    config = Lfm2Config(
        hidden_size=16, conv_L_cache=3, conv_bias=bias, num_hidden_layers=1, layer_types=["conv"], vocab_size=11
    )
    torch.manual_seed(0)
    reference = Lfm2ShortConv(config, layer_idx=0).eval()
    mixer = ShortConv(16, kernel_size=3, conv_bias=bias).eval()
    mixer.load_state_dict(reference.state_dict())  # the same names and shapes: a strict load
    x = torch.randn(2, 9, 16)
    with torch.no_grad():
        torch.testing.assert_close(mixer(x, AttentionContext()), reference(x), rtol=0, atol=1e-5)


def test_short_conv_equals_a_naive_loop_over_positions() -> None:
    torch.manual_seed(0)
    mixer = ShortConv(8, kernel_size=4).eval()
    x = torch.randn(1, 6, 8)
    with torch.no_grad():
        b, c, h = mixer.in_proj(x).chunk(3, dim=-1)
        bh, weight = (b * h)[0], mixer.conv.weight[:, 0]  # (S, d), (d, L)
        rows = []
        for t in range(6):
            acc = mixer.conv.bias.clone()
            for lag in range(4):  # the kernel's last tap reads position t itself
                if t - lag >= 0:
                    acc += weight[:, 3 - lag] * bh[t - lag]
            rows.append(acc)
        expected = mixer.out_proj(c[0] * torch.stack(rows))
        torch.testing.assert_close(mixer(x, AttentionContext())[0], expected, rtol=0, atol=1e-5)


def test_left_padding_never_reaches_a_real_token_through_the_convolution() -> None:
    model = tiny(attention="short_conv", position="none")
    real = ids(1, 6)
    padded = torch.cat([ids(1, 3, seed=9), real], dim=1)
    mask = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 1, 1]])
    with torch.no_grad():
        torch.testing.assert_close(model(padded, attention_mask=mask)[:, 3:], model(real), rtol=0, atol=1e-5)


# -- probes and maps of a model without scores ------------------------------------------------


def test_probe_skips_the_entropy_of_a_mixer_with_a_note() -> None:
    pattern = [{"attention": {"name": "short_conv"}}, {}]  # LFM2's hybrid: convolution, then attention
    model = tiny(attention="sdpa", layer_pattern=pattern, n_layers=2)
    result = probe(model, ids(2, 12))
    assert result.attention_entropy[0] == [] and len(result.attention_entropy[1]) == TINY["n_heads"]
    assert any("block(s) 0 mix tokens without attention scores" in note for note in result.notes)
    assert all(math.isfinite(v) for v in result.residual_rms) and result.grad_norm["attention"][0] > 0


def test_zoo_probe_shows_a_dash_and_the_note_for_a_mixer(capsys: pytest.CaptureFixture[str]) -> None:
    sets = ["--set=vocab_size=256", "--set=max_seq_len=64", "--set=d_model=32", "--set=n_heads=4", "--set=n_layers=2"]
    argv = ["probe", "gpt2-small", *sets, "--variant", "attention=sdpa", "--variant", "attention=short_conv"]
    assert main([*argv, "--seq-len", "16", "--batch-size", "2", "--metrics", "entropy"]) == 0
    out, err = capsys.readouterr()
    rows = out[out.index("attention entropy") :].splitlines()[3:5]  # blocks 0 and 1: sdpa, then short_conv
    assert [row.split()[0] for row in rows] == ["0", "1"] and all(row.split()[2] == "-" for row in rows)
    assert all(float(row.split()[1]) > 0 for row in rows)
    assert "attention=short_conv: block(s) 0, 1 mix tokens without attention scores" in err


def test_attention_maps_of_a_mixer_say_why_there_are_none() -> None:
    model = tiny(attention="short_conv")
    with pytest.raises(zoo.HookError, match=r"block\(s\) 0, 1 mix tokens without attention scores"):
        model.attention_maps(ids(1, 5))
    assert "blocks.0.attn.hook_z" in model.hook_points() and "blocks.0.attn.hook_q" not in model.hook_points()


def test_weights_by_head_of_a_model_with_a_mixer_say_which_blocks_have_none() -> None:
    model = tiny(attention="sdpa", layer_pattern=[{}, {"attention": {"name": "short_conv"}}])
    for weights in ("W_Q", "W_O"):
        with pytest.raises(zoo.HookError, match=r"block\(s\) 1 mix tokens without attention"):
            getattr(model, weights)
    assert tiny(attention="sinks").W_Q.shape == (TINY["n_layers"], TINY["n_heads"], TINY["d_model"], 8)


def test_run_diagnostics_leave_out_the_entropy_of_a_model_with_a_mixer() -> None:
    from zoo.ablate.diagnostics import measure

    model = tiny(attention="short_conv")
    batch = ids(2, 9)
    taken = measure(model, batch[:, :-1], batch[:, 1:], step=0)
    assert taken.attention_entropy == [] and len(taken.grad_norm) == TINY["n_layers"]

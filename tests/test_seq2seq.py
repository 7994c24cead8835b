"""The 2017 encoder-decoder: its size, that it reads the source, that its target side is
causal, and that every registered component works inside it."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import zoo
from helpers import TINY, decoder_only
from zoo.nn.seq2seq import DecoderBlock, EncoderDecoder

V = TINY["vocab_size"]
# Components for decoder-only models (a placement joining attention and MLP side by side, a causal-only
# mixer), refused (ConfigError) in an encoder-decoder.
DECODER_ONLY = {(c.kind, c.name) for c in zoo.components() if c.kind != "init" and decoder_only(c.kind, c.name)}
COMPONENTS = [(c.kind, c.name) for c in zoo.components() if (c.kind, c.name) not in DECODER_ONLY]


@pytest.fixture(autouse=True, scope="module")
def one_thread() -> Any:
    """Tiny models run fastest on one thread; two spin-wait badly on a busy machine."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def tiny_seq2seq(**overrides: Any) -> EncoderDecoder:
    torch.manual_seed(0)
    return zoo.build("transformer-2017-base", **{**TINY, "n_encoder_layers": 2, **overrides}).eval()


def tokens(*shape: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, V, shape, generator=torch.Generator().manual_seed(seed))


def test_transformer_2017_base_has_the_papers_shape_and_63m_parameters() -> None:
    model = zoo.build("transformer-2017-base", device="meta")
    c = model.config
    assert isinstance(model, EncoderDecoder)
    assert (c.architecture, c.n_encoder_layers, c.n_layers, c.d_model, c.n_heads, c.d_ff, c.vocab_size) == (
        "encoder_decoder",
        6,
        6,
        512,
        8,
        2048,
        37000,
    )
    assert (c.placement.name, c.position.name, c.activation.name, c.init.name) == (
        "post",
        "sinusoidal",
        "relu",
        "xavier",
    )
    assert (c.embedding_scale, c.head_output, c.dropout.residual) == ("sqrt_d_model", "log_softmax", 0.1)
    assert model.head.weight is model.tok_emb.weight  # source, target and output share one matrix
    assert len(model.encoder) == 6 and len(model.decoder) == 6
    attention = 4 * 512 * 512 + 4 * 512  # fused q, k, v and the output projection, with biases
    mlp = 2 * 512 * 2048 + 2048 + 512
    norm = 2 * 512
    encoder_layer = attention + mlp + 2 * norm
    decoder_layer = 2 * attention + mlp + 3 * norm  # plus cross-attention and its norm
    expected = 37000 * 512 + 6 * encoder_layer + 6 * decoder_layer  # post-norm: no final norms
    assert model.num_parameters() == expected == 63_082_496
    assert c.estimated_parameters() >= expected


def test_forward_gives_log_probabilities_over_the_target() -> None:
    model = tiny_seq2seq()
    out = model(tokens(2, 7), tokens(2, 5, seed=2))
    assert out.shape == (2, 5, V)
    torch.testing.assert_close(out.exp().sum(-1), torch.ones(2, 5))


def test_cross_attention_reads_the_source() -> None:
    model = tiny_seq2seq()
    src, tgt = tokens(2, 7), tokens(2, 5, seed=2)
    changed = src.clone()
    changed[:, -1] = (changed[:, -1] + 1) % V  # only the last source token
    with torch.no_grad():
        a, b = model(src, tgt), model(changed, tgt)
    # Every target position sees the whole (bidirectionally encoded) source.
    assert all(not torch.allclose(a[:, t], b[:, t]) for t in range(tgt.shape[1]))


def test_the_decoder_really_uses_its_cross_attention() -> None:
    model = tiny_seq2seq()
    src, tgt = tokens(2, 7), tokens(2, 5, seed=2)
    with torch.no_grad():
        before = model(src, tgt)
        for block in model.decoder:
            block.cross_attn.out.weight.zero_()
            block.cross_attn.out.bias.zero_()
        after, other_src = model(src, tgt), model(tokens(2, 7, seed=9), tgt)
    assert not torch.allclose(before, after)
    torch.testing.assert_close(after, other_src)  # without cross-attention the source is invisible


def test_encoder_is_bidirectional() -> None:
    model = tiny_seq2seq()
    src = tokens(2, 7)
    changed = src.clone()
    changed[:, -1] = (changed[:, -1] + 1) % V
    with torch.no_grad():
        a, b = model.encode(src), model.encode(changed)
    assert not torch.allclose(a[:, 0], b[:, 0])  # the first position sees the last


@pytest.mark.parametrize("t", [0, 3])
def test_target_side_is_causal(t: int) -> None:
    model = tiny_seq2seq()
    src, tgt = tokens(2, 7), tokens(2, 6, seed=2)
    changed = tgt.clone()
    changed[:, t:] = (changed[:, t:] + 1) % V
    with torch.no_grad():
        a, b = model(src, tgt), model(src, changed)
    torch.testing.assert_close(a[:, :t], b[:, :t], rtol=0, atol=1e-6)
    assert not torch.allclose(a[:, t:], b[:, t:])


def test_source_padding_is_invisible() -> None:
    model = tiny_seq2seq()
    src, tgt = tokens(2, 7), tokens(2, 5, seed=2)
    mask = torch.ones(2, 7, dtype=torch.long)
    mask[0, 4:] = 0  # the first sequence is 4 tokens long
    other = src.clone()
    other[0, 4:] = (other[0, 4:] + 5) % V
    with torch.no_grad():
        a = model(src, tgt, src_mask=mask)
        b = model(other, tgt, src_mask=mask)
        short = model(src[:1, :4], tgt[:1])
    torch.testing.assert_close(a, b)
    torch.testing.assert_close(a[:1], short, rtol=1e-5, atol=1e-5)


def test_target_padding_mask_hides_padded_keys() -> None:
    model = tiny_seq2seq()
    src, tgt = tokens(1, 7), tokens(1, 5, seed=2)
    mask = torch.tensor([[0, 1, 1, 1, 1]])  # left padding
    other = tgt.clone()
    other[0, 0] = (other[0, 0] + 1) % V
    with torch.no_grad():
        a, b = model(src, tgt, tgt_mask=mask), model(src, other, tgt_mask=mask)
    torch.testing.assert_close(a[:, 1:], b[:, 1:])


def test_cached_decoding_matches_the_full_pass() -> None:
    model = tiny_seq2seq()
    src, tgt = tokens(2, 7), tokens(2, 6, seed=2)
    with torch.no_grad():
        full = model(src, tgt)
        memory = model.encode(src)
        cache = model.new_cache()
        steps = [model.decode(tgt[:, :2], memory, cache=cache)]  # a chunk, then one at a time
        steps += [model.decode(tgt[:, i : i + 1], memory, cache=cache) for i in range(2, 6)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-5, atol=1e-5)
    assert cache.length == 6


def test_save_and_load_round_trip(tmp_path: Any) -> None:
    model = tiny_seq2seq(dropout=0.1)
    path = tmp_path / "seq2seq.safetensors"
    zoo.save(model, path)
    loaded = zoo.load(path).eval()
    assert isinstance(loaded, EncoderDecoder)
    assert loaded.config == model.config
    assert loaded.head.weight is loaded.tok_emb.weight
    src, tgt = tokens(2, 7), tokens(2, 5, seed=2)
    with torch.no_grad():
        torch.testing.assert_close(loaded(src, tgt), model(src, tgt), rtol=0, atol=0)
    assert loaded.num_parameters() == model.num_parameters()


@pytest.mark.parametrize(("kind", "name"), sorted(DECODER_ONLY & {(c.kind, c.name) for c in zoo.components()}))
def test_decoder_only_components_are_refused_in_the_encoder_decoder(kind: str, name: str) -> None:
    with pytest.raises(zoo.ConfigError, match=rf"{kind} '{name}'.*encoder_decoder"):
        tiny_seq2seq(**{kind: name})


@pytest.mark.parametrize(("kind", "name"), COMPONENTS, ids=[f"{k}={n}" for k, n in COMPONENTS])
def test_every_component_works_in_the_encoder_decoder(kind: str, name: str) -> None:
    spec = {"name": "moe", "top_k": 8} if name == "moe" else name  # every expert routed, so every one learns
    model = tiny_seq2seq(**{kind: spec}).train()
    src, tgt = tokens(2, 9), tokens(2, 6, seed=2)
    out = model(src, tgt)
    assert out.shape == (2, 6, V) and torch.isfinite(out).all()
    torch.nn.functional.cross_entropy(out.flatten(0, 1), tgt.flatten()).backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None]
    assert not missing, f"parameters without gradient: {missing}"
    model.eval()
    changed_tgt, changed_src = tgt.clone(), src.clone()
    changed_tgt[:, 3:] = (changed_tgt[:, 3:] + 1) % V
    changed_src[:, 0] = (changed_src[:, 0] + 1) % V
    with torch.no_grad():
        a, b, c = model(src, tgt), model(src, changed_tgt), model(changed_src, tgt)
    torch.testing.assert_close(a[:, :3], b[:, :3], rtol=0, atol=1e-5)  # causal target
    assert not torch.allclose(a, c)  # reads the source


def test_decoder_layers_have_self_cross_and_mlp_sublayers() -> None:
    block = tiny_seq2seq().decoder[0]
    assert isinstance(block, DecoderBlock)
    assert [name for name, _ in block.named_children()] == [
        "attn_residual",
        "attn",
        "cross_residual",
        "cross_attn",
        "mlp_residual",
        "mlp",
    ]


def test_pre_norm_gets_final_norms_on_both_stacks() -> None:
    model = tiny_seq2seq(placement="pre")
    assert isinstance(model.encoder_norm, torch.nn.LayerNorm) and isinstance(model.final_norm, torch.nn.LayerNorm)


def test_n_encoder_layers_defaults_to_n_layers_and_is_refused_for_decoders() -> None:
    config = zoo.get_config("transformer-2017", architecture="encoder_decoder", n_layers=3)
    assert config.n_encoder_layers == 3 and "n_encoder_layers" not in config.model_fields_set
    assert zoo.get_config("gpt2-small").n_encoder_layers is None
    with pytest.raises(zoo.ConfigError, match="n_encoder_layers=2 is set, but a 'decoder' model has no encoder"):
        zoo.get_config("gpt2-small", n_encoder_layers=2)
    with pytest.raises(zoo.ConfigError, match="architecture='encoder_decoder'"):
        EncoderDecoder(zoo.get_config("gpt2-small"))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda m: m(tokens(2, 7).float(), tokens(2, 5)), "src must be an integer tensor"),
        (lambda m: m(tokens(2, 7), tokens(5)), "tgt must be an integer tensor"),
        (lambda m: m(tokens(2, 7), tokens(2, 5) + V), "outside the vocabulary"),
        (lambda m: m(tokens(2, 7), tokens(2, 5), src_mask=torch.ones(2, 6)), r"src_mask must have shape \(2, 7\)"),
        (lambda m: m.decode(tokens(2, 5), torch.zeros(2, 7, 3)), "memory must be the encoder output"),
    ],
)
def test_bad_inputs_are_refused_clearly(call: Any, message: str) -> None:
    with pytest.raises(zoo.InputError, match=message):
        call(tiny_seq2seq())

"""Mamba-2 beyond the parity cases (tests/family_cases/state_space.py): the mixer against
transformers' ``Mamba2Mixer`` and against the recurrence written out step by step, its
cache (the convolution's inputs and the scan's state), padding, the released size, and
the converter's refusals, one line each, naming the field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor

import zoo
from helpers import TINY, tiny
from zoo.interop.hf import config_from_hf
from zoo.nn.attention import AttentionContext

transformers = pytest.importorskip("transformers")
pytest.importorskip("zoo_modern")

from transformers.models.mamba2.modeling_mamba2 import Mamba2Mixer  # noqa: E402

from zoo_modern.mamba2 import Mamba2, ssd_scan  # noqa: E402

HF: dict[str, Any] = {
    "architectures": ["Mamba2ForCausalLM"],
    "model_type": "mamba2",
    "vocab_size": 64,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_heads": 8,
    "head_dim": 8,
    "state_size": 8,
    "n_groups": 2,
    "chunk_size": 4,
}


def randn(*shape: int, seed: int = 0) -> Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def perturbed_mixer(fields: dict[str, Any]) -> tuple[Any, Mamba2]:
    """transformers' mixer of ``fields`` with every weight random, and the zoo's with the same weights."""
    config = transformers.Mamba2Config(**{**HF, **fields})
    torch.manual_seed(0)
    reference = Mamba2Mixer(config, layer_idx=0).eval()
    with torch.no_grad():
        for i, (name, p) in enumerate(reference.named_parameters()):
            p.copy_(randn(*p.shape, seed=i) * 0.3 + (1.0 if name == "norm.weight" else 0.0))
    mixer = Mamba2(
        32, 8, head_dim=8, d_state=8, n_groups=config.n_groups, chunk_size=config.chunk_size,
        conv_kernel=config.conv_kernel, conv_bias=config.use_conv_bias, proj_bias=config.use_bias,
    ).eval()  # fmt: skip
    state = {k.replace("conv1d.", "conv."): v for k, v in reference.state_dict().items()}
    mixer.load_state_dict(state)  # strict: the same parameters under the same names but the convolution's
    return reference, mixer


@pytest.mark.parametrize(
    "fields",
    [{}, {"n_groups": 1, "chunk_size": 16}, {"use_bias": True, "conv_kernel": 3}, {"use_conv_bias": False}],
    ids=["groups", "one-chunk", "biased", "no-conv-bias"],
)
def test_the_mixer_equals_transformers_mamba2_mixer(fields: dict[str, Any]) -> None:
    reference, mixer = perturbed_mixer(fields)
    x = randn(2, 11, 32, seed=1)
    with torch.no_grad():
        expected = reference(x)
        torch.testing.assert_close(mixer(x, AttentionContext()), expected, rtol=0, atol=1e-5)
    assert expected.abs().max() > 0.1  # not a vanishing output that any mixer would match


def naive_scan(x: Tensor, dt: Tensor, a: Tensor, b: Tensor, c: Tensor, state: Tensor) -> tuple[Tensor, Tensor]:
    """S_t = exp(dt_t a) S_{t-1} + dt_t x_t B_t^T and y_t = S_t C_t, one position and head at a time."""
    batch, seq, heads, _ = x.shape
    state = state.clone()
    out = torch.zeros_like(x)
    for t in range(seq):
        for h in range(heads):
            decay = torch.exp(dt[:, t, h] * a[h])[:, None, None]  # (B, 1, 1)
            state[:, h] = decay * state[:, h] + dt[:, t, h, None, None] * x[:, t, h, :, None] * b[:, t, h, None, :]
            out[:, t, h] = (state[:, h] @ c[:, t, h, :, None])[..., 0]
    return out, state


@pytest.mark.parametrize("chunk", [1, 3, 7, 32])
def test_the_chunked_scan_equals_the_recurrence_step_by_step(chunk: int) -> None:
    x, b, c = randn(2, 10, 3, 4, seed=1), randn(2, 10, 3, 5, seed=2), randn(2, 10, 3, 5, seed=3)
    dt = torch.nn.functional.softplus(randn(2, 10, 3, seed=4))
    a, start = -torch.tensor([0.5, 1.0, 2.0]), randn(2, 3, 4, 5, seed=5)
    got, state = ssd_scan(x, dt, a, b, c, chunk, start)
    expected, final = naive_scan(x, dt, a, b, c, start)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)
    torch.testing.assert_close(state, final, rtol=0, atol=1e-5)
    assert not torch.allclose(state, start, atol=1e-3)  # the state moved


def test_the_cache_keeps_the_convolutions_inputs_and_the_scans_state() -> None:
    model = tiny(attention={"name": "mamba2", "d_state": 8, "conv_kernel": 3}, mlp="none")
    mixer = model.blocks[0].attn
    cache = model.new_cache()
    with torch.no_grad():
        model(torch.randint(0, TINY["vocab_size"], (2, 13)), cache=cache)
    assert cache.length == 13 and [layer.stored for layer in cache.layers] == [2] * TINY["n_layers"]
    assert all(layer.state.shape == (2, mixer.heads, mixer.head_dim, 8) for layer in cache.layers)
    per_layer = 2 * 2 * mixer.conv_dim * 4 + 2 * mixer.heads * mixer.head_dim * 8 * 4  # inputs, state: float32
    assert cache.nbytes == TINY["n_layers"] * per_layer


def test_reordering_the_cache_moves_the_scan_state_with_its_row() -> None:
    """Beam search's ``cache.reorder``: row 1's state, kept twice, decodes as row 1 does."""
    model = tiny(attention={"name": "mamba2", "d_state": 8}, mlp="none", position="none")
    seq, nxt = torch.randint(0, TINY["vocab_size"], (2, 6)), torch.randint(0, TINY["vocab_size"], (2, 1))
    cache = model.new_cache()
    with torch.no_grad():
        model(seq, cache=cache)
        cache.reorder(torch.tensor([1, 1]))
        step = model(nxt[[1, 1]], cache=cache)[:, -1]
        full = model(torch.cat([seq[1:], nxt[1:]], dim=1))[:, -1]
        other = model(torch.cat([seq[:1], nxt[1:]], dim=1))[:, -1]
    torch.testing.assert_close(step, full.expand(2, -1), rtol=0, atol=1e-5)
    assert not torch.allclose(step[0], other[0], atol=1e-3)  # row 0's own state would decode otherwise


def test_a_hybrid_of_scans_and_attention_decodes_as_it_recomputes() -> None:
    """Mamba-2 layers between attention layers (Jamba's, Zamba2's shape): each keeps its own
    kind of cache, a rolling window of inputs and a state, or keys and values."""
    scan = {"attention": {"name": "mamba2", "d_state": 8, "chunk_size": 4}, "mlp": "none"}
    model = tiny(attention="sdpa", layer_pattern=[scan, {}], n_layers=4)
    idx = torch.randint(0, TINY["vocab_size"], (2, 11))
    with torch.no_grad():
        full = model(idx)
        cache = model.new_cache()
        steps = [model(idx[:, :5], cache=cache)] + [model(idx[:, t : t + 1], cache=cache) for t in range(5, 11)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=0, atol=1e-5)
    assert [layer.state is not None for layer in cache.layers] == [True, False, True, False]
    assert [layer.stored for layer in cache.layers] == [3, 11, 3, 11]


def test_left_padding_never_reaches_a_real_token() -> None:
    model = tiny(attention={"name": "mamba2", "d_state": 8, "proj_bias": True}, mlp="none", position="none")
    real = torch.randint(0, TINY["vocab_size"], (1, 6))
    padded = torch.cat([torch.randint(0, TINY["vocab_size"], (1, 3)), real], dim=1)
    mask = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 1, 1]])
    with torch.no_grad():
        torch.testing.assert_close(model(padded, attention_mask=mask)[:, 3:], model(real), rtol=0, atol=1e-5)
        assert not torch.allclose(model(padded)[:, 3:], model(real), atol=1e-3)  # unmasked, the padding is read


def test_the_released_sizes_count_as_transformers_does() -> None:
    """state-spaces/mamba2-130m's config.json: 24 layers of d = 768, 24 heads of 64, a tied head."""
    released = {**HF, "vocab_size": 50288, "hidden_size": 768, "num_hidden_layers": 24, "num_heads": 24}
    released |= {"head_dim": 64, "state_size": 128, "n_groups": 1, "chunk_size": 256, "tie_word_embeddings": True}
    with torch.device("meta"):
        reference = transformers.Mamba2ForCausalLM(transformers.Mamba2Config(**released))
    fields = config_from_hf(released)
    assert fields["max_seq_len"] == 1 << 20  # no max_position_embeddings: a scan reads any length, the zoo's most
    model = zoo.build(fields, device="meta")
    assert model.num_parameters() == reference.num_parameters() > 100_000_000


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"num_heads": 6}, "num_heads"),
        ({"n_groups": 3}, "n_groups"),
        ({"time_step_limit": [0.0, 1.0]}, "time_step_limit"),
        ({"hidden_act": "gelu"}, "hidden_act"),
        ({"attention_bias": True}, "attention_bias"),
    ],
)
def test_settings_the_zoo_does_not_model_are_refused_by_name(change: dict[str, Any], named: str) -> None:
    with pytest.raises(zoo.InteropError, match=rf"config.json: {named}=") as caught:
        config_from_hf({**HF, **change})
    assert "\n" not in str(caught.value)


def test_export_refuses_heads_that_are_not_the_scans(tmp_path: Path) -> None:
    fields = config_from_hf(HF)
    narrow = zoo.build({**fields, "attention": {**fields["attention"], "d_inner": 32}})  # 4 heads of 8, not 8
    with pytest.raises(zoo.InteropError, match=r"a scan of d_inner=32, not expand \* hidden_size"):
        zoo.to_hf(narrow, tmp_path / "narrow", architecture="Mamba2ForCausalLM")
    model = zoo.build({**fields, "n_heads": 4})  # hook_z's 4 groups; the scan's 8 heads
    with pytest.raises(zoo.InteropError, match=r"4 heads where the mamba2 mixer has 8"):
        zoo.to_hf(model, tmp_path / "out", architecture="Mamba2ForCausalLM")
    out = zoo.to_hf(zoo.build(fields), tmp_path / "ok", architecture="Mamba2ForCausalLM")
    written = json.loads((out / "config.json").read_text())
    assert (written["num_heads"], written["head_dim"], written["n_groups"], written["chunk_size"]) == (8, 8, 2, 4)


def test_a_scan_with_the_configs_head_dim_exports_and_transformers_agrees(tmp_path: Path) -> None:
    fields = config_from_hf(HF)
    options = {k: v for k, v in fields["attention"].items() if k != "head_dim"} | {"expand": 1}
    model = zoo.build({**fields, "attention": options, "max_seq_len": 64}).eval()  # 8 heads of 32 / 8 = 4
    out = zoo.to_hf(model, tmp_path / "out", architecture="Mamba2ForCausalLM")
    written = json.loads((out / "config.json").read_text())
    assert (written["num_heads"], written["head_dim"], written["expand"]) == (8, 4, 1)
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    idx = torch.randint(0, 64, (2, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(model(idx), reloaded(idx).logits, atol=1e-5, rtol=0)


def test_projection_biases_import_and_differ_from_transformers_only_in_left_padding(tmp_path: Path) -> None:
    """With ``use_bias`` transformers zeroes a padded position's input, so in_proj's bias of
    the padding reaches the real tokens through the convolution; ``mamba2`` zeroes the
    convolution's input, so padding never does (documented in families.md)."""
    config = transformers.Mamba2Config(**{**HF, "use_bias": True, "max_position_embeddings": 64})
    torch.manual_seed(0)
    reference = transformers.Mamba2ForCausalLM(config).eval()
    with torch.no_grad():
        for name, p in reference.named_parameters():
            if name.endswith("bias"):
                p.normal_(0.0, 0.5)
    reference.save_pretrained(tmp_path / "hf")
    model = zoo.from_hf(tmp_path / "hf")
    assert model.blocks[0].attn.in_proj.bias is not None and model.blocks[0].attn.out_proj.bias is not None
    idx = torch.randint(0, 64, (2, 10), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(idx)
    mask[1, :3] = 0
    with torch.no_grad():
        torch.testing.assert_close(model(idx), reference(idx).logits, atol=1e-5, rtol=0)
        gap = (model(idx, attention_mask=mask) - reference(idx, attention_mask=mask).logits)[:, 3:].abs().amax(-1)
        alone = model(idx[1:, 3:])
    assert gap[0].max() < 1e-5 < gap[1].max()  # the unpadded row agrees; the padded one reads the bias there
    torch.testing.assert_close(model(idx, attention_mask=mask)[1:, 3:], alone, atol=1e-5, rtol=0)

"""zoo.probe and `zoo probe`: each number against a direct computation (torch's own module
hooks and autograd, attention recomputed from the weights), checkpoints' update ratios,
the command's table, JSON and plot."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

import zoo
from zoo.cli import main
from zoo.probe import corpus_batch, designs, probe, probe_designs

SMALL: dict[str, Any] = dict(vocab_size=256, max_seq_len=64, d_model=32, n_layers=3, n_heads=4, dropout=0.0)


def small(**overrides: Any) -> zoo.DecoderLM:
    torch.manual_seed(0)
    return zoo.build("gpt2-small", **{**SMALL, **overrides}).eval()


def direct(model: zoo.DecoderLM, tokens: Tensor) -> dict[str, Any]:
    """The probe's numbers without zoo.nn.hooks: torch module hooks, autograd, and attention
    recomputed by hand from each layer's weights."""
    streams: list[Tensor] = []
    inputs: list[Tensor] = []
    handles = [model.blocks[0].register_forward_pre_hook(lambda m, a: streams.append(a[0].detach()))]
    for block in model.blocks:
        handles.append(block.register_forward_hook(lambda m, a, out: streams.append(out.detach())))
        handles.append(block.attn.register_forward_pre_hook(lambda m, a: inputs.append(a[0].detach())))
    logits = model(tokens)
    for handle in handles:
        handle.remove()
    F.cross_entropy(logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten()).backward()
    grads = {}
    for group, attr in (("attention", "attn"), ("mlp", "mlp")):
        grads[group] = [
            math.sqrt(sum(float(p.grad.pow(2).sum()) for p in getattr(b, attr).parameters())) for b in model.blocks
        ]
    entropies = []
    heads, seq = model.config.n_heads, tokens.shape[1]
    for block, x in zip(model.blocks, inputs, strict=True):
        q, k, _ = block.attn.qkv(x).split(model.config.d_model, dim=-1)
        q = q.view(*x.shape[:2], heads, -1).transpose(1, 2)
        k = k.view(*x.shape[:2], heads, -1).transpose(1, 2)
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        scores = scores.masked_fill(torch.ones(seq, seq, dtype=torch.bool).triu(1), float("-inf"))
        p = scores.softmax(-1).double()
        entropies.append((-(p * p.clamp_min(1e-300).log()).sum(-1)).mean(dim=(0, 2)).tolist())
    rms = [float(s.double().pow(2).mean().sqrt()) for s in streams]
    model.zero_grad()
    return {"rms": rms, "grads": grads, "entropy": entropies}


@pytest.mark.parametrize("placement", ["pre", "post"])
def test_probe_numbers_equal_a_direct_computation(placement: str) -> None:
    model = small(placement=placement)
    tokens, source = corpus_batch(256, 2, 24)
    assert source == "2 x 24 tokens of the bundled corpus (bytes)"
    result = probe(model, tokens)
    assert all(p.grad is None for p in model.parameters())  # the probe leaves the model's .grad alone
    want = direct(model, tokens)
    assert result.layers == 3 and len(result.residual_rms) == 4
    assert result.residual_rms == pytest.approx(want["rms"], rel=1e-6)
    for group in ("attention", "mlp"):
        assert result.grad_norm[group] == pytest.approx(want["grads"][group], rel=1e-5)
    for got, expected in zip(result.attention_entropy, want["entropy"], strict=True):
        assert got == pytest.approx(expected, rel=1e-5)
    assert all(0 < h <= math.log(24) for layer in result.attention_entropy for h in layer)


def test_update_ratio_between_the_last_two_versions_of_a_folder(tmp_path: Path) -> None:
    model = small()
    folder = tmp_path / "run"
    zoo.save(model, folder)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    with torch.no_grad():
        model.blocks[1].attn.out.weight.mul_(1.5)  # one update, to block 1's attention
        model.blocks[2].mlp.up.weight.add_(0.01)
    zoo.save(model, folder)
    (result,) = probe_designs(designs([str(folder)]), batch_size=2, seq_len=16)
    assert result.update_between == (1, 2)
    assert result.update_ratio is not None
    attention = [n for n in before if n.startswith("blocks.1.attn.")]
    norm = math.sqrt(sum(float(before[n].pow(2).sum()) for n in attention))
    delta = float(before["blocks.1.attn.out.weight"].norm()) * 0.5
    assert result.update_ratio["attention"] == pytest.approx([0.0, delta / norm, 0.0], abs=1e-6)
    assert result.update_ratio["mlp"][2] > 0 and result.update_ratio["mlp"][:2] == [0.0, 0.0]
    (single,) = probe_designs(designs([str(zoo.save(model, tmp_path / "one.safetensors"))]), batch_size=2, seq_len=16)
    assert single.update_ratio is None and "a single version" in single.notes[0]


def test_designs_are_targets_times_variants_times_every_combination_of_vary() -> None:
    found = designs(
        ["gpt2-small"], sets=["d_model=64", "n_heads=4"], variants=["init=gpt2", "init=torch"], vary=["n_layers=2,4"]
    )
    assert [d.label for d in found] == [
        "gpt2-small init=gpt2 n_layers=2",
        "gpt2-small init=gpt2 n_layers=4",
        "gpt2-small init=torch n_layers=2",
        "gpt2-small init=torch n_layers=4",
    ]
    assert [(d.config.init.name, d.config.n_layers, d.config.d_model) for d in found if d.config] == [
        ("gpt2", 2, 64),
        ("gpt2", 4, 64),
        ("torch", 2, 64),
        ("torch", 4, 64),
    ]
    with pytest.raises(zoo.ConfigError, match="--vary"):
        designs(["gpt2-small"], vary=["n_layers"])


def test_probe_refuses_what_it_cannot_measure(tmp_path: Path) -> None:
    with pytest.raises(zoo.ConfigError, match="encoder-decoder"):
        probe(
            zoo.build("transformer-2017-base", **{**SMALL, "n_encoder_layers": 1}), torch.zeros(1, 4, dtype=torch.long)
        )
    with pytest.raises(zoo.ConfigError, match="vocab_size=256"):
        corpus_batch(97, 2, 8)
    path = zoo.save(small(), tmp_path / "one.safetensors")
    with pytest.raises(zoo.ConfigError, match="checkpoint"):
        designs([str(path)], sets=["n_layers=2"])


def test_zoo_probe_prints_tables_and_writes_json_and_a_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, png = tmp_path / "probe.json", tmp_path / "probe.png"
    sets = [f"--set={k}={v}" for k, v in SMALL.items() if k != "n_layers"]
    argv = ["probe", "gpt2-small", *sets, "--vary", "n_layers=1,2", "--variant", "placement=post"]
    assert main([*argv, "--seq-len", "16", "--batch-size", "2", "-o", str(out), "--plot", str(png)]) == 0
    printed = capsys.readouterr().out
    assert "2 x 16 tokens of the bundled corpus (bytes)" in printed
    assert "gpt2-small placement=post n_layers=2" in printed
    for title in ("residual stream RMS", "gradient norm, attention weights", "attention entropy"):
        assert title in printed
    data = json.loads(out.read_text())
    assert [p["layers"] for p in data["probes"]] == [1, 2]
    assert len(data["probes"][1]["attention_entropy"][1]) == SMALL["n_heads"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(SystemExit):
        main(["probe", "gpt2-small", "--metrics", "residual,bogus"])
    assert "bogus" in capsys.readouterr().err


def test_the_two_observations_of_the_docs_hold_at_a_small_scale() -> None:
    """docs/probe.md's findings, at 32 wide and 12 layers (its figures: 64 wide, up to 48 layers)."""
    sets = ["d_model=32", "n_heads=4", "d_ff=128", "vocab_size=256", "max_seq_len=64", "n_layers=12"]
    variants = ["init=gpt2", "init.scale_residual=false", "init=torch"]
    found = designs(["gpt2-small"], sets=sets, variants=variants)
    scaled, unscaled, plain = probe_designs(found, batch_size=4, seq_len=64)

    def growth(values: list[float]) -> float:
        """The last three layers against the first three (one layer alone is noisy)."""
        return sum(values[-3:]) / sum(values[:3])

    assert growth(scaled.residual_rms) < 1.3 < 1.6 < growth(unscaled.residual_rms)
    assert plain.residual_rms[0] > 30 * scaled.residual_rms[0] and growth(plain.residual_rms) > 1.1
    found = designs(["transformer-2017"], sets=sets, variants=["placement=post", "placement=pre"])
    post, pre = probe_designs(found, batch_size=4, seq_len=64)
    for group in ("attention", "mlp"):  # post-norm: larger near the output; pre-norm: smaller
        assert growth(post.grad_norm[group]) > 1.5 and growth(pre.grad_norm[group]) < 0.8
    assert max(post.residual_rms[1:]) < 1.01 < pre.residual_rms[-1]  # post-norm's stream is normalised

"""zoo.summary: parameters by group and forward FLOPs per token, measured on the model.

Expected figures are derived by hand from the architectures (shown in comments), so a
wrong attribution or a missed matmul fails here; every preset and every registered
component is also checked against a real, materialised model.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from pydantic import BaseModel, ConfigDict
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

import zoo
from helpers import TINY
from zoo.summary import summarize

PRESETS = zoo.list_models()
COMPONENTS = [(c.kind, c.name) for c in zoo.components() if c.kind != "init"]


def gpt2_flops_per_token(c: zoo.ModelConfig, context: int) -> int:
    """Per layer: qkv and out projections 2*(3d^2 + d^2), MLP 2*(2*d*d_ff), scores
    q.k^T and w.v 2*2*S*d; then the head 2*d*V. Multiply-adds count 2 FLOPs."""
    d = c.d_model
    per_layer = 2 * 4 * d * d + 2 * 2 * d * c.d_ff + 4 * context * d
    return c.n_layers * per_layer + 2 * d * c.vocab_size


def test_gpt2_small_exact_groups_and_flops() -> None:
    s = summarize("gpt2-small")
    d, f, v, n, layers = 768, 3072, 50257, 1024, 12
    assert s.parameters == {
        "embeddings": v * d + n * d,  # tokens + learned positions
        "attention": layers * (d * 3 * d + 3 * d + d * d + d),  # fused qkv + out, with biases
        "mlp": layers * (d * f + f + f * d + d),
        "norms": layers * 2 * 2 * d + 2 * d,  # two LayerNorms a block, plus the final one
        "head": 0,  # tied to the token embedding: counted once, there
    }
    assert s.total_parameters == 124_439_808
    assert s.tied == [("head.weight", "tok_emb.weight")]
    assert s.context == 1024
    assert s.total_flops_per_token == gpt2_flops_per_token(s.config, 1024) == 284_812_800
    assert s.flops_per_token["head"] == 2 * d * v
    assert s.flops_per_token["mlp"] == layers * 2 * 2 * d * f
    assert s.flops_per_token["attention"] == layers * (2 * 4 * d * d + 4 * 1024 * d)
    assert s.score_flops_per_token == layers * 4 * 1024 * d


def test_score_flops_grow_with_context_and_nothing_else_does() -> None:
    short, long = summarize("gpt2-small", context=128), summarize("gpt2-small", context=512)
    c = short.config
    assert long.score_flops_per_token - short.score_flops_per_token == c.n_layers * 4 * (512 - 128) * c.d_model
    assert long.total_flops_per_token - short.total_flops_per_token == pytest.approx(
        long.score_flops_per_token - short.score_flops_per_token
    )
    assert long.parameters == short.parameters


def test_untied_head_is_counted_as_head() -> None:
    tied, untied = summarize("gpt2-small", **TINY), summarize("gpt2-small", tie_embeddings=False, **TINY)
    assert untied.parameters["head"] == TINY["vocab_size"] * TINY["d_model"]
    assert untied.total_parameters == tied.total_parameters + untied.parameters["head"]
    assert untied.tied == []


@pytest.mark.parametrize("name", PRESETS)
def test_every_preset_matches_the_built_model(name: str) -> None:
    s = summarize(name, context=16)
    model = zoo.build(name, device="meta")
    unique = {id(p): p.numel() for p in model.parameters()}
    assert s.total_parameters == sum(unique.values())
    assert s.parameters.get("other", 0) == 0, "every parameter belongs to a named group"
    assert all(count >= 0 for count in s.parameters.values())
    assert (s.parameters["head"] == 0) == s.config.tie_embeddings
    used = s.total_parameters - s.parameters["embeddings"] - idle_experts(model)
    assert s.total_flops_per_token > 2 * used * 0.9


def idle_experts(model: nn.Module) -> int:
    """Parameters a token does not use: the experts a mixture of experts does not route it to."""
    idle = 0
    for module in model.modules():
        experts, top_k, n = (getattr(module, name, None) for name in ("experts", "top_k", "n_experts"))
        if isinstance(experts, nn.Module) and isinstance(top_k, int) and isinstance(n, int):
            idle += sum(p.numel() for p in experts.parameters()) * (n - top_k) // n
    return idle


def real_forward_flops(model: nn.Module, inputs: tuple[torch.Tensor, ...]) -> int:
    """FLOPs of a real forward; attention on the math backend, whose matmuls the counter
    sees (it does not count the fused CPU kernel)."""
    counter = FlopCounterMode(display=False)
    with sdpa_kernel(SDPBackend.MATH), counter, torch.no_grad():
        model(*inputs)
    return counter.get_total_flops()


@pytest.mark.parametrize(("kind", "name"), COMPONENTS, ids=[f"{k}={n}" for k, n in COMPONENTS])
def test_every_component_is_grouped_by_where_it_sits(kind: str, name: str) -> None:
    """Meta-device counts equal a real model's, and each parameter lands in its group."""
    context = 12
    s = summarize("gpt2-small", context=context, **{**TINY, kind: name})
    torch.manual_seed(0)
    model = zoo.build("gpt2-small", **{**TINY, kind: name}).eval()
    assert s.total_parameters == model.num_parameters()
    expected = dict.fromkeys(("embeddings", "attention", "mlp", "norms", "head"), 0)
    for param_name, param in model.named_parameters():  # by DecoderLM's own layout
        if param_name.startswith(("tok_emb.", "position.")):
            expected["embeddings"] += param.numel()
        elif ".attn." in param_name:
            expected["attention"] += param.numel()
        elif ".mlp." in param_name:
            expected["mlp"] += param.numel()
        elif "_residual." in param_name or param_name.startswith("final_norm."):
            expected["norms"] += param.numel()
        else:
            expected[param_name.split(".")[0]] += param.numel()
    assert s.parameters == expected
    idx = torch.randint(0, TINY["vocab_size"], (1, context))
    assert s.total_flops_per_token * context == real_forward_flops(model, (idx,))


# -- a plugin's components are counted as built, not by a formula ----------------------


class GatedMLP(nn.Module):
    """Three matrices: down(act(gate(x)) * up(x))."""

    def __init__(self, d_model: int, d_ff: int, activation: nn.Module) -> None:
        super().__init__()
        self.gate = nn.Linear(d_model, d_ff, bias=False)
        self.up = nn.Linear(d_model, d_ff, bias=False)
        self.down = nn.Linear(d_ff, d_model, bias=False)
        self.act = activation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.act(self.gate(x)) * self.up(x))


class ScaleOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    init: float = 1.0


class ScaledActivation(nn.Module):
    """ReLU times a learned per-channel scale (d_ff parameters, grouped with the MLP)."""

    def __init__(self, d_ff: int) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(d_ff))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x) * self.scale

    def reset_parameters(self) -> None:
        nn.init.ones_(self.scale)


class GatedPreNorm(zoo.Placement):
    """x + gate * f(norm(x)), with a learned scalar gate: a parameter of the placement
    itself besides its norm (grouped with the norms: both shape the residual stream)."""

    def __init__(self, norm: nn.Module) -> None:
        super().__init__()
        self.norm = norm
        self.gate = nn.Parameter(torch.ones(()))

    def forward(self, x: torch.Tensor, sublayer: nn.Module, *args: object) -> torch.Tensor:
        return x + self.gate * sublayer(self.norm(x), *args)

    def reset_parameters(self) -> None:
        nn.init.ones_(self.gate)


class CountingTestPlugin:
    @zoo.hookimpl
    def zoo_register_components(self, register: Any) -> None:
        register("mlp", "gated", GatedMLP)
        register("activation", "scaled_relu", ScaledActivation, ScaleOptions)
        register("placement", "gated_pre", GatedPreNorm)


def test_plugin_components_are_counted_as_built() -> None:
    registry = zoo.Registry(entry_points=False, plugins=[CountingTestPlugin()])
    base = summarize("gpt2-small", registry=registry, context=8, **TINY)
    s = summarize("gpt2-small", registry=registry, context=8, mlp="gated", activation="scaled_relu", **TINY)
    d, layers = TINY["d_model"], TINY["n_layers"]
    f = 4 * d
    assert s.parameters["mlp"] == layers * (3 * d * f + f)  # three matrices and the scale
    assert s.flops_per_token["mlp"] == layers * 2 * 3 * d * f
    assert s.parameters["attention"] == base.parameters["attention"]
    assert s.flops_per_token["attention"] == base.flops_per_token["attention"]
    gated = summarize("gpt2-small", registry=registry, context=8, placement="gated_pre", **TINY)
    assert gated.parameters["norms"] == base.parameters["norms"] + 2 * layers  # a gate per sub-layer
    assert gated.total_parameters == base.total_parameters + 2 * layers


def test_encoder_decoder_counts_encoder_decoder_and_cross_attention() -> None:
    s = summarize("transformer-2017-base", context=128)
    d, f, v, enc, dec, S = 512, 2048, 37000, 6, 6, 128
    attention = d * 3 * d + 3 * d + d * d + d
    assert s.parameters == {
        "embeddings": v * d,  # shared by source, target and head; sinusoidal positions are free
        "attention": (enc + 2 * dec) * attention,  # encoder self, decoder self and cross
        "mlp": (enc + dec) * (d * f + f + f * d + d),
        "norms": (2 * enc + 3 * dec) * 2 * d,  # post-norm: one per sub-layer, no final norms
        "head": 0,
    }
    assert s.total_parameters == 63_082_496
    # Per target token, with a source as long as the target: the encoder and the
    # decoder's self-attention and MLP as in a decoder, plus cross-attention (q and out
    # from the target, k and v from the source, scores over S source tokens).
    block = 2 * 4 * d * d + 2 * 2 * d * f + 4 * S * d
    cross = 2 * 4 * d * d + 4 * S * d
    assert s.total_flops_per_token == enc * block + dec * (block + cross) + 2 * d * v
    assert s.score_flops_per_token == (enc + 2 * dec) * 4 * S * d


def test_context_must_be_positive() -> None:
    with pytest.raises(zoo.ConfigError, match="context must be at least 1"):
        summarize("gpt2-small", context=0, **TINY)
    with pytest.raises(zoo.ConfigError, match="context must be at least 1"):
        summarize("gpt2-small", context="8", **TINY)  # type: ignore[arg-type]

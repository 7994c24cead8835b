"""Every registered component, built-in or from an installed plugin, in a real model.

Parametrised over the registry, so a newly registered component is tested here
without a line of new test code.
"""

from __future__ import annotations

import itertools

import pytest
import torch

import zoo
from helpers import TINY, tiny

COMPONENTS = [(c.kind, c.name) for c in zoo.components()]
ATTENTIONS = [c.name for c in zoo.components("attention")]
POSITIONS = [c.name for c in zoo.components("position")]


def ids(pairs: list[tuple[str, str]]) -> list[str]:
    return [f"{kind}={name}" for kind, name in pairs]


@pytest.mark.parametrize(("kind", "name"), COMPONENTS, ids=ids(COMPONENTS))
def test_every_component_builds_runs_forward_and_backward(kind: str, name: str) -> None:
    model = tiny(**{kind: name}).train()
    idx = torch.randint(0, TINY["vocab_size"], (2, 12))
    logits = model(idx)
    assert logits.shape == (2, 12, TINY["vocab_size"])
    assert torch.isfinite(logits).all()
    torch.nn.functional.cross_entropy(logits.flatten(0, 1), idx.flatten()).backward()
    missing = [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None]
    assert not missing, f"parameters without gradient: {missing}"
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


@pytest.mark.parametrize(("kind", "name"), COMPONENTS, ids=ids(COMPONENTS))
def test_every_component_is_described_and_attributed(kind: str, name: str) -> None:
    component = zoo.default_registry().get(kind, name)
    assert component.description, f"{kind} {name!r}: give its factory a docstring"
    assert component.plugin.status == "loaded"
    assert component.provider


@pytest.mark.parametrize(("attention", "position"), list(itertools.product(ATTENTIONS, POSITIONS)))
def test_causality_for_every_attention_and_position(attention: str, position: str) -> None:
    """Changing tokens after position t leaves the outputs up to t unchanged."""
    model = tiny(attention=attention, position=position)
    idx = torch.randint(0, TINY["vocab_size"], (2, 16))
    changed = idx.clone()
    changed[:, 9:] = (changed[:, 9:] + 1) % TINY["vocab_size"]
    with torch.no_grad():
        a, b = model(idx), model(changed)
    torch.testing.assert_close(a[:, :9], b[:, :9], rtol=0, atol=1e-6)
    assert not torch.allclose(a[:, 9:], b[:, 9:])


@pytest.mark.parametrize("position", POSITIONS)
@pytest.mark.parametrize("placement", [c.name for c in zoo.components("placement")])
def test_eager_and_sdpa_agree(position: str, placement: str) -> None:
    sdpa = tiny(attention="sdpa", position=position, placement=placement)
    eager = tiny(attention="eager", position=position, placement=placement)
    eager.load_state_dict(sdpa.state_dict())
    idx = torch.randint(0, TINY["vocab_size"], (3, 20))
    mask = torch.ones(3, 20, dtype=torch.long)
    mask[1, :5] = 0  # left padding in one row exercises the explicit-mask path
    with torch.no_grad():
        torch.testing.assert_close(eager(idx), sdpa(idx), rtol=0, atol=1e-5)
        torch.testing.assert_close(
            eager(idx, attention_mask=mask)[1, 5:], sdpa(idx, attention_mask=mask)[1, 5:], rtol=0, atol=1e-5
        )


@pytest.mark.parametrize(("attention", "position"), list(itertools.product(ATTENTIONS, POSITIONS)))
def test_cached_decoding_equals_full_recompute(attention: str, position: str) -> None:
    """Prefill 7 tokens, then feed the rest one (and then three) at a time."""
    model = tiny(attention=attention, position=position)
    idx = torch.randint(0, TINY["vocab_size"], (2, 14))
    with torch.no_grad():
        full = model(idx)
        cache = model.new_cache()
        steps = [model(idx[:, :7], cache=cache)]
        steps += [model(idx[:, t : t + 1], cache=cache) for t in range(7, 11)]
        steps.append(model(idx[:, 11:], cache=cache))  # a chunk of 3 after the cache
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=0, atol=1e-4)
    assert cache.length == 14


def test_attention_maps_from_eager_are_causal_distributions() -> None:
    model = tiny(attention="eager")
    maps = model.attention_maps(torch.randint(0, TINY["vocab_size"], (1, 10)))
    assert len(maps) == TINY["n_layers"]
    for weights in maps:
        assert weights.shape == (1, TINY["n_heads"], 10, 10)
        torch.testing.assert_close(weights.sum(-1), torch.ones(1, TINY["n_heads"], 10))
        assert (weights.triu(1) == 0).all()


def test_attention_maps_of_the_fused_kernel_equal_the_eager_ones() -> None:
    idx = torch.randint(0, TINY["vocab_size"], (1, 6))
    fused, eager = tiny(attention="sdpa").attention_maps(idx), tiny(attention="eager").attention_maps(idx)
    assert len(fused) == TINY["n_layers"]
    for got, want in zip(fused, eager, strict=True):
        torch.testing.assert_close(got, want)


def test_pre_norm_has_final_norm_and_post_norm_has_none() -> None:
    assert isinstance(tiny(placement="pre").final_norm, torch.nn.LayerNorm)
    assert isinstance(tiny(placement="post").final_norm, torch.nn.Identity)
    assert isinstance(tiny(placement="post", final_norm=True).final_norm, torch.nn.LayerNorm)


def test_placement_math_matches_its_definition() -> None:
    """pre: x + f(norm(x)); post: norm(x + f(x)), checked on one block by hand."""
    for placement in ("pre", "post"):
        block = tiny(placement=placement).blocks[0]
        x = torch.randn(2, 5, TINY["d_model"])
        f = block.mlp
        norm = block.mlp_residual.norm
        expected = x + f(norm(x)) if placement == "pre" else norm(x + f(x))
        torch.testing.assert_close(block.mlp_residual(x, f), expected)


@pytest.mark.parametrize(
    ("name", "reference"),
    [
        ("relu", torch.relu),
        ("gelu", lambda x: 0.5 * x * (1 + torch.erf(x / 2**0.5))),
        ("gelu_tanh", lambda x: 0.5 * x * (1 + torch.tanh((2 / torch.pi) ** 0.5 * (x + 0.044715 * x**3)))),
        ("silu", lambda x: x * torch.sigmoid(x)),
    ],
)
def test_builtin_activations_match_their_formulas(name: str, reference) -> None:
    act = tiny(activation=name).blocks[0].mlp.act
    x = torch.linspace(-6, 6, 101)
    torch.testing.assert_close(act(x), reference(x), rtol=1e-5, atol=1e-6)


def test_sinusoidal_table_matches_the_2017_formula() -> None:
    model = tiny(position="sinusoidal", d_model=16, n_heads=2)
    table = model.position.table(torch.arange(50)[None])[0]  # (50, 16)
    pos = torch.arange(50.0)[:, None]
    i = torch.arange(8.0)[None]
    torch.testing.assert_close(table[:, 0::2], torch.sin(pos / 10000 ** (2 * i / 16)))
    torch.testing.assert_close(table[:, 1::2], torch.cos(pos / 10000 ** (2 * i / 16)))


def test_rmsnorm_normalises_by_root_mean_square() -> None:
    norm = tiny(norm="rmsnorm").final_norm
    x = torch.randn(3, 32) * 5
    expected = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + TINY.get("norm_eps", 1e-5))
    torch.testing.assert_close(norm(x), expected, rtol=1e-4, atol=1e-5)

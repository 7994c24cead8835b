"""The model compiles to one graph and exports, for every registered component.

``torch.compile(fullgraph=True)`` fails on any graph break, so each test below proves
that forward (train and eval, with a padding mask), a cached single-token decoding step
and the encoder-decoder have no data-dependent Python, host syncs or untraceable
code, for every component of every kind; outputs must equal eager ones. The cheap
``eager``/``aot_eager`` backends keep this fast; one inductor run is marked slow.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import Tensor

import zoo
from helpers import decoder_only
from zoo.nn.registry import KINDS

TINY: dict[str, Any] = {
    "vocab_size": 97,
    "max_seq_len": 64,
    "d_model": 32,
    "d_ff": 64,
    "n_layers": 1,
    "n_heads": 4,
    "dropout": 0.0,
}

# Every registered component but init (which runs once at build time, not in forward),
# plus options that take a different code path.
CASES: list[tuple[str, Any]] = [(c.kind, c.name) for c in zoo.components() if c.kind != "init"]
CASES += [
    ("attention", {"name": "sdpa", "n_kv_heads": 2}),
    ("attention", {"name": "eager", "n_kv_heads": 1}),
    ("attention", {"name": "gqa", "n_kv_heads": 2, "kernel": "eager"}),
    ("position", {"name": "rotary", "rotary_pct": 0.5}),
    ("placement", {"name": "parallel", "shared_norm": True}),  # GPT-J: one norm feeds both halves
    ("attention", {"name": "sdpa", "window": 3}),  # a sliding window: its own mask, a rolling cache
    ("attention", {"name": "gqa", "n_kv_heads": 2, "window": 3, "softcap": 20.0}),  # capped scores: the math
    ("position", {"name": "rotary", "rotary_dim": 4, "interleaved": True}),  # GPT-J's pairs
    ("position", {"name": "rotary", "scaling": {"kind": "yarn", "factor": 4.0, "original_max_seq_len": 16}}),
    ("position", {"name": "rotary", "scaling": {"kind": "dynamic", "factor": 2.0, "original_max_seq_len": 64}}),
    ("position", {"name": "learned", "offset": 2}),  # OPT's table
    ("norm", {"name": "layernorm", "shift": False}),  # MPT's
    ("attention", {"name": "chunked", "chunk_size": 3}),  # chunks crossed in the forward and the decode step
    ("attention", {"name": "sinks", "window": 3}),  # GPT-OSS's sliding layer: sinks under a window's mask
    ("attention", {"name": "short_conv", "kernel_size": 4, "conv_bias": True}),  # a convolution's state
    ("attention", {"name": "mamba2", "d_state": 8, "n_groups": 2, "chunk_size": 3}),  # chunks crossed, a scan's state
    (
        "attention",
        {"name": "mamba", "d_state": 4, "bcdt_norm": True},
    ),  # Mamba's S6 scan position by position, its state
]
IDS = [f"{kind}-{spec if isinstance(spec, str) else '-'.join(map(str, spec.values()))}" for kind, spec in CASES]


def distinct(preset: str, cases: list[tuple[tuple[str, Any], str]]) -> list[tuple[tuple[str, Any], str]]:
    """The cases that build different models from ``preset``: a component that is the preset's
    own default (GPT-2's sdpa, layernorm, pre, gelu_tanh, learned, standard) builds the preset
    itself, so one of them checks it and the others would trace the very same model again."""
    kept: list[tuple[tuple[str, Any], str]] = []
    configs: list[Any] = []
    for (kind, spec), name in cases:
        config = zoo.get_config(preset, **{**TINY, kind: spec})
        if config not in configs:
            configs.append(config)
            kept.append(((kind, spec), name))
    return kept


def tiny(name: str = "gpt2-small", **overrides: Any) -> Any:
    torch.manual_seed(0)
    return zoo.build(name, **{**TINY, **overrides})


def ids(*shape: int, seed: int = 1) -> Tensor:
    return torch.randint(0, TINY["vocab_size"], shape, generator=torch.Generator().manual_seed(seed))


def padding_mask() -> Tensor:
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[1, :3] = 0  # left padding in the second row
    return mask


def compiled(fn: Any, backend: str = "eager") -> Any:
    torch._dynamo.reset()
    return torch.compile(fn, fullgraph=True, backend=backend)


def test_every_kind_but_init_is_covered() -> None:
    assert {kind for kind, _ in CASES} == set(KINDS) - {"init"}
    # Only a preset's own defaults fold into one case: every other component is traced.
    assert len(CASES) - len(DECODER) == 5 and len(SEQ2SEQ) + 5 == len([c for c in CASES if not decoder_only(*c)])
    named = {(kind, spec) for kind, spec in CASES if isinstance(spec, str)}
    assert {("attention", "gqa"), ("position", "rotary"), ("placement", "sandwich")} <= named  # zoo-modern


DECODER = distinct("gpt2-small", list(zip(CASES, IDS, strict=True)))


@pytest.mark.parametrize(("kind", "spec"), [case for case, _ in DECODER], ids=[i for _, i in DECODER])
def test_forward_and_decode_step_compile_to_one_graph(kind: str, spec: Any) -> None:
    model = tiny(**{kind: spec})
    idx, mask = ids(2, 8), padding_mask()
    fast = compiled(model)
    model.train()  # dropout is 0, so train mode is deterministic
    torch.testing.assert_close(fast(idx), model(idx), rtol=1e-5, atol=1e-5)
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(
            fast(idx, attention_mask=mask), model(idx, attention_mask=mask), rtol=1e-5, atol=1e-5
        )
        eager_cache, compiled_cache = model.new_cache(), model.new_cache()
        model(idx, cache=eager_cache)
        model(idx, cache=compiled_cache)
        step = ids(2, 1, seed=2)
        expected = model(step, cache=eager_cache, last_only=True)
        got = compiled(lambda i: model(i, cache=compiled_cache, last_only=True))(step)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert compiled_cache.length == eager_cache.length == 9
    torch.testing.assert_close(compiled_cache[0].keys[:, :, :9], eager_cache[0].keys[:, :, :9])


# Components refused in an encoder-decoder (parallel placement, causal-only mixers) are left out.
SEQ2SEQ = distinct(
    "transformer-2017-base",
    [((kind, spec), i) for (kind, spec), i in zip(CASES, IDS, strict=True) if not decoder_only(kind, spec)],
)


@pytest.mark.parametrize(("kind", "spec"), [case for case, _ in SEQ2SEQ], ids=[i for _, i in SEQ2SEQ])
def test_encoder_decoder_compiles_to_one_graph(kind: str, spec: Any) -> None:
    model = tiny("transformer-2017-base", **{kind: spec}).eval()
    src, tgt = ids(2, 8), ids(2, 5, seed=3)
    src_mask = padding_mask()
    with torch.no_grad():
        expected = model(src, tgt, src_mask=src_mask)
        torch.testing.assert_close(compiled(model)(src, tgt, src_mask=src_mask), expected, rtol=1e-5, atol=1e-5)
        memory = model.encode(src, src_mask=src_mask)
        cache = model.new_cache()
        model.decode(tgt[:, :4], memory, src_mask=src_mask, cache=cache)
        step = compiled(lambda t: model.decode(t, memory, src_mask=src_mask, cache=cache))(tgt[:, 4:])
    torch.testing.assert_close(step, expected[:, 4:], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("preset", ["gpt2-small", "gpt2-small-modern", "transformer-2017-base"])
def test_explain_finds_no_graph_break(preset: str) -> None:
    model = tiny(preset).eval()
    args = (ids(2, 8), ids(2, 6)) if preset.startswith("transformer") else (ids(2, 8),)
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(model)(*args)
    assert (explanation.graph_count, explanation.graph_break_count) == (1, 0), explanation.break_reasons


@pytest.mark.parametrize("preset", ["gpt2-small", "gpt2-small-modern"])
def test_aot_autograd_gives_eager_outputs_and_gradients(preset: str) -> None:
    model = tiny(preset, dropout=0.0).train()
    idx = ids(2, 8)
    fast = compiled(model, backend="aot_eager")
    loss = fast(idx).logsumexp(-1).mean()
    loss.backward()
    compiled_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    expected = model(idx).logsumexp(-1).mean()
    expected.backward()
    torch.testing.assert_close(loss, expected)
    for got, want in zip(compiled_grads, (p.grad for p in model.parameters()), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("preset", ["gpt2-small", "gpt2-small-modern"])
def test_export_gives_eager_outputs(preset: str) -> None:
    model = tiny(preset).eval()
    idx = ids(2, 8)
    exported = torch.export.export(model, (idx,))
    with torch.no_grad():
        torch.testing.assert_close(exported.module()(idx), model(idx), rtol=1e-5, atol=1e-5)
        other = ids(2, 8, seed=5)  # not the example input: the graph did not bake it in
        torch.testing.assert_close(exported.module()(other), model(other), rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_inductor_matches_eager() -> None:
    model = tiny("gpt2-small-modern").eval()
    idx = ids(2, 16)
    with torch.no_grad():
        torch.testing.assert_close(compiled(model, backend="inductor")(idx), model(idx), rtol=1e-4, atol=1e-4)

"""Bad input at the model's boundary (``zoo.nn.inputs``): a clear ``InputError`` or
``ConfigError`` saying what to pass, never a raw ``IndexError``/``AttributeError``/
``RuntimeError`` or a silent broadcast.

``forward`` checks types, shapes and dtypes (free, and compiled away); ``check_inputs``
also checks values (token ids, mask entries, positions), as the entry points do once per
request. Also: build's device and dtype, sampling options, plugin control's names.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

import zoo
from helpers import TINY, tiny

# -- build, forward, sampling ------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda m: m(torch.zeros(1, 2, 3, dtype=torch.long)), "shape \\(batch, seq\\)"),
        (lambda m: m(torch.zeros(1, 4)), "integer tensor"),
        (lambda m: m(torch.full((1, 4), TINY["vocab_size"])), "outside the vocabulary"),
        (
            lambda m: m(torch.zeros(1, 4, dtype=torch.long), attention_mask=torch.ones(1, 5)),
            "attention_mask must have shape",
        ),
        (
            lambda m: m(torch.zeros(2, 4, dtype=torch.long), positions=torch.arange(3)[None]),
            "positions must have shape",
        ),
        (
            lambda m: m(torch.zeros(1, 4, dtype=torch.long), positions=torch.arange(60, 64)[None] + 10),
            "positions must lie",
        ),
    ],
    ids=["3-d ids", "float ids", "id past vocab", "mask shape", "positions shape", "positions range"],
)
def test_bad_model_input_is_an_input_error(call, match: str) -> None:
    with pytest.raises(zoo.InputError, match=match):
        call(tiny())


def test_too_long_for_learned_positions_says_how_many_fit() -> None:
    with pytest.raises(zoo.ConfigError, match=f"at most {TINY['max_seq_len']} tokens"):
        tiny()(torch.zeros(1, TINY["max_seq_len"] + 1, dtype=torch.long))


@pytest.mark.parametrize(("option", "value"), [("device", "bogus"), ("dtype", "float8"), ("dtype", torch.long)])
def test_build_refuses_bad_device_or_dtype(option: str, value: object) -> None:
    with pytest.raises(zoo.ConfigError, match=option):
        zoo.build("gpt2-small", **TINY, **{option: value})


def test_build_accepts_dtype_names() -> None:
    model = zoo.build("gpt2-small", **TINY, dtype="bf16")
    assert model.tok_emb.weight.dtype == torch.bfloat16


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_fully_padded_rows_stay_finite(dtype: torch.dtype) -> None:
    """Left padding masks every key of the pad rows; nothing may turn NaN and spread."""
    model = tiny().to(dtype)
    idx = torch.randint(0, TINY["vocab_size"], (2, 8))
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[0, :5] = 0
    with torch.no_grad():
        out = model(idx, attention_mask=mask)
    assert torch.isfinite(out.float()).all()


def test_sampling_options_must_be_numbers() -> None:
    with pytest.raises(zoo.InputError, match="temperature must be a number or None, got str 'hot'; give temperature="):
        tiny().generate(torch.zeros(1, 3, dtype=torch.long), 2, do_sample=True, temperature="hot")


def test_plugin_control_warns_about_names_no_plugin_has() -> None:
    with pytest.warns(RuntimeWarning, match="'no-such-plugin'"):
        zoo.Registry(deny=["no-such-plugin"])


# -- forward and check_inputs -------------------------------------------------------------


def tiny_eval(name: str = "gpt2-small", **overrides: Any) -> Any:
    """``helpers.tiny`` in eval mode, for any preset (an encoder-decoder too)."""
    torch.manual_seed(0)
    return zoo.build(name, **{**TINY, **overrides}).eval()


IDS = torch.tensor([[1, 2, 3]])


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda m: m(torch.tensor(3)), r"shape \(batch, seq\).*idx\[None\]"),
        (lambda m: m(torch.tensor([1, 2, 3])), r"shape \(batch, seq\)"),
        (lambda m: m([[1, 2, 3]]), "idx must be a torch.Tensor.*got list; convert it with torch.tensor"),
        (lambda m: m(None), "idx must be a torch.Tensor.*got NoneType"),
        (lambda m: m(np.array([[1, 2, 3]])), "idx must be a torch.Tensor.*got ndarray"),
        (lambda m: m(IDS.to(torch.uint8)), "integer tensor"),
        (lambda m: m(IDS, attention_mask=[[1, 1, 1]]), "attention_mask must be a torch.Tensor.*got list"),
        (
            lambda m: m(IDS, positions=torch.tensor([[0.0, 1.0, 2.0]])),
            r"positions must be integers .*positions.long\(\)",
        ),
        (lambda m: m(IDS, positions=[[0, 1, 2]]), "positions must be a torch.Tensor"),
        (lambda m: m(IDS, cache={}), "cache must be a KVCache from model.new_cache.*got dict"),
        (lambda m: m(IDS, cache=tiny_eval(n_layers=3).new_cache()), "cache has 3 layers but this model needs 2"),
        (lambda m: m(torch.tensor([[TINY["vocab_size"]]])), r"token id 97 is outside the vocabulary \[0, 97\)"),
        (lambda m: m(torch.tensor([[-1]])), r"token id -1 is outside the vocabulary"),
    ],
    ids=[
        "0-d ids",
        "1-d ids",
        "list",
        "None",
        "numpy",
        "uint8",
        "mask list",
        "float positions",
        "positions list",
        "cache dict",
        "cache layers",
        "id past vocab",
        "negative id",
    ],
)
def test_bad_forward_input_is_an_input_error(call: Any, match: str) -> None:
    with pytest.raises(zoo.InputError, match=match):
        call(tiny_eval())


def filled_cache(model: Any, batch: int = 1) -> Any:
    cache = model.new_cache()
    with torch.no_grad():
        model(torch.zeros(batch, 3, dtype=torch.long), cache=cache)
    return cache


@pytest.mark.parametrize(
    ("other", "batch", "match"),
    [
        ({"d_model": 64}, 1, r"holds keys and values of \(batch, kv heads, head dim\) \(1, 4, 16\).*makes \(1, 4, 8\)"),
        ({"attention": {"name": "gqa", "n_kv_heads": 2}}, 1, r"\(1, 2, 8\).*makes \(1, 4, 8\)"),
        ({}, 2, "cache holds a batch of 2 but idx has 1 rows"),
    ],
    ids=["width", "kv heads", "batch"],
)
def test_a_cache_filled_by_another_model_or_batch_is_refused(other: dict[str, Any], batch: int, match: str) -> None:
    cache = filled_cache(tiny_eval(**other), batch)
    with pytest.raises(zoo.InputError, match=match):
        tiny_eval()(IDS, cache=cache)


def test_encoder_decoder_refuses_non_tensors_and_foreign_caches() -> None:
    model = tiny_eval("transformer-2017-base")
    src = torch.tensor([[1, 2, 3, 4]])
    with pytest.raises(zoo.InputError, match="src must be a torch.Tensor"):
        model([[1, 2]], src)
    with pytest.raises(zoo.InputError, match=r"src must be an integer tensor .* shape \(batch, seq\)"):
        model.encode(torch.tensor(3))
    memory = model.encode(src)
    with pytest.raises(zoo.InputError, match="memory must be a torch.Tensor"):
        model.decode(src, memory.tolist())
    with pytest.raises(zoo.InputError, match="cache has 2 layers but this model needs 4"):
        model.decode(src, memory, cache=tiny_eval().new_cache())


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (
            {"attention_mask": torch.tensor([[1, 0.5, 1]])},
            "attention_mask must hold 1 for real tokens and 0 for padding, found 0.5",
        ),
        ({"attention_mask": torch.tensor([[1, 7, 1]])}, "found 7"),
        (
            {"positions": torch.tensor([[0, 1, 64]])},
            r"positions must lie in \[0, 64\) \(position 'learned' holds max_seq_len=64\), got 0..64",
        ),
        ({"positions": torch.tensor([[-1, 0, 1]])}, r"positions must lie in \[0, 64\)"),
    ],
    ids=["mask 0.5", "mask 7", "position past table", "negative position"],
)
def test_check_inputs_refuses_bad_values(kwargs: dict[str, Any], match: str) -> None:
    model = tiny_eval()
    with pytest.raises(zoo.InputError, match=match):
        zoo.check_inputs(model, IDS, **kwargs)


def test_check_inputs_passes_good_inputs_and_checks_like_forward() -> None:
    model = tiny_eval()
    cache = filled_cache(model)
    zoo.check_inputs(
        model, IDS, attention_mask=torch.ones(1, 6, dtype=torch.bool), positions=torch.tensor([[3, 4, 5]]), cache=cache
    )
    with pytest.raises(zoo.InputError, match=r"token id 97 is outside the vocabulary"):
        zoo.check_inputs(model, torch.tensor([[1, 97]]))
    with pytest.raises(zoo.InputError, match="must be a torch.Tensor"):
        zoo.check_inputs(model, [[1, 2]])
    with pytest.raises(zoo.InputError, match="cache holds a batch of 1"):
        zoo.check_inputs(model, IDS.expand(2, 3), cache=cache)


@pytest.mark.parametrize(
    "overrides",
    [
        {"init": {"name": "gpt2", "std": float("inf")}},
        {"position": {"name": "sinusoidal", "base": float("inf")}},
        {"position": {"name": "rotary", "base": float("inf")}},
        {"position": {"name": "alibi", "max_bias": float("inf")}},
        {"position": {"name": "rotary", "rotary_pct": float("nan")}},
    ],
    ids=["init std", "sinusoidal base", "rotary base", "alibi max_bias", "rotary_pct nan"],
)
def test_component_options_must_be_finite(overrides: dict[str, Any]) -> None:
    with pytest.raises(zoo.ConfigError, match="finite number"):
        zoo.build("gpt2-small", **TINY, **overrides, device="meta")

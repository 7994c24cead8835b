"""Bad input to the model and to build: a clear InputError or ConfigError, never a raw one."""

from __future__ import annotations

import pytest
import torch

import zoo
from helpers import TINY, tiny


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
    with pytest.raises(zoo.InputError, match="temperature must be a number"):
        tiny().generate(torch.zeros(1, 3, dtype=torch.long), 2, do_sample=True, temperature="hot")


def test_plugin_control_warns_about_names_no_plugin_has() -> None:
    with pytest.warns(RuntimeWarning, match="'no-such-plugin'"):
        zoo.Registry(deny=["no-such-plugin"])

"""``zoo.evaluate`` and ``zoo eval`` past ``max_seq_len``: positions without a table (rotary,
ALiBi, sinusoidal, none) are computed, with a warning, as generation has them; a learned
table refuses, naming ``--seq-len`` (one rule: ``zoo.nn.inputs.position_limit``)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

import zoo
from zoo.cli import main
from zoo.training import tokens_data

SIZES: dict[str, Any] = dict(n_layers=1, d_model=32, n_heads=2, vocab_size=256, max_seq_len=16, dropout=0.0)


def token_data() -> Any:
    """Random byte ids, split in two: enough validation for windows of 32."""
    ids = torch.randint(0, 256, (400,), generator=torch.Generator().manual_seed(0))
    return tokens_data(ids[:200], ids[200:])


@pytest.mark.parametrize("position", ["rotary", "alibi", "sinusoidal", "none"])
def test_positions_without_a_table_evaluate_past_max_seq_len_as_the_weights_built_longer(position: str) -> None:
    short = zoo.build("gpt2-small", position=position, **SIZES)
    long = zoo.build("gpt2-small", position=position, **{**SIZES, "max_seq_len": 32})
    long.load_state_dict(short.state_dict())
    data = token_data()
    with pytest.warns(UserWarning, match=r"32 positions run past the model's max_seq_len=16.*--seq-len 16 or less"):
        past = zoo.evaluate(short, data, seq_len=32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # inside its context, no warning
        inside = zoo.evaluate(long, data, seq_len=32)
    assert past.tokens == inside.tokens == 192  # 6 windows of 32 in 200 tokens
    assert past.loss == pytest.approx(inside.loss, rel=1e-6)
    assert past.loss != pytest.approx(zoo.evaluate(short, data, seq_len=16).loss, rel=1e-6)  # a longer context did run


def test_a_learned_table_refuses_a_longer_seq_len() -> None:
    model = zoo.build("gpt2-small", **SIZES)
    with pytest.raises(zoo.ConfigError, match=r"seq_len=17 does not fit: position 'learned' holds max_seq_len=16; "):
        zoo.evaluate(model, token_data(), seq_len=17)
    assert zoo.evaluate(model, token_data(), seq_len=16).tokens == 192  # 12 windows of 16


@pytest.mark.parametrize(("position", "code"), [("rotary", 0), ("learned", 1)])
def test_zoo_eval_past_max_seq_len(
    position: str, code: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``zoo eval --seq-len`` past ``max_seq_len``: a warning line for rotary, one error line
    naming the flag for learned positions."""
    checkpoint = zoo.save(zoo.build("gpt2-small", position=position, **SIZES), tmp_path / "m.safetensors")
    text = tmp_path / "t.txt"
    text.write_text("To be, or not to be, that is the question. " * 400, encoding="utf-8")
    argv = ["eval", str(checkpoint), "--data", str(text), "--tokenizer", "bytes", "--seq-len", "32", "--json"]
    assert main(argv) == code
    err = capsys.readouterr().err
    if position == "rotary":
        assert err.startswith("warning: 32 positions run past the model's max_seq_len=16") and "--seq-len 16" in err
    else:
        assert "error" in err and "position 'learned' holds max_seq_len=16; use --seq-len 16 or less" in err
        assert err.count("\n") == 1

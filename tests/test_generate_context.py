"""Past ``max_seq_len``: positions without a table (rotary, ALiBi, sinusoidal, none) are
computed, as transformers generates past ``max_position_embeddings``, with a warning, and
equal the same weights built with a longer context (forward, the KV cache step by step,
generate); learned positions, a table, still refuse with the message that says what fits."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

import zoo
from helpers import tiny
from zoo.cli import main
from zoo.nn.inputs import check_inputs

#: Presets and overrides whose positions have no table: rotary (Llama; Gemma 3's local
#: layers, a window of 16 and a rolling cache, between global ones), ALiBi (BLOOM), and
#: GPT-2 with each other encoding.
TABLE_FREE: list[tuple[str, dict[str, Any]]] = [
    ("llama-style-small", {}),
    ("gemma-3-1b", {"layer_pattern": ({"attention": {"window": 16}, "position": {"base": 10000.0}}, {})}),
    ("bloom-560m", {}),
    ("gpt2-small", {"position": "rotary"}),
    ("gpt2-small", {"position": "sinusoidal"}),
    ("gpt2-small", {"position": "none"}),
]
IDS = [f"{name}{'-' + kw['position'] if 'position' in kw else ''}" for name, kw in TABLE_FREE]
PAST = "80 positions run past the model's max_seq_len=64: position '{}' has no table"


def longer_twin(model: zoo.DecoderLM, max_seq_len: int = 256) -> zoo.DecoderLM:
    """``model``'s weights in the same config built with a longer context."""
    twin = zoo.build(model.config, max_seq_len=max_seq_len).eval()
    twin.load_state_dict(model.state_dict())
    return twin


@pytest.mark.parametrize(("name", "overrides"), TABLE_FREE, ids=IDS)
def test_table_free_positions_compute_past_max_seq_len_as_a_longer_context(
    name: str, overrides: dict[str, Any]
) -> None:
    model = tiny(name, vocab_size=97, **overrides)  # max_seq_len 64
    assert model.config.max_seq_len == 64 and model.position.max_positions is None
    twin = longer_twin(model)
    torch.manual_seed(1)
    ids = torch.randint(0, 97, (2, 100))
    with torch.no_grad():
        full = model(ids)
        torch.testing.assert_close(full, twin(ids))  # 100 positions, as a 256-position model reads them
        cache = model.new_cache()  # prefilled inside the context, then one position at a time past it
        steps = [model(ids[:, :60], cache=cache)[:, -1]]
        steps += [model(ids[:, t : t + 1], cache=cache)[:, -1] for t in range(60, 100)]
    assert cache.length == 100
    torch.testing.assert_close(torch.stack(steps, 1), full[:, 59:])
    with pytest.warns(UserWarning, match=PAST.format(model.config.position.name)) as caught:
        out = model.generate(ids[:, :50], 30)
    assert "ask for at most 14 new tokens (max_new_tokens=14) to stay inside it" in str(caught[0].message)
    assert out.shape == (2, 80)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # inside its context: no warning
        assert torch.equal(out, twin.generate(ids[:, :50], 30))
        assert model.generate(ids[:, :50], 14).shape == (2, 64)
    with pytest.warns(UserWarning, match=PAST.format(model.config.position.name)):
        beams = model.generate(ids[:1, :50], 30, num_beams=2)
    assert torch.equal(beams, twin.generate(ids[:1, :50], 30, num_beams=2))


def test_table_free_positions_take_any_position_and_learned_ones_refuse_past_the_table() -> None:
    rotary = tiny("llama-style-small", vocab_size=97)
    check_inputs(rotary, torch.ones(1, 3, dtype=torch.long), positions=torch.tensor([[0, 1, 500]]))
    with pytest.raises(zoo.InputError, match=r"positions must be 0 or more, got -1\.\.1"):
        check_inputs(rotary, torch.ones(1, 3, dtype=torch.long), positions=torch.tensor([[-1, 0, 1]]))
    learned = tiny()  # GPT-2: a table of max_seq_len=64 rows
    with pytest.raises(zoo.ConfigError, match="65 positions do not fit: position 'learned' holds max_seq_len=64"):
        learned(torch.ones(1, 65, dtype=torch.long))
    with pytest.raises(zoo.ConfigError, match="holds max_seq_len=64: at most 14 new tokens fit after this prompt"):
        learned.generate(torch.ones(1, 50, dtype=torch.long), 15)
    with pytest.raises(RuntimeError, match="size mismatch"):  # a longer table would hold rows never trained
        longer_twin(learned)


def test_zoo_generate_past_max_seq_len_warns_on_a_line_or_refuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sizes = dict(vocab_size=256, max_seq_len=16, d_model=32, n_layers=1, n_heads=4)
    torch.manual_seed(0)
    rotary = zoo.save(zoo.build("llama-style-small", **sizes), tmp_path / "rotary.safetensors")
    learned = zoo.save(zoo.build("gpt2-small", **sizes), tmp_path / "learned.safetensors")
    argv = ["--prompt", "hello", "--max-new-tokens", "20", "--no-echo", "--no-stop-at-eot"]
    assert main(["generate", str(rotary), *argv]) == 0
    out, err = capsys.readouterr()
    assert out.strip()  # the text came
    assert err.startswith("warning: 25 positions run past the model's max_seq_len=16: position 'rotary'")
    assert err.rstrip().endswith("ask for at most 11 new tokens (--max-new-tokens 11) to stay inside it")
    assert "UserWarning" not in err
    assert main(["generate", str(learned), *argv]) == 1
    assert "holds max_seq_len=16: at most 11 new tokens fit after this prompt" in capsys.readouterr().err

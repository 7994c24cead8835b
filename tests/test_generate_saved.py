"""What a saved model keeps for generation: its ``generation_config`` through ``zoo.save``
and ``zoo.load``, and the context its training run trained it at, past which
generation warns."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch

import zoo
from helpers import prepared_bytes, random_hf_model
from zoo.cli import main

pytest.importorskip("transformers")


def test_generation_settings_travel_with_a_saved_model(tmp_path: Path) -> None:
    _, model = random_hf_model(tmp_path / "hf", "gpt2", 120, eos_token_id=[5, 7], pad_token_id=3)
    assert model.generation_config == {"bos_token_id": 1, "eos_token_id": [5, 7], "pad_token_id": 3}
    loaded = zoo.load(zoo.save(model, tmp_path / "m.safetensors"))
    assert loaded.generation_config == model.generation_config
    ids = torch.tensor([[4, 9, 11]])
    assert torch.equal(loaded.generate(ids, 10), model.generate(ids, 10))
    assert zoo.load(zoo.save(zoo.build("gpt2-small", n_layers=1, d_model=16, n_heads=2, vocab_size=64), tmp_path / "p.safetensors")).generation_config == {}  # fmt: skip


def test_generating_past_the_trained_context_warns(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    data = prepared_bytes(tmp_path / "data", 4_000)
    run = tmp_path / "run"
    args = ["--set", "n_layers=1", "--set", "d_model=32", "--set", "n_heads=2", "--set", "max_seq_len=64"]
    train = ["--steps", "2", "--batch-size", "2", "--seq-len", "16", "--eval-every", "2", "--save-every", "2"]
    assert main(["train", "gpt2-small", *args, "--data", str(data), "--out", str(run), *train, "--threads", "1"]) == 0
    model = zoo.load(run)
    assert model.generation_config == {"trained_context": 16}
    ids = torch.tensor([[104, 105]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.generate(ids, 14)  # 16 positions: inside what it was trained at
    with pytest.warns(UserWarning, match="past the 16 the model was trained at .* at most 14 new tokens"):
        out = model.generate(ids, 20)
    assert out.shape == (1, 22)  # a warning, not a refusal: max_seq_len is 64


def test_an_export_keeps_the_generation_settings_where_transformers_reads_them(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    reference, model = random_hf_model(tmp_path / "hf", "llama", 120, eos_token_id=[5, 7], pad_token_id=3)
    out = zoo.to_hf(model, tmp_path / "out")
    exported = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    assert exported.generation_config.eos_token_id == [5, 7] and exported.generation_config.pad_token_id == 3
    assert zoo.from_hf(out).generation_config == model.generation_config
    ids = torch.tensor([[4, 9, 11]])
    with torch.no_grad():
        theirs = exported.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=10, do_sample=False)
    assert torch.equal(model.generate(ids, 10), theirs)
    assert not (zoo.to_hf(zoo.build("gpt2-small", n_layers=1, d_model=16, n_heads=2), tmp_path / "plain") / "generation_config.json").exists()  # fmt: skip

"""`zoo probe` takes every model source the other commands take: a Hugging Face folder and a
hub id (an offline hub cache) through ``zoo.pipelines.load_model``, measured as the same
weights loaded through the API, and with the loss transformers computes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

import zoo
from helpers import put_in_hub_cache, random_hf_model
from zoo.cli import main
from zoo.probe import ProbeResult, corpus_batch, designs, probe, probe_designs

BATCH, SEQ = 2, 16


@pytest.fixture
def llama(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Any, str]:
    """A random transformers Llama (256 byte tokens) saved in a folder and in an offline hub
    cache as ``org/llama``; the folder, the transformers model and the cache's commit."""
    pytest.importorskip("transformers")
    folder = tmp_path / "llama"
    reference, _ = random_hf_model(folder, "llama", vocab=256)
    commit = put_in_hub_cache(tmp_path / "home" / "hub", "org/llama", folder)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return folder, reference, commit


def numbers(result: ProbeResult) -> dict[str, Any]:
    """What a probe measured, without its label."""
    return {k: v for k, v in result.to_dict().items() if k not in ("label", "notes")}


def test_probe_of_a_hf_folder_and_a_hub_id_equals_the_api_loaded_model(llama: tuple[Path, Any, str]) -> None:
    folder, reference, _ = llama
    tokens, source = corpus_batch(256, BATCH, SEQ)
    expected = probe(zoo.from_hf(folder), tokens, source=source)
    with torch.no_grad():  # transformers' own loss on the same batch: the weights really are those
        theirs = reference(tokens, labels=tokens).loss.item()
    assert expected.loss == pytest.approx(theirs, abs=1e-5)
    for target, label in ((str(folder), "llama"), ("org/llama", "org/llama")):
        (result,) = probe_designs(designs([target]), batch_size=BATCH, seq_len=SEQ)
        assert result.label == label
        assert numbers(result) == numbers(expected)  # the same weights and tokens: the same numbers
        assert result.notes == ["no update ratio: a Hugging Face model (it needs a checkpoint folder with two versions or more)"]  # fmt: skip
    other = zoo.from_hf(folder)
    with torch.no_grad():
        other.blocks[0].mlp.down.weight.mul_(2.0)  # another model: the comparison tells them apart
    assert probe(other, tokens, source=source).grad_norm != expected.grad_norm


def test_zoo_probe_takes_a_hub_id_and_refuses_what_does_not_apply(
    llama: tuple[Path, Any, str], capsys: pytest.CaptureFixture[str]
) -> None:
    folder, _, commit = llama
    tokens, source = corpus_batch(256, BATCH, SEQ)
    expected = probe(zoo.from_hf(folder), tokens, source=source)
    assert main(["probe", "org/llama", str(folder), "--seq-len", str(SEQ), "--batch-size", str(BATCH), "--json"]) == 0
    probes = json.loads(capsys.readouterr().out)["probes"]
    assert [p["label"] for p in probes] == ["org/llama", "llama"]
    assert [p["loss"] for p in probes] == pytest.approx([expected.loss] * 2, rel=1e-6)
    assert (
        main(["probe", "org/llama", "--revision", commit, "--seq-len", str(SEQ), "--batch-size", str(BATCH), "--json"])
        == 0
    )
    assert json.loads(capsys.readouterr().out)["probes"][0]["loss"] == pytest.approx(expected.loss, rel=1e-6)
    assert main(["probe", "org/llama", "--revision", "v9", "--seq-len", str(SEQ)]) == 1
    assert "v9" in capsys.readouterr().err
    assert main(["probe", "org/llama", "--set", "n_layers=1"]) == 1
    assert "org/llama is a saved model" in capsys.readouterr().err
    assert main(["probe", "org/llama", "--version", "2", "--seq-len", str(SEQ)]) == 1
    assert "drop version (--version)" in capsys.readouterr().err
    assert main(["probe", "org/nothing", "--seq-len", str(SEQ)]) == 1
    assert "org/nothing" in capsys.readouterr().err


def test_a_seq_len_past_max_seq_len_is_measured_without_a_table_and_refused_with_one() -> None:
    small = dict(d_model=32, n_layers=1, n_heads=4, vocab_size=256)
    sizes = [*(f"{k}={v}" for k, v in small.items()), "max_seq_len=16"]
    (rotary,) = probe_designs(designs(["llama-style-small"], sets=sizes), batch_size=BATCH, seq_len=32)
    tokens, source = corpus_batch(256, BATCH, 32)
    torch.manual_seed(0)  # the seed the design was built with: the same weights
    twin = zoo.build("llama-style-small", **small, max_seq_len=32)
    assert numbers(rotary) == numbers(probe(twin, tokens, source=source))  # the same as a 32-position context
    assert rotary.notes == [
        "--seq-len 32 runs past max_seq_len=16: rotary positions have no table, so they are computed, but the "
        "model was built for 16"
    ]
    with pytest.raises(zoo.ConfigError, match="--seq-len 32 exceeds max_seq_len=16, .* give --seq-len 16 or less"):
        probe_designs(designs(["gpt2-small"], sets=sizes), batch_size=BATCH, seq_len=32)

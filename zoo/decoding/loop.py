"""The decode loop: ``stream`` yields each step, ``generate`` returns the ids.

The prompt runs through the model once, filling a KV cache; after that each new token
is one position through the model, attending to the cached keys and values. The cache
lives behind the attention contract (``AttentionContext.cache``), so any attention or
position component gets cached decoding without code here. The steps run on an
``Engine`` (the model prepared for decoding): one made per call for a plain model
(its weight layouts reused from ``zoo.decoding.layouts``), or one passed in.

Prompts of different lengths share a batch by left padding: ``attention_mask`` is 0
on the padding, positions count real tokens only (as transformers does), and every
sequence's newest token sits in the last column, so all of them step together.

Inputs are checked here, once per call (token ids in the vocabulary, the positions
the position encoding holds, the memory the KV cache needs), not in every step.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from zoo.bounds import check_bytes, count
from zoo.decoding.beams import Beams, beam_search, check_early_stopping
from zoo.decoding.engine import Engine, layouts
from zoo.decoding.sampling import Sampling
from zoo.decoding.stopping import StopStrings
from zoo.errors import ConfigError, InputError, checked_types, printable
from zoo.memory import fmt_bytes, require
from zoo.nn.generation import check_generation
from zoo.nn.inputs import beyond_context, check_inputs, context_limit, position_limit, warn_past_context
from zoo.nn.model import DecoderLM

__all__ = ["Step", "stream", "generate"]


@dataclass(frozen=True)
class Step:
    """One decoding step: the new tokens (B,), the scores they came from (B, V), and
    which sequences are finished (B,) after it. Finished sequences get the pad token."""

    tokens: Tensor
    scores: Tensor
    finished: Tensor


def stream(
    model: DecoderLM | Engine,
    input_ids: Tensor,
    max_new_tokens: int,
    *,
    sampling: Sampling | None = None,
    eos_token_id: int | Sequence[int] | None = None,
    generator: torch.Generator | None = None,
    attention_mask: Tensor | None = None,
    pad_token_id: int | None = None,
    min_new_tokens: int = 0,
    stop: StopStrings | None = None,
) -> Iterator[Step]:
    """Decode step by step, yielding each ``Step``; stops when every sequence is finished.

    A model is prepared into an ``Engine`` for this call (eval mode, no dropout; the
    model itself is not touched), its weight layouts kept in ``zoo.decoding.layouts``
    for the next call; an ``Engine`` passed in is used as it is. ``min_new_tokens``
    keeps the EOS ids out for that many steps; ``stop`` ends a sequence at a stop string.
    """
    sampling = sampling or Sampling()
    engine = model if isinstance(model, Engine) else Engine(model, layouts=layouts)
    engine.refresh()
    ids, mask = _check_inputs(engine, input_ids, max_new_tokens, attention_mask)
    _check_generator(generator, ids.device)
    eos = _eos_tensor(eos_token_id, ids.device, engine.config.vocab_size)
    pad = _eos_tensor(pad_token_id, ids.device, engine.config.vocab_size, "pad_token_id")
    if pad is not None and pad.numel() != 1:
        raise InputError(f"pad_token_id must be one token id, got {pad_token_id!r}")
    if max_new_tokens == 0:
        return
    try:
        decoding = _Decoding(engine, ids, mask, max_new_tokens, sampling, eos, generator, pad)
        decoding.min_new_tokens, decoding.stop = _check_count(min_new_tokens, "min_new_tokens", 0), stop
        scores = decoding.prefill()
        for step in range(max_new_tokens):
            tokens, finished = decoding.choose(scores)
            yield Step(tokens, scores, finished)
            if step == max_new_tokens - 1 or decoding.all_finished():
                return
            scores = decoding.advance(tokens)
    except RuntimeError as err:  # torch.OutOfMemoryError, or the CPU allocator's plain one
        if not isinstance(err, torch.OutOfMemoryError) and "alloc" not in str(err):
            raise
        cache = fmt_bytes(_cache_bytes(engine, ids.shape[0], ids.shape[1] + max_new_tokens))
        raise InputError(
            f"out of memory while decoding {ids.shape[0]} x {ids.shape[1]} prompt tokens plus "
            f"max_new_tokens={max_new_tokens} (a KV cache of up to {cache}): ask for fewer new "
            f"tokens or a smaller batch"
        ) from err


class _Decoding:
    """One batch being decoded: its cache, mask, positions, seen tokens, finished rows."""

    def __init__(
        self,
        engine: Engine,
        ids: Tensor,
        mask: Tensor | None,
        max_new_tokens: int,
        sampling: Sampling,
        eos: Tensor | None,
        generator: torch.Generator | None,
        pad: Tensor | None = None,
    ) -> None:
        self.engine, self.ids, self.sampling, self.eos, self.generator = engine, ids, sampling, eos, generator
        batch, self.prompt_len = ids.shape
        self.pad = int(pad[0]) if pad is not None else int(eos[0]) if eos is not None else 0
        self.finished = torch.zeros(batch, dtype=torch.bool, device=ids.device)
        self.min_new_tokens, self.step = 0, 0
        self.stop: StopStrings | None = None
        self.history: list[list[int]] | None = None  # each row's ids, for stop strings
        self.cache = engine.new_cache(self.prompt_len + max_new_tokens)
        self.mask: Tensor | None = None
        self.full_mask: Tensor | None = None
        self.positions: Tensor | None = None
        if mask is not None:  # left padding: positions count real tokens only (or every slot, as BART's)
            self.mask = mask
            self.full_mask = torch.ones(batch, self.prompt_len + max_new_tokens, dtype=torch.bool, device=ids.device)
            self.full_mask[:, : self.prompt_len] = mask
            if getattr(getattr(engine.model, "position", None), "counts_padding", False):
                self.positions = torch.arange(self.prompt_len, device=ids.device).expand(batch, -1)  # (B, S)
            else:
                self.positions = (mask.long().cumsum(-1) - 1).clamp(min=0)  # (B, S)
        self.seen = None
        if sampling.repetition_penalty != 1.0:  # the tokens each row holds, padding excluded
            real = mask.float() if mask is not None else torch.ones_like(ids, dtype=torch.float)
            counts = torch.zeros(batch, engine.config.vocab_size, device=ids.device)
            self.seen = counts.scatter_add_(1, ids, real) > 0

    def prefill(self) -> Tensor:
        """Run the prompt, filling the cache; the scores (B, V) for the first new token."""
        return self.engine.scores(self.ids, attention_mask=self.mask, positions=self.positions, cache=self.cache)

    @torch.inference_mode()
    def choose(self, scores: Tensor) -> tuple[Tensor, Tensor]:
        if self.eos is not None and self.step < self.min_new_tokens:  # as transformers: after the penalty
            scores = scores.float().index_fill(-1, self.eos, float("-inf"))
        self.step += 1
        tokens = self.sampling.choose(scores, self.seen, self.generator)  # (B,)
        if self.eos is not None:
            tokens = tokens.masked_fill(self.finished, self.pad)
            self.finished = self.finished | torch.isin(tokens, self.eos)
        if self.stop is not None:
            self.finished = self.finished | self._stopped(tokens)
        return tokens, self.finished

    def _stopped(self, tokens: Tensor) -> Tensor:
        """(B,) which sequences just completed a stop string."""
        assert self.stop is not None
        if self.history is None:
            self.history = self.ids.tolist()
        hits = []
        for row, token in zip(self.history, tokens.tolist(), strict=True):
            row.append(token)
            hits.append(self.stop.ends(row))
        return torch.tensor(hits, device=tokens.device)

    def all_finished(self) -> bool:
        return (self.eos is not None or self.stop is not None) and bool(self.finished.all())

    @torch.inference_mode()
    def advance(self, tokens: Tensor) -> Tensor:
        """Feed the new tokens (B,) through the model; the scores (B, V) for the next ones."""
        if self.seen is not None:
            self.seen.scatter_(1, tokens[:, None], True)
        step_mask = None
        if self.full_mask is not None and self.positions is not None:  # for padded batches
            self.positions = self.positions[:, -1:] + 1  # (B, 1)
            step_mask = self.full_mask[:, : self.cache.length + 1]
        return self.engine.scores(tokens[:, None], attention_mask=step_mask, positions=self.positions, cache=self.cache)


def _check_min_new(settings: dict[str, Any], min_new: int, new_tokens: int, prompt: int) -> None:
    """Refuse a ``min_new_tokens`` past what ``max_length`` leaves after the prompt
    (against ``max_new_tokens``, ``check_generation`` has refused it already)."""
    if settings["max_length"] is not None and min_new > new_tokens:
        raise InputError(
            f"generate(): min_new_tokens={min_new} is more than the {new_tokens} new tokens max_length="
            f"{settings['max_length']} leaves after the prompt's {prompt}, so no sequence could be that "
            f"long; lower min_new_tokens or raise max_length"
        )


@checked_types("model")
def generate(
    model: DecoderLM | Engine,
    input_ids: Tensor,
    max_new_tokens: int | None = None,
    *,
    max_length: int | None = None,
    min_new_tokens: int | None = None,
    num_return_sequences: int = 1,
    pad_token_id: int | None = None,
    seed: int | None = None,
    do_sample: bool | None = None,
    temperature: float | None = None,
    top_k: int | None = None,
    top_p: float | None = None,
    repetition_penalty: float | None = None,
    eos_token_id: int | Sequence[int] | Tensor | None = None,
    generator: torch.Generator | None = None,
    attention_mask: Tensor | None = None,
    on_token: Callable[[Tensor], object] | None = None,
    stop_strings: str | Sequence[str] | None = None,
    tokenizer: object | None = None,
    num_beams: int | None = None,
    length_penalty: float | None = None,
    early_stopping: bool | str | None = None,
) -> Tensor:
    """Prompt ids (B, S) followed by up to ``max_new_tokens`` new ones: (B, S + T).

    Greedy unless ``do_sample``; then ``temperature``, ``top_k`` and ``top_p`` shape the
    distribution and ``generator`` makes it reproducible. A sequence stops at
    ``eos_token_id`` (one id or several) and is padded with ``pad_token_id`` (default:
    the first EOS id) while the others go on; T is shorter than ``max_new_tokens`` when
    all stop early. Batch prompts of different lengths by left padding with
    ``attention_mask`` (B, S), 1 for tokens, 0 for padding. ``on_token(tokens)``
    receives each step's new ids (B,) as they come. A 1-D prompt gives a 1-D result.
    ``model`` may be an ``Engine`` prepared once for many calls.

    As in transformers, a setting not given (None) is the model's own
    (``model.generation_config``: a model from ``from_hf`` has its
    ``generation_config.json``'s, else its ``config.json``'s token ids), else the
    default; ``eos_token_id=[]`` stops at no token. ``max_length`` bounds prompt plus
    new tokens instead of ``max_new_tokens`` (neither: 50 new tokens);
    ``min_new_tokens`` keeps EOS out until that many are made; ``stop_strings`` (with
    the ``tokenizer``) end a sequence whose text completes one; ``num_beams`` > 1 runs
    beam search (``zoo.decoding.beams``: ``length_penalty``, ``early_stopping``;
    ``num_return_sequences`` <= ``num_beams`` of the best beams per prompt); without
    beams ``num_return_sequences`` continues each prompt that many times (rows
    ``b * n .. b * n + n - 1`` for prompt ``b``); ``seed`` seeds a fresh generator (or
    pass ``generator``, not both).
    """
    given = dict(
        do_sample=do_sample, temperature=temperature, top_k=top_k, top_p=top_p,
        repetition_penalty=repetition_penalty, max_new_tokens=max_new_tokens, max_length=max_length,
        min_new_tokens=min_new_tokens, num_beams=num_beams, length_penalty=length_penalty,
        early_stopping=early_stopping, stop_strings=stop_strings, eos_token_id=eos_token_id, pad_token_id=pad_token_id,
    )  # fmt: skip
    settings, origins = merged_settings(model, given)
    top_k = settings["top_k"] or None  # as transformers: 0 is no top-k
    sampling = Sampling(
        settings["do_sample"], settings["temperature"], top_k, settings["top_p"], settings["repetition_penalty"]
    )
    single = isinstance(input_ids, Tensor) and _real_ids(model, input_ids).dim() == 1
    if single:
        input_ids = input_ids[None]
        attention_mask = (
            attention_mask[None] if attention_mask is not None and attention_mask.dim() == 1 else attention_mask
        )
    new_tokens = _new_tokens(settings["max_new_tokens"], settings["max_length"], input_ids)
    _warn_past_training(model, input_ids, new_tokens)
    beams = _check_count(settings["num_beams"], "num_beams")
    sequences = _check_count(num_return_sequences, "num_return_sequences")
    if isinstance(input_ids, Tensor) and input_ids.dim() == 2:  # bounds after the merge, before any copy
        check_cache_room(
            model, input_ids.shape[0], input_ids.shape[1], new_tokens,
            {**settings, "num_return_sequences": sequences}, origins,
        )  # fmt: skip
    if beams == 1 and sequences > 1:
        single = False
        input_ids = input_ids.repeat_interleave(sequences, dim=0)
        if attention_mask is not None:
            attention_mask = attention_mask.repeat_interleave(sequences, dim=0)
    generator = _seeded(model, seed, generator)
    eos = settings["eos_token_id"]
    eos = None if isinstance(eos, (list, tuple)) and not eos else eos
    stop = StopStrings(settings["stop_strings"], tokenizer) if settings["stop_strings"] is not None else None
    min_new = _check_count(settings["min_new_tokens"], "min_new_tokens", 0)
    _check_min_new(settings, min_new, new_tokens, input_ids.shape[-1])
    if beams > 1:
        out = _beam_search(
            model, input_ids, new_tokens, Beams(beams, settings["length_penalty"], settings["early_stopping"], sequences),
            sampling, eos, settings["pad_token_id"], attention_mask, min_new, stop, generator, on_token,
        )  # fmt: skip
        return out[0] if single and sequences == 1 else out
    new: list[Tensor] = []
    for step in stream(
        model, input_ids, new_tokens, sampling=sampling, eos_token_id=eos, generator=generator,
        attention_mask=attention_mask, pad_token_id=settings["pad_token_id"], min_new_tokens=min_new, stop=stop,
    ):  # fmt: skip
        new.append(step.tokens)
        if on_token is not None:
            on_token(step.tokens)
    prompt = input_ids.to(_device(model))  # the prompt as checked: a tensor on the model's device
    out = torch.cat([prompt, torch.stack(new, dim=1)], dim=1) if new else prompt
    return out[0] if single else out


#: What a setting is when neither the call nor the model gives it.
DEFAULTS: dict[str, Any] = dict(
    do_sample=False, temperature=1.0, top_k=None, top_p=None, repetition_penalty=1.0, max_new_tokens=None,
    max_length=None, min_new_tokens=0, num_beams=1, length_penalty=1.0, early_stopping=False, stop_strings=None,
    eos_token_id=None, pad_token_id=None,
)  # fmt: skip


def merged_settings(model: DecoderLM | Engine, given: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """Each setting as given, else the model's ``generation_config``, else ``DEFAULTS``;
    a length the call gives (``max_new_tokens`` or ``max_length``) replaces both of the
    model's. With where each came from: ``"argument"``, the model's source (its
    ``generation_source``: ``generation_config.json``, the checkpoint), or ``"default"``.
    The given settings and the merged ones are checked (``check_generation``)."""
    check_generation(given, "generate()", InputError)
    own = dict(getattr(model, "generation_config", None) or {})
    source = str(getattr(model, "generation_source", None) or "the model's generation_config")
    if given.get("max_new_tokens") is not None or given.get("max_length") is not None:
        own.pop("max_new_tokens", None), own.pop("max_length", None)
    if own.get("max_new_tokens") is not None:
        own.pop("max_length", None)
    settings, origins = {}, {}
    for name, default in DEFAULTS.items():
        value = given.get(name)
        settings[name] = value if value is not None else own.get(name, default)
        origins[name] = "argument" if value is not None else source if own.get(name) is not None else "default"
    check_generation(settings, "generate() with the model's generation_config", InputError)
    return settings, origins


#: The flag of ``zoo generate`` that sets each bounded setting (num_beams has none).
FLAGS = {"num_return_sequences": "--num-return-sequences", "max_new_tokens": "--max-new-tokens"}


def check_cache_room(
    model: DecoderLM | Engine,
    batch: int,
    prompt_len: int,
    new_tokens: int,
    settings: dict[str, Any],
    origins: dict[str, str],
) -> None:
    """Refuse, before anything is allocated, the KV caches of ``batch`` prompts times the
    beams (or return sequences) at ``prompt_len + new_tokens`` positions when they cannot
    fit: applied to the settings after they are merged (``merged_settings``), so a
    ``num_beams`` from a model's own settings meets the bound an argument does, and the
    refusal names the setting that multiplies most and where it came from."""
    beams = _check_count(settings["num_beams"], "num_beams")
    sequences = _check_count(settings.get("num_return_sequences", 1), "num_return_sequences")
    inner = model.model if isinstance(model, Engine) else model
    config = getattr(inner, "config", None)
    layers, width = getattr(config, "n_layers", None), getattr(config, "d_model", None)
    param = next(inner.parameters(), None) if isinstance(inner, torch.nn.Module) else None
    rows, positions = batch * (beams if beams > 1 else sequences), prompt_len + new_tokens
    if not (isinstance(layers, int) and isinstance(width, int) and isinstance(inner, DecoderLM)) or param is None:
        return  # not a decoder: generate says so
    limit = position_limit(inner)
    if not isinstance(new_tokens, int) or (limit is not None and positions > limit):
        return  # past the position table: its own refusal says how many tokens fit
    factors = {"num_beams": beams if beams > 1 else 1, "num_return_sequences": sequences if beams == 1 else 1}
    name, value = max({**factors, "max_new_tokens": new_tokens}.items(), key=lambda item: item[1])
    origin = printable(origins.get(name, "argument"))
    flag = FLAGS.get(name, f"{name}=")
    fix = f"lower {flag}" if origin == "argument" else f"pass a lower {flag}, or change it in {origin}"
    check_bytes(
        2 * layers * rows * positions * width * param.element_size(),
        f"{name}={count(value)} (from {origin}): {count(rows)} sequences of {count(positions)} positions (their "
        f"KV caches)",
        "", device=_device(model), error=InputError, fix=fix,
    )  # fmt: skip


def _warn_past_training(model: DecoderLM | Engine, input_ids: Tensor, new_tokens: int) -> None:
    """Warn when the sequences will run past the length the model was trained at (its
    ``generation_config``'s ``trained_context``: a zoo run's ``seq_len``)."""
    trained = (getattr(model, "generation_config", None) or {}).get("trained_context")
    length = (input_ids.shape[-1] if isinstance(input_ids, Tensor) else 0) + new_tokens
    if type(trained) is int and length > trained:
        warnings.warn(
            f"generating up to {length} positions, past the {trained} the model was trained at (its run's "
            f"seq_len): it never saw text this long, so expect worse text past position {trained}; ask for at "
            f"most {max(trained - length + new_tokens, 0)} new tokens to stay inside it",
            UserWarning,
            stacklevel=3,
        )


def _seeded(model: DecoderLM | Engine, seed: int | None, generator: torch.Generator | None) -> torch.Generator | None:
    if seed is None:
        return generator
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise InputError(f"seed must be an integer or None, got {seed!r}")
    if generator is not None:
        raise InputError("pass seed= or generator=, not both: a seed makes a generator")
    return torch.Generator(device=_device(model)).manual_seed(seed)


def _check_count(value: object, name: str, least: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise InputError(f"{name} must be an integer >= {least}, got {value!r}")
    return value


def _beam_search(
    model: DecoderLM | Engine,
    input_ids: Tensor,
    new_tokens: int,
    beams: Beams,
    sampling: Sampling,
    eos_token_id: object,
    pad_token_id: int | None,
    attention_mask: Tensor | None,
    min_new_tokens: int,
    stop: StopStrings | None,
    generator: torch.Generator | None,
    on_token: Callable[[Tensor], object] | None,
) -> Tensor:
    """``generate`` with ``num_beams`` > 1 (``zoo.decoding.beams``)."""
    if on_token is not None:
        raise InputError("on_token streams one sequence per row, which beam search does not have; drop on_token")
    if beams.num_return_sequences > beams.num_beams:
        raise InputError(
            f"num_return_sequences={beams.num_return_sequences} with num_beams={beams.num_beams}: beam search "
            f"returns at most num_beams sequences per prompt; raise num_beams or ask for fewer"
        )
    check_early_stopping(beams.early_stopping)
    if isinstance(beams.length_penalty, bool) or not isinstance(beams.length_penalty, (int, float)):
        raise InputError(f"length_penalty must be a number, got {beams.length_penalty!r}")
    engine = model if isinstance(model, Engine) else Engine(model, layouts=layouts)
    engine.refresh()
    k = beams.num_beams
    flat_mask = attention_mask.repeat_interleave(k, dim=0) if attention_mask is not None else None
    ids, mask = _check_inputs(engine, input_ids.repeat_interleave(k, dim=0), new_tokens, flat_mask)
    _check_generator(generator, ids.device)
    eos = _eos_tensor(eos_token_id, ids.device, engine.config.vocab_size)  # type: ignore[arg-type]
    pad = _eos_tensor(pad_token_id, ids.device, engine.config.vocab_size, "pad_token_id")
    prompt = ids[::k]
    if new_tokens == 0:
        return prompt
    # transformers fills what follows a finished sequence with the pad id, or the first EOS id for pad 0
    # (without EOS it fills -1, not a token: here the pad id)
    fill = int(pad[0]) if pad is not None and int(pad[0]) != 0 else int(eos[0]) if eos is not None else 0
    decoding = _Decoding(engine, ids, mask, new_tokens, Sampling(), None, generator, pad)
    return beam_search(
        decoding, prompt, new_tokens, beams, sampling, eos=eos, fill=fill, min_new_tokens=min_new_tokens, stop=stop,
        generator=generator,
    )  # fmt: skip


def _new_tokens(max_new_tokens: int | None, max_length: int | None, input_ids: Tensor) -> int:
    """``max_new_tokens``, or ``max_length`` less the prompt's length, or 50."""
    if max_length is None:
        return 50 if max_new_tokens is None else max_new_tokens
    if max_new_tokens is not None:
        raise InputError("pass max_new_tokens or max_length, not both (max_length counts the prompt too)")
    if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 1:
        raise InputError(f"max_length must be an integer >= 1, got {max_length!r}")
    prompt = input_ids.shape[-1] if isinstance(input_ids, Tensor) else 0
    if max_length < prompt:
        raise InputError(
            f"max_length={max_length} counts the prompt, which alone has {prompt} tokens; raise it, or pass "
            f"max_new_tokens for the new tokens only"
        )
    return max_length - prompt


def _real_ids(model: DecoderLM | Engine, input_ids: Tensor) -> Tensor:
    """``input_ids``, unless they are on the meta device: a shape without values, no tokens to decode."""
    if input_ids.is_meta:
        raise InputError(
            f"input_ids are on the meta device (a shape without values), so there are no tokens to decode; "
            f"give real token ids (torch.tensor([[...]])) on the model's device, {_device(model)}"
        )
    return input_ids


def _device(model: DecoderLM | Engine) -> torch.device:
    if isinstance(model, Engine):
        return model.device
    param = next(model.parameters(), None)
    return param.device if param is not None else torch.device("cpu")


def _cache_bytes(engine: Engine, batch: int, positions: int) -> int:
    """An upper bound on the KV cache's bytes: keys and values of width d_model per layer."""
    config = engine.config
    itemsize = next(engine.model.parameters()).element_size()
    return 2 * config.n_layers * batch * positions * config.d_model * itemsize


def _check_generator(generator: object, device: torch.device) -> None:
    if generator is None:
        return
    if not isinstance(generator, torch.Generator):
        raise InputError(
            f"generator must be a torch.Generator or None, got {type(generator).__name__} {generator!r}; "
            f"for a seed, pass generator=torch.Generator().manual_seed(seed)"
        )
    if generator.device.type != device.type:
        raise InputError(
            f"generator is on {generator.device} but the model is on {device}; "
            f"make it with torch.Generator(device={str(device)!r})"
        )


def _eos_tensor(
    eos_token_id: int | Sequence[int] | Tensor | None,
    device: torch.device,
    vocab: int | None,
    name: str = "eos_token_id",
) -> Tensor | None:
    if eos_token_id is None:
        return None
    given = eos_token_id.tolist() if isinstance(eos_token_id, Tensor) else eos_token_id
    ids = [given] if isinstance(given, int) else list(given) if isinstance(given, Sequence) else [given]
    if not ids or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise InputError(f"{name} must be a token id, a sequence of them, or None; got {eos_token_id!r}")
    if vocab is not None and not all(0 <= i < vocab for i in ids):
        raise InputError(
            f"{name} {eos_token_id!r} is outside the model's vocabulary [0, {vocab}); "
            f"pass an id of the tokenizer that matches the model"
        )
    return torch.tensor(ids, device=device)


def _check_inputs(
    engine: Engine, input_ids: Tensor, max_new_tokens: int, attention_mask: Tensor | None
) -> tuple[Tensor, Tensor | None]:
    """Validated prompt ids (B, S) and mask on the model's device; the mask is None
    when there is no padding. The decode steps feed back the model's own choices, which
    are in the vocabulary by construction, so token ids are checked here only."""
    model = engine.model
    if (
        not isinstance(input_ids, Tensor)
        or input_ids.dim() != 2
        or input_ids.is_floating_point()
        or input_ids.is_complex()
    ):
        shape = tuple(input_ids.shape) if isinstance(input_ids, Tensor) else type(input_ids).__name__
        raise InputError(f"input_ids must be an integer tensor of shape (batch, seq), got {shape}")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise InputError(f"max_new_tokens must be an integer >= 0, got {max_new_tokens!r}")
    prompt_len = input_ids.shape[1]
    if prompt_len == 0:
        raise InputError("the prompt is empty; give at least one token (GPT-2 starts from <|endoftext|>, 50256)")
    limit = position_limit(model)
    if limit is not None and prompt_len + max_new_tokens > limit:
        if prompt_len >= limit:
            fix = f"the prompt alone has {prompt_len} tokens; keep its last {limit - 1} or fewer"
        else:
            fix = f"at most {limit - prompt_len} new tokens fit after this prompt"
        raise ConfigError(
            f"a prompt of {prompt_len} tokens plus max_new_tokens={max_new_tokens} needs "
            f"{prompt_len + max_new_tokens} positions, but {beyond_context(model, limit)}: {fix}"
        )
    context = context_limit(model)
    room = context - prompt_len
    inside = f"ask for at most {room} new tokens (max_new_tokens={room}) to stay inside it" if room > 0 else ""
    warn_past_context(model, prompt_len + max_new_tokens, inside, stacklevel=4)  # past a context without a table
    check_inputs(model, input_ids, name="input_ids")  # token ids in the vocabulary, once
    device = engine.device
    require(
        _cache_bytes(engine, input_ids.shape[0], prompt_len + max_new_tokens),
        device,
        f"max_new_tokens={max_new_tokens} with a batch of {input_ids.shape[0]} x {prompt_len} prompt tokens (its KV cache)",
        InputError,
        fix="ask for fewer new tokens or a smaller batch",
    )
    ids = input_ids.to(device=device, dtype=torch.long)
    if attention_mask is None:
        return ids, None
    if not isinstance(attention_mask, Tensor) or attention_mask.shape != input_ids.shape:
        shape = tuple(attention_mask.shape) if isinstance(attention_mask, Tensor) else type(attention_mask).__name__
        raise InputError(f"attention_mask must have the shape of input_ids {tuple(input_ids.shape)}, got {shape}")
    mask = attention_mask.to(device=device)
    if not bool(((mask == 0) | (mask == 1)).all()):
        raise InputError("attention_mask must hold 1 for tokens and 0 for padding, nothing else")
    mask = mask.bool()
    if not bool(mask[:, -1].all()) or bool((mask[:, 1:] < mask[:, :-1]).any()):
        raise InputError(
            "attention_mask must pad on the left (zeros, then ones up to the last column) so "
            "every sequence's newest token is in the last column; with transformers, set "
            "tokenizer.padding_side = 'left'"
        )
    if bool(mask.all()):
        return ids, None  # no padding: the plain causal fast path
    return ids, mask

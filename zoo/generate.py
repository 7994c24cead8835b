"""KV-cached decoding and sampling: ``model.generate(...)`` and ``zoo.generate_text(...)``.

The prompt runs through the model once, filling a KV cache; after that each new token
is one position through the model, attending to the cached keys and values. The cache
lives behind the attention contract (``AttentionContext.cache``), so any attention or
position component gets cached decoding without code here.

Prompts of different lengths share a batch by left padding: ``attention_mask`` is 0
on the padding, positions count real tokens only (as transformers does), and every
sequence's newest token sits in the last column, so all of them step together.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from zoo.errors import ConfigError, InputError
from zoo.memory import require

if TYPE_CHECKING:
    from zoo.model import DecoderLM
    from zoo.text import Tokenizer

__all__ = ["Sampling", "Step", "stream", "generate", "generate_text"]


@dataclass(frozen=True)
class Sampling:
    """How the next token is chosen from the model's scores.

    Greedy (``do_sample=False``) takes the highest score; ``repetition_penalty`` applies
    to both, ``temperature``, ``top_k`` and ``top_p`` only to sampling. Scores may be
    logits or log-probabilities (a ``log_softmax`` head): they differ by a constant per
    row, which softmax, top-k and top-p ignore; the repetition penalty acts on the
    scores as given.
    """

    do_sample: bool = False
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    repetition_penalty: float = 1.0

    def __post_init__(self) -> None:
        if not isinstance(self.do_sample, bool):
            raise InputError(f"do_sample must be True or False, got {self.do_sample!r}")
        for name in ("temperature", "top_p", "repetition_penalty"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise InputError(f"{name} must be a number, got {value!r}")
        if not self.temperature > 0:
            raise InputError(f"temperature must be > 0, got {self.temperature}; use do_sample=False for greedy decoding")
        if self.top_k is not None and (isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 1):
            raise InputError(f"top_k must be a positive integer or None, got {self.top_k!r}")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise InputError(f"top_p must be in (0, 1] or None, got {self.top_p}")
        if not self.repetition_penalty > 0:
            raise InputError(f"repetition_penalty must be > 0 (1.0 is none), got {self.repetition_penalty}")

    def scores(self, scores: Tensor, seen: Tensor | None = None) -> Tensor:
        """(B, V) float32 scores after the penalty and, when sampling, the warpers.

        Tokens top-k / top-p rule out get -inf.
        """
        scores = scores.float()
        if seen is not None and self.repetition_penalty != 1.0:
            scores = repetition_penalty(scores, seen, self.repetition_penalty)
        if not self.do_sample:
            return scores
        if self.temperature != 1.0:
            scores = scores / self.temperature
        if self.top_k is not None:
            scores = top_k(scores, self.top_k)
        if self.top_p is not None and self.top_p < 1.0:
            scores = top_p(scores, self.top_p)
        return scores

    def probabilities(self, scores: Tensor, seen: Tensor | None = None) -> Tensor:
        """(B, V) distribution the next token is sampled from."""
        return torch.softmax(self.scores(scores, seen), dim=-1)

    def choose(self, scores: Tensor, seen: Tensor | None = None, generator: torch.Generator | None = None) -> Tensor:
        """Next token ids (B,) for scores (B, V)."""
        if not self.do_sample:
            return self.scores(scores, seen).argmax(dim=-1)
        probs = self.probabilities(scores, seen)
        return torch.multinomial(probs, num_samples=1, generator=generator).squeeze(1)


def repetition_penalty(scores: Tensor, seen: Tensor, penalty: float) -> Tensor:
    """CTRL's penalty (Keskar et al. 2019): scores of tokens already ``seen`` (B, V bool)
    are divided by ``penalty`` when positive and multiplied by it when negative."""
    penalised = torch.where(scores > 0, scores / penalty, scores * penalty)
    return torch.where(seen, penalised, scores)


def top_k(scores: Tensor, k: int) -> Tensor:
    """Keep the ``k`` highest scores per row (ties with the k-th kept), -inf elsewhere."""
    k = min(k, scores.shape[-1])
    kth = torch.topk(scores, k, dim=-1).values[..., -1:]  # (B, 1)
    return scores.masked_fill(scores < kth, float("-inf"))


def top_p(scores: Tensor, p: float) -> Tensor:
    """Nucleus sampling (Holtzman et al. 2020): keep the most likely tokens until their
    probability reaches ``p``, -inf for the rest; the most likely token always stays."""
    ordered, order = torch.sort(scores, dim=-1, descending=True)  # (B, V)
    probs = torch.softmax(ordered, dim=-1)
    before = probs.cumsum(dim=-1) - probs  # probability of the tokens ranked above each
    drop = before >= p
    drop[..., 0] = False
    return scores.masked_fill(drop.scatter(-1, order, drop), float("-inf"))


@dataclass(frozen=True)
class Step:
    """One decoding step: the new tokens (B,), the scores they came from (B, V), and
    which sequences are finished (B,) after it. Finished sequences get the pad token."""

    tokens: Tensor
    scores: Tensor
    finished: Tensor


def stream(
    model: DecoderLM,
    input_ids: Tensor,
    max_new_tokens: int,
    *,
    sampling: Sampling | None = None,
    eos_token_id: int | Sequence[int] | None = None,
    generator: torch.Generator | None = None,
    attention_mask: Tensor | None = None,
) -> Iterator[Step]:
    """Decode step by step, yielding each ``Step``; stops when every sequence is finished.

    The model runs in eval mode (no dropout) and is put back as it was afterwards; a
    model left in eval mode keeps the faster weight layout of
    ``DecoderLM.use_decoding_layout`` (same values), one returned to training does not.
    """
    sampling = sampling or Sampling()
    ids, mask = _check_inputs(model, input_ids, max_new_tokens, attention_mask)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise InputError(
            f"generator must be a torch.Generator or None, got {generator!r}; for a seed, pass "
            f"torch.Generator().manual_seed(42) (generate_text takes seed=42)"
        )
    if max_new_tokens == 0:
        return
    decoding = _Decoding(model, ids, mask, max_new_tokens, sampling, _eos_tensor(eos_token_id, ids.device, getattr(model.config, "vocab_size", None)), generator)
    was_training = model.training
    model.eval()
    layout = getattr(model, "use_decoding_layout", None)
    if layout is not None:
        layout()  # kept while the model stays in eval mode; train() undoes it
    try:
        scores = decoding.prefill()
        for step in range(max_new_tokens):
            tokens, finished = decoding.choose(scores)
            yield Step(tokens, scores, finished)
            if step == max_new_tokens - 1 or decoding.all_finished():
                return
            scores = decoding.advance(tokens)
    finally:
        model.train(was_training)


class _Decoding:
    """One batch being decoded: its cache, mask, positions, seen tokens, finished rows."""

    def __init__(
        self,
        model: DecoderLM,
        ids: Tensor,
        mask: Tensor | None,
        max_new_tokens: int,
        sampling: Sampling,
        eos: Tensor | None,
        generator: torch.Generator | None,
    ) -> None:
        self.model, self.ids, self.sampling, self.eos, self.generator = model, ids, sampling, eos, generator
        batch, self.prompt_len = ids.shape
        self.pad = int(eos[0]) if eos is not None else 0
        self.finished = torch.zeros(batch, dtype=torch.bool, device=ids.device)
        self.cache = model.new_cache(self.prompt_len + max_new_tokens)
        self.mask = self.full_mask = self.positions = None
        if mask is not None:  # left padding: positions count real tokens only
            self.mask = mask
            self.full_mask = torch.ones(batch, self.prompt_len + max_new_tokens, dtype=torch.bool, device=ids.device)
            self.full_mask[:, : self.prompt_len] = mask
            self.positions = (mask.long().cumsum(-1) - 1).clamp(min=0)  # (B, S)
        self.seen = None
        if sampling.repetition_penalty != 1.0:  # the tokens each row holds, padding excluded
            real = mask.float() if mask is not None else torch.ones_like(ids, dtype=torch.float)
            counts = torch.zeros(batch, model.config.vocab_size, device=ids.device)
            self.seen = counts.scatter_add_(1, ids, real) > 0

    @torch.inference_mode()
    def prefill(self) -> Tensor:
        """Run the prompt, filling the cache; the scores (B, V) for the first new token."""
        out = self.model(self.ids, attention_mask=self.mask, positions=self.positions, cache=self.cache, last_only=True)
        return out[:, -1]

    @torch.inference_mode()
    def choose(self, scores: Tensor) -> tuple[Tensor, Tensor]:
        tokens = self.sampling.choose(scores, self.seen, self.generator)  # (B,)
        if self.eos is not None:
            tokens = tokens.masked_fill(self.finished, self.pad)
            self.finished = self.finished | torch.isin(tokens, self.eos)
        return tokens, self.finished

    def all_finished(self) -> bool:
        return self.eos is not None and bool(self.finished.all())

    @torch.inference_mode()
    def advance(self, tokens: Tensor) -> Tensor:
        """Feed the new tokens (B,) through the model; the scores (B, V) for the next ones."""
        if self.seen is not None:
            self.seen.scatter_(1, tokens[:, None], True)
        step_mask = None
        if self.full_mask is not None:  # set with positions, for padded batches
            self.positions = self.positions[:, -1:] + 1  # (B, 1)
            step_mask = self.full_mask[:, : self.cache.length + 1]
        out = self.model(tokens[:, None], attention_mask=step_mask, positions=self.positions, cache=self.cache, last_only=True)
        return out[:, -1]


def generate(
    model: DecoderLM,
    input_ids: Tensor,
    max_new_tokens: int,
    *,
    do_sample: bool = False,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    repetition_penalty: float = 1.0,
    eos_token_id: int | Sequence[int] | None = None,
    generator: torch.Generator | None = None,
    attention_mask: Tensor | None = None,
    on_token: Callable[[Tensor], object] | None = None,
) -> Tensor:
    """Prompt ids (B, S) followed by up to ``max_new_tokens`` new ones: (B, S + T).

    Greedy unless ``do_sample``; then ``temperature``, ``top_k`` and ``top_p`` shape the
    distribution and ``generator`` makes it reproducible. A sequence stops at
    ``eos_token_id`` (one id or several) and is padded with the (first) EOS id while the
    others go on; T is shorter than ``max_new_tokens`` when all stop early. Batch
    prompts of different lengths by left padding with ``attention_mask`` (B, S), 1 for
    tokens, 0 for padding. ``on_token(tokens)`` receives each step's new ids (B,) as
    they come. A 1-D prompt gives a 1-D result.
    """
    sampling = Sampling(do_sample, temperature, top_k, top_p, repetition_penalty)
    single = isinstance(input_ids, Tensor) and input_ids.dim() == 1
    if single:
        input_ids = input_ids[None]
        attention_mask = attention_mask[None] if attention_mask is not None and attention_mask.dim() == 1 else attention_mask
    new: list[Tensor] = []
    for step in stream(
        model,
        input_ids,
        max_new_tokens,
        sampling=sampling,
        eos_token_id=eos_token_id,
        generator=generator,
        attention_mask=attention_mask,
    ):
        new.append(step.tokens)
        if on_token is not None:
            on_token(step.tokens)
    prompt = input_ids.to(_device(model))
    out = torch.cat([prompt, torch.stack(new, dim=1)], dim=1) if new else prompt
    return out[0] if single else out


def generate_text(
    model_or_path: nn.Module | str | os.PathLike[str],
    prompt: str,
    *,
    max_new_tokens: int = 50,
    do_sample: bool = False,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    repetition_penalty: float = 1.0,
    seed: int | None = None,
    on_text: Callable[[str], object] | None = None,
    tokenizer: Tokenizer | str | os.PathLike[str] | None = None,
    stop_at_eot: bool = True,
) -> str:
    """Continue ``prompt`` and return the new text (without the prompt).

    ``model_or_path``: a model, a Hugging Face GPT-2 folder or a zoo checkpoint.
    ``tokenizer``: defaults to the folder's own ``vocab.json``/``merges.txt`` when it
    has them, else GPT-2's. ``on_text(piece)`` streams the text as it is generated
    (whole characters only). ``seed`` makes sampling reproducible. An empty prompt
    starts from ``<|endoftext|>``, as GPT-2's unconditional samples do; generation
    stops at ``<|endoftext|>`` unless ``stop_at_eot`` is false.
    """
    from zoo.text import Tokenizer
    from zoo.text import tokenizer as load_tokenizer

    if not isinstance(prompt, str):
        raise InputError(f"prompt must be a str, got {type(prompt).__name__}; pass '' to start from <|endoftext|>")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise InputError(f"seed must be an integer or None, got {seed!r}")
    model = load_model(model_or_path)
    if tokenizer is None:
        tokenizer = _folder_tokenizer(model_or_path) or load_tokenizer("gpt2")
    elif not isinstance(tokenizer, Tokenizer):
        tokenizer = load_tokenizer(tokenizer)
    vocab = model.config.vocab_size
    if tokenizer.vocab_size > vocab:
        raise ConfigError(
            f"the tokenizer {tokenizer.name!r} has {tokenizer.vocab_size} tokens but the model's "
            f"vocabulary has {vocab}; pass a tokenizer that matches the model (tokenizer=...)"
        )
    ids = tokenizer.encode(prompt)
    if not ids:
        if tokenizer.eot_token_id is None:
            raise InputError("the prompt is empty and the tokenizer has no <|endoftext|> to start from; give a prompt")
        ids = [tokenizer.eot_token_id]
    device = _device(model)
    generator = torch.Generator(device=device).manual_seed(seed) if seed is not None else None
    eot = tokenizer.eot_token_id if stop_at_eot else None
    decoder = tokenizer.stream()
    pieces: list[str] = []

    def emit(piece: str) -> None:
        if piece:
            pieces.append(piece)
            if on_text is not None:
                on_text(piece)

    def on_token(tokens: Tensor) -> None:
        token = int(tokens[0])
        if token != eot:
            emit(decoder.push(token))

    generate(
        model,
        torch.tensor([ids], device=device),
        max_new_tokens,
        do_sample=do_sample,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        repetition_penalty=repetition_penalty,
        eos_token_id=eot,
        generator=generator,
        on_token=on_token,
    )
    emit(decoder.flush())
    return "".join(pieces)


def load_model(model_or_path: nn.Module | str | os.PathLike[str]) -> DecoderLM:
    """A model as given, or loaded from a Hugging Face folder or a zoo checkpoint."""
    if isinstance(model_or_path, nn.Module):
        return model_or_path  # type: ignore[return-value]
    if not isinstance(model_or_path, (str, os.PathLike)) or not str(model_or_path):
        raise InputError(
            f"model_or_path must be a model, a Hugging Face folder or a zoo checkpoint path, "
            f"got {type(model_or_path).__name__} {model_or_path!r}"
        )
    path = Path(model_or_path)
    if (path / "config.json").is_file():
        from zoo.interop.hf import from_hf

        return from_hf(path)
    from zoo.checkpoint import load

    return load(path)


def _folder_tokenizer(model_or_path: object) -> Tokenizer | None:
    if isinstance(model_or_path, (str, os.PathLike)):
        folder = Path(model_or_path)
        if (folder / "vocab.json").is_file() and (folder / "merges.txt").is_file():
            from zoo.text import tokenizer

            return tokenizer(folder)
    return None


def _device(model: nn.Module) -> torch.device:
    param = next(model.parameters(), None)
    return param.device if param is not None else torch.device("cpu")


def _eos_tensor(eos_token_id: int | Sequence[int] | None, device: torch.device, vocab: int | None) -> Tensor | None:
    if eos_token_id is None:
        return None
    given = eos_token_id.tolist() if isinstance(eos_token_id, Tensor) else eos_token_id
    ids = [given] if isinstance(given, int) else list(given) if isinstance(given, Sequence) else [given]
    if not ids or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise InputError(f"eos_token_id must be a token id, a sequence of them, or None; got {eos_token_id!r}")
    if vocab is not None and not all(0 <= i < vocab for i in ids):
        raise InputError(
            f"eos_token_id {eos_token_id!r} is outside the model's vocabulary [0, {vocab}); "
            f"pass the end-of-text id of the tokenizer that matches the model"
        )
    return torch.tensor(ids, device=device)


def _check_inputs(
    model: DecoderLM, input_ids: Tensor, max_new_tokens: int, attention_mask: Tensor | None
) -> tuple[Tensor, Tensor | None]:
    """Validated prompt ids (B, S) and mask on the model's device; the mask is None
    when there is no padding."""
    if not isinstance(input_ids, Tensor) or input_ids.dim() != 2 or input_ids.is_floating_point() or input_ids.is_complex():
        shape = tuple(input_ids.shape) if isinstance(input_ids, Tensor) else type(input_ids).__name__
        raise InputError(f"input_ids must be an integer tensor of shape (batch, seq), got {shape}")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise InputError(f"max_new_tokens must be an integer >= 0, got {max_new_tokens!r}")
    prompt_len = input_ids.shape[1]
    if prompt_len == 0:
        raise InputError("the prompt is empty; give at least one token (GPT-2 starts from <|endoftext|>, 50256)")
    limit = getattr(getattr(model, "position", None), "max_positions", None)
    if limit is not None and prompt_len + max_new_tokens > limit:
        name = model.config.position.name
        if prompt_len >= limit:
            fix = f"the prompt alone has {prompt_len} tokens; keep its last {limit - 1} or fewer"
        else:
            fix = f"at most {limit - prompt_len} new tokens fit after this prompt"
        raise ConfigError(
            f"a prompt of {prompt_len} tokens plus max_new_tokens={max_new_tokens} needs "
            f"{prompt_len + max_new_tokens} positions, but position {name!r} holds "
            f"max_seq_len={limit}: {fix}"
        )
    device = _device(model)
    config = getattr(model, "config", None)
    if config is not None:  # the KV cache for every position, before it is allocated
        itemsize = next(model.parameters()).element_size()
        cache = 2 * config.n_layers * config.d_model * input_ids.shape[0] * (prompt_len + max_new_tokens) * itemsize
        require(
            cache, device, f"generating max_new_tokens={max_new_tokens:,} (its KV cache)", InputError,
            fix="ask for fewer new tokens or a shorter batch",
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

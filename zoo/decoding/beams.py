"""Beam search, as transformers' ``generate(num_beams=...)`` runs it, token for token.

Each prompt keeps ``num_beams`` running sequences (beams) and ``num_beams`` finished
ones. At every step each beam's next-token log-probabilities (after the repetition
penalty and ``min_new_tokens``; when sampling, temperature, top-k and top-p) are added
to its score, and the best ``W = max(2, 1 + number of EOS ids) * num_beams``
continuations over all beams are taken (sampled without replacement when
``do_sample``). Those that end (an EOS id, a stop string, the last allowed token) and
rank among the first ``num_beams`` become finished candidates, scored by their sum of
log-probabilities over ``new tokens ** length_penalty``; the best ``num_beams``
unfinished ones run on. A prompt is done when no running beam can beat its worst
finished one (judged at the current length, or with ``early_stopping="never"`` and a
positive ``length_penalty`` at the longest), or, with ``early_stopping=True``, as soon
as it has ``num_beams`` finished sequences; decoding stops when every prompt is done.
The best ``num_return_sequences`` finished sequences of each prompt are returned.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from zoo.decoding.sampling import Sampling, repetition_penalty, top_k, top_p
from zoo.decoding.stopping import StopStrings
from zoo.errors import InputError

__all__ = ["Beams", "beam_search", "check_early_stopping"]

DROP = -1.0e9  # the score that takes a candidate out of the running, as transformers adds it


def check_early_stopping(value: object) -> None:
    """``InputError`` unless ``value`` is True, False, ``"never"`` or None (not given)."""
    if not (value is None or isinstance(value, bool) or value == "never"):
        raise InputError(f"early_stopping must be True, False, None or 'never', got {value!r}")


@dataclass(frozen=True)
class Beams:
    """The settings of one beam search."""

    num_beams: int
    length_penalty: float = 1.0
    early_stopping: bool | str = False
    num_return_sequences: int = 1


class _Search:
    """The running and finished beams of a batch of prompts, (B, K, S + T) each."""

    def __init__(self, ids: Tensor, beams: Beams, new_tokens: int, fill: int) -> None:
        batch, self.prompt_len = ids.shape
        k = beams.num_beams
        self.beams, self.batch, self.new_tokens = beams, batch, new_tokens
        self.running = ids.new_full((batch, k, self.prompt_len + new_tokens), fill)
        self.running[:, :, : self.prompt_len] = ids[:, None]
        self.scores = torch.zeros(batch, k, device=ids.device)
        self.scores[:, 1:] = DROP  # the beams start as one: only the first continues at the first step
        self.done_seq = self.running.clone()
        self.done_scores = torch.full((batch, k), DROP, device=ids.device)
        self.done = torch.zeros(batch, k, dtype=torch.bool, device=ids.device)
        self.done_len = torch.zeros(batch, k, dtype=torch.long, device=ids.device)
        self.improvable = torch.ones(batch, 1, dtype=torch.bool, device=ids.device)

    def candidates(
        self, totals: Tensor, width: int, sample: bool, generator: torch.Generator | None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """The best ``width`` continuations of (B, K * V) ``totals``: scores, beams, tokens."""
        if sample:
            picked = torch.multinomial(torch.softmax(totals, dim=-1), num_samples=width, generator=generator)
            values, order = totals.gather(1, picked).sort(dim=-1, descending=True)
            picked = picked.gather(-1, order)
        else:
            values, picked = torch.topk(totals, k=width)
        vocab = totals.shape[-1] // self.beams.num_beams
        return values, picked // vocab, picked % vocab

    def step(self, values: Tensor, beam: Tensor, tokens: Tensor, ends: Tensor, step: int) -> Tensor:
        """Take a step's candidates; the rows (B * K,) each running beam continues from."""
        k, cur = self.beams.num_beams, self.prompt_len + step
        seqs = self.running.gather(1, beam[:, :, None].expand(-1, -1, self.running.shape[-1])).clone()
        seqs[:, :, cur] = tokens
        running = values + ends.float() * DROP
        keep = torch.topk(running, k=k).indices
        self.running = seqs.gather(1, keep[:, :, None].expand(-1, -1, seqs.shape[-1]))
        self.scores = running.gather(1, keep)
        parents = beam.gather(1, keep) + torch.arange(self.batch, device=beam.device)[:, None] * k
        self._finish(seqs, values, ends, step)
        self._judge(step + 1)
        return parents.flatten()

    def _finish(self, seqs: Tensor, values: Tensor, ends: Tensor, step: int) -> None:
        k, beams = self.beams.num_beams, self.beams
        just = ends.clone()
        just[:, k:] = False  # only the first num_beams candidates may finish
        scored = values / ((step + 1) ** beams.length_penalty)
        full = self.done.all(dim=-1, keepdim=True) & (beams.early_stopping is True)
        scored += full.float() * DROP
        scored += (~self.improvable).float() * DROP
        scored += (~just) * DROP
        merged = torch.cat((self.done_scores, scored), dim=1)
        best = torch.topk(merged, k=k).indices
        self.done_scores = merged.gather(1, best)
        all_seqs = torch.cat((self.done_seq, seqs), dim=1)
        self.done_seq = all_seqs.gather(1, best[:, :, None].expand(-1, -1, all_seqs.shape[-1]))
        self.done = torch.cat((self.done, just), dim=1).gather(1, best)
        lengths = torch.cat((self.done_len, torch.full_like(just, step + 1, dtype=torch.long)), dim=1)
        self.done_len = lengths.gather(1, best)

    def _judge(self, generated: int) -> None:
        """Whether each prompt's running beams could still beat its worst finished one."""
        beams = self.beams
        if beams.early_stopping == "never" and beams.length_penalty > 0.0:
            length = self.new_tokens
        else:
            length = generated
        best = self.scores[:, :1] / (length**beams.length_penalty)
        worst = torch.where(self.done, self.done_scores.min(dim=1, keepdim=True).values, DROP)
        self.improvable = self.improvable & (best > worst).any(dim=-1, keepdim=True)

    def going(self, ends: Tensor) -> bool:
        closed = bool(self.done.all()) and self.beams.early_stopping is True
        return bool(self.improvable.any()) and not closed and not bool(ends.all())

    def result(self) -> Tensor:
        n = self.beams.num_return_sequences
        length = int(self.done_len[:, :n].max())
        return self.done_seq[:, :n, : self.prompt_len + length].flatten(0, 1)


def beam_search(
    decoding: object,
    ids: Tensor,
    new_tokens: int,
    beams: Beams,
    sampling: Sampling,
    *,
    eos: Tensor | None,
    fill: int,
    min_new_tokens: int = 0,
    stop: StopStrings | None = None,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Beam search from prompts ``ids`` (B, S), each repeated ``num_beams`` times in the
    rows of ``decoding`` (a ``zoo.decoding.loop._Decoding``: its cache, mask and
    positions); returns (B * num_return_sequences, S + T)."""
    search = _Search(ids, beams, new_tokens, fill)
    width = max(2, 1 + (eos.numel() if eos is not None else 0)) * beams.num_beams
    scores = decoding.prefill()  # type: ignore[attr-defined]
    for step in range(new_tokens):
        logprobs = _processed(torch.log_softmax(scores.float(), dim=-1), search, sampling, eos, step, min_new_tokens)
        totals = (logprobs.view(search.batch, beams.num_beams, -1) + search.scores[:, :, None]).flatten(1)
        values, beam, tokens = search.candidates(totals, width, sampling.do_sample, generator)
        ends = torch.isin(tokens, eos) if eos is not None else torch.zeros_like(tokens, dtype=torch.bool)
        if step == new_tokens - 1:
            ends = torch.ones_like(ends)
        elif stop is not None:
            ends = ends | _stop_hits(search, beam, tokens, step, stop)
        parents = search.step(values, beam, tokens, ends, step)
        if not search.going(ends):
            break
        decoding.cache.reorder(parents)  # type: ignore[attr-defined]
        scores = decoding.advance(search.running[:, :, search.prompt_len + step].flatten())  # type: ignore[attr-defined]
    return search.result()


def _processed(
    logprobs: Tensor, search: _Search, sampling: Sampling, eos: Tensor | None, step: int, min_new_tokens: int
) -> Tensor:
    """transformers' processors on (B * K, V) log-probabilities, in its order."""
    if sampling.repetition_penalty != 1.0:
        seqs = search.running.flatten(0, 1)[:, : search.prompt_len + step]
        seen = torch.zeros_like(logprobs, dtype=torch.bool).scatter_(1, seqs, True)
        logprobs = repetition_penalty(logprobs, seen, sampling.repetition_penalty)
    if eos is not None and step < min_new_tokens:
        logprobs = logprobs.index_fill(-1, eos, float("-inf"))
    if sampling.do_sample:
        if sampling.temperature != 1.0:
            logprobs = logprobs / sampling.temperature
        if sampling.top_k is not None:
            logprobs = top_k(logprobs, sampling.top_k)
        if sampling.top_p is not None and sampling.top_p < 1.0:
            logprobs = top_p(logprobs, sampling.top_p)
    return logprobs


def _stop_hits(search: _Search, beam: Tensor, tokens: Tensor, step: int, stop: StopStrings) -> Tensor:
    """(B, W): which candidates complete a stop string."""
    end = search.prompt_len + step
    hits = torch.zeros_like(tokens, dtype=torch.bool)
    for b in range(tokens.shape[0]):
        for w in range(tokens.shape[1]):
            history = search.running[b, int(beam[b, w]), :end].tolist()
            hits[b, w] = stop.ends([*history, int(tokens[b, w])])
    return hits

"""How the next token is chosen from the model's scores: greedy or sampled, with
temperature, top-k, top-p (nucleus) and CTRL's repetition penalty."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from zoo.errors import InputError, check_flag

__all__ = ["Sampling", "check_scores", "repetition_penalty", "top_k", "top_p"]


@dataclass(frozen=True)
class Sampling:
    """How the next token is chosen from the model's scores.

    Greedy (``do_sample=False``) takes the highest score; ``repetition_penalty`` applies
    to both, ``temperature``, ``top_k`` and ``top_p`` only to sampling. Scores may be
    logits or log-probabilities (a ``log_softmax`` head): they differ by a constant per
    row, which softmax, top-k and top-p ignore; the repetition penalty acts on the
    scores as given.

    Every setting must be a finite number (``InputError`` otherwise). Extreme ones are
    exact in the limit: the penalty and the temperature are applied in float64 to
    scores shifted so that each row's best is 0, so ``temperature=1e-40`` samples only
    among the highest-scoring tokens (greedy, ties shared) and ``repetition_penalty=1e-300``
    puts the best repeated token first, instead of overflowing into NaN. Scores that
    hold NaN or +inf (a model with non-finite weights), or a row with no finite score,
    are an ``InputError`` naming the row, never a token drawn from garbage.
    """

    do_sample: bool = False
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    repetition_penalty: float = 1.0

    def __post_init__(self) -> None:
        check_flag(self.do_sample, "do_sample")
        for name in ("temperature", "top_p", "repetition_penalty"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise InputError(f"{name} must be a number, got {value!r}")
            try:
                finite = value is None or math.isfinite(value)
            except OverflowError:  # an int too large for a float
                finite = False
            if not finite:
                raise InputError(f"{name} must be a finite number, got {value!r}")
        if not self.temperature > 0:
            raise InputError(
                f"temperature must be > 0, got {self.temperature}; use do_sample=False for greedy decoding"
            )
        if self.top_k is not None and (
            isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 1
        ):
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
        check_scores(scores)
        penalise = seen is not None and self.repetition_penalty != 1.0
        warm = self.do_sample and self.temperature != 1.0
        if penalise or warm:  # float64, each row's best at 0: no overflow to inf or NaN
            wide = scores.double()
            if penalise:
                assert seen is not None
                wide = repetition_penalty(wide, seen, self.repetition_penalty)
            wide = wide - wide.amax(dim=-1, keepdim=True)
            if warm:
                wide = wide / self.temperature
            scores = wide.float()
        if not self.do_sample:
            return scores
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
        plain_greedy = not self.do_sample and (seen is None or self.repetition_penalty == 1.0)
        if plain_greedy and scores.device.type in NAN_FIRST_ARGMAX:
            # The chosen score alone tells a bad row (argmax picks NaN over any number,
            # +inf over finite ones, and a row without a finite value gives one that is
            # not finite): one gather instead of check_scores' passes over (B, V).
            tokens = scores.argmax(dim=-1)
            refuse_rows(~torch.isfinite(scores.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)))
            return tokens
        if not self.do_sample:
            return self.scores(scores, seen).argmax(dim=-1)
        probs = self.probabilities(scores, seen)
        return torch.multinomial(probs, num_samples=1, generator=generator).squeeze(1)


#: Devices whose argmax returns a NaN's index when a row holds one (MPS skips NaN:
#: pytorch issue 130295), so that greedy decoding need check the chosen score only.
NAN_FIRST_ARGMAX = frozenset({"cpu", "cuda"})


def check_scores(scores: Tensor) -> None:
    """``InputError`` when a row of (B, V) scores holds NaN or +inf or nothing finite."""
    refuse_rows((~(scores < math.inf)).any(dim=-1) | ~(scores > -math.inf).any(dim=-1))


def refuse_rows(bad: Tensor) -> None:
    """``InputError`` naming the rows ``bad`` (B,) marks: scores not finite."""
    if bool(bad.any()):
        rows = bad.nonzero().flatten().tolist()
        raise InputError(
            f"the model's scores for row(s) {rows[:8]} hold NaN or infinity, or no finite value: its weights "
            f"are not finite (or overflow in this dtype); check the checkpoint (`zoo inspect`), or run in float32"
        )


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

"""Stop strings: a sequence ends when its text completes one, as transformers'
``stop_strings`` (its ``StopStringCriteria``) decides.

A stop string counts when it ends inside the newest token: the newest token's text
begins with the end of the stop string (``stop[-i:] == token[:i]``, i >= 1) and the
text of the tokens before it ends with the rest (``stop[:-i]``); the prompt counts as
text before. A stop string that lies wholly in earlier tokens does not stop a sequence
(it would have stopped it then). Tokens are read as ``tokenizer.token_strings()`` gives
them: each token's text as it reads inside a text.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from zoo.errors import InputError

__all__ = ["StopStrings", "TokenStrings"]


class TokenStrings(Protocol):
    """What stop strings need of a tokenizer (every ``zoo.text.Tokenizer`` has it)."""

    def token_strings(self) -> list[str]: ...


class StopStrings:
    """The stop strings of one ``generate`` call, matched against each sequence's tokens."""

    def __init__(self, stop_strings: str | Sequence[str], tokenizer: object) -> None:
        strings = [stop_strings] if isinstance(stop_strings, str) else stop_strings
        if not isinstance(strings, Sequence) or not strings or not all(isinstance(s, str) and s for s in strings):
            raise InputError(f"stop_strings must be a non-empty string or a list of them, got {stop_strings!r}")
        if tokenizer is None or not callable(getattr(tokenizer, "token_strings", None)):
            raise InputError(
                "stop_strings need the tokenizer, to read the tokens' text: pass tokenizer=zoo.tokenizer(...) "
                "(as transformers' generate(..., stop_strings=..., tokenizer=...))"
            )
        self.strings = list(dict.fromkeys(strings))
        self.tokens: list[str] = tokenizer.token_strings()  # type: ignore[attr-defined]
        self.longest = max(map(len, self.strings))

    def text(self, token: int) -> str:
        return self.tokens[token] if 0 <= token < len(self.tokens) else ""

    def ends(self, ids: Sequence[int]) -> bool:
        """Whether the sequence ``ids`` (prompt and new tokens) has just completed a stop string."""
        if not ids:
            return False
        last = self.text(ids[-1])
        before, at = "", len(ids) - 1
        while len(before) < self.longest and at > 0:  # enough text before the newest token
            at -= 1
            before = self.text(ids[at]) + before
        for stop in self.strings:
            for i in range(1, min(len(stop), len(last)) + 1):
                if stop[-i:] == last[:i] and before.endswith(stop[:-i]) and len(before) >= len(stop) - i:
                    return True
        return False

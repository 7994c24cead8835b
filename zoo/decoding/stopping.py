"""Stop strings: a sequence ends when its text completes one, as transformers'
``stop_strings`` (its ``StopStringCriteria``) decides.

A stop string counts when it ends inside the newest token: anywhere in it (``'e'``
inside ``' disorder'``), its start in the newest token or in the tokens before it (the
prompt counts as text before). A stop string that lies wholly in earlier tokens does
not stop a sequence (it would have stopped it then). Tokens are read as
``tokenizer.stop_pieces()`` gives them, transformers' reading: byte-level tokenizers by
their bytes (a stop string may end inside a character that tokens split), the others by
their text. As in transformers, only the last ``len(stop)`` tokens are read (the stop
string's length in bytes where matching is by bytes), and an id without a token ends
the text read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from zoo.errors import InputError

__all__ = ["StopPieces", "StopStrings"]


class StopPieces(Protocol):
    """What stop strings need of a tokenizer (every ``zoo.text.Tokenizer`` has it)."""

    def stop_pieces(self) -> tuple[list[bytes | None], bool]: ...


class StopStrings:
    """The stop strings of one ``generate`` call, matched against each sequence's tokens."""

    def __init__(self, stop_strings: str | Sequence[str], tokenizer: object) -> None:
        strings = [stop_strings] if isinstance(stop_strings, str) else stop_strings
        if not isinstance(strings, Sequence) or not strings or not all(isinstance(s, str) and s for s in strings):
            raise InputError(f"stop_strings must be a non-empty string or a list of them, got {stop_strings!r}")
        if tokenizer is None or not callable(getattr(tokenizer, "stop_pieces", None)):
            raise InputError(
                "stop_strings need the tokenizer, to read the tokens' text: pass tokenizer=zoo.tokenizer(...) "
                "(as transformers' generate(..., stop_strings=..., tokenizer=...))"
            )
        self.strings = list(dict.fromkeys(strings))
        self.targets = [s.encode("utf-8", errors="surrogatepass") for s in self.strings]
        pieces, bytewise = tokenizer.stop_pieces()  # type: ignore[attr-defined]
        self.pieces: list[bytes | None] = pieces
        self.window = max(map(len, self.targets if bytewise else self.strings))
        units = [len(s[-1].encode("utf-8", errors="surrogatepass")) if not bytewise else 1 for s in self.strings]
        if not any(map(self._can_end, self.targets, units)):
            raise InputError(
                f"no token of the tokenizer can end any of the stop strings {self.strings!r} (their last characters "
                f"are in none of its tokens), so they would never stop generation; pass stop strings written in "
                f"the tokenizer's characters (transformers refuses these too)"
            )

    def _can_end(self, stop: bytes, unit: int) -> bool:
        """Whether some token's piece holds the end of ``stop`` (its last ``unit`` bytes:
        a byte, or a character), what transformers requires of at least one stop string."""
        last = stop[-unit:]
        for piece in self.pieces:
            at = -1 if piece is None else piece.find(last)
            while piece is not None and at >= 0:
                overlap = min(at + unit, len(stop))
                if piece[at + unit - overlap : at + unit] == stop[-overlap:]:
                    return True
                at = piece.find(last, at + 1)
        return False

    def piece(self, token: int) -> bytes | None:
        return self.pieces[token] if 0 <= token < len(self.pieces) else None

    def ends(self, ids: Sequence[int]) -> bool:
        """Whether the sequence ``ids`` (prompt and new tokens) has just completed a stop
        string: one that ends past the start of the newest token's bytes."""
        tail: list[bytes] = []
        for token in reversed(ids[-self.window :]):
            piece = self.piece(token)
            if piece is None:  # no token: nothing before it is read
                break
            tail.append(piece)
        if not tail:
            return False
        text = b"".join(reversed(tail))
        start = len(text) - len(tail[0])  # where the newest token begins
        return any(text.find(stop, max(0, start - len(stop) + 1)) >= 0 for stop in self.targets)

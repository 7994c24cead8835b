"""nanoGPT's character-level tokenizer: the ``meta.pkl`` its ``prepare.py`` writes for
``shakespeare_char``, ``{"vocab_size": 65, "stoi": {char: id}, "itos": {id: char}}``,
read without unpickling any object (``zoo.interop.nanogpt.read_meta``). The text is
encoded character by character (``[stoi[c] for c in text]``) and decoded by joining
``itos``, as nanoGPT's ``sample.py`` does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from zoo.errors import InputError, InteropError, check_flag, printable, quoted
from zoo.files import read_bytes
from zoo.interop.nanogpt import META_FILE, META_LIMIT, read_meta
from zoo.text.tokenizers import UNKNOWN, Tokenizer, checked_ids, checked_text

__all__ = ["META_FILE", "CharTokenizer", "meta_tokenizer"]


class CharTokenizer(Tokenizer):
    """One id per character, from nanoGPT's ``stoi`` and ``itos``; no special tokens."""

    def __init__(self, stoi: Mapping[str, int], itos: Mapping[int, str], name: str) -> None:
        self.stoi, self.itos, self.name = dict(stoi), dict(itos), name

    @property
    def vocab_size(self) -> int:
        return len(self.itos)

    def encode(self, text: str) -> list[int]:
        text = checked_text(text)
        missing = sorted(set(text) - set(self.stoi))
        if missing:
            raise InputError(
                f"{quoted(''.join(missing[:10]))} {'is' if len(missing) == 1 else 'are'} not in the "
                f"{self.vocab_size} characters of {printable(self.name)}; write the text with those characters"
            )
        return [self.stoi[char] for char in text]

    def decode(self, ids: Iterable[int], *, skip_special_tokens: bool = False) -> str:
        check_flag(skip_special_tokens, "skip_special_tokens")  # no character is special
        return "".join(self.itos.get(i, UNKNOWN) for i in checked_ids(ids))

    def token_strings(self) -> list[str]:
        return [self.itos[i] for i in range(self.vocab_size)]


def meta_tokenizer(path: Path) -> CharTokenizer:
    """The tokenizer of the ``meta.pkl`` at ``path``, read bounded and checked."""
    data = read_bytes(path, InteropError, "nanoGPT meta.pkl", limit=META_LIMIT)
    stoi, itos = read_meta(data, str(path))
    return CharTokenizer(stoi, itos, str(path))

"""What a tokenizer is, and its three kinds: ``TiktokenTokenizer`` (GPT-2's byte-level BPE
through tiktoken), ``ByteTokenizer`` (the 256 byte values) and ``HFTokenizer`` (a Hugging
Face ``tokenizer.json``); the checks on the text and ids they take; and streaming decode
(``TextStream``, ``DecodeStream``), text as tokens arrive. ``zoo.text.loading`` makes them
from a name, folder or hub id."""

from __future__ import annotations

import abc
import codecs
import functools
import json
import operator
import re
from collections.abc import Iterable, Sequence
from typing import Any

from zoo.bounds import check_elements
from zoo.errors import InputError, InteropError, check_flag, printable, quoted
from zoo.files import loads

__all__ = ["ByteTokenizer", "DecodeStream", "HFTokenizer", "TextStream", "Tokenizer", "TiktokenTokenizer"]

EOT = "<|endoftext|>"
ID_LIMIT = 1 << 31  # no vocabulary has this many ids: one past it is a mistake, not a token
UNKNOWN = "\ufffd"  # the text of an id the tokenizer has no token for
_SURROGATE = re.compile("[\ud800-\udfff]")
#: Distinct characters of a text whose normalization is measured before encoding it.
GROWTH_PROBES = 10_000
#: Bytes the tokenizers library holds per byte of normalized text: the byte, and its
#: alignment to the original (two 8-byte offsets in a NormalizedString).
NORMALIZED_BYTES = 1 + 16


class Tokenizer(abc.ABC):
    """Text to token ids and back: ``encode(str) -> list[int]``, ``decode(ids) -> str``.

    ``eot_token_id`` is where generation stops (``<|endoftext|>``, 50256 for GPT-2; a
    tokenizer's end-of-sequence token), ``bos_token_id`` what an empty prompt starts
    from (``eot_token_id`` where the tokenizer has no beginning-of-sequence token).
    ``source`` says how to get this tokenizer again (a name, a folder, a hub id).
    """

    name: str
    eot_token_id: int | None = None
    bos_token_id: int | None = None

    @property
    @abc.abstractmethod
    def vocab_size(self) -> int:
        """Number of token ids, special ones included."""

    @abc.abstractmethod
    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``; special tokens written in it become their ids. Text that
        is not a ``str``, or holds a lone surrogate (bytes that were not UTF-8), is an
        ``InputError`` (``checked_text``)."""

    @abc.abstractmethod
    def decode(self, ids: Iterable[int], *, skip_special_tokens: bool = False) -> str:
        """The text of ``ids``; bytes that do not form UTF-8 become U+FFFD.
        ``skip_special_tokens`` leaves out the special tokens (``<|endoftext|>``, ``<s>``),
        as transformers' ``decode(..., skip_special_tokens=True)`` does.

        An id this tokenizer has no token for (one of the rows a model's vocabulary has
        past the tokenizer's: GPT-2's tokenizer has 50,257 tokens, a model padded to
        50,304 rows can pick 50,300) decodes to one U+FFFD, in every tokenizer and in
        ``stream``: shown where it stands, never dropped. What is not a token id at all
        (not a whole number, negative, 2**31 or more) is an ``InputError`` (``checked_ids``).
        """

    @property
    def start_token_id(self) -> int | None:
        """The id an empty prompt starts from (BOS, else end-of-text), or None."""
        return self.bos_token_id if self.bos_token_id is not None else self.eot_token_id

    def settled(self, ids: list[int]) -> str:
        """The part of ``decode(ids)`` that no token after ``ids`` can change: here all of
        it but a trailing U+FFFD (bytes of a character that may still be completed)."""
        return self.decode(ids).rstrip(UNKNOWN)

    def token_strings(self) -> list[str]:
        """Each id's text as it reads inside a text (``decode`` after a prefix, less the
        prefix's text): what stop strings are matched against, as transformers' matching
        of ``stop_strings`` reads its tokens."""
        prefix = self.encode("abcdef")
        base = self.decode(prefix)
        return [self.decode([*prefix, i])[len(base) :] for i in range(self.vocab_size)]

    def stop_pieces(self) -> tuple[list[bytes | None], bool]:
        """What stop strings are matched against, as transformers' ``StopStringCriteria``
        reads a tokenizer: each id's bytes (None for an id without a token), and whether
        matching is by bytes (its window counted in bytes) rather than characters. Here
        each token's text (``token_strings``) by characters; byte-level tokenizers say
        their raw bytes, so a stop string can end inside a character a token splits."""
        return [text.encode("utf-8") for text in self.token_strings()], False

    def stream(self, prefix: Sequence[int] = ()) -> TextStream | DecodeStream:
        """An incremental decoder: feed token ids one by one, get text as it settles; the
        pieces joined (with ``flush``) are always ``decode`` of the ids fed. ``prefix``
        (the prompt's ids) is checked, not decoded: the text is the new tokens' alone, as
        transformers' ``TextStreamer(skip_prompt=True)`` and ``decode(out[:, n:])`` give."""
        checked_ids(prefix)
        return DecodeStream(self)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, vocab_size={self.vocab_size}, eot_token_id={self.eot_token_id})"


class TiktokenTokenizer(Tokenizer):
    """A GPT-2 style byte-level BPE on tiktoken (GPT-2's own, or ``vocab.json`` + ``merges.txt``)."""

    def __init__(self, encoding: Any, name: str) -> None:
        self.encoding = encoding  # a tiktoken.Encoding
        self.name = name
        special = encoding.special_tokens_set
        self.eot_token_id = encoding.encode_single_token(EOT) if EOT in special else None
        self.special_ids = frozenset(encoding.encode_single_token(token) for token in special)

    @property
    def vocab_size(self) -> int:
        return int(self.encoding.n_vocab)

    def encode(self, text: str) -> list[int]:
        ids: list[int] = self.encoding.encode(checked_text(text), allowed_special="all")
        return ids

    def decode(self, ids: Iterable[int], *, skip_special_tokens: bool = False) -> str:
        listed = checked_ids(ids)
        if check_flag(skip_special_tokens, "skip_special_tokens"):
            listed = [i for i in listed if i not in self.special_ids]
        try:
            data = self.encoding.decode_bytes(listed)
        except KeyError:  # an id without a token: each becomes U+FFFD
            data = b"".join(map(self.token_bytes, listed))
        text: str = data.decode("utf-8", errors="replace")
        return text

    def token_bytes(self, token_id: int) -> bytes:
        """The raw bytes of one token (a token may hold part of a UTF-8 character);
        U+FFFD for an id without a token."""
        try:
            raw: bytes = self.encoding.decode_single_token_bytes(checked_id(token_id))
            return raw
        except KeyError:
            return UNKNOWN.encode()

    def stream(self, prefix: Sequence[int] = ()) -> TextStream:
        checked_ids(prefix)  # context only, but checked as decode checks it
        return TextStream(self)

    @functools.cache  # noqa: B019 - tokenizers are few and kept (lru-cached by file)
    def token_strings(self) -> list[str]:
        return [(b"abcdef" + self.token_bytes(i)).decode("utf-8", errors="replace")[6:] for i in range(self.vocab_size)]

    @functools.cache  # noqa: B019 - tokenizers are few and kept (lru-cached by file)
    def stop_pieces(self) -> tuple[list[bytes | None], bool]:
        return [self.token_bytes(i) for i in range(self.vocab_size)], True  # byte-level: each token's raw bytes


class ByteTokenizer(Tokenizer):
    """The 256 byte values of the UTF-8 text as ids 0-255: works for any text, needs
    nothing installed, and is what ``zoo data prepare --tokenizer bytes`` writes."""

    name = "bytes"

    @property
    def vocab_size(self) -> int:
        return 256

    def encode(self, text: str) -> list[int]:
        return list(checked_text(text).encode("utf-8"))

    def decode(self, ids: Iterable[int], *, skip_special_tokens: bool = False) -> str:
        check_flag(skip_special_tokens, "skip_special_tokens")  # no byte is special
        return b"".join(map(self.token_bytes, checked_ids(ids))).decode("utf-8", errors="replace")

    def token_bytes(self, token_id: int) -> bytes:
        """The byte of an id (U+FFFD for an id a larger model vocabulary has past 255)."""
        token_id = checked_id(token_id)
        return bytes([token_id]) if token_id < 256 else UNKNOWN.encode()

    def stream(self, prefix: Sequence[int] = ()) -> TextStream:
        checked_ids(prefix)  # context only, but checked as decode checks it
        return TextStream(self)

    @functools.cache  # noqa: B019 - tokenizers are few and kept (lru-cached by file)
    def token_strings(self) -> list[str]:
        return [(b"abcdef" + self.token_bytes(i)).decode("utf-8", errors="replace")[6:] for i in range(self.vocab_size)]

    @functools.cache  # noqa: B019 - tokenizers are few and kept (lru-cached by file)
    def stop_pieces(self) -> tuple[list[bytes | None], bool]:
        return [self.token_bytes(i) for i in range(self.vocab_size)], True  # byte-level: each token's raw bytes


class HFTokenizer(Tokenizer):
    """A Hugging Face fast tokenizer (``tokenizer.json``) on the ``tokenizers`` library,
    with the special tokens and decoding options of ``tokenizer_config.json``, so ids
    and text are transformers' ``AutoTokenizer``'s."""

    def __init__(self, backend: Any, name: str, settings: dict[str, Any] | None = None) -> None:
        self.backend = backend  # a tokenizers.Tokenizer
        self.name = name
        settings = settings or {}
        # transformers 5 cleans up only where the model is not a BPE (WordPiece's design),
        # unless the tokenizer's config insists (clean-up removes real spaces from BPE text)
        self.clean_up_spaces = bool(settings.get("clean_up_tokenization_spaces", False)) and (
            type(backend.model).__name__ != "BPE"
            or bool(settings.get("clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output", False))
        )
        self.byte_fallback = bool(getattr(backend.model, "byte_fallback", False))
        self.eot_token_id = self._special(settings.get("eos_token"))
        if self.eot_token_id is None:
            self.eot_token_id = backend.token_to_id(EOT)
        self.bos_token_id = self._special(settings.get("bos_token"))
        #: the chat template(s) of tokenizer_config.json or chat_template.jinja, and the special
        #: tokens' text a template reads (bos_token, eos_token, ...), as transformers gives them
        self.chat_template: str | list[Any] | dict[str, Any] | None = settings.get("chat_template")
        self.special_tokens = {
            name: token.get("content") if isinstance(token, dict) else token
            for name in ("bos_token", "eos_token", "unk_token", "pad_token")
            if isinstance(token := settings.get(name), (str, dict))
        }

    def _special(self, token: Any) -> int | None:
        if isinstance(token, dict):
            token = token.get("content")
        return self.backend.token_to_id(token) if isinstance(token, str) else None

    @property
    def vocab_size(self) -> int:
        return int(self.backend.get_vocab_size(with_added_tokens=True))

    def encode(self, text: str) -> list[int]:
        text = checked_text(text)
        self._check_growth(text)
        try:
            return list(self.backend.encode(text, add_special_tokens=True).ids)
        except BaseException as err:  # pyo3's PanicException derives from BaseException alone
            if type(err).__name__ != "PanicException":
                raise
            raise InteropError(
                f"the tokenizer {printable(self.name)} failed inside the tokenizers library on a text of "
                f"{len(text):,} characters ({printable(str(err), 200)}): its tokenizer.json cannot split this text "
                f"(a pre-tokenizer regex that backtracks without end?); fix the file, or pass another --tokenizer"
            ) from None

    def _check_growth(self, text: str) -> None:
        """Refuse a text the tokenizer's normalizer would inflate past free memory, before
        it runs: each distinct character (the first ``GROWTH_PROBES``) is normalized alone,
        and those that grow count with their number of occurrences (a lower bound for a
        normalizer that works character by character, as replacements do)."""
        normalizer = getattr(self.backend, "normalizer", None)
        if normalizer is None or not text:
            return
        check_elements(
            4 * self._growth_factor,
            NORMALIZED_BYTES,
            f"the tokenizer {printable(self.name)}'s normalizer on one character (its replacements chained)",
            "--tokenizer",
            key="",
            error=InteropError,
            fix="its tokenizer.json inflates characters (a sequence of replacements); fix the file, or pass another "
            "--tokenizer",
        )  # measuring one character alone (below) must itself fit
        grown = 0
        for char in list(dict.fromkeys(text))[:GROWTH_PROBES]:
            width = len(normalizer.normalize_str(char).encode("utf-8", errors="replace"))
            if width > 1:
                grown += text.count(char) * width
        check_elements(
            grown, NORMALIZED_BYTES, f"the tokenizer {printable(self.name)}'s normalizer on {len(text):,} characters",
            "--tokenizer", key="", error=InteropError,
            fix="its tokenizer.json inflates characters (a normalizer's replacement); fix the file, pass another "
            "--tokenizer, or a shorter text",
        )  # fmt: skip

    def decode(self, ids: Iterable[int], *, skip_special_tokens: bool = False) -> str:
        text = self._raw_decode(checked_ids(ids), skip_special_tokens)
        return clean_up_tokenization(text) if self.clean_up_spaces else text

    def _raw_decode(self, listed: list[int], skip_special_tokens: bool = False) -> str:
        """The backend's text of ``listed``, before the clean-up of spaces."""
        check_flag(skip_special_tokens, "skip_special_tokens")
        if listed and (max(listed) >= self.vocab_size or not self._contiguous):  # tokenizers drops ids without a token
            return self._decode_around_unknown(listed, skip_special_tokens)
        return str(self.backend.decode(listed, skip_special_tokens=skip_special_tokens))

    @functools.cache  # noqa: B019 - tokenizers are few and kept (lru-cached by file)
    def token_strings(self) -> list[str]:
        """As transformers reads tokens for stop strings: the decoder's text of each token
        after the tokens of ``"abcdef"``, less that prefix."""
        base = [self.backend.id_to_token(i) for i in self.backend.encode("abcdef", add_special_tokens=False).ids]
        decoder = self.backend.decoder
        strings = [""] * self.vocab_size
        for token, index in self.backend.get_vocab(with_added_tokens=True).items():
            if index >= len(strings):
                continue
            text = decoder.decode([*base, token]) if decoder is not None else " ".join([*base, token])
            strings[index] = text[text.index("abcdef") + 6 :] if "abcdef" in text else text
        return strings

    @functools.cache  # noqa: B019 - tokenizers are few and kept (lru-cached by file)
    def stop_pieces(self) -> tuple[list[bytes | None], bool]:
        """As transformers reads them: with a byte-level decoder (GPT-2's) each token's
        bytes (its byte alphabet undone), with byte fallback ``<0xNN>`` its byte, matched
        by bytes; otherwise each token's text (``token_strings``), matched by characters."""
        mode = _matching_mode(self.backend.decoder)
        strings = self.token_strings()
        pieces: list[bytes | None] = [None] * self.vocab_size
        for token, index in self.backend.get_vocab(with_added_tokens=True).items():
            if index >= len(pieces):
                continue
            pieces[index] = strings[index].encode("utf-8")
            if mode == "ByteLevel" and all(char in _BYTE_ALPHABET for char in token):
                pieces[index] = bytes(_BYTE_ALPHABET[char] for char in token)
            elif mode == "ByteFallback" and re.fullmatch("<0x[0-9a-fA-F]{2}>", token):
                pieces[index] = bytes([int(token[3:5], 16)])
        return pieces, mode is not None

    def settled(self, ids: list[int]) -> str:
        """What no later token changes: the text before a trailing run of byte-fallback
        tokens (``<0xE2>``: the run decodes as a whole, each byte U+FFFD if it is not
        UTF-8) less a trailing U+FFFD, and with the clean-up of spaces, only up to the
        last two characters it never touches (it cannot act across them)."""
        end = len(ids)
        if self.byte_fallback:
            while end and _BYTE_TOKEN.fullmatch(self.backend.id_to_token(ids[end - 1]) or ""):
                end -= 1
        text = self._raw_decode(ids[:end]).rstrip(UNKNOWN)
        if not self.clean_up_spaces:
            return text
        cut = next((j for j in range(len(text) - 1, 0, -1) if _UNTOUCHED(text[j - 1]) and _UNTOUCHED(text[j])), 0)
        return clean_up_tokenization(text[:cut])

    @functools.cached_property
    def _growth_factor(self) -> int:
        """An upper bound of the bytes the normalizer makes of one byte, read from its JSON
        (replacements multiply along a sequence); 1 for a part it cannot bound (measured)."""
        try:
            state = bytes(self.backend.normalizer.__getstate__()).decode("utf-8")
        except Exception:  # noqa: BLE001 - a library without the normalizer's state: measured as before
            return 1
        return _growth(loads(state, InteropError, f"the tokenizer {printable(self.name)}'s normalizer"))

    @functools.cached_property
    def _contiguous(self) -> bool:
        """Whether every id below ``vocab_size`` has a token (a vocabulary may skip some)."""
        ids = self.backend.get_vocab(with_added_tokens=True).values()
        return len(ids) == self.vocab_size and max(ids, default=-1) == self.vocab_size - 1

    def _decode_around_unknown(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        """The runs of ids with a token decoded as usual, each id without one as U+FFFD."""
        pieces, run = [], []
        for token_id in ids:
            if self.backend.id_to_token(token_id) is not None:
                run.append(token_id)
                continue
            pieces += [str(self.backend.decode(run, skip_special_tokens=skip_special_tokens)) if run else "", UNKNOWN]
            run = []
        return "".join(pieces) + (str(self.backend.decode(run, skip_special_tokens=skip_special_tokens)) if run else "")


def checked_text(text: object) -> str:
    """``text`` if a tokenizer can encode it: a ``str`` without lone surrogates, which is
    what bytes that are not UTF-8 become on a command line (``'\\udcff'``), and which no
    tokenizer spells the same way (tiktoken would encode U+FFFD, the byte tokenizer fail)."""
    if not isinstance(text, str):
        fix = "decode it first: data.decode('utf-8')" if isinstance(text, (bytes, bytearray)) else "pass a str"
        raise InputError(f"a tokenizer encodes text (a str), got {type(text).__name__} {quoted(text, 40)}; {fix}")
    found = None if text.isascii() else _SURROGATE.search(text)  # ASCII, the usual case: no scan
    if found:
        raise InputError(
            f"the text holds {quoted(found.group())} at character {found.start()}: a lone surrogate, which is "
            f"what bytes that are not UTF-8 become (a command line or file in another encoding); give the text "
            f"as UTF-8 (for --prompt, a UTF-8 terminal and locale such as LANG=C.UTF-8), or replace them with "
            f"text.encode('utf-8', 'surrogateescape').decode('utf-8', 'replace')"
        )
    return text


def checked_id(token_id: object) -> int:
    """``token_id`` as an ``int`` if it is a token id: a whole number (not a bool) in
    [0, 2**31); an ``InputError`` naming it otherwise."""
    if isinstance(token_id, bool):
        raise InputError(f"token ids are whole numbers, got {token_id!r}; pass int ids, e.g. from encode()")
    try:
        value = operator.index(token_id)  # type: ignore[arg-type]
    except TypeError:
        raise InputError(
            f"token ids are whole numbers, got {type(token_id).__name__} {quoted(token_id, 40)}; pass a list of "
            f"int ids (a 1-D tensor's .tolist()), e.g. what encode() returns"
        ) from None
    if not 0 <= value < ID_LIMIT:
        raise InputError(
            f"{value} is not a token id: ids are whole numbers from 0 to the vocabulary's size (under 2**31); "
            f"pass the ids a model or encode() gave"
        )
    return value


def checked_ids(ids: object) -> list[int]:
    """``ids`` as a list of ints, each checked as ``checked_id`` does (whole lists of
    plain ints in range, the usual case, in one pass)."""
    if isinstance(ids, (str, bytes, bytearray)) or not isinstance(ids, Iterable):
        raise InputError(
            f"decode takes a sequence of token ids, got {type(ids).__name__} {quoted(ids, 40)}; to encode text, "
            f"use encode()"
        )
    listed = list(ids)
    if not all(type(i) is int for i in listed) or (listed and not 0 <= min(listed) <= max(listed) < ID_LIMIT):
        listed = [checked_id(i) for i in listed]
    return listed


_BYTE_TOKEN = re.compile("<0x[0-9A-F]{2}>")  # a byte-fallback token (SentencePiece's, Llama's)


def _byte_alphabet() -> dict[str, int]:
    """GPT-2's byte-level alphabet undone: the character that stands for each byte, to
    the byte (printable Latin-1 stands for itself, the other bytes for U+0100 on)."""
    own = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    shifted = [b for b in range(256) if b not in own]
    return {chr(b): b for b in own} | {chr(256 + n): b for n, b in enumerate(shifted)}


_BYTE_ALPHABET = _byte_alphabet()


def _matching_mode(decoder: Any) -> str | None:
    """How transformers matches stop strings for a tokenizer with this decoder:
    ``"ByteFallback"`` or ``"ByteLevel"`` (by bytes) where its JSON has one (a ByteLevel
    decoder itself first), else None (by characters)."""
    if decoder is None:
        return None
    if type(decoder).__name__ == "ByteLevel":
        return "ByteLevel"
    try:
        state = decoder.__getstate__()
        spec = json.loads(state.decode("utf-8") if isinstance(state, bytes) else str(state))
    except (AttributeError, TypeError, ValueError):  # a decoder without a JSON state
        return None
    kinds = set(_types(spec))
    return next((kind for kind in ("ByteFallback", "ByteLevel") if kind in kinds), None)


def _types(spec: Any) -> Iterable[str]:
    """Every ``"type"`` a decoder's JSON names, its parts' included."""
    parts = spec.values() if isinstance(spec, dict) else spec if isinstance(spec, list) else ()
    if isinstance(spec, dict) and isinstance(spec.get("type"), str):
        yield spec["type"]
    for part in parts:
        yield from _types(part)


#: The characters transformers' clean-up of spaces reads: text cut between two others
#: cleans up as its two parts do.
_CLEANUP_CHARS = frozenset(" .?!,'ntmsvre")


def _UNTOUCHED(char: str) -> bool:
    return char not in _CLEANUP_CHARS and not char.isspace()


def clean_up_tokenization(text: str) -> str:
    """transformers' ``clean_up_tokenization``: no space before punctuation and in
    contractions (what ``clean_up_tokenization_spaces=True`` asks for)."""
    for before, after in (
        (" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"),
        (" n't", "n't"), (" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re"),
    ):  # fmt: skip
        text = text.replace(before, after)
    return text


class TextStream:
    """Decodes byte-level tokens as they arrive, holding back bytes of an unfinished character.

    GPT-2 splits some characters (emoji, CJK) across tokens, so decoding each token on
    its own would print U+FFFD halves; this waits until a character is whole.
    """

    def __init__(self, tokenizer: TiktokenTokenizer | ByteTokenizer) -> None:
        self.tokenizer = tokenizer
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token_id: int) -> str:
        """Text completed by this token (possibly empty)."""
        return self._utf8.decode(self.tokenizer.token_bytes(token_id))

    def flush(self) -> str:
        """Whatever is held back at the end (an unfinished character becomes U+FFFD)."""
        return self._utf8.decode(b"", final=True)


class DecodeStream:
    """Decodes any tokenizer's tokens as they arrive, returning only text that no later
    token can change (``Tokenizer.settled``), so that the pieces joined, with ``flush``,
    are ``decode`` of every id pushed: decoded text does not only grow at its end (a
    byte-fallback run decodes as a whole, a clean-up of spaces looks at what follows).

    Each push decodes the whole sequence again, so a decoder's treatment of a text's
    start (SentencePiece strips one leading space) stays where it belongs.
    """

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.sent = ""

    def push(self, token_id: int) -> str:
        """Text settled by this token (possibly empty)."""
        self.ids.append(checked_id(token_id))
        return self._send(self.tokenizer.settled(self.ids))

    def flush(self) -> str:
        """Whatever is held back at the end (an unfinished character becomes U+FFFD)."""
        return self._send(self.tokenizer.decode(self.ids))

    def _send(self, text: str) -> str:
        if not text.startswith(self.sent):  # settled text only grows; kept safe all the same
            return ""
        new, self.sent = text[len(self.sent) :], text
        return new


#: mappings expand a character at most this much); a Replace or Prepend is read from its content.
_GROWTH = {"NFKC": 18, "NFKD": 18, "NFC": 4, "NFD": 4, "Lowercase": 3, "BertNormalizer": 9, "ByteLevel": 2}


def _growth(spec: Any) -> int:
    """``_growth_factor`` of one normalizer's JSON ``spec``."""
    if not isinstance(spec, dict):
        return 1
    kind = spec.get("type")
    if kind == "Sequence" and isinstance(spec.get("normalizers"), list):
        return functools.reduce(operator.mul, (_growth(part) for part in spec["normalizers"]), 1)
    content = spec.get("content") if kind == "Replace" else spec.get("prepend") if kind == "Prepend" else None
    if isinstance(content, str):
        size = len(content.encode("utf-8", errors="replace"))
        regex = isinstance(spec.get("pattern"), dict) and "Regex" in spec["pattern"]
        return 2 * size + 1 if regex or kind == "Prepend" else max(1, size)  # a regex may match the empty string
    return _GROWTH.get(str(kind), 1)

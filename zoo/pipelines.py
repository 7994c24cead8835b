"""Text in, text out: ``zoo.generate_text``, and loading a model with its tokenizer.

A layer above decoding: it loads models (zoo checkpoints, Hugging Face folders, hub
ids) and the tokenizer each one goes with, encodes the prompt, runs
``zoo.decoding.generate`` and decodes the continuation as it streams.

Which tokenizer a model goes with, when none is given:

- a Hugging Face folder or hub id: the tokenizer files it holds (``tokenizer.json``, or
  ``vocab.json`` and ``merges.txt``);
- a zoo checkpoint: the one it records (``tokenizer_record``): a name (``"gpt2"``,
  ``"bytes"``), a hub id at a commit, or tokenizer files kept beside the versions
  (``RUN/tokenizer/``) with their sha256; a training run records the name its data
  was prepared with;
- otherwise GPT-2's, for a model with GPT-2's vocabulary (50257), and bytes for a
  vocabulary of 256.
"""

from __future__ import annotations

import copy
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from zoo.checkpoint import load
from zoo.checkpoint.records import checked_record
from zoo.checkpoint.tokenizer import TOKENIZER_FOLDER, embedded_files
from zoo.decoding import Sampling, generate
from zoo.decoding.beams import check_early_stopping
from zoo.decoding.loop import check_cache_room, merged_settings
from zoo.decoding.stopping import StopStrings
from zoo.errors import CheckpointError, ConfigError, InputError, InteropError, check_flag, checked_types, printable
from zoo.interop.hf import GPT2_VOCABS, from_hf
from zoo.interop.hub import check_revision, is_hub_id, local_or_snapshot
from zoo.nn.generation import provide_tokenizer
from zoo.nn.model import DecoderLM
from zoo.text.loading import (
    NAMES,
    folder_tokenizer,
    has_tokenizer,
    keep_tokenizer_files,
    kept_tokenizer,
    record_source,
    recorded_tokenizer_source,
)
from zoo.text.loading import tokenizer as load_tokenizer
from zoo.text.tokenizers import Tokenizer

__all__ = [
    "carried_tokenizer",
    "eos_ids",
    "generate_text",
    "is_hf_source",
    "keep_tokenizer",
    "load_model",
    "load_with_tokenizer",
    "model_tokenizer",
    "recorded_tokenizer",
    "recorded_tokenizer_source",
    "tokenizer_record",
]


@checked_types("model_or_path", "prompt")
def generate_text(
    model_or_path: nn.Module | str | os.PathLike[str],
    prompt: str | Sequence[str],
    *,
    max_new_tokens: int | None = None,
    max_length: int | None = None,
    min_new_tokens: int | None = None,
    do_sample: bool | None = None,
    temperature: float | None = None,
    top_k: int | None = None,
    top_p: float | None = None,
    repetition_penalty: float | None = None,
    num_return_sequences: int = 1,
    num_beams: int | None = None,
    length_penalty: float | None = None,
    early_stopping: bool | str | None = None,
    stop_strings: str | Sequence[str] | None = None,
    eos_token_id: int | Sequence[int] | Tensor | None = None,
    pad_token_id: int | None = None,
    seed: int | None = None,
    generator: torch.Generator | None = None,
    on_text: Callable[[str], object] | None = None,
    tokenizer: Tokenizer | str | os.PathLike[str] | None = None,
    stop_at_eot: bool = True,
    revision: str | None = None,
) -> str | list[str] | list[str | list[str]]:
    """Continue ``prompt`` and return the new text (without the prompt): ``decode`` of
    the new tokens up to the end of the sequence (its EOS not included).

    ``model_or_path``: a model, a Hugging Face folder, a hub id (``revision`` picks its
    version) or a zoo checkpoint. ``tokenizer``: a ``Tokenizer``, a name (``"gpt2"``,
    ``"bytes"``), a folder or a hub id; by default the model's own (see the module).
    ``max_new_tokens`` (default 50) or ``max_length`` (prompt plus new tokens, as in
    transformers) bound the length; the other settings are ``zoo.decoding.generate``'s
    (a setting not given is the model's ``generation_config``'s). ``on_text(piece)``
    streams the text as it settles (the first sequence's; with beams, once at the end).
    ``num_return_sequences`` > 1 returns a list. A list of prompts is one batch, left
    padded, and gives a list with one result per prompt. ``seed`` or ``generator`` (one
    of them) makes sampling reproducible. An empty prompt starts from the tokenizer's
    start token (``<|endoftext|>`` for GPT-2); generation stops at ``eos_token_id`` (one
    id or several; default the model's EOS ids, else the tokenizer's end-of-text token;
    ``[]`` stops at none) unless ``stop_at_eot`` is false.
    """
    check_flag(stop_at_eot, "stop_at_eot")
    Sampling(  # its refusals come before the model loads
        False if do_sample is None else do_sample, 1.0 if temperature is None else temperature, top_k or None, top_p,
        1.0 if repetition_penalty is None else repetition_penalty,
    )  # fmt: skip
    check_early_stopping(early_stopping)
    given_eos = _eos_given(eos_token_id, stop_at_eot) if eos_token_id is not None else None
    if on_text is not None and not callable(on_text):
        raise InputError(f"on_text must be a function of each new piece of text, or None; got {type(on_text).__name__}")
    prompts = _prompts(prompt)
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise InputError(f"seed must be an integer or None, got {seed!r}")
    if seed is not None and generator is not None:
        raise InputError("pass seed= or generator=, not both: a seed makes a generator")
    _check_count(num_return_sequences, "num_return_sequences")
    model, own = load_with_tokenizer(model_or_path, revision=revision, carried=tokenizer is None)
    tokenizer = _tokenizer_for(model, model_or_path, own, tokenizer)
    rows = [_prompt_ids(tokenizer, text) for text in prompts]
    device = next(model.parameters()).device
    if seed is not None:
        generator = torch.Generator(device=device).manual_seed(seed)
    eos = given_eos if given_eos is not None else eos_ids(model, tokenizer) if stop_at_eot else []
    given = {"max_new_tokens": max_new_tokens, "max_length": max_length, "num_beams": num_beams}
    settings, origins = merged_settings(model, given)  # the model's own where not given, then bounded
    width = max(map(len, rows))
    new_tokens = _new_tokens(settings["max_new_tokens"], settings["max_length"], width)
    count = len(rows) * num_return_sequences
    check_cache_room(  # before a text decoder is made for each sequence
        model, len(rows), width, new_tokens, {**settings, "num_return_sequences": num_return_sequences}, origins
    )
    pad = pad_token_id if pad_token_id is not None else model.generation_config.get("pad_token_id")
    pad = pad if isinstance(pad, int) else eos[0] if eos else 0
    ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows], device=device)
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], device=device)
    text = _Texts(tokenizer, count, eos, on_text)
    stop = StopStrings(stop_strings, tokenizer) if stop_strings is not None else None
    out = generate(
        model, ids, new_tokens, min_new_tokens=min_new_tokens, do_sample=do_sample, temperature=temperature,
        top_k=top_k, top_p=top_p, repetition_penalty=repetition_penalty, num_return_sequences=num_return_sequences,
        num_beams=num_beams, length_penalty=length_penalty, early_stopping=early_stopping, stop_strings=stop_strings,
        tokenizer=tokenizer, eos_token_id=eos, pad_token_id=pad, generator=generator,
        attention_mask=mask if len(set(map(len, rows))) > 1 else None,
        on_token=None if settings["num_beams"] > 1 else text.push(rows, stop),
    )  # fmt: skip
    texts = text.finish(out[:, width:].tolist() if out.dim() == 2 else [out[width:].tolist()])
    per_prompt: list[str | list[str]] = [
        texts[i : i + num_return_sequences] if num_return_sequences > 1 else texts[i]
        for i in range(0, count, num_return_sequences)
    ]
    return per_prompt[0] if isinstance(prompt, str) else per_prompt


def _prompts(prompt: object) -> list[str]:
    """The prompts of ``generate_text``: one string, or a non-empty list of them."""
    listed = [prompt] if isinstance(prompt, str) else prompt
    if not isinstance(listed, Sequence) or not listed or not all(isinstance(p, str) for p in listed):
        raise InputError(
            f"prompt must be a str or a non-empty list of them, got {type(prompt).__name__}; pass '' to start from "
            f"<|endoftext|>"
        )
    return list(listed)


def _eos_given(eos_token_id: object, stop_at_eot: bool) -> list[int]:
    """The EOS ids ``generate_text`` was given, as a list; refused with ``stop_at_eot=False``,
    which says to stop at none."""
    if not stop_at_eot:
        raise InputError("pass eos_token_id= or stop_at_eot=False, not both: the second stops at no token")
    listed = [eos_token_id] if isinstance(eos_token_id, int) else eos_token_id
    if not isinstance(listed, Sequence) or not all(isinstance(i, int) and not isinstance(i, bool) for i in listed):
        raise InputError(f"eos_token_id must be a token id or a list of them (or None), got {eos_token_id!r}")
    return list(listed)


def eos_ids(model: DecoderLM, tokenizer: Tokenizer) -> list[int]:
    """Where text ends: the model's EOS ids (its generation_config), else the tokenizer's end-of-text."""
    own = model.generation_config.get("eos_token_id")
    if own is not None:
        return [own] if isinstance(own, int) else list(own)
    return [tokenizer.eot_token_id] if tokenizer.eot_token_id is not None else []


class _Texts:
    """The text of each row as it streams: each row's tokens to its end (an EOS id, not
    shown; a stop string, shown), decoded as they settle."""

    def __init__(self, tokenizer: Tokenizer, rows: int, eos: list[int], on_text: Callable[[str], object] | None):
        self.tokenizer, self.eos, self.on_text = tokenizer, set(eos), on_text
        self.streams = [tokenizer.stream() for _ in range(rows)]
        self.pieces: list[list[str]] = [[] for _ in range(rows)]
        self.streamed = False

    def emit(self, row: int, piece: str) -> None:
        if piece:
            self.pieces[row].append(piece)
            if self.on_text is not None and row == 0:
                self.on_text(piece)

    def push(self, prompts: list[list[int]], stop: StopStrings | None) -> Callable[[Tensor], None]:
        """The ``on_token`` of ``generate``: each step's tokens into the rows' streams."""
        self.streamed = True
        repeat = len(self.streams) // len(prompts)
        history = [list(prompts[row // repeat]) for row in range(len(self.streams))]
        finished = [False] * len(self.streams)

        def on_token(tokens: Tensor) -> None:
            for row, token in enumerate(tokens.tolist()):
                if finished[row]:
                    continue
                if token in self.eos:
                    finished[row] = True
                    continue
                self.emit(row, self.streams[row].push(token))
                history[row].append(token)
                finished[row] = stop is not None and stop.ends(history[row])

        return on_token

    def finish(self, new: list[list[int]]) -> list[str]:
        """Each row's text: the streams flushed, or (beams) its new tokens to EOS decoded."""
        if self.streamed:
            for row, stream in enumerate(self.streams):
                self.emit(row, stream.flush())
            return ["".join(p) for p in self.pieces]
        texts = []
        for row, ids in enumerate(new):
            end = next((i for i, t in enumerate(ids) if t in self.eos), len(ids))
            texts.append(self.tokenizer.decode(ids[:end]))
            self.emit(row, texts[-1]) if row == 0 else None
        return texts


def _tokenizer_for(
    model: Any,
    model_or_path: nn.Module | str | os.PathLike[str],
    own: Tokenizer | None,
    tokenizer: Tokenizer | str | os.PathLike[str] | None,
) -> Tokenizer:
    """The tokenizer given (loaded by name, folder or id), else the model's own; checked
    against the model's vocabulary."""
    if tokenizer is None:
        tokenizer = own or _default_tokenizer(model, model_or_path)
    elif not isinstance(tokenizer, Tokenizer):
        tokenizer = load_tokenizer(tokenizer)
    vocab = model.config.vocab_size
    if tokenizer.vocab_size > vocab:
        raise ConfigError(
            f"the tokenizer {printable(tokenizer.name)!r} has {tokenizer.vocab_size} tokens but the model's "
            f"vocabulary has {vocab}; pass a tokenizer that matches the model (tokenizer=..., or --tokenizer)"
        )
    return tokenizer


def _prompt_ids(tokenizer: Tokenizer, prompt: str) -> list[int]:
    """The prompt's ids; an empty prompt starts from the tokenizer's start token."""
    ids = tokenizer.encode(prompt)
    if not ids:
        if tokenizer.start_token_id is None:
            raise InputError("the prompt is empty and the tokenizer has no start token to begin from; give a prompt")
        ids = [tokenizer.start_token_id]
    return ids


def _check_count(value: object, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(f"{name} must be an integer >= 1, got {value!r}")


def _new_tokens(max_new_tokens: int | None, max_length: int | None, prompt_len: int) -> int:
    """New tokens to ask for: ``max_new_tokens``, else ``max_length`` less the prompt, else 50."""
    if max_new_tokens is not None and max_length is not None:
        raise InputError("pass max_new_tokens or max_length, not both (max_length counts the prompt too)")
    if max_length is None:
        return 50 if max_new_tokens is None else max_new_tokens
    if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 1:
        raise InputError(f"max_length must be an integer >= 1, got {max_length!r}")
    if max_length < prompt_len:
        raise InputError(
            f"max_length={max_length} counts the prompt, which alone has {prompt_len} tokens; raise it, or "
            f"use max_new_tokens for the new tokens only"
        )
    return max_length - prompt_len


def _default_tokenizer(model: DecoderLM, source: object) -> Tokenizer:
    if model.config.vocab_size in GPT2_VOCABS:  # GPT-2's, or padded to 64 like Pythia and nanoGPT
        return load_tokenizer("gpt2")
    if model.config.vocab_size == 256:  # one id per byte: the byte tokenizer's vocabulary
        return load_tokenizer("bytes")
    where = f"{printable(str(source))!r}" if isinstance(source, (str, os.PathLike)) else "this model"
    fits = "tokenizer='bytes' (zoo generate --tokenizer bytes), " if model.config.vocab_size >= 256 else ""
    raise ConfigError(
        f"{where} records no tokenizer and its vocabulary ({model.config.vocab_size}) is not GPT-2's; pass "
        f"the one it was trained with: {fits}a tokenizer folder with tokenizer.json, or a hub id (tokenizer=..., "
        f"--tokenizer)"
    )


def load_model(
    model_or_path: nn.Module | str | os.PathLike[str], *, revision: str | None = None, version: int | None = None
) -> DecoderLM:
    """A decoder-only model as given, or loaded from a Hugging Face folder, a hub id or a
    zoo checkpoint (``version`` picks one of a directory's versions)."""
    return load_with_tokenizer(model_or_path, revision=revision, version=version)[0]


def load_with_tokenizer(
    model_or_path: nn.Module | str | os.PathLike[str],
    *,
    revision: str | None = None,
    version: int | None = None,
    carried: bool = True,
) -> tuple[DecoderLM, Tokenizer | None]:
    """The model (as ``load_model``) and the tokenizer it goes with, where it names one;
    ``carried=False`` (a tokenizer is given instead) reads none, so a record the zoo
    refuses (``zoo.checkpoint.records``) does not stand in the way of the one given."""
    if isinstance(model_or_path, nn.Module):
        for name, value in (("revision", revision), ("version", version)):
            if value is not None:
                raise InputError(
                    f"{name}={value!r} picks what to load, but the model is already loaded; drop {name}, or pass "
                    f"the hub id or checkpoint path instead of the model"
                )
        model = _decoder(model_or_path, type(model_or_path).__name__)
        if not carried:
            return model, None
        given = model.tokenizer  # assigned, or loaded from its tokenizer_record
        return model, given if isinstance(given, Tokenizer) else carried_tokenizer(model)
    check_revision(revision)
    if not isinstance(model_or_path, (str, os.PathLike)) or not str(model_or_path):
        raise InputError(
            f"model_or_path must be a model, a Hugging Face folder, a hub id or a zoo checkpoint path, "
            f"got {type(model_or_path).__name__} {model_or_path!r}"
        )
    path = Path(model_or_path)
    if is_hf_source(model_or_path):
        if version is not None:
            raise InputError(
                f"version={version!r} picks a version of a zoo checkpoint folder, but "
                f"{printable(str(model_or_path))!r} is a Hugging Face model; drop version (--version), or pass "
                f"revision= (--revision) to pick a hub id's version"
            )
        folder, _ = local_or_snapshot(model_or_path, revision)
        own = folder_tokenizer(folder) if carried and has_tokenizer(folder) else None
        return _decoder(from_hf(folder), f"the model {printable(str(model_or_path))!r}"), own
    if revision is not None:
        raise InputError(f"revision={revision!r} is for hub ids; {printable(str(path))!r} is a local checkpoint")
    loaded = _decoder(load(path, version=version), f"the model in {printable(str(path))!r}")
    return loaded, carried_tokenizer(loaded) if carried else None


def is_hf_source(source: str | os.PathLike[str]) -> bool:
    """Whether ``load_model`` reads ``source`` as a Hugging Face model (a folder holding a
    ``config.json``, or a hub id) rather than a zoo checkpoint (a file or run folder)."""
    return (Path(source) / "config.json").is_file() or (isinstance(source, str) and is_hub_id(source))


def _decoder(model: nn.Module, what: str) -> DecoderLM:
    if not isinstance(model, DecoderLM):
        raise InputError(
            f"{what} is a {type(model).__name__}, not a decoder-only language model; text "
            f"generation and zoo probe need one (zoo.build('gpt2-small'), or a checkpoint of one)"
        )
    return model


# -- the tokenizer a checkpoint records ---------------------------------------------------


def tokenizer_record(source: str | os.PathLike[str], revision: str | None = None) -> dict[str, Any]:
    """What a checkpoint's metadata records (under ``"tokenizer"``) for a tokenizer
    ``source``: a name, or a hub id pinned to its commit. A folder is kept with
    ``keep_tokenizer`` instead (its files travel with the run)."""
    text = str(source)
    if text in NAMES:
        return {"name": text}
    if isinstance(source, str) and is_hub_id(source):
        folder, commit = local_or_snapshot(source, revision, need="tokenizer")
        return {"hub": source, "revision": commit or revision}
    raise ConfigError(
        f"tokenizer_record takes a name ({', '.join(NAMES)}) or a hub id, got {printable(text)!r}; "
        f"keep a folder's files beside a run's versions with keep_tokenizer(folder, run)"
    )


def keep_tokenizer(folder: str | os.PathLike[str], run: str | os.PathLike[str]) -> dict[str, Any]:
    """Copy a tokenizer folder's files into ``run/tokenizer/`` (beside its versions) and
    return the record to save with them: each file's sha256."""
    return {"files": keep_tokenizer_files(folder, Path(run) / TOKENIZER_FOLDER)}


def carried_tokenizer(model: nn.Module) -> Tokenizer | None:
    """The tokenizer a model carries (``model.tokenizer_record``: set by ``from_hf``,
    ``from_pretrained`` and ``load``), or None if it carries none."""
    record = getattr(model, "tokenizer_record", None)
    if not isinstance(record, Mapping) or not record:
        return None
    where = "the model's tokenizer record"
    record = checked_record(record, where)  # read from a file: it names no path
    if "embedded" in record:
        return files_tokenizer(embedded_files(record, where), "the model's own tokenizer")
    if isinstance(record.get("files"), Mapping) and isinstance(record.get("folder"), str):
        try:
            return kept_tokenizer(Path(record["folder"]), record["files"], where)
        except InteropError as err:
            raise CheckpointError(str(err)) from err
    source = record_source(record, where)
    return load_tokenizer(source) if source is not None else None


def files_tokenizer(files: Mapping[str, bytes], name: str) -> Tokenizer:
    """A tokenizer from its files' bytes (as a folder holds them), named ``name``."""
    with tempfile.TemporaryDirectory(prefix="zoo-tokenizer-") as folder:
        for file, data in files.items():
            (Path(folder) / file).write_bytes(data)  # names checked: only TOKENIZER_FILES
        made = copy.copy(folder_tokenizer(Path(folder)))  # read whole: nothing refers to the folder after
    made.name = name
    return made


def recorded_tokenizer(path: str | os.PathLike[str], version: int | None = None) -> Tokenizer | None:
    """The tokenizer a zoo checkpoint records (see the module), or None if it records none."""
    source = recorded_tokenizer_source(path, version)
    return load_tokenizer(source) if source is not None else None


def model_tokenizer(
    model: DecoderLM,
    model_or_path: nn.Module | str | os.PathLike[str],
    own: Tokenizer | None,
    tokenizer: Tokenizer | str | os.PathLike[str] | None = None,
) -> Tokenizer:
    """The tokenizer ``generate_text`` uses for ``model`` (as ``load_with_tokenizer`` gave
    it, with its ``own``): the one given, else its own, else by vocabulary; checked
    against the model's vocabulary."""
    return _tokenizer_for(model, model_or_path, own, tokenizer)


provide_tokenizer(carried_tokenizer)  # model.tokenizer loads what its tokenizer_record names

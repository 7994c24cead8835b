"""Text in, text out: ``zoo.generate_text`` and loading a model by path.

A layer above decoding: it loads models (zoo checkpoints, Hugging Face folders) and
tokenizers, encodes the prompt, runs ``zoo.decoding.generate`` and decodes the
continuation as it streams.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import torch
from torch import Tensor, nn

from zoo.checkpoint import load
from zoo.decoding import generate
from zoo.errors import ConfigError, InputError
from zoo.interop.hf import from_hf
from zoo.model import DecoderLM
from zoo.text import Tokenizer
from zoo.text import tokenizer as load_tokenizer

__all__ = ["generate_text", "load_model"]


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
    device = next(model.parameters()).device
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
    """A decoder-only model as given, or loaded from a Hugging Face folder or a zoo checkpoint."""
    if isinstance(model_or_path, nn.Module):
        return _decoder(model_or_path, type(model_or_path).__name__)
    if not isinstance(model_or_path, (str, os.PathLike)) or not str(model_or_path):
        raise InputError(
            f"model_or_path must be a model, a Hugging Face folder or a zoo checkpoint path, "
            f"got {type(model_or_path).__name__} {model_or_path!r}"
        )
    path = Path(model_or_path)
    model = from_hf(path) if (path / "config.json").is_file() else load(path)
    return _decoder(model, f"the model in {str(path)!r}")


def _decoder(model: nn.Module, what: str) -> DecoderLM:
    if not isinstance(model, DecoderLM):
        raise InputError(
            f"{what} is a {type(model).__name__}, not a decoder-only language model; text "
            f"generation needs one (zoo.build('gpt2-small'), or a checkpoint of one)"
        )
    return model


def _folder_tokenizer(model_or_path: object) -> Tokenizer | None:
    if isinstance(model_or_path, (str, os.PathLike)):
        folder = Path(model_or_path)
        if (folder / "vocab.json").is_file() and (folder / "merges.txt").is_file():
            return load_tokenizer(folder)
    return None

"""Bounds after every merge (issue 41, item 2): a generation setting from a model's own
settings (a checkpoint's kept ones, an HF folder's ``generation_config.json``) meets the
memory bound the same value given as an argument meets, the refusal names the setting
that multiplies most and where it came from, before anything is allocated; and sizes a
hostile ``config.json`` states (experts, layers) are refused naming the field before any
per-layer or per-expert structure is built."""

from __future__ import annotations

import importlib.util
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import zoo
from helpers import tiny
from zoo.cli import main
from zoo.decoding import Engine, generate
from zoo.errors import InputError
from zoo.memory import available_bytes
from zoo.nn.config import MAX_SEQ_LEN

FREE = available_bytes() or 1 << 40
PAST = 4 * FREE
NEW = 4  # new tokens; the prompt is one byte token
# One layer of width 16 in fp32: 2 * 16 * 4 bytes of KV cache per sequence and position.
BEAMS = max(10**6, PAST // (2 * 16 * 4 * (1 + NEW)) + 1)


def _model() -> zoo.DecoderLM:
    return tiny(vocab_size=256, n_layers=1, d_model=16, n_heads=2)


def _checkpoint(tmp_path: Path) -> Path:
    model = _model()
    model.generation_config["num_beams"] = BEAMS  # kept by zoo.save, as a model's own
    return zoo.save(model, tmp_path / "beams.safetensors")


def _hf_folder(tmp_path: Path) -> Path:
    pytest.importorskip("transformers")
    from helpers import random_hf_model

    folder = tmp_path / "hf"
    random_hf_model(folder, "gpt2", 256)
    (folder / "generation_config.json").write_text(json.dumps({"num_beams": BEAMS, "max_new_tokens": NEW}))
    return folder


SOURCES: dict[str, tuple[Callable[[Path], Path], str]] = {
    "checkpoint": (_checkpoint, "the checkpoint"),
    "generation_config.json": (_hf_folder, "generation_config.json"),
}
IDS = torch.tensor([[97]])
READERS: dict[str, Callable[[Path, pytest.CaptureFixture[str]], Any]] = {
    "generate_text": lambda path, capsys: zoo.generate_text(str(path), "a", tokenizer="bytes", max_new_tokens=NEW),
    "model.generate": lambda path, capsys: _load(path).generate(IDS, NEW),
    "zoo.decoding.generate": lambda path, capsys: generate(_load(path), IDS, NEW),
    "an Engine": lambda path, capsys: generate(Engine(_load(path)), IDS, NEW),
    "zoo generate": lambda path, capsys: _cli(path, capsys),
}


def _load(path: Path) -> zoo.DecoderLM:
    return zoo.from_hf(path) if path.is_dir() else zoo.load(path)  # type: ignore[return-value]


def _cli(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["generate", str(path), "--tokenizer", "bytes", "--prompt", "a", "--max-new-tokens", str(NEW)]
    assert main(argv) == 1
    raise InputError(" ".join(capsys.readouterr().err.split()))  # as the API would, for one assertion


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("source", SOURCES)
def test_num_beams_from_a_models_own_settings_meets_the_memory_bound(
    source: str, reader: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make, origin = SOURCES[source]
    path = make(tmp_path)
    started = time.monotonic()
    with pytest.raises(InputError) as caught:
        READERS[reader](path, capsys)
    message = str(caught.value)
    assert f"num_beams={BEAMS:,}" in message or "num_beams=about" in message, message
    assert f"(from {'' if source == 'checkpoint' else str(path) + '/'}{origin}" in message, message
    assert "KV caches" in message and "--num-return-sequences" not in message, message
    assert time.monotonic() - started < 30  # refused, not decoded


LONG = MAX_SEQ_LEN - 1  # new tokens a sinusoidal model of the longest context takes after one
PROMPTS = max(8, PAST // (2 * 16 * 4 * MAX_SEQ_LEN) + 1)  # prompts whose caches of that length cannot fit


@pytest.mark.parametrize(
    ("options", "cause", "fix"),
    [
        ({"num_return_sequences": BEAMS}, "num_return_sequences", "lower --num-return-sequences"),
        ({"max_new_tokens": LONG}, "max_new_tokens", "lower --max-new-tokens"),
        ({"num_beams": BEAMS}, "num_beams", "lower num_beams="),
    ],
)
def test_the_memory_refusal_names_its_actual_cause(options: dict[str, int], cause: str, fix: str) -> None:
    long = cause == "max_new_tokens"
    model = tiny(vocab_size=256, n_layers=1, d_model=16, n_heads=2, position="sinusoidal", max_seq_len=MAX_SEQ_LEN)
    prompts = PROMPTS if long else 1
    settings = {"max_new_tokens": NEW, **options}
    for run in (
        lambda: zoo.generate_text(model, ["a"] * prompts, tokenizer="bytes", **settings),
        lambda: generate(model, IDS.repeat(prompts, 1), **settings),
    ):
        with pytest.raises(InputError) as caught:
            run()
        message = str(caught.value)
        assert f"{cause}=" in message and "(from argument)" in message and fix in message, message
        named = [n for n in ("num_beams", "num_return_sequences", "max_new_tokens") if f"{n}=" in message.split(":")[0]]
        assert named == [cause], message


def test_settings_that_fit_still_generate(tmp_path: Path) -> None:
    model = _model()
    model.generation_config.update(num_beams=2, max_new_tokens=3)
    out = zoo.load(zoo.save(model, tmp_path / "m.safetensors")).generate(IDS)
    assert out.shape == (1, 4)


# -- sizes a hostile config.json states ---------------------------------------------------------

LAYER_FIELDS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")
EXPERT_FIELDS = ("num_experts", "num_local_experts")


def _hostile_folder(tmp_path: Path, case: Any, fields: tuple[str, ...]) -> tuple[Path, str]:
    """A folder holding only ``config.json``: ``case``'s tiny transformers config with the
    first of ``fields`` it has set to 10**9 (the one the refusal must name)."""
    transformers = pytest.importorskip("transformers")
    # as transformers writes it (its own JSON: an infinite float as {"__float__": "Infinity"})
    hf = json.loads(getattr(transformers, case.config)(**case.fields).to_json_string(use_diff=False))
    hf["architectures"] = [case.model]
    name = next(field for field in fields if field in hf)
    hf[name] = 10**9
    folder = tmp_path / case.id
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(hf))
    return folder, name


def _cases(fields: tuple[str, ...]) -> list[Any]:
    from family_cases import all_cases

    if importlib.util.find_spec("zoo_modern") is None:  # its families are the plugin's
        return []
    transformers = pytest.importorskip("transformers")
    found = []
    for case in all_cases():
        config = getattr(transformers, case.config, None)
        if config is not None and any(field in config(**case.fields).to_dict() for field in fields):
            found.append(pytest.param(case, id=case.id))
    return found


@pytest.mark.parametrize("case", _cases(EXPERT_FIELDS))
def test_a_billion_experts_is_refused_within_a_second(case: Any, tmp_path: Path) -> None:
    folder, name = _hostile_folder(tmp_path, case, EXPERT_FIELDS)
    started = time.monotonic()
    for read in (lambda: zoo.from_hf(folder), lambda: zoo.interop.hf.config_from_hf(json.loads((folder / "config.json").read_text()))):  # fmt: skip
        with pytest.raises(zoo.ZooError, match=rf"{name}=1000000000 is more than the zoo converts \(at most 4096\)"):
            read()
    assert time.monotonic() - started < 1.0


@pytest.mark.parametrize("case", _cases(LAYER_FIELDS))
def test_a_billion_layers_is_refused_before_any_per_layer_list(case: Any, tmp_path: Path) -> None:
    folder, name = _hostile_folder(tmp_path, case, LAYER_FIELDS)
    started = time.monotonic()
    with pytest.raises(zoo.ZooError, match=rf"{name}=1000000000 is more than the zoo converts \(at most 1024\)"):
        zoo.from_hf(folder)
    assert time.monotonic() - started < 1.0


def test_the_moe_component_bounds_its_experts() -> None:
    pytest.importorskip("zoo_modern")
    with pytest.raises(zoo.ZooError, match="n_experts"):
        zoo.build("gpt2-small", n_layers=1, d_model=16, n_heads=2, mlp={"name": "moe", "n_experts": 10**9})

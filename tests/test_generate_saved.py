"""What a saved model keeps for generation: its ``generation_config`` through ``zoo.save``
and ``zoo.load``, and the context its training run trained it at, past which
generation warns."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch

import zoo
from helpers import prepared_bytes, random_hf_model
from zoo.cli import main

pytest.importorskip("transformers")


def test_generation_settings_travel_with_a_saved_model(tmp_path: Path) -> None:
    _, model = random_hf_model(tmp_path / "hf", "gpt2", 120, eos_token_id=[5, 7], pad_token_id=3)
    assert model.generation_config == {"bos_token_id": 1, "eos_token_id": [5, 7], "pad_token_id": 3}
    loaded = zoo.load(zoo.save(model, tmp_path / "m.safetensors"))
    assert loaded.generation_config == model.generation_config
    ids = torch.tensor([[4, 9, 11]])
    assert torch.equal(loaded.generate(ids, 10), model.generate(ids, 10))
    assert zoo.load(zoo.save(zoo.build("gpt2-small", n_layers=1, d_model=16, n_heads=2, vocab_size=64), tmp_path / "p.safetensors")).generation_config == {}  # fmt: skip


def test_generating_past_the_trained_context_warns(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    data = prepared_bytes(tmp_path / "data", 4_000)
    run = tmp_path / "run"
    args = ["--set", "n_layers=1", "--set", "d_model=32", "--set", "n_heads=2", "--set", "max_seq_len=64"]
    train = ["--steps", "2", "--batch-size", "2", "--seq-len", "16", "--eval-every", "2", "--save-every", "2"]
    assert main(["train", "gpt2-small", *args, "--data", str(data), "--out", str(run), *train, "--threads", "1"]) == 0
    model = zoo.load(run)
    assert model.generation_config == {"trained_context": 16}
    ids = torch.tensor([[104, 105]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.generate(ids, 14)  # 16 positions: inside what it was trained at
    with pytest.warns(UserWarning, match="past the 16 the model was trained at .* at most 14 new tokens"):
        out = model.generate(ids, 20)
    assert out.shape == (1, 22)  # a warning, not a refusal: max_seq_len is 64


def test_an_export_keeps_the_generation_settings_where_transformers_reads_them(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    reference, model = random_hf_model(tmp_path / "hf", "llama", 120, eos_token_id=[5, 7], pad_token_id=3)
    out = zoo.to_hf(model, tmp_path / "out")
    exported = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    assert exported.generation_config.eos_token_id == [5, 7] and exported.generation_config.pad_token_id == 3
    assert zoo.from_hf(out).generation_config == model.generation_config
    ids = torch.tensor([[4, 9, 11]])
    with torch.no_grad():
        theirs = exported.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=10, do_sample=False)
    assert torch.equal(model.generate(ids, 10), theirs)
    assert not (zoo.to_hf(zoo.build("gpt2-small", n_layers=1, d_model=16, n_heads=2), tmp_path / "plain") / "generation_config.json").exists()  # fmt: skip


BAD_SETTINGS = {
    "min-above-max": ({"min_new_tokens": 5, "max_new_tokens": 3}, "min_new_tokens=5 is more than max_new_tokens=3"),
    "nan-length-penalty": ({"length_penalty": float("nan")}, "length_penalty=nan is not a finite number"),
    "inf-temperature": ({"temperature": float("inf"), "do_sample": True}, "temperature=inf is not a finite number"),
    "nan-top-p": ({"top_p": float("nan")}, "top_p=nan is not a finite number"),
    "text-penalty": ({"repetition_penalty": "1.2"}, "repetition_penalty='1.2' is not a number"),
}


@pytest.mark.parametrize("source", ["api", "model", "checkpoint", "hf-folder"])
@pytest.mark.parametrize("case", list(BAD_SETTINGS))
def test_generation_settings_no_decoding_honours_are_refused_naming_their_source(
    source: str, case: str, tmp_path: Path
) -> None:
    """``min_new_tokens`` above ``max_new_tokens``, a NaN or infinite real setting, or
    text for a number: refused in one line naming where it came from (the call, the
    model's generation_config, the checkpoint that keeps it, the folder's
    generation_config.json), before any token is made."""
    import json

    from helpers import edit_metadata, tiny

    settings, match = BAD_SETTINGS[case]
    ids = torch.tensor([[4, 9, 11]])
    model = tiny()
    if source == "api":
        typed = "^repetition_penalty must be a number or None, got str '1.2'"  # checked_types, at the call
        given = typed if case == "text-penalty" else r"^generate\(\): " + match.replace("(", r"\(")
        with pytest.raises(zoo.InputError, match=given) as err:
            model.generate(ids, **{"max_new_tokens": 8, **settings})
    elif source == "model":
        model.generation_config = dict(settings)
        with pytest.raises(zoo.InputError, match="generate\\(\\) with the model's generation_config: " + match) as err:
            model.generate(ids)
        with pytest.raises(zoo.CheckpointError, match="cannot save the model: its generation_config: " + match):
            zoo.save(model, tmp_path / "m.safetensors")
        with pytest.raises(zoo.InteropError, match="cannot export the model: its generation_config: " + match):
            zoo.to_hf(model, tmp_path / "hf")
        assert not (tmp_path / "m.safetensors").exists() and not (tmp_path / "hf").exists()
    elif source == "checkpoint":
        path = zoo.save(model, tmp_path / "m.safetensors")
        kept = json.dumps({"generation": settings}, allow_nan=True)  # NaN and Infinity as Python writes them
        path.write_bytes(edit_metadata(path.read_bytes(), zoo_metadata=kept))
        with pytest.raises(
            zoo.CheckpointError, match="the generation settings .*m.safetensors.* keeps .*: " + match
        ) as err:
            zoo.load(path)
    else:
        _, hf_model = random_hf_model(tmp_path / "folder", "gpt2", 120)
        file = tmp_path / "folder" / "generation_config.json"
        text = json.dumps({**json.loads(file.read_text()), **settings}, allow_nan=True)
        file.write_text(text)
        if "nan" in case or "inf" in case:  # JSON cannot hold them: the reader refuses the file
            with pytest.raises(zoo.InteropError, match="generation_config.json"):
                zoo.from_hf(tmp_path / "folder")
            return
        with pytest.raises(zoo.InteropError, match="generation_config.json.*: " + match) as err:
            zoo.from_hf(tmp_path / "folder")
    assert "\n" not in str(err.value) and ("lower" in str(err.value) or "give" in str(err.value))


def test_min_new_tokens_past_what_max_length_leaves_is_refused() -> None:
    from helpers import tiny

    ids = torch.tensor([[4, 9, 11]])
    with pytest.raises(zoo.InputError, match=r"min_new_tokens=5 is more than the 3 new tokens max_length=6 leaves"):
        tiny().generate(ids, max_length=6, min_new_tokens=5)
    assert tiny().generate(ids, max_length=6, min_new_tokens=3, eos_token_id=[]).shape == (1, 6)

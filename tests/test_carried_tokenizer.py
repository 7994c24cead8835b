"""A model carries its tokenizer: read from a Hugging Face folder or hub id, saved into a
checkpoint, loaded back, exported to transformers. Nothing else is given, and the hub cache
is gone by the time the checkpoint is used."""

from __future__ import annotations

import base64
import json
import random
from pathlib import Path
from typing import Any

import pytest
import torch

import zoo
from helpers import bundled_lines, edit_metadata, put_in_hub_cache, tiny, train_tokenizer
from zoo.checkpoint.tokenizer import embedded_record, folder_files, gpt2_files
from zoo.cli import main

transformers = pytest.importorskip("transformers")
pytest.importorskip("zoo_modern")

VOCAB = 400
PROMPT = "To be, or not to be"
FAMILIES: dict[str, tuple[str, dict[str, Any], str, dict[str, str]]] = {
    "gpt2": ("GPT2LMHeadModel", {"n_embd": 32, "n_layer": 2, "n_head": 4}, "bpe", {"eos_token": "<|endoftext|>"}),
    "llama": (
        "LlamaForCausalLM",
        {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4},
        "metaspace",
        {"bos_token": "<s>", "eos_token": "</s>"},
    ),
    "neox": (
        "GPTNeoXForCausalLM",
        {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4},
        "bpe",
        {"eos_token": "<|endoftext|>"},
    ),
}


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An HF_HOME whose cache holds a tiny GPT-2, Llama and NeoX, each with its own tokenizer."""
    root = tmp_path_factory.mktemp("carried")
    for i, (family, (model_class, fields, kind, special)) in enumerate(FAMILIES.items()):
        folder = train_tokenizer(root / "saved" / family, kind, VOCAB, **special)
        config_class = transformers.AutoConfig.for_model({"gpt2": "gpt2", "llama": "llama", "neox": "gpt_neox"}[family])
        torch.manual_seed(i)
        lengths = {"n_positions": 64} if family == "gpt2" else {"max_position_embeddings": 64}
        config = type(config_class)(**fields, **lengths, vocab_size=VOCAB)
        getattr(transformers, model_class)(config).save_pretrained(folder)
        put_in_hub_cache(root / "home" / "hub", f"org/{family}", folder)
    return root / "home"


@pytest.fixture
def offline(hub: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HF_HOME", str(hub))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return hub


def no_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "no-cache"))


@pytest.mark.parametrize("family", FAMILIES)
def test_a_model_from_the_hub_produces_text_with_nothing_else_given(family: str, offline: Path) -> None:
    model = zoo.from_pretrained(f"org/{family}")
    by_id = zoo.generate_text(f"org/{family}", PROMPT, max_new_tokens=6)
    assert zoo.generate_text(model, PROMPT, max_new_tokens=6) == by_id


@pytest.mark.parametrize("family", FAMILIES)
def test_a_saved_file_carries_the_tokenizer_past_the_cache(
    family: str, offline: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = zoo.from_pretrained(f"org/{family}")
    expected = zoo.generate_text(model, PROMPT, max_new_tokens=6)
    file = zoo.save(model, tmp_path / "model.safetensors")
    no_cache(monkeypatch, tmp_path)
    loaded = zoo.load(file)
    assert zoo.generate_text(loaded, PROMPT, max_new_tokens=6) == expected  # the model object
    assert zoo.generate_text(file, PROMPT, max_new_tokens=6) == expected  # and the path
    again = zoo.save(loaded, tmp_path / "again.safetensors")  # saved again, still carried
    assert zoo.checkpoint.inspect(again).metadata["tokenizer"] == zoo.checkpoint.inspect(file).metadata["tokenizer"]


@pytest.mark.parametrize("family", FAMILIES)
def test_an_export_loads_in_auto_tokenizer(family: str, offline: Path, tmp_path: Path) -> None:
    model = zoo.from_pretrained(f"org/{family}")
    out = zoo.to_hf(model, tmp_path / "export")
    ours, theirs = zoo.tokenizer(str(out)), transformers.AutoTokenizer.from_pretrained(out)
    assert theirs.encode(PROMPT) == ours.encode(PROMPT) and len(ours.encode(PROMPT)) > 3


def test_a_gpt2_run_exports_gpt2s_tokenizer(tmp_path: Path) -> None:
    """A model that records the name ``gpt2`` (as a training run on GPT-2's vocabulary does)
    exports GPT-2's own vocab.json and merges.txt, through ``zoo convert --to-hf`` too."""
    model = zoo.build("gpt2-small", n_layers=1, d_model=32, n_heads=2).eval()
    file = zoo.save(model, tmp_path / "run.safetensors", metadata={"tokenizer": {"name": "gpt2"}})
    assert zoo.load(file).tokenizer_record == {"name": "gpt2"}
    assert main(["convert", "--to-hf", str(file), "-o", str(tmp_path / "hf")]) == 0
    theirs = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    text = "Hello, world! <|endoftext|> again"
    assert theirs.encode(text) == zoo.tokenizer("gpt2").encode(text)


def test_a_byte_level_model_exports_a_tokenizer_auto_tokenizer_loads(tmp_path: Path) -> None:
    """The byte tokenizer as a byte-level BPE: transformers encodes and decodes text as
    the zoo's byte tokenizer does, through ``zoo convert --to-hf`` too, and the export read
    back carries it."""
    model = zoo.build("gpt2-small", n_layers=1, d_model=32, n_heads=2, vocab_size=256).eval()
    file = zoo.save(model, tmp_path / "run.safetensors", metadata={"tokenizer": {"name": "bytes"}})
    assert main(["convert", "--to-hf", str(file), "-o", str(tmp_path / "hf")]) == 0
    theirs, ours = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf"), zoo.tokenizer("bytes")
    for text in ("Hello, world.", "  spaces  and\ttabs\n", "Grüße, 東京 🙂", "<|endoftext|> <s>"):
        assert theirs.encode(text) == ours.encode(text) == list(text.encode("utf-8"))
        assert theirs.decode(ours.encode(text)) == text
    rng = random.Random(0)
    for _ in range(300):  # random bytes, UTF-8 or not: one text on both sides
        ids = [rng.choice([rng.randrange(256), rng.randrange(0x80, 0x100)]) for _ in range(rng.randrange(1, 12))]
        assert theirs.decode(ids) == ours.decode(ids)
    back = zoo.from_hf(tmp_path / "hf")
    assert zoo.generate_text(back, "To be", max_new_tokens=4) == zoo.generate_text(
        zoo.load(file), "To be", max_new_tokens=4, tokenizer="bytes"
    )


@pytest.mark.parametrize(
    "embedded",
    [{"../../evil.json": "e30="}, {"tokenizer.json": "not base64!"}, {}],
    ids=["a path", "not base64", "nothing"],
)
def test_a_damaged_embedded_record_is_refused_naming_it(tmp_path: Path, embedded: dict[str, str]) -> None:
    model = zoo.build("gpt2-small", n_layers=1, d_model=32, n_heads=2, vocab_size=300).eval()
    raw = (zoo.save(model, tmp_path / "ok.safetensors")).read_bytes()
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(edit_metadata(raw, zoo_metadata=json.dumps({"tokenizer": {"embedded": embedded}})))
    with pytest.raises(zoo.ZooError, match="tokenizer"):
        zoo.generate_text(zoo.load(bad), PROMPT, max_new_tokens=2)
    assert not (tmp_path / "evil.json").exists()


def test_the_embedded_files_are_the_folders_bytes(offline: Path) -> None:
    model = zoo.from_pretrained("org/llama")
    record = model.tokenizer_record
    assert record is not None and set(record["embedded"]) >= {"tokenizer.json", "tokenizer_config.json"}
    snapshot = zoo.interop.hub.local_or_snapshot("org/llama", None)[0]
    for name, text in record["embedded"].items():
        assert base64.b64decode(text) == (Path(snapshot) / name).read_bytes()


# -- zoo train and zoo eval of a checkpoint whose tokenizer it embeds ------------------------


def embedded_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, list[int]]:
    """A converted Llama saved with its tokenizer embedded, the hub cache gone, a data cache
    of its own; and raw text with its ids under that tokenizer."""
    model = zoo.from_pretrained("org/llama")
    file = zoo.save(model, tmp_path / "llama.safetensors")
    words = "\n".join(bundled_lines(600))
    ids = zoo.tokenizer(str(zoo.interop.hub.local_or_snapshot("org/llama", None)[0])).encode(words)
    no_cache(monkeypatch, tmp_path)
    monkeypatch.setenv("ZOO_DATA_CACHE", str(tmp_path / "data-cache"))
    text = tmp_path / "text.txt"
    text.write_text(words, encoding="utf-8")
    return file, text, ids


def test_fine_tuning_a_checkpoint_prepares_text_with_the_tokenizer_it_embeds(
    offline: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No --tokenizer: the text is tokenized with the checkpoint's own (a 400-token BPE), not
    bytes; the run keeps that tokenizer's files, so its checkpoint produces text too."""
    from zoo.training.shards import open_data

    file, text, ids = embedded_checkpoint(tmp_path, monkeypatch)
    run = tmp_path / "run"
    argv = ["train", str(file), "--data", str(text), "-o", str(run), "--steps", "1", "--batch-size", "2"]
    assert main([*argv, "--seq-len", "16", "--quiet"]) == 0
    tuned = zoo.checkpoint.inspect(run).metadata
    data = open_data(Path(tuned["training"]["data"]))
    assert data.tokenizer != "bytes" and data.vocab_size == VOCAB
    tokens = torch.cat([*data.train.shards, *data.val.shards]).tolist()
    assert tokens[: len(ids) - 1] == ids[: len(ids) - 1]  # the embedded tokenizer's ids, in order
    assert set(tuned["tokenizer"]["files"]) >= {"tokenizer.json"}
    assert zoo.generate_text(zoo.load(run), PROMPT, max_new_tokens=3)  # the run carries it on


def test_eval_of_a_checkpoint_tokenizes_raw_text_with_the_tokenizer_it_embeds(
    offline: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    file, text, ids = embedded_checkpoint(tmp_path, monkeypatch)
    assert main(["eval", str(file), "--data", str(text), "--split", "train", "--seq-len", "16", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert len(ids) * 0.95 - 16 <= result["tokens"] <= len(ids)  # windows of the BPE's tokens, not of bytes
    assert len(ids) < 0.8 * len(text.read_bytes())  # which are fewer


def test_data_of_another_tokenizer_than_the_embedded_one_is_refused_by_name(
    offline: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Bytes fit a 400-token vocabulary, so only the tokenizer can tell: refused before any
    step, the message naming the checkpoint's tokenizer, not the cache folder it was unpacked to."""
    from helpers import prepared_bytes

    file, _, _ = embedded_checkpoint(tmp_path, monkeypatch)
    data = prepared_bytes(tmp_path, 4000)
    argv = ["train", str(file), "--data", str(data), "-o", str(tmp_path / "run"), "--steps", "1", "--seq-len", "16"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "tokenized with 'bytes' but the model was trained with the tokenizer its checkpoint carries" in err
    assert not (tmp_path / "run").exists()
    assert main(["eval", str(file), "--data", str(data), "--seq-len", "16"]) == 1
    assert "tokenized with 'bytes' but the model was trained with the tokenizer its checkpoint carries" in (
        capsys.readouterr().err
    )


def test_eval_of_a_hub_model_names_its_tokenizer_by_its_id(
    offline: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from helpers import prepared_bytes

    data = prepared_bytes(tmp_path, 4000)
    assert main(["eval", "org/gpt2", "--data", str(data), "--seq-len", "16"]) == 1
    err = capsys.readouterr().err
    assert "but the model was trained with 'org/gpt2'" in err and "snapshots" not in err


@pytest.mark.parametrize("preset", ["gpt2-small", "llama-style-small", "pythia-160m"])
def test_an_export_ends_text_where_the_zoo_ends_it(preset: str, hub: Path, tmp_path: Path) -> None:
    """A model built here states no end-of-sequence id: its export's is the end-of-text of
    the tokenizer it carries (where ``generate_text`` ends), else none, never the
    architecture's default (Llama's and NeoX's 2, an ordinary token of this vocabulary);
    one its ``generation_config`` states wins."""
    folder = hub.parent / "saved" / "gpt2"  # a byte-level BPE of VOCAB tokens
    eot = zoo.tokenizer(folder).eot_token_id
    model = tiny(preset, vocab_size=VOCAB, max_seq_len=64)
    model.tokenizer_record = embedded_record(folder_files(folder))
    plain = tiny(preset, vocab_size=VOCAB, max_seq_len=64)
    stated = tiny(preset, vocab_size=VOCAB, max_seq_len=64)
    stated.generation_config = {"eos_token_id": [7, 9]}
    for made, expected in ((model, eot), (plain, None), (stated, [7, 9])):
        out = zoo.to_hf(made, tmp_path / f"export-{len(list(tmp_path.iterdir()))}")
        assert json.loads((out / "config.json").read_text())["eos_token_id"] == expected
        exported = transformers.AutoModelForCausalLM.from_pretrained(out)
        assert exported.generation_config.eos_token_id == expected
    assert eot not in (None, 2)


def test_a_hub_gpt2_uses_its_tokenizer_json_without_tiktoken(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """GPT-2's own 50,257-token vocabulary as the hub holds it (tokenizer.json beside
    vocab.json and merges.txt), with only the hub extra installed: the README's snippet
    produces transformers' text and never asks for tiktoken."""
    import sys

    import zoo.text.loading

    folder = tmp_path / "gpt2"
    folder.mkdir()
    for name, data in gpt2_files().items():
        (folder / name).write_bytes(data)
    fast = transformers.AutoTokenizer.from_pretrained(folder)
    fast.save_pretrained(folder)  # transformers writes tokenizer.json, as the hub's folder holds it
    assert (folder / "tokenizer.json").is_file()
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_embd=16, n_layer=1, n_head=2, n_positions=64)
    reference = transformers.GPT2LMHeadModel(config).eval()
    reference.save_pretrained(folder)
    put_in_hub_cache(tmp_path / "home" / "hub", "openai-community/gpt2", folder)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setitem(sys.modules, "tiktoken", None)  # as if not installed
    zoo.text.loading._gpt2.cache_clear()
    try:
        text = zoo.generate_text(zoo.from_pretrained("openai-community/gpt2"), "Hello, world", max_new_tokens=6)
        with pytest.raises(zoo.ConfigError, match="zoo-lm\\[text\\]"):
            zoo.tokenizer("gpt2")  # the name alone does need tiktoken: the model did not use it
    finally:
        zoo.text.loading._gpt2.cache_clear()
    ids = fast("Hello, world", return_tensors="pt").input_ids
    with torch.no_grad():
        out = reference.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=6, do_sample=False)
    assert text == fast.decode(out[0, ids.shape[1] :]) and text

"""Models by hub id: a hub cache in a temporary HF_HOME, laid out as huggingface_hub lays
it out, filled with models transformers saved with random weights; no network
(HF_HUB_OFFLINE=1). GPT-2 (one file, sharded, .bin only, two revisions), Llama and
GPT-NeoX with tokenizer files."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

import pytest
import torch

import zoo
from helpers import TINY, put_in_hub_cache, train_tokenizer
from zoo.cli import main
from zoo.interop.hf import config_from_hf
from zoo.interop.pretrained import config_mismatches, pretrained_presets
from zoo.nn.config import preset_dict, preset_pretrained, validate_config

transformers = pytest.importorskip("transformers")
huggingface_hub = pytest.importorskip("huggingface_hub")
pytest.importorskip("tokenizers")

VOCAB = 400
GPT2 = dict(n_embd=32, n_layer=2, n_head=4, n_positions=64, vocab_size=VOCAB, bos_token_id=0, eos_token_id=0)
EOT = {"eos_token": "<|endoftext|>"}  # GPT-2's design: an empty prompt starts from it


def _gpt2(folder: Path, seed: int, **save: Any) -> Path:
    torch.manual_seed(seed)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**GPT2))
    model.save_pretrained(folder, **save)
    return folder


def _bin_only(folder: Path, seed: int) -> Path:
    """A legacy folder: config.json and pytorch_model.bin (a plain state dict, torch.save)."""
    torch.manual_seed(seed)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**GPT2))
    model.config.save_pretrained(folder)
    torch.save(model.state_dict(), folder / "pytorch_model.bin")
    return folder


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """HF_HOME with five models, and what each was saved from."""
    root = tmp_path_factory.mktemp("hub")
    home, saved = root / "home", root / "saved"
    cache = home / "hub"
    bpe = train_tokenizer(saved / "bpe", "bpe", VOCAB, **EOT)
    commits: dict[str, str] = {}

    folder = _gpt2(saved / "gpt2", 1)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (folder / name).write_bytes((bpe / name).read_bytes())
    commits["org/gpt2-tiny"] = put_in_hub_cache(cache, "org/gpt2-tiny", folder)
    commits["org/gpt2-tiny@v2"] = put_in_hub_cache(cache, "org/gpt2-tiny", _gpt2(saved / "gpt2-v2", 2), revision="v2")
    sharded = _gpt2(saved / "gpt2-sharded", 3, max_shard_size="40KB")
    assert (sharded / "model.safetensors.index.json").is_file()
    commits["org/gpt2-sharded"] = put_in_hub_cache(cache, "org/gpt2-sharded", sharded)
    commits["org/gpt2-bin"] = put_in_hub_cache(cache, "org/gpt2-bin", _bin_only(saved / "gpt2-bin", 4))

    llama = train_tokenizer(saved / "llama", "metaspace", VOCAB, bos_token="<s>", eos_token="</s>")
    torch.manual_seed(5)
    ids = {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": None}
    config = transformers.LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=VOCAB, max_position_embeddings=128, **ids,
    )  # fmt: skip
    transformers.LlamaForCausalLM(config).save_pretrained(llama)
    commits["org/llama-tiny"] = put_in_hub_cache(cache, "org/llama-tiny", llama)

    neox = train_tokenizer(saved / "neox", "bpe", VOCAB, **EOT)
    torch.manual_seed(6)
    config = transformers.GPTNeoXConfig(
        hidden_size=32, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, vocab_size=VOCAB,
        max_position_embeddings=128, rotary_pct=0.5, bos_token_id=0, eos_token_id=0,
    )  # fmt: skip
    transformers.GPTNeoXForCausalLM(config).save_pretrained(neox)
    commits["org/neox-tiny"] = put_in_hub_cache(cache, "org/neox-tiny", neox)
    return {"home": home, "cache": cache, "commits": commits}


@pytest.fixture(autouse=True)
def offline(hub: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HOME", str(hub["home"]))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


REPOS = ["org/gpt2-tiny", "org/gpt2-sharded", "org/gpt2-bin", "org/llama-tiny", "org/neox-tiny"]


@pytest.mark.parametrize("repo", REPOS)
def test_the_cache_is_the_clients_own_layout(hub: dict[str, Any], repo: str) -> None:
    commit = hub["commits"][repo]
    found = huggingface_hub.snapshot_download(repo, cache_dir=str(hub["cache"]), local_files_only=True)
    assert Path(found) == hub["cache"] / f"models--{repo.replace('/', '--')}" / "snapshots" / commit
    config = huggingface_hub.try_to_load_from_cache(repo, "config.json", cache_dir=str(hub["cache"]))
    assert isinstance(config, str) and json.loads(Path(config).read_text())["vocab_size"] == VOCAB
    scanned = {r.repo_id: r for r in huggingface_hub.scan_cache_dir(hub["cache"]).repos}
    assert repo in scanned and commit in {rev.commit_hash for rev in scanned[repo].revisions}


@pytest.mark.parametrize("repo", REPOS)
def test_logits_match_transformers(hub: dict[str, Any], repo: str) -> None:
    model = zoo.from_pretrained(repo)
    folder = huggingface_hub.snapshot_download(repo, cache_dir=str(hub["cache"]), local_files_only=True)
    reference = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    ids = torch.randint(0, VOCAB, (2, 17), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(model(ids), reference(ids).logits, atol=1e-4, rtol=0)
    assert not model.training


def test_revision_picks_the_snapshot(hub: dict[str, Any]) -> None:
    ids = torch.arange(10)[None]
    main_logits = zoo.from_pretrained("org/gpt2-tiny")(ids)
    v2 = zoo.from_pretrained("org/gpt2-tiny", revision="v2")(ids)
    assert not torch.allclose(main_logits, v2)
    by_commit = zoo.from_pretrained("org/gpt2-tiny", revision=hub["commits"]["org/gpt2-tiny@v2"])(ids)
    torch.testing.assert_close(by_commit, v2, atol=0, rtol=0)
    torch.testing.assert_close(zoo.from_hf("org/gpt2-tiny")(ids), main_logits, atol=0, rtol=0)
    with pytest.raises(zoo.InteropError, match=r"'org/gpt2-tiny' at revision 'nope' is not in the hub cache"):
        zoo.from_pretrained("org/gpt2-tiny", revision="nope")


def test_dtype_and_device(hub: dict[str, Any]) -> None:
    model = zoo.from_pretrained("org/gpt2-tiny", dtype="bf16", device="cpu")
    assert model.tok_emb.weight.dtype == torch.bfloat16


def test_offline_and_not_cached_names_the_id_the_cache_and_the_fix(hub: dict[str, Any]) -> None:
    with pytest.raises(zoo.InteropError) as err:
        zoo.from_pretrained("org/not-cached")
    message = str(err.value)
    assert "'org/not-cached'" in message and str(hub["cache"]) in message
    assert "HF_HUB_OFFLINE" in message and "hf download org/not-cached" in message
    assert err.value.__cause__ is None or not isinstance(err.value, KeyError)


def test_unreachable_hub_is_a_zoo_error(hub: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """Online, with the client's endpoint on a closed local port: the client's connection
    error becomes one InteropError naming the id and the cache."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("HF_HUB_ETAG_TIMEOUT", "1")
    with pytest.raises(zoo.InteropError) as err:
        zoo.from_pretrained("org/not-cached")
    message = str(err.value)
    assert "'org/not-cached'" in message and str(hub["cache"]) in message and "unreachable" in message
    # A cached model needs no network even when online.
    assert zoo.from_pretrained("org/gpt2-tiny").config.vocab_size == VOCAB


def test_a_local_folder_still_works_and_revision_needs_an_id(hub: dict[str, Any], tmp_path: Path) -> None:
    folder = _gpt2(tmp_path / "local", 1)
    ids = torch.arange(5)[None]
    torch.testing.assert_close(zoo.from_pretrained(folder)(ids), zoo.from_pretrained("org/gpt2-tiny")(ids))
    with pytest.raises(zoo.InteropError, match="revision='v2' picks a version of a hub id"):
        zoo.from_pretrained(folder, revision="v2")
    with pytest.raises(zoo.InteropError, match="no config.json.*hub id"):
        zoo.from_hf(tmp_path)


def test_tokenizer_by_hub_id(hub: dict[str, Any]) -> None:
    tok = zoo.tokenizer("org/llama-tiny")
    reference = transformers.AutoTokenizer.from_pretrained(
        huggingface_hub.snapshot_download("org/llama-tiny", cache_dir=str(hub["cache"]), local_files_only=True)
    )
    text = "To be, or not to be: that is the question."
    assert tok.encode(text) == reference.encode(text) and tok.encode(text)[0] == 1  # <s> first
    assert tok.decode(tok.encode(text)) == reference.decode(reference.encode(text))
    assert (tok.eot_token_id, tok.bos_token_id) == (2, 1)


# -- presets with weights -----------------------------------------------------------------

# The released config.json of each preset's weights (the fields that define the model).
RELEASED = {
    "openai-community/gpt2": {"n_embd": 768, "n_head": 12, "n_layer": 12},
    "openai-community/gpt2-medium": {"n_embd": 1024, "n_head": 16, "n_layer": 24},
    "openai-community/gpt2-large": {"n_embd": 1280, "n_head": 20, "n_layer": 36},
    "openai-community/gpt2-xl": {"n_embd": 1600, "n_head": 25, "n_layer": 48},
    "EleutherAI/pythia-160m": {"hidden_size": 768, "intermediate_size": 3072, "num_attention_heads": 12, "num_hidden_layers": 12},
    "EleutherAI/pythia-410m": {"hidden_size": 1024, "intermediate_size": 4096, "num_attention_heads": 16, "num_hidden_layers": 24},
}  # fmt: skip
GPT2_RELEASED = {
    "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "activation_function": "gelu_new",
    "attn_pdrop": 0.1, "embd_pdrop": 0.1, "resid_pdrop": 0.1, "layer_norm_epsilon": 1e-05, "n_ctx": 1024,
    "n_positions": 1024, "vocab_size": 50257, "bos_token_id": 50256, "eos_token_id": 50256,
}  # fmt: skip
NEOX_RELEASED = {
    "architectures": ["GPTNeoXForCausalLM"], "model_type": "gpt_neox", "hidden_act": "gelu", "layer_norm_eps": 1e-05,
    "max_position_embeddings": 2048, "rotary_emb_base": 10000, "rotary_pct": 0.25, "tie_word_embeddings": False,
    "use_parallel_residual": True, "vocab_size": 50304, "bos_token_id": 0, "eos_token_id": 0,
}  # fmt: skip


def released_config(repo: str) -> dict[str, Any]:
    base = GPT2_RELEASED if repo.startswith("openai-community/") else NEOX_RELEASED
    return {**base, **RELEASED[repo]}


def test_the_presets_name_their_weights() -> None:
    assert pretrained_presets() == {
        "gpt2-small": "openai-community/gpt2",
        "gpt2-medium": "openai-community/gpt2-medium",
        "gpt2-large": "openai-community/gpt2-large",
        "gpt2-xl": "openai-community/gpt2-xl",
        "pythia-160m": "EleutherAI/pythia-160m",
        "pythia-410m": "EleutherAI/pythia-410m",
        "qwen3-0.6b": "Qwen/Qwen3-0.6B",  # the families' presets: tests/test_families_*.py check each
        "gemma-2b": "google/gemma-2b",
        "olmo-2-1b": "allenai/OLMo-2-0425-1B",
        "phi-3-mini": "microsoft/Phi-3-mini-4k-instruct",
        "granite-3-2b": "ibm-granite/granite-3.0-2b-base",
        "command-r": "CohereForAI/c4ai-command-r-v01",
        "starcoder2-3b": "bigcode/starcoder2-3b",
        "gemma-2-2b": "google/gemma-2-2b",
        "gemma-3-1b": "google/gemma-3-1b-pt",
        "gpt-neo-125m": "EleutherAI/gpt-neo-125m",
        "smollm3-3b": "HuggingFaceTB/SmolLM3-3B",
        "mixtral-8x7b": "mistralai/Mixtral-8x7B-v0.1",
        "qwen1.5-moe-a2.7b": "Qwen/Qwen1.5-MoE-A2.7B",
        "qwen3-30b-a3b": "Qwen/Qwen3-30B-A3B",
        "olmoe-1b-7b": "allenai/OLMoE-1B-7B-0924",
        "deepseek-v2-lite": "deepseek-ai/DeepSeek-V2-Lite",  # tests/test_presets_released.py checks these
        "deepseek-v3": "deepseek-ai/DeepSeek-V3",
        "lfm2-1.2b": "LiquidAI/LFM2-1.2B",
        "bamba-9b": "ibm-ai-platform/Bamba-9B",
        "nemotron-h-8b": "nvidia/Nemotron-H-8B-Base-8K",
        "mamba-codestral-7b": "mistralai/Mamba-Codestral-7B-v0.1",
        "mamba-2.8b": "state-spaces/mamba-2.8b-hf",
        "falcon-mamba-7b": "tiiuae/falcon-mamba-7b",
        "ernie-4.5-0.3b": "baidu/ERNIE-4.5-0.3B-PT",
        "bloom-560m": "bigscience/bloom-560m",
        "falcon-7b": "tiiuae/falcon-7b",
        "gpt-j-6b": "EleutherAI/gpt-j-6b",
        "llama-3.2-1b": "meta-llama/Llama-3.2-1B",
        "mpt-7b": "mosaicml/mpt-7b",
        "opt-125m": "facebook/opt-125m",
        "phi-2": "microsoft/phi-2",
        "santacoder": "bigcode/gpt_bigcode-santacoder",
        "stablelm-2-1.6b": "stabilityai/stablelm-2-1_6b",
    }
    assert preset_pretrained("gpt2-small-modern") is None  # extends gpt2-small, not its weights


@pytest.mark.parametrize(("preset", "repo"), sorted(p for p in pretrained_presets().items() if p[1] in RELEASED))
def test_each_preset_is_the_config_of_its_released_weights(preset: str, repo: str) -> None:
    hf = released_config(repo)
    imported = validate_config(config_from_hf(hf))
    assert config_mismatches(zoo.get_config(preset), imported, hf) == []
    wrong = {**hf, "vocab_size": hf["vocab_size"] + 1}
    found = config_mismatches(zoo.get_config(preset), validate_config(config_from_hf(wrong)), wrong)
    assert len(found) == 1 and found[0].startswith("vocab_size (the preset has")


class WeightsPlugin:
    """A plugin whose presets name weights in the test cache, declared as the built-ins do."""

    @zoo.hookimpl
    def zoo_register_presets(self, register: Any) -> None:
        fields = {
            "vocab_size": VOCAB, "max_seq_len": 64, "d_model": 32, "n_layers": 2, "n_heads": 4, "dropout": 0.1,
            "activation": "gelu_tanh", "bias": True, "tie_embeddings": True,
        }  # fmt: skip
        register("tiny-gpt2", {**fields, "preset": {"pretrained": "org/gpt2-tiny", "description": "tiny"}})
        wrong = {**fields, "n_layers": 3}
        register("tiny-gpt2-wrong", {**wrong, "preset": {"pretrained": "org/gpt2-tiny"}})
        register("tiny-gpt2-random", fields)


@pytest.fixture
def registry() -> zoo.Registry:
    return zoo.Registry(plugins=[WeightsPlugin()])


def test_build_pretrained_loads_the_weights_into_the_preset(registry: zoo.Registry) -> None:
    model = zoo.build("tiny-gpt2", pretrained=True, registry=registry)
    ids = torch.arange(12)[None]
    torch.testing.assert_close(model(ids), zoo.from_pretrained("org/gpt2-tiny")(ids), atol=0, rtol=0)
    assert not model.training and model.config == zoo.get_config("tiny-gpt2", registry=registry)
    eager = zoo.build("tiny-gpt2", pretrained=True, registry=registry, attention="eager", dropout=0.0)
    torch.testing.assert_close(eager(ids), model(ids), atol=1e-5, rtol=0)
    v2 = zoo.build("tiny-gpt2", pretrained=True, revision="v2", registry=registry)
    assert not torch.allclose(v2(ids), model(ids))


def test_build_pretrained_refuses_what_the_weights_cannot_be(registry: zoo.Registry) -> None:
    with pytest.raises(zoo.InteropError, match=r"differs from the preset in n_layers \(the preset has 3"):
        zoo.build("tiny-gpt2-wrong", pretrained=True, registry=registry)
    with pytest.raises(zoo.ConfigError, match="override.*n_layers.*shapes") as err:
        zoo.build("tiny-gpt2", pretrained=True, n_layers=1, registry=registry)
    assert "pretrained=False" in str(err.value)
    with pytest.raises(zoo.ConfigError, match="activation"):
        zoo.build("tiny-gpt2", pretrained=True, activation="relu", registry=registry)
    with pytest.raises(zoo.PresetError, match="names no weights.*tiny-gpt2"):
        zoo.build("tiny-gpt2-random", pretrained=True, registry=registry)
    with pytest.raises(zoo.PresetError, match="unknown preset"):
        zoo.build("tiny-gpt3", pretrained=True, registry=registry)
    with pytest.raises(zoo.ConfigError, match="pretrained=True takes a preset name"):
        zoo.build(zoo.get_config("gpt2-small", **TINY), pretrained=True)
    with pytest.raises(zoo.ConfigError, match="revision= picks"):
        zoo.build("gpt2-small", revision="main")


def test_a_preset_names_its_weights_by_a_hub_id(tmp_path: Path) -> None:
    class Bad:
        @zoo.hookimpl
        def zoo_register_presets(self, register: Any) -> None:
            register("bad", {**preset_dict("gpt2-small"), "preset": {"pretrained": "not an id!"}})

    with pytest.raises(zoo.PresetError, match="is not a hub id"):
        zoo.get_config("bad", registry=zoo.Registry(plugins=[Bad()]))


def test_zoo_list_shows_the_weights(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "gpt2-*", "--json"]) == 0
    entries = {e["name"]: e for e in json.loads(capsys.readouterr().out)}
    assert entries["gpt2-medium"]["pretrained"] == "openai-community/gpt2-medium"
    assert entries["gpt2-small-modern"]["pretrained"] is None
    assert main(["list", "pythia-*"]) == 0
    out = capsys.readouterr().out
    assert "weights" in out and "EleutherAI/pythia-410m" in out


# -- the command line ---------------------------------------------------------------------


def test_zoo_generate_on_a_cached_llama_id_prints_text_through_its_tokenizer(
    hub: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["generate", "org/llama-tiny", "--prompt", "To be", "--max-new-tokens", "8", "--no-echo"]) == 0
    out = capsys.readouterr().out.rstrip("\n")
    model = zoo.from_pretrained("org/llama-tiny")
    tok = zoo.tokenizer("org/llama-tiny")
    ids = torch.tensor([tok.encode("To be")])
    new = model.generate(ids, 8, eos_token_id=tok.eot_token_id)[0, ids.shape[1] :].tolist()
    new = new[: new.index(2)] if 2 in new else new
    assert out == tok.decode(ids[0].tolist() + new)[len(tok.decode(ids[0].tolist())) :] and out.strip()


def test_zoo_convert_and_info_take_an_id_and_the_checkpoint_carries_its_tokenizer(
    hub: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "llama.safetensors"
    assert main(["convert", "--from-hf", "org/llama-tiny", "-o", str(out)]) == 0
    meta = zoo.checkpoint.inspect(out).metadata
    snapshot = huggingface_hub.snapshot_download("org/llama-tiny", cache_dir=str(hub["cache"]), local_files_only=True)
    embedded = {name: base64.b64decode(text) for name, text in meta["tokenizer"]["embedded"].items()}
    assert embedded["tokenizer.json"] == (Path(snapshot) / "tokenizer.json").read_bytes()  # the file travels with it
    capsys.readouterr()
    assert main(["generate", "org/llama-tiny", "--prompt", "To be", "--max-new-tokens", "5", "--no-echo"]) == 0
    from_hub = capsys.readouterr().out
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-home"))  # no cache at all: the checkpoint alone
    assert main(["generate", str(out), "--prompt", "To be", "--max-new-tokens", "5", "--no-echo"]) == 0
    assert capsys.readouterr().out == from_hub
    monkeypatch.setenv("HF_HOME", str(hub["home"]))
    assert main(["info", "org/gpt2-tiny", "--json"]) == 0
    assert '"d_model": 32' in capsys.readouterr().out


def test_a_run_folder_keeps_a_local_tokenizer_beside_its_versions(hub: dict[str, Any], tmp_path: Path) -> None:
    folder = Path(
        huggingface_hub.snapshot_download("org/neox-tiny", cache_dir=str(hub["cache"]), local_files_only=True)
    )
    local = tmp_path / "neox"
    local.mkdir()
    for f in folder.iterdir():
        (local / f.name).write_bytes(f.read_bytes())
    run = tmp_path / "run"
    assert main(["convert", "--from-hf", str(local), "-o", str(run)]) == 0
    assert (run / "tokenizer" / "tokenizer.json").is_file()
    text = zoo.generate_text(str(run), "To be", max_new_tokens=4)
    assert text == zoo.generate_text("org/neox-tiny", "To be", max_new_tokens=4)
    (run / "tokenizer" / "tokenizer.json").write_text("{}")
    with pytest.raises(zoo.CheckpointError, match="changed"):
        zoo.generate_text(str(run), "To be", max_new_tokens=4)


def test_the_hub_client_is_named_when_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # as if not installed
    with pytest.raises(zoo.InteropError, match=r"pip install 'zoo-lm\[hub\]'"):
        zoo.from_pretrained("org/gpt2-tiny")
    assert os.environ["HF_HUB_OFFLINE"] == "1"


# -- runs know their tokenizer ------------------------------------------------------------

TRAIN = [
    "--steps",
    "2",
    "--batch-size",
    "2",
    "--seq-len",
    "16",
    "--eval-every",
    "2",
    "--save-every",
    "2",
    "--threads",
    "1",
]


def _text(tmp_path: Path) -> Path:
    from helpers import bundled_lines

    path = tmp_path / "text.txt"
    path.write_text("\n".join(bundled_lines(400)), encoding="utf-8")
    return path


def test_zoo_generate_on_a_byte_level_run_prints_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """As `make demo` does: bytes data, a byte-level model, then generate with no --tokenizer."""
    data, run = tmp_path / "data", tmp_path / "run"
    assert main(["data", "prepare", str(_text(tmp_path)), "-o", str(data), "--tokenizer", "bytes"]) == 0
    sets = ["--set", "n_layers=1", "--set", "d_model=32", "--set", "n_heads=2", "--set", "vocab_size=256"]
    assert (
        main(["train", "gpt2-small", *sets, "--set", "max_seq_len=64", "--data", str(data), "--out", str(run), *TRAIN])
        == 0
    )
    capsys.readouterr()
    assert main(["generate", str(run), "--prompt", "ROMEO:", "--max-new-tokens", "12", "--seed", "0", "--sample"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("ROMEO:") and len(out.rstrip("\n")) > len("ROMEO:")
    again = zoo.generate_text(str(run), "ROMEO:", max_new_tokens=12, seed=0, do_sample=True)
    assert out.rstrip("\n") == "ROMEO:" + again
    assert main(["eval", str(run), "--data", str(_text(tmp_path)), "--seq-len", "16", "--batches", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["tokens"] > 0  # raw text, tokenised with the run's bytes


def test_data_prepared_with_a_hub_tokenizer_travels_with_the_run(
    hub: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data, run = tmp_path / "data", tmp_path / "run"
    assert (
        main(["data", "prepare", str(_text(tmp_path)), "-o", str(data), "--tokenizer", "org/llama-tiny", "--json"]) == 0
    )
    described = json.loads(capsys.readouterr().out)
    assert described["tokenizer"] == "org/llama-tiny" and described["vocab_size"] == VOCAB
    manifest = json.loads((data / "manifest.json").read_text())
    assert set(manifest["tokenizer_files"]) >= {"tokenizer.json", "tokenizer_config.json"}
    tok = zoo.tokenizer("org/llama-tiny")
    first = torch.from_file(str(data / "train-00000.bin"), size=8, dtype=torch.uint16).tolist()
    assert first == tok.encode(_text(tmp_path).read_text())[:8]  # <s> first, as AutoTokenizer encodes it
    sets = ["--set", "n_layers=1", "--set", "d_model=32", "--set", "n_heads=2", "--set", f"vocab_size={VOCAB}"]
    assert (
        main(["train", "gpt2-small", *sets, "--set", "max_seq_len=64", "--data", str(data), "--out", str(run), *TRAIN])
        == 0
    )
    assert (run / "tokenizer" / "tokenizer.json").read_bytes() == (data / "tokenizer" / "tokenizer.json").read_bytes()
    capsys.readouterr()
    assert main(["generate", str(run), "--prompt", "To be", "--max-new-tokens", "6", "--no-echo"]) == 0
    out = capsys.readouterr().out.rstrip("\n")
    model = zoo.load(run)
    ids = tok.encode("To be")
    expected = zoo.generate_text(model, "To be", max_new_tokens=6, tokenizer=tok)
    assert out == expected and model.generate(torch.tensor([ids]), 6).shape[1] <= len(ids) + 6


def test_fine_tuning_a_hub_id(hub: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    args = ["train", "org/gpt2-tiny", "--data", str(_text(tmp_path)), "--out", str(run), *TRAIN]
    assert main(args) == 0
    tuned = zoo.load(run)
    assert tuned.config.vocab_size == VOCAB and not torch.equal(
        tuned.tok_emb.weight, zoo.from_pretrained("org/gpt2-tiny").tok_emb.weight
    )
    assert (run / "tokenizer" / "tokenizer.json").is_file()  # the id's tokenizer, kept with the run
    capsys.readouterr()
    assert (
        main(["eval", "org/gpt2-tiny", "--data", str(_text(tmp_path)), "--seq-len", "16", "--batches", "1", "--json"])
        == 0
    )
    assert json.loads(capsys.readouterr().out)["tokens"] > 0


def test_generation_arguments_from_transformers(hub: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    model = zoo.from_pretrained("org/gpt2-tiny")
    ids = torch.tensor([[5, 6, 7]])
    by_length = model.generate(ids, max_length=10)
    torch.testing.assert_close(by_length, model.generate(ids, 7), atol=0, rtol=0)
    assert by_length.shape == (1, 10)
    many = model.generate(ids, 5, do_sample=True, num_return_sequences=3, seed=1)
    assert many.shape == (3, 8) and torch.equal(
        many, model.generate(ids, 5, do_sample=True, num_return_sequences=3, seed=1)
    )
    assert not torch.equal(many[0], many[1])  # three samples, not one repeated
    gen = torch.Generator().manual_seed(1)
    assert torch.equal(many, model.generate(ids, 5, do_sample=True, num_return_sequences=3, generator=gen))
    eos = int(model.generate(ids, 1)[0, -1])  # the greedy next token, made the end of sequence
    padded = model.generate(ids, 4, eos_token_id=eos, pad_token_id=399)
    assert padded[0, 3] == eos and (padded[0, 4:] == 399).all()
    with pytest.raises(zoo.InputError, match="not both"):
        model.generate(ids, 5, max_length=9)
    with pytest.raises(zoo.InputError, match="seed= or generator="):
        model.generate(ids, 5, seed=1, generator=torch.Generator())
    with pytest.raises(zoo.InputError, match="max_length=2 counts the prompt"):
        model.generate(ids, max_length=2)
    texts = zoo.generate_text("org/gpt2-tiny", "To be", max_length=8, do_sample=True, num_return_sequences=2, seed=3)
    assert isinstance(texts, list) and len(texts) == 2
    assert texts == zoo.generate_text(
        "org/gpt2-tiny", "To be", max_length=8, do_sample=True, num_return_sequences=2, seed=3
    )
    args = ["generate", "org/gpt2-tiny", "--prompt", "To be", "--max-length", "8", "--sample", "--seed", "3"]
    assert main([*args, "--num-return-sequences", "2", "--no-echo"]) == 0
    from zoo.cli.render import terminal_text  # control characters are shown as escapes

    assert capsys.readouterr().out == "".join(f"[{i}/2] {terminal_text(t)}\n" for i, t in enumerate(texts, 1))


def test_generate_help_states_every_default(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["generate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for flag in ("--max-new-tokens N new tokens (default 50)", "--temperature TEMPERATURE", "--top-k N",
                 "--top-p FRACTION", "--repetition-penalty PENALTY", "--num-return-sequences N", "--pad-token-id ID", "--seed N",
                 "--tokenizer NAME|DIR|ID", "--revision REV", "--version N"):  # fmt: skip
        assert flag in text
    import argparse

    from zoo.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for action in sub.choices["generate"]._actions:
        shown = action.help != argparse.SUPPRESS  # an old spelling, hidden from --help, states nothing
        takes_value = (
            shown and action.option_strings and action.nargs != 0 and action.dest not in ("prompt", "max_length")
        )
        if takes_value:
            assert "default" in (action.help or ""), f"{action.option_strings[0]} does not state its default"

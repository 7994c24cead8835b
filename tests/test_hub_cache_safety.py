"""The hub cache is a closed world: every path the zoo reads from it (``refs/REVISION``,
the snapshot folder, the files in it) stays inside the repository's cache folder once
links are resolved, for every reader (weights, config, tokenizer, the CLI, a
checkpoint's recorded tokenizer); revisions are ref names or commits; the commands the
zoo prints to paste are quoted; a hub that never answers ends in a ZooError; a
config.json field that is null is named. Caches are laid out as huggingface_hub lays
them out (``helpers.put_in_hub_cache``), with HF_HUB_OFFLINE=1 unless said otherwise."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

import zoo
from helpers import bundled_lines, put_in_hub_cache, train_tokenizer
from zoo import pipelines
from zoo.cli import main
from zoo.interop.hf import config_from_hf
from zoo.interop.hub import check_revision

transformers = pytest.importorskip("transformers")
huggingface_hub = pytest.importorskip("huggingface_hub")
pytest.importorskip("tokenizers")

REPO = "org/tiny"
FOLDER = "models--org--tiny"
VOCAB = 400
GPT2 = dict(n_embd=32, n_layer=2, n_head=4, n_positions=64, vocab_size=VOCAB, bos_token_id=0, eos_token_id=0)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A hub cache holding one GPT-2 with its tokenizer (copied afresh for each test)."""
    root = tmp_path_factory.mktemp("pristine")
    saved = root / "saved"
    train_tokenizer(saved, "bpe", VOCAB, eos_token="<|endoftext|>")
    torch.manual_seed(0)
    transformers.GPT2LMHeadModel(transformers.GPT2Config(**GPT2)).save_pretrained(saved)
    commit = put_in_hub_cache(root / "home" / "hub", REPO, saved)
    return {"home": root / "home", "commit": commit}


@pytest.fixture
def cache(pristine: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A copy of the pristine cache in this test's HF_HOME (links copied as links), and a
    folder outside it holding a working copy of the snapshot, for escapes to lead to."""
    home = tmp_path / "home"
    shutil.copytree(pristine["home"], home, symlinks=True)
    repo = home / "hub" / FOLDER
    snapshot = repo / "snapshots" / pristine["commit"]
    outside = tmp_path / "outside" / pristine["commit"]
    shutil.copytree(snapshot, outside)  # links followed: real files, a snapshot that loads
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return {"repo": repo, "snapshot": snapshot, "outside": outside, "commit": pristine["commit"]}


# -- every reader of the cache -------------------------------------------------------------


def _checkpoint_recording(tmp_path: Path, record: dict[str, Any]) -> Path:
    """A zoo checkpoint whose metadata records the tokenizer ``record``."""
    model = zoo.build("gpt2-small", n_layers=1, d_model=32, n_heads=2, vocab_size=VOCAB, max_seq_len=16)
    return zoo.save(model, tmp_path / "model.safetensors", metadata={"tokenizer": record})


def _cli(args: list[str]) -> Callable[[Path], int]:
    """A reader that is a zoo command: ``OUT`` in ``args`` becomes a path in the test's
    folder, ``TEXT`` a small text file there."""

    def run(tmp: Path) -> int:
        (tmp / "text.txt").write_text("\n".join(bundled_lines(200)), encoding="utf-8")
        return main([str(tmp / "o") if a == "OUT" else str(tmp / "text.txt") if a == "TEXT" else a for a in args])

    return run


TRAIN = ["--data", "TEXT", "--out", "OUT", "--steps", "1", "--batch-size", "2", "--seq-len", "16", "--threads", "1"]
EVAL = ["--data", "TEXT", "--seq-len", "16", "--batches", "1", "--json"]


#: Each reader: what it calls, and the snapshot file it reads first (the one an escape replaces).
READERS: dict[str, tuple[Callable[[Path], Any], str]] = {
    "from_pretrained (weights)": (lambda tmp: zoo.from_pretrained(REPO), "model.safetensors"),
    "from_hf (weights)": (lambda tmp: zoo.from_hf(REPO), "model.safetensors"),
    "load_with_tokenizer (weights)": (lambda tmp: pipelines.load_with_tokenizer(REPO), "model.safetensors"),
    "tokenizer": (lambda tmp: zoo.tokenizer(REPO), "tokenizer.json"),
    "recorded tokenizer": (
        lambda tmp: pipelines.recorded_tokenizer(_checkpoint_recording(tmp, {"hub": REPO})),
        "tokenizer.json",
    ),
    "zoo info ID (config)": (_cli(["info", REPO, "--json"]), "config.json"),
    "zoo generate ID": (_cli(["generate", REPO, "--prompt", "a", "--max-new-tokens", "1"]), "tokenizer.json"),
    "zoo convert --from-hf ID": (_cli(["convert", "--from-hf", REPO, "-o", "OUT"]), "model.safetensors"),
    "zoo train ID (fine-tune)": (_cli(["train", REPO, *TRAIN]), "model.safetensors"),
    "zoo eval ID": (_cli(["eval", REPO, *EVAL]), "config.json"),
}


def _relative_link(link: Path, target: Path) -> None:
    link.symlink_to(os.path.relpath(target, link.parent))


def _escape(kind: str, cache: dict[str, Any], file: str) -> Path:
    """Make the cache lead outside in the way ``kind`` names; returns the path named."""
    repo, snapshot, outside, commit = cache["repo"], cache["snapshot"], cache["outside"], cache["commit"]
    ref = repo / "refs" / "main"
    if kind == "refs/main holds a relative path":
        ref.write_text(os.path.relpath(outside, repo / "snapshots"))
        return ref
    if kind == "refs/main links outside":
        (outside.parent / "main").write_text(commit)
        ref.unlink()
        ref.symlink_to(outside.parent / "main")
        return ref
    if kind.startswith(("the refs folder", "the blobs folder", "the repository folder")):
        moved = repo if "repository" in kind else repo / kind.split()[1]
        target = outside.parent / moved.name
        shutil.move(moved, target)
        moved.symlink_to(target)
        return moved
    if kind == "a snapshot file is a link loop":
        link = snapshot / file
        link.unlink()
        link.symlink_to(link.name)
        return link
    if kind.startswith("the snapshot folder links"):
        shutil.rmtree(snapshot)
        _relative_link(snapshot, outside) if "relative" in kind else snapshot.symlink_to(outside)
        return snapshot
    link = snapshot / file
    link.unlink()
    _relative_link(link, outside / file) if "relative" in kind else link.symlink_to(outside / file)
    return link


ESCAPES = [
    "refs/main holds a relative path",
    "refs/main links outside",
    "the snapshot folder links outside (relative)",
    "the snapshot folder links outside (absolute)",
    "a snapshot file links outside (relative)",
    "a snapshot file links outside (absolute)",
    "a snapshot file is a link loop",
    "the refs folder links outside",
    "the blobs folder links outside",
    "the repository folder links outside",
]


@pytest.mark.parametrize(
    "reader", [pytest.param(r, marks=pytest.mark.slow) if "train" in r else r for r in READERS]
)  # training even one step takes seconds
def test_every_reader_works_on_the_clients_layout(cache: dict[str, Any], reader: str, tmp_path: Path) -> None:
    """The control: the same readers on the untouched cache load (the CLI ones exit 0)."""
    call, _ = READERS[reader]
    result = call(tmp_path)
    assert result == 0 if reader.startswith("zoo ") else result is not None


@pytest.mark.parametrize("kind", ESCAPES)
@pytest.mark.parametrize("reader", READERS)
def test_a_cache_that_leads_outside_is_refused_by_every_reader(
    cache: dict[str, Any], reader: str, kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    call, file = READERS[reader]
    named = _escape(kind, cache, file)
    if reader.startswith("zoo "):
        assert call(tmp_path) != 0, "the command went ahead"
        message = capsys.readouterr().err
    else:
        with pytest.raises(zoo.ZooError) as err:
            call(tmp_path)
        message = str(err.value)
    flat = " ".join(message.split())  # the CLI wraps long lines
    assert str(named) in flat.replace("\n", ""), message
    assert ("link loop" if "loop" in kind else "outside") in flat and "Delete that cache entry" in flat, message
    assert shlex.join(["rm", "-r", str(cache["repo"])]) in flat, message
    assert not (tmp_path / "o").exists()


def test_a_link_between_blobs_inside_the_repository_is_fine(cache: dict[str, Any]) -> None:
    """Links anywhere inside the repository's folder are the client's own kind."""
    link = cache["snapshot"] / "config.json"
    target = link.resolve()
    link.unlink()
    link.symlink_to(target)  # absolute, but into ../../blobs
    assert zoo.from_pretrained(REPO).config.vocab_size == VOCAB


# -- revisions are names or commits ---------------------------------------------------------

BAD_REVISIONS = ["../../..", "/etc", "main/../../x", "a b", "main && curl x | sh", ".hidden", "x.lock", "a//b", "@", ""]
GOOD_REVISIONS = ["main", "v2", "refs/pr/1", "release-1.0", "a" * 40]

#: Each API edge that takes a revision.
REVISION_EDGES: dict[str, Callable[[str], Any]] = {
    "from_pretrained": lambda rev: zoo.from_pretrained(REPO, revision=rev),
    "from_hf": lambda rev: zoo.from_hf(REPO, revision=rev),
    "load_model": lambda rev: pipelines.load_model(REPO, revision=rev),
    "tokenizer": lambda rev: zoo.tokenizer(REPO, revision=rev),
    "build pretrained": lambda rev: zoo.build("gpt2-small", pretrained=True, revision=rev),
    "generate_text": lambda rev: zoo.generate_text(REPO, "a", max_new_tokens=1, revision=rev),
    "tokenizer_record": lambda rev: pipelines.tokenizer_record(REPO, rev),
}


@pytest.mark.parametrize("revision", BAD_REVISIONS)
@pytest.mark.parametrize("edge", REVISION_EDGES)
def test_a_revision_that_is_not_a_ref_name_is_refused_at_every_edge(
    cache: dict[str, Any], edge: str, revision: str
) -> None:
    with pytest.raises(zoo.ZooError, match="not a branch, tag or commit name"):
        REVISION_EDGES[edge](revision)


@pytest.mark.parametrize("revision", ["../../..", "/etc", "main && curl x | sh"])
@pytest.mark.parametrize(
    "command", [["generate", REPO, "--prompt", "a"], ["convert", "--from-hf", REPO, "-o", "never.safetensors"]]
)
def test_cli_revision_is_checked_by_the_flag(
    cache: dict[str, Any], command: list[str], revision: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main([*command, "--revision", revision])
    assert exited.value.code == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "--revision" in err and "not a branch, tag or commit name" in err
    assert not Path("never.safetensors").exists()


@pytest.mark.parametrize("revision", GOOD_REVISIONS)
def test_ref_names_and_commits_pass(revision: str) -> None:
    assert check_revision(revision) == revision


def test_a_revision_cannot_read_a_ref_outside_refs(cache: dict[str, Any]) -> None:
    """A ref planted outside refs/ (``../outside``) is never read: refused before the cache."""
    (cache["repo"] / "planted").write_text(cache["commit"])
    with pytest.raises(zoo.ZooError, match="not a branch, tag or commit name"):
        zoo.from_pretrained(REPO, revision="../planted")


# -- commands to paste are quoted -------------------------------------------------------------


def test_a_recorded_revision_with_shell_syntax_comes_back_quoted(cache: dict[str, Any], tmp_path: Path) -> None:
    """A revision git accepts but a shell would run (``main&&curl$(x)|sh``) is quoted in the
    offline advice; one with spaces is not a revision at all and names the checkpoint."""
    hostile = "main&&curl$(x)|sh"
    assert check_revision(hostile) == hostile
    file = _checkpoint_recording(tmp_path, {"hub": "org/not-cached", "revision": hostile})
    with pytest.raises(zoo.ZooError) as err:
        pipelines.recorded_tokenizer(file)
    message = str(err.value)
    assert shlex.join(["hf", "download", "org/not-cached", "--revision", hostile]) in message
    assert f"--revision {hostile}" not in message

    spaced = tmp_path / "spaced"
    spaced.mkdir()
    file = _checkpoint_recording(spaced, {"hub": "org/not-cached", "revision": "main && curl x | sh"})
    with pytest.raises(zoo.CheckpointError) as err:
        pipelines.recorded_tokenizer(file)
    message = str(err.value)
    assert str(file) in message and "not a branch, tag or commit name" in message
    assert "--revision main && curl" not in message


# -- a hub that never answers -------------------------------------------------------------------


@pytest.fixture
def silent_hub() -> Iterator[str]:
    """A TCP server on 127.0.0.1 that accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        for conn in held:
            conn.close()
        server.close()


@pytest.mark.parametrize("reader", ["from_pretrained", "tokenizer"])
def test_a_hub_that_never_answers_ends_in_a_zoo_error_within_the_timeout(
    cache: dict[str, Any], silent_hub: str, reader: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_ENDPOINT", silent_hub)
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", silent_hub)
    monkeypatch.setenv("HF_HUB_ETAG_TIMEOUT", "0.5")
    started = time.monotonic()
    with pytest.raises(zoo.InteropError) as err:
        zoo.from_pretrained("org/not-cached") if reader == "from_pretrained" else zoo.tokenizer("org/not-cached")
    assert time.monotonic() - started < 10
    message = str(err.value)
    assert "did not answer within 0.5 s" in message and silent_hub in message
    assert "HF_HUB_ETAG_TIMEOUT" in message and "HF_HUB_OFFLINE=1" in message


@pytest.mark.parametrize("value", ["abc", "0", "-1", "inf"])
def test_a_bad_timeout_setting_is_named(cache: dict[str, Any], value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_HUB_ETAG_TIMEOUT", value)
    with pytest.raises(zoo.InteropError, match="HF_HUB_ETAG_TIMEOUT=.*is not a number of seconds"):
        zoo.from_pretrained("org/not-cached")


# -- config.json fields that are null ------------------------------------------------------------


def _hf_configs() -> dict[str, dict[str, Any]]:
    """config.json of each family the zoo reads, as transformers writes it."""
    small = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, vocab_size=VOCAB)
    llama = dict(small, intermediate_size=64, num_key_value_heads=2, max_position_embeddings=128)
    configs = {
        "gpt2": transformers.GPT2Config(**GPT2),
        "llama": transformers.LlamaConfig(**llama),
        "mistral": transformers.MistralConfig(**llama),
        "qwen2": transformers.Qwen2Config(**llama),
        "gpt_neox": transformers.GPTNeoXConfig(**small, intermediate_size=128, max_position_embeddings=128),
    }
    found = {}
    for name, config in configs.items():
        hf = config.to_dict()
        hf["architectures"] = [type(config).__name__.replace("Config", "ForCausalLM").replace("GPT2For", "GPT2LMHead")]
        found[name] = hf
    return found


#: The numbers each converter reads that a config.json may leave out but not set to null.
NULLS = [
    ("gpt2", "n_positions", "n_positions"),
    *[(f, "max_position_embeddings", "max_position_embeddings") for f in ("llama", "mistral", "qwen2", "gpt_neox")],
    *[(f, "rms_norm_eps", "rms_norm_eps") for f in ("llama", "mistral", "qwen2")],
    ("gpt_neox", "layer_norm_eps", "layer_norm_eps"),
    *[(f, "rope_theta", "rope_theta") for f in ("llama", "qwen2")],
    ("llama", "partial_rotary_factor", "partial_rotary_factor"),
    ("gpt_neox", "rotary_pct", "rotary_pct"),
    ("gpt_neox", "rotary_emb_base", "rotary_emb_base"),
    ("llama", "hidden_size", "hidden_size"),  # required: "missing"
    ("gpt_neox", "num_attention_heads", "num_attention_heads"),
]


@pytest.mark.parametrize(("family", "field", "named"), NULLS)
def test_a_null_number_in_config_json_is_named(family: str, field: str, named: str) -> None:
    hf = _hf_configs()[family]
    assert config_from_hf(hf)  # the control: as transformers writes it, it converts
    hf[field] = None
    if field in ("rope_theta", "partial_rotary_factor", "rotary_pct", "rotary_emb_base"):
        hf.pop("rope_parameters", None)  # the older layout: the top-level field is the one read
    with pytest.raises(zoo.InteropError) as err:
        config_from_hf(hf)
    assert named in str(err.value) and ("null" in str(err.value) or "missing" in str(err.value))


@pytest.mark.parametrize("family", ["gpt2", "llama", "mistral", "qwen2", "gpt_neox"])
def test_no_field_of_config_json_of_the_wrong_type_is_a_raw_exception(family: str) -> None:
    """Every field transformers writes, set to null or to a value of another type: a
    ZooError naming the field, or a config (never a TypeError, KeyError, ValueError)."""
    base = _hf_configs()[family]
    for field in base:
        for value in (None, "12", [1], {}, 1.5, True):
            hf = {**base, field: value}
            try:
                config_from_hf(hf)
            except zoo.ZooError as err:
                if field not in ("architectures", "model_type", "transformers_version"):
                    assert field in str(err) or "rope" in str(err), (field, value, str(err))


def test_from_pretrained_on_a_cached_config_with_a_null_context_names_it(cache: dict[str, Any]) -> None:
    """The end to end case: a cached Llama-style config.json with max_position_embeddings null."""
    link = cache["snapshot"] / "config.json"
    hf = _hf_configs()["llama"]
    hf["max_position_embeddings"] = None
    target = link.resolve()
    link.unlink()
    target.write_text(json.dumps(hf))  # the blob itself, as an edited cache would hold it
    link.symlink_to(os.path.relpath(target, link.parent))
    with pytest.raises(zoo.InteropError, match="max_position_embeddings is null"):
        zoo.from_pretrained(REPO)

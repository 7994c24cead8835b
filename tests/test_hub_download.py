"""Downloads through the real huggingface_hub client, from a hub served on 127.0.0.1
(``LocalHub``: the hub's API over local folders, reached through ``HF_ENDPOINT``): only
the files the zoo reads are fetched, one weight format, shards by their index; the cache
answers later calls without the network; missing ids and revisions are ZooErrors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from helpers import LocalHub, train_tokenizer

transformers = pytest.importorskip("transformers")
pytest.importorskip("huggingface_hub")

GPT2 = dict(n_embd=32, n_layer=2, n_head=4, n_positions=64, vocab_size=400, bos_token_id=0, eos_token_id=0)


def _repos(root: Path) -> dict[str, Path]:
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**GPT2))
    both = root / "both"  # safetensors, a legacy pickle of the same weights, and files the zoo never reads
    model.save_pretrained(both)
    train_tokenizer(both, "bpe", 400, eos_token="<|endoftext|>")
    torch.save(model.state_dict(), both / "pytorch_model.bin")
    (both / "README.md").write_text("# a model card\n")
    (both / "flax_model.msgpack").write_bytes(b"\0" * 64)
    sharded = root / "sharded"
    model.save_pretrained(sharded, max_shard_size="40KB")
    torch.save(model.state_dict(), sharded / "pytorch_model.bin")
    legacy = root / "legacy"
    model.config.save_pretrained(legacy)
    torch.save(model.state_dict(), legacy / "pytorch_model.bin")
    return {"org/both": both, "org/sharded": sharded, "org/legacy": legacy}


SCRIPT = r"""
import json, os, sys, urllib.request, zoo, torch
out = {}
for step in sys.argv[1:]:
    if step == "PHASE":  # marks the server's log: what follows is the second round
        urllib.request.urlopen(os.environ["HF_ENDPOINT"] + "/phase").close()
        continue
    if step == "OFFLINE":
        os.environ["HF_HUB_OFFLINE"] = "1"
        continue
    name, repo, revision = step.split(",")
    try:
        model = zoo.from_pretrained(repo, revision=revision or None)
        with torch.no_grad():
            out[name] = float(model(torch.arange(8)[None]).double().sum())
    except zoo.ZooError as err:
        out[name] = "error: " + str(err)
print(json.dumps(out))
"""


def test_only_what_the_zoo_reads_is_downloaded_and_the_cache_comes_first(tmp_path: Path) -> None:
    repos = _repos(tmp_path / "repos")
    hub = LocalHub(repos)
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_ENDPOINT=hub.url, HF_HOME=str(home), HF_HUB_OFFLINE="0", HF_HUB_DISABLE_XET="1")
    env.update(HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_DISABLE_PROGRESS_BARS="1", OMP_NUM_THREADS="1")
    loads = ["both,org/both,", "sharded,org/sharded,", "legacy,org/legacy,"]
    steps = [*loads, "id,org/no-such-model,", "revision,org/legacy,v9", "PHASE"]
    steps += [s.replace(",", "-again,", 1) for s in loads] + ["OFFLINE", f"pinned,org/both,{hub.commits['org/both']}"]
    try:
        done = subprocess.run(
            [sys.executable, "-c", SCRIPT, *steps], env=env, capture_output=True, text=True, timeout=300, check=False
        )
    finally:
        hub.close()
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])

    reference = transformers.GPT2LMHeadModel.from_pretrained(repos["org/both"]).eval()
    with torch.no_grad():
        expected = float(reference(torch.arange(8)[None]).logits.double().sum())
    for name in ("both", "sharded", "legacy"):
        assert abs(found[name] - expected) < 1e-3, found
        assert found[f"{name}-again"] == found[name]
    assert found["pinned"] == found["both"]
    both = hub.fetched("org/both")
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= both
    assert not {"pytorch_model.bin", "README.md", "flax_model.msgpack"} & both  # one format, no model card
    shards = set(json.loads((repos["org/sharded"] / "model.safetensors.index.json").read_text())["weight_map"].values())
    assert len(shards) > 1 and shards <= hub.fetched("org/sharded")
    assert "pytorch_model.bin" not in hub.fetched("org/sharded")
    assert "pytorch_model.bin" in hub.fetched("org/legacy")  # no safetensors there: the pickle, weights_only
    second = hub.requests[hub.requests.index("GET /phase") + 1 :]
    assert second == [], second  # complete snapshots: the second round and the offline one need no network

    assert found["id"].startswith("error: 'org/no-such-model': no such model on the hub, or it is private")
    assert str(home / "hub") in found["id"]
    assert found["revision"].startswith("error: 'org/legacy' at revision 'v9': the repository has no such revision")

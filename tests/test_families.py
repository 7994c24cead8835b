"""Every architecture the zoo reads, checked the same way against transformers: a tiny random
model whose every weight is perturbed (no zero bias or unit norm hides a mix-up), saved by
transformers with a ``tokenizer.json``, then

- logits within 1e-4 in float32 and greedy tokens equal through the KV cache (past any
  sliding window the case sets);
- exported back with ``zoo.to_hf``, loaded by transformers and equal again;
- read by hub id from a hub cache in a temporary ``HF_HOME`` (offline), tokenizer included;
- hook points that name every layer (no scores where a hybrid's layer convolves), and
  ``zoo probe`` on a zoo checkpoint of it.

The first check runs for every case by default; the other three for ``REPRESENTATIVE``
cases by default and for the rest under the slow marker (``make test-all``).

The cases are in ``tests/family_cases/``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from family_cases import Family, all_cases

import zoo
import zoo.cli
from helpers import put_in_hub_cache, train_tokenizer

transformers = pytest.importorskip("transformers")
pytest.importorskip("zoo_modern")

VOCAB = 320  # byte-level BPE needs 256 symbols; `zoo probe --tokenizer bytes` needs 256 ids
SEQ = 24  # prompts of 12 then 12 greedy tokens: past the windows the cases set (8 or fewer)
CASES = all_cases()


def perturb_(model: torch.nn.Module, seed: int) -> None:
    """Every parameter random: norm scales around 1, everything else around 0."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=p.dtype) * 0.2
            scale = "norm" in name.lower() and name.endswith("weight") and p.dim() == 1
            p.copy_(noise + 1.0 if scale else noise)


def reference_model(case: Family, seed: int = 0) -> Any:
    config_class = getattr(transformers, case.config)
    model_class = getattr(transformers, case.model)
    ids = {"bos_token_id": None, "eos_token_id": None, "pad_token_id": None}
    lengths = {"max_position_embeddings": 64} if case.model_type != "gpt2" else {"n_positions": 64}
    config = config_class(**{**lengths, **ids, **case.fields, "vocab_size": VOCAB})  # a case may need an id (CWM)
    torch.manual_seed(seed)
    model = model_class(config).eval()
    perturb_(model, seed)
    if getattr(config, "tie_word_embeddings", False):
        model.tie_weights()
    return model


@pytest.fixture(scope="module")
def tokenizer_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return train_tokenizer(tmp_path_factory.mktemp("tokenizer"), "bpe", VOCAB - 8, eos_token="<|endoftext|>")


def saved(case: Family, folder: Path, tokenizer: Path, seed: int = 0) -> tuple[Any, Path]:
    """The reference model of ``case`` and the folder transformers saved it to, tokenizer included."""
    model = reference_model(case, seed)
    model.save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(tokenizer / name, folder / name)
    return model, folder


def tokens(batch: int = 2, seq: int = SEQ, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, seq), generator=torch.Generator().manual_seed(seed))


def assert_same(model: Any, reference: Any) -> None:
    """Equal logits (<= 1e-4) and equal greedy tokens, KV-cached on both sides."""
    idx = tokens()
    with torch.no_grad():
        torch.testing.assert_close(model(idx), reference(idx).logits, atol=1e-4, rtol=0)
        prompt = idx[:, : SEQ // 2]
        new = SEQ - prompt.shape[1]
        ours = model.generate(prompt, new, min_new_tokens=new)  # as transformers is asked: EOS kept out
        theirs = reference.generate(
            prompt, max_new_tokens=new, min_new_tokens=new, do_sample=False, attention_mask=torch.ones_like(prompt)
        )
    assert torch.equal(ours, theirs)


def by_id(cases: list[Family]) -> Any:
    return pytest.mark.parametrize("case", cases, ids=[case.id for case in cases])


#: The cases whose export, hub-cache and hook checks run by default: GPT-2 (built in), a
#: Llama-style model, an MoE and an ALiBi one. Every other case runs them under the slow
#: marker (`make test-all`); its logits and greedy tokens are checked by default.
REPRESENTATIVE = ("gpt2", "llama", "mixtral", "bloom")


def representative_first(cases: list[Family]) -> Any:
    """``by_id``, with the cases outside ``REPRESENTATIVE`` marked slow."""
    params = [pytest.param(c, id=c.id, marks=() if c.id in REPRESENTATIVE else pytest.mark.slow) for c in cases]
    return pytest.mark.parametrize("case", params)


@by_id(CASES)
def test_logits_and_greedy_tokens_equal_transformers(case: Family, tmp_path: Path, tokenizer_files: Path) -> None:
    reference, folder = saved(case, tmp_path / "hf", tokenizer_files)
    assert_same(zoo.from_hf(folder), reference)


@representative_first([case for case in CASES if case.export])
def test_exports_to_transformers_and_back(case: Family, tmp_path: Path, tokenizer_files: Path) -> None:
    reference, folder = saved(case, tmp_path / "hf", tokenizer_files)
    out = zoo.to_hf(zoo.from_hf(folder), tmp_path / "out", architecture=case.model)
    assert json.loads((out / "config.json").read_text())["architectures"] == [case.model]
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    assert type(reloaded) is type(reference)
    with torch.no_grad():
        torch.testing.assert_close(reloaded(tokens()).logits, reference(tokens()).logits, atol=1e-4, rtol=0)
    assert_same(zoo.from_hf(out), reloaded)


@representative_first(CASES)
def test_reads_by_hub_id_from_the_cache_with_its_tokenizer(
    case: Family, tmp_path: Path, tokenizer_files: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reference, folder = saved(case, tmp_path / "hf", tokenizer_files)
    home = tmp_path / "home"
    put_in_hub_cache(home / "hub", f"org/{case.id}", folder)
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model = zoo.from_pretrained(f"org/{case.id}")
    with torch.no_grad():
        torch.testing.assert_close(model(tokens()), reference(tokens()).logits, atol=1e-4, rtol=0)
    text = "To be, or not to be: that is the question."
    ours = zoo.tokenizer(f"org/{case.id}")
    theirs = transformers.AutoTokenizer.from_pretrained(folder)
    assert ours.encode(text) == theirs.encode(text)
    assert ours.decode(ours.encode(text)) == theirs.decode(theirs.encode(text))


@representative_first(CASES)
def test_hook_points_name_every_layer_and_probe_runs(
    case: Family, tmp_path: Path, tokenizer_files: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, folder = saved(case, tmp_path / "hf", tokenizer_files)
    model = zoo.from_hf(folder)
    names = model.hook_points()
    layers = range(model.config.n_layers)
    attending = [
        i for i in layers if getattr(model.blocks[i].attn, "attends", True)
    ]  # a hybrid's convolutions have no scores
    mixing = [
        i for i in layers if any(True for _ in model.blocks[i].attn.parameters())
    ]  # Nemotron-H's MLP layers mix none
    for point, where in (("attn.hook_pattern", attending), ("attn.hook_z", mixing), ("hook_resid_post", layers)):
        assert {f"blocks.{i}.{point}" for i in where} <= set(names), point
    assert {f"blocks.{i}.attn.hook_pattern" for i in layers if i not in attending}.isdisjoint(names)
    assert {f"blocks.{i}.attn.hook_z" for i in layers if i not in mixing}.isdisjoint(names)
    if attending:  # a state-space model (Mamba-2) has no layer that attends
        _, cache = model.run_with_cache(tokens(seq=8), names=[f"blocks.{attending[-1]}.attn.hook_pattern"])
        pattern = cache[f"blocks.{attending[-1]}.attn.hook_pattern"]
        if getattr(model.blocks[attending[-1]].attn, "sinks", None) is None:
            torch.testing.assert_close(pattern.sum(-1), torch.ones(pattern.shape[:-1]))  # rows of a softmax
        else:  # a learned sink takes a share of every row (Granite SWA, GPT-OSS)
            assert bool(((pattern.sum(-1) > 0) & (pattern.sum(-1) < 1)).all())
    checkpoint = tmp_path / "model.safetensors"
    zoo.save(model, checkpoint)
    args = ["probe", str(checkpoint), "--json", "--tokenizer", "bytes", "--seq-len", "16", "--batch-size", "2"]
    assert zoo.cli.main(args) == 0
    result = json.loads(capsys.readouterr().out)
    assert len(json.dumps(result)) > 100 and "NaN" not in json.dumps(result)


def test_every_installed_converter_has_a_family_case() -> None:
    """A converter added to the zoo or a plugin must join ``tests/family_cases``."""
    assert {c.model_type for c in zoo.default_registry().converters()} <= {case.model_type for case in CASES}
    assert set(REPRESENTATIVE) <= {case.id for case in CASES if case.export}  # each runs every check by default
    assert len({case.model for case in CASES}) >= 50  # issue 40: fifty architectures with equal logits


@representative_first(CASES)
def test_beams_and_left_padded_prompts_equal_transformers(case: Family, tmp_path: Path, tokenizer_files: Path) -> None:
    """Beam search (``num_beams``, ``length_penalty``, ``num_return_sequences``), EOS with
    ``min_new_tokens``, over a left-padded batch: token for token as transformers, for
    every architecture (its cache reordered between beams, its window rolling)."""
    reference, folder = saved(case, tmp_path / "hf", tokenizer_files)
    model = zoo.from_hf(folder)
    prompt = tokens()[:, : SEQ // 2]
    mask = torch.ones_like(prompt)
    mask[1, :3] = 0  # the second prompt is 3 tokens shorter
    free = model.generate(prompt, 6, attention_mask=mask)
    eos = [int(free[0, prompt.shape[1] + 3]), int(free[1, prompt.shape[1] + 1])]  # said early: they end beams
    runs: list[dict[str, Any]] = [
        dict(num_beams=3, num_return_sequences=2, length_penalty=0.5, early_stopping=True),
        dict(num_beams=2, length_penalty=-1.0, early_stopping="never"),
        dict(min_new_tokens=4),
    ]
    for settings in runs:
        common = dict(max_new_tokens=SEQ // 2, eos_token_id=eos, pad_token_id=0, attention_mask=mask, **settings)
        with torch.no_grad():
            theirs = reference.generate(prompt, do_sample=False, **common)
            ours = model.generate(prompt, **common)
        assert torch.equal(ours, theirs), settings

"""Training: the loop (data order, schedule, weight decay, clipping, evaluation,
determinism), then the engine (prepared data, the loop under torchrun with gloo: DDP and
FSDP2, exact resume, checkpoints across world sizes, evaluation) and every bad input
refused."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import warnings
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import torch

import zoo
from helpers import default_sigint
from zoo.cli import main
from zoo.training import (
    CurvePoint,
    TrainSettings,
    WindowSampler,
    World,
    bundled_corpus,
    evaluate,
    fit,
    learning_rate,
    load_corpus,
    mean_loss,
    open_data,
    parameter_groups,
    prepare,
    run_loop,
    train,
    training_batches,
    validation_batches,
)
from zoo.training.state import read_state, state_path

# One worker for the whole file: its module fixtures (runs, data, answers) are built once, not once per worker.
pytestmark = pytest.mark.xdist_group("training")

# -- the loop ------------------------------------------------------------------------------

TEXT = bundled_corpus()[:40_000]
LOOP_SETTINGS = TrainSettings(steps=30, batch_size=8, seq_len=32, lr=3e-3, eval_every=10, eval_batches=2, threads=1)


def small_lm(vocab: int = 256, **overrides: Any) -> zoo.DecoderLM:
    torch.manual_seed(0)
    sizes = dict(vocab_size=vocab, max_seq_len=32, d_model=32, n_layers=1, n_heads=2, dropout=0.1)
    return zoo.build("gpt2-small", **{**sizes, **overrides})


@pytest.fixture(scope="module")
def corpus() -> Any:
    return load_corpus(TEXT, tokenizer="bytes")


def test_bundled_corpus_is_public_domain_shakespeare_under_1mb() -> None:
    data = resources.files("zoo").joinpath("data", "shakespeare.txt").read_bytes()
    assert len(data) <= 1_000_000
    text = data.decode("utf-8")
    assert text.startswith("Hamlet\n") and "HAMLET:\nTo be, or not to be" in text
    assert "**" not in text and "#" not in text  # plain text, not the Markdown it came from


def test_the_second_corpus_is_the_standard_librarys_source_the_same_each_time() -> None:
    """``--data python-stdlib``: the library's own modules, never its tests, in path order,
    up to the limit; the same text on every call, named with its Python and its hash."""
    import hashlib
    import sysconfig

    from zoo.training import stdlib_corpus

    text, source = stdlib_corpus(200_000)
    again, _ = stdlib_corpus(200_000)
    assert text == again and 190_000 < len(text.encode()) <= 200_000
    assert hashlib.sha256(text.encode()).hexdigest()[:12] in source and sys.version.split()[0] in source
    first = min((p for p in Path(sysconfig.get_paths()["stdlib"]).glob("*.py")), key=lambda p: p.name).read_text(
        encoding="utf-8"
    )
    assert text.startswith(first[:1000]) and "import unittest" not in text[:2000]


def test_bytes_corpus_keeps_the_tail_for_validation(corpus: Any) -> None:
    raw = torch.tensor(list(TEXT.encode("utf-8")))
    assert corpus.vocab_size == 256 and corpus.tokenizer == "bytes" and corpus.byte_fallback == 0.0
    assert corpus.val.numel() == int(raw.numel() * 0.1)
    assert torch.equal(torch.cat([corpus.train, corpus.val]), raw)


def test_gpt2_corpus_keeps_frequent_tokens_and_spells_the_rest_in_bytes() -> None:
    try:
        tokenizer = zoo.tokenizer("gpt2")
    except zoo.ZooError as err:
        pytest.skip(f"GPT-2 tokenizer not installed: {err}")
    text = TEXT[:5000]
    ids = tokenizer.encode(text)
    every = load_corpus(text, tokenizer="gpt2", vocab_limit=None)
    assert every.vocab_size == len(set(ids)) and every.byte_fallback == 0.0
    assert every.pieces == [tokenizer.token_bytes(i) for i in sorted(set(ids))]
    assert torch.cat([every.train, every.val]).numel() == len(ids)
    limited = load_corpus(text, tokenizer="gpt2", vocab_limit=100)
    assert limited.vocab_size == 100 + 256 and limited.pieces[100:] == [bytes([b]) for b in range(256)]
    frequent = sorted(set(ids), key=lambda i: (-ids.count(i), i))[:100]
    assert limited.pieces[:100] == [tokenizer.token_bytes(i) for i in sorted(frequent)]
    assert limited.byte_fallback == pytest.approx(1 - sum(ids.count(i) for i in frequent) / len(ids))
    for corpus in (every, limited):  # both represent the text exactly
        assert corpus.decode(torch.cat([corpus.train, corpus.val]).tolist()) == text


def test_unknown_tokenizer_and_short_text_are_refused() -> None:
    with pytest.raises(zoo.ConfigError, match="unknown tokenizer 'bpe'"):
        load_corpus(TEXT, tokenizer="bpe")
    with pytest.raises(zoo.InputError, match="too few to split"):
        load_corpus("ab", tokenizer="bytes")
    with pytest.raises(zoo.ConfigError, match="vocab_limit=0"):
        load_corpus(TEXT, vocab_limit=0)
    with pytest.raises(zoo.InputError, match="too few to split"):
        load_corpus("", tokenizer="bytes")
    with pytest.raises(zoo.InputError, match="text must be a str"):
        load_corpus(TEXT.encode(), tokenizer="bytes")  # type: ignore[arg-type]


def test_training_batches_are_shifted_windows_in_a_seeded_order(corpus: Any) -> None:
    first = training_batches(corpus.train, LOOP_SETTINGS)
    again = training_batches(corpus.train, LOOP_SETTINGS)
    other = training_batches(corpus.train, TrainSettings(**{**LOOP_SETTINGS.__dict__, "seed": 1}))
    x, y = next(first)
    assert x.shape == y.shape == (8, 32)
    assert torch.equal(x[:, 1:], y[:, :-1])  # targets are the next tokens
    assert torch.equal(x, next(again)[0]) and not torch.equal(x, next(other)[0])
    assert not torch.equal(x, next(first)[0])  # the order moves on


def test_validation_windows_are_fixed_and_span_the_split(corpus: Any) -> None:
    batches = validation_batches(corpus.val, LOOP_SETTINGS)
    assert len(batches) == LOOP_SETTINGS.eval_batches and all(x.shape == (8, 32) for x, _ in batches)
    assert torch.equal(batches[0][0][0], corpus.val[:32])
    assert torch.equal(batches[-1][1][-1], corpus.val[-32:])  # the last window ends at the end


def test_warmup_then_cosine_to_the_floor() -> None:
    s = TrainSettings(steps=100, lr=1.0, warmup_steps=10, min_lr_ratio=0.1)
    rates = [learning_rate(i, s) for i in range(s.steps)]
    assert rates[0] == pytest.approx(0.1) and rates[9] == pytest.approx(1.0)
    assert all(a < b for a, b in zip(rates[:9], rates[1:10], strict=True))  # warmup rises
    assert all(a >= b for a, b in zip(rates[10:-1], rates[11:], strict=True))  # then decays
    assert rates[55] == pytest.approx(0.1 + 0.45 * (1 + math.cos(math.pi * 0.5)))
    assert learning_rate(s.steps, s) == pytest.approx(0.1)


def test_weight_decay_on_matrices_only() -> None:
    model = small_lm()
    decay, no_decay = parameter_groups(model, 0.1)
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(p.dim() == 2 for p in decay["params"]) and all(p.dim() == 1 for p in no_decay["params"])
    names = {id(p): n for n, p in model.named_parameters()}
    assert "tok_emb.weight" in {names[id(p)] for p in decay["params"]}  # the tied head, once
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))


def test_training_lowers_the_validation_loss_and_is_deterministic(corpus: Any) -> None:
    first = fit(small_lm(), corpus.train, corpus.val, LOOP_SETTINGS)
    again = fit(small_lm(), corpus.train, corpus.val, LOOP_SETTINGS)
    assert [p.step for p in first.curve] == [0, 10, 20, 30]
    assert first.curve[0].train_loss is None and first.curve[0].val_loss == pytest.approx(math.log(256), abs=0.3)
    assert first.final_val_loss < first.curve[0].val_loss - 1.0
    assert first.curve == again.curve  # bit for bit
    assert first.tokens_seen == 30 * 8 * 32 and first.tokens_per_second > 0


def test_training_leaves_global_state_as_it_found_it(corpus: Any) -> None:
    torch.manual_seed(123)
    threads = torch.get_num_threads()
    expected = torch.rand(3)
    torch.manual_seed(123)
    model = small_lm()  # reseeds: draw again after training instead
    torch.manual_seed(123)
    fills: list[bool] = []  # deterministic mode's NaN fill of new tensors: off while training (work a plain loop skips)
    settings = TrainSettings(**{**LOOP_SETTINGS.__dict__, "steps": 2, "eval_every": 2})
    fill = torch.utils.deterministic
    fit(model, corpus.train, corpus.val, settings, on_step=lambda *_: fills.append(fill.fill_uninitialized_memory))  # type: ignore[attr-defined]
    assert fills == [False, False]
    assert torch.equal(torch.rand(3), expected)
    assert not torch.are_deterministic_algorithms_enabled()
    assert torch.utils.deterministic.fill_uninitialized_memory  # type: ignore[attr-defined]  # off while training only
    assert torch.get_num_threads() == threads
    assert not model.training


def test_gradients_are_clipped_every_step(corpus: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    norms: list[float] = []
    clip = torch.nn.utils.clip_grad_norm_

    def spy(params: Any, max_norm: float, *args: Any, **kwargs: Any) -> torch.Tensor:
        params = list(params)
        total = clip(params, max_norm, *args, **kwargs)
        norms.append(float(torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in params]))))
        return total

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", spy)
    settings = TrainSettings(**{**LOOP_SETTINGS.__dict__, "steps": 3, "eval_every": 3, "grad_clip": 0.05})
    fit(small_lm(), corpus.train, corpus.val, settings)
    assert len(norms) == 3 and max(norms) <= 0.05 + 1e-6


def test_on_step_reports_every_update(corpus: Any) -> None:
    seen: list[tuple[int, float]] = []
    settings = TrainSettings(**{**LOOP_SETTINGS.__dict__, "steps": 4, "eval_every": 2})
    result = fit(small_lm(), corpus.train, corpus.val, settings, on_step=lambda s, loss: seen.append((s, loss)))
    assert [s for s, _ in seen] == [1, 2, 3, 4]
    assert result.curve[1] == CurvePoint(2, pytest.approx((seen[0][1] + seen[1][1]) / 2), result.curve[1].val_loss)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (dict(steps=0), "steps=0 must be > 0"),
        (dict(warmup_steps=50, steps=10), "warmup_steps=50"),
        (dict(min_lr_ratio=2.0), "min_lr_ratio=2.0"),
        (dict(threads=0), "threads=0"),
        (dict(steps="3"), "steps='3' must be an integer"),
        (dict(batch_size=2.5), "batch_size=2.5 must be an integer"),
        (dict(lr=float("nan")), "lr=nan must be a finite number"),
    ],
)
def test_invalid_settings_are_refused(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(zoo.ConfigError, match=message):
        TrainSettings(**settings)


def test_data_the_model_cannot_hold_is_refused(corpus: Any) -> None:
    with pytest.raises(zoo.InputError, match="outside the model's vocabulary of 100"):
        fit(small_lm(vocab=100), corpus.train, corpus.val, LOOP_SETTINGS)
    with pytest.raises(zoo.InputError, match="fewer than seq_len"):
        fit(small_lm(), corpus.train, corpus.val[:20], LOOP_SETTINGS)
    with pytest.raises(zoo.InputError, match="non-negative integer token ids"):
        fit(small_lm(), torch.cat([torch.tensor([-1]), corpus.train]), corpus.val, LOOP_SETTINGS)


def test_divergence_stops_training_with_advice(corpus: Any) -> None:
    settings = TrainSettings(**{**LOOP_SETTINGS.__dict__, "lr": 1e30, "warmup_steps": 0})
    with pytest.raises(zoo.ConfigError, match=r"training diverged; lower the learning rate \(lr=1e\+30\)"):
        fit(small_lm(), corpus.train, corpus.val, settings)


# -- the engine ----------------------------------------------------------------------------

MODEL = [
    "--set",
    "n_layers=2",
    "--set",
    "d_model=32",
    "--set",
    "n_heads=2",
    "--set",
    "vocab_size=256",
    "--set",
    "max_seq_len=64",
    "--set",
    "dropout=0",
]
OVERRIDES: dict[str, Any] = {
    "n_layers": 2,
    "d_model": 32,
    "n_heads": 2,
    "vocab_size": 256,
    "max_seq_len": 64,
    "dropout": 0.0,
}
SETTINGS = TrainSettings(
    steps=6, batch_size=8, seq_len=32, lr=3e-3, eval_every=3, eval_batches=1, grad_clip=0.5, save_every=3, threads=1
)
FLAGS = [
    "--steps",
    "6",
    "--batch-size",
    "8",
    "--seq-len",
    "32",
    "--lr",
    "3e-3",
    "--eval-every",
    "3",
    "--eval-batches",
    "1",
    "--grad-clip",
    "0.5",
    "--save-every",
    "3",
    "--threads",
    "1",
]


def environment(tmp: Path) -> dict[str, str]:
    return {**os.environ, "ZOO_DATA_CACHE": str(tmp / "cache"), "OMP_NUM_THREADS": "1", "COLUMNS": "200"}


def losses(out: Path) -> list[float]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, len(rows) + 1))  # each step once, in order
    return [r["loss"] for r in rows]


def torchrun(tmp: Path, nproc: int, *args: str) -> subprocess.Popen[str]:
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={nproc}",
        "-m",
        "zoo",
        "train",
        *args,
    ]
    return subprocess.Popen(command, env=environment(tmp), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def zoo_cli(tmp: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "zoo", *args],
        env=environment(tmp),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_sigint,  # the Ctrl-C tests' signal acts whatever this run inherited
    )


def finish(process: subprocess.Popen[str], timeout: float = 240) -> str:
    out, err = process.communicate(timeout=timeout)
    assert process.returncode == 0, f"{out}\n{err}"
    return out


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("data")
    text = folder / "text.txt"
    text.write_text(bundled_corpus()[:200_000], encoding="utf-8")
    prepare([text], folder / "prepared", tokenizer="bytes", val_fraction=0.02, workers=1)
    return folder / "prepared"


@pytest.fixture(scope="module")
def runs(data: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One process in this one, and 2-rank DDP and FSDP2 runs under torchrun, at once."""
    tmp = tmp_path_factory.mktemp("runs")
    launched = {
        strategy: torchrun(
            tmp,
            2,
            "gpt2-small",
            *MODEL,
            "--data",
            str(data),
            "--out",
            str(tmp / strategy),
            "--strategy",
            strategy,
            *FLAGS,
        )
        for strategy in ("ddp", "fsdp")
    }
    train("gpt2-small", data, SETTINGS, out=tmp / "single", overrides=OVERRIDES)
    for process in launched.values():
        finish(process)
    return {name: tmp / name for name in ("single", "ddp", "fsdp")}


# -- data ------------------------------------------------------------------------------


def test_prepare_writes_shards_and_a_manifest_that_reads_back(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.txt").write_text("hello world, " * 400, encoding="utf-8")
    (tmp_path / "docs" / "b.txt").write_text("to be or not to be " * 300, encoding="utf-8")
    prepared = prepare([tmp_path / "docs"], tmp_path / "out", tokenizer="bytes", val_fraction=0.1, workers=2)
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["tokenizer"] == "bytes" and manifest["vocab_size"] == 256 and manifest["dtype"] == "uint16"
    assert manifest["zoo_version"] == zoo.__version__ and manifest["documents"] == 2
    assert manifest["splits"]["train"]["tokens"] + manifest["splits"]["val"]["tokens"] == 5200 + 5700
    assert all(s["digest"].startswith("xxh3_128:") for s in manifest["splits"]["train"]["shards"])
    again = open_data(tmp_path / "out", verify=True)
    text = b"".join(bytes(s.tolist()) for s in again.train.shards)
    assert text.startswith(b"hello world, ") and b"to be or not" in text
    assert prepared.train.tokens == again.train.tokens and again.val.n_bytes == manifest["splits"]["val"]["tokens"]
    # A damaged shard is found by verify; a truncated one always.
    shard = tmp_path / "out" / manifest["splits"]["train"]["shards"][0]["file"]
    raw = bytearray(shard.read_bytes())
    raw[10] ^= 1
    shard.write_bytes(bytes(raw))
    with pytest.raises(zoo.InputError, match="damaged"):
        open_data(tmp_path / "out", verify=True)
    shard.write_bytes(bytes(raw[:-2]))
    with pytest.raises(zoo.InputError, match="truncated"):
        open_data(tmp_path / "out")


def test_gpt2_shards_are_uint16_and_end_documents_with_endoftext(tmp_path: Path) -> None:
    pytest.importorskip("tiktoken")
    (tmp_path / "a.txt").write_text("Hello there. " * 50, encoding="utf-8")
    prepared = prepare([tmp_path / "a.txt"], tmp_path / "out", tokenizer="gpt2", val_fraction=0.2)
    assert prepared.train.shards[0].dtype == torch.uint16 and prepared.vocab_size == 50257
    assert int(prepared.val.shards[0][-1]) == 50256
    tok = zoo.tokenizer("gpt2")
    assert tok.decode(prepared.train.shards[0][:3].tolist()) == "Hello there."


def test_raw_text_is_prepared_once_into_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZOO_DATA_CACHE", str(tmp_path / "cache"))
    (tmp_path / "t.txt").write_text(bundled_corpus()[:50_000], encoding="utf-8")
    settings = TrainSettings(**{**SETTINGS.__dict__, "steps": 1, "eval_every": 1, "save_every": None})
    first = train("gpt2-small", tmp_path / "t.txt", settings, overrides=OVERRIDES)
    (manifest,) = (tmp_path / "cache").glob("*/manifest.json")
    assert json.loads(manifest.read_text())["tokenizer"] == "bytes"  # the model's 256 ids imply bytes
    again = train("gpt2-small", str(tmp_path / "t.txt"), settings, overrides=OVERRIDES)
    assert list((tmp_path / "cache").glob("*/manifest.json")) == [manifest] and again.losses == first.losses


def test_the_same_windows_whatever_the_world_size(data: Path) -> None:
    split = open_data(data).train
    a, b = WindowSampler(split, 32, seed=3), WindowSampler(split, 32, seed=3)
    whole = a.draw(8)
    assert torch.equal(whole, b.draw(8))
    x, y = a.windows(whole)
    assert x.shape == (8, 32) and torch.equal(x[:, 1:], y[:, :-1]) and x.dtype == torch.int64


def test_memory_stays_flat_while_streaming_a_corpus_larger_than_the_model(tmp_path: Path) -> None:
    def anon_kib() -> int:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
        pytest.skip("no /proc/self/status RssAnon on this system")
        return 0

    (tmp_path / "big.txt").write_text(bundled_corpus() * 9, encoding="utf-8")  # ~8.4 MB
    prepare([tmp_path / "big.txt"], tmp_path / "data", tokenizer="bytes", val_fraction=0.001, workers=1)
    shard_kib = sum(f.stat().st_size for f in (tmp_path / "data").glob("*.bin")) // 1024
    model = zoo.build("gpt2-small", **{**OVERRIDES, "d_model": 16, "n_layers": 1})
    assert shard_kib * 1024 > 20 * 4 * sum(p.numel() for p in model.parameters())  # 20x the model's bytes
    seen: list[int] = []
    before = anon_kib()
    settings = TrainSettings(steps=100, batch_size=8, seq_len=32, eval_every=100, eval_batches=1, threads=1)
    train(model, tmp_path / "data", settings, on_step=lambda r: seen.append(anon_kib()))
    assert seen[-1] - before < shard_kib // 2, (before, seen[::10], shard_kib)  # the data is never loaded
    assert max(seen[10:]) - seen[10] < 1024, seen[::10]  # and memory does not grow step by step


# -- distributed: the same run on 1 or 2 ranks ---------------------------------------------


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_two_ranks_give_the_losses_of_one_process(runs: dict[str, Path], strategy: str) -> None:
    one, two = losses(runs["single"]), losses(runs[strategy])
    assert len(one) == len(two) == 6
    assert max(abs(a - b) for a, b in zip(one, two)) <= 1e-5, (one, two)
    assert one[-1] < one[0]


def test_a_two_rank_checkpoint_loads_and_resumes_in_one_process(
    runs: dict[str, Path], data: Path, tmp_path: Path
) -> None:
    for strategy in ("ddp", "fsdp"):
        versions = zoo.versions(runs[strategy])
        assert [v.metadata["training"]["step"] for v in versions] == [3, 6]
        assert versions[-1].metadata["training"]["world_size"] == 2
        twin = zoo.load(runs[strategy])
        single = zoo.load(runs["single"])
        for (name, a), (_, b) in zip(twin.state_dict().items(), single.state_dict().items()):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4, msg=name)
    # Drop the last version: resume the 2-rank run from step 3 in this one process.
    out = tmp_path / "resumed"
    shutil.copytree(runs["fsdp"], out)
    (out / "v0002.safetensors").unlink()
    with pytest.warns(UserWarning, match=r"micro-batches of 8 on 1 rank\(s\) where the run had 4 on 2") as said:
        result = train("gpt2-small", data, SETTINGS, out=out, resume=True, overrides=OVERRIDES)
    assert not [w for w in said if "dropout" in str(w.message)]  # no dropout here: no masks to differ
    assert len(result.losses) == 3
    resumed, one = losses(out), losses(runs["single"])
    assert max(abs(a - b) for a, b in zip(resumed, one)) <= 1e-5, (resumed, one)


def test_a_resume_with_another_micro_batch_size_warns_and_one_with_the_same_does_not(
    data: Path, tmp_path: Path
) -> None:
    """Another micro-batch size resumes (it computes the same step) but sums the gradients
    in another order: the resume says so; the same settings resume silently."""
    out = tmp_path / "run"
    first = dataclasses.replace(SETTINGS, steps=3, save_every=3, eval_every=3)
    train("gpt2-small", data, first, out=out, overrides=OVERRIDES)
    again = dataclasses.replace(first, steps=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # the same micro-batches: nothing to say
        train("gpt2-small", data, again, out=out, resume=True, overrides=OVERRIDES)
    other = dataclasses.replace(again, steps=5, micro_batch_size=2)
    with pytest.warns(UserWarning, match=r"micro-batches of 2 on 1 rank\(s\) where the run had 8 on 1"):
        train("gpt2-small", data, other, out=out, resume=True, overrides=OVERRIDES)
    assert [v.metadata["training"]["settings"]["micro_batch_size"] for v in zoo.versions(out)][-1] == 2
    # another number of ranks: the sum order, and with dropout the masks too
    from zoo.training.checkpointing import resume_caveats
    from zoo.training.state import read_state, state_path

    state = read_state(state_path(zoo.versions(out)[-1].path))
    config = zoo.get_config("gpt2-small", **{**OVERRIDES, "dropout": 0.1})
    said = resume_caveats(
        dataclasses.replace(state, world_size=2), dataclasses.replace(other, micro_batch_size=None), 1, config
    )
    assert len(said) == 2 and "where the run had 2 on 2" in said[0] and "dropout=0.1" in said[1], said
    assert resume_caveats(state, other, 1, config) == []  # the run's own settings and ranks


@pytest.mark.slow
def test_a_one_process_checkpoint_resumes_on_two_ranks(runs: dict[str, Path], data: Path, tmp_path: Path) -> None:
    out = tmp_path / "resumed"
    shutil.copytree(runs["single"], out)
    (out / "v0002.safetensors").unlink()
    finish(
        torchrun(
            tmp_path,
            2,
            "gpt2-small",
            *MODEL,
            "--data",
            str(data),
            "--out",
            str(out),
            "--strategy",
            "fsdp",
            "--resume",
            *FLAGS,
        )
    )
    resumed, one = losses(out), losses(runs["single"])
    assert max(abs(a - b) for a, b in zip(resumed, one)) <= 1e-5, (resumed, one)


# -- exact resume in one process --------------------------------------------------------------


def test_killed_and_resumed_run_matches_the_uninterrupted_run_bit_for_bit(data: Path, tmp_path: Path) -> None:
    flags = [
        "gpt2-small",
        *MODEL,
        "--set",
        "dropout=0.1",
        "--data",
        str(data),
        "--steps",
        "40",
        "--batch-size",
        "4",
        "--seq-len",
        "32",
        "--eval-every",
        "10",
        "--eval-batches",
        "1",
        "--save-every",
        "4",
        "--threads",
        "1",
    ]
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    at = random.randint(6, 30)
    process = zoo_cli(tmp_path, "train", *flags, "--out", str(killed))
    metrics = killed / "metrics.jsonl"
    while process.poll() is None and (not metrics.exists() or len(metrics.read_text().splitlines()) < at):
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    process.communicate()
    assert main(["train", *flags, "--out", str(whole)]) == 0  # uninterrupted, here (one thread, as there)
    stopped = len(metrics.read_text().splitlines())
    assert stopped < 40, "the run finished before it was killed; kill it earlier"
    assert main(["train", *flags, "--out", str(killed), "--resume"]) == 0  # here too: only the kill needs a process
    assert losses(killed) == losses(whole), f"killed after step {stopped}"  # bit for bit
    assert zoo.versions(killed)[-1].metadata["training"]["step"] == 40


def test_ctrl_c_exits_cleanly_and_keeps_the_last_version_loadable(data: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    process = zoo_cli(
        tmp_path,
        "train",
        "gpt2-small",
        *MODEL,
        "--data",
        str(data),
        "--out",
        str(out),
        "--steps",
        "500",
        "--batch-size",
        "4",
        "--seq-len",
        "32",
        "--save-every",
        "2",
    )
    while process.poll() is None and not (out / "v0002.safetensors").exists():
        time.sleep(0.01)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    assert "interrupted" in err and "--resume" in err
    assert zoo.load(out).config.n_layers == 2


# -- evaluation ---------------------------------------------------------------------------


def test_evaluate_reports_loss_perplexity_tokens_and_bits_per_byte(runs: dict[str, Path], data: Path) -> None:
    model = zoo.load(runs["single"])
    result = evaluate(model, data, seq_len=32, batch_size=4)
    prepared = open_data(data)
    assert result.tokens == (prepared.val.tokens - 1) // 32 * 32
    assert result.perplexity == pytest.approx(torch.tensor(result.loss).exp().item())
    assert result.bits_per_byte == pytest.approx(result.loss / 0.6931471805599453)  # bytes: one token, one byte
    assert 2.0 < result.loss < 5.6  # trained a little, below log(256)
    part = evaluate(model, data, seq_len=32, batch_size=4, batches=1)
    assert part.tokens == 4 * 32


def test_eval_and_prepare_commands(
    runs: dict[str, Path], data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["eval", str(runs["single"]), "--data", str(data), "--seq-len", "32", "--batches", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["tokens"] == 2 * 8 * 32 and out["perplexity"] > 1 and out["bits_per_byte"] > 0
    (tmp_path / "t.txt").write_text("abc " * 1000, encoding="utf-8")
    assert (
        main(["data", "prepare", str(tmp_path / "t.txt"), "-o", str(tmp_path / "d"), "--tokenizer", "bytes", "--json"])
        == 0
    )
    described = json.loads(capsys.readouterr().out)
    assert described["train_tokens"] + described["val_tokens"] == 4000


# -- bad input: one clear error, nothing lost ------------------------------------------------------


def test_an_empty_corpus_is_refused(tmp_path: Path) -> None:
    (tmp_path / "empty.txt").write_text("", encoding="utf-8")
    with pytest.raises(zoo.InputError, match="empty"):
        prepare([tmp_path / "empty.txt"], tmp_path / "out", tokenizer="bytes")
    (tmp_path / "folder").mkdir()
    with pytest.raises(zoo.InputError, match="the corpus is empty"):
        prepare([tmp_path / "folder"], tmp_path / "out", tokenizer="bytes")
    assert not (tmp_path / "out").exists()  # nothing half-written


def test_a_corpus_shorter_than_one_window_is_refused(tmp_path: Path) -> None:
    (tmp_path / "short.txt").write_text("x" * 2000, encoding="utf-8")
    prepare([tmp_path / "short.txt"], tmp_path / "data", tokenizer="bytes", val_fraction=0.01)
    with pytest.raises(zoo.InputError, match="fewer than seq_len"):
        train("gpt2-small", tmp_path / "data", SETTINGS, overrides=OVERRIDES)


def test_token_ids_outside_the_vocabulary_are_refused(data: Path) -> None:
    with pytest.raises(zoo.InputError, match="outside the model's vocabulary of 100"):
        train("gpt2-small", data, SETTINGS, overrides={**OVERRIDES, "vocab_size": 100})
    with pytest.raises(zoo.InputError, match="outside the model's vocabulary of 100"):
        evaluate(zoo.build("gpt2-small", **{**OVERRIDES, "vocab_size": 100}), data)


def test_a_manifest_with_another_tokenizer_than_the_models_is_refused(runs: dict[str, Path], tmp_path: Path) -> None:
    pytest.importorskip("tiktoken")
    (tmp_path / "t.txt").write_text("Hello there. " * 400, encoding="utf-8")
    prepare([tmp_path / "t.txt"], tmp_path / "gpt2", tokenizer="gpt2", val_fraction=0.2)
    with pytest.raises(zoo.InputError, match="tokenized with 'gpt2' but the model was trained with 'bytes'"):
        train(runs["single"], tmp_path / "gpt2", SETTINGS, out=tmp_path / "tune")


def test_seq_len_over_max_seq_len_is_refused(data: Path) -> None:
    with pytest.raises(zoo.ConfigError, match="seq_len=128 is over the model's max_seq_len=64"):
        train("gpt2-small", data, TrainSettings(seq_len=128), overrides=OVERRIDES)


def test_an_unwritable_or_non_empty_out_is_refused(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(zoo.InputError, match="cannot create --out"):
        train("gpt2-small", data, SETTINGS, out=tmp_path / "file" / "run", overrides=OVERRIDES)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    with pytest.raises(zoo.InputError, match="not empty; pass --resume"):
        train("gpt2-small", data, SETTINGS, out=tmp_path / "full", overrides=OVERRIDES)
    assert (tmp_path / "full" / "keep.txt").read_text() == "mine"
    # A run stopped before its first save left only its metrics: it may start again.
    (tmp_path / "stopped").mkdir()
    (tmp_path / "stopped" / "metrics.jsonl").write_text('{"step": 1, "loss": 9.0}\n')
    settings = TrainSettings(**{**SETTINGS.__dict__, "steps": 1, "eval_every": 1})
    train("gpt2-small", data, settings, out=tmp_path / "stopped", overrides=OVERRIDES)
    assert len(losses(tmp_path / "stopped")) == 1
    assert main(["train", "gpt2-small", *MODEL, "--data", str(data), "--out", str(tmp_path / "full")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--resume" in err and err.startswith("error: --out")


def test_resuming_with_another_config_or_settings_is_refused(runs: dict[str, Path], data: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    shutil.copytree(runs["single"], out)
    with pytest.raises(zoo.ConfigError, match="another model config"):
        train("gpt2-small", data, SETTINGS, out=out, resume=True, overrides={**OVERRIDES, "d_model": 64})
    with pytest.raises(zoo.ConfigError, match=r"other training settings \(lr: 0.003 -> 0.001\)"):
        train(
            "gpt2-small",
            data,
            TrainSettings(**{**SETTINGS.__dict__, "lr": 1e-3}),
            out=out,
            resume=True,
            overrides=OVERRIDES,
        )
    with pytest.raises(zoo.CheckpointError, match="nothing to resume"):
        train("gpt2-small", data, SETTINGS, out=tmp_path / "new", resume=True, overrides=OVERRIDES)


@pytest.mark.parametrize("damage", ["missing", "corrupt"])
def test_a_missing_or_corrupt_training_state_is_refused(
    runs: dict[str, Path], data: Path, tmp_path: Path, damage: str
) -> None:
    out = tmp_path / "run"
    shutil.copytree(runs["single"], out)
    state = out / "v0002.state.safetensors"
    if damage == "missing":
        state.unlink()
    else:
        raw = bytearray(state.read_bytes())
        raw[-3] ^= 0xFF
        state.write_bytes(bytes(raw))
    with pytest.raises(
        zoo.CheckpointError, match=f"{'missing' if damage == 'missing' else 'damaged'}.*v0002.safetensors"
    ):
        train("gpt2-small", data, SETTINGS, out=out, resume=True, overrides=OVERRIDES)
    assert zoo.load(out).config.d_model == 32  # the versions themselves are untouched


def test_batch_sizes_that_do_not_split_are_refused(data: Path) -> None:
    with pytest.raises(
        zoo.ConfigError, match="--batch-size 8 does not split into micro-batches of --micro-batch-size 3"
    ):
        train("gpt2-small", data, TrainSettings(**{**SETTINGS.__dict__, "micro_batch_size": 3}), overrides=OVERRIDES)


def test_micro_batches_accumulate_to_the_same_step(data: Path) -> None:
    settings = TrainSettings(**{**SETTINGS.__dict__, "save_every": None, "steps": 3})
    whole = train("gpt2-small", data, settings, overrides=OVERRIDES)
    parts = train(
        "gpt2-small", data, TrainSettings(**{**settings.__dict__, "micro_batch_size": 2}), overrides=OVERRIDES
    )
    assert parts.losses == pytest.approx(whole.losses, abs=1e-5)


def test_keep_last_prunes_older_versions(data: Path, tmp_path: Path) -> None:
    settings = TrainSettings(**{**SETTINGS.__dict__, "save_every": 1, "keep_last": 2, "steps": 4, "eval_every": 4})
    result = train("gpt2-small", data, settings, out=tmp_path / "run", overrides=OVERRIDES)
    names = sorted(p.name for p in (tmp_path / "run").glob("v*"))
    assert names == ["v0003.safetensors", "v0003.state.safetensors", "v0004.safetensors", "v0004.state.safetensors"]
    assert result.checkpoint == tmp_path / "run" / "v0004.safetensors"


def test_activation_checkpointing_keeps_the_losses_and_bf16_trains(data: Path) -> None:
    settings = TrainSettings(**{**SETTINGS.__dict__, "save_every": None, "steps": 3})
    plain = train("gpt2-small", data, settings, overrides=OVERRIDES)
    checkpointed = train(
        "gpt2-small",
        data,
        TrainSettings(**{**settings.__dict__, "activation_checkpointing": True}),
        overrides=OVERRIDES,
    )
    assert checkpointed.losses == pytest.approx(plain.losses, abs=1e-6)
    low = train("gpt2-small", data, TrainSettings(**{**settings.__dict__, "dtype": "bf16"}), overrides=OVERRIDES)
    assert low.losses == pytest.approx(plain.losses, abs=0.05) and low.losses != plain.losses


def test_fp16_trains_with_a_grad_scaler_whose_state_resumes(data: Path, tmp_path: Path) -> None:
    """fp16 autocast with a grad scaler, on CPU: the scaler's state is saved with every
    version and a resume puts it back, so the resumed run is the uninterrupted one."""
    settings = TrainSettings(**{**SETTINGS.__dict__, "dtype": "fp16"})
    whole = train("gpt2-small", data, settings, out=tmp_path / "whole", overrides=OVERRIDES)
    plain = train("gpt2-small", data, TrainSettings(**{**SETTINGS.__dict__, "save_every": None}), overrides=OVERRIDES)
    assert all(math.isfinite(x) for x in whole.losses) and len(whole.losses) == 6
    assert whole.losses == pytest.approx(plain.losses, abs=0.05) and whole.losses != plain.losses  # autocast ran
    scaler = {v: read_state(state_path(tmp_path / "whole" / f"{v}.safetensors")).tensors for v in ("v0001", "v0002")}
    # each step with finite gradients counts towards the next growth of the scale
    assert [int(scaler[v]["scaler/growth_tracker"]) for v in scaler] == [3, 6]
    assert all(float(scaler[v]["scaler/scale"]) == 2.0**16 for v in scaler)  # torch's initial scale, not overflowed
    resumed = tmp_path / "resumed"
    shutil.copytree(tmp_path / "whole", resumed)
    for name in ("v0002.safetensors", "v0002.state.safetensors"):
        (resumed / name).unlink()
    train("gpt2-small", data, settings, out=resumed, resume=True, overrides=OVERRIDES)
    assert losses(resumed) == losses(tmp_path / "whole")  # bit for bit
    after = read_state(state_path(resumed / "v0002.safetensors")).tensors
    assert int(after["scaler/growth_tracker"]) == 6  # restored (3), not a fresh scaler's 0, then 3 more steps
    with pytest.raises(zoo.ConfigError, match="fp16 needs the single or ddp strategy"):
        run_loop(
            zoo.build("gpt2-small", **OVERRIDES),
            open_data(data),
            TrainSettings(**{**settings.__dict__, "strategy": "fsdp"}),
            world=World(0, 2, 0, torch.device("cpu")),  # FSDP2 over two ranks, refused before any collective
        )


def test_fine_tuning_a_checkpoint_starts_from_its_weights(runs: dict[str, Path], data: Path, tmp_path: Path) -> None:
    assert zoo.train is train and zoo.evaluate is evaluate  # the public names
    start = zoo.load(runs["single"])
    settings = TrainSettings(**{**SETTINGS.__dict__, "steps": 1, "eval_every": 1, "save_every": None})
    result = train(runs["single"], data, settings, out=tmp_path / "tuned")
    assert result.curve[0].val_loss == pytest.approx(evaluate_like_training(start, data, settings), abs=1e-5)
    tuned = zoo.versions(tmp_path / "tuned")[-1].metadata
    assert tuned["training"]["tokenizer"] == "bytes" and tuned["source"] == str(runs["single"])


def evaluate_like_training(model: torch.nn.Module, data: Path, settings: TrainSettings) -> float:
    return mean_loss(model, validation_batches(open_data(data).val, settings))


@pytest.mark.slow
def test_compiled_blocks_train_like_eager_ones(data: Path) -> None:
    settings = TrainSettings(**{**SETTINGS.__dict__, "save_every": None, "steps": 2, "eval_every": 2})
    eager = train("gpt2-small", data, settings, overrides=OVERRIDES)
    compiled = train("gpt2-small", data, TrainSettings(**{**settings.__dict__, "compile": True}), overrides=OVERRIDES)
    assert compiled.losses == pytest.approx(eager.losses, abs=1e-4)

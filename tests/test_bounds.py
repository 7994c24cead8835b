"""Bounds before work (issue 29, item 4): every size a user or a file sets is checked
against this machine (its CPUs, its free memory) before anything is allocated, trained
or written, with one zoo error naming the flag (and the config key a file gives it by).

Each case goes through the real CLI (``zoo.cli.main``) where a flag exists, with a size
computed from this machine's free memory so that it certainly cannot fit here (and the
issue's own value where that is past it anyway), and checks that the output folder was
never made.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

import zoo
from helpers import TINY_ABLATION, prepared_bytes, tiny, train_tokenizer
from zoo.bounds import STEP_BYTES, check_elements, check_threads, count, max_threads, named
from zoo.cli import main
from zoo.errors import ConfigError, HookError, InteropError
from zoo.memory import available_bytes
from zoo.nn.hooks import cache_bytes
from zoo.training.metrics import wandb_timeout

FREE = available_bytes() or 1 << 40  # bytes free here (RAM plus swap)
PAST = 4 * FREE  # what each case asks for: past what is free even if other processes free some meanwhile
SEQ = 16
WINDOW = 2 * 8 * (SEQ + 1)  # bytes of one int64 training window, made twice
TRAIN = ["--set", "n_layers=1", "--set", "d_model=16", "--set", "n_heads=2", "--set", "vocab_size=256"]
TRAIN += ["--set", "max_seq_len=32", "--seq-len", str(SEQ), "--eval-every", "2", "--quiet"]
TRAIN_SIZES = {"--steps": "2", "--batch-size": "2", "--eval-batches": "1"}


def without(flags: dict[str, str], flag: str) -> list[str]:
    """``flags`` as arguments, less ``flag`` (which the test gives, or its config file)."""
    return [word for name, value in flags.items() if name != flag for word in (name, value)]


def refused(capsys: pytest.CaptureFixture[str], *needles: str) -> str:
    """stderr is a zoo error (not an "unexpected" bug report) naming each needle."""
    err = " ".join(capsys.readouterr().err.split())  # rich wraps long lines
    assert err.startswith("error: ") and "unexpected" not in err and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err
    return err


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return prepared_bytes(tmp_path_factory.mktemp("data"), 4_000)


# -- zoo train: threads, steps, batch and evaluation sizes, from flags and from --config ------

TRAIN_CASES: dict[str, tuple[str, int, str]] = {  # flag -> (config key, value past this machine, what it names)
    "--threads": ("threads", max(100_000, max_threads() + 1), "threads than this machine can run"),
    "--steps": ("steps", PAST // STEP_BYTES + 1, "optimizer steps"),
    "--batch-size": ("batch_size", max(10**8, PAST // WINDOW + 1), "training windows"),
    "--eval-batches": ("eval_batches", max(10**9, PAST // (2 * WINDOW) + 1), "validation windows"),
}


@pytest.mark.parametrize("source", ["flag", "config"])
@pytest.mark.parametrize("flag", list(TRAIN_CASES))
def test_train_refuses_a_size_past_the_machine_before_its_folder(
    flag: str, source: str, data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key, value, what = TRAIN_CASES[flag]
    out = tmp_path / "run"
    given = [flag, str(value)]
    if source == "config":
        (tmp_path / "run.toml").write_text(f"{key} = {value}\n", encoding="utf-8")
        given = ["--config", str(tmp_path / "run.toml")]
    sizes = without(TRAIN_SIZES, flag)
    assert main(["train", "gpt2-small", *TRAIN, *sizes, "--data", str(data), "-o", str(out), *given]) == 1
    refused(capsys, named(flag), what, f"lower {flag}")
    assert not out.exists()  # refused before the run's folder, batches or optimizer


def test_train_settings_bound_threads_in_the_api() -> None:
    with pytest.raises(ConfigError, match="--threads"):
        zoo.training.TrainSettings(threads=max_threads() + 1)
    assert zoo.training.TrainSettings(threads=max_threads()).threads == max_threads()  # the bound itself is run


def test_train_micro_batch_bounds_the_forward_on_its_device(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The logits and residual stream of one forward: micro x seq_len x (vocab + layers x d_model) floats."""
    micro = PAST // (SEQ * (256 + 16) * 4) + 1
    out = tmp_path / "run"
    flags = ["--steps", "2", "--batch-size", str(micro), "--micro-batch-size", str(micro), "--eval-batches", "1"]
    # the windows of a batch that large fit only where the forward does not: test the forward alone
    if micro * WINDOW > FREE:
        pytest.skip("on this machine the training windows are refused first")
    assert main(["train", "gpt2-small", *TRAIN, *flags, "--data", str(data), "-o", str(out)]) == 1
    refused(capsys, "--micro-batch-size", "logits")
    assert not out.exists()


def test_evaluate_refuses_a_batch_whose_logits_cannot_fit() -> None:
    """``zoo eval --batch-size``'s bound, through the API on a split of many windows (a
    stride-0 view: the tokens take no memory); a batch holds at most the split's windows."""
    from zoo.training import evaluate
    from zoo.training.sampling import tokens_data

    model = tiny(vocab_size=256, n_layers=1, d_model=16, n_heads=2, max_seq_len=SEQ)
    windows = PAST // (SEQ * 256 * 4) + 1
    val = torch.zeros(1, dtype=torch.long).expand(windows * SEQ + 1)
    with pytest.raises(ConfigError, match=r"--batch-size: one batch's logits .* lower --batch-size"):
        evaluate(model, tokens_data(val[:100], val), seq_len=SEQ, batch_size=windows)


# -- zoo ablate and its studies: threads, seeds, and the steps a budget implies ------------------

ABLATE_CASES: dict[str, tuple[str, str]] = {  # flag -> (value past this machine, what the error names)
    "--threads": (str(max(100_000, max_threads() + 1)), "threads than this machine can run"),
    "--seeds": (str(max(10**9, PAST // (2 * 704) + 1)), "seeds' runs"),
    "--tokens-per-param": ("1e300", "optimizer steps"),
    "--flops-per-run": ("1e300", "optimizer steps"),
    "--steps": (str(PAST // STEP_BYTES + 1), "optimizer steps"),
}


@pytest.mark.parametrize("source", ["flag", "config"])
@pytest.mark.parametrize("flag", list(ABLATE_CASES))
def test_ablate_refuses_a_size_past_the_machine_before_training(
    flag: str, source: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    value, what = ABLATE_CASES[flag]
    out = tmp_path / "ablation"
    flags = [f for i, f in enumerate(TINY_ABLATION) if flag not in TINY_ABLATION[i - 1 : i + 1]]
    given = [flag, value]
    if source == "config":
        (tmp_path / "study.toml").write_text(f"{flag[2:].replace('-', '_')} = {value}\n", encoding="utf-8")
        given = ["--config", str(tmp_path / "study.toml")]
    assert main(["ablate", *flags, "-o", str(out), *given]) == 1
    refused(capsys, named(flag), what, f"lower {flag}")
    assert not out.exists()  # nothing trained, no folder made


def test_a_budget_past_what_a_float_counts_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "ablation"
    assert main(["ablate", *TINY_ABLATION, "-o", str(out), "--tokens-per-param", "1e308"]) == 1
    refused(capsys, "--tokens-per-param", "lower --tokens-per-param")
    assert not out.exists()


# -- zoo generate: return sequences against their KV caches --------------------------------------


def test_generate_refuses_more_sequences_than_their_caches_hold(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = tiny(vocab_size=256, n_layers=1, d_model=16, n_heads=2)
    path = zoo.save(model, tmp_path / "model.safetensors")
    positions = 1 + 4  # the prompt's one byte token and the new tokens
    sequences = max(2 * 10**7, PAST // (2 * 1 * positions * 16 * 4) + 1)
    argv = ["generate", str(path), "--tokenizer", "bytes", "--prompt", "a", "--max-new-tokens", "4"]
    assert main([*argv, "--num-return-sequences", str(sequences), "--sample", "--seed", "0"]) == 1
    err = refused(capsys, "--num-return-sequences", "KV caches", "lower --num-return-sequences")
    assert "config file" not in err  # zoo generate reads none


# -- the bounds themselves ----------------------------------------------------------------------


def test_the_bounds_refuse_only_what_cannot_fit() -> None:
    check_threads(max_threads())
    check_elements(FREE // 16, 8, "half of what is free", "--x")  # what fits is never refused
    with pytest.raises(ConfigError, match=r"--x \(x in a --config file\).*lower --x"):
        check_elements(2 * FREE // 8, 8, "twice what is free", "--x")
    assert count(10**400).startswith("about 1.00e+400")  # a message never prints 400 digits


@pytest.mark.parametrize("refuse", [lambda: check_threads(10**6), lambda: check_elements(10**30, 8, "x", "--x")])
def test_bounds_are_zoo_errors(refuse: Callable[[], None]) -> None:
    with pytest.raises(zoo.ZooError):
        refuse()


# -- zoo probe and run_with_cache: the activations a cache keeps ----------------------------------

PROBE = ["--set", "n_layers=4", "--set", "d_model=32", "--set", "n_heads=8", "--set", "position.name=none"]
#: Tokens per row whose attention patterns (4 layers of (1, 8, S, S) floats) are past what is free.
LONG = max(9000, math.isqrt(PAST // (4 * 8 * 4)) + 1)


@pytest.mark.parametrize(
    "flags",
    [
        pytest.param(["--batch-size", str(max(5 * 10**7, PAST // (2 * 128 * 8) + 1))], id="batch-size"),
        pytest.param(["--batch-size", "1", "--seq-len", str(LONG), "--set", f"max_seq_len={LONG}"], id="seq-len"),
    ],
)
def test_probe_refuses_a_batch_past_the_machine_before_making_it(
    flags: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "probe.json"
    assert main(["probe", "gpt2-small", *PROBE, *flags, "-o", str(out)]) == 1
    refused(capsys, "--batch-size x --seq-len", "lower --batch-size or --seq-len")
    assert not out.exists()


def test_run_with_cache_refuses_every_point_on_too_many_tokens() -> None:
    """Every point of a position-free model on 12,000-token rows: its scores and patterns
    alone (B, H, S, S) are past what is free; the rows are a view, so nothing is allocated."""
    model = tiny(n_layers=1, d_model=16, n_heads=2, max_seq_len=16, position={"name": "none"})
    length = 12_000
    rows = max(1, PAST // (2 * 2 * length * length * 4) + 1)
    tokens = torch.zeros(1, length, dtype=torch.long).expand(rows, length)
    with pytest.raises(HookError, match=r"run_with_cache of \d+ hook point\(s\).*pick fewer points \(names=\.\.\.\)"):
        model.run_with_cache(tokens)
    assert cache_bytes(model, ["blocks.0.hook_resid_post"], 2, 8) == 2 * 8 * 16 * 4  # (B, S, d_model) floats
    _, cache = model.run_with_cache(torch.zeros(2, 8, dtype=torch.long))  # a normal call is never refused
    assert cache["blocks.0.attn.hook_pattern"].shape == (2, 2, 8, 8)


# -- tokenizers: output bounded before normalizing, panics of the library are zoo errors ---------


def hf_tokenizer(folder: Path, *, normalizer: object = None, pre_tokenizer: object = None) -> Path:
    """A tokenizer.json (a word-level vocabulary of 'a') with the given parts, in ``folder``."""
    from tokenizers import Tokenizer, models

    backend = Tokenizer(models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]"))
    if normalizer is not None:
        backend.normalizer = normalizer
    if pre_tokenizer is not None:
        backend.pre_tokenizer = pre_tokenizer
    folder.mkdir()
    backend.save(str(folder / "tokenizer.json"))
    return folder


def test_a_normalizer_that_inflates_each_space_is_refused_before_it_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tokenizers import normalizers

    folder = hf_tokenizer(tmp_path / "tok", normalizer=normalizers.Replace(" ", "x" * (1 << 20)))
    spaces = PAST // (17 << 20) + 1  # each space 1 MiB normalized, 17 bytes per byte held
    text = tmp_path / "text.txt"
    text.write_text("a" + " " * spaces, encoding="utf-8")
    out = tmp_path / "data"
    assert main(["data", "prepare", str(text), "--tokenizer", str(folder), "-o", str(out)]) == 1
    refused(capsys, "normalizer", "inflates characters", "--tokenizer")
    assert not out.exists()
    assert zoo.tokenizer(folder).encode("a a") == [1]  # a short text still encodes: one word of 2 MiB, unknown


def test_a_chain_of_replacements_that_inflates_one_character_is_refused_before_measuring_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """34 replacements of a space by two make one space 16 GiB: measuring it alone (what
    the per-character check runs) would exhaust memory, so the bound read from the
    normalizer's JSON refuses it first (data prepare, encode); real designs pass."""
    from tokenizers import normalizers

    doublings = max(34, math.ceil(math.log2(PAST)))
    folder = hf_tokenizer(
        tmp_path / "tok", normalizer=normalizers.Sequence([normalizers.Replace(" ", "  ")] * doublings)
    )
    text = tmp_path / "text.txt"
    text.write_text("a a", encoding="utf-8")
    out = tmp_path / "data"
    assert main(["data", "prepare", str(text), "--tokenizer", str(folder), "-o", str(out)]) == 1
    refused(capsys, "normalizer on one character", "--tokenizer")
    assert not out.exists()
    with pytest.raises(InteropError, match="its replacements chained"):
        zoo.tokenizer(folder).encode(" ")
    for kind in ("metaspace", "wordpiece"):  # Llama's Prepend and Replace, BERT's normalizer
        assert zoo.tokenizer(train_tokenizer(tmp_path / kind, kind, 300)).encode("a b")


def test_a_split_regex_that_panics_in_the_library_is_a_zoo_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tokenizers import Regex, pre_tokenizers

    folder = hf_tokenizer(tmp_path / "tok", pre_tokenizer=pre_tokenizers.Split(Regex("(a|aa)+$"), "isolated"))
    with pytest.raises(InteropError, match="failed inside the tokenizers library"):
        zoo.tokenizer(folder).encode("a" * 50_000 + "b")
    text = tmp_path / "text.txt"
    text.write_text("a" * 50_000 + "b", encoding="utf-8")
    out = tmp_path / "data"
    assert main(["data", "prepare", str(text), "--tokenizer", str(folder), "-o", str(out)]) == 1
    refused(capsys, "failed inside the tokenizers library", "--tokenizer")
    assert not out.exists()


# -- W&B: the server's first answer is waited on for a bounded time ------------------------------


def closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_an_unreachable_wandb_server_ends_in_a_zoo_error_within_its_timeout(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    wandb = pytest.importorskip("wandb")
    wandb.teardown()  # the settings an earlier offline run left in this process
    monkeypatch.delenv("WANDB_DISABLED", raising=False)
    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{closed_port()}")
    monkeypatch.setenv("WANDB_API_KEY", "a" * 40)
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_INIT_TIMEOUT", "2")
    try:
        out = tmp_path / "run"
        began = time.monotonic()
        argv = ["train", "gpt2-small", *TRAIN, *without(TRAIN_SIZES, ""), "--data", str(data), "-o", str(out)]
        assert main([*argv, "--log", "wandb"]) == 1
        assert time.monotonic() - began < 60
        refused(capsys, "--log wandb", "did not answer within 2 s", "WANDB_INIT_TIMEOUT", "WANDB_MODE=offline")
        assert not list(out.glob("v*.safetensors"))  # nothing trained
    finally:
        wandb.teardown()  # nor does this one leave its settings to later tests


@pytest.mark.parametrize("text", ["soon", "0", "-1", "inf", "nan"])
def test_a_wandb_timeout_that_is_not_seconds_is_refused(text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_INIT_TIMEOUT", text)
    with pytest.raises(ConfigError, match="WANDB_INIT_TIMEOUT"):
        wandb_timeout()


def test_a_process_memory_limit_bounds_as_the_machine_does(data: Path, tmp_path: Path) -> None:
    """``ulimit -v`` (RLIMIT_AS) is memory this process cannot have, whatever the machine has
    free: a batch that fits the machine but not the limit is refused up front, naming its flag."""
    import subprocess
    import sys

    batch = 2 * (1 << 30) // WINDOW  # 2 GiB of windows: past a limit of 1 GiB over what is mapped
    script = (
        "import os, resource, sys\n"
        "from zoo.cli import main\n"
        "from zoo.memory import available_bytes\n"
        "mapped = int(open('/proc/self/statm').read().split()[0]) * os.sysconf('SC_PAGE_SIZE')\n"
        "resource.setrlimit(resource.RLIMIT_AS, (mapped + (1 << 30), resource.getrlimit(resource.RLIMIT_AS)[1]))\n"
        "assert available_bytes() <= 1 << 30, available_bytes()\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    out = tmp_path / "run"
    argv = ["train", "gpt2-small", *TRAIN, *without(TRAIN_SIZES, "--batch-size"), "--data", str(data), "-o", str(out)]
    done = subprocess.run(
        [sys.executable, "-c", script, *argv, "--batch-size", str(batch)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 1 and "--batch-size" in done.stderr and "unexpected" not in done.stderr, done.stderr
    assert not out.exists()

"""Safe numbers and safe terminals.

Sampling at the extremes (tiny and huge temperatures and penalties, non-finite
settings, NaN or infinite scores from a real model with broken weights) is either exact
in the limit or an ``InputError``; text a model generates reaches a terminal with its
control characters escaped (a real pseudo-terminal), raw bytes reach a pipe only with
``--raw``; evaluation settings that cannot work are refused.
"""

from __future__ import annotations

import math
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import zoo
from helpers import error_line, prepared_bytes, tiny
from zoo.cli import main
from zoo.decoding import generate
from zoo.decoding.sampling import Sampling
from zoo.errors import ConfigError, InputError

SCORES = torch.tensor([[5.0, 4.0, 4.0, -1.0, -math.inf]])


# -- sampling at the extremes ------------------------------------------------------------------


@pytest.mark.parametrize("temperature", [1e-40, 1e-300, 5e-324])
def test_a_vanishing_temperature_samples_the_best_token(temperature: float) -> None:
    sampling = Sampling(do_sample=True, temperature=temperature)
    probs = sampling.probabilities(SCORES)
    assert torch.equal(probs, torch.tensor([[1.0, 0.0, 0.0, 0.0, 0.0]]))
    gen = torch.Generator().manual_seed(0)
    assert {int(sampling.choose(SCORES, generator=gen)) for _ in range(20)} == {0}


def test_a_vanishing_temperature_shares_exact_ties() -> None:
    tied = torch.tensor([[3.0, 3.0, 1.0]])
    probs = Sampling(do_sample=True, temperature=1e-40).probabilities(tied)
    torch.testing.assert_close(probs, torch.tensor([[0.5, 0.5, 0.0]]))


def test_a_huge_temperature_is_uniform_over_the_kept_tokens() -> None:
    probs = Sampling(do_sample=True, temperature=1e300).probabilities(SCORES)
    torch.testing.assert_close(probs, torch.tensor([[0.25, 0.25, 0.25, 0.25, 0.0]]))


@pytest.mark.parametrize("penalty", [1e-300, 1e-40, 1e40, 1e300])
@pytest.mark.parametrize("do_sample", [False, True])
def test_extreme_repetition_penalties_give_a_finite_distribution(penalty: float, do_sample: bool) -> None:
    seen = torch.tensor([[False, True, True, True, False]])
    sampling = Sampling(do_sample=do_sample, repetition_penalty=penalty)
    choice = int(sampling.choose(SCORES, seen, generator=torch.Generator().manual_seed(0)))
    probs = Sampling(do_sample=True, repetition_penalty=penalty).probabilities(SCORES, seen)
    assert torch.isfinite(probs).all() and math.isclose(float(probs.sum()), 1.0, rel_tol=1e-6)
    if penalty < 1:  # promoted without limit: the seen tokens 1 and 2 (4.0 / 1e-300) win
        assert choice in (1, 2)
    else:  # demoted without limit: the unseen best token wins
        assert choice == 0


@pytest.mark.parametrize(
    "setting",
    [
        {"temperature": math.inf},
        {"temperature": math.nan},
        {"temperature": -1.0},
        {"temperature": 10**400},
        {"repetition_penalty": math.inf},
        {"repetition_penalty": math.nan},
        {"repetition_penalty": 0.0},
        {"repetition_penalty": 10**400},
        {"top_p": math.nan},
        {"top_p": math.inf},
        {"top_k": 0},
        {"temperature": True},
    ],
)
def test_settings_that_are_not_finite_numbers_are_input_errors(setting: dict[str, float]) -> None:
    with pytest.raises(InputError):
        Sampling(do_sample=True, **setting)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "scores",
    [
        torch.tensor([[1.0, math.nan, 0.0]]),
        torch.tensor([[1.0, math.inf, 0.0]]),
        torch.tensor([[-math.inf, -math.inf, -math.inf]]),
        torch.tensor([[1.0, 2.0, 0.0], [math.nan] * 3]),
    ],
)
@pytest.mark.parametrize("do_sample", [False, True])
def test_non_finite_scores_are_input_errors_not_garbage_tokens(scores: torch.Tensor, do_sample: bool) -> None:
    with pytest.raises(InputError, match="NaN or infinity"):
        Sampling(do_sample=do_sample).choose(scores)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_greedy_refuses_exactly_the_rows_the_full_check_refuses(dtype: torch.dtype) -> None:
    """Greedy checks only the chosen score; over rows with NaN, +inf and -inf planted at
    random places (a vocabulary's width: the vectorised kernels), it refuses the same
    rows as the pass over every score, and otherwise picks the same tokens."""
    from zoo.decoding.sampling import check_scores

    generator = torch.Generator().manual_seed(0)
    for trial in range(100):
        scores = torch.randn(4, 50257, generator=generator).to(dtype)
        for row in range(4):
            kind = int(torch.randint(0, 5, (1,), generator=generator))
            places = torch.randint(0, 50257, (3,), generator=generator)
            if kind == 1:
                scores[row, places] = math.nan
            elif kind == 2:
                scores[row, places[0]] = math.inf
            elif kind == 3:
                scores[row] = -math.inf
            elif kind == 4:
                scores[row, places] = -math.inf  # some -inf beside finite scores: fine
        try:
            check_scores(scores.float())
        except InputError as err:
            with pytest.raises(InputError) as greedy:
                Sampling().choose(scores)
            assert str(greedy.value) == str(err), trial
        else:
            assert torch.equal(Sampling().choose(scores), scores.argmax(dim=-1)), trial


@pytest.mark.parametrize("do_sample", [False, True])
def test_a_model_with_nan_weights_is_refused_when_generating(do_sample: bool) -> None:
    model = tiny()
    with torch.no_grad():
        model.blocks[0].mlp.up.weight[0, 0] = math.nan
    with pytest.raises(InputError, match="not finite"):
        generate(model, torch.tensor([[1, 2, 3]]), 4, do_sample=do_sample)


# -- control characters in generated text -------------------------------------------------------

ESCAPES = "\x1b[2J\x1b]0;pwned\x07\r\u202e\n\tend"


def spelling_model(text: str, tmp_path: Path) -> tuple[Path, str]:
    """A real GPT-2-vocabulary checkpoint whose greedy continuation of a one-token prompt
    is ``text``: blocks add nothing, position p is one-hot, and the untied head maps
    dimension p to the p-th token of ``text``."""
    pytest.importorskip("tiktoken")
    from zoo.text.loading import tokenizer

    ids = tokenizer("gpt2").encode(text)
    model = tiny(vocab_size=50257, d_model=32, n_layers=1, n_heads=4, max_seq_len=32, tie_embeddings=False)
    with torch.no_grad():
        for name, tensor in model.named_parameters():
            if name.startswith("blocks.") and (".out." in name or ".down." in name):
                tensor.zero_()
        model.tok_emb.weight.zero_()
        model.position.table.weight.copy_(torch.eye(32))
        model.head.weight.zero_()
        for position, token in enumerate(ids):
            model.head.weight[token, position] = 10.0
    path = tmp_path / "spell.safetensors"
    zoo.save(model, path)
    assert zoo.generate_text(path, "a", max_new_tokens=len(ids)) == text
    return path, str(len(ids))


def test_generated_control_characters_are_escaped_when_piped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, count = spelling_model(ESCAPES, tmp_path)
    assert main(["generate", str(path), "--prompt", "a", "--max-new-tokens", count, "--no-echo"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "\r" not in out and "\u202e" not in out
    assert "\\x1b[2J" in out and "\\x07" in out and "\\u202e" in out
    assert "\n\tend" in out  # newlines and tabs are kept


def test_raw_writes_the_bytes_to_a_pipe(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, count = spelling_model(ESCAPES, tmp_path)
    assert main(["generate", str(path), "--prompt", "a", "--max-new-tokens", count, "--no-echo", "--raw"]) == 0
    assert capsys.readouterr().out == ESCAPES + "\n"


def test_a_prompt_with_escapes_is_escaped_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, _ = spelling_model("ok", tmp_path)
    assert main(["generate", str(path), "--prompt", "\x1b[31ma", "--max-new-tokens", "2"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\\x1b[31m" in out


def test_a_terminal_never_gets_raw_control_characters_even_with_raw(tmp_path: Path) -> None:
    path, count = spelling_model(ESCAPES, tmp_path)
    leader, follower = pty.openpty()
    command = [sys.executable, "-m", "zoo", "generate", str(path), "--prompt", "a", "--max-new-tokens", count]
    env = {**os.environ, "TERM": "dumb", "NO_COLOR": "1", "COLUMNS": "200"}
    process = subprocess.Popen([*command, "--no-echo", "--raw"], stdout=follower, stderr=subprocess.PIPE, env=env)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the terminal closed
            break
        if not chunk:
            break
        chunks.append(chunk)
    assert process.wait(timeout=120) == 0, process.stderr.read() if process.stderr else ""
    os.close(leader)
    shown = b"".join(chunks).decode("utf-8", errors="replace")
    assert "\\x1b[2J" in shown and "\\x07" in shown
    assert "\x1b[2J" not in shown and "\x07" not in shown and "\u202e" not in shown


# -- evaluation settings ---------------------------------------------------------------------


@pytest.mark.parametrize("seq_len", [0, -5, 1.5, True])
def test_eval_refuses_a_sequence_length_that_is_not_positive(seq_len: object) -> None:
    wrong_type = not isinstance(seq_len, int) or isinstance(seq_len, bool)  # the API's type check, before its bound
    with pytest.raises(InputError if wrong_type else ConfigError, match="seq_len"):
        zoo.evaluate(tiny(vocab_size=256), None, seq_len=seq_len)  # type: ignore[arg-type]


@pytest.mark.parametrize("seq_len", ["0", "-5"])
def test_cli_eval_refuses_a_sequence_length_that_is_not_positive(
    tmp_path: Path, seq_len: str, capsys: pytest.CaptureFixture[str]
) -> None:
    zoo.save(tiny(vocab_size=256), tmp_path / "m.safetensors")
    with pytest.raises(SystemExit) as refused:  # argparse's own refusal, before anything is read
        main(["eval", str(tmp_path / "m.safetensors"), "--seq-len", seq_len])
    err = capsys.readouterr().err
    assert refused.value.code == 2 and f"argument --seq-len: must be 1 or more, got {seq_len}" in err


# -- a loss that is not a number ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return prepared_bytes(tmp_path_factory.mktemp("data"), 8_000)


def test_zoo_eval_of_a_model_with_nan_weights_is_an_error_naming_the_tensor(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import torch

    model = tiny(vocab_size=256)
    with torch.no_grad():
        model.blocks[1].mlp.up.weight[0, 0] = float("nan")
    zoo.save(model, tmp_path / "nan.safetensors")
    for extra in ([], ["--json"]):
        assert main(["eval", str(tmp_path / "nan.safetensors"), "--data", str(data), "--seq-len", "16", *extra]) == 1
        error_line(capsys, "the loss is nan", "blocks.1.mlp.up.weight", "--version")


def test_zoo_probe_of_a_model_with_nan_weights_is_an_error_naming_the_tensor(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import torch

    model = tiny(vocab_size=256)
    with torch.no_grad():
        model.blocks[0].attn.qkv.weight[0, 0] = float("nan")
    zoo.save(model, tmp_path / "nan.safetensors")
    command = [
        "probe",
        str(tmp_path / "nan.safetensors"),
        "--tokenizer",
        "bytes",
        "--batch-size",
        "1",
        "--seq-len",
        "16",
    ]
    assert main(command) == 1
    error_line(capsys, "the loss is nan", "blocks.0.attn.qkv.weight")

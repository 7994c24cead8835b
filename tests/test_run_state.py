"""Run state: run folders are owned, and every state is bound to what it belongs to.

Attacks on real runs (tiny models, real processes, real torchrun/gloo): two trains on
one new ``--out``, planted links, foreign folders under ``zoo ablate``; a training
state beside another version's or another run's weights; damaged ``metrics.jsonl``;
a run killed before its first version; edited or garbage ablation records and
checkpoints; data edited in place; ranks started with different settings; evaluation
on another tokenizer's data; report strings that carry markup; a ``--tokenizer`` that
contradicts the prepared data, a re-signed state, a version copied in from another run, a
resume that stretches the schedule; a launcher environment that is not torchrun's.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import safetensors.torch
from safetensors import safe_open

import zoo
from helpers import default_sigint, edit_metadata, error_line, prepared_bytes
from zoo.ablate import run_ablation
from zoo.ablate.report import md, md_code
from zoo.checkpoint import digest, versions
from zoo.checkpoint.owned import read_marker
from zoo.cli import main
from zoo.errors import CheckpointError, ConfigError, InputError
from zoo.training import TrainSettings, evaluate, prepare, train
from zoo.training.curves import read_metrics
from zoo.training.distributed import field_differences
from zoo.training.state import read_state, state_path
from zoo.training.stateful import learning_rate

OVERRIDES = dict(n_layers=1, d_model=32, n_heads=2, vocab_size=256, max_seq_len=32, dropout=0.0)
SETTINGS = TrainSettings(steps=4, batch_size=4, seq_len=16, eval_every=2, eval_batches=1, save_every=2, threads=1)
MODEL = ["--set", "n_layers=1", "--set", "d_model=32", "--set", "n_heads=2", "--set", "vocab_size=256"]
MODEL += ["--set", "max_seq_len=32", "--set", "dropout=0.0"]
FLAGS = ["--steps", "4", "--batch-size", "4", "--seq-len", "16", "--eval-every", "2", "--eval-batches", "1"]
FLAGS += ["--save-every", "2", "--threads", "1"]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return prepared_bytes(tmp_path_factory.mktemp("data"), 20_000)


def run_train(out: Path, data: Path, **changes: Any) -> zoo.training.TrainResult:
    settings = TrainSettings(**{**SETTINGS.__dict__, **changes})
    return train("gpt2-small", data, settings, out=out, overrides=OVERRIDES)


def environment(tmp: Path) -> dict[str, str]:
    return {**os.environ, "ZOO_DATA_CACHE": str(tmp / "cache"), "OMP_NUM_THREADS": "1"}


# -- train --out: owned -------------------------------------------------------------------------


def test_a_run_folder_carries_its_marker(data: Path, tmp_path: Path) -> None:
    run_train(tmp_path / "run", data)
    marker = read_marker(tmp_path / "run", InputError)
    assert marker is not None and marker.kind == "train" and marker.command == "zoo train"


def test_two_trains_on_one_new_out_the_second_is_refused(data: Path, tmp_path: Path) -> None:
    """Started together: one trains, the other is refused (in use, or finding a run)."""
    out = tmp_path / "run"
    command = [sys.executable, "-m", "zoo", "train", "gpt2-small", *MODEL, "--data", str(data), "--out", str(out)]
    command += ["--steps", "40", *FLAGS[2:-4], "--save-every", "4", "--threads", "1"]  # the race is at the start
    runs = [
        subprocess.Popen(command, env=environment(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    results = [(run.communicate(timeout=300)[1], run.returncode) for run in runs]
    assert sorted(code for _, code in results) == [0, 1], results
    refused = next(err for err, code in results if code == 1)
    assert refused.count("\n") == 1 and ("in use" in refused or "holds a run" in refused), refused
    versions = zoo.versions(out)
    assert [v.version for v in versions] == list(range(1, 11))
    assert len({v.metadata["training"]["run_id"] for v in versions}) == 1
    lines = (out / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == list(range(1, 41))


def test_a_planted_metrics_link_is_replaced_not_written_through(data: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "metrics.jsonl").symlink_to(victim)
    run_train(tmp_path / "run", data)
    assert victim.read_text() == "precious"
    metrics = tmp_path / "run" / "metrics.jsonl"
    assert not metrics.is_symlink() and len(metrics.read_text().splitlines()) == 4


def test_train_refuses_a_users_folder_and_a_folder_of_another_kind(data: Path, tmp_path: Path) -> None:
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    for resume in (False, True):
        with pytest.raises(InputError, match="did not write"):
            train("gpt2-small", data, SETTINGS, out=tmp_path / "mine", resume=resume, overrides=OVERRIDES)
    assert sorted(os.listdir(tmp_path / "mine")) == ["notes.txt"]
    zoo.to_hf(zoo.build("gpt2-small", **OVERRIDES), tmp_path / "hf")
    with pytest.raises(InputError, match=r"made by zoo.to_hf \(hf-export\)"):
        run_train(tmp_path / "hf", data)


def test_train_overwrite_replaces_a_run_or_a_users_folder_whole(data: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    run_train(out, data, steps=2)
    first = zoo.versions(out)[-1].metadata["training"]["run_id"]
    with pytest.raises(InputError, match="--overwrite to replace it"):
        run_train(out, data)
    before = (out / "v0001.safetensors").read_bytes()
    result = train("gpt2-small", data, SETTINGS, out=out, overwrite=True, overrides=OVERRIDES)
    assert zoo.versions(out)[-1].metadata["training"]["run_id"] != first and result.curve[-1].step == 4
    assert [v.version for v in zoo.versions(out)] == [1, 2]
    assert (out / "v0001.safetensors").read_bytes() != before  # saved at step 2 of 4, not step 2 of 2
    assert not [p for p in tmp_path.iterdir() if p.name != "run"]  # no staging folder or old copy left
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("gone")
    train("gpt2-small", data, SETTINGS, out=tmp_path / "mine", overwrite=True, overrides=OVERRIDES)
    assert not (tmp_path / "mine" / "notes.txt").exists()
    assert read_marker(tmp_path / "mine", InputError) is not None
    with pytest.raises(ConfigError, match="give one of them"):
        train("gpt2-small", data, SETTINGS, out=out, resume=True, overwrite=True, overrides=OVERRIDES)


def test_cli_train_overwrite_is_named_and_not_repeated_by_run_toml(data: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = ["train", "gpt2-small", *MODEL, *FLAGS, "--data", str(data), "-o", str(out), "--quiet"]
    assert main(args) == 0
    assert main(args) != 0  # refused: the folder holds a run
    assert main([*args, "--overwrite"]) == 0
    assert not re.search(r"^overwrite", (out / "run.toml").read_text(), re.MULTILINE)


def test_an_out_through_a_symlink_is_refused(data: Path, tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(InputError, match="symbolic link"):
        run_train(tmp_path / "link", data)
    assert list((tmp_path / "real").iterdir()) == []


# -- training state bound to its version ------------------------------------------------------


def test_a_state_from_another_version_is_refused(data: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    run_train(out, data)
    shutil.copy(state_path(out / "v0002.safetensors"), state_path(out / "v0001.safetensors"))
    (out / "v0002.safetensors").unlink()
    state_path(out / "v0002.safetensors").unlink()
    with pytest.raises(CheckpointError, match="another version of this run"):
        train("gpt2-small", data, SETTINGS, out=out, resume=True, overrides=OVERRIDES)


def test_a_state_from_another_run_with_the_same_config_is_refused(data: Path, tmp_path: Path) -> None:
    run_train(tmp_path / "a", data)
    run_train(tmp_path / "b", data, seed=1)
    shutil.copy(state_path(tmp_path / "a" / "v0002.safetensors"), state_path(tmp_path / "b" / "v0002.safetensors"))
    with pytest.raises(CheckpointError, match="belongs to another run"):
        train("gpt2-small", data, TrainSettings(**{**SETTINGS.__dict__, "seed": 1}), out=tmp_path / "b", resume=True)


def test_an_older_version_without_a_binding_still_checks_the_step(data: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    run_train(out, data)
    for name in ("v0001.safetensors", "v0002.safetensors"):  # as an older zoo saved them
        meta = zoo.versions(out)[int(name[1:5]) - 1].metadata
        training = {k: v for k, v in meta["training"].items() if k not in ("state_digest", "run_id")}
        edited = json.dumps({**meta, "training": training})
        (out / name).write_bytes(edit_metadata((out / name).read_bytes(), zoo_metadata=edited))
    assert "state_digest" not in zoo.versions(out)[0].metadata["training"]
    train("gpt2-small", data, SETTINGS, out=out, resume=True, overrides=OVERRIDES)  # a matching pair resumes
    shutil.copy(state_path(out / "v0002.safetensors"), state_path(out / "v0001.safetensors"))
    (out / "v0002.safetensors").unlink()
    with pytest.raises(CheckpointError, match="from step 4, the version from step 2"):
        train("gpt2-small", data, SETTINGS, out=out, resume=True, overrides=OVERRIDES)


def test_a_run_killed_during_its_first_save_is_not_a_dead_end(data: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    run_train(out, data)
    for name in ("v0001.safetensors", "v0002.safetensors", "v0002.state.safetensors"):
        (out / name).unlink()  # killed after the first state, before its version appeared
    (out / f".v0001.safetensors.{999_999_999}-0badc0de.tmp").write_bytes(b"half a version")
    with pytest.raises(CheckpointError, match="drop --resume"):
        train("gpt2-small", data, SETTINGS, out=out, resume=True, overrides=OVERRIDES)
    result = run_train(out, data)  # a fresh start takes the folder back
    assert len(result.losses) == 4 and [v.version for v in zoo.versions(out)] == [1, 2]
    assert not any(p.name.endswith(".tmp") for p in out.iterdir())


def test_stale_temporary_files_are_cleaned(data: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    run_train(out, data, steps=2)
    stale = out / ".v0002.state.safetensors.123456789-deadbeef.tmp"
    stale.write_bytes(b"x")
    train("gpt2-small", data, SETTINGS, out=out, resume=True, overrides=OVERRIDES)
    assert not stale.exists()


@pytest.mark.parametrize(
    "damage",
    [
        b"\xff\xfe not utf-8\n",
        b'{"step": 1e400}\n',
        b'{"step": "3"}\n',
        b"[" * 5000 + b"\n",
        b'{"step": true}\n',
        b"\x00\x00\x00\n",
        b'{"step": 2, "loss"',
    ],
)
def test_damaged_metrics_lines_are_dropped_on_resume(data: Path, tmp_path: Path, damage: bytes) -> None:
    out = tmp_path / "run"
    run_train(out, data)
    (out / "v0002.safetensors").unlink()
    state_path(out / "v0002.safetensors").unlink()
    with open(out / "metrics.jsonl", "ab") as handle:
        handle.write(damage)
    train("gpt2-small", data, SETTINGS, out=out, resume=True, overrides=OVERRIDES)
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4]


def test_a_metrics_folder_is_an_input_error(data: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    run_train(out, data, steps=2)
    (out / "metrics.jsonl").unlink()
    (out / "metrics.jsonl").mkdir()
    with pytest.raises(InputError, match="folder"):
        train("gpt2-small", data, SETTINGS, out=out, resume=True, overrides=OVERRIDES)


def test_a_folder_named_like_a_preset_does_not_shadow_it(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "gpt2-small").mkdir()
    (tmp_path / "gpt2-small" / "metrics.jsonl").write_text('{"step": 1}\n')  # stopped before its first save
    assert main(["train", "gpt2-small", *MODEL, "--data", str(data), "--out", "gpt2-small", *FLAGS]) == 0
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="without checkpoint versions"):
        train(tmp_path / "empty", data, SETTINGS, out=tmp_path / "x")


@pytest.mark.parametrize(
    "changes", [{"seed": 2**64}, {"seed": -1}, {"betas": (1.5, 0.9)}, {"betas": (0.9,)}, {"betas": ("a", 0.9)}]
)
def test_settings_out_of_range_are_config_errors(changes: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        TrainSettings(**changes)


def test_cli_seed_past_the_range_is_one_error_line(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as refused:  # argparse's own refusal: one usage line and one error line
        main(["train", "gpt2-small", *MODEL, "--data", str(data), "--out", str(tmp_path / "r"), "--seed", str(2**64)])
    err = capsys.readouterr().err
    assert refused.value.code == 2 and "argument --seed: must lie in 0 .. 2**64-1" in err and "Traceback" not in err


# -- ranks agree or stop ---------------------------------------------------------------------

RANK_SCRIPT = """
import os, sys
from zoo.cli import main
args = sys.argv[1:]
if os.environ["RANK"] == "1":
    name, value = os.environ["ZOO_TEST_FLAG"].split("=", 1)
    args[args.index(name) + 1] = value
sys.exit(main(args))
"""


@pytest.mark.parametrize(  # one flag by default; the check is one comparison of every setting, so the
    "flag",  # other two (another --save-every once deadlocked) run under `make test-all`
    [
        "--seq-len=8",
        pytest.param("--save-every=1", marks=pytest.mark.slow),
        pytest.param("--lr=0.5", marks=pytest.mark.slow),
        pytest.param("--set=n_layers=2", marks=pytest.mark.slow),
    ],
)
def test_ranks_started_with_different_settings_stop_naming_the_setting(data: Path, tmp_path: Path, flag: str) -> None:
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    lr = ["--lr", "0.003"]
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(script)]
    command += ["train", "gpt2-small", *MODEL, "--data", str(data), "--out", str(tmp_path / "run"), *FLAGS, *lr]
    env = {**environment(tmp_path), "ZOO_TEST_FLAG": flag.replace("=", "=", 1), "ZOO_DIST_TIMEOUT": "60"}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode != 0
    said = done.stdout + done.stderr
    if flag.startswith("--set"):  # the model config: the field that differs, not its JSON cut short
        assert "the model config (NAME and --set) differs on rank(s) [1]" in said
        assert "n_layers: 1 on rank 0, 2 on this rank (1)" in said
    else:
        name = flag.split("=")[0].removeprefix("--").replace("-", "_")
        assert f"{name} (--{name.replace('_', '-')}) differs on rank(s) [1]" in said
    assert not zoo.versions(tmp_path / "run") if (tmp_path / "run").is_dir() else True


def test_rank_messages_name_the_fields_of_a_config_that_differ() -> None:
    ours = {"d_model": 64, "attention": {"name": "sdpa", "options": {}}, "n_layers": 2}
    theirs = {"d_model": 64, "attention": {"name": "eager", "options": {}}, "n_layers": 3, "extra": 1}
    assert field_differences(ours, theirs) == [
        ("attention.name", "sdpa", "eager"),
        ("extra", "(absent)", 1),
        ("n_layers", 2, 3),
    ]
    assert field_differences(ours, ours) == [] and field_differences(1, 2) == []


STALL_SCRIPT = """
import os, sys, threading
from zoo.errors import ZooError
from zoo.training import TrainSettings, train
def on_step(report):
    if os.environ["RANK"] == "1" and report.step == 1:
        # A rank that hangs for good (no sleep that rank 0's timeout could outlast on a busy
        # machine): the others wait at the next step's collective; torchrun ends this one.
        threading.Event().wait()
settings = TrainSettings(steps=4, batch_size=4, seq_len=16, eval_every=4, eval_batches=1, threads=1)
overrides = dict(n_layers=1, d_model=32, n_heads=2, vocab_size=256, max_seq_len=32, dropout=0.0)
try:
    train("gpt2-small", sys.argv[1], settings, overrides=overrides, on_step=on_step)
except ZooError as err:
    print(f"rank {os.environ['RANK']}: {type(err).__name__}: {err}", flush=True)
    sys.exit(1)
"""


def test_a_collective_that_times_out_is_a_distributed_error(data: Path, tmp_path: Path) -> None:
    script = tmp_path / "stall.py"
    script.write_text(STALL_SCRIPT)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(script)]
    env = {**environment(tmp_path), "ZOO_DIST_TIMEOUT": "3"}
    done = subprocess.run([*command, str(data)], env=env, capture_output=True, text=True, timeout=240)
    output = done.stdout + done.stderr
    assert done.returncode != 0
    assert "rank 0: DistributedError: rank 0 of 2: the other ranks did not reach the same step within 3 s" in output
    assert "raise ZOO_DIST_TIMEOUT=SECONDS" in output
    assert "Traceback" not in done.stdout  # the ranks print the message, no trace (torchrun adds its own below)


# -- zoo eval: the model's tokenizer ------------------------------------------------------------


def test_eval_refuses_data_of_another_tokenizer(data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("tiktoken")
    (tmp_path / "t.txt").write_text("Hello there. " * 400, encoding="utf-8")
    gpt2_data = prepare([tmp_path / "t.txt"], tmp_path / "gpt2", tokenizer="gpt2", val_fraction=0.2).path
    run_train(tmp_path / "bytes-run", data, steps=2)
    assert main(["eval", str(tmp_path / "bytes-run"), "--data", str(gpt2_data), "--seq-len", "16"]) == 1
    assert "tokenized with 'gpt2' but the model was trained with 'bytes'" in capsys.readouterr().err
    gpt2_model = zoo.build("gpt2-small", n_layers=1, d_model=32, n_heads=2, max_seq_len=32)
    with pytest.raises(InputError, match="tokenized with 'bytes' but the model has the vocabulary of 'gpt2'"):
        evaluate(gpt2_model, data, seq_len=16, batches=1)


# -- ablation folders and records -------------------------------------------------------------

SCALE: dict[str, Any] = dict(d_model=16, layers=1, heads=2, seq_len=16, steps=4, batch=4, lr=1e-2, eval_every=4)


def ablate(out: Path, data: Any, **kwargs: Any) -> zoo.ablate.AblationResult:
    return run_ablation("transformer-2017", "gpt2-small", **SCALE, out_dir=out, data=data, tokenizer="bytes", **kwargs)


@pytest.fixture(scope="module")
def text(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("text") / "corpus.txt"
    path.write_text(zoo.training.bundled_corpus()[:6_000], encoding="utf-8")
    return path


def test_ablate_refuses_an_unrelated_folder_with_a_report(text: Path, tmp_path: Path) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "report.md").write_text("my report")
    (out / "ablation.json").write_text('{"mine": 1}')
    with pytest.raises(InputError, match="did not write"):
        ablate(out, text)
    assert (out / "report.md").read_text() == "my report" and sorted(os.listdir(out)) == ["ablation.json", "report.md"]


def test_ablation_records_are_trusted_only_when_they_verify(text: Path, tmp_path: Path) -> None:
    out = tmp_path / "abl"
    first = ablate(out, text)
    record = out / f"{first.runs[1].seeds[0].checkpoint.stem}.json"
    body = json.loads(record.read_text())
    body["final_val_loss"] = 0.001  # an edited loss
    record.write_text(json.dumps(body))
    garbage = first.runs[2].seeds[0].checkpoint
    garbage.write_bytes(b"\x00" * garbage.stat().st_size)  # a garbage checkpoint beside a good record
    malformed = out / f"{first.runs[3].seeds[0].checkpoint.stem}.json"
    malformed.write_text('{"run": 3, "curve": "x"}')
    again = ablate(out, text)
    stems = [first.runs[i].seeds[0].checkpoint.stem for i in (1, 2, 3)]
    assert sorted(again.trained) == sorted(stems)
    assert [r.loss.mean for r in again.runs] == [r.loss.mean for r in first.runs]  # the real losses, retrained
    assert zoo.load(garbage).config.d_model == 16


def test_data_edited_in_place_is_not_the_same_data(text: Path, tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.txt"
    shutil.copy(text, corpus)
    ablate(tmp_path / "abl", corpus)
    raw = corpus.read_text()
    corpus.write_text(raw[::-1])  # same length, same characters, other text
    with pytest.raises(InputError, match="other settings"):
        ablate(tmp_path / "abl", corpus)


def test_report_strings_from_files_are_escaped(tmp_path: Path) -> None:
    hostile = tmp_path / "<img src=x onerror=alert(1)>[click](javascript:x)`*.txt"
    hostile.write_text(zoo.training.bundled_corpus()[:6_000], encoding="utf-8")
    result = ablate(tmp_path / "abl", hostile)
    report = (tmp_path / "abl" / "report.md").read_text()
    assert result.report_path is not None
    outside = report.split("```bash")[0] + report.split("```bash")[1].split("```", 1)[1]  # the command is code
    assert "<img" not in outside and "&lt;img" in outside
    assert "\\[click\\](javascript" in outside and " [click]" not in outside and "/[click]" not in outside
    assert md("a|b*c\x1b") == "a\\|b\\*c\\\\x1b" and md("<b>") == "&lt;b&gt;"
    assert md_code("a``b") == "```a``b```" and md("embedding_scale") == "embedding_scale"


def test_a_second_ctrl_c_prints_no_traceback(data: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    command = [sys.executable, "-m", "zoo", "train", "gpt2-small", *MODEL, "--data", str(data), "--out", str(out)]
    command += ["--steps", "5000", *FLAGS[2:-4], "--save-every", "1000", "--threads", "1"]
    process = subprocess.Popen(
        command,
        env=environment(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_sigint,  # SIGINT acts even where this run inherited it ignored
    )
    for _ in range(1200):  # until it trains
        metrics = out / "metrics.jsonl"
        if metrics.is_file() and metrics.stat().st_size:
            break
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    time.sleep(0.02)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 130, err
    assert "Traceback" not in err and "error: interrupted after step" in err, err


def test_ablate_overwrite_replaces_a_folder_whole_and_stays_out_of_the_repeat_command(
    text: Path, tmp_path: Path
) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "report.md").write_text("my report")
    (out / "notes.txt").write_text("mine")
    result = ablate(out, text, overwrite=True)
    assert "notes.txt" not in os.listdir(out) and (out / "report.md").read_text() != "my report"
    assert "--overwrite" not in result.command
    marker = read_marker(out, InputError)
    assert marker is not None and marker.kind == "ablate"


# -- a state that does not belong: the tokenizer, a re-signed state, a copied version, a longer plan --

SHORT_SETTINGS = TrainSettings(steps=2, batch_size=2, seq_len=16, eval_every=2, eval_batches=1, save_every=2, threads=1)
SHORT_FLAGS = ["--steps", "2", "--batch-size", "2", "--seq-len", "16", "--eval-every", "2", "--eval-batches", "1"]
SHORT_FLAGS += ["--threads", "1", "--quiet"]


@pytest.fixture(scope="module")
def run(data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished tiny run of 2 steps (one version, its state, metrics.jsonl); copy it before editing."""
    out = tmp_path_factory.mktemp("run") / "run"
    train("gpt2-small", data, SHORT_SETTINGS, out=out, overrides=OVERRIDES)
    return out


def test_a_tokenizer_that_contradicts_the_prepared_data_is_refused(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["train", "gpt2-small", *MODEL, "--data", str(data), "-o", str(tmp_path / "run"), *SHORT_FLAGS]
    assert main([*args, "--tokenizer", "gpt2"]) == 1
    error_line(capsys, "prepared with the tokenizer 'bytes'", "--tokenizer")
    assert not (tmp_path / "run").exists()
    assert main([*args, "--tokenizer", "bytes"]) == 0  # the one it was prepared with


def resign_state(path: Path, **changes: str) -> None:
    """Edit a training state's header and sign it again (its digest is integrity only)."""
    with safe_open(str(path), framework="pt") as f:
        header = dict(f.metadata() or {})
        tensors = {name: f.get_tensor(name) for name in f.keys()}  # noqa: SIM118
    header.pop("zoo.digest")
    header.update(changes)
    header["zoo.digest"] = digest(header, tensors)
    safetensors.torch.save_file(tensors, str(path), metadata=header)


@pytest.mark.parametrize("field", ["settings", "manifest_digest", "param_groups"])
def test_a_re_signed_state_with_deeply_nested_json_is_a_checkpoint_error(run: Path, tmp_path: Path, field: str) -> None:
    out = tmp_path / "run"
    shutil.copytree(run, out)
    path = state_path(out / "v0001.safetensors")
    resign_state(path, **{field: "[" * 5000 + "]" * 5000})
    with pytest.raises(CheckpointError, match=rf"{field}.*nests"):
        read_state(path)


def test_a_version_copied_in_from_another_run_is_not_resumed(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two runs of the same settings; one's version (with its state) copied into the other's
    folder as its newest: the resume names both runs instead of continuing the copied one."""
    mine, other = tmp_path / "mine", tmp_path / "other"
    for out in (mine, other):
        assert main(["train", "gpt2-small", *MODEL, "--data", str(data), "-o", str(out), *SHORT_FLAGS]) == 0
    newest = versions(mine)[-1].version
    for suffix in (".safetensors", ".state.safetensors"):
        shutil.copy(other / f"v0001{suffix}", mine / f"v{newest + 1:04d}{suffix}")
    assert main(["train", "--resume", "-o", str(mine), "--data", str(data), "--steps", "4", "--quiet"]) == 1
    error_line(capsys, "holds versions of 2 runs", f"v{newest + 1:04d}.safetensors", "another run")
    assert len(versions(mine)) == newest + 1  # nothing trained, nothing saved


def test_a_resume_that_stretches_the_schedule_says_what_the_rate_does(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Training longer is allowed, and the rate at the resume point jumps: the warning says
    from what to what, computed by the schedule itself; the same --steps says nothing."""
    out = tmp_path / "run"
    lr = ["--lr", "0.01"]
    assert main(["train", "gpt2-small", *MODEL, "--data", str(data), "-o", str(out), *SHORT_FLAGS, *lr]) == 0
    capsys.readouterr()
    assert main(["train", "--resume", "-o", str(out), "--steps", "2", "--quiet"]) == 0
    assert "warning" not in capsys.readouterr().err
    assert main(["train", "--resume", "-o", str(out), "--steps", "6", "--quiet"]) == 0
    err = capsys.readouterr().err
    settings = TrainSettings(steps=6, lr=0.01)
    after = f"{learning_rate(2, settings):.3g}"
    before = f"{learning_rate(2, dataclasses.replace(settings, steps=2)):.3g}"
    assert before != after
    assert "--steps 6 changes the run's plan of 2 steps" in err and f"from {before} to {after}" in err, err
    logged = {row["step"]: row["lr"] for row in read_metrics(out)}
    assert math.isclose(logged[3], float(after), rel_tol=5e-3)  # the rate the resumed step used (update 2)
    assert main(["train", "--resume", "-o", str(out), "--steps", "5", "--quiet"]) == 0  # at 6: nothing to train
    assert "warning" not in capsys.readouterr().err


# -- the launcher's environment ------------------------------------------------------------------

LAUNCHER = [
    ({"WORLD_SIZE": "abc"}, "WORLD_SIZE='abc' must be a whole number >= 1"),
    ({"WORLD_SIZE": "0"}, "WORLD_SIZE='0' must be a whole number >= 1"),
    ({"RANK": "x"}, "RANK='x' must be a whole number"),
    ({"LOCAL_RANK": "\x1b[2J"}, "LOCAL_RANK='\\x1b[2J'"),
    ({"WORLD_SIZE": "2", "RANK": "-1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}, "RANK='-1'"),
    ({"WORLD_SIZE": "2", "RANK": "0"}, "MASTER_ADDR and MASTER_PORT are not set; start the run with torchrun"),
]


@pytest.mark.parametrize(
    "env,needle", LAUNCHER, ids=[" ".join(f"{k}={v!r}" for k, v in e.items()) for e, _ in LAUNCHER]
)
def test_a_launcher_environment_that_is_not_torchruns_is_one_error_line(
    data: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    env: dict[str, str],
    needle: str,
) -> None:
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main(["train", "gpt2-small", *MODEL, "--data", str(data), "-o", str(tmp_path / "run"), *SHORT_FLAGS]) == 1
    error_line(capsys, needle)
    assert not zoo.versions(tmp_path / "run") if (tmp_path / "run").is_dir() else True

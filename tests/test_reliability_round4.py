"""Reliability, round 4: the suite of issue 21 run again with new cases of each kind.

Attacks through the real CLI (``zoo.cli.main``) and API on real files:

1. data loss: ``zoo build -o`` over a file it did not write, a planted ``run.toml`` or
   plot link, a user's file given to ``zoo plot``;
2. state that does not belong: ``--tokenizer`` contradicting a prepared folder, a
   training state re-signed with hostile JSON;
3. files read without validation: ``--config`` files (bad UTF-8, deep nesting, huge
   integers, FIFOs, ``/dev/zero``), an HF ``config.json`` or shard index read by
   ``zoo info`` / ``zoo compare``, ``metrics.jsonl`` read by ``zoo plot``;
4. distributed runs: torchrun's environment variables (``WORLD_SIZE``, ``RANK``,
   ``LOCAL_RANK``) that are not numbers, a world without its rendezvous address;
5. numbers and terminals: paths and names holding rich markup (``[/]``) or control
   characters in spinners and table headers, ``$...$`` (mathtext) in plot labels;
6. smaller items: each of the above is one ``ZooError`` line, never a traceback.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import shutil
import signal
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import safetensors.torch
from safetensors import safe_open

import zoo
from helpers import not_a_regular_file, prepared_bytes, tiny
from zoo.checkpoint import digest, versions
from zoo.cli import main
from zoo.errors import CheckpointError
from zoo.nn.hookspecs import hookimpl
from zoo.nn.registry import Registry, set_default_registry
from zoo.training import TrainSettings, train
from zoo.training.curves import read_metrics
from zoo.training.state import read_state, state_path
from zoo.training.stateful import learning_rate

CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
OVERRIDES = dict(n_layers=1, d_model=32, n_heads=2, vocab_size=256, max_seq_len=32, dropout=0.0)
SETTINGS = TrainSettings(steps=2, batch_size=2, seq_len=16, eval_every=2, eval_batches=1, save_every=2, threads=1)
MODEL = ["--set", "n_layers=1", "--set", "d_model=32", "--set", "n_heads=2", "--set", "vocab_size=256"]
MODEL += ["--set", "max_seq_len=32", "--set", "dropout=0.0"]
FLAGS = ["--steps", "2", "--batch-size", "2", "--seq-len", "16", "--eval-every", "2", "--eval-batches", "1"]
FLAGS += ["--threads", "1", "--quiet"]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return prepared_bytes(tmp_path_factory.mktemp("data"), 8_000)


@pytest.fixture(scope="module")
def run(data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished tiny run (one version, its state, metrics.jsonl); copy it before editing."""
    out = tmp_path_factory.mktemp("run") / "run"
    train("gpt2-small", data, SETTINGS, out=out, overrides=OVERRIDES)
    return out


def one_error_line(capsys: pytest.CaptureFixture[str], *needles: str) -> str:
    """stderr holds one ``error:`` line naming each needle: a ZooError, not a traceback
    or an "unexpected" bug report, and no raw control character."""
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert "unexpected" not in err and "Traceback" not in err and not CONTROL.search(err.rstrip("\n")), err
    for needle in needles:
        assert needle in err, err
    return err


@pytest.fixture
def alarm() -> Iterator[None]:
    """Fail a test that blocks (a FIFO read, /dev/zero) after 10 s instead of hanging the suite."""

    def stop(*_: Any) -> None:
        raise TimeoutError("blocked on a read")

    if threading.current_thread() is not threading.main_thread():  # pragma: no cover - xdist runs tests in main
        yield
        return
    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(10)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


# -- 1. data loss -------------------------------------------------------------------------------


def test_build_refuses_a_file_it_did_not_write_unless_overwrite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mine = tmp_path / "mine.safetensors"
    mine.write_bytes(b"precious")
    assert main(["build", "gpt2-small", *MODEL, "-o", str(mine)]) == 1
    one_error_line(capsys, "exists", "--overwrite")
    assert mine.read_bytes() == b"precious"
    assert main(["build", "gpt2-small", *MODEL, "-o", str(mine), "--overwrite"]) == 0
    assert zoo.load(mine).config.d_model == 32


PROBE = ["probe", "gpt2-small", *MODEL, "--tokenizer", "bytes", "--batch-size", "1", "--seq-len", "8"]


@pytest.mark.parametrize(
    ("command", "magic"),
    [
        (lambda run, out: ["plot", str(run), "-o", str(out)], b"\x89PNG"),
        (lambda run, out: [*PROBE, "-o", str(out)], b"{"),
        (lambda run, out: [*PROBE, "--plot", str(out)], b"\x89PNG"),
    ],
    ids=["plot -o", "probe -o", "probe --plot"],
)
def test_every_single_file_output_refuses_an_existing_file_unless_overwrite(
    run: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    command: Callable[[Path, Path], list[str]],
    magic: bytes,
) -> None:
    """``zoo build -o FILE`` (above), ``zoo plot -o``, ``zoo probe -o`` and ``--plot``: a file
    the user has is never replaced unasked, and the refusal comes before any work."""
    mine = tmp_path / ("mine.json" if magic == b"{" else "mine.png")  # a figure's suffix names its format
    mine.write_bytes(b"precious")

    def work(*args: object, **kwargs: object) -> None:
        raise AssertionError("the command worked before refusing its output")

    with monkeypatch.context() as patched:
        patched.setattr("zoo.cli.probe.probe_designs", work)
        patched.setattr("zoo.cli.train.plot_runs", work)
        assert main(command(run, mine)) == 1
    one_error_line(capsys, f"{mine.name} exists", "--overwrite")
    assert mine.read_bytes() == b"precious"
    assert main([*command(run, mine), "--overwrite"]) == 0
    assert mine.read_bytes().startswith(magic)


def test_a_planted_run_toml_link_is_replaced_not_written_through(data: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim.toml"
    victim.write_text("precious")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "run.toml").symlink_to(victim)
    assert main(["train", "gpt2-small", *MODEL, "--data", str(data), "-o", str(tmp_path / "run"), *FLAGS]) == 0
    assert victim.read_text() == "precious" and not (tmp_path / "run" / "run.toml").is_symlink()


def test_a_plot_output_link_is_replaced_not_written_through(run: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim.png"
    victim.write_text("precious")
    (tmp_path / "link.png").symlink_to(victim)
    assert main(["plot", str(run), "-o", str(tmp_path / "link.png")]) == 1  # refused: it exists
    assert main(["plot", str(run), "-o", str(tmp_path / "link.png"), "--overwrite"]) == 0
    assert victim.read_text() == "precious"
    assert (tmp_path / "link.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize("owner", ["train", "hf-export"])
@pytest.mark.parametrize("command", ["build", "convert", "zoo.save"])
def test_no_version_is_added_to_a_folder_made_for_another_output(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], owner: str, command: str
) -> None:
    """A version saved into a run folder would become the run's newest (with no training
    state: its resume broken); into an export folder, a mix of the two."""
    folder = tmp_path / "out"
    if owner == "train":
        shutil.copytree(run, folder)
    else:
        zoo.to_hf(tiny(vocab_size=256), folder)
    before = sorted(os.listdir(folder))
    if command == "zoo.save":
        with pytest.raises(CheckpointError, match=rf"made by zoo[ .]\S+ \({owner} folder\)"):
            zoo.save(tiny(), folder)
    else:
        source = zoo.to_hf(tiny(), tmp_path / "hf")
        argv = ["build", "gpt2-small", *MODEL] if command == "build" else ["convert", "--from-hf", str(source)]
        assert main([*argv, "-o", str(folder)]) == 1
        one_error_line(capsys, "was made by", "save to another folder")
    assert sorted(os.listdir(folder)) == before


def test_ablate_refuses_a_train_run_before_training(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    shutil.copytree(run, out)
    assert main(["ablate", "-o", str(out), "--steps", "2", "--seeds", "1", "--tokenizer", "bytes"]) == 1
    one_error_line(capsys, "made by zoo train (train)", "--overwrite")


# -- 2. state that does not belong ---------------------------------------------------------------


def test_a_tokenizer_that_contradicts_the_prepared_data_is_refused(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["train", "gpt2-small", *MODEL, "--data", str(data), "-o", str(tmp_path / "run"), *FLAGS]
    assert main([*args, "--tokenizer", "gpt2"]) == 1
    one_error_line(capsys, "prepared with the tokenizer 'bytes'", "--tokenizer")
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
        assert main(["train", "gpt2-small", *MODEL, "--data", str(data), "-o", str(out), *FLAGS]) == 0
    newest = versions(mine)[-1].version
    for suffix in (".safetensors", ".state.safetensors"):
        shutil.copy(other / f"v0001{suffix}", mine / f"v{newest + 1:04d}{suffix}")
    assert main(["train", "--resume", "-o", str(mine), "--data", str(data), "--steps", "4", "--quiet"]) == 1
    one_error_line(capsys, "holds versions of 2 runs", f"v{newest + 1:04d}.safetensors", "another run")
    assert len(versions(mine)) == newest + 1  # nothing trained, nothing saved


def test_a_resume_that_stretches_the_schedule_says_what_the_rate_does(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Training longer is allowed, and the rate at the resume point jumps: the warning says
    from what to what, computed by the schedule itself; the same --steps says nothing."""
    out = tmp_path / "run"
    lr = ["--lr", "0.01"]
    assert main(["train", "gpt2-small", *MODEL, "--data", str(data), "-o", str(out), *FLAGS, *lr]) == 0
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


# -- 3. files read without validation --------------------------------------------------------------

CONFIG_FILES = [
    ("bad UTF-8", b"steps = 2\n\xff\xfe\n", "not UTF-8"),
    ("nested past the stack", b"x = " + b"[" * 5000 + b"]" * 5000 + b"\n", "not a config file"),
    ("an integer of 100,000 digits", b"steps = " + b"9" * 100_000 + b"\n", "not a config file"),
    ("over the size limit", b"# " + b"x" * (2 << 20) + b"\n", "bytes, more than"),
]


@pytest.mark.parametrize("content,needle", [c[1:] for c in CONFIG_FILES], ids=[c[0] for c in CONFIG_FILES])
def test_a_damaged_config_file_is_one_error_line(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, needle: str
) -> None:
    (tmp_path / "run.toml").write_bytes(content)
    args = ["train", "gpt2-small", *MODEL, "--data", str(data), "-o", str(tmp_path / "r"), *FLAGS]
    args += ["--config", str(tmp_path / "run.toml")]
    assert main(args) == 1
    one_error_line(capsys, needle)


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero", "folder"])
def test_a_config_file_that_is_not_a_regular_file_is_refused_without_reading(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str, alarm: None
) -> None:
    config = not_a_regular_file(tmp_path / "study.toml", kind)
    start = time.monotonic()
    assert main(["ablate", "--config", str(config), "-o", str(tmp_path / "abl")]) == 1
    assert time.monotonic() - start < 5  # refused on sight, not after a blocked read
    one_error_line(capsys, "config file", "regular file" if kind != "folder" else "folder")


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero"])
def test_a_checkpoint_that_is_a_device_or_fifo_is_named_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str, alarm: None
) -> None:
    """Not "empty (0 bytes)", the size a device reports: what it is, for inspect and load."""
    file = not_a_regular_file(tmp_path / "model.safetensors", kind)
    assert main(["inspect", str(file)]) == 1
    one_error_line(capsys, "regular file")
    with pytest.raises(zoo.CheckpointError, match="not a regular file"):
        zoo.load(file)


def test_a_resumed_runs_damaged_run_toml_is_one_error_line(
    run: Path, data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    shutil.copytree(run, out)
    (out / "run.toml").write_bytes(b"steps = " + b"[" * 3000 + b"]" * 3000)
    assert main(["train", "--resume", "-o", str(out), "--data", str(data)]) == 1
    one_error_line(capsys, "run.toml")


@pytest.fixture
def hf_folder(tmp_path: Path) -> Path:
    return zoo.to_hf(tiny(), tmp_path / "hf")


@pytest.mark.parametrize(
    "text,needle",
    [
        ("[" * 100_000 + "]" * 100_000, "nests"),
        ('{"n_embd": 32, "x": ' * 40 + "1" + "}" * 40, "nests"),
        ('{"n_head": Infinity}', "Infinity"),
        ("\ufeff{}", "not valid JSON"),
    ],
)
@pytest.mark.parametrize("command", ["info", "compare"])
def test_zoo_info_and_compare_read_a_config_json_through_the_validated_reader(
    hf_folder: Path, capsys: pytest.CaptureFixture[str], text: str, needle: str, command: str
) -> None:
    (hf_folder / "config.json").write_text(text, encoding="utf-8")
    argv = ["info", str(hf_folder)] if command == "info" else ["compare", str(hf_folder), "gpt2-small"]
    assert main(argv) == 1
    one_error_line(capsys, "config.json", needle)


def test_a_shard_index_nested_past_the_stack_is_an_interop_error(hf_folder: Path) -> None:
    from zoo.errors import InteropError
    from zoo.interop.hub import _shards

    index = hf_folder / "model.safetensors.index.json"
    index.write_text('{"weight_map": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(InteropError, match="shard index"):
        _shards(index)


METRICS_DAMAGE = [
    ("bad UTF-8", b"\xff\xfe\n"),
    ("nested past the stack", b"[" * 100_000 + b"\n"),
    ("a step without a loss", b'{"step": 9, "lr": 0.001}\n'),
    ("a dict for a loss", b'{"step": 9, "loss": {"a": 1}, "lr": 0.001}\n'),
    ("a string for lr", b'{"step": 9, "loss": 1.0, "lr": "high"}\n'),
    ("a val loss of 1e400", b'{"step": 9, "loss": 1.0, "lr": 0.001, "val_loss": 1e400}\n'),
    ("a bool step", b'{"step": true, "loss": 1.0, "lr": 0.001}\n'),
    ("a line of 1 MiB", b'{"step": 9, "loss": 1.0, "lr": 0.001, "x": "' + b"y" * (1 << 20) + b'"}\n'),
]


@pytest.mark.parametrize("damage", [d for _, d in METRICS_DAMAGE], ids=[n for n, _ in METRICS_DAMAGE])
def test_zoo_plot_skips_damaged_metrics_lines(run: Path, tmp_path: Path, damage: bytes) -> None:
    from zoo.training.curves import read_metrics

    out = tmp_path / "run"
    shutil.copytree(run, out)
    with open(out / "metrics.jsonl", "ab") as handle:
        handle.write(damage)
    assert [row["step"] for row in read_metrics(out)] == [1, 2]
    assert main(["plot", str(out), "-o", str(tmp_path / "curves.png")]) == 0


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero"])
def test_zoo_plot_refuses_a_metrics_file_that_is_not_a_regular_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str, alarm: None
) -> None:
    (tmp_path / "run").mkdir()
    not_a_regular_file(tmp_path / "run" / "metrics.jsonl", kind)
    assert main(["plot", str(tmp_path / "run"), "-o", str(tmp_path / "c.png")]) == 1
    one_error_line(capsys, "regular file", "zoo train")


# -- 4. distributed: the launcher's environment ---------------------------------------------------

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
    assert main(["train", "gpt2-small", *MODEL, "--data", str(data), "-o", str(tmp_path / "run"), *FLAGS]) == 1
    one_error_line(capsys, needle)
    assert not zoo.versions(tmp_path / "run") if (tmp_path / "run").is_dir() else True


# -- 5. terminals: markup and control characters in paths and names --------------------------------


@pytest.fixture
def hostile_dir(tmp_path: Path) -> Path:
    """A folder whose path holds a rich closing tag, an opening one and an escape sequence."""
    folder = tmp_path / "a[" / "]b [bold]\x1b[2J"
    folder.mkdir(parents=True)
    return folder


@pytest.mark.parametrize(
    "argv",
    [
        lambda d: ["inspect", str(d / "m.safetensors")],
        lambda d: ["build", "gpt2-small", *MODEL, "-o", str(d / "new.safetensors")],
        lambda d: ["convert", "--to-hf", str(d / "m.safetensors"), "-o", str(d / "hf")],
        lambda d: ["compare", str(d / "m.safetensors"), "gpt2-small"],
        lambda d: ["info", str(d / "m.safetensors")],
        lambda d: [
            "generate",
            str(d / "m.safetensors"),
            "--prompt",
            "a",
            "--max-new-tokens",
            "2",
            "--tokenizer",
            "bytes",
        ],
    ],
    ids=["inspect", "build", "convert", "compare", "info", "generate"],
)
def test_paths_with_markup_and_escapes_are_plain_text_everywhere(
    hostile_dir: Path, capsys: pytest.CaptureFixture[str], argv: Any
) -> None:
    zoo.save(tiny(vocab_size=256), hostile_dir / "m.safetensors")
    assert main(argv(hostile_dir)) == 0
    out, err = capsys.readouterr()
    assert "\x1b" not in out + err and "unexpected" not in err, err


def test_convert_from_hf_with_markup_in_both_paths(hostile_dir: Path) -> None:
    folder = zoo.to_hf(tiny(), hostile_dir / "hf")
    assert main(["convert", "--from-hf", str(folder), "-o", str(hostile_dir / "back.safetensors")]) == 0


@pytest.mark.parametrize("where", ["run folder", "title"])
def test_dollar_signs_in_plot_labels_are_text_not_mathtext(run: Path, tmp_path: Path, where: str) -> None:
    out = tmp_path / "x$\\undefinedcommand{$" if where == "run folder" else tmp_path / "run"
    shutil.copytree(run, out)
    title = ["--title", "$\\frac{$ 5$"] if where == "title" else []
    assert main(["plot", str(out), "-o", str(tmp_path / "c.png"), *title]) == 0
    assert (tmp_path / "c.png").read_bytes().startswith(b"\x89PNG")


def test_probe_plot_labels_are_text_not_mathtext(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    import torch

    from zoo.probe import plot, probe

    result = probe(tiny(vocab_size=256), torch.randint(0, 256, (2, 8)), label="$\\x{$", source="$\\frac{$")
    assert plot([result], tmp_path / "p.png").read_bytes().startswith(b"\x89PNG")


class HostilePlugin:
    """A plugin whose preset name and description carry escapes and rich markup."""

    @hookimpl
    def zoo_register_presets(self, register: Any) -> None:
        fields = dict(d_model=32, n_layers=1, n_heads=2, vocab_size=97, max_seq_len=16)
        register("evil\x1b[2J[/]", fields, description="desc \x1b]0;pwned\x07 [/bold] [link=http://x]y[/link]")


class FailingPlugin:
    """A plugin that fails to register with escapes in its error."""

    @hookimpl
    def zoo_register_presets(self, register: Any) -> None:
        raise ValueError("boom \x1b[2J \x9b2J [/] [link=http://x]y[/link]")


@pytest.mark.parametrize(
    "plugin,argv",
    [
        (HostilePlugin, ["list"]),
        (HostilePlugin, ["components"]),
        (HostilePlugin, ["info", "evil\x1b[2J[/]"]),
        (FailingPlugin, ["plugins"]),
        (FailingPlugin, ["list"]),
    ],
)
def test_plugin_strings_reach_every_table_escaped(
    capsys: pytest.CaptureFixture[str], plugin: type, argv: list[str]
) -> None:
    previous = set_default_registry(Registry(plugins=[plugin()]))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # the failing plugin's own warning, said by the CLI
            assert main(argv) == 0
    finally:
        set_default_registry(previous)
    out, err = capsys.readouterr()
    assert not CONTROL.search(out + err.replace("\n", "")), (out + err)[:2000]
    if plugin is HostilePlugin and argv[0] != "components":
        assert "\\x1b]0;pwned" in out and "[/bold] [link=http://x]y[/link]" in out  # escaped, markup as text
    if argv[0] == "plugins":
        assert "boom \\x1b[2J \\x9b2J [/]" in out


# -- 5. numbers: a loss that is not a number ------------------------------------------------------


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
        one_error_line(capsys, "the loss is nan", "blocks.1.mlp.up.weight", "--version")


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
    one_error_line(capsys, "the loss is nan", "blocks.0.attn.qkv.weight")


# -- 6. smaller: inputs that are not files ---------------------------------------------------------


@pytest.mark.parametrize("command", ["data prepare", "train", "eval"])
def test_a_fifo_given_as_data_is_named_as_such(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, alarm: None
) -> None:
    os.mkfifo(tmp_path / "in.txt")
    zoo.save(tiny(vocab_size=256), tmp_path / "m.safetensors")
    argv = {
        "data prepare": [
            "data",
            "prepare",
            str(tmp_path / "in.txt"),
            "-o",
            str(tmp_path / "p"),
            "--tokenizer",
            "bytes",
        ],
        "train": ["train", "gpt2-small", *MODEL, "--data", str(tmp_path / "in.txt"), "-o", str(tmp_path / "r"), *FLAGS],
        "eval": ["eval", str(tmp_path / "m.safetensors"), "--data", str(tmp_path / "in.txt"), "--seq-len", "16"],
    }[command]
    assert main(argv) == 1
    one_error_line(capsys, "is not a regular file or folder (a FIFO")

"""Crash safety and concurrency of saves, with real processes.

Children are forked from the test process (so they start in milliseconds, with torch
already imported) and killed with SIGKILL: no Python cleanup, no ``finally``, exactly
what a crash or the OOM killer does. Afterwards every version under a final name must
load and verify, and nothing else may be left but hidden temporary files.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import re
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import zoo
import zoo.checkpoint.store
from helpers import tiny
from zoo.checkpoint import inspect

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork and SIGKILL (POSIX)")
FORK = multiprocessing.get_context("fork") if hasattr(os, "fork") else None
VERSION = re.compile(r"v\d{4,}\.safetensors")
# zoo's temporary files, and safetensors' own (it writes through a NamedTempFile).
TEMPORARY = re.compile(r"\..+\.\d+-[0-9a-f]{8}\.tmp|\.tmp\w{6}")


def medium() -> nn.Module:
    """About 4 MB of weights: a save takes long enough to be killed in the middle."""
    return tiny(d_model=128, n_layers=4, vocab_size=2048, max_seq_len=128)


def check_directory(run: Path, model: nn.Module) -> list[int]:
    """Every final name verifies; every other file is a temporary. Returns the steps."""
    for entry in run.iterdir():
        assert VERSION.fullmatch(entry.name) or TEMPORARY.fullmatch(entry.name), entry.name
    steps = []
    for info in zoo.versions(run):
        assert inspect(info.path).digest_ok is True  # whole file read and verified
        steps.append(info.metadata["step"])
    return steps


def _kill_self(*args: Any, **kwargs: Any) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _save_with_fault(model: nn.Module, path: Path, step: int, fault: str) -> None:
    """In a forked child: save, SIGKILLing this process at the named point."""
    ckpt = zoo.checkpoint.store
    if fault == "mid-write":  # half the file written, then the process dies

        def write_half(filename: Path, tensors: Any, metadata: Any) -> None:
            real_write(filename, tensors, metadata)
            with open(filename, "r+b") as handle:
                handle.truncate(os.path.getsize(filename) // 2)
            _kill_self()

        real_write = ckpt.write_safetensors
        ckpt.write_safetensors = write_half
    elif fault == "before-fsync":
        ckpt._fsync = _kill_self
    elif fault == "before-publish":
        os.link = _kill_self
        os.replace = _kill_self
    elif fault == "after-publish":
        ckpt._fsync_directory = _kill_self
    zoo.save(model, path, metadata={"step": step})
    os._exit(0)


def run_child(target: Callable[..., None], *args: Any) -> int:
    child = FORK.Process(target=target, args=args, daemon=True)
    child.start()
    child.join(timeout=120)
    if child.is_alive():
        stop([child])
        pytest.fail("the child hung")
    return child.exitcode


def stop(children: list[Any]) -> None:
    """SIGKILL and reap any child still running, so none outlives its test."""
    for child in children:
        if child.is_alive():
            child.kill()
        child.join()


FAULTS = ["mid-write", "before-fsync", "before-publish", "after-publish"]


@pytest.mark.parametrize("fault", FAULTS)
def test_a_version_killed_at_each_stage_is_all_or_nothing(fault: str, tmp_path: Path) -> None:
    model, run = medium(), tmp_path / "run"
    zoo.save(model, run, metadata={"step": 0})
    assert run_child(_save_with_fault, model, run, 1, fault) == -signal.SIGKILL
    published = fault == "after-publish"
    assert check_directory(run, model) == ([0, 1] if published else [0])
    assert torch.equal(zoo.load(run).tok_emb.weight, model.tok_emb.weight)
    assert zoo.save(model, run, metadata={"step": 2}).name == (
        "v0003.safetensors" if published else "v0002.safetensors"
    )


@pytest.mark.parametrize("fault", FAULTS)
def test_a_single_file_killed_at_each_stage_keeps_old_or_new(fault: str, tmp_path: Path) -> None:
    model, path = medium(), tmp_path / "model.safetensors"
    zoo.save(model, path, metadata={"step": 0})
    assert run_child(_save_with_fault, model, path, 1, fault) == -signal.SIGKILL
    expected = 1 if fault == "after-publish" else 0
    assert inspect(path).metadata == {"step": expected} and inspect(path).digest_ok
    for entry in tmp_path.iterdir():
        assert entry == path or TEMPORARY.fullmatch(entry.name), entry.name


def _save_forever(model: nn.Module, run: Path, first_step: int) -> None:
    for step in range(first_step, first_step + 300):  # bounded, should the test fail
        zoo.save(model, run, metadata={"step": step})


def wait_for(condition: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail("timed out waiting for the child")
        time.sleep(0.001)


def test_sigkill_at_random_moments_leaves_earlier_versions_intact(tmp_path: Path) -> None:
    """Six children save in a loop and are killed: at a random moment after their first
    version, or (odd rounds) just as a temporary file appears, i.e. mid-write."""
    model, run = medium(), tmp_path / "run"
    rng = random.Random(1234)
    steps: list[int] = []
    children: list[Any] = []
    try:
        for round_ in range(6):
            child = FORK.Process(target=_save_forever, args=(model, run, 1000 * round_), daemon=True)
            children.append(child)
            child.start()
            done = len(steps)
            wait_for(lambda: run.is_dir() and len(zoo.versions(run)) > done)  # noqa: B023 (called at once)
            if round_ % 2:
                wait_for(lambda: any(TEMPORARY.fullmatch(name) for name in os.listdir(run)))
            else:
                time.sleep(rng.uniform(0.0, 0.2))
            child.kill()  # SIGKILL, wherever the save happens to be
            child.join()
            assert child.exitcode == -signal.SIGKILL
            found = check_directory(run, model)
            assert found[: len(steps)] == steps  # nothing earlier lost or changed
            new = found[len(steps) :]
            assert new and new == list(range(1000 * round_, 1000 * round_ + len(new)))
            steps = found
        assert torch.equal(zoo.load(run).blocks[3].mlp.down.weight, model.blocks[3].mlp.down.weight)
    finally:
        stop(children)
        shutil.rmtree(run, ignore_errors=True)


def _save_some(model: nn.Module, run: Path, writer: int, count: int, start: Any, results: Any) -> None:
    start.wait()
    for step in range(count):
        path = zoo.save(model, run, metadata={"writer": writer, "step": step})
        results.put((writer, step, path.name))


def test_four_processes_saving_into_one_directory_get_distinct_versions(tmp_path: Path) -> None:
    model, run, writers, count = tiny(), tmp_path / "run", 4, 5
    start, results = FORK.Barrier(writers), FORK.Queue()
    children = [
        FORK.Process(target=_save_some, args=(model, run, w, count, start, results), daemon=True)
        for w in range(writers)
    ]
    try:
        for child in children:
            child.start()
        saved = [results.get(timeout=120) for _ in range(writers * count)]
        for child in children:
            child.join(timeout=60)
            assert child.exitcode == 0
    finally:
        stop(children)
    names = [name for _, _, name in saved]
    assert len(set(names)) == writers * count  # no two saves got the same version
    found = zoo.versions(run)
    assert [v.version for v in found] == list(range(1, writers * count + 1))
    by_name = {v.path.name: (v.metadata["writer"], v.metadata["step"]) for v in found}
    assert sorted(by_name.values()) == sorted((w, s) for w, s, _ in saved)
    assert all(by_name[name] == (w, s) for w, s, name in saved)
    for info in found:
        assert torch.equal(zoo.load(info.path).tok_emb.weight, model.tok_emb.weight)
    assert sorted(e.name for e in run.iterdir()) == sorted(names)  # no temporaries left

"""``zoo ablate --launcher ray`` on a local Ray instance: the same runs, records and table as
``--workers 2`` with the same seeds (training is deterministic per seed), and a resume that
trains nothing. Slow: a Ray instance takes tens of seconds to start on two cores."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from helpers import TINY_ABLATION
from zoo.cli import main

pytest.importorskip("ray")


def losses(doc: dict[str, Any]) -> dict[str, list[float]]:
    return {run["name"]: [s["final_val_loss"] for s in run["seeds"]] for run in doc["runs"]}


@pytest.mark.slow
def test_ray_gives_the_table_of_workers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    flags = [*TINY_ABLATION, "--swaps", "placement", "--seeds", "2", "--json"]
    assert main(["ablate", *flags, "--workers", "2", "-o", str(tmp_path / "local")]) == 0
    local = json.loads(capsys.readouterr().out)
    assert main(["ablate", *flags, "--launcher", "ray", "-o", str(tmp_path / "ray")]) == 0
    on_ray = json.loads(capsys.readouterr().out)
    assert losses(on_ray) == losses(local) and len(losses(local)) == 3
    assert on_ray["table"] == local["table"] and "--launcher ray" in on_ray["command"]
    # Again on the same folder: every run is read back, none trained.
    assert main(["ablate", *flags, "--launcher", "ray", "-o", str(tmp_path / "ray")]) == 0
    again = json.loads(capsys.readouterr().out)
    assert losses(again) == losses(on_ray)
    records = sorted(p.name for p in (tmp_path / "ray").glob("*.json") if p.name != "ablation.json")
    assert records == sorted(p.name for p in (tmp_path / "local").glob("*.json") if p.name != "ablation.json")


def closed_port() -> int:
    """A local port no one listens at (bound, then released)."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize(
    ("address", "words"),
    [
        ("127.0.0.1:{closed}", "no Ray head answered at 127.0.0.1"),
        ("ray://127.0.0.1:{closed}", "no Ray head answered at 127.0.0.1"),
        ("garbage", "is not HOST:PORT"),
        ("127.0.0.1:99999", "is not HOST:PORT"),
        (":6379", "is not HOST:PORT"),
    ],
)
def test_a_ray_address_no_head_answers_at_is_refused_in_seconds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], address: str, words: str
) -> None:
    """ray.init waits on a closed port without end: the ablation is refused within the
    connect timeout, naming RAY_ADDRESS, and nothing trains."""
    import time

    from zoo.ablate.cluster import CONNECT_TIMEOUT

    monkeypatch.setenv("RAY_ADDRESS", address.format(closed=closed_port()))
    began = time.monotonic()
    assert main(["ablate", *TINY_ABLATION, "--launcher", "ray", "-o", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert words in err and "RAY_ADDRESS" in err and time.monotonic() - began < CONNECT_TIMEOUT + 20
    assert not list((tmp_path / "out").glob("*.safetensors"))

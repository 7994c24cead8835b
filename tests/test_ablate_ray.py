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
pytestmark = pytest.mark.slow


def losses(doc: dict[str, Any]) -> dict[str, list[float]]:
    return {run["name"]: [s["final_val_loss"] for s in run["seeds"]] for run in doc["runs"]}


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

"""The suite's own set-up: ``make test``'s ``--dist loadgroup`` keeps a group's tests on one
worker (a doc file's blocks share a session; tests that share answers share a worker)."""

from __future__ import annotations

import sys
from pathlib import Path

from helpers import run

ROOT = Path(__file__).resolve().parents[1]

GROUPED = """
import os
import pytest

@pytest.mark.xdist_group("together")
@pytest.mark.parametrize("i", range(8))
def test_grouped(i):
    with open(os.path.join(os.environ["GROUPS_OUT"], f"grouped-{i}"), "w") as out:
        out.write(os.environ["PYTEST_XDIST_WORKER"])

@pytest.mark.parametrize("i", range(8))
def test_free(i):
    pass
"""


def test_a_group_runs_on_one_worker_under_the_projects_own_options(tmp_path: Path) -> None:
    (tmp_path / "test_grouped.py").write_text(GROUPED)
    config = ["-c", str(ROOT / "pyproject.toml"), "--rootdir", str(tmp_path), "-p", "no:cacheprovider"]
    command = [sys.executable, "-m", "pytest", *config, "-n", "2", "-q", str(tmp_path / "test_grouped.py")]
    result = run(command, {"GROUPS_OUT": str(tmp_path)}, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    workers = {(tmp_path / f"grouped-{i}").read_text() for i in range(8)}
    assert len(workers) == 1, f"one group ran on workers {sorted(workers)}: --dist loadgroup is not in effect"

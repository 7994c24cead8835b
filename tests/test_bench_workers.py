"""``zoo bench workers`` measures worker x thread plans for ``zoo ablate --workers``: each
plan's workers are real processes training the zoo's loop, and the JSON names every plan."""

from __future__ import annotations

import json

import pytest

from bench import bench_workers


@pytest.mark.parametrize(
    ("cores", "plans"),
    [(1, [(1, 1)]), (2, [(2, 1), (1, 2)]), (4, [(4, 1), (2, 2), (1, 4)]), (3, [(3, 1), (1, 3)])],
)
def test_the_default_plans_spend_every_core(cores: int, plans: list[tuple[int, int]]) -> None:
    assert bench_workers.default_plans(cores) == plans
    assert all(w * t == cores for w, t in plans)


@pytest.mark.slow  # three fresh processes import torch and the zoo
def test_each_plan_trains_in_its_own_processes_and_the_best_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    bench_workers.main(["--rung", "16x1", "--plans", "2x1,1x1", "--steps", "5", "--rounds", "1", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert set(out["plans"]) == {"2x1", "1x1"} and all(s > 0 for s in out["plans"].values())
    assert out["best"] == max(out["plans"], key=out["plans"].__getitem__)
    assert all(len(r) == 1 for r in out["rounds"].values())

"""Only rows that learned are read: every row (not only base and target) is held against the
bigram reference; a row that does not beat it in every seed is shown as *did not learn*, with
its cause, never marked, and left out of interactions and trends; a marked control makes a
table's marks unreliable. Real tiny runs (two steps learn nothing) and constructed records."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from zoo.ablate import AblationResult, run_ablation
from zoo.ablate.ladder import Cell, Rung, StudyResult
from zoo.ablate.results import PLATEAU, AblationRun, learning_cause, swap_interactions, unlearned_interactions

# One worker for the whole file: its module fixtures (runs, data, answers) are built once, not once per worker.
pytestmark = pytest.mark.xdist_group("ablate-learning")

TINY = dict(d_model=16, layers=1, heads=2, seq_len=16, steps=2, batch=2, eval_every=2, tokenizer="bytes")
SWAPS = ["embedding_scale", "init", "embedding_scale+init"]


@pytest.fixture(scope="module")
def unlearned(tmp_path_factory: pytest.TempPathFactory) -> tuple[AblationResult, Path]:
    out = tmp_path_factory.mktemp("unlearned") / "ablation"
    return run_ablation(
        "transformer-2017", "gpt2-small", **TINY, max_chars=4000, seeds=2, swaps=SWAPS, out_dir=out
    ), out


def with_losses(run: AblationRun, losses: list[float]) -> AblationRun:
    return dataclasses.replace(run, seeds=[dataclasses.replace(s, final_val_loss=v) for s, v in zip(run.seeds, losses)])


def test_every_row_that_did_not_learn_is_named_never_marked_and_in_the_files(
    unlearned: tuple[AblationResult, Path],
) -> None:
    result, out = unlearned
    b = result.baselines
    assert b is not None and b.fivegram is not None and b.fivegram < b.trigram  # type: ignore[operator]
    rows = [*result.runs, result.control]
    assert all(run is not None and not run.learned for run in rows)
    assert all(run is not None and not run.significant and not run.significant_before_correction for run in rows)
    assert all("plateaus at the unigram" in (run.not_learned or "") for run in result.runs)
    assert result.interactions == []  # the pair's rows did not learn: no interaction is tested
    assert any("embedding_scale=none+init=gpt2 (not tested:" in note for note in result.notes)
    data = json.loads((out / "ablation.json").read_text())
    assert len(data["baselines"]["did_not_learn"]) == len(rows)
    assert [r["learned"] for r in data["runs"]] == [False] * len(result.runs)
    assert data["runs"][0]["did_not_learn"] == result.runs[0].not_learned
    report = (out / "report.md").read_text()
    assert "**Did not learn**" in report and "| did not learn |" in report
    assert "Significant at 95% after holm: none." in report


def test_the_cause_is_a_diverged_seed_a_plateau_or_the_bigram(unlearned: tuple[AblationResult, Path]) -> None:
    result, _ = unlearned
    b, run = result.baselines, result.runs[0]
    assert b is not None
    below = b.bigram - 0.3
    assert learning_cause(with_losses(run, [below, below - 0.01]), b) is None
    assert (
        learning_cause(with_losses(run, [below, math.nan]), b)
        == f"diverged (seed {run.seeds[1].seed}: loss not finite)"
    )
    flat = learning_cause(with_losses(run, [below, b.unigram - PLATEAU / 2]), b)
    assert flat == f"plateaus at the unigram ({b.unigram:.4f}) in seed {run.seeds[1].seed}"
    above = learning_cause(with_losses(run, [b.bigram + 0.01, below]), b)
    assert above == f"does not beat the bigram ({b.bigram:.4f}) in seed {run.seeds[0].seed}"
    # One seed at the bigram is enough: a row is evidence only when every seed learned.
    assert learning_cause(with_losses(run, [b.bigram, below]), b) is not None


def test_an_interaction_is_tested_only_when_its_rows_all_learned(unlearned: tuple[AblationResult, Path]) -> None:
    result, _ = unlearned
    runs = [dataclasses.replace(run, not_learned=None) for run in result.runs]
    assert [i.name for i in swap_interactions(runs)] == ["embedding_scale=none+init=gpt2"]
    assert unlearned_interactions(runs) == []
    for i in range(4):  # the base, either single swap or the pair: any one stuck leaves the test out
        stuck = [dataclasses.replace(run, not_learned="stuck") if j == i else run for j, run in enumerate(runs)]
        assert swap_interactions(stuck) == []
        assert unlearned_interactions(stuck) == [
            f"embedding_scale=none+init=gpt2 (not tested: {stuck[i].name} did not learn)"
        ]


def test_a_row_that_did_not_learn_at_a_rung_has_no_trend(unlearned: tuple[AblationResult, Path]) -> None:
    result, _ = unlearned

    def study(stuck_at: dict[str, str]) -> StudyResult:
        """Two rungs of the same records, every row learned but ``stuck_at``'s (rung: row)."""
        cells = []
        for rung in (Rung(16, 1, 2), Rung(32, 1, 2)):
            runs = [
                dataclasses.replace(r, not_learned="stuck" if stuck_at.get(rung.name) == r.name else None)
                for r in result.runs
            ]
            cells.append((Cell(rung, 1e-3, None, 2, 2), dataclasses.replace(result, runs=runs)))
        return StudyResult("a", "b", cells, [c.rung for c, _ in cells], [1e-3], [None], {}, "", Path("unused"))

    names = [run.name for run in result.runs[1:]]
    assert [t.name for t in study({}).trends()] == names
    for rung in ("16x1", "32x1"):
        assert [t.name for t in study({rung: "init=gpt2"}).trends()] == [n for n in names if n != "init=gpt2"]
    assert study({"32x1": result.runs[0].name}).trends() == []  # the base stuck: no Δ at that rung means anything

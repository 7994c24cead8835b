"""Studies you can defend, at a tiny scale: the control row, corrected p-values in the table,
report and --json, the noise floor, diagnostics inside every run, a scale ladder that
resumes without re-running finished rungs, rate and warm-up sweeps at the full budget, and
the generated docs region."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
import scipy.stats
import torch
from statsmodels.stats.multitest import multipletests

import zoo
from helpers import TINY_ABLATION, check_region_against_results
from zoo.ablate import MIN_EFFECT, AblationResult, run_ablation
from zoo.ablate.ablation import corrected
from zoo.ablate.advice import TRENDS, floor_sentence, trend
from zoo.ablate.docs import regions, write_docs_region
from zoo.ablate.ladder import ladder, row_named
from zoo.ablate.options import CONTROL_SEED_OFFSET, parse_scales
from zoo.ablate.stats import Interval, detectable_difference, mean_interval, paired_difference, welch_difference
from zoo.ablate.studies import non_embedding_parameters, run_study
from zoo.ablate.study_report import cells_table, sweep_sentences, warmup_verdict
from zoo.cli import main
from zoo.nn.registry import default_registry
from zoo.training import TrainSettings, bundled_corpus, lm_loss, load_corpus, validation_batches

# One worker for the whole file: its module fixtures (runs, data, answers) are built once, not once per worker.
pytestmark = pytest.mark.xdist_group("ablate-study")

TINY: dict[str, Any] = dict(
    d_model=16,
    layers=2,
    heads=2,
    seq_len=16,
    steps=8,
    batch=4,
    lr=1e-2,
    eval_every=4,
    max_chars=20_000,
    read_unlearned=True,
)
SWAPS = ["position", "placement"]
STATSMODELS = {"holm": "holm", "bonferroni": "bonferroni", "bh": "fdr_bh"}


def ablate(out: Path, **kwargs: Any) -> AblationResult:
    options = {**TINY, "seeds": 3, "swaps": SWAPS, "tokenizer": "bytes", **kwargs}
    return run_ablation("transformer-2017", "gpt2-small", out_dir=out, **options)


@pytest.fixture(scope="module")
def ablation(tmp_path_factory: pytest.TempPathFactory) -> AblationResult:
    return ablate(tmp_path_factory.mktemp("study"))


def test_every_study_has_a_control_row_under_its_own_seeds(ablation: AblationResult) -> None:
    names = [run.name for run in ablation.rows()]
    assert names[:2] == ["transformer-2017", "control"] and names[-1] == "gpt2-small"
    assert sorted(names[2:-1]) == ["placement=pre", "position=learned"]
    control, base = ablation.run("control"), ablation.runs[0]
    assert control is ablation.control and control not in ablation.runs  # runs: the plan's variants
    assert control.config == base.config and control.lr == base.lr
    assert [s.seed for s in control.seeds] == [CONTROL_SEED_OFFSET + s for s in ablation.seeds]
    assert control.losses() != base.losses()  # other inits and batches: seed noise, paired by position
    assert control.delta_vs_base.mean == pytest.approx(sum(c - b for b, c in zip(base.losses(), control.losses())) / 3)
    assert ablation.tests == 4  # control, two swaps, target
    assert all(s.checkpoint.name.startswith("control-transformer-2017") for s in control.seeds)


def test_p_adjusted_is_holm_over_every_row_but_the_base(ablation: AblationResult) -> None:
    tested = [*ablation.runs[1:], ablation.control]
    raw = [run.delta_vs_base.p_value for run in tested if run is not None]
    expected = multipletests(raw, method="holm")[1]
    assert [run.delta_vs_base.p_adjusted for run in tested] == pytest.approx(list(expected))
    for run in tested:
        assert run is not None
        d = run.delta_vs_base
        assert run.significant == (d.p_adjusted is not None and d.p_adjusted < 0.05 and abs(d.mean) >= MIN_EFFECT)
        assert run.significant_before_correction == (d.significant and abs(d.mean) >= MIN_EFFECT)
    assert ablation.runs[0].delta_vs_base.p_adjusted is None


@pytest.mark.parametrize("method", sorted(STATSMODELS))
def test_other_corrections_match_statsmodels(ablation: AblationResult, method: str) -> None:
    runs, control = copy.deepcopy(ablation.runs), copy.deepcopy(ablation.control)
    corrected(runs, method, control)
    tested = [*runs[1:], control]
    raw = [run.delta_vs_base.p_value for run in tested if run is not None]
    expected = multipletests(raw, method=STATSMODELS[method])[1]
    assert [run.delta_vs_base.p_adjusted for run in tested if run is not None] == pytest.approx(list(expected))
    corrected(runs, "none", control)
    assert [run.delta_vs_base.p_adjusted for run in tested if run is not None] == raw


def test_the_noise_floor_and_the_report(ablation: AblationResult) -> None:
    spreads = [run.delta_vs_base.sd for run in ablation.swaps]
    sd = math.sqrt(sum(s * s for s in spreads if s is not None) / len(spreads))
    floor = ablation.noise_floor()
    assert floor == pytest.approx(detectable_difference(sd, 3))
    assert ablation.noise_floor(corrected=True) == pytest.approx(detectable_difference(sd, 3, alpha=0.05 / 4))
    for run in [*ablation.runs[1:], ablation.control]:
        assert run is not None
        assert run.detectable == pytest.approx(detectable_difference(run.delta_vs_base.sd or 0.0, 3))
    assert ablation.report_path is not None
    report = ablation.report_path.read_text()
    assert f"Effects smaller than {floor:.4f} nats/token cannot be seen with 3 seeds" in report
    for heading in ("## Noise floor", "## Caveats", "## Next step", "| p adj |", "**control**"):
        assert heading in report, heading
    assert "Holm's step-down correction over the 4 tests" in report
    data = json.loads(ablation.results_path.read_text())
    assert data["correction"] == "holm" and data["noise_floor"]["delta"] == pytest.approx(floor)
    assert data["table"][1] == "control"
    for run in [*data["runs"][1:], data["control"]]:
        assert set(run["delta_vs_base"]) >= {"p_value", "p_adjusted", "sd"}


@pytest.mark.parametrize("widest", [0.5, 0.01])
def test_a_row_whose_spread_outweighs_the_others_is_named_with_the_floor_without_it(
    ablation: AblationResult, widest: float
) -> None:
    """Three swaps with paired spreads widest, 0.02 and 0.02: at 0.5 the first sets the floor
    (its variance outweighs the others' together) and the sentence names it with the floor of
    the other two; at 0.01 no row does and the sentence says nothing of it."""
    result = copy.deepcopy(ablation)
    result.runs.insert(1, dataclasses.replace(copy.deepcopy(result.swaps[0]), name="extra"))
    for run, sd in zip(result.swaps, (widest, 0.02, 0.02)):
        run.delta_vs_base = dataclasses.replace(run.delta_vs_base, sd=sd)
        run.delta_vs_previous = None
    sentence = floor_sentence(result)
    assert sentence is not None
    if widest > 0.1:
        assert result.dominant_spread() is result.swaps[0]
        rest = detectable_difference(0.02, 3)
        assert result.noise_floor(without=result.swaps[0].name) == pytest.approx(rest)
        assert f"one row sets it: `{result.swaps[0].name}`'s paired differences spread by 0.5000" in sentence
        assert f"at most 0.0200; without that row the floor is {rest:.4f}" in sentence
    else:
        assert result.dominant_spread() is None and "one row sets it" not in sentence


def test_diagnostics_are_recorded_at_every_evaluation(ablation: AblationResult) -> None:
    for run in ablation.rows():
        for seed in run.seeds:
            assert [d.step for d in seed.diagnostics] == [p.step for p in seed.curve] == [0, 4, 8]
            for d in seed.diagnostics:
                assert len(d.residual_rms) == 3 and len(d.grad_norm) == 2 and len(d.attention_entropy) == 2
                assert all(math.isfinite(v) and v > 0 for v in (*d.residual_rms, *d.grad_norm))
                assert all(0 < v <= math.log(16) for v in d.attention_entropy)  # seq_len 16: at most uniform
            # At initialisation attention is close to uniform over the causal prefix: the
            # entropy is the mean over query positions i of log(i + 1).
            uniform = sum(math.log(i + 1) for i in range(16)) / 16
            assert seed.diagnostics[0].attention_entropy == pytest.approx([uniform] * 2, rel=0.05)
    assert ablation.diagnostics_plot_path is not None and ablation.diagnostics_plot_path.is_file()
    data = json.loads(ablation.results_path.read_text())
    assert data["runs"][0]["seeds"][0]["diagnostics"][0]["step"] == 0


def test_diagnostics_match_a_direct_computation(ablation: AblationResult) -> None:
    """The last measurement is taken on the final weights, which the checkpoint holds:
    recompute it with a hand-written hook and a plain backward pass."""
    run = ablation.run("placement")
    seed = run.seeds[1]
    model = zoo.load(seed.checkpoint)
    corpus = load_corpus(bundled_corpus(), tokenizer="bytes", max_chars=TINY["max_chars"])
    settings = TrainSettings(steps=8, batch_size=4, seq_len=16, eval_every=4)
    inputs, targets = validation_batches(corpus.val, settings)[0]
    after: list[torch.Tensor] = []
    handles = [b.register_forward_hook(lambda _m, _a, out: after.append(out.detach())) for b in model.blocks]
    loss = lm_loss(model, inputs, targets)
    loss.backward()
    for handle in handles:
        handle.remove()
    last = seed.diagnostics[-1]
    assert last.residual_rms[1:] == pytest.approx([float(x.pow(2).mean().sqrt()) for x in after], rel=1e-5)
    norms = [math.sqrt(sum(float(p.grad.pow(2).sum()) for p in block.parameters())) for block in model.blocks]
    assert last.grad_norm == pytest.approx(norms, rel=1e-4)


def test_measuring_leaves_the_model_as_it_was() -> None:
    from zoo.ablate.diagnostics import measure

    model = zoo.build("gpt2-small", n_layers=2, d_model=32, n_heads=2, vocab_size=64, max_seq_len=16).train()
    x = torch.randint(0, 64, (2, 8))
    state = torch.random.get_rng_state()
    measure(model, x[:, :-1], x[:, 1:], step=0)
    assert model.training and all(p.grad is None for p in model.parameters())
    assert torch.equal(state, torch.random.get_rng_state())


def test_the_trend_words_read_corrected_results_only() -> None:
    """Each word's condition, both ways: a flip needs both ends marked after their cells'
    correction; growth needs the corrected cross-rung test; what holds before correction
    only is said so."""

    def d(mean: float, half: float | None, p: float = 0.5, adjusted: float = 1.0) -> Interval:
        return Interval(mean, half, 3, 0.95, None if half is None else p, None, None if half is None else adjusted)

    marked, raw_only, none = (0.001, 0.01), (0.01, 0.2), (0.3, 0.9)
    # flips: both ends significant after correction, opposite signs
    assert trend([d(-0.05, 0.01, *marked), d(0.04, 0.01, *marked)]) == "flips"
    assert trend([d(-0.05, 0.01, *marked), d(0.04, 0.01, *raw_only)]) == "not shown after correction"
    assert trend([d(-0.05, 0.01, *marked), d(0.04, 0.05, *none)]) == "flat within noise"
    assert trend([d(-0.05, 0.01, *marked), d(-0.04, 0.01, *marked)]) == "flat within noise"  # same side: no flip
    # grows / shrinks: the change between the end rungs significant after its correction
    small, large = d(-0.01, 0.005, *marked), d(-0.05, 0.01, *marked)

    def change(mean: float, p: float, adjusted: float) -> Interval:
        return Interval(mean, 0.011, 6, 0.95, p, None, adjusted)

    assert trend([small, large], change(-0.04, *marked)) == "grows"
    assert trend([large, small], change(0.04, *marked)) == "shrinks"
    assert trend([small, large], change(-0.04, *raw_only)) == "not shown after correction"
    assert trend([large, small], change(0.04, *none)) == "flat within noise"
    assert trend([small, large]) == "flat within noise"  # no cross-rung test: no growth shown
    assert trend([d(0.0, 1e-6, *marked), d(5e-5, 1e-6, *marked)], change(5e-5, *marked)) == "flat within noise"
    assert trend([d(-0.01, None), d(-0.02, None)]) == "unknown"
    assert set(TRENDS) == {"grows", "shrinks", "flips", "not shown after correction", "flat within noise"}


def test_welch_difference_matches_scipy() -> None:
    first, last = [0.01, -0.02, 0.03, 0.0], [0.11, 0.05, 0.2]
    got = welch_difference(mean_interval(first), mean_interval(last))
    want = scipy.stats.ttest_ind(last, first, equal_var=False)
    low, high = want.confidence_interval(0.95)
    assert got.mean == pytest.approx(sum(last) / 3 - sum(first) / 4)
    assert got.p_value == pytest.approx(want.pvalue) and (got.low, got.high) == pytest.approx((low, high))
    assert welch_difference(mean_interval([1.0]), mean_interval(last)).p_value is None


def test_scales_and_the_ladder() -> None:
    assert parse_scales("64x2, 128x4,192x6") == [(64, 2), (128, 4), (192, 6)]
    rungs = ladder([(128, 4), (64, 2)], head_size=16)
    assert [(r.name, r.heads) for r in rungs] == [("64x2", 4), ("128x4", 8)]
    with pytest.raises(zoo.InputError, match="D_MODELxLAYERS"):
        parse_scales("64-2")
    with pytest.raises(zoo.ConfigError, match="multiple of the head size 16"):
        ladder([(40, 2)], head_size=16)


STUDY: dict[str, Any] = dict(
    heads=2, seq_len=16, steps=4, batch=4, lr=1e-2, eval_every=2, max_chars=20_000, tokenizer="bytes", seeds=2
)


def test_a_ladder_resumes_without_re_running_finished_rungs(tmp_path: Path) -> None:
    one = run_study(
        "transformer-2017",
        "gpt2-small",
        read_unlearned=True,
        d_model=16,
        layers=1,
        scales=[(16, 1)],
        tokens_per_param=0.05,
        swaps=["placement"],
        out_dir=tmp_path,
        **STUDY,
    )
    first = one.cells[0][0]
    records = sorted((tmp_path / first.name).glob("*.json"))
    stamps = {p: p.stat().st_mtime_ns for p in records}
    assert one.trained and not one.reused
    two = run_study(
        "transformer-2017",
        "gpt2-small",
        read_unlearned=True,
        d_model=16,
        layers=1,
        scales=[(16, 1), (32, 1)],
        tokens_per_param=0.05,
        swaps=["placement"],
        out_dir=tmp_path,
        **STUDY,
    )
    assert [c.name for c, _ in two.cells] == [first.name, "32x1-lr0.01-warmupauto"]
    assert not [key for key in two.trained if key.startswith(first.name)]  # the finished rung: not trained again
    assert sorted(key for key in two.reused if key.startswith(first.name)) == sorted(
        f"{first.name}/{key}" for key in one.cells[0][1].trained
    )
    assert {p: p.stat().st_mtime_ns for p in records if p.name != "ablation.json"} == {
        p: t for p, t in stamps.items() if p.name != "ablation.json"
    }
    # budgets matched per rung: tokens = 0.05 x the base's non-embedding parameters at each rung
    for cell, result in two.cells:
        n = non_embedding_parameters("transformer-2017", cell.rung, 16, 256, default_registry())
        assert cell.steps == max(1, round(0.05 * n / 64)) == result.settings.steps
        assert (result.scale["d_model"], result.scale["layers"], result.scale["heads"]) == (
            cell.rung.d_model,
            cell.rung.layers,
            cell.rung.heads,
        )
    assert two.cells[1][0].steps > two.cells[0][0].steps
    # tokens per non-embedding parameter of the base, and epochs over the training split, per cell
    train = load_corpus(bundled_corpus(), tokenizer="bytes", max_chars=20_000).train.numel()
    report = (tmp_path / "report.md").read_text()
    for (cell, _), row in zip(two.cells, json.loads((tmp_path / "study.json").read_text())["cells"]):
        n = non_embedding_parameters("transformer-2017", cell.rung, 16, 256, default_registry())
        tokens = cell.steps * 4 * 16
        assert row["non_embedding_parameters"] == n and row["train_tokens"] == train
        assert row["tokens_per_param"] == pytest.approx(tokens / n) and row["epochs"] == pytest.approx(tokens / train)
        assert f"| {cell.steps} | {tokens:,} | {tokens / n:.3g} | {tokens / train:.3g} |" in report
    trends = {t.name: t for t in two.trends()}
    assert set(trends) == {"control", "placement=pre", "gpt2-small"}
    assert trends["placement=pre"].deltas[0] == two.cells[0][1].run("placement").delta_vs_base
    assert trends["placement=pre"].train_flops[1] > trends["placement=pre"].train_flops[0]
    data = json.loads((tmp_path / "study.json").read_text())
    assert [t["trend"] for t in data["trends"]] == [t.word for t in two.trends()]
    # each trend's change: Welch over the end rungs' per-seed Δs, Holm over every row's trend
    raw = []
    for t in two.trends():
        ends = [two.cell(rung) for rung in (t.rungs[0], t.rungs[-1])]
        per_seed = [[b - a for a, b in zip(e.runs[0].losses(), row_named(e, t.name).losses())] for e in ends]
        welch = scipy.stats.ttest_ind(per_seed[1], per_seed[0], equal_var=False)
        assert t.change is not None and t.change.p_value == pytest.approx(welch.pvalue)
        assert t.word == trend(t.deltas, t.change)
        raw.append(welch.pvalue)
    holm = multipletests(raw, method="holm")[1]
    assert [t.change.p_adjusted for t in two.trends() if t.change] == pytest.approx(list(holm))
    assert [t["change"]["p_adjusted"] for t in data["trends"]] == pytest.approx(list(holm))
    # each trend's slope: per seed, Δ on ln(the base's non-embedding parameters), Holm over the rows
    sizes = [cell.parameters for cell, _ in two.cells]
    slopes = []
    for t in two.trends():
        per_seed = [
            [b - a for a, b in zip(two.cell(r).runs[0].losses(), row_named(two.cell(r), t.name).losses())]
            for r in t.rungs
        ]
        by_hand = [(d[1] - d[0]) / (math.log(sizes[1]) - math.log(sizes[0])) for d in zip(*per_seed)]  # type: ignore[arg-type]
        assert t.sizes == sizes and t.slope is not None and t.slope.mean == pytest.approx(sum(by_hand) / len(by_hand))
        slopes.append(t.slope.p_value)
    assert [t["slope"]["p_adjusted"] for t in data["trends"]] == pytest.approx(
        list(multipletests(slopes, method="holm")[1])
    )
    # the lower rung's agreement with the top: the row pairs (target and swaps) it orders alike
    (agree,) = data["agreement"]
    assert agree["rung"] == two.rungs[0].name and agree["top"] == two.rungs[1].name and agree["pairs"] == 1
    assert agree["share"] in (0.0, 1.0) and agree["low"] <= agree["share"] <= agree["high"]
    assert (tmp_path / "scale.png").is_file() and "## Along the ladder" in (tmp_path / "report.md").read_text()


def test_rate_and_warmup_sweeps_train_every_variant_for_the_full_budget(tmp_path: Path) -> None:
    study = run_study(
        "transformer-2017",
        "gpt2-small",
        read_unlearned=True,
        d_model=16,
        layers=1,
        lr_sweep=[3e-3, 1e-2],
        warmup_sweep=[0, 2],
        swaps=["placement"],
        out_dir=tmp_path,
        **STUDY,
    )
    assert [(c.lr, c.warmup) for c, _ in study.cells] == [(3e-3, 0), (3e-3, 2), (1e-2, 0), (1e-2, 2)]
    for cell, result in study.cells:
        assert result.settings.steps == 4 and result.settings.lr == cell.lr
        assert result.settings.warmup_steps == cell.warmup
        assert all(run.lr == cell.lr for run in result.runs)
    assert study.swept == "lr"
    effects = study.sweep_effects()
    assert {e.name for e in effects} == {"transformer-2017", "placement=pre", "gpt2-small"}
    base_low = study.cell("16x1", 3e-3, 0).runs[0].losses()
    base_high = study.cell("16x1", 1e-2, 0).runs[0].losses()
    assert effects[0].delta.mean == pytest.approx(sum(a - b for a, b in zip(base_low, base_high)) / 2)
    report = (tmp_path / "report.md").read_text()
    assert "## Learning rate" in report and (tmp_path / "sweep.png").is_file()
    # Each cell beside its reference rows: four steps learn nothing, so every cell is under-trained.
    cells = study.to_dict()["cells"]
    assert all(c["baselines"]["bigram"] < c["baselines"]["unigram"] for c in cells)
    assert all(c["under_trained"] == ["transformer-2017", "gpt2-small"] for c in cells)
    assert f"| {cells[0]['baselines']['bigram']:.4f} |" in report and "`*`: under-trained" in report
    assert all(c["noise_floor_corrected"] is None or c["noise_floor_corrected"] >= c["noise_floor"] for c in cells)


def test_a_tuned_ladder_states_each_variants_rate_per_rung_and_its_edges(tmp_path: Path) -> None:
    """--tune-lr in a study: every cell sweeps per variant; rates far too low put every best on
    the top edge, extended then flagged, in study.json, report.md and the docs region."""
    study = run_study(
        "transformer-2017",
        "gpt2-small",
        read_unlearned=True,
        d_model=16,
        layers=1,
        scales=[(16, 1), (32, 1)],
        lr_grid=[1e-5, 2e-5],
        tune_fraction=1.0,
        swaps=["placement"],
        out_dir=tmp_path,
        **STUDY,
    )
    assert study.tuned and "--lr-grid 1e-05,2e-05" in study.command
    data = json.loads((tmp_path / "study.json").read_text())
    for (cell, result), row in zip(study.cells, data["cells"]):
        assert result.tuning is not None and result.tuning["steps"] == cell.steps
        assert [t.lr for t in result.runs[0].tune if not t.full] == [1e-5, 2e-5, 4e-5, 8e-5]
        assert [t.lr for t in result.runs[0].tune if t.full and not t.reseeded] == [4e-5, 8e-5]  # the finalists
        assert row["on_edge"] == ["transformer-2017", "placement=pre", "gpt2-small"]
        assert {r["name"]: (r["lr"], r["on_edge"]) for r in row["table"] if r["axis"] != "control"} == {
            run.name: (8e-5, True) for run in result.runs
        }
    report = (tmp_path / "report.md").read_text()
    assert "## Tuned learning rates" in report and "each variant at its own tuned rate" in report
    assert "| variant | 16x1 | 32x1 |" in report
    assert "| `placement=pre` | 8e-05 **on edge** | 8e-05 **on edge** |" in report
    assert "`placement=pre` at 32x1" in report and "widen `--lr-grid`" in report
    page = tmp_path / "page.md"
    page.write_text("# A page\n")
    write_docs_region(page, "tuned", study)
    assert "| `gpt2-small` | 8e-05 **on edge** | 8e-05 **on edge** |" in page.read_text()


def test_a_study_refuses_a_short_sweep_and_two_budgets(tmp_path: Path) -> None:
    with pytest.raises(zoo.ConfigError, match="full budget"):
        run_study(lr_sweep=[1e-3], tune_lr=True, out_dir=tmp_path)
    with pytest.raises(zoo.ConfigError, match="one budget rule"):
        run_study(scales=[(16, 1)], tokens_per_param=1, flops_per_run=1e9, out_dir=tmp_path)


def test_the_cli_prints_p_adjusted_in_json_and_takes_the_study_flags(tmp_path: Path, capsys: Any) -> None:
    flags = [*TINY_ABLATION, "--seeds", "2", "--swaps", "placement"]
    assert main(["ablate", *flags, "--correction", "bonferroni", "--out", str(tmp_path / "a"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    tested = [*data["runs"][1:], data["control"]]
    assert [r["name"] for r in data["runs"]] == ["transformer-2017", "placement=pre", "gpt2-small"]
    assert data["table"][:2] == ["transformer-2017", "control"] and data["control"]["axis"] == "control"
    raw = [r["delta_vs_base"]["p_value"] for r in tested]
    assert [r["delta_vs_base"]["p_adjusted"] for r in tested] == pytest.approx([min(1.0, 3 * p) for p in raw])
    assert data["correction"] == "bonferroni" and "--correction bonferroni" in data["command"]
    page = tmp_path / "page.md"
    page.write_text("# A page\n\nText above.\n")
    out = tmp_path / "ladder"
    args = [*flags, "--scales", "16x1,32x1", "--out", str(out), "--docs", str(page)]
    assert main(["ablate", *args]) == 0
    shown = capsys.readouterr().out
    assert "along the ladder" in shown and f"report: {out / 'report.md'}" in shown
    text = page.read_text()
    assert text.startswith("# A page\n\nText above.\n") and text.count("generated by `zoo ablate --docs`") == 1
    assert "Xiong et al. 2020" in text and (tmp_path / "figures" / "ladder-scale.png").is_file()
    beside = tmp_path / "studies" / "ladder.json"  # the study.json, byte for byte, beside the page
    assert beside.read_bytes() == (out / "study.json").read_bytes()
    assert check_region_against_results(regions(text)["ladder"], json.loads(beside.read_text())) == 2 * 6 + 3 * 2
    assert main(["ablate", *args]) == 0  # again: every run reused, the region replaced, not appended
    assert "trained 0" in capsys.readouterr().out
    assert page.read_text().count("generated by `zoo ablate --docs`") == 1


def test_sweep_flags_parse() -> None:
    from zoo.cli.parsers.ablate import warmup_list

    assert warmup_list("auto,0, 50") == [None, 0, 50]


def test_bad_study_flags_name_the_flag(capsys: Any) -> None:
    with pytest.raises(SystemExit):
        main(["ablate", "--scales", "64by2"])
    assert "--scales" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["ablate", "--correction", "sidak"])
    assert "holm" in capsys.readouterr().err


def test_docs_region_keeps_the_rest_of_the_page(ablation: AblationResult, tmp_path: Path) -> None:
    page = tmp_path / "doc.md"
    page.write_text(
        "before\n\n<!-- generated by `zoo ablate --docs` from tiny: do not edit; `make study` rewrites it -->\nold\n<!-- end of the generated region tiny -->\n\nafter\n"
    )
    write_docs_region(page, "tiny", ablation)
    text = page.read_text()
    assert text.startswith("before\n") and text.endswith("after\n") and "\nold\n" not in text
    assert "| control |" in text and "Vaswani et al. 2017" in text
    with pytest.raises(zoo.InputError, match="characters"):
        write_docs_region(page, "a b", ablation)


@pytest.fixture(scope="module")
def warmup_study(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A real warm-up sweep, post-norm base against pre-norm, 3 seeds (its losses are set per case)."""
    options = {**STUDY, "seeds": 3}
    return run_study(
        "transformer-2017",
        "gpt2-small",
        read_unlearned=True,
        d_model=16,
        layers=1,
        warmup_sweep=[0, 2],
        swaps=["placement"],
        out_dir=tmp_path_factory.mktemp("warmup"),
        **options,
    )


def with_losses(study: Any, losses: dict[tuple[str, int], list[float]]) -> Any:
    """``study`` with the final losses of (row, warm-up) replaced, seeds and intervals alike."""
    cells = []
    for cell, result in study.cells:
        runs = []
        for run in result.runs:
            values = losses.get((run.name, cell.warmup))
            if values is not None:
                seeds = [dataclasses.replace(s, final_val_loss=v) for s, v in zip(run.seeds, values, strict=True)]
                run = dataclasses.replace(run, seeds=seeds, loss=mean_interval(values))
            runs.append(run)
        cells.append((cell, dataclasses.replace(result, runs=runs)))
    return dataclasses.replace(study, cells=cells)


@pytest.mark.parametrize(
    ("post", "pre", "verdict"),
    [  # final losses at warm-up 0 and at warm-up 2, per seed
        (([4.6, 4.7, 4.65], [4.0, 4.02, 4.01]), ([4.0, 4.01, 3.99], [4.0, 4.0, 4.01]), "This run shows Xiong"),
        (([4.6, 4.7, 4.65], [4.0, 4.02, 4.01]), ([4.3, 4.5, 4.1], [4.0, 4.0, 4.01]), "only half of Xiong"),
        (([4.87, 4.86, 4.88], [4.86, 4.87, 4.87]), ([4.2, 4.1, 4.3], [4.1, 4.0, 4.2]), "stays far behind pre-norm"),
        (([4.9, 4.5, 4.85], [4.6, 4.6, 4.55]), ([4.01, 4.02, 4.0], [4.0, 4.01, 4.0]), "points the way"),
        (([4.0, 4.1, 4.05], [4.05, 4.12, 4.08]), ([4.0, 4.1, 4.05], [4.03, 4.05, 4.07]), "not significantly worse"),
    ],
    ids=["shown", "half", "post-norm untrained", "the direction only", "not shown"],
)
def test_the_warmup_verdict_says_what_the_run_shows(
    warmup_study: Any, post: tuple[list[float], list[float]], pre: tuple[list[float], list[float]], verdict: str
) -> None:
    from zoo.ablate.study_report import warmup_verdict

    losses = {("transformer-2017", 0): post[0], ("transformer-2017", 2): post[1]}
    losses |= {("placement=pre", 0): pre[0], ("placement=pre", 2): pre[1]}
    said = warmup_verdict(with_losses(warmup_study, losses))
    assert said is not None and verdict in said
    phrases = ("shows Xiong", "only half", "stays far behind", "points the way", "not significantly worse")
    assert sum(phrase in said for phrase in phrases) == 1
    assert "the interaction, p adj" in said  # decided by the difference of differences, corrected
    if verdict in (
        "points the way",
        "only half of Xiong",
    ):  # what could be seen, at the corrected level: no post-hoc power
        assert re.search(r"the smallest interaction 3 seeds detect with 80% power at the corrected level is \d", said)
        assert "would detect" not in said


def test_the_interaction_is_a_paired_difference_of_differences(warmup_study: Any) -> None:
    """Pre-norm's change across the warm-up sweep minus post-norm's, seed by seed."""
    post, pre = ([4.6, 4.7, 4.65], [4.0, 4.02, 4.01]), ([4.3, 4.5, 4.1], [4.0, 4.0, 4.01])
    losses = {("transformer-2017", 0): post[0], ("transformer-2017", 2): post[1]}
    losses |= {("placement=pre", 0): pre[0], ("placement=pre", 2): pre[1]}
    study = with_losses(warmup_study, losses)
    (test,) = study.interactions()
    by_seed = [(a - b) - (c - d) for a, b, c, d in zip(pre[0], pre[1], post[0], post[1])]
    assert test.axis == "placement" and test.delta.mean == pytest.approx(sum(by_seed) / 3)
    from scipy import stats

    assert test.delta.p_value == pytest.approx(stats.ttest_1samp(by_seed, 0.0).pvalue)
    assert test.delta.p_adjusted == pytest.approx(test.delta.p_value)  # one interaction test: Holm leaves it
    effects = study.sweep_effects()  # three sweep tests (base, swap, target), corrected together
    assert all(e.delta.p_adjusted is not None and e.delta.p_adjusted >= e.delta.p_value for e in effects)
    assert study.to_dict()["sweep"]["interactions"][0]["difference_of_differences"]["mean"] == test.delta.mean


def test_a_rate_by_warm_up_grid_tests_the_warm_up_at_every_rate(warmup_study: Any) -> None:
    """With two rates and two warm-ups, each axis is swept at every value of the other: the
    warm-up's interaction with placement at each rate (what Xiong et al. claim), corrected
    with every other sweep test, and the verdict says it per rate."""
    (lr,) = warmup_study.rates
    other = lr * 3
    per = {  # (row, warm-up, rate) -> final losses per seed
        ("transformer-2017", 0, lr): [4.6, 4.7, 4.65],
        ("transformer-2017", 2, lr): [4.0, 4.02, 4.01],
        ("placement=pre", 0, lr): [4.0, 4.01, 3.99],
        ("placement=pre", 2, lr): [4.0, 4.0, 4.01],
        ("transformer-2017", 0, other): [4.9, 4.95, 4.92],
        ("transformer-2017", 2, other): [4.9, 4.94, 4.93],
        ("placement=pre", 0, other): [3.9, 3.95, 3.92],
        ("placement=pre", 2, other): [3.91, 3.93, 3.92],
    }
    cells = []
    for rate in (lr, other):
        for cell, result in warmup_study.cells:
            runs = []
            for run in result.runs:
                values = per.get((run.name, cell.warmup, rate))
                if values is not None:
                    seeds = [dataclasses.replace(s, final_val_loss=v) for s, v in zip(run.seeds, values, strict=True)]
                    run = dataclasses.replace(run, seeds=seeds, loss=mean_interval(values))
                runs.append(run)
            cells.append((dataclasses.replace(cell, lr=rate), dataclasses.replace(result, runs=runs)))
    grid = dataclasses.replace(warmup_study, cells=cells, rates=[lr, other])
    assert grid.swept_axes == ["lr", "warmup"]
    tests = grid.interactions()
    assert {(t.swept, t.at) for t in tests} == {("lr", 0), ("lr", 2), ("warmup", lr), ("warmup", other)}
    for rate in (lr, other):
        (test,) = [t for t in tests if t.swept == "warmup" and t.at == rate]
        by_seed = [
            (a - b) - (c - d)
            for a, b, c, d in zip(
                per[("placement=pre", 0, rate)],
                per[("placement=pre", 2, rate)],
                per[("transformer-2017", 0, rate)],
                per[("transformer-2017", 2, rate)],
            )
        ]
        assert test.delta.mean == pytest.approx(sum(by_seed) / 3)
        assert test.delta.p_adjusted is not None and test.delta.p_adjusted >= test.delta.p_value
    said = warmup_verdict(grid)
    assert said is not None and f"lr {lr:g}: post-norm" in said and f"lr {other:g}: post-norm" in said
    assert "This run shows Xiong" in said  # at the first rate warm-up rescues post-norm alone
    assert "stays far behind pre-norm" in said  # at the second post-norm trains with neither
    lines = sweep_sentences(grid)
    assert any(f"× warm-up at 16x1, lr {other:g}" in line for line in lines)


def test_the_cell_table_shows_each_cells_tokens_per_second(warmup_study: Any) -> None:
    lines = cells_table(warmup_study)
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    column = header.index("tokens/s")
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines[2 : 2 + len(warmup_study.cells)]]
    for (_, result), row in zip(warmup_study.cells, rows, strict=True):
        assert len(row) == len(header) and result.tokens_per_second > 0
        assert row[column] == f"{result.tokens_per_second:,.0f}"


def test_the_documented_study_commands_are_make_studys_and_their_regions_are_generated() -> None:
    root = Path(__file__).resolve().parents[1]
    makefile = (root / "Makefile").read_text().replace("\\\n", " ")
    assigned = {m[1]: " ".join(m[2].split()) for m in re.finditer(r"^(STUDY_\w+) \??= (.*)$", makefile, re.MULTILINE)}

    def expanded(value: str) -> str:
        return re.sub(r"\$\((STUDY_\w+)\)", lambda m: expanded(assigned[m[1]]), value)

    page = (root / "docs" / "ablation.md").read_text()
    studies = re.findall(r"\$\(BIN\)/zoo ablate \$\((STUDY_\w+)\) --out runs/(\w+) --docs docs/ablation.md", makefile)
    assert {name for _, name in studies} >= {"ladder", "modern", "warmup"}
    for variable, name in studies:
        assert f"zoo ablate {expanded(assigned[variable])} --out runs/{name} --docs docs/ablation.md" in page
        region = page.split(f"from {name}: do not edit")[1].split("<!-- end of the generated region")[0]
        if name == "gpu":  # make study-gpu needs a CUDA GPU, which no machine of this project has yet
            assert "| cell |" in region or "`make study-gpu` for the GPU study" in region
            continue
        assert "| cell |" in region or "| run | lr | val loss |" in region  # make study has written it


def test_make_study_gpu_runs_its_ladder_at_a_tiny_size_on_the_cpu(tmp_path: Path) -> None:
    """``make study-gpu``'s own flags, only the sizes, the budget and the device overridden
    (the last of a repeated flag wins): four rungs, the swaps, a tuned rate per variant, and
    the region and studies/gpu.json written beside a copy of the page."""
    root = Path(__file__).resolve().parents[1]
    makefile = (root / "Makefile").read_text().replace("\\\n", " ")
    (flags,) = re.findall(r"^STUDY_GPU \?= (.*)$", makefile, re.MULTILINE)
    assert "--device cuda" in flags and "--tune-lr" in flags
    page = tmp_path / "ablation.md"
    page.write_text((root / "docs" / "ablation.md").read_text())
    tiny = ["--set", "d_model=16", "--set", "n_heads=2", "--set", "n_layers=1", "--seq-len", "16", "--batch-size", "2"]
    tiny += ["--steps", "4", "--eval-every", "2", "--seeds", "2", "--max-chars", "4000", "--eval-batches", "1"]
    tiny += ["--scales", "16x1,32x1,32x2,64x2", "--device", "cpu"]
    assert main(["ablate", *flags.split(), *tiny, "--out", str(tmp_path / "gpu"), "--docs", str(page)]) == 0
    data = json.loads((tmp_path / "studies" / "gpu.json").read_text())
    assert data["rungs"] == ["16x1", "32x1", "32x2", "64x2"]
    assert data["agreement"] == [] and data["trends"] == []  # four steps learn nothing: no row is read
    cells = data["cells"]
    assert [c["name"].split("-")[0] for c in cells] == data["rungs"]
    assert cells[-1]["non_embedding_parameters"] >= 16 * cells[0]["non_embedding_parameters"]
    assert all(row["tune"]["finalists"] for c in cells for row in c["table"] if row["axis"] != "control")
    region = page.read_text().split("from gpu: do not edit")[1].split("<!-- end of the generated region")[0]
    assert "| cell |" in region and "Not run here yet" not in region


def test_the_study_file_alone_recomputes_every_rows_loss_and_delta(warmup_study: Any) -> None:
    """Every row of study.json carries its seeds' final losses and its sweep runs: the loss
    interval and the paired Δ vs base follow from the file alone (a reader's recomputation)."""
    data = json.loads(json.dumps(warmup_study.to_dict()))
    for cell in data["cells"]:
        rows = {row["name"]: row for row in cell["table"]}
        base = rows[data["base"]]["per_seed"]
        for row in cell["table"]:
            seeds = row["per_seed"]
            assert len(seeds) == 3 and row["loss"]["n"] == 3
            assert row["loss"] == pytest.approx(mean_interval(list(seeds.values()), 0.95).to_dict(), nan_ok=True)
            if row["axis"] not in ("base", "control"):
                paired = paired_difference(list(base.values()), list(seeds.values()), 0.95).to_dict()
                assert {k: row["delta_vs_base"][k] for k in ("mean", "low", "high", "p_value")} == pytest.approx(
                    {k: paired[k] for k in ("mean", "low", "high", "p_value")}
                )
            assert row["learned"] is True and row["did_not_learn"] is None  # read as asked (--read-unlearned)

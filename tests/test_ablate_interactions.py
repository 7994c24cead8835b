"""Paired-swap rows and their interaction, the control's honest text, the literature column's
sources, and the results file ``--docs`` writes beside the page: real tiny runs through
``run_ablation`` and the CLI, constructed records for the arithmetic, and the committed
docs/ablation.md checked against its committed docs/studies/*.json."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest
from scipy import stats
from statsmodels.stats.multitest import multipletests

import zoo
from helpers import TINY_ABLATION, check_region_against_results
from zoo.ablate import AblationResult, advice, run_ablation
from zoo.ablate.ablation import corrected
from zoo.ablate.advice import control_sentence, next_step, noise_section
from zoo.ablate.docs import LITERATURE, NOT_RUN, literature, regions, write_docs_region
from zoo.ablate.ladder import Cell, Rung, StudyResult
from zoo.ablate.report import interaction_sentences, report_markdown
from zoo.ablate.results import LEVEL, SwapInteraction, swap_interactions
from zoo.ablate.stats import mean_interval, paired_difference
from zoo.ablate.study_report import write_study_report
from zoo.cli import main

# One worker for the whole file: its module fixtures (runs, data, answers) are built once, not once per worker.
pytestmark = pytest.mark.xdist_group("ablate-interactions")

ROOT = Path(__file__).resolve().parents[1]
PAIR = "embedding_scale=none+init=gpt2"
SWAPS = "embedding_scale,init,embedding_scale+init"
# TINY_ABLATION's flags as run_ablation's options, so the CLI reuses the fixture's runs.
TINY = dict(
    d_model=16, layers=1, heads=2, seq_len=16, steps=2, batch=2, eval_every=2, tokenizer="bytes", read_unlearned=True
)


@pytest.fixture(scope="module")
def paired(tmp_path_factory: pytest.TempPathFactory) -> tuple[AblationResult, Path]:
    """Base, embedding_scale=none, init=gpt2, both at once, target and control, 3 seeds."""
    out = tmp_path_factory.mktemp("paired") / "embedding"
    swaps = SWAPS.split(",")
    result = run_ablation("transformer-2017", "gpt2-small", **TINY, max_chars=4000, seeds=3, swaps=swaps, out_dir=out)
    return result, out


def test_a_paired_row_swaps_both_axes_and_nothing_else(paired: tuple[AblationResult, Path]) -> None:
    result, out = paired
    assert [run.name for run in result.runs] == [
        "transformer-2017",
        "init=gpt2",
        "embedding_scale=none",
        PAIR,
        "gpt2-small",
    ]
    base, pair = result.runs[0], result.run(PAIR)
    assert pair.axis == "embedding_scale+init" and pair is result.run("embedding_scale+init")
    assert (
        pair.config.embedding_scale
        == result.run("embedding_scale").config.embedding_scale
        != base.config.embedding_scale
    )
    assert pair.config.init == result.run("init").config.init != base.config.init
    assert pair.config.model_copy(
        update={"embedding_scale": base.config.embedding_scale, "init": base.config.init}
    ) == (base.config)
    assert (out / "03-pair-embedding_scale-none-init-gpt2.safetensors").is_file()


def test_the_interaction_is_the_hand_computed_difference_of_differences(paired: tuple[AblationResult, Path]) -> None:
    result, _ = paired
    base, one, two, pair = (result.run(name).losses() for name in ("base", "embedding_scale", "init", PAIR))
    (test,) = result.interactions
    by_hand = [p - a - b + z for p, a, b, z in zip(pair, one, two, base)]
    assert test.name == PAIR and test.rows == ("embedding_scale=none", "init=gpt2")
    assert list(test.values) == pytest.approx(by_hand, abs=1e-12)
    assert test.delta.mean == pytest.approx(sum(by_hand) / 3)
    paired_t = stats.ttest_rel([p + z for p, z in zip(pair, base)], [a + b for a, b in zip(one, two)])
    assert test.delta.p_value == pytest.approx(paired_t.pvalue)
    low, high = stats.t.interval(LEVEL, 2, loc=test.delta.mean, scale=stats.sem(by_hand))
    assert (test.delta.low, test.delta.high) == pytest.approx((low, high))
    # One Holm family: every row but the base, the control, and the interaction.
    tested = [*result.runs[1:], result.control]
    raw = [run.delta_vs_base.p_value for run in tested] + [test.delta.p_value]
    holm = multipletests(raw, method="holm")[1]
    assert [run.delta_vs_base.p_adjusted for run in tested] + [test.delta.p_adjusted] == pytest.approx(list(holm))
    assert result.tests == len(raw) == 6
    assert test.significant == (test.delta.p_adjusted < 0.05 and abs(test.delta.mean) >= 1e-4)


def test_the_interaction_is_in_the_json_the_report_and_the_docs(
    paired: tuple[AblationResult, Path], tmp_path: Path, capsys: Any
) -> None:
    result, out = paired
    (test,) = result.interactions
    data = json.loads((out / "ablation.json").read_text())
    assert data["interactions"] == [test.to_dict()] and data["noise_floor"]["tests"] == 6
    assert data["interactions"][0]["per_seed"] == list(test.values)
    report = (out / "report.md").read_text()
    assert "## Interactions" in report and f"= {test.delta.format(4, sign=True)}" in report
    assert "the rows and the interactions together" in report and "over the 6 tests" in report
    page = tmp_path / "page.md"
    argv = ["ablate", *TINY_ABLATION, "--seeds", "3", "--swaps", SWAPS, "--out", str(out), "--docs", str(page)]
    assert main(argv) == 0
    shown = capsys.readouterr().out
    assert "trained 0" in shown  # the fixture's runs, read back
    assert f"interaction of {PAIR}: Δ(pair) − Δ(embedding_scale=none) − Δ(init=gpt2) = " in shown
    assert test.delta.format(4, sign=True) in shown and "over 6 tests" in shown
    region = regions(page.read_text())["embedding"]
    assert f"Interaction of `{PAIR}`" in region and test.delta.format(4, sign=True) in region
    beside = tmp_path / "studies" / "embedding.json"
    assert beside.read_bytes() == (out / "ablation.json").read_bytes()  # the tool's file, byte for byte
    assert check_region_against_results(region, json.loads(beside.read_text())) >= 12
    assert not [p.name for p in beside.parent.iterdir() if p.name != "embedding.json"]  # no temporary left


def test_a_study_shows_each_rungs_interaction_in_its_report_json_and_region(
    paired: tuple[AblationResult, Path], tmp_path: Path
) -> None:
    """A two-rung study made of real cells (the fixture's ablation at both rungs, the second
    with other losses): study.json, report.md and the --docs region carry each rung's test."""
    result, _ = paired
    other = dataclasses.replace(result, runs=_constructed(result, {"base": [4.0, 4.1, 4.2], "init": [4.1, 4.0, 4.3]}))
    other.interactions = corrected(other.runs, "holm", other.control, swap_interactions(other.runs))
    rungs = [Rung(16, 1, 2), Rung(32, 1, 4)]
    cells = [(Cell(rung, 3e-3, None, 2, 2), cell) for rung, cell in zip(rungs, (result, other))]
    folder = tmp_path / "ladder"
    folder.mkdir()
    study = StudyResult(
        "transformer-2017", "gpt2-small", cells, rungs, [3e-3], [None], {"rule": "steps", "value": 2, "tokens_per_step": 32}, "zoo ablate",
        folder / "study.json",
    )  # fmt: skip
    write_study_report(study)
    data = json.loads((folder / "study.json").read_text())
    assert [c["interactions"] for c in data["cells"]] == [
        [i.to_dict() for i in r.interactions] for r in (result, other)
    ]
    tests = [r.interactions[0].delta.format(4, sign=True) for r in (result, other)]
    assert "## Interactions" in (folder / "report.md").read_text()
    page = tmp_path / "page.md"
    write_docs_region(page, "ladder", study)
    region = regions(page.read_text())["ladder"]
    assert f"| {PAIR} | {tests[0]}" in region and tests[1] in region
    assert (tmp_path / "studies" / "ladder.json").read_bytes() == (folder / "study.json").read_bytes()
    assert check_region_against_results(region, data) == 2 * 6 + 5 * 2 + 2  # cells, trends (5 rows), interactions


def _constructed(result: AblationResult, losses: dict[str, list[float]]) -> list[Any]:
    """``result``'s runs with the given per-seed losses (by axis), statistics recomputed."""
    runs = []
    base = losses["base"]
    for run in result.runs:
        mine = losses.get(run.axis, base)
        seeds = [dataclasses.replace(s, final_val_loss=v) for s, v in zip(run.seeds, mine)]
        runs.append(
            dataclasses.replace(run, seeds=seeds, loss=mean_interval(mine), delta_vs_base=paired_difference(base, mine))
        )
    return runs


def test_interactions_of_constructed_records_add_up_by_hand(paired: tuple[AblationResult, Path]) -> None:
    result, _ = paired
    losses = {
        "base": [4.0, 4.1, 4.2],
        "embedding_scale": [4.5, 4.7, 4.6],  # alone, the unscaled embedding hurts the 2017 init
        "init": [4.1, 4.0, 4.3],
        "embedding_scale+init": [3.9, 4.0, 4.1],  # together they do not
    }
    runs = _constructed(result, losses)
    (raw,) = swap_interactions(runs)
    by_hand = [3.9 - 4.5 - 4.1 + 4.0, 4.0 - 4.7 - 4.0 + 4.1, 4.1 - 4.6 - 4.3 + 4.2]
    assert list(raw.values) == pytest.approx(by_hand) and raw.delta.mean == pytest.approx(-1.9 / 3)
    assert raw.delta.p_value == pytest.approx(stats.ttest_1samp(by_hand, 0.0).pvalue)
    (bonferroni,) = corrected(runs, "bonferroni", None, [raw])
    assert bonferroni.delta.p_adjusted == pytest.approx(min(1.0, 5 * raw.delta.p_value))  # 4 rows + 1 interaction
    # Without both single swaps there is nothing to subtract: no test, and the report says what to train.
    alone = [run for run in runs if run.axis != "init"]
    assert swap_interactions(alone) == []
    shown = interaction_sentences(dataclasses.replace(result, runs=alone, interactions=[]))
    assert shown == [f"{PAIR} has no interaction test: its single swaps are not all in this table "
                     f"(--swaps embedding_scale=none,init=gpt2,{PAIR})"]  # fmt: skip


def test_three_axes_add_the_base_twice(paired: tuple[AblationResult, Path]) -> None:
    result, _ = paired
    base = result.runs[0]
    triple = dataclasses.replace(result.runs[3], name="a+b+c", axis="a+b+c")
    singles = [dataclasses.replace(result.runs[1], name=n, axis=n) for n in "abc"]
    runs = [base, *singles, triple, result.runs[-1]]
    losses = {"base": [1.0, 2.0], "a": [1.5, 2.5], "b": [1.25, 2.0], "c": [0.5, 1.75], "a+b+c": [1.0, 2.5]}
    runs = _constructed(dataclasses.replace(result, runs=runs), losses)
    (test,) = swap_interactions(runs)
    assert list(test.values) == pytest.approx([1.0 - 1.5 - 1.25 - 0.5 + 2 * 1.0, 2.5 - 2.5 - 2.0 - 1.75 + 2 * 2.0])
    assert isinstance(test, SwapInteraction) and test.axes == ("a", "b", "c")


def test_all_names_every_single_swap_beside_a_pair() -> None:
    from zoo.ablate.options import Options
    from zoo.ablate.plan import make_plan
    from zoo.nn.registry import default_registry

    options = Options(**TINY, max_chars=4000, swaps=["all", "embedding_scale+init"], out_dir=Path("unused"))
    plan = make_plan(options, default_registry())
    singles = [v.axis for v in plan.variants[1:-1] if "+" not in v.axis]
    assert singles == ["position", "activation", "placement", "init", "embedding_scale", "head_output", "norm_eps"]
    assert [v.name for v in plan.variants if "+" in v.axis] == [PAIR]
    assert "--swaps all,embedding_scale+init" in options.command()


@pytest.mark.parametrize("preset", [p for p in zoo.list_models() if zoo.get_config(p).architecture == "decoder"])
def test_every_row_is_named_from_the_config_it_trains(preset: str) -> None:
    """From GPT-2 to each decoder preset at a tiny size: a row's name states the value its
    trained config has (``n_kv_heads=1, head_dim=8``, ``hidden=48``), never the preset's
    full-size one, and the checkpoint's file stem is made from that name."""
    from zoo.ablate.compare import diff_configs
    from zoo.ablate.options import Options
    from zoo.ablate.plan import make_plan, slug
    from zoo.nn.registry import default_registry

    options = Options(**{**TINY, "base": "gpt2-small", "target": preset}, max_chars=4000, out_dir=Path("unused"))
    plan = make_plan(options, default_registry())
    base = plan.variants[0].config
    for variant in plan.variants[1:-1]:
        axis, _, value = variant.name.partition("=")
        shown = {a: v for a, _, v in diff_configs(base, variant.config, registry=default_registry())}
        assert str(shown[axis]) == value, (variant.name, shown[axis])
    jobs = [job for per_variant in plan.seed_jobs([1e-3] * len(plan.variants)) for job in per_variant]
    assert all(slug(v.name) in job.key for v, job in zip(plan.variants, jobs[:: len(plan.seeds)], strict=True))


def test_a_pair_names_values_and_a_component_takes_options() -> None:
    """GPT-2 with sinusoids at unit amplitude beside embeddings of std 0.02 is a model
    neither design uses: the pair gives it the 2017 design's sqrt(d_model) scale too, and
    its interaction is read from the two single rows of the same names. SwiGLU at the GELU
    MLP's weights is ``multiple_of=1``: 2/3 of 4 d_model, not rounded up."""
    from zoo.ablate.options import Options
    from zoo.ablate.plan import make_plan
    from zoo.nn.registry import default_registry

    pair = "position=sinusoidal+embedding_scale=sqrt_d_model"
    swaps = ["position=sinusoidal", "embedding_scale=sqrt_d_model", pair, "mlp=swiglu:multiple_of=1", "mlp=swiglu"]
    base = dict(TINY, base="gpt2-small", target="gpt2-small-modern")
    plan = make_plan(Options(**base, max_chars=4000, swaps=swaps, out_dir=Path("unused")), default_registry())
    rows = {v.name: v for v in plan.variants}
    assert list(rows)[1:-1] == [swaps[0], swaps[1], swaps[3], swaps[4], pair]
    start, both = plan.variants[0].config, rows[pair].config
    assert (both.position.name, both.embedding_scale) == ("sinusoidal", "sqrt_d_model") and rows[pair].axis == (
        "position+embedding_scale"
    )
    assert both.model_copy(update={"position": start.position, "embedding_scale": start.embedding_scale}) == start
    matched, rounded = (zoo.build(rows[name].config) for name in swaps[3:])
    mlp = zoo.build(start)
    weights = [sum(p.numel() for p in m.blocks[0].mlp.parameters() if p.dim() == 2) for m in (mlp, matched, rounded)]
    d = start.d_model
    assert weights[1] == 3 * d * (8 * d // 3) and abs(weights[1] - weights[0]) < 3 * d  # matched, to one hidden unit
    assert weights[2] > 1.4 * weights[0]  # the default rounds the hidden size up to a multiple of 256
    singles = [r for r in plan.variants if "+" not in r.axis]
    assert [r.name for r in singles if r.name in pair.split("+")] == pair.split("+")


@pytest.mark.parametrize(
    ("swaps", "message"),
    [
        (["embedding_scale+nope"], "'nope'"),
        (["init+init"], "an axis twice"),
        (["init+embedding_scale", "embedding_scale+init"], "a row named before"),
        (["position=sinusoidal+position"], "an axis twice"),
        (["mlp=swiglu:multiple_of"], "an option after a colon is KEY=VALUE"),
        (["mlp=nope"], "no mlp component is registered as 'nope'"),
        (["d_model=32"], "a config field that is not a size"),
        (["nope=1+init"], "a config field that is not a size"),
        (["embedding_scale="], "a config field that is not a size"),
    ],
)
def test_a_bad_pair_is_refused_before_training(tmp_path: Path, swaps: list[str], message: str) -> None:
    with pytest.raises(zoo.InputError, match=re.escape(message)) as err:
        run_ablation(**TINY, max_chars=4000, seeds=2, swaps=swaps, out_dir=tmp_path / "out")
    assert "--swaps" in str(err.value)
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").glob("*.safetensors"))


def test_the_control_says_only_what_it_shows(paired: tuple[AblationResult, Path]) -> None:
    result, out = paired
    control = result.control
    assert control is not None
    text = "\n".join(noise_section(result)) + (out / "report.md").read_text()
    assert "the spread of the base over seeds" in text and "not a check" in text
    marked = dataclasses.replace(
        control, delta_vs_base=dataclasses.replace(control.delta_vs_base, mean=0.5, p_adjusted=0.001)
    )
    sentence = control_sentence(marked)
    assert "marked after correction" in sentence and "not a check of the swaps' paired intervals" in sentence
    assert "control" not in next_step(dataclasses.replace(result, control=marked, baselines=None))
    for text in (report_markdown(dataclasses.replace(result, control=marked)), _sources_text()):
        assert "distrust" not in text and "too optimistic" not in text and "A/A" not in text


def test_an_unmarked_control_claims_only_what_its_correction_shows(
    paired: tuple[AblationResult, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not marked after correction is not "within its interval": a raw interval may exclude 0."""
    result, _ = paired
    control = result.control
    assert control is not None
    raw_only = dataclasses.replace(
        control.delta_vs_base, mean=0.05, half_width=0.01, p_value=0.001, p_adjusted=0.2
    )  # its interval excludes 0, its adjusted p does not reach α
    sentence = control_sentence(dataclasses.replace(control, delta_vs_base=raw_only))
    assert raw_only.significant and "not marked after correction" in sentence
    assert "within their interval" not in sentence
    marked = dataclasses.replace(raw_only, p_adjusted=0.001)
    monkeypatch.setattr(advice, "ALPHA", 0.01)  # the chance it names is the level in use
    assert "at most 1% of the time" in control_sentence(dataclasses.replace(control, delta_vs_base=marked))


def _sources_text() -> str:
    """The texts that speak of the control or cite the literature."""
    names = ["docs/ablation.md", *(f"zoo/ablate/{m}.py" for m in ("report", "study_report", "docs", "advice"))]
    return "\n".join((ROOT / name).read_text() for name in names)


#: The papers a literature statement may cite, as the column names them.
PAPERS = ("Vaswani et al. 2017", "Shazeer 2020", "Xiong et al. 2020", "Press et al. 2022", "Narang et al. 2021",
          "Radford et al. 2019", "Chowdhery et al. 2022", "Ainslie et al. 2023", "Su et al. 2021", "Haviv et al. 2022",
          "Touvron et al. 2023", "Raffel et al. 2020")  # fmt: skip


@pytest.mark.parametrize("row", sorted(LITERATURE))
def test_every_literature_statement_names_a_real_source_or_none(row: str) -> None:
    text = LITERATURE[row]
    cited = [paper for paper in PAPERS if paper in text]
    assert text.startswith("none") or cited, text
    for paper in cited:  # with where in it: a table, a section or the setting it ran in
        after = text.split(paper, 1)[1][:120]
        assert re.search(r"Table|section|Figure|WikiText|IWSLT|ALiBi", after), text
    assert not re.search(r"et al\. (?!2017|2019|2020|2021|2022|2023)\d{4}|update|Bonferroni", text)


def test_embedding_scale_is_explained_as_an_interaction_pointing_at_the_paired_row() -> None:
    text = literature("embedding_scale=none", "embedding_scale")
    assert "interaction with the 2017 init" in text and PAIR in text
    assert literature("init=gpt2+embedding_scale=none", "init+embedding_scale") == literature(PAIR, "x")
    assert literature("position=learned", "position").startswith("Vaswani et al. 2017")
    assert literature("norm=layernorm", "norm") == "none"  # a value no statement is about
    assert literature("attention=gqa(n_kv_heads=4)", "attention") == literature("attention=gqa", "attention") != "none"
    assert literature("anything", "control").startswith("none: the base again")


def test_no_unsourced_citation_is_left() -> None:
    """Every 2026 paper the page cites is Zhao et al.'s update to Narang et al., named by its
    arXiv id (a source read); nothing cites modded-nanogpt."""
    page = (ROOT / "docs" / "ablation.md").read_text()
    mine = re.sub(r"<!-- generated by.*?<!-- end of the generated region [^ ]+ -->", "", page, flags=re.DOTALL)
    for text in (mine, (ROOT / "zoo" / "ablate" / "docs.py").read_text()):
        for year in re.finditer(r"2026", text):
            assert "Zhao et al. 2026 (arXiv:2605.20798" in text[year.start() - 20 : year.end() + 30]
        assert "modded-nanogpt" not in text
    assert "Zhao et al. 2026 (arXiv:2605.20798" in mine and "Magnusson et al. 2025, arXiv:2504.11393" in mine


def test_the_committed_regions_equal_their_committed_results() -> None:
    """Each generated region of docs/ablation.md against docs/studies/NAME.json: every number
    the region shows equals the file; a region without a file says it has not run."""
    page = (ROOT / "docs" / "ablation.md").read_text()
    found = regions(page)
    assert {"ladder", "modern", "warmup", "extrapolation"} <= set(found)  # make study's regions
    studies = ROOT / "docs" / "studies"
    files = {p.stem: p for p in studies.glob("*.json")} if studies.is_dir() else {}
    assert set(files) <= set(found), f"results without a region: {sorted(set(files) - set(found))}"
    for name, region in found.items():
        if name in files:
            assert NOT_RUN.format(name=name) not in region
            assert check_region_against_results(region, json.loads(files[name].read_text())) > 0
        else:
            assert region.strip() == NOT_RUN.format(name=name), f"region {name} shows results but has no file"


def _main_rung(name: str) -> tuple[list[dict[str, Any]], dict[str, Any], float]:
    """The committed study ``name``'s rows, reference rows and corrected floor at its main
    (first) rung: a ladder's first cell, or the single ablation itself."""
    study = json.loads((ROOT / "docs" / "studies" / f"{name}.json").read_text())
    if "cells" in study:
        cell = study["cells"][0]
        return cell["table"], cell["baselines"], cell["noise_floor_corrected"]
    rows = [{"axis": r["axis"], "loss": r["final_val_loss"]} for r in study["runs"]]
    return rows, study["baselines"], study["noise_floor"]["delta_corrected"]


@pytest.mark.parametrize("name", ["ladder", "modern"])
def test_the_committed_studies_learn_and_can_see_small_effects(name: str) -> None:
    """What make study must show (issue 27): base and target at least 0.3 nats below the
    bigram row, and a main rung whose floor after correction is at most 0.05 nats."""
    rows, baselines, floor = _main_rung(name)
    ends = {r["axis"]: r["loss"]["mean"] for r in rows if r["axis"] in ("base", "target")}
    assert set(ends) == {"base", "target"}
    for axis, loss in ends.items():
        assert loss <= baselines["bigram"] - 0.3, (
            f"{name}'s {axis} ends at {loss:.3f}, bigram {baselines['bigram']:.3f}"
        )
    assert 0 < floor <= 0.05, f"{name}'s corrected floor is {floor:.4f}"

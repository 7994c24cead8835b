"""Length extrapolation in ``zoo ablate`` (``--eval-lengths``) over position encodings swapped
in by ``--swaps position=VALUE``: learned positions are N/A past their table, the others run
at 2T on real 2T-token windows, and the records, ablation.json, report.md, the terminal and
the --docs region carry the losses; bad values are refused before anything trains."""

from __future__ import annotations

import copy
import importlib.util
import json
import math
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from helpers import check_region_against_results, forge_record, prepared_bytes
from zoo.ablate import AblationResult, run_ablation
from zoo.ablate.docs import regions
from zoo.ablate.extrapolation import extrapolated, extrapolation_sentence, marked
from zoo.ablate.lengths import at_lengths
from zoo.ablate.stats import Interval, adjust_p
from zoo.checkpoint import load
from zoo.cli import main
from zoo.errors import ConfigError, ZooError
from zoo.nn.config import resolve_config
from zoo.nn.factory import build
from zoo.nn.registry import default_registry
from zoo.training import bundled_corpus, load_corpus

# One worker for the whole file: its module fixtures (runs, data, answers) are built once, not once per worker.
pytestmark = pytest.mark.xdist_group("ablate-lengths")

T = 16
SCALE: dict[str, Any] = dict(
    d_model=16, layers=1, heads=2, seq_len=T, steps=4, batch=4, lr=1e-2, eval_every=4, max_chars=6000
)
MODERN = importlib.util.find_spec("zoo_modern") is not None  # rotary and ALiBi come with zoo-modern
POSITIONS = ["learned", "sinusoidal", "none", *(["rotary", "alibi"] if MODERN else [])]
SWAPS = [f"position={name}" for name in POSITIONS]


def ablate_positions(out: Path) -> Any:
    """transformer-2017 toward gpt2-small over every position encoding, 2 seeds, trained at T
    and evaluated at T and 2T, into ``out`` (its finished runs reused)."""
    return run_ablation(
        "transformer-2017",
        "gpt2-small",
        **SCALE,
        seeds=2,
        tokenizer="bytes",
        swaps=SWAPS,
        eval_lengths=[2],
        out_dir=out,
    )


#: The CLI flags of the same ablation.
FLAGS = [
    *("--set", "d_model=16", "--set", "n_layers=1", "--set", "n_heads=2", "--seq-len", str(T), "--steps", "4"),
    *("--batch-size", "4", "--lr", "0.01", "--eval-every", "4", "--max-chars", "6000", "--tokenizer", "bytes"),
    *("--seeds", "2", "--swaps", ",".join(SWAPS), "--eval-lengths", "2"),
]


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> AblationResult:
    """transformer-2017 (sinusoidal) with its position swapped to each encoding, and
    gpt2-small (learned), 2 seeds, trained at T and evaluated at T and 2T."""
    out = tmp_path_factory.mktemp("lengths") / "out"
    return ablate_positions(out)


def test_learned_is_na_past_its_table_and_the_others_run_at_2t(ran: AblationResult) -> None:
    names = [run.name for run in ran.runs]
    assert names == ["transformer-2017", *(s for s in SWAPS if s != "position=sinusoidal"), "gpt2-small"]
    assert any("position=sinusoidal skipped: it is the base's own position" in note for note in ran.notes)
    assert ran.eval_lengths == [T, 2 * T]
    for run in ran.runs:
        learned = run.config.position.name == "learned"
        assert run.config.max_seq_len == (T if learned else 2 * T)  # a table stays at T: never extended
        assert run.extrapolation is not None
        assert run.extrapolation.refused == (f"learned positions: no table past {T} tokens" if learned else None)
        for seed in run.seeds:
            # T scores the targets the longer lengths score (the windows' last T), not the table's windows
            assert math.isfinite(seed.eval_lengths[T]) and seed.eval_lengths[T] != seed.final_val_loss
            if learned:
                assert seed.eval_lengths[2 * T] is None
            else:
                assert math.isfinite(seed.eval_lengths[2 * T] or math.nan)
        cell = run.extrapolation.cell(2 * T)
        assert (cell.loss is None) == learned and (cell.growth is None) == learned
        if not learned:
            assert cell.loss is not None and cell.growth is not None
            losses = [s.eval_lengths[2 * T] for s in run.seeds]
            assert cell.loss.mean == pytest.approx(sum(losses) / 2)  # type: ignore[arg-type]
            at_t = [s.eval_lengths[T] for s in run.seeds]  # the same targets with T tokens of context
            assert cell.growth.mean == pytest.approx(sum(b - a for a, b in zip(at_t, losses)) / 2)  # type: ignore[operator]
    assert ran.control is not None and all(s.eval_lengths[2 * T] is not None for s in ran.control.seeds)


def test_the_records_the_json_and_the_report_carry_the_lengths(ran: AblationResult) -> None:
    folder = ran.results_path.parent
    for run in ran.runs:
        record = json.loads(run.checkpoint.with_suffix(".json").read_text())
        assert record["eval_lengths"] == {
            str(T): run.seeds[0].eval_lengths[T],
            str(2 * T): run.seeds[0].eval_lengths[2 * T],
        }
    data = json.loads(ran.results_path.read_text())
    assert data["eval_lengths"] == [T, 2 * T]
    growth_p = []
    for run in data["runs"]:
        learned = run["config"]["position"]["name"] == "learned"
        assert all((seed["eval_lengths"][str(2 * T)] is None) == learned for seed in run["seeds"])
        at_t, at_2t = run["extrapolation"]["lengths"]
        assert at_t["length"] == T and at_2t["factor"] == 2 and at_t["loss"]["n"] == 2
        if learned:
            assert at_2t["loss"] is None and at_2t["vs_train_length"] is None
            continue
        growth_p.append((at_2t["vs_train_length"]["p_value"], at_2t["vs_train_length"]["p_adjusted"]))
        if run["axis"] != "base":
            delta = at_2t["delta_vs_base"]
            assert delta["n"] == 2 and delta["p_adjusted"] >= delta["p_value"]
    raw, adjusted = zip(*growth_p)
    assert list(adjusted) == pytest.approx(adjust_p(list(raw), ran.correction).tolist())  # Holm over those tests
    report = (folder / "report.md").read_text()
    assert "## Length extrapolation" in report and f"| run | position | T={T} | 2T={2 * T} | 2T − T |" in report
    assert "| `position=learned` | learned |" in report and "| N/A | N/A |" in report
    assert "cannot run past T (learned positions: no table past 16 tokens): N/A" in report


def test_the_sentence_follows_from_the_marks(ran: AblationResult) -> None:
    sentence = extrapolation_sentence(ran)
    assert sentence.startswith(f"At 2T ({2 * T} tokens, trained at T = {T}), after Holm's step-down correction")
    rises, _, rest = sentence.partition("the loss rises above its loss at T for ")
    for run in extrapolated(ran):
        assert run.extrapolation is not None
        growth = run.extrapolation.cell(2 * T).growth
        label = f"`{run.name}" if run.axis == "position" else f"`{run.name} ("
        if growth is None:
            assert label in sentence.rpartition(";")[2]  # the N/A clause, last
        elif marked(growth):
            assert label in rest.partition("not significantly")[0]
        else:
            assert label in sentence.partition("not significantly different")[2]
        delta = run.extrapolation.cell(2 * T).delta_vs_base
        if delta is not None and marked(delta):
            assert label in sentence.partition("against the base at 32 tokens")[2]
    deltas = [run.extrapolation.cell(2 * T).delta_vs_base for run in extrapolated(ran) if run.extrapolation]
    assert ("no row differs significantly" in sentence) == (not any(d is not None and marked(d) for d in deltas))


def test_the_sentence_says_what_corrected_marks_say(ran: AblationResult) -> None:
    """The same result with known changes at 2T: a corrected rise, a corrected fall, a change
    significant only before the correction, and a corrected difference to the base."""
    result = copy.deepcopy(ran)

    def change(mean: float, p_adjusted: float, p_value: float = 0.001) -> Interval:
        return Interval(mean, 0.1, 2, 0.95, p_value, 0.01, p_adjusted)

    given = {"position=none": change(0.5, 0.01), "position=learned": None, "transformer-2017": change(-0.3, 0.02)}
    given["gpt2-small"] = None
    for run in result.runs:
        assert run.extrapolation is not None
        at_t, at_2t = run.extrapolation.cells
        growth = given.get(run.name, change(0.2, 0.2))  # the rest: p 0.001 before the correction, 0.2 after
        delta = change(-0.4, 0.03) if run.name == "position=none" else at_2t.delta_vs_base
        if growth is not None:
            run.extrapolation = replace(
                run.extrapolation, cells=[at_t, replace(at_2t, growth=growth, delta_vs_base=delta)]
            )
    sentence = extrapolation_sentence(result)
    assert "the loss rises above its loss at T for `position=none` (+0.500 ± 0.100)" in sentence
    assert "the loss falls below its loss at T for `transformer-2017 (sinusoidal)` (-0.300 ± 0.100)" in sentence
    flat = sentence.partition("is not significantly different from its loss at T for ")[2].partition(";")[0]
    assert "`position=none`" not in flat and "`transformer-2017" not in flat
    assert all(f"`{name}` (its 95% interval keeps it within ±0.300)" in flat for name in ("position=alibi",) if MODERN)
    assert (
        "against the base at 32 tokens (paired, corrected the same way), the loss is lower for `position=none`"
        in sentence
    )
    assert sentence.endswith(
        "`position=learned`, `gpt2-small (learned)` cannot run past T (learned positions: no table past 16 tokens): N/A."
    )


def test_every_length_scores_the_same_tokens_with_more_context(ran: AblationResult) -> None:
    """The recorded losses, again from the saved checkpoint: windows of 2T + 1 tokens cut from
    the validation split here, and at each length L the last T targets scored after the last
    L tokens; the learned model refuses a 2T window. The file says how many were scored."""
    val = load_corpus(bundled_corpus(), tokenizer="bytes", max_chars=SCALE["max_chars"]).val
    count = ran.settings.eval_batches * ran.settings.batch_size
    starts = torch.linspace(0, val.numel() - (2 * T + 1), count).long()
    windows = torch.stack([val[s : s + 2 * T + 1] for s in starts.tolist()]).long()
    assert windows.shape == (count, 2 * T + 1)
    for run in ran.runs:
        assert run.extrapolation is not None
        assert [c["scored_tokens"] for c in run.extrapolation.to_dict(T)["lengths"]] == [count * T] * 2
        model = load(run.checkpoint).eval()
        if run.config.position.name == "learned":
            with pytest.raises(ConfigError, match=f"{2 * T} positions do not fit"):
                model(windows[:1, :-1])
            continue
        for length in (T, 2 * T):
            w = windows[:, -(length + 1) :]
            with torch.no_grad():
                logits = model(w[:, :-1])[:, -T:]
            loss = float(F.cross_entropy(logits.flatten(0, 1).float(), w[:, -T:].flatten()))
            assert loss == pytest.approx(run.seeds[0].eval_lengths[length], rel=1e-4)
        assert run.seeds[0].eval_lengths[2 * T] != pytest.approx(run.seeds[0].eval_lengths[T], rel=1e-6)


def test_the_cli_reuses_every_run_and_prints_the_table(ran: AblationResult, tmp_path: Path, capsys: Any) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Lengths\n")
    out = ran.results_path.parent
    assert main(["ablate", *FLAGS, "-o", str(out), "--docs", str(page)]) == 0
    shown = capsys.readouterr().out
    assert "trained 0" in shown and f"length extrapolation: trained at T={T}" in shown
    assert "N/A" in shown and "cannot run past T (learned positions: no table past 16 tokens)" in shown
    region = page.read_text()
    assert f"2T={2 * T}" in region and "| `position=learned` | learned |" in region
    assert extrapolation_sentence(ran) in region
    ((name, body),) = regions(region).items()  # every number of it equals studies/NAME.json's
    assert check_region_against_results(body, json.loads((tmp_path / "studies" / f"{name}.json").read_text())) > 0
    assert main(["ablate", *FLAGS[:-1], "2,4", "-o", str(out)]) == 1  # other lengths: its records are other runs
    assert "records a run with other settings" in (err := capsys.readouterr().err) and "--eval-lengths" in err


@pytest.mark.parametrize(
    ("swaps", "eval_lengths", "message"),
    [
        (
            ["position=rope"],
            None,
            "no position component is registered as 'rope'; the registered position components are alibi, learned, none, rotary, sinusoidal",
        ),
        (["d_model=32"], None, "AXIS=VALUE takes a component kind"),
        (["position=none", "position=none"], None, "names the swap 'position=none' twice"),
        (["positions"], None, "AXIS=VALUE for a component"),
        (["position=none"], [1], "distinct whole multiples of --seq-len of 2 or more"),
        (["position=none"], [2, 2], "distinct whole multiples"),
        (["position=none"], [1000], "--eval-lengths: the validation split holds"),
    ],
)
def test_bad_swaps_and_lengths_are_refused_before_anything_trains(
    swaps: list[str], eval_lengths: list[int] | None, message: str, tmp_path: Path
) -> None:
    if "rotary" in message and not MODERN:
        pytest.skip("the registered names include zoo-modern's")
    out = tmp_path / "out"
    with pytest.raises(ZooError, match=message.replace("(", r"\(").replace(")", r"\)")):
        run_ablation(
            "transformer-2017",
            "gpt2-small",
            **SCALE,
            tokenizer="bytes",
            swaps=swaps,
            eval_lengths=eval_lengths,
            out_dir=out,
        )
    assert not out.exists()


@pytest.mark.parametrize("position", [p for p in POSITIONS if p != "learned"])
def test_a_longer_context_changes_nothing_at_t(position: str) -> None:
    """What the docs promise: a table-free encoding built for the longest length has the same
    weights, drawn from the same seed, and the same outputs at T as one built for T."""
    config = resolve_config("transformer-2017", {"d_model": 16, "n_layers": 1, "n_heads": 2, "max_seq_len": T})
    config = resolve_config(config, {"position": {"name": position}})
    longer, refused = at_lengths(config, 4 * T, default_registry())
    assert longer.max_seq_len == 4 * T and refused is None
    models = []
    for c in (config, longer):
        torch.manual_seed(0)
        models.append(build(c).eval())
    short, long = models
    assert short.state_dict().keys() == long.state_dict().keys()
    assert all(torch.equal(v, long.state_dict()[k]) for k, v in short.state_dict().items())
    idx = torch.randint(0, config.vocab_size, (2, T))
    assert torch.equal(short(idx), long(idx))


def test_a_learned_table_stays_at_t() -> None:
    config = resolve_config("gpt2-small", {"d_model": 16, "n_layers": 1, "n_heads": 2, "max_seq_len": T})
    same, refused = at_lengths(config, 4 * T, default_registry())
    assert same == config and refused == f"learned positions: no table past {T} tokens"


def test_a_prepared_split_too_short_for_the_longest_length_is_refused(tmp_path: Path) -> None:
    data = prepared_bytes(tmp_path, 4_000)  # a validation split of 400 tokens
    scale = {k: v for k, v in SCALE.items() if k != "max_chars"}
    out = tmp_path / "out"
    with pytest.raises(ConfigError, match=r"--eval-lengths: the validation split holds 400 tokens, fewer than the 513"):
        run_ablation("transformer-2017", "gpt2-small", **scale, data=data, eval_lengths=[32], out_dir=out)
    assert not out.exists()


def test_an_edited_loss_at_a_length_is_scored_again(ran: AblationResult, tmp_path: Path) -> None:
    """A record whose --eval-lengths loss was edited (its digest and checkpoint re-signed):
    its weights score another loss there, so the row trains again, and a note says so."""
    out = tmp_path / "out"
    shutil.copytree(ran.results_path.parent, out)
    stem = ran.runs[0].seeds[0].checkpoint.stem
    true = json.loads((out / f"{stem}.json").read_text())["eval_lengths"][str(2 * T)]

    def better(record: dict[str, Any]) -> None:
        record["eval_lengths"][str(2 * T)] = true / 2  # "it extrapolates"

    forge_record(out, stem, better)
    again = ablate_positions(out)
    assert again.trained == [stem]
    assert json.loads((out / f"{stem}.json").read_text())["eval_lengths"][str(2 * T)] == true
    assert any(f"its loss at {2 * T} tokens (--eval-lengths) is not what" in note for note in again.notes)

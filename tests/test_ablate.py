"""The ablation runner on a slice of the bundled corpus at a tiny scale: every run
learns, its results and checkpoints are complete and true, and a seed fixes them."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import zoo
from zoo.ablate import SIZE_AXES, AblationResult, diff_configs, plot_curves, run_ablation, table
from zoo.ablate.advice import next_step
from zoo.ablate.options import EDGE_EXTENSIONS
from zoo.ablate.plan import beyond_edge
from zoo.ablate.stats import mean_interval, paired_difference
from zoo.ablate.tuning import TuneRun, best_tune, chosen_rate, finalists, sweep_edges, sweep_noise
from zoo.cli import main
from zoo.training import TrainSettings, bundled_corpus, load_corpus, prepare, validation_batches
from zoo.training import mean_loss as evaluate

# One worker for the whole file: its module fixtures (runs, data, answers) are built once, not once per worker.
pytestmark = pytest.mark.xdist_group("ablate")

TINY_SCALE: dict[str, Any] = dict(
    d_model=16, layers=1, heads=2, seq_len=16, steps=16, batch=8, lr=1e-2, eval_every=8, max_chars=30_000
)
# transformer-2017 -> gpt2-small, sizes aside.
SWAPS = ["position", "activation", "placement", "init", "embedding_scale", "head_output", "norm_eps"]


def ablate(out: Path, seed: int = 0, **kwargs: Any) -> AblationResult:
    return run_ablation(
        "transformer-2017", "gpt2-small", **TINY_SCALE, out_dir=out, seed=seed, tokenizer="bytes", **kwargs
    )


def numbers(result: AblationResult) -> list[Any]:
    """Everything an ablation measured, without paths and timings."""
    data = result.to_dict()
    for run in data["runs"]:
        run.pop("tokens_per_second", None)
        for seed in run["seeds"]:
            del seed["checkpoint"], seed["tokens_per_second"]
            seed.pop("train_seconds", None)
    return [data["runs"], data["table"], data["settings"], data["seeds"], data["tuning"]]


@pytest.fixture(scope="module")
def ablation(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[AblationResult, list[tuple[str, int, int, float | None]]]:
    """Two seeds of transformer-2017 -> gpt2-small at the tiny scale, trained serially."""
    calls: list[tuple[str, int, int, float | None]] = []
    result = ablate(tmp_path_factory.mktemp("ablation"), seeds=2, on_progress=lambda *a: calls.append(a))
    return result, calls


def test_diff_of_2017_and_gpt2() -> None:
    rows = diff_configs(zoo.get_config("transformer-2017"), zoo.get_config("gpt2-small"))
    assert rows == [
        ("position", "sinusoidal", "learned"),
        ("activation", "relu", "gelu_tanh"),
        ("placement", "post", "pre"),
        ("init", "xavier", "gpt2"),
        ("embedding_scale", "sqrt_d_model", "none"),
        ("head_output", "log_softmax", "logits"),
        ("norm_eps", 1e-6, 1e-5),
        ("d_model", 512, 768),
        ("n_layers", 6, 12),
        ("n_heads", 8, 12),
        ("d_ff", 2048, 3072),
    ]


def test_diff_shows_changed_options_and_architecture() -> None:
    a = zoo.get_config("gpt2-small")
    assert diff_configs(a, a) == []
    b = zoo.get_config("gpt2-small", position={"name": "sinusoidal", "base": 500.0}, dropout={"attention": 0.0})
    assert diff_configs(a, b) == [
        ("position", "learned", "sinusoidal(base=500)"),  # a float as zoo info shows it
        ("dropout", 0.1, {"embedding": 0.1, "attention": 0.0, "residual": 0.1}),
    ]
    rows = dict(
        (axis, (x, y))
        for axis, x, y in diff_configs(zoo.get_config("transformer-2017"), zoo.get_config("transformer-2017-base"))
    )
    assert rows["architecture"] == ("decoder", "encoder_decoder") and rows["n_encoder_layers"] == (None, 6)


def test_runs_are_base_each_swap_then_target(ablation: Any) -> None:
    result, _ = ablation
    assert [r.axis for r in result.runs] == ["base", *SWAPS, "target"]
    assert [r.name for r in result.runs][:3] == ["transformer-2017", "position=learned", "activation=gelu_tanh"]
    base, target = result.runs[0].config, result.runs[-1].config
    for run in result.runs[1:-1]:  # exactly one difference from the base: the swapped axis
        assert [axis for axis, *_ in diff_configs(base, run.config)] == [run.axis]
        assert getattr(run.config, run.axis) == getattr(target, run.axis)
    for run in result.runs:  # one shared scale
        c = run.config
        assert (c.d_model, c.n_layers, c.n_heads, c.d_ff, c.max_seq_len, c.vocab_size) == (16, 1, 2, 64, 16, 256)
    assert [axis for axis, *_ in diff_configs(base, target)] == SWAPS


def test_every_run_learns_and_its_statistics_are_its_seeds(ablation: Any) -> None:
    result, _ = ablation
    base = result.runs[0].losses()
    assert result.seeds == [0, 1]
    for run in result.runs:
        assert [s.seed for s in run.seeds] == [0, 1]
        for seed in run.seeds:
            assert [p.step for p in seed.curve] == [0, 8, 16]
            assert seed.curve[0].val_loss == pytest.approx(math.log(256), abs=0.6)
            assert seed.final_val_loss == seed.curve[-1].val_loss < seed.curve[0].val_loss - 1.0, run.name
            assert seed.tokens_per_second > 0
        losses = run.losses()
        assert run.loss == mean_interval(losses) and run.final_val_loss == pytest.approx(sum(losses) / 2)
        assert replace(run.delta_vs_base, p_adjusted=None) == paired_difference(base, losses)
        assert run.delta_vs_previous is None  # single swaps: no path
        assert run.perplexity == pytest.approx(math.exp(run.final_val_loss))
        assert run.lr == TINY_SCALE["lr"] and run.tune == []
    assert result.runs[0].seeds[0].curve != result.runs[0].seeds[1].curve  # a seed is its own init and data
    assert result.run("head_output").delta_vs_base.mean == pytest.approx(0.0, abs=1e-4)  # a no-op for the loss
    assert not result.run("head_output").significant and not result.runs[0].significant


def test_results_json_is_complete(ablation: Any) -> None:
    result, _ = ablation
    data = json.loads(result.results_path.read_text())
    assert (data["base"], data["target"], data["mode"]) == ("transformer-2017", "gpt2-small", "swaps")
    assert data["data"]["tokenizer"] == "bytes" and data["data"]["vocab_size"] == 256
    assert data["settings"]["steps"] == 16 and data["settings"]["seed"] == 0 and data["seeds"] == [0, 1]
    assert data["zoo_version"] == zoo.__version__ and data["command"].startswith("zoo ablate --from transformer-2017")
    assert [d["axis"] for d in data["differences"] if d["swapped"]] == SWAPS
    assert all(d["axis"] in SIZE_AXES for d in data["differences"] if not d["swapped"])
    assert data["table"] == [r.name for r in result.rows()]
    assert len(data["runs"]) == len(result.runs)
    for saved, run in zip(data["runs"], result.runs):
        assert saved["final_val_loss"] == run.loss.to_dict() and saved["delta_vs_base"] == run.delta_vs_base.to_dict()
        assert saved["final_val_loss"]["half_width"] > 0 and saved["final_val_loss"]["n"] == 2
        assert saved["parameters"] == run.parameters and saved["train_flops"] == run.train_flops > 0
        assert [s["final_val_loss"] for s in saved["seeds"]] == run.losses()
        for seed_saved, seed in zip(saved["seeds"], run.seeds):
            assert seed_saved["curve"] == [
                {"step": p.step, "train_loss": p.train_loss, "val_loss": p.val_loss} for p in seed.curve
            ]
            assert Path(seed_saved["checkpoint"]).is_file()
        assert [p["mean"] for p in saved["mean_curve"]] == pytest.approx(
            [(a.val_loss + b.val_loss) / 2 for a, b in zip(run.seeds[0].curve, run.seeds[1].curve)]
        )
        assert zoo.ModelConfig.model_validate(saved["config"]) == run.config


def test_checkpoints_load_as_the_trained_models(ablation: Any) -> None:
    result, _ = ablation
    corpus = load_corpus(bundled_corpus(), tokenizer="bytes", max_chars=TINY_SCALE["max_chars"])
    settings = TrainSettings(batch_size=TINY_SCALE["batch"], seq_len=TINY_SCALE["seq_len"])
    batches = validation_batches(corpus.val, settings)
    for run in (result.runs[0], result.run("placement"), result.runs[-1]):
        for seed in run.seeds:
            model = zoo.load(seed.checkpoint)
            assert model.config == run.config and model.num_parameters() == run.parameters
            assert evaluate(model, batches) == pytest.approx(seed.final_val_loss, abs=1e-5)
            about = zoo.checkpoint.inspect(seed.checkpoint).metadata["ablation"]
            assert (about["run"], about["axis"], about["seed"], about["lr"]) == (
                f"{run.name} seed {seed.seed}",
                run.axis,
                seed.seed,
                run.lr,
            )
    assert result.runs[0].checkpoint.name == "00-base-transformer-2017.safetensors"
    assert result.runs[0].seeds[1].checkpoint.name == "00-base-transformer-2017-seed1.safetensors"


def test_same_seed_gives_identical_curves(ablation: Any, tmp_path: Path) -> None:
    result, _ = ablation
    again = ablate(tmp_path / "again", seeds=1, seed=1)  # the second seed alone
    assert [r.seeds[0].curve for r in again.runs] == [r.seeds[1].curve for r in result.runs]  # bit for bit


def test_another_seed_changes_the_curves(tmp_path: Path) -> None:
    a = run_ablation("gpt2-small", "gpt2-small", **TINY_SCALE, out_dir=tmp_path / "a", seeds=1, tokenizer="bytes")
    b = run_ablation(
        "gpt2-small", "gpt2-small", **TINY_SCALE, out_dir=tmp_path / "b", seeds=1, seed=1, tokenizer="bytes"
    )
    assert [r.axis for r in a.runs] == ["base", "target"]  # nothing to swap
    assert a.runs[0].seeds[0].curve == a.runs[1].seeds[0].curve  # the same design, the same seed
    assert a.runs[0].seeds[0].curve != b.runs[0].seeds[0].curve
    assert a.runs[0].loss.half_width is None and not a.runs[1].significant  # one seed: no interval
    assert any("one seed: no confidence intervals" in note for note in a.notes)


def test_progress_reports_start_every_step_and_final_loss(ablation: Any) -> None:
    result, calls = ablation
    first = [c for c in calls if c[0] == "transformer-2017 seed 0"]
    assert first[0] == ("transformer-2017 seed 0", 0, 16, None)
    assert [c[1] for c in first[1:-1]] == list(range(1, 17))
    assert first[-1] == ("transformer-2017 seed 0", 16, 16, result.runs[0].seeds[0].final_val_loss)
    started = [f"{r.name} seed {s}" for r in result.runs for s in (0, 1)] + ["control seed 2000", "control seed 2001"]
    assert [c[0] for c in calls if c[1] == 0] == started


def test_encoder_decoder_presets_are_refused(tmp_path: Path) -> None:
    with pytest.raises(zoo.ConfigError, match="'transformer-2017-base' is an encoder_decoder model"):
        run_ablation("transformer-2017-base", "gpt2-small", out_dir=tmp_path)


def test_a_missing_data_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(zoo.InputError, match="does not exist"):
        ablate(tmp_path, data=tmp_path / "nope.txt")


def test_a_data_file_is_used(tmp_path: Path) -> None:
    text = tmp_path / "abc.txt"
    text.write_text("abcabcabcabd" * 400, encoding="utf-8")
    result = run_ablation(
        "gpt2-small",
        "gpt2-small",
        **{**TINY_SCALE, "steps": 40, "eval_every": 40},
        data=text,
        out_dir=tmp_path / "o",
        tokenizer="bytes",
        seeds=1,
    )
    assert result.data["source"] == str(text) and result.data["train_tokens"] == 4320
    assert result.runs[0].final_val_loss < math.log(4)  # it learned this text: 4 symbols, mostly predictable
    assert zoo.load(result.runs[0].checkpoint).config.vocab_size == 256


@pytest.mark.slow  # 16 s; make test keeps the prepared-data path of zoo train (test_training)
def test_a_prepared_folder_is_trained_on_as_the_same_text_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`zoo ablate --data DIR` with a folder of `zoo data prepare`: its manifest's tokenizer and
    vocabulary; the same bytes and split as the text file, so the same numbers, in worker processes."""
    text = tmp_path / "abc.txt"
    text.write_text("abcabcabcabd" * 400, encoding="utf-8")
    folder = tmp_path / "prepared"
    prepared = prepare([text], folder, tokenizer="bytes", val_fraction=0.1, workers=1)
    scale = {**TINY_SCALE, "steps": 40, "eval_every": 40}
    del scale["max_chars"]
    from_text = run_ablation(
        "gpt2-small", "gpt2-small", **scale, data=text, out_dir=tmp_path / "t", tokenizer="bytes", seeds=1
    )
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in scale.items()]
    argv = ["ablate", "--from=gpt2-small", "--to=gpt2-small", *flags, "--seeds=1", "--workers=2", "--json"]
    assert main([*argv, f"--data={folder}", f"--out={tmp_path / 'p'}"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["data"] == {
        "source": str(folder),
        "tokenizer": "bytes",
        "vocab_size": 256,
        "train_tokens": 4320,
        "val_tokens": 480,
        "manifest_digest": prepared.digest,
    }
    assert [r["final_val_loss"]["mean"] for r in shown["runs"]] == [r.final_val_loss for r in from_text.runs]
    assert shown["runs"][0]["final_val_loss"]["mean"] < math.log(4)
    assert zoo.load(shown["runs"][0]["seeds"][0]["checkpoint"]).config.vocab_size == 256  # the manifest's
    report = (tmp_path / "p" / "report.md").read_text()
    assert f"- Data: {folder}, 4,320 training and 480 validation tokens (a folder prepared" in report
    assert f"manifest {prepared.digest}" in report and "- Tokenizer: bytes, vocabulary 256." in report
    assert "--tokenizer" not in shown["command"] and "--vocab-limit" not in shown["command"]


def test_a_prepared_folder_with_another_tokenizer_or_max_chars_is_refused(tmp_path: Path) -> None:
    text = tmp_path / "abc.txt"
    text.write_text("abcabcabcabd" * 400, encoding="utf-8")
    prepare([text], tmp_path / "prepared", tokenizer="bytes", val_fraction=0.1, workers=1)
    with pytest.raises(zoo.InputError, match="prepared with the 'bytes' tokenizer, not 'gpt2'; drop --tokenizer"):
        run_ablation("gpt2-small", "gpt2-small", data=tmp_path / "prepared", out_dir=tmp_path / "o", tokenizer="gpt2")
    with pytest.raises(zoo.ConfigError, match="max_chars=30000 cuts a text file, but .* is a prepared folder"):
        run_ablation("gpt2-small", "gpt2-small", **TINY_SCALE, data=tmp_path / "prepared", out_dir=tmp_path / "o")
    with pytest.raises(zoo.InputError, match="has no manifest.json; create it with `zoo data prepare"):
        run_ablation("gpt2-small", "gpt2-small", data=tmp_path, out_dir=tmp_path / "o")


def test_an_unusable_output_folder_is_refused(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(zoo.InputError, match="cannot create the output folder"):
        ablate(blocker / "out")


# -- parallel, resumable -------------------------------------------------------------


@pytest.mark.slow  # 13 s; make test keeps the 2-rank torchrun ablation, the other way runs are spread
def test_two_workers_give_the_same_numbers(ablation: Any, tmp_path: Path) -> None:
    result, _ = ablation
    calls: list[tuple[str, int, int, float | None]] = []
    parallel = ablate(tmp_path, seeds=2, workers=2, on_progress=lambda *a: calls.append(a))
    assert numbers(parallel) == numbers(result)  # bit for bit, in other processes
    finals = {c[0]: c[3] for c in calls if c[1] == c[2]}  # the last call of a run: its validation loss
    assert finals == {f"{r.name} seed {s.seed}": s.final_val_loss for r in result.rows() for s in r.seeds}
    assert parallel.reused == [] and len(parallel.trained) == 20  # 9 variants and the control, 2 seeds


def test_a_restarted_ablation_trains_only_unfinished_runs(ablation: Any, tmp_path: Path) -> None:
    result, _ = ablation
    out = tmp_path / "resumed"
    shutil.copytree(result.results_path.parent, out)
    # As if interrupted: the target never ran, placement's seed 1 died before its record,
    # and ablation.json and the report were never written.
    for path in [
        *out.glob("08-target-*"),
        out / "03-swap-placement-pre-seed1.json",
        out / "ablation.json",
        out / "report.md",
    ]:
        path.unlink()
    calls: list[tuple[str, int, int, float | None]] = []
    resumed = ablate(out, seeds=2, on_progress=lambda *a: calls.append(a))
    assert resumed.trained == ["03-swap-placement-pre-seed1", "08-target-gpt2-small", "08-target-gpt2-small-seed1"]
    assert len(resumed.reused) == 17 and not set(resumed.reused) & set(resumed.trained)
    assert sorted({c[0] for c in calls}) == ["gpt2-small seed 0", "gpt2-small seed 1", "placement=pre seed 1"]
    assert numbers(resumed) == numbers(result)
    assert json.loads((out / "ablation.json").read_text())["runs"][3]["seeds"][1]["final_val_loss"] == (
        result.run("placement").seeds[1].final_val_loss
    )
    again = ablate(out, seeds=2)  # finished: nothing left to train
    assert again.trained == [] and numbers(again) == numbers(result)
    more = ablate(out, seeds=3)  # a third seed: only its runs train
    stems = [stem for stem in again.reused if not stem.endswith("-seed1") and not stem.startswith("control")]
    assert more.trained == [*(f"{stem}-seed2" for stem in stems), "control-transformer-2017-seed2002"]
    assert [r.losses()[:2] for r in more.runs] == [r.losses() for r in result.runs]
    with pytest.raises(zoo.InputError, match="records a run with other settings.*pass another --out"):
        run_ablation(
            "transformer-2017", "gpt2-small", **{**TINY_SCALE, "steps": 8}, out_dir=out, tokenizer="bytes", seeds=1
        )


# -- learning rates, paths, order ----------------------------------------------------


def test_tune_lr_picks_the_best_rate_of_its_grid(tmp_path: Path) -> None:
    """1e-5 barely moves from the uniform loss, 1e3 blows up: 1e-2 must win for every variant."""
    grid = [1e-5, 1e-2, 1e3]
    result = run_ablation(
        "transformer-2017",
        "gpt2-small",
        **{**TINY_SCALE, "steps": 24},
        out_dir=tmp_path,
        tokenizer="bytes",
        seeds=2,
        tune_lr=True,
        lr_grid=grid,
        tune_fraction=0.5,
        path=["placement", "position"],
    )
    assert {k: v for k, v in result.tuning.items() if k != "scored_on"} == {  # type: ignore[union-attr]
        "grid": grid,
        "steps": 12,
        "fraction": 0.5,
        "seed": 1000,
        "finalists": 2,
    }
    assert "held out" in result.tuning["scored_on"]  # type: ignore[index]
    for run in result.runs:
        short = [t for t in run.tune if not t.full]
        assert [t.lr for t in short] == grid
        slow, good, absurd = (t.final_val_loss for t in short)
        assert good is not None and slow is not None and good < slow
        assert absurd is None or absurd > good  # diverged, or far worse
        # Successive halving: the two best short runs trained again for all 24 steps; the better of those won.
        full = [t for t in run.tune if t.full and not t.reseeded]
        kept = sorted((t for t in short if t.final_val_loss is not None), key=lambda t: t.final_val_loss or 0.0)[:2]
        assert sorted(t.lr for t in full) == sorted({t.lr for t in kept} | {result.runs[0].lr})  # and the base's
        assert run.lr == min(full, key=lambda t: t.final_val_loss or 0.0).lr == 1e-2
        assert [t.lr for t in run.tune if t.reseeded] == ([1e-2] if run.axis == "base" else [])
        assert all(zoo.checkpoint.inspect(s.checkpoint).metadata["ablation"]["lr"] == 1e-2 for s in run.seeds)
    assert len(list((tmp_path / "tune").glob("*.json"))) == 5 * len(result.runs) + 1  # the base again, seed +1
    report = result.report_path.read_text()  # type: ignore[union-attr]
    assert "| run | 1e-05 | 0.01 | 1000 | full length | chosen |" in report
    assert "0.01 seed +1: " in report and "has a flat sweep" in report
    assert "seed 1000 (not one of the compared seeds)" in report and "never on the validation windows" in report
    # the one-rate check: each row's Δ vs the base at every rate both trained in the sweep
    base = {t.lr: t.final_val_loss for t in result.runs[0].tune if not t.full}
    rates = [r for r in grid if base[r] is not None]
    assert (
        "| run | " + " | ".join(f"Δ at {r:g}" for r in rates) + " | Δ at 0.01, full | Δ, own rates | flips |" in report
    )
    whole = {t.lr: t.final_val_loss for t in result.runs[0].tune if t.full and not t.reseeded}
    for run in result.runs[1:]:
        own = {t.lr: t.final_val_loss for t in run.tune if not t.full}
        cells = ["" if own[r] is None else f"{own[r] - base[r]:+.3f}" for r in rates]  # type: ignore[operator]
        mine = next(t.final_val_loss for t in run.tune if t.full and not t.reseeded and t.lr == 1e-2)
        cells.append(f"{mine - whole[1e-2]:+.3f}")  # type: ignore[operator]
        assert f"| {run.name} | " + " | ".join(cells) + f" | {run.delta_vs_base.mean:+.3f} |" in report


@pytest.mark.parametrize(("warmup", "expected"), [(None, None), (0, 0), (30, 6), (100, 20)])
def test_the_sweep_keeps_the_runs_warm_up_share(warmup: int | None, expected: int | None) -> None:
    """--warmup 30 of 100 steps is 6 of a 20-step sweep run (a schedule of the same shape);
    without --warmup the sweep's run keeps the loop's default."""
    from zoo.ablate.options import Options
    from zoo.ablate.plan import make_plan
    from zoo.nn.registry import default_registry

    scale = {**TINY_SCALE, "steps": 100, "warmup": warmup}
    options = Options(**scale, tune_lr=True, tune_fraction=0.2, swaps=["position"], out_dir=Path("unused"))
    plan = make_plan(options, default_registry())
    assert plan.settings.warmup_steps == warmup
    for jobs in plan.tune_jobs():
        assert [(job.settings.steps, job.settings.warmup_steps) for job in jobs] == [(20, expected)] * len(plan.grid)


def test_a_best_rate_on_the_edge_of_its_sweep_is_extended_then_flagged(tmp_path: Path) -> None:
    """Rates far too low for a few steps: the highest always learns most, so each variant's best
    is the top edge, the sweep trains EDGE_EXTENSIONS more rates past it at the grid's spacing,
    and the best is still on the edge: flagged in ablation.json, report.md and the advice."""
    options: dict[str, Any] = dict(seeds=2, lr_grid=[1e-5, 2e-5], swaps=["placement"])
    result = ablate(tmp_path, **options)
    trained = [1e-5, 2e-5, 4e-5, 8e-5]
    assert EDGE_EXTENSIONS == 2 and result.on_edge == [run.name for run in result.runs]
    data = json.loads((tmp_path / "ablation.json").read_text())
    assert data["tuning"]["grid"] == [1e-5, 2e-5] and data["tuning"]["on_edge"] == result.on_edge
    for run, recorded in zip(result.runs, data["runs"]):
        short, full = [t for t in run.tune if not t.full], [t for t in run.tune if t.full and not t.reseeded]
        assert [t.lr for t in short] == trained and run.lr == 8e-5 and run.on_edge
        losses = [t.final_val_loss for t in short]
        assert all(loss is not None for loss in losses) and losses == sorted(losses, reverse=True)
        assert [t.lr for t in full] == [4e-5, 8e-5]  # the two best short runs, again at full length
        assert recorded["tune"] == {
            "grid": trained,
            "runs": [t.to_dict() for t in run.tune],
            "finalists": [4e-5, 8e-5],
            "winner": 8e-5,
            "flat": False,
            "on_edge": True,
        }
        assert [r for r in recorded["tune"]["runs"] if not r["full_length"]] == [
            {"lr": r, "final_val_loss": loss, "diverged": False, "extended": r > 2e-5, "full_length": False}
            | {"reseeded": False}
            for r, loss in zip(trained, losses)
        ]
    assert len(list((tmp_path / "tune").glob("*.json"))) == (len(trained) + 2) * len(result.runs) + 1
    advice = "`placement=pre`'s best rate sits on the edge of its sweep: 8e-05 is the highest"
    report = result.report_path.read_text()  # type: ignore[union-attr]
    assert "| run | 1e-05 | 2e-05 | 4e-05 | 8e-05 | full length | chosen |" in report
    assert "| 8e-05 **on edge** |" in report and advice in report and "widen --lr-grid" in report
    assert any(note.startswith("placement=pre's best rate sits on the edge") for note in result.notes)
    assert "a wider `--lr-grid` (a tuned rate sits on the edge of its sweep)" in next_step(result)  # under-trained
    assert next_step(dataclasses.replace(result, baselines=None)).startswith(
        "`transformer-2017`'s best rate sits on the edge of its sweep"
    )
    # Restarted on the same folder: the same choices from the same records, nothing trained;
    # with a seed more, only that seed's runs train: the sweep (and its extensions) is reused.
    again = ablate(tmp_path, **options)
    assert again.trained == [] and [r.tune for r in again.runs] == [r.tune for r in result.runs]
    more = ablate(tmp_path, **{**options, "seeds": 3})
    assert more.trained and not [key for key in more.trained if key.startswith("tune/")]
    assert len(more.trained) == 4 and all(key.endswith(("-seed2", "-seed2002")) for key in more.trained)


def test_a_sweep_run_never_sees_the_validation_windows() -> None:
    """The sweep's split: the training tokens without their tail, scored on that tail; the
    two cover the training split exactly and in order, over shard ends."""
    import torch

    from zoo.training import TokenSplit

    train = TokenSplit((torch.arange(0, 70), torch.arange(70, 100)))
    head, tail = train.held_out(0.4)
    assert [s.tolist() for s in head.shards] == [list(range(60))]
    assert [s.tolist() for s in tail.shards] == [list(range(60, 70)), list(range(70, 100))]
    head, tail = train.held_out(0.1)
    assert torch.cat([*head.shards, *tail.shards]).tolist() == list(range(100)) and tail.tokens == 10


def test_the_edges_of_a_sweep() -> None:
    """A diverged rate never wins, and counts as tried: a best rate below a diverged one is not on
    the edge; the rate past an edge keeps the spacing of the two nearest."""

    def runs(*pairs: tuple[float, float | None]) -> list[TuneRun]:
        return [TuneRun(lr, loss) for lr, loss in pairs]

    assert sweep_edges(runs((1e-3, 3.0), (3e-3, 2.0), (1e-2, 2.5))) == []
    assert sweep_edges(runs((1e-3, 2.0), (3e-3, 2.5))) == ["low"]
    assert sweep_edges(runs((1e-3, 2.5), (3e-3, 2.0))) == ["high"]
    assert sweep_edges(runs((1e-3, 2.5), (3e-3, 2.0), (1e-2, None))) == []  # the next rate up diverged
    assert sweep_edges(runs((1e-3, None), (3e-3, 2.0), (1e-2, 2.5))) == []  # the next rate down diverged
    assert sweep_edges(runs((1e-3, 2.5), (3e-3, None))) == ["low"]  # a diverged rate is not a winner
    assert sweep_edges(runs((1e-3, 2.0))) == ["low", "high"] and sweep_edges(runs((1e-3, None))) == []
    assert best_tune(runs((1e-3, None), (3e-3, None))) is None
    # With finalists, the full-length best wins over the best short run, and edges read the short sweep.
    halved = [*runs((1e-3, 2.0), (3e-3, 2.1)), TuneRun(1e-3, 1.8, full=True), TuneRun(3e-3, 1.7, full=True)]
    assert best_tune(halved) == TuneRun(3e-3, 1.7, full=True) and sweep_edges(halved) == ["low"]
    assert finalists(halved, 2) == [1e-3, 3e-3] and finalists(runs((1e-3, 2.0), (3e-3, None)), 2) == [1e-3]
    assert beyond_edge([1e-3, 3e-3, 1e-2], "high") == pytest.approx(1e-2 * 10 / 3) == float(f"{1e-2 * 10 / 3:.6g}")
    assert beyond_edge([1e-3, 3e-3, 1e-2], "low") == pytest.approx(1e-3 / 3)
    assert beyond_edge([1e-3], "low") == 5e-4 and beyond_edge([1e-3], "high") == 2e-3


def test_an_ablation_trains_on_the_second_corpus_by_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--data python-stdlib`` is the standard library's source; a file of that name wins."""
    from zoo.ablate.options import Options
    from zoo.ablate.plan import make_plan
    from zoo.nn.registry import default_registry

    plan = make_plan(Options(**TINY_SCALE, data="python-stdlib", out_dir=Path("unused")), default_registry())
    assert plan.data["source"].startswith("the Python ") and "standard library" in plan.data["source"]
    monkeypatch.chdir(tmp_path)
    Path("python-stdlib").write_text("To be, or not to be. " * 400, encoding="utf-8")
    plan = make_plan(Options(**TINY_SCALE, data="python-stdlib", out_dir=Path("unused")), default_registry())
    assert plan.data["source"] == "python-stdlib"


def test_the_same_ablation_on_two_corpora_reports_their_rank_agreement(tmp_path: Path) -> None:
    """The share of row pairs the second corpus orders as the first does: 1 against itself
    (an interval of one point), and a share of the 3 pairs of 3 rows against another text."""
    from zoo.ablate import corpus_agreement

    options: dict[str, Any] = dict(**TINY_SCALE, seeds=2, swaps=["placement", "position"], read_unlearned=True)
    shakespeare = run_ablation(**options, out_dir=tmp_path / "bundled")
    library = run_ablation(**options, data="python-stdlib", out_dir=tmp_path / "stdlib")
    same = corpus_agreement(shakespeare, shakespeare)
    assert same is not None and (same.share, same.low, same.high, same.pairs) == (1.0, 1.0, 1.0, 3)
    other = corpus_agreement(shakespeare, library)
    assert other is not None and other.pairs == 3 and other.share in (0.0, 1 / 3, 2 / 3, 1.0)
    assert other.low <= other.share <= other.high and "standard library" in other.rung
    assert other.top == "bundled Shakespeare"


def test_a_flat_sweep_keeps_the_bases_rate() -> None:
    """The base at its rate under two seeds differs by 0.05: a variant whose loss at the
    base's rate is within 0.05 of its best keeps the base's rate (its winner is noise);
    0.05 or more, and the winner stands; without the reseeded run there is no noise to read."""
    base = [TuneRun(1e-3, 2.0), TuneRun(1e-3, 1.90, full=True), TuneRun(1e-3, 1.95, full=True, reseeded=True)]
    noise = sweep_noise(base)
    assert noise == pytest.approx(0.05) and best_tune(base) == TuneRun(1e-3, 1.90, full=True)
    assert finalists(base, 2) == [1e-3] and sweep_edges(base) == ["low", "high"]  # the reseeded run is no candidate
    assert sweep_noise(base[:2]) is None

    def variant(at_base: float | None, best: float) -> list[TuneRun]:
        return [TuneRun(1e-3, at_base, full=True), TuneRun(3e-3, best, full=True)]

    assert chosen_rate(variant(1.83, 1.80), 1e-3, noise) == (1e-3, True)  # 0.03 < 0.05: flat
    assert chosen_rate(variant(1.86, 1.80), 1e-3, noise) == (3e-3, False)  # 0.06: the winner stands
    assert chosen_rate(variant(None, 1.80), 1e-3, noise) == (3e-3, False)  # diverged at the base's rate
    assert chosen_rate(variant(1.83, 1.80), 1e-3, None) == (3e-3, False)  # no noise measured
    assert chosen_rate(variant(1.79, 1.80), 1e-3, noise) == (1e-3, False)  # the base's rate is its best anyway
    assert chosen_rate([TuneRun(1e-3, None)], 1e-3, noise) == (None, False)


def test_cumulative_path(tmp_path: Path) -> None:
    result = ablate(tmp_path, seeds=2, path=["placement", "position"])
    axes = [r.axis for r in result.runs]
    assert axes[:3] == ["base", "placement", "position"]
    # the rest in the default order; the last swap makes the target, so the target row stands for it
    assert axes[3:] == [a for a in SWAPS if a not in ("placement", "position", "norm_eps")] + ["target"]
    assert result.runs[1].name == "+placement=pre" and result.mode == "path"
    for before, after in zip(result.runs, result.runs[1:-1]):  # each row adds exactly one swap
        assert [axis for axis, *_ in diff_configs(before.config, after.config)] == [after.axis]
    assert [axis for axis, *_ in diff_configs(result.runs[-2].config, result.runs[-1].config)] == ["norm_eps"]
    for before, after in zip(result.runs, result.runs[1:]):
        assert after.delta_vs_previous is not None
        assert replace(after.delta_vs_previous, p_adjusted=None) == paired_difference(before.losses(), after.losses())
    assert result.rows() == [result.runs[0], result.control, *result.runs[1:]]  # a path keeps its order
    assert result.runs[1].checkpoint.name == "01-path-placement-pre.safetensors"
    with pytest.raises(zoo.InputError, match="'mlp'.*placement"):
        ablate(tmp_path / "x", path=["mlp"])


def test_rows_by_effect_or_in_plan_order(ablation: Any) -> None:
    result, _ = ablation
    rows = result.rows()
    assert rows[0] is result.runs[0] and rows[1] is result.control and rows[-1] is result.runs[-1]
    effects = [abs(r.delta_vs_base.mean) for r in rows[2:-1]]
    assert effects == sorted(effects, reverse=True)
    assert result.rows("plan") == [result.runs[0], result.control, *result.runs[1:]]
    with pytest.raises(zoo.InputError, match="unknown row order"):
        result.rows("size")


def test_bad_settings_are_refused(tmp_path: Path) -> None:
    with pytest.raises(zoo.ConfigError, match="seeds=0 must be an integer >= 1 \\(--seeds\\)"):
        ablate(tmp_path, seeds=0)
    with pytest.raises(zoo.ConfigError, match="workers=0"):
        ablate(tmp_path, workers=0)
    with pytest.raises(zoo.ConfigError, match="--lr-grid"):
        ablate(tmp_path, tune_lr=True, lr_grid=[0.01, -1.0])


# -- the report ----------------------------------------------------------------------


def test_report_states_the_numbers(ablation: Any) -> None:
    result, _ = ablation
    report = result.report_path.read_text(encoding="utf-8")  # type: ignore[union-attr]
    header, rows = table(result)
    assert "| " + " | ".join(header) + " |" in report
    for row in rows:
        assert "| " + " | ".join(row) + " |" in report
    for run in result.runs:
        assert run.loss.format() in report
    for text in (
        result.command,
        f"zoo {zoo.__version__}",
        "bundled Shakespeare",
        "Tokenizer: bytes, vocabulary 256",
        "16 steps × 8 sequences × 16 tokens = 2,048 tokens",
        "One rate for every run: 0.01",
        "![validation curves](ablation.png)",
        "![paired differences](deltas.png)",
    ):
        assert text in report, text
    significant = ", ".join(f"`{r.name}`" for r in result.rows() if r.significant) or "none"
    assert f"Significant at 95% after holm: {significant}." in report


def test_plots_are_written_or_explained(ablation: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result, _ = ablation
    pytest.importorskip("matplotlib")
    for path in (result.plot_path, result.delta_plot_path):
        assert path is not None and path.read_bytes()[:4] == b"\x89PNG"
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # as if not installed
    notes: list[str] = []
    assert plot_curves(result.runs, tmp_path / "x.png", title="t", notes=notes) is None
    assert not (tmp_path / "x.png").exists()
    assert notes == ["no plot: matplotlib is not installed; `pip install 'zoo-lm[plot]'` adds it"]


def test_torchrun_spreads_runs_over_ranks(ablation: Any, tmp_path: Path) -> None:
    """Two ranks under torchrun (gloo): each trains half the runs, rank 0 reports the same
    numbers and shows the progress of every run; rank 1 shows none."""
    result, _ = ablation
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in TINY_SCALE.items()]
    out, logs = tmp_path / "ranks", tmp_path / "logs"
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=2",
        f"--log-dir={logs}",
        "--redirects=2",  # each rank's stderr to LOG_DIR/<run>/attempt_0/<rank>/stderr.log
        "-m",
        "zoo",
        "ablate",
        *flags,
        "--tokenizer=bytes",
        "--seeds=2",
        f"--out={out}",
        "--json",
    ]
    launch = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        stdout, stderr = launch.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(launch.pid, signal.SIGKILL)  # torchrun and both ranks
        launch.communicate()
        raise
    errors = {int(path.parent.name): path.read_text() for path in logs.rglob("stderr.log")}
    assert launch.returncode == 0, (stderr[-3000:], errors)
    assert sorted(errors) == [0, 1]
    labels = [f"{run.name} seed {s}" for run in result.runs for s in (0, 1)]
    assert not any(label in errors[1] for label in labels), errors[1]  # no progress from rank 1
    assert all(f"{label} " in errors[0] for label in labels), errors[0]  # rank 0: every run, its own and rank 1's
    data = json.loads(stdout)  # rank 0 alone prints
    assert data["runs"] == json.loads((out / "ablation.json").read_text())["runs"]
    assert [[s["final_val_loss"] for s in r["seeds"]] for r in data["runs"]] == [r.losses() for r in result.runs]

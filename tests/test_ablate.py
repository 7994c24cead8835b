"""The ablation runner on a slice of the bundled corpus at a tiny scale: every run
learns, its results and checkpoints are complete and true, and a seed fixes them."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest

import zoo
from zoo.ablate import SIZE_AXES, AblationResult, diff_configs, plot_curves, run_ablation
from zoo.training import TrainSettings, bundled_corpus, load_corpus, validation_batches
from zoo.training import mean_loss as evaluate

TINY_SCALE: dict[str, Any] = dict(
    d_model=16, layers=1, heads=2, seq_len=16, steps=16, batch=8, lr=1e-2, eval_every=8, max_chars=30_000
)
# transformer-2017 -> gpt2-small, sizes aside.
SWAPS = ["position", "activation", "placement", "init", "embedding_scale", "head_output", "norm_eps"]


def ablate(out: Path, seed: int = 0, **kwargs: Any) -> AblationResult:
    return run_ablation("transformer-2017", "gpt2-small", **TINY_SCALE, out_dir=out, seed=seed, tokenizer="bytes", **kwargs)


@pytest.fixture(scope="module")
def ablation(tmp_path_factory: pytest.TempPathFactory) -> tuple[AblationResult, list[tuple[str, int, int, float | None]]]:
    calls: list[tuple[str, int, int, float | None]] = []
    result = ablate(tmp_path_factory.mktemp("ablation"), on_progress=lambda *a: calls.append(a))
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
        ("position", "learned", "sinusoidal(base=500.0)"),
        ("dropout", 0.1, {"embedding": 0.1, "attention": 0.0, "residual": 0.1}),
    ]
    rows = dict((axis, (x, y)) for axis, x, y in diff_configs(zoo.get_config("transformer-2017"), zoo.get_config("transformer-2017-base")))
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


def test_every_run_learns(ablation: Any) -> None:
    result, _ = ablation
    for run in result.runs:
        assert [p.step for p in run.curve] == [0, 8, 16]
        assert run.curve[0].val_loss == pytest.approx(math.log(256), abs=0.6)
        assert run.final_val_loss < run.curve[0].val_loss - 1.0, run.name
        assert run.perplexity == pytest.approx(math.exp(run.final_val_loss))
        assert run.delta_vs_base == pytest.approx(run.final_val_loss - result.runs[0].final_val_loss)
        assert run.tokens_per_second > 0
    assert result.run("head_output").delta_vs_base == pytest.approx(0.0, abs=1e-3)  # a no-op for the loss


def test_results_json_is_complete(ablation: Any) -> None:
    result, _ = ablation
    data = json.loads(result.results_path.read_text())
    assert (data["base"], data["target"]) == ("transformer-2017", "gpt2-small")
    assert data["data"]["tokenizer"] == "bytes" and data["data"]["vocab_size"] == 256
    assert data["settings"]["steps"] == 16 and data["settings"]["seed"] == 0
    assert [d["axis"] for d in data["differences"] if d["swapped"]] == SWAPS
    assert all(d["axis"] in SIZE_AXES for d in data["differences"] if not d["swapped"])
    assert len(data["runs"]) == len(result.runs)
    for saved, run in zip(data["runs"], result.runs):
        assert set(saved) == {
            "name", "axis", "config", "final_val_loss", "perplexity", "parameters",
            "tokens_per_second", "delta_vs_base", "curve", "checkpoint",
        }
        assert saved["curve"] == [{"step": p.step, "train_loss": p.train_loss, "val_loss": p.val_loss} for p in run.curve]
        assert zoo.ModelConfig.model_validate(saved["config"]) == run.config
        assert Path(saved["checkpoint"]).is_file()


def test_checkpoints_load_as_the_trained_models(ablation: Any) -> None:
    result, _ = ablation
    corpus = load_corpus(bundled_corpus(), tokenizer="bytes", max_chars=TINY_SCALE["max_chars"])
    settings = TrainSettings(batch_size=TINY_SCALE["batch"], seq_len=TINY_SCALE["seq_len"])
    batches = validation_batches(corpus.val, settings)
    for run in (result.runs[0], result.run("placement"), result.runs[-1]):
        model = zoo.load(run.checkpoint)
        assert model.config == run.config and model.num_parameters() == run.parameters
        assert evaluate(model, batches) == pytest.approx(run.final_val_loss, abs=1e-5)
        info = zoo.checkpoint.inspect(run.checkpoint)
        assert info.metadata["ablation"]["run"] == run.name


def test_same_seed_gives_identical_curves(ablation: Any, tmp_path: Path) -> None:
    result, _ = ablation
    again = ablate(tmp_path / "again")
    assert [r.curve for r in again.runs] == [r.curve for r in result.runs]  # bit for bit


def test_another_seed_changes_the_curves(tmp_path: Path) -> None:
    a = run_ablation("gpt2-small", "gpt2-small", **TINY_SCALE, out_dir=tmp_path / "a", seed=0, tokenizer="bytes")
    b = run_ablation("gpt2-small", "gpt2-small", **TINY_SCALE, out_dir=tmp_path / "b", seed=1, tokenizer="bytes")
    assert [r.axis for r in a.runs] == ["base", "target"]  # nothing to swap
    assert a.runs[0].curve == a.runs[1].curve  # the same design, the same seed
    assert a.runs[0].curve != b.runs[0].curve


def test_progress_reports_start_every_step_and_final_loss(ablation: Any) -> None:
    result, calls = ablation
    first = [c for c in calls if c[0] == "transformer-2017"]
    assert first[0] == ("transformer-2017", 0, 16, None)
    assert [c[1] for c in first[1:-1]] == list(range(1, 17))
    assert first[-1] == ("transformer-2017", 16, 16, result.runs[0].final_val_loss)
    assert [c[0] for c in calls if c[1] == 0] == [r.name for r in result.runs]


def test_plot_is_written_or_explained(ablation: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result, _ = ablation
    pytest.importorskip("matplotlib")
    assert result.plot_path is not None and result.plot_path.read_bytes()[:4] == b"\x89PNG"
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # as if not installed
    notes: list[str] = []
    assert plot_curves(result.runs, tmp_path / "x.png", title="t", notes=notes) is None
    assert not (tmp_path / "x.png").exists()
    assert notes == ["no plot: matplotlib is not installed; `pip install 'zoo[plot]'` adds it"]


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
        "gpt2-small", "gpt2-small", **{**TINY_SCALE, "steps": 40, "eval_every": 40}, data=text, out_dir=tmp_path / "o", tokenizer="bytes"
    )
    assert result.data["source"] == str(text) and result.data["train_tokens"] == 4320
    assert result.runs[0].final_val_loss < math.log(4)  # it learned this text: 4 symbols, mostly predictable
    assert zoo.load(result.runs[0].checkpoint).config.vocab_size == 256


def test_an_unusable_output_folder_is_refused(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(zoo.InputError, match="cannot create the output folder"):
        ablate(blocker / "out")

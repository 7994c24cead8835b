"""The text of the zoo's figures reads as text: a log axis's tick labels are numbers, not
mathtext source (``$\\mathdefault{10^{0}}$``) printed as written, while a name holding ``$``
still draws literally; blocks are numbered 0 to L - 1 in every figure, as ``zoo probe``
and the hook names number them; no title, label or legend runs past the figure's edge
(``zoo plot``'s, the probe's, the ablation's and the study's figures). Checked on the
figures themselves, rendered to SVG with their text kept as text, and measured after
they are drawn."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from helpers import cut_texts, prepared_bytes, saved_figures, svg_axes
from zoo.cli import main

matplotlib = pytest.importorskip("matplotlib")

MATHTEXT = re.compile(r"\\mathdefault|\$")


def svg_text(path: Path) -> list[str]:
    return [t for t in re.findall(r"<text[^>]*>([^<]*)</text>", path.read_text()) if t.strip()]


def labels_are_plain(texts: list[str]) -> None:
    assert texts, "the figure holds no text"
    assert not [t for t in texts if MATHTEXT.search(t) and "$money" not in t], texts
    assert any(re.fullmatch(r"[0-9.e−+-]+", t) for t in texts), texts  # tick labels are numbers


BLOCKS = ["0", "1"]  # two blocks
RESIDUAL = ["0", "1", "2"]  # the embeddings, then leaving each block
RESIDUAL_LABEL = "block (0: the embeddings, n: leaving block n - 1)"


def test_the_probe_figure_log_axes_read_as_numbers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sets = ["--set=vocab_size=256", "--set=max_seq_len=64", "--set=d_model=32", "--set=n_heads=4", "--set=n_layers=2"]
    svg = tmp_path / "probe.svg"
    figures = saved_figures(monkeypatch)
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        argv = ["probe", "gpt2-small", *sets, "--variant", "placement=post", "--seq-len", "16", "--batch-size", "2"]
        assert main([*argv, "--metrics", "residual,grad,entropy", "--plot", str(svg)]) == 0
    labels_are_plain(svg_text(svg))
    assert [(a["xticks"], a["xlabel"]) for a in svg_axes(svg)] == [
        (RESIDUAL, RESIDUAL_LABEL),
        (BLOCKS, "block"),
        (BLOCKS, "block"),
    ]
    assert [cut_texts(fig) for fig in figures] == [[]]


def test_make_probe_docs_draws_figures_that_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The commands of ``make probe-docs``, which redraw the committed figures, run as
    written at a smaller size (two blocks, a narrower model) into SVG: their labels read
    as text, their blocks are numbered from 0 and nothing is cut."""
    makefile = (Path(__file__).resolve().parents[1] / "Makefile").read_text().replace("\\\n", " ")
    recipe = makefile.split("\nprobe-docs:")[1].split("\n\n")[0]
    commands = [line.strip() for line in recipe.splitlines()[1:] if line.strip()]
    assert len(commands) == 2 and all(c.startswith("$(BIN)/zoo probe ") for c in commands)
    small = "--set d_model=32 --set n_heads=4 --set d_ff=64 --set vocab_size=256 --set max_seq_len=64"
    figures = saved_figures(monkeypatch)
    for number, command in enumerate(commands):
        argv = shlex.split(command.replace("$(PROBE_SMALL)", small))[1:]
        argv = [
            "n_layers=2" if a == "n_layers=12" else "n_layers=1,2" if a.startswith("n_layers=") else a for a in argv
        ]
        for flag, name in (("-o", f"{number}.json"), ("--plot", f"{number}.svg")):
            argv[argv.index(flag) + 1] = str(tmp_path / name)
        with matplotlib.rc_context({"svg.fonttype": "none"}):
            assert main([*argv, "--seq-len", "16", "--batch-size", "2"]) == 0, command
        labels_are_plain(svg_text(tmp_path / f"{number}.svg"))
        for axes in svg_axes(tmp_path / f"{number}.svg"):
            assert axes["xticks"] == (RESIDUAL if axes["xlabel"] == RESIDUAL_LABEL else BLOCKS), axes
    assert len(figures) == 2 and [cut_texts(fig) for fig in figures] == [[], []]


LONG = "a title as long as a run folder's path can make it, " * 4


def test_the_ablation_figures_read_as_numbers_and_keep_a_dollar_in_a_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from zoo.ablate import run_ablation
    from zoo.ablate.report import plot_curves, plot_deltas, plot_diagnostics

    tiny = dict(
        d_model=16,
        layers=2,
        heads=2,
        seq_len=16,
        steps=2,
        batch=2,
        eval_every=2,
        tokenizer="bytes",
        read_unlearned=True,
    )
    result = run_ablation(**tiny, max_chars=4000, swaps=["placement"], seeds=2, out_dir=tmp_path / "run")
    figures = saved_figures(monkeypatch)
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        assert plot_diagnostics(result, tmp_path / "diagnostics.svg") == tmp_path / "diagnostics.svg"
        assert plot_deltas(result, tmp_path / "deltas.svg") == tmp_path / "deltas.svg"
        curves = plot_curves(result.runs, tmp_path / "curves.svg", title="$money run", notes=[])
        plot_curves(result.runs, tmp_path / "long.svg", title=LONG, notes=[])
    labels_are_plain(svg_text(tmp_path / "diagnostics.svg"))
    assert curves is not None and "$money run" in svg_text(curves)  # a dollar in a name, drawn as written
    # blocks 0..L-1 (gradient norm, entropy) and the residual stream's 0..L, each column alike
    assert [a["xticks"] for a in svg_axes(tmp_path / "diagnostics.svg")] == [BLOCKS] * 2 + [RESIDUAL] * 2 + [BLOCKS] * 2
    assert [cut_texts(fig) for fig in figures] == [[]] * 4


def test_zoo_plot_keeps_its_title_and_legend_inside_the_figure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``zoo plot`` of two real runs whose folder names are as long as a path makes them,
    with a long ``--title``: the legend of run names and the title stay inside the figure."""
    (tmp_path / "data").mkdir()
    data = prepared_bytes(tmp_path / "data", 4_000)
    sets = ["--set", "n_layers=1", "--set", "d_model=16", "--set", "n_heads=2", "--set", "max_seq_len=32"]
    train = ["--steps", "4", "--batch-size", "2", "--seq-len", "16", "--eval-every", "2", "--threads", "1", "--quiet"]
    runs = [tmp_path / f"{'a-run-folder-named-as-a-study-names-its-cells-' * 3}{n}" for n in range(2)]
    for run in runs:
        assert main(["train", "gpt2-small", *sets, "--data", str(data), "--out", str(run), *train]) == 0
    figures = saved_figures(monkeypatch)
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        argv = ["plot", *map(str, runs), "-o", str(tmp_path / "curves.svg"), "--title", LONG]
        assert main(argv) == 0
    labels_are_plain(svg_text(tmp_path / "curves.svg"))
    assert len(figures) == 1 and cut_texts(figures[0]) == []


def test_the_study_figures_keep_their_titles_and_legends_inside(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real two-rung study with a warm-up sweep draws both study figures (effects against
    scale, loss against the warm-up): their log axes read as numbers, nothing is cut."""
    from zoo.ablate.studies import run_study
    from zoo.ablate.study_report import plot_scale, plot_sweep

    tiny = dict(heads=2, seq_len=16, steps=2, batch=2, lr=1e-2, eval_every=2, max_chars=4_000, seeds=2)
    study = run_study(
        "transformer-2017",
        "gpt2-small",
        read_unlearned=True,
        d_model=16,
        layers=1,
        scales=[(16, 1), (24, 1)],
        tokens_per_param=0.05,
        warmup_sweep=[0, 2],
        swaps=["placement"],
        tokenizer="bytes",
        out_dir=tmp_path / "study",
        **tiny,
    )
    figures = saved_figures(monkeypatch)
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        assert plot_scale(study, tmp_path / "scale.svg") == tmp_path / "scale.svg"
        assert plot_sweep(study, tmp_path / "sweep.svg") == tmp_path / "sweep.svg"
    labels_are_plain(svg_text(tmp_path / "scale.svg"))
    assert len(figures) == 2 and [cut_texts(fig) for fig in figures] == [[], []]


def test_step_axes_tick_whole_steps(tmp_path: Path) -> None:
    """A 3-step run's curves tick steps 1, 2, 3, never 0.5 or 2.25."""
    import json

    from zoo.training.curves import curves_figure

    run = tmp_path / "run"
    run.mkdir()
    rows = [{"step": s, "loss": 5.0 - s, "lr": 1e-3, "tokens": 64 * s, "tokens_per_s": 1000.0} for s in (1, 2, 3)]
    rows[-1] |= {"val_loss": 2.5, "val_perplexity": 12.2}
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    fig = curves_figure([run])
    fig.canvas.draw()
    (axis,) = [ax for ax in fig.axes if ax.get_xlabel() == "step"]
    ticks = [t for t in axis.get_xticks() if axis.get_xlim()[0] <= t <= axis.get_xlim()[1]]
    assert ticks and all(float(t).is_integer() for t in ticks), ticks

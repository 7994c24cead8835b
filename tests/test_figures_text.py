"""The text of the zoo's figures reads as text: a log axis's tick labels are numbers, not
mathtext source (``$\\mathdefault{10^{0}}$``) printed as written, while a name holding ``$``
still draws literally. Checked on the figures themselves, rendered to SVG with their text
kept as text."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from zoo.cli import main

matplotlib = pytest.importorskip("matplotlib")

MATHTEXT = re.compile(r"\\mathdefault|\$")


def svg_text(path: Path) -> list[str]:
    return [t for t in re.findall(r"<text[^>]*>([^<]*)</text>", path.read_text()) if t.strip()]


def labels_are_plain(texts: list[str]) -> None:
    assert texts, "the figure holds no text"
    assert not [t for t in texts if MATHTEXT.search(t) and "$money" not in t], texts
    assert any(re.fullmatch(r"[0-9.e−+-]+", t) for t in texts), texts  # tick labels are numbers


def test_the_probe_figure_log_axes_read_as_numbers(tmp_path: Path) -> None:
    sets = ["--set=vocab_size=256", "--set=max_seq_len=64", "--set=d_model=32", "--set=n_heads=4", "--set=n_layers=2"]
    svg = tmp_path / "probe.svg"
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        argv = ["probe", "gpt2-small", *sets, "--variant", "placement=post", "--seq-len", "16", "--batch-size", "2"]
        assert main([*argv, "--plot", str(svg)]) == 0
    labels_are_plain(svg_text(svg))


def test_the_ablation_figures_read_as_numbers_and_keep_a_dollar_in_a_name(tmp_path: Path) -> None:
    from zoo.ablate import run_ablation
    from zoo.ablate.report import plot_curves, plot_diagnostics

    tiny = dict(d_model=16, layers=1, heads=2, seq_len=16, steps=2, batch=2, eval_every=2, tokenizer="bytes")
    result = run_ablation(**tiny, max_chars=4000, swaps=["placement"], seeds=2, out_dir=tmp_path / "run")
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        assert plot_diagnostics(result, tmp_path / "diagnostics.svg") == tmp_path / "diagnostics.svg"
        curves = plot_curves(result.runs, tmp_path / "curves.svg", title="$money run", notes=[])
    labels_are_plain(svg_text(tmp_path / "diagnostics.svg"))
    assert curves is not None and "$money run" in svg_text(curves)  # a dollar in a name, drawn as written

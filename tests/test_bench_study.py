"""``zoo bench study`` trains the same model three ways: the zoo's loop, a nanoGPT-style
loop and transformers' GPT-2, from the same weights on the same batches. Its speed is the
benchmark's to report; here, that the three loops compute the same losses (nothing is
skipped on any side) and that ``--json`` has the shape issue 31 names."""

from __future__ import annotations

import json

import pytest

from bench import bench_study


def test_the_three_loops_train_alike_and_json_names_every_side(capsys: pytest.CaptureFixture[str]) -> None:
    bench_study.main(["--rungs", "32x1,48x2", "--steps", "5", "--rounds", "1", "--json"])
    rungs = json.loads(capsys.readouterr().out)
    assert [r["rung"] for r in rungs] == ["32x1", "48x2"]
    for r in rungs:
        speeds = r["tokens_per_s"]
        assert set(speeds) == {"zoo", "nanogpt", "transformers"} and all(s > 0 for s in speeds.values())
        assert r["ratio"] == pytest.approx(speeds["zoo"] / speeds[r["faster_peer"]])
        assert all(0 < f < 1 for f in r["peak_fraction"].values())
        # A peer's step does more than its linear products: the ceiling is above 1x.
        assert r["matmul_seconds"] > 0 and r["ceiling"] > 1
        # A step of 5x the tokens takes longer than one step (gain < 5) and less than ten (> 0.5).
        assert 0.5 < r["batch_gain"] < bench_study.STACK
        # Same start, batches, optimizer: the losses agree to float reassociation at every step.
        assert r["loss_gap"]["nanogpt"] < 1e-4 and r["loss_gap"]["transformers"] < 1e-4
        assert r["final_loss"]["zoo"] < 5.45  # ln(256) = 5.55 at the start: it trained
        # Each side's AdamW steps, timed inside its own steps: a share of the step, and a ratio.
        assert set(r["optimizer_share"]) == set(speeds) and all(0 < f < 1 for f in r["optimizer_share"].values())
        assert r["optimizer_ratio"] > 0


def test_the_nanogpt_side_holds_the_zoo_models_weights() -> None:
    import torch

    import zoo

    model = zoo.build("gpt2-small", d_model=32, n_layers=2, n_heads=2, vocab_size=256, max_seq_len=64, dropout=0.0)
    nano = bench_study.nanogpt_from(model)
    idx = torch.randint(0, 256, (2, 64))
    torch.testing.assert_close(nano(idx), model.eval()(idx))


def test_the_study_rungs_are_make_studys() -> None:
    """The bench's rungs, vocabulary, batch and context are those ``make study`` trains at
    (the Makefile's STUDY_* lines): a study that moves leaves no stale benchmark behind."""
    import re
    from pathlib import Path

    make = Path(__file__).parents[1].joinpath("Makefile").read_text().replace("\\\n", " ")
    lines = dict(re.findall(r"^(STUDY_\w+) \??= (.*)$", make, re.MULTILINE))
    common, tuned = lines["STUDY_COMMON"], lines["STUDY_TUNED"]
    assert "--tokenizer bytes" in common and bench_study.VOCAB == 256
    assert f"--batch-size {bench_study.BATCH}" in common and f"--seq-len {bench_study.SEQ}" in common
    assert "--set dropout=0.0" in common
    ladder = re.search(r"--scales (\S+)", lines["STUDY_LADDER"])
    assert ladder is not None
    rungs = ladder.group(1).split(",")
    for study in ("STUDY_WARMUP", "STUDY_TUNED"):
        text = tuned if study == "STUDY_TUNED" else lines[study]
        d_model, layers, heads = (
            int(re.search(rf"--set {k}=(\d+)", text).group(1)) for k in ("d_model", "n_layers", "n_heads")
        )  # type: ignore[union-attr]
        assert d_model // heads == bench_study.HEAD_SIZE
        rungs.append(f"{d_model}x{layers}")
    assert set(bench_study.STUDY_RUNGS) == set(rungs)


def test_the_ceilings_products_are_each_forward_product_and_its_two_gradients() -> None:
    import zoo
    from bench.bench_forward import linear_shapes

    config = zoo.build("gpt2-small", d_model=32, n_layers=2, n_heads=2, vocab_size=256, device="meta").config
    forward = linear_shapes(config, 1024)
    shapes = bench_study.training_shapes(config, 1024)
    assert len(shapes) == 3 * len(forward) and set(forward) <= set(shapes)
    flops = sum(2 * m * k * n for m, k, n in shapes)
    assert flops == 3 * sum(2 * m * k * n for m, k, n in forward)
    # The weight's gradient contracts over the tokens: a (in x tokens) @ (tokens x out) product.
    assert (32, 1024, 3 * 32) in shapes

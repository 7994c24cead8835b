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
        # Same start, batches, optimizer: the losses agree to float reassociation at every step.
        assert r["loss_gap"]["nanogpt"] < 1e-4 and r["loss_gap"]["transformers"] < 1e-4
        assert r["final_loss"]["zoo"] < 7.2  # ln(1280) = 7.15 at the start: it trained


def test_the_nanogpt_side_holds_the_zoo_models_weights() -> None:
    import torch

    import zoo

    model = zoo.build("gpt2-small", d_model=32, n_layers=2, n_heads=2, vocab_size=1280, max_seq_len=64, dropout=0.0)
    nano = bench_study.nanogpt_from(model)
    idx = torch.randint(0, 1280, (2, 64))
    torch.testing.assert_close(nano(idx), model.eval()(idx))

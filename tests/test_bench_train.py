"""``zoo bench train`` times the zoo's loop beside a nanoGPT loop on the zoo's own starting
weights and a transformers loop, and each side's AdamW step inside those steps."""

from __future__ import annotations

import argparse
import re

import pytest
import torch

from bench import bench_train
from bench.nanogpt import nanogpt_from


def test_the_nanogpt_side_starts_from_the_zoo_models_weights() -> None:
    """The two sides' first losses are the same model's: nanoGPT's copy of the zoo's seeded
    weights computes the zoo's logits on the bench's windows."""
    args = argparse.Namespace(layers=1, seq=16)
    model = bench_train.zoo_model(args, torch.device("cpu")).eval()
    windows = torch.randint(0, 50257, (2, 17), generator=torch.Generator().manual_seed(0))
    ours = torch.nn.functional.cross_entropy(model(windows[:, :-1]).flatten(0, 1), windows[:, 1:].flatten())
    theirs = bench_train.nanogpt_loss(nanogpt_from(model).eval(), windows)
    torch.testing.assert_close(theirs, ours, rtol=1e-5, atol=1e-5)


@pytest.mark.slow  # three training loops of gpt2-small's shape
def test_the_table_holds_each_sides_speed_and_adamw_share(capsys: pytest.CaptureFixture[str]) -> None:
    bench_train.main(["--layers", "1", "--steps", "1", "--rounds", "1", "--batch", "1", "--seq", "8"])
    out = capsys.readouterr().out
    shares = re.findall(r"^(zoo|nanogpt|transformers) loop +[\d,]+ tok/s +AdamW ([\d.]+)% of the step$", out, re.M)
    assert [name for name, _ in shares] == ["zoo", "nanogpt", "transformers"], out
    assert all(0 < float(share) < 100 for _, share in shares), out
    ratios = re.findall(r"^(?:speed ratio|AdamW step) +([\d.]+)x", out, re.M)
    assert len(ratios) == 3 and all(float(r) > 0 for r in ratios), out

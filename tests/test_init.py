"""Init schemes: the statistics they promise, and every parameter covered."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import zoo
from helpers import TINY
from zoo.nn.parts import PartMaker

INITS = [c.name for c in zoo.components("init")]


def test_gpt2_init_statistics() -> None:
    torch.manual_seed(0)
    n_layers = 4
    model = zoo.build("gpt2-small", n_layers=n_layers, d_model=256, n_heads=4, vocab_size=5000, max_seq_len=256)
    residual_std = 0.02 / math.sqrt(2 * n_layers)
    for name, p in model.named_parameters():
        if name.endswith(("attn.out.weight", "mlp.down.weight")):
            assert p.std().item() == pytest.approx(residual_std, rel=0.05), name
        elif name.endswith("norm.weight"):
            assert torch.equal(p, torch.ones_like(p)), name
        elif name.endswith("bias"):
            assert torch.equal(p, torch.zeros_like(p)), name
        else:  # embeddings, qkv, up
            assert p.std().item() == pytest.approx(0.02, rel=0.05), name
            assert abs(p.mean().item()) < 0.002, name


def test_xavier_init_bounds() -> None:
    torch.manual_seed(0)
    model = zoo.build("transformer-2017", **TINY)
    w = model.blocks[0].mlp.up.weight  # (d_ff, d_model)
    bound = math.sqrt(6 / (w.shape[0] + w.shape[1]))
    assert w.abs().max() <= bound and w.abs().max() > 0.9 * bound
    assert torch.equal(model.blocks[0].mlp.up.bias, torch.zeros_like(model.blocks[0].mlp.up.bias))


@pytest.mark.parametrize("init", INITS)
def test_every_init_covers_every_parameter(init: str) -> None:
    """Built on meta and materialised uninitialised: nothing may keep garbage values."""
    torch.manual_seed(0)
    model = zoo.build("gpt2-small", init=init, **TINY)
    for name, p in model.named_parameters():
        assert torch.isfinite(p).all(), name
        assert p.abs().max() < 10, name
    torch.manual_seed(0)
    again = zoo.build("gpt2-small", init=init, **TINY)
    for (name, a), (_, b) in zip(model.named_parameters(), again.named_parameters(), strict=True):
        torch.testing.assert_close(a, b, msg=name)  # seeded: reproducible


def test_init_refuses_a_module_it_cannot_initialise() -> None:
    class Odd(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.scale = nn.Parameter(torch.empty(3))

    container = nn.Sequential(nn.Linear(2, 2), Odd())
    init = PartMaker(zoo.get_config("gpt2-small")).make("init")
    with pytest.raises(zoo.ConfigError, match="reset_parameters"):
        init(container)

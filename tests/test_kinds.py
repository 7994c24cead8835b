"""The kinds of component, declared once (``zoo.nn.contracts.COMPONENT_KINDS``): the registry's
kinds, the part kinds, the config's spec classes and fields and the comparison's axes all
follow from it. And an encoder-decoder's decoder layer goes through its placement's
``block``, so a placement decides how cross-attention is placed (or is refused)."""

from __future__ import annotations

import pickle
from typing import Any

import pytest
import torch
from torch import Tensor, nn

import zoo
import zoo.nn.config as config_module
from zoo.ablate.compare import AXES, diff_configs
from zoo.nn.config import SPECS, ModelConfig, resolve_config
from zoo.nn.contracts import COMPONENT_KINDS, PART_KINDS, CrossAttention, takes_cross
from zoo.plugins.placement import PreNorm

TINY: dict[str, Any] = dict(d_model=32, n_heads=2, n_layers=2, n_encoder_layers=2, vocab_size=50, max_seq_len=16)


def test_every_list_of_kinds_follows_the_one_declaration() -> None:
    names = tuple(kind.name for kind in COMPONENT_KINDS)
    assert zoo.KINDS == names
    assert PART_KINDS == tuple(kind.name for kind in COMPONENT_KINDS if kind.part) and "init" not in PART_KINDS
    assert list(ModelConfig.model_fields)[-len(names) :] == list(names)  # the component fields, last, in order
    for kind in COMPONENT_KINDS:
        field = ModelConfig.model_fields[kind.name]
        assert field.annotation is SPECS[kind.name] and SPECS[kind.name].kind == kind.name
        assert SPECS[kind.name].__name__ == f"{kind.name.capitalize()}Spec"
        assert getattr(config_module, SPECS[kind.name].__name__) is SPECS[kind.name]
        assert field.default == SPECS[kind.name](name=kind.default)
        assert {c.name for c in zoo.components(kind.name)} >= {kind.default}  # the default is registered
    assert set(names) <= set(AXES)  # every kind is an axis of a comparison


def test_a_config_with_generated_specs_validates_pickles_and_compares() -> None:
    config = zoo.get_config("gpt2-small")
    assert type(config.attention).__name__ == "AttentionSpec" and config.attention.name == "sdpa"
    again = pickle.loads(pickle.dumps(config))  # worker processes receive configs pickled
    assert again == config and type(again.mlp) is SPECS["mlp"]
    other = resolve_config(config, {"activation": "relu", "norm": "rmsnorm"})
    assert diff_configs(config, other) == [("activation", "gelu_tanh", "relu"), ("norm", "layernorm", "rmsnorm")]
    with pytest.raises(zoo.UnknownComponentError):
        ModelConfig(**{**config.model_dump(), "init": "nope"})


# -- cross-attention through Placement.block ---------------------------------------------


class CrossFirst(PreNorm):
    """Pre-norm, but a decoder layer runs its cross-attention before self-attention, and
    counts the layers it placed with and without cross-attention."""

    seen: list[bool] = []

    @classmethod
    def block(
        cls,
        x: Tensor,
        attn_residual: zoo.Placement,
        attn: nn.Module,
        mlp_residual: zoo.Placement,
        mlp: nn.Module,
        ctx: zoo.AttentionContext,
        cross: CrossAttention | None = None,
    ) -> Tensor:
        cls.seen.append(cross is not None)
        if cross is not None:
            x = cross.residual(x, cross.attn, cross.ctx)
        return mlp_residual(attn_residual(x, attn, ctx), mlp)


class NoCross(PreNorm):
    """A decoder-only placement: its ``block`` takes no cross-attention."""

    @classmethod
    def block(  # type: ignore[override]
        cls,
        x: Tensor,
        attn_residual: zoo.Placement,
        attn: nn.Module,
        mlp_residual: zoo.Placement,
        mlp: nn.Module,
        ctx: zoo.AttentionContext,
    ) -> Tensor:
        return mlp_residual(attn_residual(x, attn, ctx), mlp)


def registry() -> zoo.Registry:
    def register_components(register: zoo.RegisterComponent) -> None:
        register("placement", "cross-first", CrossFirst)
        register("placement", "no-cross", NoCross)

    plugin = type("placements", (), {"zoo_register_components": staticmethod(zoo.hookimpl(register_components))})()
    return zoo.Registry(entry_points=False, plugins=[plugin])


def build(placement: str, architecture: str = "encoder_decoder") -> nn.Module:
    torch.manual_seed(0)
    name = "transformer-2017-base" if architecture == "encoder_decoder" else "gpt2-small"
    sizes = TINY if architecture == "encoder_decoder" else {k: v for k, v in TINY.items() if k != "n_encoder_layers"}
    return zoo.build(name, registry=registry(), placement=placement, dropout=0.0, **sizes).eval()


def test_the_decoder_layer_goes_through_the_placements_block() -> None:
    assert takes_cross(PreNorm) and takes_cross(CrossFirst) and not takes_cross(NoCross)
    src = torch.randint(0, 50, (2, 7), generator=torch.Generator().manual_seed(1))
    tgt = torch.randint(0, 50, (2, 5), generator=torch.Generator().manual_seed(2))
    CrossFirst.seen.clear()
    crossed = build("cross-first")
    with torch.no_grad():
        out = crossed(src, tgt)
    assert CrossFirst.seen == [False, False, True, True]  # 2 encoder layers, then 2 decoder layers with cross
    plain = build("pre")  # the same weights (same seed, same modules), the sub-layers in the default order
    plain.load_state_dict(crossed.state_dict())
    with torch.no_grad():
        expected = plain(src, tgt)
    assert out.shape == expected.shape == (2, 5, 50)
    assert not torch.allclose(out, expected)  # the order the placement chose is the one that ran


def test_a_placement_without_cross_attention_is_refused_in_an_encoder_decoder_only() -> None:
    with pytest.raises(zoo.ConfigError, match=r"placement 'no-cross' .*'encoder_decoder'.*use placement 'pre'"):
        build("no-cross")
    decoder = build("no-cross", architecture="decoder")
    assert decoder(torch.zeros(1, 4, dtype=torch.long)).shape == (1, 4, 50)

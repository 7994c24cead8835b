"""The part contract: modules with explicit constructor arguments, classes registered
directly, one attention for MHA/GQA/MQA, per-forward prepared state, the placement's
``block``, and the registry passed explicitly to validation and the JSON schema."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import Tensor, nn

import zoo
from zoo.nn import model as model_module
from zoo.nn.attention import AttentionContext, EagerAttention, SdpaAttention
from zoo.nn.config import config_json_schema
from zoo.nn.contracts import CONFIG_ARGUMENTS, Placement, options_from_signature
from zoo.nn.parts import PartMaker, config_arguments
from zoo.plugins.mlp import StandardMLP
from zoo.plugins.placement import PreNorm

TINY: dict[str, Any] = {"vocab_size": 97, "max_seq_len": 64, "d_model": 32, "n_layers": 2, "n_heads": 4, "dropout": 0.0}


def tiny(name: str = "gpt2-small", registry: zoo.Registry | None = None, **overrides: Any) -> Any:
    torch.manual_seed(0)
    return zoo.build(name, registry=registry, **{**TINY, **overrides}).eval()


def ids(*shape: int, seed: int = 1) -> Tensor:
    return torch.randint(0, TINY["vocab_size"], shape, generator=torch.Generator().manual_seed(seed))


def inline(name: str, **hooks: Any) -> Any:
    return type(name, (), {k: staticmethod(zoo.hookimpl(v)) for k, v in hooks.items()})()


# -- modules stand alone ------------------------------------------------------------------


def test_modules_construct_on_their_own_with_explicit_arguments() -> None:
    with torch.device("meta"):
        attn = SdpaAttention(d_model=768, n_heads=12, bias=True, dropout=0.1)
        mqa = EagerAttention(d_model=768, n_heads=12, n_kv_heads=1, bias=False)
    assert attn.qkv.weight.shape == (3 * 768, 768) and attn.qkv.bias is not None  # GPT-2's fused c_attn
    assert (attn.attn_dropout, attn.resid_drop.p) == (0.1, 0.1)
    assert mqa.qkv.weight.shape == (768 + 2 * 64, 768) and mqa.out.bias is None
    block = PreNorm(norm=nn.LayerNorm(8))
    mlp = StandardMLP(d_model=8, d_ff=16, activation=nn.GELU())
    x = torch.randn(2, 3, 8)
    torch.testing.assert_close(block(x, mlp), x + mlp(block.norm(x)))


def test_the_part_maker_fills_every_config_argument() -> None:
    config = zoo.get_config("gpt2-small", **TINY)
    values = config_arguments(config)
    assert tuple(values) == CONFIG_ARGUMENTS
    assert (values["head_dim"], values["dropout"], values["norm_eps"]) == (8, 0.0, config.norm_eps)
    attn = PartMaker(config).make("attention")
    assert (attn.d_model, attn.n_heads, attn.n_kv_heads) == (32, 4, 4)


@pytest.mark.parametrize(("qkv_bias", "out_bias"), [(None, None), (True, False), (False, True)])
def test_attention_bias_options_default_to_the_configs_bias(qkv_bias: Any, out_bias: Any) -> None:
    attention = {"name": "sdpa", "qkv_bias": qkv_bias, "out_bias": out_bias}
    attn = tiny(bias=False, attention=attention).blocks[0].attn
    assert (attn.qkv.bias is not None, attn.out.bias is not None) == (bool(qkv_bias), bool(out_bias))


# -- one attention for MHA, GQA and MQA -----------------------------------------------------


@pytest.mark.parametrize("n_kv_heads", [1, 2])
@pytest.mark.parametrize("kernel", ["sdpa", "eager"])
def test_built_in_attention_with_kv_heads_is_the_gqa_registration(kernel: str, n_kv_heads: int) -> None:
    own = tiny(attention={"name": kernel, "n_kv_heads": n_kv_heads}, position="rotary")
    modern = tiny(attention={"name": "gqa", "n_kv_heads": n_kv_heads, "kernel": kernel}, position="rotary")
    modern.load_state_dict(own.state_dict())  # same names and shapes: a strict load
    idx, mask = ids(2, 9), torch.ones(2, 9, dtype=torch.long)
    mask[0, :2] = 0
    with torch.no_grad():
        torch.testing.assert_close(modern(idx, attention_mask=mask), own(idx, attention_mask=mask), rtol=0, atol=0)
    assert type(modern.blocks[0].attn) is type(own.blocks[0].attn)  # one implementation


def test_the_kernels_agree_for_grouped_heads_with_padding() -> None:
    sdpa = tiny(attention={"name": "sdpa", "n_kv_heads": 2}, position="alibi")
    eager = tiny(attention={"name": "eager", "n_kv_heads": 2}, position="alibi")
    eager.load_state_dict(sdpa.state_dict())
    idx, mask = ids(2, 9), torch.ones(2, 9, dtype=torch.long)
    mask[1, :4] = 0
    with torch.no_grad():
        torch.testing.assert_close(
            eager(idx, attention_mask=mask)[1, 4:], sdpa(idx, attention_mask=mask)[1, 4:], atol=1e-5, rtol=0
        )


def test_kv_heads_must_divide_the_heads() -> None:
    with pytest.raises(zoo.ConfigError, match=r"attention.n_kv_heads=3 must divide n_heads=4.*1, 2, 4"):
        tiny(attention={"name": "sdpa", "n_kv_heads": 3})


# -- registering a class directly ---------------------------------------------------------


class Scaled(nn.Module):
    """Activation times a fixed factor (options derived from the signature)."""

    def __init__(self, d_model: int, norm_inner: nn.Module, factor: float = 2.0) -> None:
        super().__init__()
        self.d_model, self.norm_inner, self.factor = d_model, norm_inner, factor

    def forward(self, x: Tensor) -> Tensor:
        return torch.relu(x) * self.factor


class ShiftOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
    shift: float = Field(0.5, description="added to every input")


class Shifted(nn.Module):
    """x + shift (options declared by ``Options``)."""

    Options = ShiftOptions

    def __init__(self, shift: float) -> None:
        super().__init__()
        self.shift = shift

    def forward(self, x: Tensor) -> Tensor:
        return x + self.shift


class Recursive(nn.Module):
    """An activation that asks for an activation: itself, when configured."""

    def __init__(self, activation: nn.Module) -> None:
        super().__init__()


class NeedsSomething(nn.Module):
    """Takes an argument the model cannot fill and the options do not hold."""

    Options = ShiftOptions

    def __init__(self, shift: float, mystery: int) -> None:
        super().__init__()


def class_registry() -> zoo.Registry:
    def register_components(register: Any) -> None:
        register("activation", "scaled", Scaled)
        register("activation", "shifted", Shifted)
        register("activation", "needy", NeedsSomething)
        register("activation", "recursive", Recursive)

    return zoo.Registry(entry_points=False, plugins=[inline("classes", zoo_register_components=register_components)])


def test_a_class_registers_directly_with_options_from_its_signature() -> None:
    registry = class_registry()
    scaled = registry.get("activation", "scaled")
    assert scaled.description == "Activation times a fixed factor (options derived from the signature)."
    assert list(scaled.options_model.model_fields) == ["factor"]  # d_model and norm_inner are filled by the model
    act = tiny(registry=registry, activation={"name": "scaled", "factor": 3.0}, norm="rmsnorm").blocks[0].mlp.act
    assert isinstance(act, Scaled) and (act.factor, act.d_model) == (3.0, 32)
    assert isinstance(act.norm_inner, nn.RMSNorm)  # a fresh module of the configured norm
    with pytest.raises(zoo.ConfigError, match="activation 'scaled' options: activation.factor: .*finite"):
        tiny(registry=registry, activation={"name": "scaled", "factor": float("inf")})
    with pytest.raises(zoo.ConfigError, match="activation.power: Extra inputs are not permitted"):
        tiny(registry=registry, activation={"name": "scaled", "power": 2})


def test_a_class_declares_its_options_with_an_options_attribute() -> None:
    registry = class_registry()
    assert registry.get("activation", "shifted").options_model is ShiftOptions
    assert options_from_signature(Shifted) is ShiftOptions
    assert tiny(registry=registry, activation={"name": "shifted", "shift": 1.5}).blocks[0].mlp.act.shift == 1.5
    with pytest.raises(zoo.ConfigError, match="takes an argument 'mystery' that is neither one of its options"):
        tiny(registry=registry, activation="needy")
    with pytest.raises(
        zoo.ConfigError, match="in a cycle: mlp 'standard' -> activation 'recursive' -> activation 'recursive'"
    ):
        tiny(registry=registry, activation="recursive")


class Tempered(SdpaAttention):
    """A plugin's attention subclassing the built-in one: a new option, the inherited ones kept."""

    def __init__(self, d_model: int, n_heads: int, *, temperature: float = 1.0, **options: Any) -> None:
        super().__init__(d_model, n_heads, **options)
        self.temperature = temperature


class TemperedOwn(Tempered):
    """The same, declaring its own options: exactly those."""

    class Options(BaseModel):
        model_config = ConfigDict(frozen=True, extra="forbid")
        temperature: float = 1.0


def test_a_subclass_of_a_built_in_attention_takes_its_new_options_beside_the_inherited_ones() -> None:
    """SdpaAttention's Options is inherited; a subclass's new argument is an option too,
    rather than refused as an extra input, while a misspelt one still is."""
    plugin = inline(
        "tempered",
        zoo_register_components=lambda register: (
            register("attention", "tempered", Tempered),
            register("attention", "tempered-own", TemperedOwn),
        ),
    )
    registry = zoo.Registry(entry_points=False, plugins=[plugin])
    assert set(registry.get("attention", "tempered").options_model.model_fields) == {
        *SdpaAttention.Options.model_fields,
        "temperature",
    }
    attn = tiny(registry=registry, attention={"name": "tempered", "temperature": 2.0, "n_kv_heads": 2}).blocks[0].attn
    assert isinstance(attn, Tempered) and (attn.temperature, attn.n_kv_heads, attn.kernel) == (2.0, 2, "sdpa")
    with pytest.raises(zoo.ConfigError, match="attention.temprature: Extra inputs are not permitted"):
        tiny(registry=registry, attention={"name": "tempered", "temprature": 2.0})
    assert registry.get("attention", "tempered-own").options_model is TemperedOwn.Options
    with pytest.raises(zoo.ConfigError, match="attention.n_kv_heads: Extra inputs are not permitted"):
        tiny(registry=registry, attention={"name": "tempered-own", "n_kv_heads": 2})


def test_the_old_builder_contract_is_refused_with_the_fix() -> None:
    def old(builder: Any, options: Any) -> nn.Module:
        return nn.ReLU()

    plugin = inline("old-plugin", zoo_register_components=lambda register: register("activation", "old", old))
    with pytest.warns(RuntimeWarning, match=r"takes \(builder, options\).*take explicit arguments instead"):
        registry = zoo.Registry(entry_points=False, plugins=[plugin])
    assert [p.status for p in registry.plugins if not p.builtin] == ["failed"]


# -- per-forward state and the context ------------------------------------------------------


def test_attention_context_holds_inputs_only() -> None:
    names = {f.name for f in dataclasses.fields(AttentionContext)}
    # the inputs (padding: for a mixer without scores), and the layer's hook points (None unless a hook is
    # set: zoo.nn.hooks fills it per forward)
    assert names == {"mask", "is_causal", "encoding", "rotation", "cache", "memory", "hooks", "padding"}
    assert AttentionContext().hooks is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        AttentionContext().mask = None  # type: ignore[misc]


@pytest.mark.parametrize("position", ["rotary", "alibi", "learned"])
def test_masks_and_rotations_are_prepared_once_per_forward(position: str, monkeypatch: pytest.MonkeyPatch) -> None:
    model = tiny(position=position, n_layers=3)
    calls = {"prepare": 0, "mask": 0}
    prepare, make_mask = model.position.prepare, model_module.make_mask

    def counting_prepare(positions: Tensor) -> Any:
        calls["prepare"] += 1
        return prepare(positions)

    def counting_mask(**kwargs: Any) -> Any:
        calls["mask"] += 1
        return make_mask(**kwargs)

    monkeypatch.setattr(model.position, "prepare", counting_prepare)
    monkeypatch.setattr(model_module, "make_mask", counting_mask)
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[0, 0] = 0
    with torch.no_grad():
        model(ids(2, 8), attention_mask=mask)
    assert calls == {"prepare": 1, "mask": 1}


def test_partial_rotary_equals_gpt_neox() -> None:
    from transformers import GPTNeoXConfig
    from transformers.models.gpt_neox.modeling_gpt_neox import (
        GPTNeoXRotaryEmbedding,
        apply_rotary_pos_emb,
    )

    rotary = tiny(d_model=64, position={"name": "rotary", "rotary_pct": 0.25, "base": 500.0}).position
    assert rotary.rotary_dim == 4  # int(16 * 0.25)
    hf = GPTNeoXRotaryEmbedding(
        GPTNeoXConfig(hidden_size=64, num_attention_heads=4, rotary_pct=0.25, rotary_emb_base=500.0)
    )
    q, k = torch.randn(2, 4, 7, 16), torch.randn(2, 4, 7, 16)
    positions = torch.arange(3, 10)[None].expand(2, 7)
    cos, sin = hf(q, positions)
    expected = apply_rotary_pos_emb(q, k, cos, sin)
    torch.testing.assert_close(rotary.rotate(q, k, rotary.prepare(positions)), expected, rtol=0, atol=1e-6)
    assert torch.equal(rotary.rotate(q, k, rotary.prepare(positions))[0][..., 4:], q[..., 4:])  # the rest stays


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"rotary_dim": 4, "rotary_pct": 0.5}, "rotary_dim or rotary_pct, not both"),
        ({"rotary_dim": 3}, "must be even and in 2..head_dim=8, got 3"),
        ({"rotary_dim": 10}, "got 10"),
        ({"rotary_pct": 0.1}, "got 0"),
    ],
)
def test_partial_rotary_refuses_dimensions_that_do_not_pair(options: dict[str, Any], match: str) -> None:
    with pytest.raises(zoo.ConfigError, match=match):
        tiny(position={"name": "rotary", **options})


# -- the placement decides how a layer's sub-layers combine ---------------------------------


class Parallel(Placement):
    """x + attn(norm(x)) + mlp(norm2(x)), as GPT-J runs a layer."""

    def __init__(self, norm: nn.Module) -> None:
        super().__init__()
        self.norm = norm

    def forward(self, x: Tensor, sublayer: nn.Module, *args: object) -> Tensor:
        return x + sublayer(self.norm(x), *args)

    @classmethod
    def block(
        cls,
        x: Tensor,
        attn_residual: Placement,
        attn: nn.Module,
        mlp_residual: Placement,
        mlp: nn.Module,
        ctx: AttentionContext,
    ) -> Tensor:
        return x + attn(attn_residual.norm(x), ctx) + mlp(mlp_residual.norm(x))


def test_block_runs_as_the_placement_says() -> None:
    plugin = inline("parallel", zoo_register_components=lambda register: register("placement", "parallel", Parallel))
    registry = zoo.Registry(entry_points=False, plugins=[plugin])
    model = tiny(registry=registry, placement="parallel")
    block, x = model.blocks[0], torch.randn(2, 5, TINY["d_model"])
    ctx = AttentionContext(is_causal=True)
    expected = x + block.attn(block.attn_residual.norm(x), ctx) + block.mlp(block.mlp_residual.norm(x))
    sequential = block.mlp_residual(block.attn_residual(x, block.attn, ctx), block.mlp)
    torch.testing.assert_close(block(x, ctx), expected)
    assert not torch.equal(block(x, ctx), sequential)
    assert "blocks.0.attn_residual.norm.weight" in model.state_dict()  # names as for pre-norm


class Halves(Placement):
    """Pre-norm that records which half of its layer's pair it is."""

    def __init__(self, norm: nn.Module, half: str = "alone") -> None:
        super().__init__()
        self.norm, self.half = norm, half

    def forward(self, x: Tensor, sublayer: nn.Module, *args: object) -> Tensor:
        return x + sublayer(self.norm(x), *args)

    @classmethod
    def pair(cls, make: Any) -> tuple[Placement, Placement]:
        return make(half="attention"), make(half="mlp")


def test_a_layers_two_placements_come_from_one_pair_call() -> None:
    plugin = inline("halves", zoo_register_components=lambda register: register("placement", "halves", Halves))
    registry = zoo.Registry(entry_points=False, plugins=[plugin])
    decoder = tiny(registry=registry, placement="halves")
    seq2seq = tiny("transformer-2017-base", registry=registry, placement="halves", n_encoder_layers=2)
    for block in [*decoder.blocks, *seq2seq.encoder, *seq2seq.decoder]:
        assert (block.attn_residual.half, block.mlp_residual.half) == ("attention", "mlp")
    assert [block.cross_residual.half for block in seq2seq.decoder] == ["alone", "alone"]  # cross-attention's own
    assert decoder.blocks[0].attn_residual.norm is not decoder.blocks[0].mlp_residual.norm
    default = tiny(placement="pre").blocks[0]  # Placement.pair: two independent placements
    assert isinstance(default.mlp_residual, PreNorm) and default.attn_residual.norm is not default.mlp_residual.norm


def test_pair_arguments_the_constructor_does_not_take_are_refused() -> None:
    class Misspelt(Halves):
        @classmethod
        def pair(cls, make: Any) -> tuple[Placement, Placement]:
            return make(), make(nrom=None)

    plugin = inline("misspelt", zoo_register_components=lambda register: register("placement", "misspelt", Misspelt))
    registry = zoo.Registry(entry_points=False, plugins=[plugin])
    with pytest.raises(zoo.ConfigError, match="placement 'misspelt'.*nrom.*does not take"):
        tiny(registry=registry, placement="misspelt")


# -- the registry is passed explicitly ----------------------------------------------------------


def test_the_json_schema_lists_the_components_of_the_registry_given() -> None:
    builtins = zoo.Registry(entry_points=False)
    for registry in (builtins, class_registry(), zoo.default_registry()):
        schema = config_json_schema(registry)
        names = schema["$defs"]["ActivationSpec"]["anyOf"][0]["enum"]
        assert names == [c.name for c in registry.components("activation")]
    assert "gqa" not in config_json_schema(builtins)["$defs"]["AttentionSpec"]["anyOf"][0]["enum"]
    assert "scaled" in config_json_schema(class_registry())["$defs"]["ActivationSpec"]["anyOf"][0]["enum"]


def test_validation_uses_the_registry_given_not_the_default() -> None:
    registry = class_registry()
    config = zoo.get_config("gpt2-small", registry=registry, activation="shifted")
    assert config.activation.options == {"shift": 0.5}  # defaults filled from that registry's options model
    with pytest.raises(zoo.UnknownComponentError):
        zoo.get_config("gpt2-small", activation="shifted")  # the default registry has no such activation

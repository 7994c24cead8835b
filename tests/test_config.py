"""ModelConfig validation, overrides and error messages."""

from __future__ import annotations

import json

import pydantic
import pytest

import zoo
from zoo.nn.config import ModelConfig, apply_overrides, validate_config


def test_config_is_frozen_and_forbids_extra_fields() -> None:
    config = zoo.get_config("gpt2-small")
    with pytest.raises(pydantic.ValidationError, match="frozen"):
        config.d_model = 1  # type: ignore[misc]
    with pytest.raises(zoo.ConfigError, match="n_layer"):
        zoo.get_config("gpt2-small", n_layer=3)


def test_d_ff_defaults_to_four_d_model_and_follows_overrides() -> None:
    assert zoo.get_config("gpt2-small").d_ff == 3072
    assert zoo.get_config("gpt2-small", d_model=128, n_heads=4).d_ff == 512
    assert zoo.get_config("gpt2-medium").d_ff == 4096
    base = zoo.get_config("gpt2-small", n_layers=2)
    assert zoo.build(base, d_model=64, n_heads=4, device="meta").config.d_ff == 256


def test_heads_must_divide_d_model_and_the_message_says_how_to_fix() -> None:
    with pytest.raises(zoo.ConfigError, match=r"d_model=768 is not divisible by n_heads=7.*pick n_heads among"):
        zoo.get_config("gpt2-small", n_heads=7)


@pytest.mark.parametrize(
    ("field", "value"),
    [("vocab_size", 10**12), ("d_model", 10**7), ("n_layers", 10**6), ("max_seq_len", 10**9), ("vocab_size", 0)],
)
def test_absurd_sizes_are_refused_before_allocation(field: str, value: int) -> None:
    with pytest.raises(zoo.ConfigError, match=field):
        zoo.build("gpt2-small", **{field: value})


def test_total_size_bound() -> None:
    with pytest.raises(zoo.ConfigError, match="parameters"):
        zoo.get_config("gpt2-small", d_model=32768, n_heads=8, n_layers=1000)


def test_unknown_component_says_did_you_mean_and_lists_names() -> None:
    with pytest.raises(zoo.UnknownComponentError) as err:
        zoo.build("gpt2-small", activation="gleu")
    message = str(err.value)
    assert "'gelu'" in message and "Did you mean" in message and "relu" in message


def test_component_options_are_validated_and_filled() -> None:
    config = zoo.get_config("gpt2-small", position={"name": "sinusoidal"})
    assert config.position.options == {"base": 10000.0}
    with pytest.raises(zoo.ConfigError, match=r"position.*base"):
        zoo.get_config("gpt2-small", position={"name": "sinusoidal", "base": "x"})
    with pytest.raises(zoo.ConfigError, match="rate"):
        zoo.get_config("gpt2-small", position={"name": "learned", "rate": 3})


def test_component_check_hook_refuses_odd_d_model_for_sinusoidal() -> None:
    with pytest.raises(zoo.ConfigError, match="even d_model"):
        zoo.get_config("gpt2-small", position="sinusoidal", d_model=33, n_heads=1)


def test_overrides_swap_components_and_keep_options_of_the_same_one() -> None:
    base = {"position": {"name": "sinusoidal", "base": 500.0}, "attention": "sdpa"}
    merged = apply_overrides(base, {"position": {"base": 100.0}, "attention": {"name": "eager"}})
    assert merged["position"] == {"name": "sinusoidal", "base": 100.0}
    assert merged["attention"] == {"name": "eager"}
    swapped = apply_overrides(base, {"position": "learned"})
    assert swapped["position"] == {"name": "learned"}


def test_dropout_shorthand_and_partial_override() -> None:
    config = zoo.get_config("gpt2-small", dropout=0.2)
    assert (config.dropout.embedding, config.dropout.attention, config.dropout.residual) == (0.2, 0.2, 0.2)
    config = zoo.get_config("gpt2-small", dropout={"attention": 0.0})
    assert (config.dropout.embedding, config.dropout.attention) == (0.1, 0.0)
    with pytest.raises(zoo.ConfigError, match="dropout"):
        zoo.get_config("gpt2-small", dropout=1.5)


def test_json_round_trip_is_exact() -> None:
    config = zoo.get_config("transformer-2017", position={"name": "sinusoidal", "base": 777.0})
    again = validate_config(json.loads(config.model_dump_json()))
    assert again == config


def test_json_schema_covers_installed_components() -> None:
    schema = json.dumps(ModelConfig.model_json_schema())
    for component in zoo.components():
        assert f'"{component.name}"' in schema
    assert '"base"' in schema  # an option of the sinusoidal position


def test_unknown_preset_suggests_close_names() -> None:
    with pytest.raises(zoo.PresetError, match=r"Did you mean 'gpt2-small'"):
        zoo.get_config("gpt2-smal")


def test_list_models_wildcards() -> None:
    assert {"gpt2-large", "gpt2-medium", "gpt2-small", "gpt2-xl"} <= set(zoo.list_models("gpt2-*"))
    assert zoo.list_models("gpt2-?l") == ["gpt2-xl"]
    assert "transformer-2017" in zoo.list_models()
    assert zoo.list_models("nothing*") == []


def test_bad_override_value_type_names_the_field() -> None:
    with pytest.raises(zoo.ConfigError, match="n_layers"):
        zoo.build("gpt2-small", n_layers="many")
    with pytest.raises(zoo.ConfigError, match="name"):
        zoo.build("gpt2-small", attention=42)

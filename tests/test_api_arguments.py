"""Arguments of the public API: devices and dtypes a model cannot run on, generate's
arguments, nonsense config values, and the size bound counting the built structure
(plugin options too).

(Once ``test_hardening.py``, by the items of issue 9.)
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

import zoo
from helpers import TINY, tiny
from zoo import ConfigError, InputError
from zoo.cli import main
from zoo.decoding import generate


def test_a_device_this_machine_lacks_is_a_config_error() -> None:
    device = "cuda" if not torch.cuda.is_available() else f"cuda:{torch.cuda.device_count()}"
    with pytest.raises(ConfigError, match="device 'cuda.*(no CUDA device|does not exist)"):
        zoo.build("gpt2-small", device=device, **TINY)


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2, "float8", torch.int8])
def test_float8_and_other_dtypes_a_model_cannot_run_in_are_config_errors(dtype: Any) -> None:
    with pytest.raises(ConfigError, match="float32, bfloat16, float16 or float64"):
        zoo.build("gpt2-small", dtype=dtype, **TINY)


@pytest.mark.parametrize(
    ("options", "match"),
    [({"generator": 42}, "generator must be a torch.Generator"),
     ({"max_new_tokens": -1}, r"max_new_tokens must be an integer >= 0"),  # a KV cache past memory: test_generate
     ({"do_sample": "no"}, "do_sample must be True or False")],
)  # fmt: skip
def test_generate_arguments_are_input_errors(options: dict[str, Any], match: str) -> None:
    model = tiny(position="sinusoidal")
    arguments = {"max_new_tokens": 2, **options}
    with pytest.raises(InputError, match=match):
        generate(model, torch.tensor([[1, 2, 3]]), **arguments)


NONSENSE = [
    {"n_layers": True}, {"d_model": 32.0}, {"vocab_size": "97"}, {"n_heads": False},
    {"bias": "yes"}, {"tie_embeddings": 1}, {"final_norm": "false"},
    {"norm_eps": float("inf")}, {"norm_eps": float("nan")}, {"dropout": {"attention": float("nan")}},
    {"init": {"std": float("inf")}}, {"init": {"std": True}},
    {"position": {"name": "sinusoidal", "base": float("inf")}},
]  # fmt: skip


MODERN_NONSENSE = [
    {"position": {"name": "rotary", "base": float("inf")}}, {"position": {"name": "alibi", "max_bias": float("inf")}},
    {"attention": {"name": "gqa", "n_kv_heads": True}},
]  # fmt: skip


@pytest.mark.parametrize("override", [*NONSENSE, *MODERN_NONSENSE], ids=str)
def test_nonsense_values_are_config_errors(override: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        zoo.get_config("gpt2-small", **{**TINY, **override})


def test_the_cli_refuses_a_boolean_size(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info", "gpt2-small", "--set", "n_layers=true"]) == 1
    assert "n_layers" in capsys.readouterr().err


class HugeMlp:
    """A plugin MLP whose own option sets its width, which no formula knows about."""

    @zoo.hookimpl
    def zoo_register_components(self, register: Any) -> None:
        def wide(d_model: int, width: int = 8) -> nn.Module:
            """An MLP as wide as asked."""
            return nn.Sequential(nn.Linear(d_model, width), nn.Linear(width, d_model))

        register("mlp", "wide", wide)


@pytest.mark.parametrize(
    ("name", "mlp"),
    [("gpt2-small", {"name": "wide", "width": 10**13}),
     ("gpt2-small-modern", {"name": "swiglu", "hidden": 10**15}),
     ("gpt2-small-modern", {"name": "swiglu", "multiple_of": 10**12})],
)  # fmt: skip
def test_plugin_options_count_toward_the_size_bound(name: str, mlp: dict[str, Any]) -> None:
    registry = zoo.Registry(plugins=[HugeMlp()])
    config = zoo.nn.config.resolve_config(name, {"mlp": mlp}, registry=registry)  # options are legal
    with pytest.raises(ConfigError, match=r"builds a model of [0-9,]+ parameters, over the limit"):
        zoo.build(config, device="meta", registry=registry)
    with pytest.raises(ConfigError, match="over the limit"):
        zoo.summarize(config, registry=registry)  # `zoo info` counts on the same structure

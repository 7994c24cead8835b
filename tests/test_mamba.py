"""Mamba (v1) and Falcon-Mamba beyond the parity cases (tests/family_cases/state_space.py):
the ``mamba`` mixer against transformers' ``MambaMixer`` and ``FalconMambaMixer``, its cache
(the convolution's inputs and the scan's state), padding, the released size, and the
converters' refusals, one line each, naming the field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor

import zoo
from helpers import TINY, tiny
from zoo.interop.hf import config_from_hf
from zoo.nn.attention import AttentionContext

transformers = pytest.importorskip("transformers")
pytest.importorskip("zoo_modern")

from transformers.models.falcon_mamba.modeling_falcon_mamba import FalconMambaMixer  # noqa: E402
from transformers.models.mamba.modeling_mamba import MambaMixer  # noqa: E402

from zoo_modern.mamba import Mamba, selective_scan  # noqa: E402

HF: dict[str, Any] = {
    "architectures": ["MambaForCausalLM"],
    "model_type": "mamba",
    "vocab_size": 64,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "state_size": 8,
}


def randn(*shape: int, seed: int = 0) -> Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def perturbed_mixer(falcon: bool, fields: dict[str, Any]) -> tuple[Any, Mamba]:
    """transformers' mixer of ``fields`` with every weight random, and the zoo's with the same weights."""
    config_class, mixer_class = (
        (transformers.FalconMambaConfig, FalconMambaMixer) if falcon else (transformers.MambaConfig, MambaMixer)
    )
    config = config_class(**{**HF, **fields})
    torch.manual_seed(0)
    reference = mixer_class(config, layer_idx=0, initialize_mixer_weights=False).eval()
    with torch.no_grad():
        for i, (_, p) in enumerate(reference.named_parameters()):
            p.copy_(randn(*p.shape, seed=i) * 0.3)
    mixer = Mamba(
        32, d_state=8, expand=config.expand, conv_kernel=config.conv_kernel, dt_rank=config.time_step_rank,
        conv_bias=config.use_conv_bias, proj_bias=config.use_bias, bcdt_norm=falcon,
        bcdt_eps=getattr(config, "mixer_rms_eps", 1e-6),
    ).eval()  # fmt: skip
    state = {k.replace("conv1d.", "conv."): v for k, v in reference.state_dict().items() if "layernorm" not in k}
    mixer.load_state_dict(state)  # strict: the same parameters under the same names but the convolution's
    return reference, mixer


@pytest.mark.parametrize(
    ("falcon", "fields"),
    [
        (False, {}),
        (False, {"use_bias": True, "conv_kernel": 3, "time_step_rank": 5}),
        (False, {"use_conv_bias": False, "expand": 3}),
        (True, {}),
        (True, {"mixer_rms_eps": 1e-2, "time_step_rank": 7}),
    ],
    ids=["mamba", "biased", "no-conv-bias", "falcon", "falcon-eps"],
)
def test_the_mixer_equals_transformers_mixer(falcon: bool, fields: dict[str, Any]) -> None:
    reference, mixer = perturbed_mixer(falcon, fields)
    x = randn(2, 11, 32, seed=1)
    with torch.no_grad():
        expected = reference(x)
        got = mixer(x, AttentionContext())
        scale = expected.abs().max()
        torch.testing.assert_close(got / scale, expected / scale, rtol=0, atol=1e-6)
    assert scale > 0.1  # not a vanishing output that any mixer would match


def test_bcdt_weights_equal_jambas_mixer_and_need_the_norms() -> None:
    """``bcdt_weights``: Jamba's mixer, its RMSNorms on the time step, B and C learned scales."""
    jamba = pytest.importorskip("transformers.models.jamba.modeling_jamba")
    config = transformers.JambaConfig(hidden_size=32, mamba_d_state=8, mamba_dt_rank=4, rms_norm_eps=1e-5)
    reference = jamba.JambaMambaMixer(config, layer_idx=0).eval()
    with torch.no_grad():
        for i, (name, p) in enumerate(reference.named_parameters()):
            p.copy_(randn(*p.shape, seed=i) * 0.3 + (1.0 if "layernorm" in name else 0.0))
    mixer = Mamba(32, d_state=8, dt_rank=4, bcdt_norm=True, bcdt_eps=1e-5, bcdt_weights=True).eval()
    names = {"conv1d.": "conv.", "dt_layernorm.weight": "bcdt_scales.0", "b_layernorm.weight": "bcdt_scales.1"}
    names |= {"c_layernorm.weight": "bcdt_scales.2"}
    state = {}
    for k, v in reference.state_dict().items():
        for old, new in names.items():
            k = k.replace(old, new)
        state[k] = v
    mixer.load_state_dict(state)  # strict: every scale found its name
    x = randn(2, 11, 32, seed=1)
    with torch.no_grad():
        expected = reference(x)
        torch.testing.assert_close(mixer(x, AttentionContext()), expected, rtol=0, atol=1e-5)
    assert expected.abs().max() > 0.1
    with pytest.raises(ValueError, match="bcdt_weights"):
        Mamba(32, bcdt_weights=True)


def test_the_scan_carries_its_state_across_calls() -> None:
    """Two halves, the second from the first's state, are the whole sequence."""
    x, b, c = randn(2, 10, 6, seed=1), randn(2, 10, 4, seed=2), randn(2, 10, 4, seed=3)
    dt = torch.nn.functional.softplus(randn(2, 10, 6, seed=4))
    a = -torch.exp(randn(6, 4, seed=5))
    whole, final = selective_scan(x, dt, a, b, c, None)
    first, mid = selective_scan(x[:, :4], dt[:, :4], a, b[:, :4], c[:, :4], None)
    second, end = selective_scan(x[:, 4:], dt[:, 4:], a, b[:, 4:], c[:, 4:], mid)
    torch.testing.assert_close(torch.cat([first, second], dim=1), whole, rtol=0, atol=1e-6)
    torch.testing.assert_close(end, final, rtol=0, atol=1e-6)
    assert not torch.allclose(selective_scan(x[:, 4:], dt[:, 4:], a, b[:, 4:], c[:, 4:], None)[0], second, atol=1e-3)


def test_the_cache_keeps_the_convolutions_inputs_and_the_scans_state() -> None:
    model = tiny(attention={"name": "mamba", "d_state": 4, "conv_kernel": 3}, mlp="none")
    inner = 2 * TINY["d_model"]
    cache = model.new_cache()
    with torch.no_grad():
        model(torch.randint(0, TINY["vocab_size"], (2, 13)), cache=cache)
    assert cache.length == 13 and [layer.stored for layer in cache.layers] == [2] * TINY["n_layers"]
    assert all(layer.state.shape == (2, inner, 4) for layer in cache.layers)
    per_layer = 2 * 2 * inner * 4 + 2 * inner * 4 * 4  # the kept inputs, the state: float32
    assert cache.nbytes == TINY["n_layers"] * per_layer


def test_left_padding_never_reaches_a_real_token() -> None:
    model = tiny(attention={"name": "mamba", "d_state": 4, "proj_bias": True}, mlp="none", position="none").eval()
    real = torch.randint(0, TINY["vocab_size"], (1, 6))
    padded = torch.cat([torch.randint(0, TINY["vocab_size"], (1, 3)), real], dim=1)
    mask = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 1, 1]])
    with torch.no_grad():
        torch.testing.assert_close(model(padded, attention_mask=mask)[:, 3:], model(real), rtol=0, atol=1e-5)
        assert not torch.allclose(model(padded)[:, 3:], model(real), atol=1e-3)  # unmasked, the padding is read


@pytest.mark.parametrize(
    ("architecture", "released"),
    [
        ("MambaForCausalLM", {"vocab_size": 50280, "hidden_size": 768, "num_hidden_layers": 24}),  # mamba-130m
        ("FalconMambaForCausalLM", {"vocab_size": 65024, "hidden_size": 4096, "num_hidden_layers": 64}),  # 7b
    ],
)
def test_the_released_sizes_count_as_transformers_does(architecture: str, released: dict[str, Any]) -> None:
    config_class = getattr(transformers, architecture.replace("ForCausalLM", "Config"))
    hf = {**HF, **released, "state_size": 16, "architectures": [architecture]}
    hf["model_type"] = config_class.model_type
    with torch.device("meta"):
        reference = getattr(transformers, architecture)(config_class(**hf))
    model = zoo.build(config_from_hf(hf), device="meta")
    assert model.num_parameters() == reference.num_parameters() > 100_000_000


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"time_step_rank": "wide"}, "time_step_rank"),
        ({"hidden_act": "gelu"}, "hidden_act"),
        ({"state_size": 0}, "state_size"),
        ({"num_heads": 4}, "num_heads"),
    ],
)
def test_settings_the_zoo_does_not_model_are_refused_by_name(change: dict[str, Any], named: str) -> None:
    with pytest.raises(zoo.InteropError, match=rf"config.json: {named}=") as caught:
        config_from_hf({**HF, **change})
    assert "\n" not in str(caught.value)


def test_export_writes_the_rank_and_keeps_falcons_norms_to_falcon(tmp_path: Path) -> None:
    fields = {**config_from_hf(HF), "max_seq_len": 64}
    assert fields["attention"] == {"name": "mamba", "d_state": 8, "expand": 2, "conv_kernel": 4} | {
        "proj_bias": False, "conv_bias": True
    }  # fmt: skip
    out = zoo.to_hf(zoo.build(fields), tmp_path / "out", architecture="MambaForCausalLM")
    assert json.loads((out / "config.json").read_text())["time_step_rank"] == 2  # ceil(32 / 16)
    falcon = zoo.build({**fields, "attention": {**fields["attention"], "bcdt_norm": True}})
    with pytest.raises(zoo.InteropError, match="bcdt_norm"):
        zoo.to_hf(falcon, tmp_path / "no", architecture="MambaForCausalLM")
    out = zoo.to_hf(falcon, tmp_path / "falcon", architecture="FalconMambaForCausalLM")
    assert json.loads((out / "config.json").read_text())["mixer_rms_eps"] == 1e-6

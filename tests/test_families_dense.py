"""zoo-modern's parts for the dense families of 2025 (activations ``relu2`` and ``xielu``,
norms ``layernorm_plain`` and ``rmsnorm_plain``, placement ``sandwich_scaled``, qknorm's
``qk_norm_after`` and ``qk_norm_plain``) against transformers' own modules, and what their
converters refuse. Parity of the families is tests/test_families.py's (cases in
tests/family_cases/dense.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import zoo
from zoo.nn.attention import AttentionContext

transformers = pytest.importorskip("transformers")
pytest.importorskip("zoo_modern")
from transformers.activations import ACT2CLS, ACT2FN  # noqa: E402

from zoo_modern.activations import XIELU, relu2  # noqa: E402
from zoo_modern.norms import PlainLayerNorm, PlainRMSNorm  # noqa: E402
from zoo_modern.placement import ScaledSandwichNorm  # noqa: E402
from zoo_modern.qknorm import QkNormAttention  # noqa: E402

X = torch.randn(3, 5, 16, generator=torch.Generator().manual_seed(0)) * 3


def test_relu2_is_transformers_relu_squared() -> None:
    torch.testing.assert_close(relu2()(X), ACT2FN["relu2"](X), rtol=0, atol=0)


def test_xielu_matches_transformers_at_its_start_and_with_its_slopes_moved() -> None:
    ours, theirs = XIELU(), ACT2CLS["xielu"](dtype=torch.float32)
    torch.testing.assert_close(ours(X), theirs(X), rtol=0, atol=1e-6)
    with torch.no_grad():
        for module in (ours, theirs):
            module.alpha_p.fill_(-0.7)
            module.alpha_n.fill_(1.3)
    torch.testing.assert_close(ours(X), theirs(X), rtol=0, atol=1e-6)
    assert not torch.allclose(ours(X), XIELU()(X), atol=1e-2)  # the slopes change the curve


def test_plain_norms_learn_nothing_and_normalise() -> None:
    assert not list(PlainLayerNorm(16).parameters()) and not list(PlainRMSNorm(16).parameters())
    torch.testing.assert_close(PlainLayerNorm(16)(X), torch.nn.functional.layer_norm(X, (16,)), rtol=0, atol=1e-6)
    torch.testing.assert_close(PlainRMSNorm(16)(X).pow(2).mean(-1), torch.ones(3, 5), rtol=0, atol=1e-4)


def test_sandwich_scaled_adds_a_scaled_normed_sublayer_output() -> None:
    place = ScaledSandwichNorm(torch.nn.LayerNorm(16), torch.nn.RMSNorm(16), residual_scale=0.25)
    sublayer = torch.nn.Linear(16, 16)
    expected = X + 0.25 * place.norm_out(sublayer(place.norm_in(X)))
    torch.testing.assert_close(place(X, sublayer), expected, rtol=0, atol=0)


class Tripling:
    """A position encoding that scales q and k by 3 (so a norm after it shows)."""

    def rotate(self, q: torch.Tensor, k: torch.Tensor, state: object) -> tuple[torch.Tensor, torch.Tensor]:
        return 3 * q, 3 * k

    def score_bias(self, n_heads: int, q_len: int, k_len: int) -> None:
        return None


@pytest.mark.parametrize("after", [True, False])
def test_qk_norm_after_normalises_the_rotated_heads(after: bool) -> None:
    """A norm after the rotation gives heads of unit RMS; before it, three times that."""
    attention = QkNormAttention(16, 2, qk_norm="head", qk_norm_after=after, qk_norm_plain=True).eval()
    seen: dict[str, torch.Tensor] = {}

    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ctx: AttentionContext) -> torch.Tensor:
        seen["q"], seen["k"] = q, k
        return v

    attention.attend = attend  # type: ignore[method-assign]
    attention(X, AttentionContext(encoding=Tripling()))  # type: ignore[arg-type]
    for t in (seen["q"], seen["k"]):
        rms = t.pow(2).mean(-1).sqrt()
        torch.testing.assert_close(rms, torch.full_like(rms, 1.0 if after else 3.0), rtol=0, atol=1e-3)


def test_qk_norm_after_over_the_whole_projection_is_refused() -> None:
    with pytest.raises(Exception, match="qk_norm_after"):
        zoo.build("gpt2-small", attention={"name": "qknorm", "qk_norm": "whole", "qk_norm_after": True}, device="meta")


@pytest.mark.parametrize(
    ("model_type", "setting", "value"),
    [
        ("olmo", "clip_qkv", 8.0),
        ("jais2", "mlp_bias", False),
        ("hyperclovax", "use_post_norm", False),
        ("olmo3", "rope_parameters", {"sliding_attention": {"rope_theta": 1e4}, "full_attention": {"rope_theta": 5e5}}),
        ("olmo3", "rope_scaling", {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 8192}),
    ],
)
def test_what_the_new_families_do_not_model_is_refused_by_name(
    tmp_path: Path, model_type: str, setting: str, value: object
) -> None:
    architecture = {c.model_type: c.architecture for c in zoo.default_registry().converters()}[model_type]
    sizes = {"hidden_size": 32, "intermediate_size": 40, "num_hidden_layers": 2, "num_attention_heads": 4}
    config = {"architectures": [architecture], "model_type": model_type, "vocab_size": 64, **sizes, setting: value}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(zoo.InteropError, match=setting):
        zoo.from_hf(tmp_path)

"""DeepSeek-V3's parts beyond the family harness (tests/family_cases/moe.py runs logits,
greedy decoding, export, hub and hook checks on it): the score-correction bias (a buffer
the harness's perturbation leaves at zero), group-limited sigmoid routing against its
definition token by token, multi-head latent attention's cache of the latent, both parts
swapped into GPT-2 and trained, and what the converter refuses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from family_cases.moe import DEEPSEEK

import zoo
from helpers import perturbed_transformers_model

transformers = pytest.importorskip("transformers")
pytest.importorskip("zoo_modern")

FIELDS = {**DEEPSEEK, "q_lora_rank": 12, "first_k_dense_replace": 1, "n_group": 4, "topk_group": 2, "vocab_size": 97}
TINY: dict[str, Any] = {"vocab_size": 97, "max_seq_len": 32, "d_model": 32, "n_layers": 2, "n_heads": 4}
GROUPED = {"name": "moe", "n_experts": 8, "top_k": 3, "hidden": 16, "scoring": "sigmoid", "score_bias": True}
GROUPED |= {"n_groups": 4, "top_groups": 2, "routed_scale": 2.5, "shared_hidden": 16, "shared_gate": False}


def reference_with_score_bias(tmp_path: Path) -> tuple[Any, Path]:
    """A tiny DeepSeek-V3 whose e_score_correction_bias is large enough to change choices, saved."""
    hf = perturbed_transformers_model("DeepseekV3Config", "DeepseekV3ForCausalLM", FIELDS)
    with torch.no_grad():
        for name, buffer in hf.named_buffers():
            if name.endswith("e_score_correction_bias"):
                buffer.copy_(torch.randn(buffer.shape, generator=torch.Generator().manual_seed(5)))
    hf.save_pretrained(tmp_path / "hf")
    return hf, tmp_path / "hf"


def test_the_score_correction_bias_chooses_experts_as_transformers_does(tmp_path: Path) -> None:
    hf, folder = reference_with_score_bias(tmp_path)
    model = zoo.from_hf(folder)
    bias = model.blocks[1].mlp.score_bias.bias
    assert bias.abs().min() > 0 and not bias.requires_grad
    idx = torch.randint(0, 97, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(model(idx), hf(idx).logits, atol=1e-4, rtol=0)
        ours = model.generate(idx[:, :6], 6)
        theirs = hf.generate(idx[:, :6], max_new_tokens=6, min_new_tokens=6, do_sample=False)
    assert torch.equal(ours, theirs)
    out = zoo.to_hf(model, tmp_path / "out")  # the bias is written back under transformers' name
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    torch.testing.assert_close(reloaded.model.layers[1].mlp.gate.e_score_correction_bias, bias)


def routed_by_definition(block: Any, token: torch.Tensor) -> tuple[set[int], dict[int, float]]:
    """One token's experts and weights, written out: sigmoid scores; a group's worth is the
    sum of its group_by best biased scores; the top_k biased scores among the best groups'
    experts; weights the unbiased scores, renormalised, times routed_scale."""
    scores = torch.sigmoid(block.router(token).float())
    choice = scores + block.score_bias.bias
    per_group = len(scores) // block.n_groups
    worth = [
        choice[g * per_group : (g + 1) * per_group].topk(block.group_by).values.sum() for g in range(block.n_groups)
    ]
    groups = sorted(range(block.n_groups), key=lambda g: -float(worth[g]))[: block.top_groups]
    allowed = [e for g in groups for e in range(g * per_group, (g + 1) * per_group)]
    chosen = sorted(allowed, key=lambda e: -float(choice[e]))[: block.top_k]
    total = float(sum(scores[e] for e in chosen))
    return set(chosen), {e: float(scores[e]) / total * block.routed_scale for e in chosen}


def test_group_limited_sigmoid_routing_matches_its_definition_token_by_token() -> None:
    torch.manual_seed(0)
    block = zoo.build("llama-style-small", **TINY, mlp=GROUPED).blocks[0].mlp.eval()
    with torch.no_grad():
        block.score_bias.bias.copy_(torch.randn(8, generator=torch.Generator().manual_seed(2)) * 0.3)
        x = torch.randn(16, TINY["d_model"], generator=torch.Generator().manual_seed(3))
        weights, chosen = block.route(torch.sigmoid(block.router(x).float()))
        for token, w, c in zip(x, weights, chosen, strict=True):
            experts, expected = routed_by_definition(block, token)
            assert set(c.tolist()) == experts
            for e, value in zip(c.tolist(), w.tolist(), strict=True):
                assert value == pytest.approx(expected[e], rel=1e-5)
        flat_weights = weights.to(x.dtype)
        torch.testing.assert_close(block.dense(x, flat_weights, chosen), block.dispatch(x, flat_weights, chosen))


def test_the_cache_holds_the_latent_not_every_heads_keys(tmp_path: Path) -> None:
    _, folder = reference_with_score_bias(tmp_path)
    model = zoo.from_hf(folder)
    cache = model.new_cache()
    idx = torch.randint(0, 97, (2, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = model(idx)
        steps = [model(idx[:, :5], cache=cache), *(model(idx[:, i : i + 1], cache=cache) for i in range(5, 9))]
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=1e-5, atol=1e-5)
    layer = cache[0]
    assert layer.keys is not None and layer.values is not None
    assert layer.keys[:, :, : layer.stored].shape == (2, 1, 9, FIELDS["kv_lora_rank"])
    assert layer.values[:, :, : layer.stored].shape == (2, 1, 9, FIELDS["qk_rope_head_dim"])


@pytest.mark.parametrize(
    "swap",
    [{"attention": {"name": "mla", "q_lora_rank": 8, "kv_lora_rank": 12}}, {"mlp": GROUPED}],
    ids=["mla", "grouped-moe"],
)
def test_deepseeks_parts_swap_into_gpt2_and_train(swap: dict[str, Any]) -> None:
    torch.manual_seed(0)
    model = zoo.build("gpt2-small", **TINY, **swap).train()
    opt = torch.optim.AdamW(model.parameters(), 3e-3)
    x = torch.randint(0, 97, (4, 16), generator=torch.Generator().manual_seed(1))
    losses = []
    for _ in range(25):
        loss = torch.nn.functional.cross_entropy(model(x[:, :-1]).flatten(0, 1), x[:, 1:].flatten())
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < 0.7 * losses[0]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"rope_parameters": {"rope_type": "longrope", "factor": 4.0, "rope_theta": 10000.0}}, "rope_type"),
        ({"quantization_config": {"quant_method": "fp8", "fmt": "e4m3"}}, "quantization_config .*'fp8'.*bf16"),
        ({"moe_layer_freq": 2}, "moe_layer_freq"),
        ({"scoring_func": "softmax"}, "scoring_func"),
        ({"topk_method": "greedy"}, "topk_method"),
        ({"n_shared_experts": 0}, "n_shared_experts"),
        ({"attention_bias": True}, "attention_bias"),
        ({"head_dim": 5}, "head_dim"),
    ],
)
def test_the_converter_refuses_what_it_would_compute_differently(
    change: dict[str, Any], field: str, tmp_path: Path
) -> None:
    config = transformers.DeepseekV3Config(**FIELDS).to_dict()
    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({**config, **change, "architectures": ["DeepseekV3ForCausalLM"]}))
    with pytest.raises(zoo.InteropError, match=field):
        zoo.from_hf(folder)


def test_export_refuses_routing_deepseek_v3_cannot_state(tmp_path: Path) -> None:
    _, folder = reference_with_score_bias(tmp_path)
    config = zoo.from_hf(folder).config.model_dump(mode="json")
    config["mlp"] = {**config["mlp"], "scoring": "softmax"}
    with pytest.raises(zoo.InteropError, match="scoring"):
        zoo.to_hf(zoo.build(config), tmp_path / "out", architecture="DeepseekV3ForCausalLM")

"""Hooks, patching and the probe refuse what they cannot use (issue 29, item 5), with a
``HookError`` (or ``InputError``) that says what to pass: a hook's return of another
shape, dtype or device; hooks, point names and patch metrics of the wrong kind; a
probe of a frozen model. A refusal leaves the model as it was: no hook stays set.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import Tensor

from helpers import tiny
from zoo import HookError, InputError
from zoo.nn.hooks import hooked, run_with_cache
from zoo.nn.patching import patch
from zoo.probe import probe

POINT = "blocks.0.hook_resid_pre"
TOKENS = torch.tensor([[1, 2, 3, 4]])


@pytest.fixture(scope="module")
def model() -> Any:
    return tiny()


def _unhooked(model: Any) -> None:
    """The model after a refusal: no hook state left, the forward the plain one."""
    assert model.hook_state is None
    with torch.no_grad():
        torch.testing.assert_close(model(TOKENS), tiny()(TOKENS))


@pytest.mark.parametrize(
    ("returns", "match"),
    [(lambda a: a.double(), r"returned a torch.float64 tensor for a torch.float32 activation.*out.to\(activation.dtype\)"),
     (lambda a: a.half(), "returned a torch.float16 tensor"),
     (lambda a: a.long(), "returned a torch.int64 tensor"),
     (lambda a: a.to("meta"), r"returned a tensor on meta for an activation on cpu.*out.to\(activation.device\)"),
     (lambda a: a[:, :2], r"returned \(1, 2, [0-9, ]+\); .*its shape \(1, 4, "),
     (lambda a: a.tolist(), "returned list; return None to only read the activation")],
)  # fmt: skip
@pytest.mark.parametrize("point", [POINT, "blocks.1.attn.hook_z", "hook_logits"])
def test_a_hook_must_return_a_tensor_like_its_activation(
    model: Any, returns: Callable[[Tensor], Any], match: str, point: str
) -> None:
    with pytest.raises(HookError, match=match), hooked(model, {point: lambda a, name: returns(a)}):
        model(TOKENS)
    _unhooked(model)


@pytest.mark.parametrize(
    ("fns", "match"),
    [({POINT: 5}, f"the hook for '{POINT}' is int 5: give a function fn\\(activation, name\\)"),
     ({POINT: "print"}, "is str 'print'"),
     ({POINT: None}, "is NoneType None"),
     ({POINT: [print, 3]}, r"a hook for .* is int 3, not a function"),
     ({POINT: lambda activation: None}, r"cannot be called as fn\(activation, name\)"),
     ({POINT: lambda a, b, c: None}, r"cannot be called as fn\(activation, name\)"),
     ([POINT], "hooked takes a mapping of point name to hook"),
     (None, "got NoneType")],
)  # fmt: skip
def test_hooks_that_are_not_functions_of_activation_and_name_are_refused_before_any_is_set(
    model: Any, fns: Any, match: str
) -> None:
    with pytest.raises(HookError, match=match), hooked(model, fns):
        pytest.fail("the block ran")
    _unhooked(model)


@pytest.mark.parametrize(
    ("names", "match"),
    [(5, "names picks hook points: None .* got int 5"), (b"hook_logits", "got bytes"),
     ([None], "hook point names are str, got NoneType None"), ([POINT, 3], "got int 3")],
)  # fmt: skip
def test_names_of_the_wrong_kind_are_refused(model: Any, names: Any, match: str) -> None:
    with pytest.raises(HookError, match=match):
        run_with_cache(model, TOKENS, names=names)
    _unhooked(model)


@pytest.mark.parametrize(
    ("metric", "match"),
    [(5, "metric must be a function of the model's output .* got int 5"),
     (lambda logits: logits[0, -1], r"returned a tensor of shape \(97,\) \(torch.float32\) on the clean run"),
     (lambda logits: "high", "returned str 'high'"),
     (lambda logits: None, "returned NoneType None"),
     (lambda logits: bool(logits.sum() > 0), "returned bool"),
     (lambda logits: logits.sum() > 0, r"returned a tensor of shape \(\) \(torch.bool\)"),
     (lambda logits: float("nan"), "returned nan on the clean run; .*make the metric finite"),
     (lambda logits: logits[0, -1, 3] * float("inf"), "returned -?inf")],
)  # fmt: skip
def test_a_patch_metric_must_return_one_finite_number(model: Any, metric: Any, match: str) -> None:
    with pytest.raises(HookError, match=match):
        patch(model, TOKENS, TOKENS.flip(-1), metric)
    _unhooked(model)


def test_a_metric_that_fails_only_on_a_patched_run_names_the_run(model: Any) -> None:
    calls: list[int] = []

    def metric(logits: Tensor) -> Any:
        calls.append(1)
        return logits[0, -1, 3] if len(calls) < 3 else logits[0, -1]

    with pytest.raises(HookError, match=r"on the run patched at 'blocks.0.hook_resid_pre'"):
        patch(model, TOKENS, TOKENS.flip(-1), metric)
    _unhooked(model)


def test_clean_and_corrupted_inputs_of_other_shapes_are_refused_before_running(model: Any) -> None:
    with pytest.raises(HookError, match=r"same shapes, got \[\(1, 4\)\] and \[\(1, 3\)\]"):
        patch(model, TOKENS, TOKENS[:, :3], lambda logits: logits[0, -1, 3])
    result = patch(model, TOKENS, TOKENS.flip(-1), lambda logits: logits[0, -1, 3])  # one-element tensors are fine
    assert result.recovered()[f"blocks.{len(model.blocks) - 1}.hook_resid_post"] == pytest.approx(1.0)


def test_probe_refuses_a_frozen_model_and_names_the_frozen_part_of_another() -> None:
    frozen = tiny().requires_grad_(False)
    with pytest.raises(InputError, match=r"every parameter has requires_grad=False .* model.requires_grad_\(True\)"):
        probe(frozen, TOKENS)
    assert not any(p.requires_grad for p in frozen.parameters())  # left as it was
    partly = tiny()
    partly.blocks[0].requires_grad_(False)
    result = probe(partly, TOKENS)
    assert result.grad_norm["attention"][0] == 0.0 and result.grad_norm["attention"][1] > 0
    assert any("frozen weight tensor(s)" in note and "blocks.0." in note for note in result.notes)
    assert not any("frozen" in note for note in probe(tiny(), TOKENS).notes)


def test_probe_refuses_inference_mode_and_a_refused_model_keeps_its_mode() -> None:
    """Under torch.inference_mode() there are no gradients to measure (no_grad is fine: the
    probe turns them on); a refusal leaves a training model in training mode."""
    model = tiny().train()
    with torch.inference_mode(), pytest.raises(InputError, match=r"torch.inference_mode\(\) turns off"):
        probe(model, TOKENS)
    assert model.training
    with pytest.raises(InputError, match="a frozen model"):
        probe(model.requires_grad_(False), TOKENS)
    assert model.training
    with torch.no_grad():
        assert probe(model.requires_grad_(True), TOKENS).grad_norm["attention"][0] > 0
    assert model.training


@pytest.mark.parametrize(
    ("tokens", "targets", "match"),
    [(TOKENS[:, :1], None, r"needs at least 2 tokens per row \(got 1\); give more tokens, or targets="),
     (TOKENS.float(), None, "tokens must be an integer tensor"),
     (TOKENS.tolist(), None, "tokens must be a tensor, got list"),
     (TOKENS + 100, None, r"tokens: token id 104 is outside the vocabulary \[0, 97\)"),
     (TOKENS, TOKENS[:, :2], r"targets must be integer token ids of the shape of tokens \(1, 4\).*shape \(1, 2\)"),
     (TOKENS, TOKENS.float(), "got torch.float32"),
     (TOKENS, TOKENS.tolist(), "targets must be a tensor or None, got list"),
     (TOKENS, TOKENS + 300, "targets: token id 304 is outside the vocabulary")],
)  # fmt: skip
def test_probe_refuses_tokens_and_targets_it_cannot_score(tokens: Any, targets: Any, match: str) -> None:
    with pytest.raises(InputError, match=match):
        probe(tiny(), tokens, targets=targets)

"""zoo.summary.FlopCounter: the FLOPs torch's FlopCounterMode counts, op by op, without
importing torch._dynamo (so `zoo info` starts quickly); and the results it makes for ops
whose meta kernels are Python references match torch's own."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

import zoo
from helpers import TINY
from zoo.summary import FlopCounter, _meta_result, example_inputs, meta_model, summarize

PRESETS = zoo.list_models()
COMPONENTS = [(c.kind, c.name) for c in zoo.components() if c.kind != "init"]


def torch_counts(fn: Callable[[], object]) -> dict[str, int]:
    counter = FlopCounterMode(display=False)
    with counter:
        fn()
    return {str(op): int(n) for op, n in counter.get_flop_counts().get("Global", {}).items() if n}


def our_counts(fn: Callable[[], object]) -> dict[str, int]:
    counter = FlopCounter()
    with counter:
        fn()
    assert counter.total == sum(counter.by_op.values())
    return {op: n for op, n in counter.by_op.items() if n}


def forward_of(config: zoo.ModelConfig, context: int) -> Callable[[], object]:
    model, _ = meta_model(config)
    inputs = example_inputs(config, context)

    def run() -> object:
        with sdpa_kernel(SDPBackend.MATH), torch.no_grad():
            return model.eval()(*inputs)

    return run


@pytest.mark.parametrize("name", PRESETS)
def test_every_preset_counts_what_flop_counter_mode_counts(name: str) -> None:
    config = zoo.get_config(name)
    run = forward_of(config, 16)
    expected = torch_counts(run)
    assert expected and our_counts(run) == expected
    assert summarize(name, context=16).total_flops_per_token * 16 == sum(expected.values())


@pytest.mark.parametrize(("kind", "name"), COMPONENTS, ids=[f"{k}={n}" for k, n in COMPONENTS])
def test_every_component_counts_what_flop_counter_mode_counts(kind: str, name: str) -> None:
    config = zoo.get_config("gpt2-small", **{**TINY, kind: name})
    run = forward_of(config, 12)
    expected = torch_counts(run)
    assert expected and our_counts(run) == expected


META = {"device": "meta"}


@pytest.mark.parametrize(
    "case",
    [
        "mm",
        "addmm",
        "bmm",
        "baddbmm",
        "conv1d",
        "conv2d",
        "sdpa",
        "sdpa-math",
    ],
)
def test_each_counted_op_matches_flop_counter_mode(case: str) -> None:
    m = lambda *shape: torch.empty(*shape, **META)  # noqa: E731
    fns: dict[str, Callable[[], object]] = {
        "mm": lambda: m(7, 5) @ m(5, 3),
        "addmm": lambda: torch.addmm(m(3), m(7, 5), m(5, 3)),
        "bmm": lambda: torch.bmm(m(2, 7, 5), m(2, 5, 3)),
        "baddbmm": lambda: torch.baddbmm(m(2, 7, 3), m(2, 7, 5), m(2, 5, 3)),
        "conv1d": lambda: F.conv1d(m(2, 4, 16), m(6, 4, 3), padding=1),
        "conv2d": lambda: F.conv2d(m(2, 3, 9, 9), m(5, 3, 3, 3), stride=2),
        "sdpa": lambda: F.scaled_dot_product_attention(m(2, 4, 9, 8), m(2, 4, 9, 8), m(2, 4, 9, 8), is_causal=True),
    }

    def sdpa_math() -> object:
        with sdpa_kernel(SDPBackend.MATH):
            return fns["sdpa"]()

    fns["sdpa-math"] = sdpa_math
    expected = torch_counts(fns[case])
    assert expected and our_counts(fns[case]) == expected


def meta(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device="meta")


aten = torch.ops.aten
RESULT_CASES: dict[str, tuple[Any, tuple[Any, ...], dict[str, Any]]] = {
    "add broadcast": (aten.add.Tensor, (meta(2, 1, 4), meta(3, 1)), {}),
    "add broadcast 0-dim": (aten.add.Tensor, (meta(), meta(2, 3)), {}),
    "int + float promotes": (aten.add.Tensor, (meta(2, 3, dtype=torch.long), meta(3)), {}),
    "int * 0-dim float64 is float32": (aten.mul.Tensor, (meta(2, 3, dtype=torch.long), meta(dtype=torch.float64)), {}),
    "int / int is float": (aten.div.Tensor, (meta(4, dtype=torch.long), meta(4, dtype=torch.long)), {}),
    "comparison is bool": (aten.lt.Tensor, (meta(2, 5), meta(5)), {}),
    "where": (aten.where.self, (meta(5, 5, dtype=torch.bool), meta(5, 5, dtype=torch.bfloat16), meta()), {}),
    "pow scalar base": (aten.pow.Scalar, (10000.0, meta(8)), {}),
    "gelu tanh": (aten.gelu.default, (meta(2, 3, dtype=torch.bfloat16),), {"approximate": "tanh"}),
    "tril": (aten.tril.default, (meta(6, 6, dtype=torch.bool),), {}),
    "safe softmax": (aten._safe_softmax.default, (meta(2, 3, 4), -1), {}),
    "log softmax": (aten._log_softmax.default, (meta(2, 7), -1, False), {}),
    "layer norm": (aten.native_layer_norm.default, (meta(2, 3, 8), [8], meta(8), meta(8), 1e-5), {}),
    "layer norm bf16": (
        aten.native_layer_norm.default,
        (meta(2, 8, dtype=torch.bfloat16), [8], meta(8, dtype=torch.bfloat16), None, 1e-5),
        {},
    ),
    "cat": (aten.cat.default, ([meta(2, 3), meta(2, 5)], -1), {}),
    "stack": (aten.stack.default, ([meta(2, 3), meta(2, 3)], 1), {}),
    "mean keepdim": (aten.mean.dim, (meta(2, 3, 8), [-1], True), {}),
    "sum all": (aten.sum.dim_IntList, (meta(2, 3, dtype=torch.long), None), {}),
    "addmm": (aten.addmm.default, (meta(3), meta(7, 5), meta(5, 3)), {}),
    "embedding": (aten.embedding.default, (meta(50, 8), meta(2, 5, dtype=torch.long)), {}),
    "arange": (aten.arange.start, (3, 19), {"device": "meta"}),
    "topk": (aten.topk.default, (meta(6, 16), 3), {}),
    "topk of a middle dim": (aten.topk.default, (meta(6, 8, 4, dtype=torch.bfloat16), 2, 1), {}),
    "gather": (aten.gather.default, (meta(6, 16), 1, meta(6, 3, dtype=torch.long)), {}),
}


@pytest.mark.parametrize("case", list(RESULT_CASES))
def test_results_made_without_python_meta_kernels_equal_torchs(case: str) -> None:
    func, args, kwargs = RESULT_CASES[case]
    ours, theirs = _meta_result(func, args, kwargs), func(*args, **kwargs)
    assert ours is not None, f"{case}: not handled"
    pairs = zip(ours, theirs) if isinstance(theirs, tuple) else [(ours, theirs)]
    for a, b in pairs:
        assert (a.shape, a.dtype, a.device) == (b.shape, b.dtype, b.device), case


def test_in_place_ops_return_their_first_argument() -> None:
    x = meta(2, 3)
    assert _meta_result(aten.add_.Scalar, (x, 1.0), {}) is x


def test_zoo_info_and_every_preset_summary_do_not_import_torch_dynamo() -> None:
    code = (
        "import sys\n"
        "from zoo.cli import main\n"
        "for name in ('gpt2-small', 'transformer-2017-base', 'mixtral-8x7b', 'qwen3-30b-a3b'):\n"
        "    assert main(['info', name]) == 0, name\n"
        "    assert 'torch._dynamo' not in sys.modules, f'zoo info {name} imported torch._dynamo'\n"
        "    assert 'sympy' not in sys.modules, f'zoo info {name} imported sympy'\n"
        "import zoo\n"
        "from zoo.summary import summarize\n"
        "for name in zoo.list_models():\n"
        "    summarize(name, context=16)\n"
        "    assert 'torch._dynamo' not in sys.modules, f'summarize({name!r}) imported torch._dynamo'\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "gpt2-small" in result.stdout and "transformer-2017-base" in result.stdout

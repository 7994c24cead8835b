"""What only a CUDA GPU can check: bf16 autocast, torch.compile, flash attention through
SDPA, decoding, the training loop (bf16, compiled, MFU), checkpoints and `ablate --device
cuda`. Skipped without CUDA; `zoo bench gpu` runs them (pytest -m cuda)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

import zoo
from helpers import TINY, tiny

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (run by `zoo bench gpu`)"),
]

CUDA = torch.device("cuda")
IDS = torch.randint(0, TINY["vocab_size"], (3, 40), generator=torch.Generator().manual_seed(0))


def test_the_model_on_cuda_computes_what_it_computes_on_the_cpu() -> None:
    model = tiny()
    expected = model(IDS)
    with torch.no_grad():
        got = model.to(CUDA)(IDS.to(CUDA)).cpu()
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


def test_bf16_autocast_stays_close_to_fp32() -> None:
    model = tiny().to(CUDA)
    ids = IDS.to(CUDA)
    with torch.no_grad():
        full = model(ids)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            low = model(ids)
    assert low.dtype == torch.bfloat16
    torch.testing.assert_close(low.float(), full, rtol=0.05, atol=0.05)


def test_compiled_fullgraph_equals_eager_on_cuda() -> None:
    model = tiny().to(CUDA)
    ids = IDS.to(CUDA)
    compiled = torch.compile(model, fullgraph=True)
    with torch.no_grad():
        torch.testing.assert_close(compiled(ids), model(ids), rtol=1e-4, atol=1e-4)


def test_flash_attention_through_sdpa_matches_the_math_kernel() -> None:
    model = zoo.build("gpt2-small", **{**TINY, "d_model": 64, "n_heads": 4}).eval().to(CUDA, torch.bfloat16)
    ids = IDS.to(CUDA)
    with torch.no_grad():
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):  # flash only: an error if it cannot run
            flash = model(ids)
        with sdpa_kernel(SDPBackend.MATH):
            math = model(ids)
    torch.testing.assert_close(flash.float(), math.float(), rtol=0.03, atol=0.03)


def test_decoding_on_cuda_gives_the_cpu_tokens() -> None:
    model = tiny()
    prompt = IDS[:2, :8]
    on_cpu = model.generate(prompt, 20)
    on_gpu = model.to(CUDA).generate(prompt.to(CUDA), 20)
    assert on_gpu.device.type == "cuda" and torch.equal(on_gpu.cpu(), on_cpu)


def test_the_training_loop_on_cuda_bf16_compiled_learns_and_reports_mfu() -> None:
    from zoo.training import StepReport, TrainSettings, World, run_loop, tokens_data

    torch.manual_seed(0)
    model = zoo.build("gpt2-small", **TINY, device=CUDA)
    tokens = torch.arange(4000) % 50 % TINY["vocab_size"]  # a repeating pattern: learnable
    settings = TrainSettings(
        steps=30, batch_size=8, seq_len=32, lr=3e-3, eval_every=30, eval_batches=1, dtype="bf16", compile=True
    )
    reports: list[StepReport] = []
    run_loop(model, tokens_data(tokens, tokens[:512]), settings, world=World(0, 1, 0, CUDA), on_step=reports.append)
    assert reports[-1].loss < reports[0].loss * 0.7
    name = torch.cuda.get_device_name(CUDA)
    from zoo.training.metrics import PEAK_TFLOPS

    if any(key in name for key in PEAK_TFLOPS):
        assert all(r.mfu is not None and 0 < r.mfu < 1 for r in reports)


def test_a_checkpoint_saved_from_cuda_loads_the_same(tmp_path: Path) -> None:
    model = tiny().to(CUDA)
    zoo.save(model, tmp_path / "m.safetensors")
    again = zoo.load(tmp_path / "m.safetensors")
    with torch.no_grad():
        torch.testing.assert_close(again(IDS), model(IDS.to(CUDA)).cpu())


def test_ablate_runs_on_cuda(tmp_path: Path) -> None:
    from zoo.cli import main

    status = main(
        [
            "ablate",
            "--from",
            "transformer-2017",
            "--to",
            "gpt2-small",
            "--set",
            "d_model=32",
            "--set",
            "n_layers=1",
            "--set",
            "n_heads=4",
            "--seq-len",
            "16",
            "--steps",
            "6",
            "--batch-size",
            "4",
            "--eval-every",
            "3",
            "--seeds",
            "1",
            "--workers",
            "1",
            "--device",
            "cuda",
            "--out",
            str(tmp_path / "ablate"),
        ]
    )
    assert status == 0
    assert (tmp_path / "ablate" / "report.md").is_file()

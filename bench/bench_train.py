"""Training step throughput: zoo's training loop vs a plain transformers GPT-2 loop.

The same model shape, batch and optimiser on both sides: AdamW, gradient clipping, one
optimizer step per batch of ``--batch`` x ``--seq`` tokens. zoo's number is the loop's
own per-step tokens/s (``zoo.training.run_loop``, the code ``zoo train`` runs), median over
the timed steps. Target on CPU: zoo >= 1.1x transformers. ``--device cuda`` runs
gpt2-small in bf16 with ``--compile`` and reports tokens/s and MFU (peak from a table
of known GPUs, or ``--peak-tflops``).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import torch

import zoo
from bench.common import setup, table
from zoo.training import TrainSettings, World, run_loop, tokens_data


def zoo_steps(args: argparse.Namespace, device: torch.device, data: object) -> tuple[float, float | None]:
    """Median tokens/s (and MFU) of zoo's loop over ``args.steps`` steps after warmup."""
    torch.manual_seed(0)
    model = zoo.build("gpt2-small", n_layers=args.layers, dropout=0.0, max_seq_len=max(args.seq, 64), device=device)
    settings = TrainSettings(
        steps=args.steps + 2,
        batch_size=args.batch,
        seq_len=args.seq,
        lr=1e-4,
        eval_every=args.steps + 2,
        eval_batches=1,
        dtype=args.dtype,
        compile=args.compile,
        peak_tflops=args.peak_tflops,
    )
    reports: list = []
    run_loop(model, data, settings, world=World(0, 1, 0, device), on_step=reports.append)  # type: ignore[arg-type]
    timed = reports[2:]  # the first steps warm up (and compile)
    mfu = [r.mfu for r in timed if r.mfu is not None]
    return statistics.median(r.tokens_per_s for r in timed), statistics.median(mfu) if mfu else None


def hf_steps(args: argparse.Namespace, device: torch.device, tokens: torch.Tensor) -> float:
    """Median tokens/s of a plain transformers GPT-2 training loop on the same batches."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(
        n_layer=args.layers, n_positions=max(args.seq, 64), resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0
    )
    model: Any = GPT2LMHeadModel(config)
    model.to(device).train()
    if args.compile:
        model = torch.compile(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1)
    generator = torch.Generator().manual_seed(0)
    low = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.dtype)
    speeds = []
    for step in range(args.steps + 2):
        start = time.perf_counter()
        starts = torch.randint(0, tokens.numel() - args.seq - 1, (args.batch,), generator=generator)
        windows = tokens[starts[:, None] + torch.arange(args.seq + 1)].to(device)
        with torch.autocast(device.type, dtype=low) if low else torch.autocast(device.type, enabled=False):
            loss = model(windows[:, :-1], labels=windows[:, :-1]).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        loss.item()  # wait for the step, as zoo's loop does when it reads the loss
        if step >= 2:
            speeds.append(args.batch * args.seq / (time.perf_counter() - start))
    return statistics.median(speeds)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    parser.add_argument("--batch", type=int, default=None, help="sequences per step (cpu 4, cuda 16)")
    parser.add_argument("--seq", type=int, default=None, help="tokens per sequence (cpu 128, cuda 1024)")
    parser.add_argument("--layers", type=int, default=None, help="gpt2-small's 12 by default; fewer on CPU is quicker")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per round (after 2 warmup steps)")
    parser.add_argument("--rounds", type=int, default=2, help="zoo and transformers alternate this many times")
    parser.add_argument("--dtype", choices=("fp32", "bf16", "fp16"), default=None, help="cpu fp32, cuda bf16")
    parser.add_argument("--compile", action="store_true", default=None, help="torch.compile (default on cuda)")
    parser.add_argument("--peak-tflops", type=float, default=None, help="for MFU when the GPU is not in the table")
    args = parser.parse_args(argv)
    cuda = args.device.startswith("cuda")
    args.batch = args.batch or (16 if cuda else 4)
    args.seq = args.seq or (1024 if cuda else 128)
    args.layers = args.layers or (12 if cuda else 4)
    args.dtype = args.dtype or ("bf16" if cuda else "fp32")
    args.compile = bool(args.compile if args.compile is not None else cuda)
    setup()
    device = torch.device(args.device)
    tokens = torch.randint(0, 50257, (1 << 20,), generator=torch.Generator().manual_seed(1))
    data = tokens_data(tokens, tokens[: 1 << 16])
    ours, theirs, mfus = [], [], []
    for _ in range(args.rounds):
        speed, mfu = zoo_steps(args, device, data)
        ours.append(speed)
        if mfu is not None:
            mfus.append(mfu)
        theirs.append(hf_steps(args, device, tokens))
    zoo_speed, hf_speed = statistics.median(ours), statistics.median(theirs)
    rows = [
        ("zoo train step", f"{zoo_speed:,.0f} tok/s", ""),
        ("transformers loop", f"{hf_speed:,.0f} tok/s", ""),
        ("speed ratio", f"{zoo_speed / hf_speed:.2f}x", "zoo vs transformers (target >= 1.1x on CPU)"),
    ]
    if mfus:
        rows.append(("zoo MFU", f"{statistics.median(mfus):.1%}", "model FLOPs (zoo.summary, x3 for training) / peak"))
    title = (
        f"gpt2-small ({args.layers} layers), {args.batch} x {args.seq} tokens per step, {args.dtype}"
        f"{', compiled' if args.compile else ''}, {args.device}, {torch.get_num_threads()} threads"
    )
    print(table(title, rows))


if __name__ == "__main__":
    main()

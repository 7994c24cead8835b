"""Training step throughput: zoo's training loop vs a nanoGPT loop and a plain transformers
GPT-2 loop.

The same model shape, batch and optimiser on every side: AdamW, gradient clipping, one
optimizer step per batch of ``--batch`` x ``--seq`` tokens; the nanoGPT side holds the zoo
model's own starting weights (``bench.nanogpt``). zoo's number is the loop's own per-step
tokens/s (``zoo.training.run_loop``, the code ``zoo train`` runs), median over the timed
steps; the sides alternate ``--rounds`` times. Each side's AdamW steps are timed inside
those same steps by torch's global optimizer hooks (``bench.common.optimizer_steps``):
their share of the step, and nanoGPT's AdamW time over the zoo's. Targets on CPU: zoo >=
0.98x nanoGPT (``--layers 12`` is GPT-2 Small whole), its AdamW step within 3% of
nanoGPT's, and >= 1.1x transformers. ``--device cuda`` runs gpt2-small in bf16 with
``--compile`` and reports tokens/s and MFU (peak from a table of known GPUs, or
``--peak-tflops``).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import torch

import zoo
from bench.common import optimizer_steps, setup, table
from bench.nanogpt import nanogpt_from
from zoo.training import TrainSettings, World, run_loop, tokens_data


def zoo_model(args: argparse.Namespace, device: torch.device) -> zoo.DecoderLM:
    """The zoo's gpt2-small at ``args``' depth, seeded: the nanoGPT side starts from its weights."""
    torch.manual_seed(0)
    model = zoo.build("gpt2-small", n_layers=args.layers, dropout=0.0, max_seq_len=max(args.seq, 64), device=device)
    assert isinstance(model, zoo.DecoderLM)
    return model


def zoo_steps(args: argparse.Namespace, device: torch.device, data: object) -> tuple[float, float | None, float]:
    """Median tokens/s (and MFU) of zoo's loop over ``args.steps`` steps after warmup, and
    the median seconds of its AdamW step."""
    model = zoo_model(args, device)
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
    reports: list[Any] = []
    with optimizer_steps() as seconds:
        run_loop(model, data, settings, world=World(0, 1, 0, device), on_step=reports.append)  # type: ignore[arg-type]
    timed = reports[2:]  # the first steps warm up (and compile)
    mfu = [r.mfu for r in timed if r.mfu is not None]
    (steps,) = seconds.values()  # the loop's one optimizer
    return (
        statistics.median(r.tokens_per_s for r in timed),
        statistics.median(mfu) if mfu else None,
        statistics.median(steps[2:]),
    )


def hf_model(args: argparse.Namespace) -> Any:
    """transformers' GPT2LMHeadModel of the same shape."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(
        n_layer=args.layers, n_positions=max(args.seq, 64), resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0
    )
    return GPT2LMHeadModel(config)


def hf_loss(model: Any, windows: torch.Tensor) -> torch.Tensor:
    loss: torch.Tensor = model(windows[:, :-1], labels=windows[:, :-1]).loss
    return loss


def nanogpt_loss(model: Any, windows: torch.Tensor) -> torch.Tensor:
    logits = model(windows[:, :-1])
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1), windows[:, 1:].flatten())


def peer_steps(
    args: argparse.Namespace, device: torch.device, tokens: torch.Tensor, model: Any, loss_of: Any
) -> tuple[float, float]:
    """Median tokens/s of a plain training loop of ``model`` (loss by ``loss_of``) on
    random windows of ``tokens``, and the median seconds of its AdamW step."""
    model.to(device).train()
    if args.compile:
        model = torch.compile(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1)
    generator = torch.Generator().manual_seed(0)
    low = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.dtype)
    speeds = []
    with optimizer_steps() as seconds:
        for step in range(args.steps + 2):
            start = time.perf_counter()
            starts = torch.randint(0, tokens.numel() - args.seq - 1, (args.batch,), generator=generator)
            windows = tokens[starts[:, None] + torch.arange(args.seq + 1)].to(device)
            with torch.autocast(device.type, dtype=low) if low else torch.autocast(device.type, enabled=False):
                loss = loss_of(model, windows)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            loss.item()  # wait for the step, as zoo's loop does when it reads the loss
            if step >= 2:
                speeds.append(args.batch * args.seq / (time.perf_counter() - start))
    return statistics.median(speeds), statistics.median(seconds[id(optimizer)][2:])


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
    speeds: dict[str, list[float]] = {"zoo": [], "nanogpt": [], "transformers": []}
    adamw: dict[str, list[float]] = {name: [] for name in speeds}
    mfus: list[float] = []
    for _ in range(args.rounds):  # the sides alternate, so a busy machine slows them alike
        tokens_per_s, mfu, seconds = zoo_steps(args, device, data)
        speeds["zoo"].append(tokens_per_s)
        adamw["zoo"].append(seconds)
        if mfu is not None:
            mfus.append(mfu)
        for name, model, loss_of in (
            ("nanogpt", nanogpt_from(zoo_model(args, torch.device("cpu"))), nanogpt_loss),
            ("transformers", hf_model(args), hf_loss),
        ):
            tokens_per_s, seconds = peer_steps(args, device, tokens, model, loss_of)
            speeds[name].append(tokens_per_s)
            adamw[name].append(seconds)
    speed = {name: statistics.median(values) for name, values in speeds.items()}
    step = {name: statistics.median(values) for name, values in adamw.items()}
    share = {name: step[name] * speed[name] / (args.batch * args.seq) for name in speed}  # AdamW s / step s
    rows = [(f"{name} loop", f"{speed[name]:,.0f} tok/s", f"AdamW {share[name]:.1%} of the step") for name in speed]
    rows += [
        ("speed ratio", f"{speed['zoo'] / speed['nanogpt']:.2f}x", "zoo vs nanoGPT (target >= 0.98x)"),
        ("AdamW step", f"{step['nanogpt'] / step['zoo']:.2f}x", "nanoGPT's time over the zoo's (target >= 0.97x)"),
        ("speed ratio", f"{speed['zoo'] / speed['transformers']:.2f}x", "zoo vs transformers (target >= 1.1x on CPU)"),
    ]
    title = (
        f"gpt2-small ({args.layers} layers), {args.batch} x {args.seq} tokens per step, {args.dtype}"
        f"{', compiled' if args.compile else ''}, {args.device}, {torch.get_num_threads()} threads"
    )
    print(table(title, rows))


if __name__ == "__main__":
    main()

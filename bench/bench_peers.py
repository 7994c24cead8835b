"""zoo beside its peers: transformers (GPT2LMHeadModel) and x-transformers (TransformerWrapper).

One run, CPU, fp32, the same threads for all; every model has gpt2-small's shape
(12 layers, d_model 768, 12 heads, d_ff 3072, vocabulary 50257, 1024 learned
positions, pre-norm LayerNorm, GELU, tied embedding, dropout 0.1) and returns full
logits (B, S, V). zoo holds the transformers model's weights (``zoo.from_hf``), so the
greedy decodes are compared token for token.

- forward: 1 x 256 tokens, inference mode;
- training step: 4 x 128 tokens, forward + cross-entropy + backward + AdamW step;
- greedy decode: 32-token prompt + 128 new tokens, zoo's inference engine (prepared
  once) vs transformers ``generate``; zoo's ``model.generate`` (preparing per call) too;
- forward as a fraction of the machine's matmul peak: one large square fp32 matmul
  timed in the same interleaved run, and of the model's own matmul shapes.

Targets (issue 10): forward >= 1.15x the faster peer; training step >= 1.15x the faster
peer; decode >= 1.5x transformers. Medians of interleaved runs (noise hits all alike).
"""

from __future__ import annotations

import argparse
import copy
import tempfile
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import zoo
from bench.bench_forward import linear_shapes
from bench.common import interleaved, matmul_suite, setup, table
from zoo.decoding import Engine, generate

VOCAB, D, LAYERS, HEADS, POSITIONS = 50257, 768, 12, 12, 1024


def peers() -> tuple[zoo.DecoderLM, nn.Module, nn.Module]:
    """zoo, transformers and x-transformers models of gpt2-small's shape; zoo and
    transformers share their weights."""
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.utils import logging as hf_logging
    from x_transformers import Decoder, TransformerWrapper

    hf_logging.disable_progress_bar()
    hf = GPT2LMHeadModel(GPT2Config(attn_implementation="sdpa"))
    with tempfile.TemporaryDirectory() as folder:
        hf.save_pretrained(folder)
        ours = zoo.from_hf(folder)
    x = TransformerWrapper(
        num_tokens=VOCAB,
        max_seq_len=POSITIONS,
        tie_embedding=True,
        emb_dropout=0.1,
        attn_layers=Decoder(dim=D, depth=LAYERS, heads=HEADS, attn_flash=True, attn_dropout=0.1, ff_dropout=0.1),
    )
    return ours, hf, x


def logits_of(name: str, model: nn.Module) -> Callable[[Tensor], Tensor]:
    """Full logits (B, S, V) from each model's own call."""
    if name == "transformers":
        return lambda idx: model(idx).logits
    return lambda idx: model(idx)


def on(fn: Callable[[Tensor], Tensor], idx: Tensor) -> Callable[[], Tensor]:
    return lambda: fn(idx)


def train_step(name: str, model: nn.Module, idx: Tensor, targets: Tensor) -> Callable[[], None]:
    logits = logits_of(name, model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step() -> None:
        model.train()
        out = logits(idx)
        loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), targets.reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step


def flops_forward(config: zoo.ModelConfig, seq: int) -> float:
    """Matmul FLOPs of one forward of one sequence: the linear layers and attention's
    two products (causal: half of the square)."""
    linear = sum(2 * m * k * n for m, k, n in linear_shapes(config, seq))
    attention = config.n_layers * 2 * 2 * seq * seq * config.d_model / 2
    return float(linear + attention)


def ratio_row(label: str, ours: float, theirs: float, target: float, peer: str) -> tuple[str, str, str]:
    ratio = theirs / ours
    verdict = "met" if ratio >= target else f"MISSED by {target / ratio - 1:.0%}"
    return (label, f"{ratio:.2f}x", f"zoo vs {peer} (target >= {target}x): {verdict}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7, help="interleaved runs of forward and training")
    parser.add_argument("--decode-repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--peak-size", type=int, default=2048, help="side of the square matmul for the peak")
    args = parser.parse_args(argv)
    setup(args.threads)
    ours, hf, xt = peers()
    models: dict[str, nn.Module] = {"zoo": ours, "transformers": hf, "x-transformers": xt}
    sizes = {name: sum(p.numel() for p in m.parameters()) for name, m in models.items()}

    # Forward, 1 x 256, beside one large matmul and the model's own matmul shapes.
    idx = torch.randint(0, VOCAB, (1, 256))
    n = args.peak_size
    a, b = torch.randn(n, n), torch.randn(n, n)
    suite, suite_flops = matmul_suite(linear_shapes(ours.config, 256))
    forward_fns: dict[str, Callable[[], object]] = {name: on(logits_of(name, m), idx) for name, m in models.items()}
    forward_fns["peak matmul"] = lambda: a @ b
    forward_fns["model matmuls"] = suite
    for m in models.values():
        m.eval()
    with torch.inference_mode():
        shapes = {name: tuple(logits_of(name, m)(idx).shape) for name, m in models.items()}
        forward = interleaved(forward_fns, repeats=args.repeats)
    assert len(set(shapes.values())) == 1, f"the models disagree on the logits' shape: {shapes}"
    peak = 2 * n**3 / forward["peak matmul"] / 1e9
    model_flops = flops_forward(ours.config, 256)
    achieved = model_flops / forward["zoo"] / 1e9
    roofline = suite_flops / forward["model matmuls"] / 1e9

    # Training step, 4 x 128: forward, loss, backward, AdamW.
    batch = torch.randint(0, VOCAB, (4, 129))
    # On copies: training changes the weights, and the decodes below compare zoo with transformers.
    steps = {name: train_step(name, copy.deepcopy(m), batch[:, :-1], batch[:, 1:]) for name, m in models.items()}
    training = interleaved(steps, repeats=max(3, args.repeats // 2))

    # Greedy decode: 32 + 128, zoo's engine (prepared once) vs transformers generate.
    from transformers import GenerationConfig

    for m in models.values():
        m.eval()
    prompt = torch.randint(0, VOCAB, (1, 32))
    greedy = GenerationConfig(max_new_tokens=128, do_sample=False, eos_token_id=None, pad_token_id=0)
    engine = Engine(ours)
    outputs: dict[str, Tensor] = {}

    def decode_engine() -> None:
        outputs["zoo"] = generate(engine, prompt, 128)

    def decode_model() -> None:
        outputs["zoo model.generate"] = ours.generate(prompt, 128)

    def decode_hf() -> None:
        with torch.inference_mode():
            outputs["transformers"] = hf.generate(prompt, generation_config=greedy)

    decode = interleaved(
        {"zoo": decode_engine, "transformers": decode_hf, "zoo model.generate": decode_model},
        repeats=args.decode_repeats,
    )
    same = torch.equal(outputs["zoo"], outputs["transformers"]) and torch.equal(
        outputs["zoo"], outputs["zoo model.generate"]
    )

    faster_forward = min(("transformers", "x-transformers"), key=forward.__getitem__)
    faster_training = min(("transformers", "x-transformers"), key=training.__getitem__)
    ms = lambda s: f"{s * 1e3:.1f} ms"  # noqa: E731
    rows = [
        (
            "parameters",
            f"{sizes['zoo'] / 1e6:.1f}M",
            f"transformers {sizes['transformers'] / 1e6:.1f}M, x-transformers {sizes['x-transformers'] / 1e6:.1f}M",
        ),
        ("forward zoo", ms(forward["zoo"]), "1 x 256, full logits"),
        ("forward transformers", ms(forward["transformers"]), ""),
        ("forward x-transformers", ms(forward["x-transformers"]), ""),
        ratio_row(
            "forward ratio", forward["zoo"], forward[faster_forward], 1.15, f"{faster_forward} (the faster peer)"
        ),
        ("machine matmul peak", f"{peak:.0f} GFLOP/s", f"one {n} x {n} fp32 matmul"),
        ("model matmul roofline", f"{roofline:.0f} GFLOP/s", "the model's own matmul shapes, back to back"),
        (
            "zoo forward achieved",
            f"{achieved:.0f} GFLOP/s",
            f"{achieved / peak:.0%} of the machine's peak, {achieved / roofline:.0%} of the roofline",
        ),
        ("train step zoo", ms(training["zoo"]), "4 x 128, forward + backward + AdamW"),
        ("train step transformers", ms(training["transformers"]), ""),
        ("train step x-transformers", ms(training["x-transformers"]), ""),
        ratio_row(
            "train step ratio", training["zoo"], training[faster_training], 1.15, f"{faster_training} (the faster peer)"
        ),
        (
            "decode zoo engine",
            f"{decode['zoo']:.2f} s",
            f"{decode['zoo'] / 128 * 1e3:.1f} ms/token, engine prepared once",
        ),
        ("decode zoo model.generate", f"{decode['zoo model.generate']:.2f} s", "preparing an engine per call"),
        (
            "decode transformers",
            f"{decode['transformers']:.2f} s",
            f"{decode['transformers'] / 128 * 1e3:.1f} ms/token",
        ),
        ratio_row("decode ratio", decode["zoo"], decode["transformers"], 1.5, "transformers generate"),
        ("same tokens", "yes" if same else "NO", "greedy outputs compared token for token"),
    ]
    print(table(f"gpt2-small, zoo vs peers, fp32 CPU, {torch.get_num_threads()} threads", rows))


if __name__ == "__main__":
    main()

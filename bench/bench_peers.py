"""zoo beside its peers: transformers (GPT2LMHeadModel) and x-transformers (TransformerWrapper).

One run, CPU, fp32, the same threads for all; every model has gpt2-small's shape
(12 layers, d_model 768, 12 heads, d_ff 3072, vocabulary 50257, 1024 learned
positions, pre-norm LayerNorm, GELU, tied embedding, dropout 0.1) and returns full
logits (B, S, V). zoo holds the transformers model's weights (``zoo.from_hf``), so the
greedy decodes are compared token for token.

- forward: 1 x 256 tokens, inference mode;
- training step: 4 x 128 tokens, forward + cross-entropy + backward + AdamW step; and
  AdamW's step alone over the zoo's, a nanoGPT's (the zoo's weights) and transformers' parameters;
- greedy decode: 32-token prompt + 64 and + 128 new tokens, zoo's inference engine
  (prepared once), zoo's ``model.generate`` (what users call: its weight layouts kept
  between calls) and its first call on a model (layouts made in the call) vs
  transformers ``generate``, tokens compared;
- the machine's limits, measured in the same run: forward and training step as
  fractions of one large square fp32 matmul's FLOP/s (timed interleaved with them; the
  step's FLOPs are 3x the forward's matmuls), and decode as a fraction of the
  memory-bandwidth floor: the bytes of weights a token reads over the read bandwidth
  of a large tensor sum (timed interleaved with the decodes), beside the engine's own
  products for one token run back to back (the decode step's matmul roofline).

Targets: forward and training step >= 1.15x the faster peer; decode >= 1.5x
transformers, ``model.generate`` >= 1.2x transformers and within 10% of the prepared
engine; decode >= 95% of the bandwidth floor, forward >= 85% and training step >= 85%
of the matmul peak. Medians of interleaved runs (noise hits all alike).
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
from bench.nanogpt import nanogpt_from
from zoo.decoding import Engine, generate, layouts

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


def adamw_step(name: str, model: nn.Module, idx: Tensor, targets: Tensor) -> Callable[[], object]:
    """``AdamW.step`` (default settings) over ``model``'s parameters alone, its gradients
    filled by one backward: the optimizer's share of a training step, timed on its own."""
    out = logits_of(name, model)(idx)
    F.cross_entropy(out.reshape(-1, out.shape[-1]), targets.reshape(-1)).backward()
    return torch.optim.AdamW(model.parameters(), lr=1e-4).step


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


def fraction_row(label: str, fraction: float, goal: float, of: str) -> tuple[str, str, str]:
    verdict = "met" if fraction >= goal else f"MISSED by {goal - fraction:.0%} points"
    return (label, f"{fraction:.0%}", f"of {of} (goal >= {goal:.0%}): {verdict}")


def weight_bytes_per_token(model: nn.Module) -> int:
    """Bytes one decode step reads in weights: every parameter once (a tied head reads
    the embedding's matrix whole), less the tables it reads one row of (positions)."""
    seen: dict[int, nn.Parameter] = {id(p): p for p in model.parameters()}
    tables = [m.weight for m in model.modules() if isinstance(m, nn.Embedding)]
    head = getattr(model, "head", None)
    read_whole = {id(head.weight)} if head is not None else set()
    skipped = sum(t.numel() * t.element_size() for t in tables if id(t) not in read_whole)
    return sum(p.numel() * p.element_size() for p in seen.values()) - skipped


def decode_matmuls(engine: Engine) -> Callable[[], None]:
    """The products of one decode step alone: each of the engine's prepared linear layers
    (its weight layouts, its head) on one vector, back to back."""
    from zoo.decoding import PreparedLinear

    layers = [m for m in engine.model.modules() if isinstance(m, PreparedLinear)]
    inputs = [torch.randn(1, 1, m.weight.shape[1]) for m in layers]

    def run() -> None:
        with torch.inference_mode():
            for layer, x in zip(layers, inputs, strict=True):
                layer(x)

    return run


def read_bandwidth_probe(megabytes: int = 512) -> tuple[Callable[[], object], int]:
    """A function that reads a tensor far larger than the caches once, and its bytes."""
    big = torch.ones(megabytes * (1 << 20) // 4)
    return (lambda: big.sum()), big.numel() * 4


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7, help="interleaved forwards")
    parser.add_argument(
        "--train-repeats", type=int, default=7, help="interleaved training steps (3 once read 0.78x for a 1.04x)"
    )
    parser.add_argument("--decode-repeats", type=int, default=5)
    parser.add_argument(
        "--new", type=lambda v: [int(x) for x in v.split(",")], default=[64, 128], help="new tokens, e.g. 64,128"
    )
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
    steps: dict[str, Callable[[], object]] = {
        name: train_step(name, copy.deepcopy(m), batch[:, :-1], batch[:, 1:]) for name, m in models.items()
    }
    steps["peak matmul"] = lambda: a @ b
    training = interleaved(steps, repeats=args.train_repeats)
    del steps  # the training copies: free them before the decodes
    # The optimizer alone, over each side's 148 tensors of the same shapes (nanoGPT's holding the zoo's weights).
    optimizers = {
        name: adamw_step(name, copy.deepcopy(m), batch[:, :-1], batch[:, 1:])
        for name, m in {"zoo": ours, "nanogpt": nanogpt_from(ours), "transformers": hf}.items()
    }
    adamw = interleaved(optimizers, repeats=args.train_repeats)
    del optimizers
    train_peak = 2 * n**3 / training["peak matmul"] / 1e9
    train_achieved = 3 * 4 * flops_forward(ours.config, 128) / training["zoo"] / 1e9

    # Greedy decode: 32 + 64 and 32 + 128, zoo (engine prepared once; model.generate, its
    # layouts kept; model.generate's first call) vs transformers generate, beside a read
    # of a large tensor for the bandwidth.
    from transformers import GenerationConfig

    for m in models.values():
        m.eval()
    prompt = torch.randint(0, VOCAB, (1, 32))
    engine = Engine(ours)
    probe, probe_bytes = read_bandwidth_probe()
    outputs: dict[tuple[str, int], Tensor] = {}

    def decoder(label: str, new: int) -> Callable[[], None]:
        greedy = GenerationConfig(max_new_tokens=new, do_sample=False, eos_token_id=None, pad_token_id=0)

        def run() -> None:
            if label == "zoo engine":
                outputs[label, new] = generate(engine, prompt, new)
            elif label == "zoo model.generate":
                outputs[label, new] = ours.generate(prompt, new)
            elif label == "zoo first call":
                layouts.release(ours)  # as on a model never decoded before
                outputs[label, new] = ours.generate(prompt, new)
            else:
                with torch.inference_mode():
                    outputs[label, new] = hf.generate(prompt, generation_config=greedy)

        return run

    labels = ("zoo engine", "zoo model.generate", "zoo first call", "transformers")
    decode_fns: dict[str, Callable[[], object]] = {
        f"{label} +{new}": decoder(label, new) for new in args.new for label in labels
    }
    decode_fns["bandwidth"] = probe
    decode_fns["step matmuls"] = decode_matmuls(engine)
    decode = interleaved(decode_fns, repeats=args.decode_repeats)
    same = all(torch.equal(outputs[label, new], outputs["transformers", new]) for new in args.new for label in labels)
    bandwidth = probe_bytes / decode["bandwidth"]  # bytes/s
    floor_s = weight_bytes_per_token(ours) / bandwidth  # seconds per token
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
        ("AdamW step zoo", ms(adamw["zoo"]), f"{adamw['zoo'] / training['zoo']:.0%} of its train step"),
        ("AdamW step nanogpt", ms(adamw["nanogpt"]), f"{adamw['nanogpt'] / adamw['zoo']:.2f}x the zoo's time"),
        (
            "AdamW step transformers",
            ms(adamw["transformers"]),
            f"{adamw['transformers'] / adamw['zoo']:.2f}x the zoo's time",
        ),
        ("train step peak matmul", f"{train_peak:.0f} GFLOP/s", f"one {n} x {n} fp32 matmul, timed beside the steps"),
        ("zoo train step achieved", f"{train_achieved:.0f} GFLOP/s", "3x the forward's matmul FLOPs per step"),
        fraction_row("train step / peak", train_achieved / train_peak, 0.85, "the measured matmul peak"),
        fraction_row("forward / peak", achieved / peak, 0.85, "the measured matmul peak"),
        (
            "read bandwidth",
            f"{bandwidth / 1e9:.1f} GB/s",
            f"sum of a {probe_bytes >> 20} MiB tensor, beside the decodes",
        ),
        (
            "decode floor",
            f"{floor_s * 1e3:.1f} ms/token",
            f"{weight_bytes_per_token(ours) / 1e6:.0f} MB of weights per token / read bandwidth",
        ),
    ]
    for new in args.new:
        per = lambda label, new=new: decode[f"{label} +{new}"] / new  # noqa: E731
        rows += [
            ("decode zoo engine" + f" +{new}", f"{per('zoo engine') * 1e3:.1f} ms/token", "engine prepared once"),
            (
                f"decode zoo model.generate +{new}",
                f"{per('zoo model.generate') * 1e3:.1f} ms/token",
                f"{per('zoo model.generate') / per('zoo engine'):.2f}x the engine's time (goal <= 1.10x)",
            ),
            (
                f"decode zoo first call +{new}",
                f"{per('zoo first call') * 1e3:.1f} ms/token",
                f"{per('zoo first call') / per('zoo engine'):.2f}x the engine's time; layouts made in the call",
            ),
            (f"decode transformers +{new}", f"{per('transformers') * 1e3:.1f} ms/token", ""),
            ratio_row(f"decode ratio +{new}", per("zoo engine"), per("transformers"), 1.5, "transformers (engine)"),
            ratio_row(
                f"model.generate ratio +{new}",
                per("zoo model.generate"),
                per("transformers"),
                1.2,
                "transformers (model.generate)",
            ),
            fraction_row(
                f"decode / floor +{new}",
                floor_s / per("zoo model.generate"),
                0.95,
                "the bandwidth floor (model.generate, prefill included)",
            ),
        ]
    matmuls = decode["step matmuls"]
    if len(args.new) >= 2:  # a decode step alone: the time the extra tokens added, prompt and set-up cancel out
        short, long = min(args.new), max(args.new)
        step = (decode[f"zoo model.generate +{long}"] - decode[f"zoo model.generate +{short}"]) / (long - short)
        rows += [
            (f"decode step +{short}..{long}", f"{step * 1e3:.1f} ms/token", "model.generate, marginal"),
            fraction_row("decode step / floor", floor_s / step, 0.95, "the bandwidth floor (a decode step alone)"),
        ]
    rows.append(
        (
            "decode step matmuls",
            f"{matmuls * 1e3:.1f} ms/token",
            f"the engine's products for one token alone: {floor_s / matmuls:.0%} of the floor",
        )
    )
    if len(args.new) >= 2:
        rows.append(
            ("decode step matmuls / step", f"{matmuls / step:.0%}", "the rest: norms, attention, the cache, Python")
        )
    rows.append(("same tokens", "yes" if same else "NO", "greedy outputs compared token for token, every call"))
    print(table(f"gpt2-small, zoo vs peers, fp32 CPU, {torch.get_num_threads()} threads", rows))


if __name__ == "__main__":
    main()

"""gpt2-small forward (1 x 256 tokens, fp32, inference) and construction: zoo vs transformers.

Targets: forward >= 1.15x transformers' speed and >= 80% of the measured matmul
roofline; build with init <= 0.5x transformers' construction time.
"""

from __future__ import annotations

import argparse

import torch

import zoo
from bench.common import interleaved, matmul_suite, setup, table


def linear_shapes(config: zoo.ModelConfig, seq: int) -> list[tuple[int, int, int]]:
    """(tokens, in, out) of every linear layer in one forward: the model's matmul work."""
    d, f = config.d_model, config.d_ff
    per_layer = [(seq, d, 3 * d), (seq, d, d), (seq, d, f), (seq, f, d)]
    return per_layer * config.n_layers + [(seq, d, config.vocab_size)]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args(argv)
    setup()
    from transformers import GPT2Config, GPT2LMHeadModel

    hf_config = GPT2Config()
    build = interleaved(
        {"zoo": lambda: zoo.build("gpt2-small"), "hf": lambda: GPT2LMHeadModel(hf_config)},
        repeats=3,
    )
    ours, theirs = zoo.build("gpt2-small").eval(), GPT2LMHeadModel(hf_config).eval()
    idx = torch.randint(0, 50257, (1, args.seq))

    def run(model):
        return lambda: model(idx)

    shapes = linear_shapes(ours.config, args.seq)
    matmuls, flops = matmul_suite(shapes)
    with torch.inference_mode():  # the roofline runs interleaved with the models: same noise
        forward = interleaved({"zoo": run(ours), "hf": run(theirs), "matmuls": matmuls}, repeats=args.repeats)
    peak = flops / forward["matmuls"] / 1e9
    achieved = flops / forward["zoo"] / 1e9
    print(
        table(
            f"gpt2-small, 1 x {args.seq} tokens, fp32, {torch.get_num_threads()} threads",
            [
                ("forward zoo", f"{forward['zoo'] * 1e3:.1f} ms", ""),
                ("forward transformers", f"{forward['hf'] * 1e3:.1f} ms", ""),
                (
                    "forward speed ratio",
                    f"{forward['hf'] / forward['zoo']:.2f}x",
                    "zoo vs transformers (target >= 1.15x)",
                ),
                ("matmul roofline", f"{peak:.0f} GFLOP/s", "the model's matmuls alone, each in its faster orientation"),
                ("zoo achieved", f"{achieved:.0f} GFLOP/s", f"{achieved / peak:.0%} of roofline (target >= 80%)"),
                ("build zoo (with init)", f"{build['zoo'] * 1e3:.0f} ms", ""),
                ("build transformers", f"{build['hf'] * 1e3:.0f} ms", ""),
                ("build time ratio", f"{build['zoo'] / build['hf']:.2f}x", "zoo / transformers (target <= 0.5x)"),
            ],
        )
    )


if __name__ == "__main__":
    main()

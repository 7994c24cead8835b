"""Greedy generation on gpt2-small: zoo's inference engine vs transformers ``generate``.

Both models hold the same random weights (a transformers GPT-2 saved locally and
imported with ``zoo.from_hf``), so they also emit the same tokens, which is checked.
Timed: 128 new tokens from a 32-token prompt, whole calls, interleaved; zoo decodes
through an ``Engine`` prepared once (``model.generate`` keeps its layouts between calls;
``zoo bench peers`` times it beside the engine). Then zoo's
time per new token with ~100 and with ~1000 tokens in the cache: with a KV cache a
step costs one position through the weights plus attention over the cache, so the
second should stay close to the first.

Targets: >= 1.5x transformers' speed; per-token time at 1000 <= 1.5x that at 100.
"""

from __future__ import annotations

import argparse
import tempfile
import time

import torch

import zoo
from bench.common import interleaved, setup, table
from zoo.decoding import Engine, generate, stream


def per_token_seconds(engine: Engine, position: int, steps: int) -> float:
    """Seconds per new token once ``position`` tokens are cached (prefill not timed)."""
    prompt = torch.randint(0, engine.config.vocab_size, (1, position))
    decoding = stream(engine, prompt, steps + 1)
    next(decoding)  # prefill and the first token
    start = time.perf_counter()
    for _ in decoding:
        pass
    return (time.perf_counter() - start) / steps


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--prompt", type=int, default=32)
    parser.add_argument("--new", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=16, help="decode steps timed at each cache length")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    setup(args.threads)
    from transformers import GenerationConfig, GPT2Config, GPT2LMHeadModel
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()

    theirs = GPT2LMHeadModel(GPT2Config()).eval()
    with tempfile.TemporaryDirectory() as folder:
        theirs.save_pretrained(folder)
        ours = zoo.from_hf(folder)
    engine = Engine(ours)
    prompt = torch.randint(0, 50257, (1, args.prompt))
    # No EOS, so both always produce exactly args.new tokens.
    greedy = GenerationConfig(max_new_tokens=args.new, do_sample=False, eos_token_id=None, pad_token_id=0)
    outputs: dict[str, torch.Tensor] = {}

    def run_zoo() -> None:
        outputs["zoo"] = generate(engine, prompt, args.new)

    def run_hf() -> None:
        with torch.inference_mode():
            outputs["hf"] = theirs.generate(prompt, generation_config=greedy)

    whole = interleaved({"zoo": run_zoo, "hf": run_hf}, repeats=args.repeats)
    same = torch.equal(outputs["zoo"], outputs["hf"]) and outputs["zoo"].shape[1] == args.prompt + args.new
    # Decode steps alone, the two cache lengths alternated; the fastest run of each
    # (noise only ever adds time).
    per_token: dict[int, list[float]] = {100: [], 1000: []}
    for _ in range(args.repeats):
        for position, times in per_token.items():
            times.append(per_token_seconds(engine, position, args.steps))
    at_100, at_1000 = min(per_token[100]), min(per_token[1000])
    print(
        table(
            f"gpt2-small greedy, {args.prompt}-token prompt + {args.new} new, fp32, {torch.get_num_threads()} threads",
            [
                ("generate zoo", f"{whole['zoo']:.2f} s", f"{whole['zoo'] / args.new * 1e3:.1f} ms/token"),
                ("generate transformers", f"{whole['hf']:.2f} s", f"{whole['hf'] / args.new * 1e3:.1f} ms/token"),
                ("speed ratio", f"{whole['hf'] / whole['zoo']:.2f}x", "zoo vs transformers (target >= 1.5x)"),
                ("same tokens", "yes" if same else "NO", "greedy outputs compared token for token"),
                ("zoo per token @100", f"{at_100 * 1e3:.1f} ms", f"{args.steps} steps after a 100-token prefill"),
                ("zoo per token @1000", f"{at_1000 * 1e3:.1f} ms", f"{args.steps} steps after a 1000-token prefill"),
                ("@1000 / @100", f"{at_1000 / at_100:.2f}x", "target <= 1.5x"),
            ],
        )
    )


if __name__ == "__main__":
    main()

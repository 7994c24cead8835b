"""KV-cached decoding: gpt2-small vs gpt2-small-modern (zoo-modern's GQA preset).

Each zoo model is timed against its transformers peer with the same architecture and
sizes (GPT2LMHeadModel; LlamaForCausalLM with 4 key/value heads, rotary, RMSNorm,
SwiGLU), all four in one interleaved run and through the same greedy loop: prefill the
prompt (not timed), then one token per step from the cache (timed). KV-cache memory is ``KVCache.nbytes``
after the last token; grouped-query attention should shrink it by n_heads / n_kv_heads
(12 / 4 = 3x).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

import zoo
from bench.common import setup, table

Decoder = Callable[[], tuple[float, int]]


def zoo_decoder(model: zoo.DecoderLM, prompt: torch.Tensor, new: int) -> Decoder:
    """Prefill, then greedy-decode ``new`` tokens; returns (decode seconds, cache bytes)."""

    def run() -> tuple[float, int]:
        cache = model.new_cache(capacity=prompt.shape[1] + new)
        logits = model(prompt, cache=cache)
        start = time.perf_counter()
        for _ in range(new):
            token = logits[:, -1:].argmax(-1)  # (B, 1)
            logits = model(token, cache=cache)
        return time.perf_counter() - start, cache.nbytes

    return run


def hf_decoder(model: torch.nn.Module, prompt: torch.Tensor, new: int) -> Decoder:
    def run() -> tuple[float, int]:
        out = model(prompt, use_cache=True)
        start = time.perf_counter()
        for _ in range(new):
            token = out.logits[:, -1:].argmax(-1)  # (B, 1)
            out = model(token, cache=out.cache, use_cache=True)
        seconds = time.perf_counter() - start
        return seconds, sum(layer.keys.nbytes + layer.values.nbytes for layer in out.cache.layers)

    return run


def hf_peers(small_model: zoo.DecoderLM, modern_model: zoo.DecoderLM) -> dict[str, torch.nn.Module]:
    """transformers models with the architecture and sizes of the two zoo models."""
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    small, modern = small_model.config, modern_model.config
    gpt2 = GPT2LMHeadModel(
        GPT2Config(n_positions=small.max_seq_len, n_embd=small.d_model, n_layer=small.n_layers, n_head=small.n_heads)
    )
    mlp = modern_model.blocks[0].mlp
    llama = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=modern.vocab_size,
            hidden_size=modern.d_model,
            intermediate_size=mlp.gate.out_features,
            num_hidden_layers=modern.n_layers,
            num_attention_heads=modern.n_heads,
            num_key_value_heads=modern.attention.options["n_kv_heads"],
            max_position_embeddings=modern.max_seq_len,
            rms_norm_eps=modern.norm_eps,
            tie_word_embeddings=True,
            attention_bias=False,
            mlp_bias=False,
        )
    )
    return {"gpt2-small (transformers)": gpt2.eval(), "gpt2-small-modern (transformers Llama)": llama.eval()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--new", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    setup()
    if "gpt2-small-modern" not in zoo.list_models():
        raise SystemExit("gpt2-small-modern comes from the example plugin: pip install -e examples/zoo-modern")
    small, modern = zoo.build("gpt2-small").eval(), zoo.build("gpt2-small-modern").eval()
    peers = hf_peers(small, modern)
    prompt = torch.randint(0, small.config.vocab_size, (args.batch, args.prompt))
    runs = {
        "gpt2-small": zoo_decoder(small, prompt, args.new),
        "gpt2-small-modern": zoo_decoder(modern, prompt, args.new),
        **{name: hf_decoder(model, prompt, args.new) for name, model in peers.items()},
    }
    times: dict[str, list[float]] = {name: [] for name in runs}
    cache_bytes: dict[str, int] = {}
    with torch.inference_mode():
        for _ in range(args.repeats):  # interleaved, so load on the machine hits all alike
            for name, run in runs.items():
                elapsed, cache_bytes[name] = run()
                times[name].append(elapsed)
    seconds = {name: statistics.median(ts) for name, ts in times.items()}
    tokens = args.batch * args.new
    speed = {name: tokens / s for name, s in seconds.items()}
    positions = args.batch * (args.prompt + args.new)
    hf_small, hf_modern = peers
    rows = []
    for name in runs:
        rows.append((f"{name} decode", f"{speed[name]:.1f} tok/s", f"{seconds[name] / args.new * 1e3:.0f} ms per step"))
    for name in runs:
        per_position = cache_bytes[name] / positions / 1024
        rows.append(
            (f"{name} KV cache", f"{cache_bytes[name] / 2**20:.2f} MiB", f"{per_position:.0f} KiB per position")
        )
    small_speed, modern_speed = speed["gpt2-small"], speed["gpt2-small-modern"]
    kv_ratio = cache_bytes["gpt2-small-modern"] / cache_bytes["gpt2-small"]
    rows += [
        ("modern / small speed", f"{modern_speed / small_speed:.2f}x", "zoo, GQA + SwiGLU + rotary vs GPT-2"),
        ("modern / small KV cache", f"{kv_ratio:.3f}x", "n_kv_heads / n_heads = 4 / 12"),
        ("zoo / transformers, small", f"{small_speed / speed[hf_small]:.2f}x", "decode speed ratio"),
        ("zoo / transformers, modern", f"{modern_speed / speed[hf_modern]:.2f}x", "decode speed ratio"),
    ]
    title = (
        f"KV-cached greedy decoding, batch {args.batch}, prompt {args.prompt} + {args.new} new tokens, "
        f"fp32, {torch.get_num_threads()} threads"
    )
    print(table(title, rows))


if __name__ == "__main__":
    main()

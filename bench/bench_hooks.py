"""What the hook machinery costs: gpt2-small forward (1 x 256 tokens, fp32, inference),
interleaved in one run, as ratios to the same weights without the machinery.

- without: the model as it was before hook points (the embedding and the attention
  kernel with no ``hook_state`` / ``ctx.hooks`` checks), the same weights;
- unused: the model as it is, no hook set (target: 1.00x, within noise);
- installed: inside ``model.hooks({})``, every torch module hook present, none with work;
- one hook: a hook reading ``blocks.5.hook_resid_post``;
- cache all: ``run_with_cache`` of every point (the fused kernel then computes scores).
"""

from __future__ import annotations

import argparse
import copy

import torch
import torch.nn.functional as F
from torch import Tensor

import zoo
from bench.common import interleaved, setup, table
from zoo.nn.attention import AttentionContext
from zoo.nn.model import DecoderLM


class WithoutHooksLM(DecoderLM):
    """``DecoderLM`` with the embedding as it was before hook points."""

    def embed(self, idx: Tensor, positions: Tensor, scope: str = "") -> Tensor:
        x = self.tok_emb(idx)
        if self.embed_scale != 1.0:
            x = x * self.embed_scale
        return self.drop(self.position.embed(x, positions))


class WithoutHooksSdpa(zoo.SdpaAttention):
    """The fused attention as it was before hook points: straight to the kernel."""

    def attend(self, q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext) -> Tensor:
        mask = ctx.mask if ctx.mask is None or ctx.mask.dtype == q.dtype else ctx.mask.to(q.dtype)
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=0.0, is_causal=ctx.is_causal, enable_gqa=self.groups > 1
        )


def without_hooks(model: zoo.DecoderLM) -> zoo.DecoderLM:
    """A copy of ``model`` (same weights) whose classes skip the hook checks."""
    plain = copy.deepcopy(model)
    plain.__class__ = WithoutHooksLM
    for block in plain.blocks:
        block.attn.__class__ = WithoutHooksSdpa
    return plain


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--preset", default="gpt2-small")
    parser.add_argument(
        "--small", action="store_true", help="d_model 64, 4 heads, 256 tokens of vocabulary: Python overhead dominates"
    )
    parser.add_argument("--threads", type=int, default=2, help="torch threads (1 is steadier on a shared machine)")
    args = parser.parse_args(argv)
    setup(args.threads)
    small = {"d_model": 64, "n_heads": 4, "vocab_size": 256} if args.small else {}
    model = zoo.build(args.preset, **small).eval()
    plain = without_hooks(model)
    idx = torch.randint(0, model.config.vocab_size, (1, args.seq))

    def inside(fns: dict) -> object:
        def run() -> object:
            with model.hooks(fns):
                return model(idx)

        return run

    with torch.inference_mode():
        torch.testing.assert_close(plain(idx), model(idx), rtol=0, atol=0)
        times = interleaved(
            {
                "without": lambda: plain(idx),
                "unused": lambda: model(idx),
                "installed": inside({}),
                "one hook": inside({"blocks.5.hook_resid_post": lambda x, name: None}),
                "cache all": lambda: model.run_with_cache(idx),
            },
            repeats=args.repeats,
        )
    base = times["without"]
    rows = [
        (name, f"{t * 1e3:.1f} ms", f"{t / base:.3f}x the forward without hook machinery") for name, t in times.items()
    ]
    shape = " (d_model 64, 4 heads, vocabulary 256)" if args.small else ""
    print(table(f"{args.preset}{shape}, 1 x {args.seq} tokens, fp32, {torch.get_num_threads()} threads", rows))


if __name__ == "__main__":
    main()

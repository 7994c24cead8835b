"""nanoGPT's GPT-2, written out in plain PyTorch (``F.scaled_dot_product_attention``, a
tied head), the peer the training benchmarks time the zoo against: ``nanogpt_from``
gives one holding a zoo model's weights, so the two compute the same logits."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import zoo


class SelfAttention(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)

    def forward(self, x: Tensor) -> Tensor:
        b, s, d = x.shape
        q, k, v = self.c_attn(x).split(d, dim=2)
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).reshape(b, s, d))


class Layer(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.ln_1, self.attn, self.ln_2 = nn.LayerNorm(d), SelfAttention(d, heads), nn.LayerNorm(d)
        self.c_fc, self.c_proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.c_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class NanoGPT(nn.Module):
    def __init__(self, d: int, layers: int, heads: int, vocab: int, seq: int) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.h = nn.ModuleList(Layer(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied, as GPT-2's

    def forward(self, idx: Tensor) -> Tensor:
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for layer in self.h:
            x = layer(x)
        return self.lm_head(self.ln_f(x))


def nanogpt_from(model: zoo.DecoderLM) -> NanoGPT:
    """A NanoGPT holding ``model``'s weights (the names mapped one by one)."""
    c = model.config
    ours = model.state_dict()
    net = NanoGPT(c.d_model, c.n_layers, c.n_heads, c.vocab_size, c.max_seq_len)
    names = {"wte.weight": "tok_emb.weight", "wpe.weight": "position.table.weight", "ln_f.weight": "final_norm.weight"}
    names["ln_f.bias"] = "final_norm.bias"
    parts = {"ln_1": "attn_residual.norm", "attn.c_attn": "attn.qkv", "attn.c_proj": "attn.out"}
    parts |= {"ln_2": "mlp_residual.norm", "c_fc": "mlp.up", "c_proj": "mlp.down"}
    for i in range(c.n_layers):
        for theirs, mine in parts.items():
            for leaf in ("weight", "bias"):
                names[f"h.{i}.{theirs}.{leaf}"] = f"blocks.{i}.{mine}.{leaf}"
    state = {name: ours[names[name]] for name in net.state_dict() if name != "lm_head.weight"}
    net.load_state_dict(state | {"lm_head.weight": ours["tok_emb.weight"]})
    return net


# ---- the loops --------------------------------------------------------------------------------

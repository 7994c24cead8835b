"""nanoGPT checkpoints: a ckpt.pt written the way nanoGPT's train.py writes it, from a
module with nanoGPT's exact layout and forward pass (model.py, reproduced below)."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

import zoo

# -- nanoGPT's model.py, the parts a forward pass uses ---------------------------------------


class LayerNorm(nn.Module):
    def __init__(self, ndim: int, bias: bool) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd: int, n_head: int, block_size: int, bias: bool, flash: bool) -> None:
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=bias)
        self.c_proj = nn.Linear(n_embd, n_embd, bias=bias)
        self.n_head, self.n_embd, self.flash = n_head, n_embd, flash
        if not flash:  # nanoGPT keeps the causal mask as a buffer named "bias"
            self.register_buffer(
                "bias", torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size)
            )

    def forward(self, x: Tensor) -> Tensor:
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        if self.flash:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
            y = F.softmax(att, dim=-1) @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, n_embd: int, bias: bool) -> None:
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd, bias=bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * n_embd, n_embd, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, n_embd: int, n_head: int, block_size: int, bias: bool, flash: bool) -> None:
        super().__init__()
        self.ln_1 = LayerNorm(n_embd, bias=bias)
        self.attn = CausalSelfAttention(n_embd, n_head, block_size, bias, flash)
        self.ln_2 = LayerNorm(n_embd, bias=bias)
        self.mlp = MLP(n_embd, bias)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(
        self,
        block_size: int,
        vocab_size: int,
        n_layer: int,
        n_head: int,
        n_embd: int,
        dropout: float,
        bias: bool,
        flash: bool = True,
    ) -> None:
        super().__init__()
        self.transformer = nn.ModuleDict(
            {
                "wte": nn.Embedding(vocab_size, n_embd),
                "wpe": nn.Embedding(block_size, n_embd),
                "drop": nn.Dropout(dropout),
                "h": nn.ModuleList([Block(n_embd, n_head, block_size, bias, flash) for _ in range(n_layer)]),
                "ln_f": LayerNorm(n_embd, bias=bias),
            }
        )
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying, as nanoGPT does

    def forward(self, idx: Tensor) -> Tensor:
        pos = torch.arange(0, idx.size(1), dtype=torch.long)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))


# -- checkpoints as train.py writes them ----------------------------------------------------------


def nanogpt(bias: bool = True, flash: bool = True, seed: int = 0, **sizes: Any) -> tuple[GPT, dict[str, Any]]:
    model_args = {
        "n_layer": 2,
        "n_head": 4,
        "n_embd": 32,
        "block_size": 32,
        "bias": bias,
        "vocab_size": 71,
        "dropout": 0.0,
    }
    model_args.update(sizes)
    torch.manual_seed(seed)
    model = GPT(**model_args, flash=flash).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(
                torch.randn_like(p) * 0.2
                + (1.0 if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")) else 0.0)
            )
    return model, model_args


def write_ckpt(path: Path, model: nn.Module, model_args: dict[str, Any], *, compiled: bool = False) -> Path:
    """What nanoGPT's train.py saves: model, optimizer, model_args, iter_num, best_val_loss, config."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.zeros(1, 4, dtype=torch.long)).sum().backward()
    optimizer.step()
    state = model.state_dict()
    if compiled:
        state = {f"_orig_mod.{k}": v for k, v in state.items()}
    checkpoint = {
        "model": state,
        "optimizer": optimizer.state_dict(),
        "model_args": model_args,
        "iter_num": 250,
        "best_val_loss": torch.tensor(1.4697),
        "config": {"batch_size": 12, "learning_rate": 1e-3, "dataset": "shakespeare_char", "compile": compiled},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(checkpoint, path)
    return path


def assert_same(model: zoo.DecoderLM, reference: GPT, vocab: int = 71, seq: int = 32) -> None:
    idx = torch.randint(0, vocab, (2, seq), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        torch.testing.assert_close(model(idx), reference(idx), atol=1e-4, rtol=0)


@pytest.mark.parametrize(
    ("bias", "flash", "compiled"),
    [(True, True, False), (False, True, False), (True, False, True), (False, False, True)],
    ids=["bias", "no-bias", "mask-buffer-compiled", "no-bias-compiled"],
)
def test_from_nanogpt_matches_nanogpts_forward(tmp_path: Path, bias: bool, flash: bool, compiled: bool) -> None:
    reference, model_args = nanogpt(bias=bias, flash=flash)
    path = write_ckpt(tmp_path / "out" / "ckpt.pt", reference, model_args, compiled=compiled)
    model = zoo.from_nanogpt(tmp_path / "out")  # the out_dir works as well as the file
    assert model.config.bias is bias and model.config.tie_embeddings
    assert (model.config.n_layers, model.config.d_model, model.config.max_seq_len) == (2, 32, 32)
    assert_same(model, reference)
    assert_same(zoo.from_nanogpt(path), reference)


def test_from_nanogpt_maps_every_model_arg(tmp_path: Path) -> None:
    reference, model_args = nanogpt(n_layer=3, n_head=2, n_embd=48, block_size=20, vocab_size=65, dropout=0.1)
    model = zoo.from_nanogpt(write_ckpt(tmp_path / "ckpt.pt", reference, model_args))
    c = model.config
    assert (c.n_layers, c.n_heads, c.d_model, c.max_seq_len, c.vocab_size) == (3, 2, 48, 20, 65)
    assert (c.dropout.embedding, c.dropout.attention, c.dropout.residual) == (0.1, 0.1, 0.1)
    assert_same(model, reference.eval(), vocab=65, seq=20)


def test_convert_cli_writes_a_zoo_checkpoint(tmp_path: Path) -> None:
    reference, model_args = nanogpt()
    path = write_ckpt(tmp_path / "ckpt.pt", reference, model_args)
    out = tmp_path / "imported.safetensors"
    from zoo.cli import main

    assert main(["convert", "--from-nanogpt", str(path), "-o", str(out)]) == 0
    assert_same(zoo.load(out), reference)


class Payload:
    """Unpickling this runs code: what weights_only=True exists to refuse."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, ("touch pwned",))


def test_pickled_code_and_bad_files_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    reference, model_args = nanogpt()
    path = tmp_path / "evil.pt"
    torch.save({"model": reference.state_dict(), "model_args": model_args, "config": Payload()}, path)
    with pytest.raises(zoo.InteropError, match="never pickled code"):
        zoo.from_nanogpt(path)
    assert not (tmp_path / "pwned").exists()

    with pytest.raises(zoo.InteropError, match="does not exist"):
        zoo.from_nanogpt(tmp_path / "missing")
    torch.save({"model_args": model_args}, tmp_path / "no_model.pt")
    with pytest.raises(zoo.InteropError, match="'model' state dict"):
        zoo.from_nanogpt(tmp_path / "no_model.pt")
    torch.save({"model": reference.state_dict(), "model_args": {**model_args, "n_kv_head": 2}}, tmp_path / "fork.pt")
    with pytest.raises(zoo.InteropError, match="n_kv_head"):
        zoo.from_nanogpt(tmp_path / "fork.pt")
    torch.save({"model": reference.state_dict(), "model_args": {**model_args, "n_embd": 48}}, tmp_path / "sizes.pt")
    with pytest.raises(zoo.InteropError, match="shape"):
        zoo.from_nanogpt(tmp_path / "sizes.pt")
    state = {k: v for k, v in reference.state_dict().items() if "c_fc" not in k}
    torch.save({"model": state, "model_args": model_args}, tmp_path / "partial.pt")
    with pytest.raises(zoo.InteropError, match="missing nanoGPT tensors.*c_fc"):
        zoo.from_nanogpt(tmp_path / "partial.pt")


# -- nanoGPT's char-level meta.pkl ---------------------------------------------------------


def write_meta(folder: Path) -> dict[str, Any]:
    """What nanoGPT's data/shakespeare_char/prepare.py writes, on the same text."""
    import pickle

    data = (Path(zoo.__file__).parent / "data" / "shakespeare.txt").read_text(encoding="utf-8")
    chars = sorted(list(set(data)))
    vocab_size = len(chars)
    stoi = {ch: i for i, ch in enumerate(chars)}
    itos = {i: ch for i, ch in enumerate(chars)}
    meta = {"vocab_size": vocab_size, "itos": itos, "stoi": stoi}
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "meta.pkl", "wb") as f:
        pickle.dump(meta, f)
    return meta


def test_a_char_level_checkpoint_samples_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """shakespeare_char: `zoo convert --from-nanogpt --meta`, then `zoo generate` prints
    the characters nanoGPT's own decode gives for the same greedy ids."""
    from zoo.cli import main

    meta = write_meta(tmp_path / "data" / "shakespeare_char")
    reference, model_args = nanogpt(vocab_size=meta["vocab_size"])
    ckpt = write_ckpt(tmp_path / "out-shakespeare-char" / "ckpt.pt", reference, model_args)
    out = tmp_path / "char.safetensors"
    argv = ["convert", "--from-nanogpt", str(ckpt.parent), "--meta", str(tmp_path / "data/shakespeare_char/meta.pkl")]
    assert main([*argv, "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["generate", str(out), "--prompt", "ROMEO:", "--greedy", "--max-new-tokens", "12", "--no-echo"]) == 0
    shown = capsys.readouterr().out.strip("\n")
    ids = torch.tensor([[meta["stoi"][c] for c in "ROMEO:"]])
    expected = zoo.load(out).generate(ids, 12, do_sample=False, eos_token_id=[])[0, 6:].tolist()
    assert shown == "".join(meta["itos"][i] for i in expected) and len(shown) == 12
    tok = zoo.load(out).tokenizer
    assert tok.encode("First Citizen:") == [meta["stoi"][c] for c in "First Citizen:"]
    assert tok.vocab_size == 65 and zoo.tokenizer(tmp_path / "data/shakespeare_char/meta.pkl").encode(
        "O"
    ) == tok.encode("O")
    with pytest.raises(zoo.InputError, match="not in the 65 characters"):
        tok.encode("€")
    (tmp_path / "data/shakespeare_char/meta.pkl").rename(ckpt.parent / "meta.pkl")  # beside ckpt.pt: found there
    assert zoo.from_nanogpt(ckpt.parent).tokenizer.decode([0, 1, 2]) == "".join(meta["itos"][i] for i in range(3))


class MetaPayload:
    """A meta.pkl whose unpickling would run a command."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, ("touch pwned",))


@pytest.mark.parametrize(
    ("meta", "message"),
    [
        ({"vocab_size": 2, "stoi": {"a": 0, "b": 1}, "itos": MetaPayload()}, "names posix.system|names nt.system"),
        (MetaPayload(), "names posix.system|names nt.system"),
        ({"vocab_size": 2, "stoi": {"a": 0, "b": 1}, "itos": {0: "a", 1: b"b"}}, "'itos' must be a dict of int to str"),
        ({"vocab_size": 2, "stoi": {"a": 0, "b": True}, "itos": {0: "a", 1: "b"}}, "'stoi' must be a dict of str"),
        ({"vocab_size": 3, "stoi": {"a": 0, "b": 1}, "itos": {0: "a", 1: "b"}}, "ids 0..vocab_size-1"),
        ({"vocab_size": 2, "stoi": {"a": 1, "b": 0}, "itos": {0: "a", 1: "b"}}, "both ways"),
        ([1, 2], "not nanoGPT's"),
    ],
    ids=["reduce-inside", "reduce", "bytes", "bool", "size", "not-inverse", "list"],
)
def test_a_hostile_or_wrong_meta_pkl_is_refused_unexecuted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, meta: object, message: str
) -> None:
    import pickle

    monkeypatch.chdir(tmp_path)
    (tmp_path / "meta.pkl").write_bytes(pickle.dumps(meta))
    with pytest.raises(zoo.ZooError, match=message):
        zoo.tokenizer(tmp_path / "meta.pkl")
    reference, model_args = nanogpt()
    ckpt = write_ckpt(tmp_path / "out" / "ckpt.pt", reference, model_args)
    with pytest.raises(zoo.ZooError, match=message):
        zoo.from_nanogpt(ckpt, meta=tmp_path / "meta.pkl")
    assert not (tmp_path / "pwned").exists()

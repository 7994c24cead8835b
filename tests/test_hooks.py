"""Hook points: the same names for every registered component and placement, parity with
transformers' hidden states and attentions, editing, patching, the logit lens, compile."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor

import zoo
import zoo.nn.attention
import zoo.nn.contracts
from helpers import TINY, decoder_only, tiny
from zoo.nn.hooks import hook_points, run_with_cache
from zoo.nn.patching import logit_lens, patch

BLOCK = [
    "hook_resid_pre",
    "attn.hook_q",
    "attn.hook_k",
    "attn.hook_v",
    "attn.hook_scores",
    "attn.hook_pattern",
    "attn.hook_z",
    "hook_attn_out",
    "hook_resid_mid",
    "mlp.hook_pre",
    "mlp.hook_post",
    "hook_mlp_out",
    "hook_resid_post",
]
ATTENTION = [n for n in BLOCK if n.startswith("attn.")]
CROSS = [n.replace("attn.", "cross_attn.") for n in ATTENTION] + ["hook_cross_out", "hook_resid_cross"]


# MLPs whose points are not the contract's activation input and output projection's input:
# an MoE has one of each per expert (so neither point), and marks its router's logits.
MLP_POINTS = {"moe": ["mlp.hook_router"], "none": []}
# Points a token mixer without scores marks itself, before hook_z: Mamba-2's (and Mamba's, and the gated
# DeltaNet's) convolution and scan outputs.
MIXER_POINTS = {name: ["attn.hook_conv", "attn.hook_scan"] for name in ("mamba2", "mamba", "gated_deltanet")}
# Mixers that mix nothing (Nemotron-H's MLP-only layers): no output projection, so no hook_z either.
NO_MIXER = {"none"}


def attends(kind: str, spec: Any) -> bool:
    """Whether the attention ``spec`` (if ``kind`` is attention) computes scores: a token
    mixer without them (``attends = False``, a short convolution) has no q to pattern points."""
    if kind != "attention":
        return True
    name = spec if isinstance(spec, str) else spec["name"]
    return bool(getattr(zoo.default_registry().get("attention", name).factory, "attends", True))


def block_scheme(kind: str = "", spec: Any = "") -> list[str]:
    """A block's points for a model with component ``spec`` of ``kind``, in forward order."""
    name = spec if isinstance(spec, str) else spec.get("name")
    if not attends(kind, spec):
        at = BLOCK.index("hook_attn_out" if name in NO_MIXER else "attn.hook_z")
        return [*BLOCK[:1], *MIXER_POINTS.get(name, []), *BLOCK[at:]]
    if kind != "mlp" or name not in MLP_POINTS:
        return BLOCK
    at = BLOCK.index("mlp.hook_pre")
    return [*BLOCK[:at], *MLP_POINTS[name], *BLOCK[at + 2 :]]


def scheme(layers: int, block: list[str] = BLOCK) -> list[str]:
    """Every point of a decoder-only model of ``layers`` blocks, in forward order."""
    blocks = [f"blocks.{i}.{name}" for i in range(layers) for name in block]
    return ["hook_embed", "hook_pos_embed", *blocks, "hook_final_norm", "hook_logits"]


def ids(*shape: int, seed: int = 1, vocab: int = TINY["vocab_size"]) -> Tensor:
    return torch.randint(0, vocab, shape, generator=torch.Generator().manual_seed(seed))


def no_module_hooks(model: torch.nn.Module) -> bool:
    return all(not (m._forward_hooks or m._forward_pre_hooks) for m in model.modules())


CASES: list[tuple[str, Any]] = [(c.kind, c.name) for c in zoo.components() if c.kind != "init"]
CASES += [
    ("attention", {"name": "sdpa", "n_kv_heads": 2}),
    ("attention", {"name": "gqa", "n_kv_heads": 2, "kernel": "eager"}),
    ("placement", {"name": "parallel", "shared_norm": True}),
]
IDS = [f"{kind}-{spec if isinstance(spec, str) else '-'.join(map(str, spec.values()))}" for kind, spec in CASES]


@pytest.mark.parametrize(("kind", "spec"), CASES, ids=IDS)
def test_every_component_exposes_every_point_and_leaves_the_forward_unchanged(kind: str, spec: Any) -> None:
    model = tiny(**{kind: spec})
    idx = ids(2, 7)
    plain = model(idx)
    expected = scheme(TINY["n_layers"], block_scheme(kind, spec))
    assert model.hook_points() == expected
    out, cache = model.run_with_cache(idx)
    assert list(cache) == expected  # every point ran, in forward order
    torch.testing.assert_close(out, plain, rtol=0, atol=1e-6)
    assert model.hook_state is None and no_module_hooks(model)
    torch.testing.assert_close(model(idx), plain, rtol=0, atol=0)
    torch.testing.assert_close(cache["hook_logits"], out)
    if (spec if isinstance(spec, str) else spec["name"]) in NO_MIXER and kind == "attention":
        assert torch.equal(cache["blocks.1.hook_attn_out"], torch.zeros_like(cache["blocks.1.hook_attn_out"]))
        return
    heads, dk = model.config.n_heads, model.config.head_dim
    attn = model.blocks[1].attn  # latent attention's q/k and v widths are its own (qk_head_dim, v_head_dim)
    dk, dv = getattr(attn, "qk_head_dim", dk), getattr(attn, "v_head_dim", dk)
    width = dv if attends(kind, spec) else attn.out_proj.in_features // heads  # a scan's are wider
    assert cache["blocks.1.attn.hook_z"].shape == (2, 7, heads, width)
    torch.testing.assert_close(cache["hook_logits"], out)
    if not attends(kind, spec):
        return
    kv_heads = model.blocks[0].attn.n_kv_heads
    assert cache["blocks.0.attn.hook_q"].shape == (2, heads, 7, dk)
    assert cache["blocks.0.attn.hook_k"].shape == (2, kv_heads, 7, dk)
    assert cache["blocks.0.attn.hook_v"].shape == (2, kv_heads, 7, dv)
    pattern = cache["blocks.1.attn.hook_pattern"]
    if getattr(model.blocks[1].attn, "sinks", None) is not None:  # a sink takes its share of each row (GPT-OSS)
        assert ((pattern.sum(-1) > 0) & (pattern.sum(-1) < 1)).all()
    else:
        torch.testing.assert_close(pattern.sum(-1), torch.ones(2, heads, 7))
    assert (pattern.triu(1) == 0).all()  # causal


SEQ2SEQ = [(case, i) for case, i in zip(CASES, IDS, strict=True) if not decoder_only(*case)]


@pytest.mark.parametrize(("kind", "spec"), [c for c, _ in SEQ2SEQ], ids=[i for _, i in SEQ2SEQ])
def test_every_component_exposes_every_point_in_the_encoder_decoder(kind: str, spec: Any) -> None:
    model = tiny("transformer-2017-base", n_encoder_layers=1, n_layers=1, **{kind: spec})
    src, tgt = ids(2, 6), ids(2, 4, seed=2)
    out, cache = model.run_with_cache(src, tgt)
    block = len(block_scheme(kind, spec))
    assert list(cache) == model.hook_points() and len(cache) == 2 + block + 1 + 2 + block + 8 + 2
    # the hooked path computes attention explicitly: equal up to float reassociation
    torch.testing.assert_close(out, model(src, tgt), rtol=0, atol=1e-5)


class TanhMLP(torch.nn.Module):
    """A plugin's MLP written from scratch: no zoo base class, no hook code."""

    def __init__(self, d_model: int, d_ff: int) -> None:
        super().__init__()
        self.into, self.act = torch.nn.Linear(d_model, d_ff), torch.nn.Tanh()
        self.back = zoo.residual_output(torch.nn.Linear(d_ff, d_model))

    def forward(self, x: Tensor) -> Tensor:
        return self.back(self.act(self.into(x)))


class SingleHeadGroups(torch.nn.Module):
    """A plugin's attention written from scratch (separate q, k, v layers), through ctx.attend."""

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.q, self.k, self.v = (torch.nn.Linear(d_model, d_model) for _ in range(3))
        self.proj = zoo.residual_output(torch.nn.Linear(d_model, d_model))

    def forward(self, x: Tensor, ctx: zoo.AttentionContext) -> Tensor:
        b, s, d = x.shape
        q, k, v = (f(x).view(b, s, self.n_heads, -1).transpose(1, 2) for f in (self.q, self.k, self.v))
        q, k = ctx.rotate(q, k)
        return self.proj(ctx.attend(q, k, v).transpose(1, 2).reshape(b, s, d))


def test_a_plugins_components_get_every_point_without_hook_code() -> None:
    def register(register: Any) -> None:
        register("mlp", "tanh-mlp", TanhMLP)
        register("attention", "separate-qkv", SingleHeadGroups)

    plugin = type("Plugin", (), {"zoo_register_components": staticmethod(zoo.hookimpl(register))})
    registry = zoo.Registry(entry_points=False, plugins=[plugin()])
    torch.manual_seed(0)
    config = {**TINY, "mlp": "tanh-mlp", "attention": "separate-qkv"}
    model = zoo.build("gpt2-small", registry=registry, **config).eval()
    idx = ids(2, 7)
    out, cache = model.run_with_cache(idx)
    assert list(cache) == scheme(TINY["n_layers"])
    torch.testing.assert_close(out, model(idx), rtol=0, atol=1e-6)
    x = cache["blocks.0.mlp.hook_pre"]
    torch.testing.assert_close(cache["blocks.0.mlp.hook_post"], torch.tanh(x))


def test_the_stream_points_add_up_for_pre_norm_and_parallel() -> None:
    idx = ids(2, 7)
    for placement in ("pre", "parallel"):
        _, c = tiny(placement=placement).run_with_cache(idx)
        for i in range(TINY["n_layers"]):
            pre, mid, post = (c[f"blocks.{i}.hook_resid_{s}"] for s in ("pre", "mid", "post"))
            torch.testing.assert_close(mid, pre + c[f"blocks.{i}.hook_attn_out"])
            torch.testing.assert_close(post, mid + c[f"blocks.{i}.hook_mlp_out"])
    _, c = tiny(placement="post").run_with_cache(idx)  # post-norm: the stream is the normalised sum
    norm = tiny(placement="post").blocks[0].attn_residual.norm
    torch.testing.assert_close(
        c["blocks.0.hook_resid_mid"], norm(c["blocks.0.hook_resid_pre"] + c["blocks.0.hook_attn_out"])
    )
    torch.testing.assert_close(c["blocks.1.hook_resid_pre"], c["blocks.0.hook_resid_post"])


def test_position_and_embedding_points() -> None:
    idx = ids(2, 7)
    learned = tiny(position="learned")
    _, c = learned.run_with_cache(idx)
    torch.testing.assert_close(c["hook_embed"], learned.tok_emb(idx))
    torch.testing.assert_close(c["hook_pos_embed"], learned.position.table(torch.arange(7))[None].expand(2, 7, -1))
    torch.testing.assert_close(c["blocks.0.hook_resid_pre"], c["hook_embed"] + c["hook_pos_embed"])
    _, c = tiny(position="rotary").run_with_cache(idx)
    assert (c["hook_pos_embed"] == 0).all()  # rotary acts inside attention


def test_replacing_the_parallel_mid_stream_shifts_the_output_stream() -> None:
    model, idx = tiny(placement="parallel"), ids(2, 7)
    _, c = model.run_with_cache(idx)
    shift = torch.full_like(c["blocks.0.hook_resid_mid"], 0.5)
    with model.hooks({"blocks.0.hook_resid_mid": lambda x, name: x + shift}):
        _, edited = model.run_with_cache(idx, names=["blocks.0.hook_resid_post"])
    torch.testing.assert_close(edited["blocks.0.hook_resid_post"], c["blocks.0.hook_resid_post"] + shift)


def test_encoder_decoder_names_both_stacks_and_cross_attention() -> None:
    model = tiny("transformer-2017-base", n_encoder_layers=1, n_layers=2)
    src, tgt = ids(2, 9), ids(2, 5, seed=2)
    expected = ["encoder.hook_embed", "encoder.hook_pos_embed"]
    expected += [f"encoder.0.{n}" for n in BLOCK] + [
        "encoder.hook_final_norm",
        "decoder.hook_embed",
        "decoder.hook_pos_embed",
    ]
    for i in range(2):
        block = [*BLOCK[:9], *CROSS, *BLOCK[9:]]
        expected += [f"decoder.{i}.{n}" for n in block]
    expected += ["hook_final_norm", "hook_logits"]
    assert model.hook_points() == expected
    out, cache = model.run_with_cache(src, tgt)
    assert list(cache) == expected
    torch.testing.assert_close(out, model(src, tgt))
    assert cache["decoder.1.cross_attn.hook_pattern"].shape == (2, TINY["n_heads"], 5, 9)  # target x source
    assert cache["encoder.0.attn.hook_pattern"].triu(1).abs().sum() > 0  # bidirectional


def test_fused_kernel_computes_scores_only_when_a_hook_asks(monkeypatch: pytest.MonkeyPatch) -> None:
    model, idx = tiny(attention="sdpa"), ids(2, 7)
    calls: list[int] = []
    fused = torch.nn.functional.scaled_dot_product_attention

    def counting(*args: Any, **kwargs: Any) -> Tensor:
        calls.append(1)
        return fused(*args, **kwargs)

    monkeypatch.setattr(zoo.nn.attention.F, "scaled_dot_product_attention", counting)
    model(idx)
    model.run_with_cache(idx, names=lambda n: "attn.hook_pattern" not in n and "attn.hook_scores" not in n)
    assert len(calls) == 2 * TINY["n_layers"]  # the fused kernel both times
    _, cache = model.run_with_cache(idx, names=["blocks.1.attn.hook_pattern"])
    assert len(calls) == 3 * TINY["n_layers"] - 1  # layer 1 computed its pattern explicitly
    eager = tiny(attention="eager")
    torch.testing.assert_close(cache["blocks.1.attn.hook_pattern"], eager.attention_maps(idx)[1])


def test_zeroing_one_heads_output_equals_zeroing_its_output_weights() -> None:
    model, idx = tiny(), ids(2, 7)
    head, dk = 2, TINY["d_model"] // TINY["n_heads"]

    def zero_head(z: Tensor, name: str) -> Tensor:
        z = z.clone()
        z[:, :, head] = 0
        return z

    with model.hooks({"blocks.1.attn.hook_z": zero_head}):
        edited = model(idx)
    assert not torch.allclose(edited, model(idx))
    with torch.no_grad():
        model.blocks[1].attn.out.weight[:, head * dk : (head + 1) * dk] = 0
    torch.testing.assert_close(edited, model(idx), rtol=0, atol=1e-6)


def test_patching_clean_into_clean_is_a_no_op_and_a_patch_restores_its_point() -> None:
    model, clean, corrupted = tiny(), ids(1, 6), ids(1, 6, seed=9)
    target = int(clean[0, -1])

    def metric(logits: Tensor) -> Tensor:
        return logits[0, -2].log_softmax(-1)[target]

    same = patch(model, clean, clean, metric)
    assert same.patched and set(same.patched.values()) == {same.clean}
    assert len(same.patched) == 3 * TINY["n_layers"]  # pre, mid, post per block
    result = patch(model, clean, corrupted, metric)
    assert result.clean != result.corrupted
    last = f"blocks.{TINY['n_layers'] - 1}.hook_resid_post"  # the whole stream: everything comes back
    assert result.patched[last] == pytest.approx(result.clean, abs=1e-5)
    assert result.recovered()[last] == pytest.approx(1.0, abs=1e-4)


def test_logit_lens_ends_at_the_logits() -> None:
    model, idx = tiny(), ids(2, 7)
    lens = logit_lens(model, idx)
    assert lens.shape == (TINY["n_layers"] + 1, 2, 7, TINY["vocab_size"])
    torch.testing.assert_close(lens[-1], model(idx))
    _, c = model.run_with_cache(idx, names=["blocks.0.hook_resid_pre"])
    torch.testing.assert_close(lens[0], model.head(model.final_norm(c["blocks.0.hook_resid_pre"])))


def test_filters_gradients_nesting_and_clear_errors() -> None:
    model, idx = tiny(), ids(2, 7)
    _, only = model.run_with_cache(idx, names=lambda n: n.endswith("hook_resid_post"))
    assert list(only) == [f"blocks.{i}.hook_resid_post" for i in range(TINY["n_layers"])]
    assert not only["blocks.0.hook_resid_post"].requires_grad
    out, live = model.run_with_cache(idx, names="blocks.0.hook_resid_post", detach=False)
    (grad,) = torch.autograd.grad(out.logsumexp(-1).sum(), live["blocks.0.hook_resid_post"])
    assert grad.shape == (2, 7, TINY["d_model"]) and grad.abs().sum() > 0
    seen: list[str] = []
    with model.hooks({"hook_embed": lambda x, n: seen.append(n)}):
        with model.hooks({"hook_embed": lambda x, n: seen.append("inner")}):
            model(idx)
        model(idx)
    assert seen == ["hook_embed", "inner", "hook_embed"]
    assert model.hook_state is None and no_module_hooks(model)
    with pytest.raises(zoo.HookError, match="blocks.0.hook_resid_post"):
        model.run_with_cache(idx, names=["blocks.0.hook_resid_psot"])
    with pytest.raises(zoo.HookError, match=r"shape \(2, 7, 32\)"):
        with model.hooks({"hook_embed": lambda x, n: x[:, :1]}):
            model(idx)
    assert model.hook_state is None and no_module_hooks(model)  # an error leaves no hook behind


def test_hooks_work_under_torch_compile_fullgraph() -> None:
    model, idx = tiny(), ids(2, 7)
    _, want = model.run_with_cache(idx)
    torch._dynamo.reset()
    fast = torch.compile(model, fullgraph=True, backend="eager")
    fast(idx)
    out, got = run_with_cache(fast, idx)
    assert list(got) == hook_points(model)
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=1e-5, atol=1e-6)
    with model.hooks({"blocks.0.hook_attn_out": lambda x, n: torch.zeros_like(x)}):
        edited = model(idx)
        torch.testing.assert_close(fast(idx), edited)
    torch.testing.assert_close(fast(idx), model(idx))  # unhooked again: recompiled on its guard


# -- parity with transformers on the same weights ---------------------------------------------

transformers = pytest.importorskip("transformers")
VOCAB = 97
HF: dict[str, tuple[Any, Any, dict[str, Any]]] = {
    "gpt2": (
        transformers.GPT2Config,
        transformers.GPT2LMHeadModel,
        {"n_embd": 32, "n_layer": 3, "n_head": 4, "n_positions": 64},
    ),
    "llama": (
        transformers.LlamaConfig,
        transformers.LlamaForCausalLM,
        {
            "hidden_size": 32,
            "intermediate_size": 40,
            "num_hidden_layers": 3,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": 64,
        },
    ),
    "gpt_neox": (
        transformers.GPTNeoXConfig,
        transformers.GPTNeoXForCausalLM,
        {
            "hidden_size": 32,
            "intermediate_size": 48,
            "num_hidden_layers": 3,
            "num_attention_heads": 4,
            "max_position_embeddings": 64,
            "rotary_pct": 0.5,
        },
    ),
}


def hf_model(tmp_path: Path, family: str) -> tuple[Any, Path]:
    """A seeded random transformers model of ``family`` (eager attention), saved to a folder."""
    config_class, model_class, fields = HF[family]
    torch.manual_seed(0)
    config = config_class(**fields, vocab_size=VOCAB, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    config._attn_implementation = "eager"  # the kernel that returns its attention weights
    model = model_class(config).eval()
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen) * 0.2
            p.copy_(noise + 1.0 if ("norm" in name or "ln" in name) and name.endswith("weight") else noise)
    model.save_pretrained(tmp_path / family)
    return model, tmp_path / family


@pytest.mark.parametrize("family", list(HF))
@pytest.mark.parametrize("kernel", ["sdpa", "eager"])
def test_residual_stream_and_patterns_match_transformers(tmp_path: Path, family: str, kernel: str) -> None:
    if family != "gpt2":
        pytest.importorskip("zoo_modern")
    reference, folder = hf_model(tmp_path, family)
    model = zoo.from_hf(folder, attention=kernel)
    idx = ids(2, 11, vocab=VOCAB)
    with torch.no_grad():
        theirs = reference(idx, output_hidden_states=True, output_attentions=True)
    _, ours = model.run_with_cache(idx)
    layers = model.config.n_layers
    assert len(theirs.hidden_states) == layers + 1 and len(theirs.attentions) == layers
    for i in range(layers):  # transformers: the input of each layer, then the final norm's output
        torch.testing.assert_close(ours[f"blocks.{i}.hook_resid_pre"], theirs.hidden_states[i], rtol=0, atol=1e-5)
        torch.testing.assert_close(ours[f"blocks.{i}.attn.hook_pattern"], theirs.attentions[i], rtol=0, atol=1e-5)
    torch.testing.assert_close(ours["hook_final_norm"], theirs.hidden_states[layers], rtol=0, atol=1e-5)
    torch.testing.assert_close(ours["hook_logits"], theirs.logits, rtol=0, atol=1e-4)


# TransformerLens names the same places; its bridge wraps a transformers model offline.
TL_NAMES = {
    "attn.hook_scores": "attn.hook_attn_scores",
    "hook_final_norm": "ln_final.hook_out",
}  # hook_normalized: before the affine


@pytest.mark.slow  # importing transformer_lens alone takes seconds
def test_run_with_cache_matches_transformer_lens_hook_by_hook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    bridge_module = pytest.importorskip("transformer_lens.model_bridge")
    reference, folder = hf_model(tmp_path, "gpt2")
    bridge = bridge_module.TransformerBridge.boot_transformers(str(folder), hf_model=reference, tokenizer=None)
    model = zoo.from_hf(folder)
    idx = ids(2, 9, vocab=VOCAB)
    logits, theirs = bridge.run_with_cache(idx)
    out, ours = model.run_with_cache(idx)
    torch.testing.assert_close(out, logits, rtol=0, atol=1e-4)
    compared = 0
    for name, ours_value in ours.items():
        local = name.split(".", 2)[-1] if name.startswith("blocks.") else name
        prefix = name[: len(name) - len(local)]
        tl_name = prefix + TL_NAMES.get(local, local)
        if name == "hook_logits" or tl_name not in theirs:
            continue
        value = theirs[tl_name]
        if local in ("attn.hook_q", "attn.hook_k", "attn.hook_v"):
            ours_value = ours_value.transpose(1, 2)  # TransformerLens: (B, S, H, dk)
        if local == "attn.hook_scores":  # masked entries: -inf there, a large negative here
            keep = torch.ones(9, 9, dtype=torch.bool).tril()
            ours_value, value = ours_value[..., keep], value[..., keep]
        torch.testing.assert_close(ours_value, value, rtol=0, atol=1e-5, msg=name)
        compared += 1
    assert compared == len(ours) - 1  # every point but the logits (compared above)

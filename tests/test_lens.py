"""TransformerLens habits (issue 30, item 4): the activation cache's helpers, run_with_hooks,
text where tokens go, activation patching over positions x layers, and the mapping of
hook_q/k/v to TransformerLens's layout. The identities are checked on tiny models here;
the numbers against TransformerLens itself on the same GPT-2 weights (slow: booting it
takes seconds)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import zoo
from helpers import tiny
from zoo import HookError
from zoo.nn.activations import ActivationCache, to_transformer_lens
from zoo.nn.hooks import residual_projection, run_with_hooks
from zoo.nn.patching import patch_grid

TOKENS = torch.randint(0, 97, (2, 7), generator=torch.Generator().manual_seed(3))


@pytest.fixture(params=["gpt2-small", "llama-style-small"])
def model(request: pytest.FixtureRequest) -> zoo.DecoderLM:
    return tiny(request.param)


def test_the_cache_is_a_dict_that_knows_its_model(model: zoo.DecoderLM) -> None:
    logits, cache = model.run_with_cache(TOKENS)
    assert isinstance(cache, ActivationCache) and isinstance(cache, dict)
    assert list(cache) == model.hook_points()
    assert cache.model is model and cache.n_layers == 2
    torch.testing.assert_close(cache["hook_logits"], logits)


def test_accumulated_and_decomposed_streams_sum_to_the_stream(model: zoo.DecoderLM) -> None:
    _, cache = model.run_with_cache(TOKENS)
    final = cache["blocks.1.hook_resid_post"]
    stack, labels = cache.accumulated_resid(incl_mid=True, return_labels=True)
    assert labels == ["0_pre", "0_mid", "1_pre", "1_mid", "final_post"]
    assert stack.shape == (5, 2, 7, 32)
    torch.testing.assert_close(stack[-1], final)
    torch.testing.assert_close(stack[1], cache["blocks.0.hook_resid_mid"])
    pieces, labels = cache.decompose_resid(return_labels=True)
    embeds = ["embed", "pos_embed"] if model.config.position.name == "learned" else ["embed"]  # rotary adds none
    assert labels == [*embeds, "0_attn_out", "0_mlp_out", "1_attn_out", "1_mlp_out"]
    torch.testing.assert_close(pieces.sum(0), final, atol=1e-5, rtol=0)
    upto, labels = cache.decompose_resid(layer=1, mode="attn", return_labels=True)
    assert labels == [*embeds, "0_attn_out"]
    torch.testing.assert_close(upto.sum(0), cache["blocks.0.hook_resid_mid"], atol=1e-5, rtol=0)
    assert cache.accumulated_resid(pos_slice=-1).shape == (3, 2, 32)
    assert cache.accumulated_resid(layer=1, return_labels=True)[1] == ["0_pre", "1_pre"]
    lens = cache.accumulated_resid(apply_ln=True)  # the logit lens: each stream normed by its own statistics
    norm = model.final_norm
    bias = norm.bias if getattr(norm, "bias", None) is not None else 0
    torch.testing.assert_close(lens * norm.weight + bias, norm(stack[[0, 2, 4]]), atol=1e-5, rtol=0)


def test_full_decompositions_sum_to_the_stream(model: zoo.DecoderLM) -> None:
    """Heads, neurons (or MLP outputs), embeddings and biases sum to the stream they
    decompose; the neuron stack with its remainder to the stream entering a block."""
    _, cache = model.run_with_cache(TOKENS)
    for kwargs, point in (
        ({}, "blocks.1.hook_resid_post"),
        ({"expand_neurons": False}, "blocks.1.hook_resid_post"),
        ({"layer": 1}, "blocks.1.hook_resid_pre"),
        ({"layer": 1, "mlp_input": True}, "blocks.1.hook_resid_mid"),
    ):
        stack, labels = cache.get_full_resid_decomposition(return_labels=True, **kwargs)
        assert len(labels) == stack.shape[0] and labels[-1] == "bias" and labels[0] == "L0H0"
        torch.testing.assert_close(stack.sum(0), cache[point], atol=1e-5, rtol=0)
    d_ff = residual_projection(model.blocks[0].mlp).in_features  # the hidden width the MLP has (SwiGLU: its own)
    neurons, labels = cache.stack_neuron_results(1, incl_remainder=True, return_labels=True)
    assert labels[-1] == "remainder" and len(labels) == d_ff + 1 and labels[:2] == ["L0N0", "L0N1"]
    torch.testing.assert_close(neurons.sum(0), cache["blocks.1.hook_resid_pre"], atol=1e-5, rtol=0)
    picked = cache.stack_neuron_results(2, neuron_slice=3)
    assert picked.shape == (2, 2, 7, 32)
    with pytest.raises(HookError, match="neuron_slice is an int"):
        cache.stack_neuron_results(2, neuron_slice="3")
    one = cache.apply_slice_to_batch_dim(slice(1, 2))
    assert one["hook_embed"].shape == (1, 7, 32) and one.remove_batch_dim()["hook_embed"].shape == (7, 32)
    torch.testing.assert_close(one.decompose_resid().sum(0), cache["blocks.1.hook_resid_post"][1], atol=1e-5, rtol=0)
    with pytest.raises(HookError, match="batch of one"):
        cache.remove_batch_dim()


def test_weights_tokens_and_hooks_that_stay(model: zoo.DecoderLM) -> None:
    """W_Q/K/V/O are views of the fused projections by head; to_tokens puts the start
    token first; add_hook keeps a hook until reset_hooks (a permanent one until asked)."""
    assert model.W_Q.shape == (2, 4, 32, 8) and model.W_O.shape == (2, 4, 8, 32) and model.W_U.shape == (32, 97)
    x = torch.randn(32)
    torch.testing.assert_close(
        torch.einsum("d,hdk->hk", x, model.W_Q[1]).flatten(),
        model.blocks[1].attn.qkv(x)[:32]
        - (model.blocks[1].attn.qkv.bias[:32] if model.blocks[1].attn.qkv.bias is not None else 0),
    )
    gpt2 = zoo.tokenizer("gpt2")
    model.tokenizer = gpt2
    assert model.to_tokens("Romeo").tolist() == [[50256, *gpt2.encode("Romeo")]]  # its end-of-text starts a text
    padded = model.to_tokens(["Romeo and Juliet", "Romeo"], prepend_bos=False)
    assert padded.shape == (2, len(gpt2.encode("Romeo and Juliet"))) and padded[1, -1] == 50256
    assert model.to_tokens(["Romeo and Juliet", "Romeo"], padding_side="left")[1, 0] == 50256
    assert model.to_str_tokens("Romeo and") == ["<|endoftext|>", *[gpt2.decode([i]) for i in gpt2.encode("Romeo and")]]
    assert model.to_str_tokens(torch.tensor([[49, 78]])) == ["R", "o"]
    plain = model(TOKENS)

    def zero(x: torch.Tensor, name: str) -> torch.Tensor:
        return torch.zeros_like(x)

    model.add_hook("blocks.1.hook_mlp_out", zero)
    model.add_hook(lambda n: n == "blocks.0.hook_mlp_out", zero, is_permanent=True)
    both = model(TOKENS)
    assert not torch.allclose(both, plain)
    model.reset_hooks()
    kept = model(TOKENS)
    assert not torch.allclose(kept, both) and not torch.allclose(kept, plain)
    model.reset_hooks(including_permanent=True)
    torch.testing.assert_close(model(TOKENS), plain)
    assert model.hook_state is None
    with pytest.raises(HookError, match="dir='fwd'"):
        model.add_hook("blocks.1.hook_mlp_out", zero, dir="bwd")


def test_head_results_sum_to_the_attention_output(model: zoo.DecoderLM) -> None:
    _, cache = model.run_with_cache(TOKENS)
    heads, labels = cache.stack_head_results(return_labels=True)
    assert labels == [f"L{i}H{h}" for i in range(2) for h in range(4)]
    assert heads.shape == (8, 2, 7, 32)
    for layer in range(2):
        bias = getattr(residual_projection(model.blocks[layer].attn), "bias", None)
        total = heads[4 * layer : 4 * layer + 4].sum(0) + (bias if bias is not None else 0)
        torch.testing.assert_close(total, cache[f"blocks.{layer}.hook_attn_out"], atol=1e-5, rtol=0)


def test_the_final_norm_and_logit_attribution_add_up_to_the_logits(model: zoo.DecoderLM) -> None:
    """Each piece through apply_ln_to_stack, times the norm's weight plus its bias, is the
    final norm's output; the pieces' logit attributions plus the bias's are the logits."""
    logits, cache = model.run_with_cache(TOKENS)
    norm = model.final_norm
    bias = norm.bias if getattr(norm, "bias", None) is not None else torch.zeros(32)
    scaled = cache.apply_ln_to_stack(cache.decompose_resid())
    torch.testing.assert_close(scaled.sum(0) * norm.weight + bias, cache["hook_final_norm"], atol=1e-5, rtol=0)
    token = 5
    attrs = cache.logit_attrs(cache.decompose_resid(), tokens=token)
    assert attrs.shape == (len(cache.decompose_resid()), 2, 7) == ((6 if cache.has_pos_embed() else 5), 2, 7)
    torch.testing.assert_close(attrs.sum(0) + bias @ model.head.weight[token], logits[..., token], atol=1e-4, rtol=0)
    per_row = cache.logit_attrs(cache.decompose_resid(pos_slice=-1), tokens=TOKENS[:, 0], pos_slice=-1)
    expected = logits[:, -1].gather(1, TOKENS[:, :1])[:, 0] - model.head.weight[TOKENS[:, 0]] @ bias
    torch.testing.assert_close(per_row.sum(0), expected, atol=1e-4, rtol=0)
    diff = cache.logit_attrs(cache.decompose_resid(), tokens=3, incorrect_tokens=4)
    wanted = logits[..., 3] - logits[..., 4] - bias @ (model.head.weight[3] - model.head.weight[4])
    torch.testing.assert_close(diff.sum(0), wanted, atol=1e-4, rtol=0)


def test_a_block_norm_scales_the_pieces_of_its_input(model: zoo.DecoderLM) -> None:
    """apply_ln at block 1 (its attention's norm, or its MLP's): the pieces, normed, sum to what the norm reads."""
    _, cache = model.run_with_cache(TOKENS)
    for mlp_input, point in ((False, "blocks.1.hook_resid_pre"), (True, "blocks.1.hook_resid_mid")):
        norm, where = cache.norm_at(1, mlp_input)
        assert where == point
        pieces = cache.decompose_resid(layer=1)
        if mlp_input:  # the stream into block 1, then its attention's output
            pieces = torch.stack([cache["blocks.1.hook_resid_pre"], cache["blocks.1.hook_attn_out"]])
        bias = norm.bias if getattr(norm, "bias", None) is not None else 0
        scaled = cache.apply_ln_to_stack(pieces, layer=1, mlp_input=mlp_input)
        torch.testing.assert_close(scaled.sum(0) * norm.weight + bias, norm(cache[point]), atol=1e-5, rtol=0)


def test_the_helpers_refuse_what_they_cannot_use(model: zoo.DecoderLM) -> None:
    _, cache = model.run_with_cache(TOKENS, names=lambda n: "resid" in n)
    with pytest.raises(HookError, match="this cache has no 'hook_embed'"):
        cache.decompose_resid()
    with pytest.raises(HookError, match="layer is 0 .. 2"):
        cache.accumulated_resid(layer=5)
    with pytest.raises(HookError, match="the final norm .layer None. has none"):
        cache.apply_ln_to_stack(cache.accumulated_resid(), mlp_input=True)
    with pytest.raises(HookError, match="mode is 'all', 'attn' or 'mlp'"):
        cache.decompose_resid(mode="heads")


def test_text_goes_where_tokens_go() -> None:
    model = tiny(vocab_size=256)
    tokenizer = zoo.tokenizer("bytes")
    ids = torch.tensor([tokenizer.encode("Romeo")])
    logits, cache = model.run_with_cache("Romeo", tokenizer=tokenizer)
    torch.testing.assert_close(logits, model(ids))
    with pytest.raises(HookError, match="the model has no tokenizer to encode it: pass tokenizer="):
        model.run_with_cache("Romeo")
    model.tokenizer = tokenizer  # a model that carries its tokenizer is read as it
    _, both = model.run_with_cache(["Romeo", "Julie"])
    assert both["hook_embed"].shape[:2] == (2, 5)
    torch.testing.assert_close(model.run_with_hooks("Romeo"), logits)
    with pytest.raises(HookError, match=r"encode to \[4, 5\] tokens"):
        model.run_with_cache(["Romeo", "Juli"])


def test_run_with_hooks_sets_hooks_for_one_call(model: zoo.DecoderLM) -> None:
    def zero(x: torch.Tensor, name: str) -> torch.Tensor:
        return torch.zeros_like(x)

    with model.hooks({"blocks.1.hook_mlp_out": zero}):
        expected = model(TOKENS)
    torch.testing.assert_close(model.run_with_hooks(TOKENS, fwd_hooks=[("blocks.1.hook_mlp_out", zero)]), expected)
    assert model.hook_state is None
    every = run_with_hooks(model, TOKENS, fwd_hooks=[(lambda n: n.endswith("hook_mlp_out"), zero)])
    assert not torch.allclose(every, expected)
    with pytest.raises(HookError, match=r"fwd_hooks are \(name, fn\) pairs"):
        model.run_with_hooks(TOKENS, fwd_hooks=["blocks.1.hook_mlp_out"])
    with pytest.raises(HookError, match="is not a hook point"):
        model.run_with_hooks(TOKENS, fwd_hooks=[("blocks.9.hook_mlp_out", zero)])


def test_patching_over_positions_and_layers(model: zoo.DecoderLM) -> None:
    clean = TOKENS[:1]
    corrupted = clean.clone()
    corrupted[0, 2] = (clean[0, 2] + 1) % 97  # one token differs

    def metric(logits: torch.Tensor) -> torch.Tensor:
        return logits[0, -1].log_softmax(-1)[int(clean[0, -1])]

    grid = patch_grid(model, clean, corrupted, metric)
    recovered = grid.recovered()
    assert grid.values.shape == (2, 7) and grid.point == "hook_resid_pre"
    assert recovered[0, 2] == pytest.approx(1.0, abs=1e-4)  # the differing token, before any block: all of it
    assert recovered[0].abs().sum() - recovered[0, 2].abs() < 1e-5  # the other positions carry nothing yet
    assert not torch.allclose(recovered, torch.ones_like(recovered))  # not trivially 1
    _, cache = model.run_with_cache(clean, names=["blocks.1.hook_resid_pre"])

    def one(x: torch.Tensor, name: str) -> torch.Tensor:
        x = x.clone()
        x[:, 4] = cache["blocks.1.hook_resid_pre"][:, 4]
        return x

    with torch.no_grad():
        manual = float(metric(model.run_with_hooks(corrupted, fwd_hooks=[("blocks.1.hook_resid_pre", one)])))
    assert grid.values[1, 4] == pytest.approx(manual, abs=1e-6)
    heads = patch_grid(model, clean, corrupted, metric, point="hook_attn_out")
    assert heads.values.shape == (2, 7)


def test_q_k_v_map_to_transformer_lens_layout(model: zoo.DecoderLM) -> None:
    """The zoo keeps (B, H, S, dk) as the kernel reads q, k, v; to_transformer_lens gives
    TransformerLens's name and (B, S, H, dk)."""
    _, cache = model.run_with_cache(TOKENS)
    q = cache["blocks.0.attn.hook_q"]
    assert q.shape == (2, 4, 7, 8)
    name, theirs = to_transformer_lens("blocks.0.attn.hook_q", q)
    assert name == "blocks.0.attn.hook_q" and theirs.shape == (2, 7, 4, 8)
    torch.testing.assert_close(theirs[:, 3, 1], q[:, 1, 3])
    assert to_transformer_lens("blocks.1.attn.hook_scores", q)[0] == "blocks.1.attn.hook_attn_scores"
    z = cache["blocks.0.attn.hook_z"]
    assert to_transformer_lens("blocks.0.attn.hook_z", z) == ("blocks.0.attn.hook_z", z)  # already (B, S, H, dk)


@pytest.mark.slow  # booting TransformerLens takes seconds
def test_the_helpers_equal_transformer_lens_on_the_same_gpt2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """TransformerLens with the final norm's weight folded into W_U (and nothing else
    changed, so the stream is the same): every helper's numbers and labels."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    bridge_module = pytest.importorskip("transformer_lens.model_bridge")
    from test_hooks import VOCAB, hf_model, ids

    reference, folder = hf_model(tmp_path, "gpt2")
    bridge = bridge_module.TransformerBridge.boot_transformers(str(folder), hf_model=reference, tokenizer=None)
    bridge.enable_compatibility_mode(
        disable_warnings=True, fold_ln=True, center_writing_weights=False, center_unembed=False, fold_value_biases=False
    )
    model = zoo.from_hf(folder)
    idx = ids(2, 9, vocab=VOCAB)
    _, theirs = bridge.run_with_cache(idx)
    _, ours = model.run_with_cache(idx)
    calls: list[tuple[str, dict[str, Any]]] = [
        ("accumulated_resid", {"incl_mid": True, "return_labels": True}),
        ("accumulated_resid", {"apply_ln": True, "return_labels": True}),
        ("accumulated_resid", {"layer": 2, "return_labels": True}),
        ("decompose_resid", {"return_labels": True}),
        ("decompose_resid", {"apply_ln": True, "pos_slice": -1, "return_labels": True}),
        ("decompose_resid", {"layer": 1, "mode": "mlp", "return_labels": True}),
        ("stack_head_results", {"return_labels": True}),
        ("stack_head_results", {"apply_ln": True, "pos_slice": -1, "return_labels": True}),
        ("accumulated_resid", {"layer": 2, "apply_ln": True, "return_labels": True}),  # block 2's ln1
        ("decompose_resid", {"layer": 1, "apply_ln": True, "return_labels": True}),
        ("stack_head_results", {"layer": 2, "apply_ln": True, "return_labels": True}),
    ]
    for method, kwargs in calls:
        (mine, my_labels), (tl, tl_labels) = getattr(ours, method)(**kwargs), getattr(theirs, method)(**kwargs)
        assert my_labels == tl_labels, method
        torch.testing.assert_close(mine, tl, atol=1e-4, rtol=1e-4, msg=f"{method} {kwargs}")
    pieces_ours, pieces_theirs = ours.decompose_resid(), theirs.decompose_resid()
    torch.testing.assert_close(
        ours.apply_ln_to_stack(pieces_ours), theirs.apply_ln_to_stack(pieces_theirs), atol=1e-4, rtol=1e-4
    )
    for tokens, incorrect in ((5, None), (idx[:, -1], None), (idx, None), (3, 4)):
        mine = ours.logit_attrs(pieces_ours, tokens=tokens, incorrect_tokens=incorrect)
        tl = theirs.logit_attrs(pieces_theirs, tokens=tokens, incorrect_tokens=incorrect)
        torch.testing.assert_close(mine, tl, atol=1e-4, rtol=1e-4)


def _lens_pair(tmp_path: Path, family: str) -> tuple[Any, zoo.DecoderLM, torch.Tensor]:
    """TransformerLens's bridge (nothing folded) and the zoo model on one transformers
    model and one word-level tokenizer (``t0`` .. ``t96``, BOS ``t1``, EOS and pad ``t2``)."""
    bridge_module = pytest.importorskip("transformer_lens.model_bridge")
    from test_hooks import VOCAB, hf_model, ids
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    if family != "gpt2":
        pytest.importorskip("zoo_modern")
    reference, folder = hf_model(tmp_path, family)
    words = Tokenizer(models.WordLevel({f"t{i}": i for i in range(VOCAB)}, unk_token="t0"))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=words, unk_token="t0", bos_token="t1", eos_token="t2", pad_token="t2"
    )
    fast.save_pretrained(folder)
    bridge = bridge_module.TransformerBridge.boot_transformers(str(folder), hf_model=reference, tokenizer=None)
    bridge.enable_compatibility_mode(
        disable_warnings=True,
        fold_ln=False,
        center_writing_weights=False,
        center_unembed=False,
        fold_value_biases=False,
    )
    return bridge, zoo.from_hf(folder), ids(2, 9, vocab=VOCAB)


def _same(mine: Any, theirs: Any, what: str) -> None:
    if isinstance(theirs, tuple):
        assert mine[1] == theirs[1], what
        mine, theirs = mine[0], theirs[0]
    torch.testing.assert_close(mine.detach(), theirs.detach(), atol=1e-4, rtol=1e-4, msg=what)


@pytest.mark.slow  # booting TransformerLens takes seconds
@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_the_rest_of_transformer_lens_equals_its_bridge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, family: str
) -> None:
    """On GPT-2 and a rotary model: the decompositions (7 pieces where TransformerLens has
    7, no pos_embed on rotary), neuron and head results, batch slicing, the weights by
    head, tokens, hooks that stay, and per-head patching, each TransformerLens's numbers
    and labels."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from transformer_lens import patching

    bridge, model, idx = _lens_pair(tmp_path, family)
    _, theirs = bridge.run_with_cache(idx)
    _, ours = model.run_with_cache(idx)
    calls: list[tuple[str, dict[str, Any]]] = [
        ("decompose_resid", {"return_labels": True}),
        ("decompose_resid", {"layer": 1, "mlp_input": True, "return_labels": True}),
        ("get_full_resid_decomposition", {"return_labels": True}),
        ("get_full_resid_decomposition", {"expand_neurons": False, "return_labels": True}),
        ("get_full_resid_decomposition", {"layer": 1, "mlp_input": True, "return_labels": True}),
        ("get_full_resid_decomposition", {"apply_ln": True, "pos_slice": -1, "return_labels": True}),
        ("stack_neuron_results", {"layer": -1, "return_labels": True}),
        (
            "stack_neuron_results",
            {"layer": 2, "neuron_slice": slice(0, 5), "incl_remainder": True, "return_labels": True},
        ),
        ("stack_neuron_results", {"layer": 2, "apply_ln": True, "pos_slice": 3, "return_labels": True}),
    ]
    for method, kwargs in calls:
        _same(getattr(ours, method)(**kwargs), getattr(theirs, method)(**kwargs), f"{method} {kwargs}")
    assert len(ours.decompose_resid()) == len(theirs.decompose_resid()) == (8 if family == "gpt2" else 7)
    ours.compute_head_results()
    theirs.compute_head_results()
    _same(ours["blocks.1.attn.hook_result"], theirs["blocks.1.attn.hook_result"], "compute_head_results")
    one, their_one = ours.apply_slice_to_batch_dim(1), theirs.apply_slice_to_batch_dim(1)
    _same(one.decompose_resid(return_labels=True), their_one.decompose_resid(return_labels=True), "batch 1")
    first, their_first = ours.apply_slice_to_batch_dim(slice(0, 1)), theirs.apply_slice_to_batch_dim(slice(0, 1))
    first.remove_batch_dim(), their_first.remove_batch_dim()
    _same(first.accumulated_resid(return_labels=True), their_first.accumulated_resid(return_labels=True), "no batch")
    for name in ("W_E", "W_Q", "W_K", "W_V", "W_O", "W_U", *(("W_pos",) if family == "gpt2" else ())):
        _same(getattr(model, name), getattr(bridge, name), name)
    if family != "gpt2":
        with pytest.raises(HookError, match="learned position table"):
            _ = model.W_pos
    texts = [" t5 t6 t7", " t8 t9 t10"]
    for bos in (True, False):
        assert torch.equal(model.to_tokens(texts, prepend_bos=bos), bridge.to_tokens(texts, prepend_bos=bos))
        assert model.to_str_tokens(texts[0], prepend_bos=bos) == bridge.to_str_tokens(texts[0], prepend_bos=bos)
    assert model.to_str_tokens(idx[0]) == bridge.to_str_tokens(idx[0])

    def zero(x: torch.Tensor, hook: Any) -> torch.Tensor:
        return torch.zeros_like(x)

    plain = model(idx)
    for lm in (model, bridge):
        lm.add_hook("blocks.0.hook_mlp_out", zero)
    _same(model(idx), bridge(idx), "add_hook")
    assert not torch.allclose(model(idx), plain)
    for lm in (model, bridge):
        lm.reset_hooks()
    _same(model(idx), plain, "reset_hooks")
    corrupted = idx.clone()
    corrupted[:, 3] = (idx[:, 3] + 1) % 97

    def metric(logits: torch.Tensor) -> torch.Tensor:
        return logits[:, -1].log_softmax(-1)[:, 5].mean()

    grid = zoo.nn.patching.get_act_patch_attn_head_out_by_pos(model, corrupted, ours, metric)
    with torch.no_grad():
        their_grid = patching.get_act_patch_attn_head_out_by_pos(bridge, corrupted, theirs, metric)
    assert grid.shape == (3, 9, 4)
    _same(grid, their_grid, "per-head patching")
    assert grid.std() > 0  # not one value everywhere

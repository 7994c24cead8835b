"""Hugging Face GPT-2 interop: real transformers models, saved locally, in and out."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file

import zoo
from helpers import TINY, tiny
from zoo.interop.hf import config_to_hf

transformers = pytest.importorskip("transformers")
GPT2Config, GPT2LMHeadModel = transformers.GPT2Config, transformers.GPT2LMHeadModel

VOCAB = 101


def randomise_(model: torch.nn.Module, seed: int = 0) -> None:
    """Every parameter random (norm scales around 1), so a swapped or dropped tensor shows."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=p.dtype) * 0.1
            is_scale = "ln" in name or "norm" in name
            p.copy_(noise + 1.0 if is_scale and name.endswith("weight") else noise)


def hf_gpt2(tmp_path: Path, name: str = "hf", seed: int = 0, **config: Any) -> tuple[Any, Path]:
    """A seeded, fully random GPT2LMHeadModel saved with save_pretrained; (model, folder)."""
    torch.manual_seed(seed)
    fields = dict(n_embd=32, n_layer=2, n_head=4, n_positions=64, vocab_size=VOCAB, bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(GPT2Config(**{**fields, **config})).eval()
    randomise_(model, seed)
    folder = tmp_path / name
    model.save_pretrained(folder)
    return model, folder


def inputs(batch: int = 2, seq: int = 64, vocab: int = VOCAB) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, seq), generator=torch.Generator().manual_seed(1))


def assert_same_logits(model: Any, reference: Any, vocab: int = VOCAB) -> None:
    idx = inputs(vocab=vocab)
    with torch.no_grad():
        ours = model(idx)
        theirs = reference(idx).logits
    torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=0)


@pytest.mark.parametrize(
    "shape",
    [
        dict(n_layer=2, n_embd=32, n_head=2, activation_function="gelu_new", layer_norm_epsilon=1e-5),
        dict(n_layer=3, n_embd=64, n_head=4, activation_function="gelu", layer_norm_epsilon=1e-6),
        dict(n_layer=4, n_embd=128, n_head=4, activation_function="gelu_new", layer_norm_epsilon=1e-6),
        dict(n_layer=2, n_embd=48, n_head=3, activation_function="relu", n_inner=80),
        dict(n_layer=2, n_embd=32, n_head=4, activation_function="gelu_pytorch_tanh", tie_word_embeddings=False),
    ],
    ids=["L2-d32-h2-gelu_new", "L3-d64-h4-gelu-eps1e-6", "L4-d128-h4", "relu-n_inner80", "untied"],
)
def test_from_hf_matches_transformers(tmp_path: Path, shape: dict[str, Any]) -> None:
    reference, folder = hf_gpt2(tmp_path, **shape)
    model = zoo.from_hf(folder)
    assert not model.training
    c = model.config
    assert (c.n_layers, c.d_model, c.n_heads, c.max_seq_len, c.vocab_size) == (
        shape["n_layer"],
        shape["n_embd"],
        shape["n_head"],
        64,
        VOCAB,
    )
    assert c.d_ff == shape.get("n_inner") or c.d_ff == 4 * c.d_model
    assert c.norm_eps == shape.get("layer_norm_epsilon", 1e-5)
    assert c.tie_embeddings == shape.get("tie_word_embeddings", True)
    assert (model.head.weight is model.tok_emb.weight) == c.tie_embeddings
    assert_same_logits(model, reference)


def test_from_hf_maps_dropouts_and_keeps_gpt2_small_layout(tmp_path: Path) -> None:
    _, folder = hf_gpt2(tmp_path, embd_pdrop=0.1, attn_pdrop=0.2, resid_pdrop=0.3)
    config = zoo.from_hf(folder).config
    assert (config.dropout.embedding, config.dropout.attention, config.dropout.residual) == (0.1, 0.2, 0.3)
    gpt2 = zoo.get_config("gpt2-small")
    for kind in ("placement", "norm", "position", "mlp", "activation"):
        assert getattr(config, kind) == getattr(gpt2, kind)


def rewrite_weights(folder: Path, edit: Any) -> None:
    """Replace the folder's weights by ``edit(tensors)`` (which may write other files)."""
    tensors = load_file(folder / "model.safetensors")
    (folder / "model.safetensors").unlink()
    edit(tensors)


@pytest.mark.parametrize(
    "variant", ["no_prefix", "mask_buffers", "lm_head_stored", "sharded", "pytorch_bin", "bin_sharded"]
)
def test_from_hf_reads_real_checkpoint_variants(tmp_path: Path, variant: str) -> None:
    reference, folder = hf_gpt2(tmp_path)

    def no_prefix(t: dict[str, torch.Tensor]) -> None:
        save_file(
            {k.removeprefix("transformer."): v for k, v in t.items()}, folder / "model.safetensors", {"format": "pt"}
        )

    def mask_buffers(t: dict[str, torch.Tensor]) -> None:
        for i in range(2):  # what transformers < 4.x saved: a causal mask and its fill value
            t[f"h.{i}.attn.bias"] = torch.tril(torch.ones(64, 64, dtype=torch.uint8))[None, None]
            t[f"h.{i}.attn.masked_bias"] = torch.tensor(-1e4)
        save_file(
            {k.removeprefix("transformer."): v for k, v in t.items()}, folder / "model.safetensors", {"format": "pt"}
        )

    def lm_head_stored(t: dict[str, torch.Tensor]) -> None:
        t["lm_head.weight"] = t["transformer.wte.weight"].clone()
        save_file(t, folder / "model.safetensors", {"format": "pt"})

    def sharded(t: dict[str, torch.Tensor], suffix: str = "safetensors") -> None:
        names = sorted(t)
        halves = {f"model-0000{i + 1}-of-00002.{suffix}": names[i::2] for i in range(2)}
        for file, keys in halves.items():
            part = {k: t[k].clone() for k in keys}
            if suffix == "safetensors":
                save_file(part, folder / file, {"format": "pt"})
            else:
                torch.save(part, folder / file)
        index = {"metadata": {}, "weight_map": {k: f for f, keys in halves.items() for k in keys}}
        index_name = "model.safetensors.index.json" if suffix == "safetensors" else "pytorch_model.bin.index.json"
        (folder / index_name).write_text(json.dumps(index))

    def pytorch_bin(t: dict[str, torch.Tensor]) -> None:
        torch.save(t, folder / "pytorch_model.bin")

    edits = {
        "no_prefix": no_prefix,
        "mask_buffers": mask_buffers,
        "lm_head_stored": lm_head_stored,
        "sharded": sharded,
        "pytorch_bin": pytorch_bin,
        "bin_sharded": lambda t: sharded(t, "bin"),
    }
    rewrite_weights(folder, edits[variant])
    assert_same_logits(zoo.from_hf(folder), reference)


def edit_config(folder: Path, **changes: Any) -> None:
    path = folder / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        (dict(scale_attn_by_inverse_layer_idx=True), "scale_attn_by_inverse_layer_idx"),
        (dict(reorder_and_upcast_attn=True), "reorder_and_upcast_attn"),
        (dict(add_cross_attention=True), "cross-attention"),
        (dict(scale_attn_weights=False), "scale_attn_weights"),
        (dict(activation_function="quick_gelu"), "quick_gelu"),
        (dict(model_type="llama"), "llama"),
        (dict(pruned_heads={"0": [1]}), "pruned"),
        (dict(n_embd=30, n_head=4), "divisible"),
    ],
)
def test_from_hf_refuses_what_it_cannot_model(tmp_path: Path, changes: dict[str, Any], words: str) -> None:
    _, folder = hf_gpt2(tmp_path)
    edit_config(folder, **changes)
    with pytest.raises(zoo.InteropError, match=words):
        zoo.from_hf(folder)


def test_from_hf_refuses_cross_attention_weights_even_without_the_flag(tmp_path: Path) -> None:
    _, folder = hf_gpt2(tmp_path, add_cross_attention=True)
    edit_config(folder, add_cross_attention=False)
    with pytest.raises(zoo.InteropError, match="crossattention"):
        zoo.from_hf(folder)


def test_from_hf_reports_shape_and_file_problems(tmp_path: Path) -> None:
    _, folder = hf_gpt2(tmp_path)
    edit_config(folder, n_positions=128)
    with pytest.raises(zoo.InteropError, match=r"wpe\.weight.*\(64, 32\).*\(128, 32\)"):
        zoo.from_hf(folder)
    with pytest.raises(zoo.InteropError, match="no config.json"):
        zoo.from_hf(tmp_path)
    (folder / "model.safetensors").unlink()
    with pytest.raises(zoo.InteropError, match="no weights"):
        zoo.from_hf(folder)


class NotATensor:
    """A pickled object a weights-only load must refuse."""


def test_from_hf_never_unpickles_code(tmp_path: Path) -> None:
    _, folder = hf_gpt2(tmp_path)
    rewrite_weights(folder, lambda t: torch.save({**t, "payload": NotATensor()}, folder / "pytorch_model.bin"))
    with pytest.raises(zoo.InteropError, match="safely"):
        zoo.from_hf(folder)


def test_from_hf_dtype_attention_and_missing_tensors(tmp_path: Path) -> None:
    reference, folder = hf_gpt2(tmp_path)
    assert zoo.from_hf(folder, dtype=torch.bfloat16).tok_emb.weight.dtype == torch.bfloat16
    eager = zoo.from_hf(folder, attention="eager")
    assert eager.config.attention.name == "eager"
    assert_same_logits(eager, reference)
    with pytest.raises(zoo.InteropError, match="attention='gqa'"):
        zoo.from_hf(folder, attention="gqa")
    rewrite_weights(
        folder,
        lambda t: save_file(
            {k: v for k, v in t.items() if "ln_2" not in k}, folder / "model.safetensors", {"format": "pt"}
        ),
    )
    with pytest.raises(zoo.InteropError, match=r"missing.*h\.0\.ln_2\.weight"):
        zoo.from_hf(folder)


# -- export ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        dict(activation="gelu"),
        dict(activation="relu", d_ff=72),
        dict(activation="silu", tie_embeddings=False),
        dict(attention="eager", norm_eps=1e-6),
    ],
    ids=["gpt2", "gelu", "relu-d_ff72", "silu-untied", "eager-eps1e-6"],
)
def test_to_hf_loads_in_transformers_with_the_same_logits(tmp_path: Path, overrides: dict[str, Any]) -> None:
    model = tiny(**overrides)
    randomise_(model)
    folder = zoo.to_hf(model, tmp_path / "export")
    assert sorted(p.name for p in folder.iterdir()) == [".zoo-folder.json", "config.json", "model.safetensors"]
    reference = GPT2LMHeadModel.from_pretrained(folder).eval()
    assert_same_logits(model, reference, vocab=TINY["vocab_size"])
    back = zoo.from_hf(folder)
    assert back.config.model_dump(exclude={"attention"}) == model.config.model_dump(exclude={"attention"})
    for (name, ours), (_, theirs) in zip(model.state_dict().items(), back.state_dict().items(), strict=True):
        assert torch.equal(ours, theirs), name


def test_gpt2_presets_export_transformers_own_defaults() -> None:
    ours = config_to_hf(zoo.get_config("gpt2-small"))
    theirs = GPT2Config().to_dict()
    for key, value in ours.items():
        if key in theirs and key not in ("n_inner", "architectures", "dtype"):
            assert theirs[key] == value, key
    assert ours["n_inner"] == 3072


GPT2_EXPRESSIBLE = {
    "attention": {"sdpa", "eager"},
    "norm": {"layernorm"},
    "placement": {"pre"},
    "activation": {"gelu", "gelu_tanh", "relu", "silu"},
    "position": {"learned"},
    "mlp": {"standard"},
}


@pytest.mark.parametrize(
    "component",
    [c for c in zoo.components() if c.kind in GPT2_EXPRESSIBLE],
    ids=lambda c: f"{c.kind}-{c.name}",
)
def test_to_hf_names_the_component_that_blocks_it(tmp_path: Path, component: zoo.Component) -> None:
    model = tiny(**{component.kind: component.name})
    if component.name in GPT2_EXPRESSIBLE[component.kind]:
        reference = GPT2LMHeadModel.from_pretrained(zoo.to_hf(model, tmp_path / "ok")).eval()
        assert_same_logits(model, reference, vocab=TINY["vocab_size"])
    else:
        with pytest.raises(zoo.InteropError, match=rf"{component.kind} '{component.name}'"):
            zoo.to_hf(model, tmp_path / "refused", architecture="GPT2LMHeadModel")
        assert not (tmp_path / "refused").exists()


@pytest.mark.parametrize(
    ("overrides", "words"),
    [
        (dict(embedding_scale="sqrt_d_model"), "embedding_scale"),
        (dict(head_output="log_softmax"), "head_output"),
        (dict(logit_scale=0.5), "logit_scale"),
        (dict(embedding_scale=2.0), "embedding_scale"),
        (dict(bias=False), "bias=false"),
        (dict(final_norm=False), "final_norm"),
    ],
)
def test_to_hf_refuses_config_switches_gpt2_lacks(tmp_path: Path, overrides: dict[str, Any], words: str) -> None:
    with pytest.raises(zoo.InteropError, match=words):
        zoo.to_hf(tiny(**overrides), tmp_path / "refused")


@pytest.mark.parametrize("preset", zoo.list_models())
def test_to_hf_accepts_exactly_the_gpt2_presets(preset: str) -> None:
    config = zoo.get_config(preset)
    if preset in ("gpt2-small", "gpt2-medium", "gpt2-large", "gpt2-xl"):
        hf = config_to_hf(config)
        assert (hf["n_embd"], hf["n_layer"], hf["n_head"]) == (config.d_model, config.n_layers, config.n_heads)
    else:
        with pytest.raises(zoo.InteropError, match="cannot be written as a Hugging Face model: as GPT2LMHeadModel"):
            config_to_hf(config, architecture="GPT2LMHeadModel")


def test_an_export_refusal_lists_the_nearest_architectures_and_counts_the_rest() -> None:
    """Every exporter's reasons in one line are unreadable: the nearest, in full, then a count."""
    from zoo.interop.hf import NEAREST

    config = zoo.get_config("transformer-2017")
    exporters = [e for e in zoo.nn.registry.default_registry().converters() if e.exports]
    with pytest.raises(zoo.InteropError) as err:
        config_to_hf(config)
    message = str(err.value)
    assert message.count(" | as ") == min(NEAREST, len(exporters)) - 1
    rest = len(exporters) - NEAREST
    assert (f"({rest} other architecture(s) differ at least as much; name one with --architecture" in message) == (
        rest > 0
    )
    # BioGPT differs least: three switches (its head's output, its placement, its positions); GPT-2 by four
    assert message.index("as BioGptForCausalLM") < message.index(" | as ")


def test_import_save_load_keeps_logits(tmp_path: Path) -> None:
    reference, folder = hf_gpt2(tmp_path)
    path = zoo.save(zoo.from_hf(folder), tmp_path / "imported.safetensors")
    assert_same_logits(zoo.load(path), reference)


def test_paths_and_dtypes_that_cannot_work_are_interop_errors(tmp_path: Path) -> None:
    model = zoo.build("gpt2-small", vocab_size=97, max_seq_len=16, d_model=16, n_layers=1, n_heads=2)
    (tmp_path / "file").write_text("x", encoding="utf-8")
    with pytest.raises(zoo.InteropError, match=r"cannot write the Hugging Face folder"):
        zoo.to_hf(model, tmp_path / "file")
    for path in ("", 3):
        with pytest.raises(zoo.InteropError, match="give a folder path"):
            zoo.to_hf(model, path)  # type: ignore[arg-type]
        with pytest.raises(zoo.InteropError, match="give a folder path"):
            zoo.from_hf(path)  # type: ignore[arg-type]
    zoo.to_hf(model, tmp_path / "out")
    with pytest.raises(zoo.InteropError, match="dtype must be a floating-point dtype"):
        zoo.from_hf(tmp_path / "out", dtype=torch.int8)


def test_to_hf_files_get_the_umask_mode_not_0600(tmp_path: Path) -> None:
    model = zoo.build("gpt2-small", vocab_size=97, max_seq_len=16, d_model=16, n_layers=1, n_heads=2)
    (tmp_path / "plain").write_text("x", encoding="utf-8")
    expected = (tmp_path / "plain").stat().st_mode & 0o777
    folder = zoo.to_hf(model, tmp_path / "out")
    names = (".zoo-folder.json", "config.json", "model.safetensors")
    assert {(folder / name).stat().st_mode & 0o777 for name in names} == {expected}
    assert sorted(p.name for p in folder.iterdir()) == list(names)


def set_tensor(folder: Path, name: str, tensor: torch.Tensor) -> None:
    tensors = load_file(folder / "model.safetensors")
    save_file({**tensors, name: tensor.contiguous()}, folder / "model.safetensors", metadata={"format": "pt"})


def test_tied_config_with_a_different_stored_head_loads_untied_like_transformers(tmp_path: Path) -> None:
    """tie_word_embeddings=true but lm_head.weight differs from wte: transformers keeps the
    stored head (and warns); the zoo must compute the same logits, never silently tie."""
    _, folder = hf_gpt2(tmp_path)
    head = torch.randn(VOCAB, 32, generator=torch.Generator().manual_seed(5))
    set_tensor(folder, "lm_head.weight", head)
    reference = GPT2LMHeadModel.from_pretrained(folder).eval()
    assert torch.equal(reference.lm_head.weight, head)  # transformers kept it
    with pytest.warns(UserWarning, match="ties the head.*differs"):
        model = zoo.from_hf(folder)
    assert not model.config.tie_embeddings and torch.equal(model.head.weight, head)
    assert_same_logits(model, reference)
    # A stored head equal to wte is the tied model, loaded tied and without a warning.
    set_tensor(folder, "lm_head.weight", load_file(folder / "model.safetensors")["transformer.wte.weight"].clone())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert zoo.from_hf(folder).config.tie_embeddings

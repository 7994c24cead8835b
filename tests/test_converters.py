"""Hugging Face converters from plugins: zoo-modern's Llama, Mistral, Qwen2 and GPT-NeoX,
and a converter a test registers inline. Every model here is a random, small transformers
model saved locally; imports must equal transformers' logits and greedy tokens, exports
must load in transformers with equal logits."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from family_cases import all_cases
from safetensors.torch import load_file

import zoo

transformers = pytest.importorskip("transformers")
pytest.importorskip("zoo_modern")

VOCAB = 97
SEQ = 24


def randomise_(model: torch.nn.Module, seed: int = 0) -> None:
    """Every parameter random (norm scales around 1), so a swapped or dropped tensor shows."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=p.dtype) * 0.2
            is_scale = "norm" in name and name.endswith("weight")
            p.copy_(noise + 1.0 if is_scale else noise)


def hf_model(tmp_path: Path, family: str, seed: int = 0, name: str = "hf", **fields: Any) -> tuple[Any, Path]:
    """A seeded random transformers causal LM of ``family`` saved with save_pretrained."""
    config_class, model_class = FAMILIES[family]
    torch.manual_seed(seed)
    base = {**BASE[family], "vocab_size": VOCAB, "bos_token_id": None, "eos_token_id": None, "pad_token_id": None}
    model = model_class(config_class(**{**base, **fields})).eval()
    randomise_(model, seed)
    model.tie_weights()
    folder = tmp_path / name
    model.save_pretrained(folder)
    return model, folder


def ids(batch: int = 2, seq: int = SEQ, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, seq), generator=torch.Generator().manual_seed(seed))


def assert_same(model: zoo.DecoderLM, reference: Any, seq: int = SEQ) -> None:
    """Equal logits (<= 1e-4) and equal greedy tokens."""
    idx = ids(seq=seq)
    with torch.no_grad():
        torch.testing.assert_close(model(idx), reference(idx).logits, atol=1e-4, rtol=0)
        prompt = idx[:, : seq // 2]
        new = seq - prompt.shape[1]
        ours = model.generate(prompt, new)
        theirs = reference.generate(
            prompt, max_new_tokens=new, min_new_tokens=new, do_sample=False, attention_mask=torch.ones_like(prompt)
        )
    assert torch.equal(ours, theirs)


def roundtrip(tmp_path: Path, family: str, **fields: Any) -> zoo.DecoderLM:
    """Import a random model, compare with transformers, export, reload, compare again."""
    reference, folder = hf_model(tmp_path, family, **fields)
    model = zoo.from_hf(folder)
    assert_same(model, reference)
    out = zoo.to_hf(model, tmp_path / "out", architecture=FAMILIES[family][1].__name__)
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == [FAMILIES[family][1].__name__]
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    assert type(reloaded) is type(reference)
    with torch.no_grad():
        torch.testing.assert_close(reloaded(ids()).logits, reference(ids()).logits, atol=1e-4, rtol=0)
    assert_same(zoo.from_hf(out), reloaded)  # and back again
    return model


FAMILIES = {
    "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
    "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM),
    "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
    "gpt_neox": (transformers.GPTNeoXConfig, transformers.GPTNeoXForCausalLM),
    "gpt2": (transformers.GPT2Config, transformers.GPT2LMHeadModel),
}
BASE: dict[str, dict[str, Any]] = {
    "llama": {
        "hidden_size": 32,
        "intermediate_size": 40,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "max_position_embeddings": 64,
    },
    "mistral": {
        "hidden_size": 32,
        "intermediate_size": 40,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 64,
        "sliding_window": None,
    },
    "qwen2": {
        "hidden_size": 32,
        "intermediate_size": 40,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 64,
    },
    "gpt_neox": {
        "hidden_size": 32,
        "intermediate_size": 48,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "max_position_embeddings": 64,
    },
    "gpt2": {"n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 64},
}


# -- GPT-2, the built-in converter ---------------------------------------------------------------


@pytest.mark.parametrize(
    "fields", [{}, {"tie_word_embeddings": False, "activation_function": "gelu"}], ids=["tied", "untied-gelu"]
)
def test_gpt2_generates_the_same_tokens_both_ways(tmp_path: Path, fields: dict[str, Any]) -> None:
    roundtrip(tmp_path, "gpt2", **fields)


# -- Llama ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields",
    [
        {"num_key_value_heads": 4},
        {"num_key_value_heads": 2, "rope_theta": 500000.0, "rms_norm_eps": 1e-5},
        {"num_key_value_heads": 1, "tie_word_embeddings": True},
        {
            "hidden_size": 48,
            "num_attention_heads": 6,
            "num_key_value_heads": 3,
            "num_hidden_layers": 3,
            "intermediate_size": 64,
        },
    ],
    ids=["mha", "gqa2-theta5e5", "mqa-tied", "h6-kv3-L3"],
)
def test_llama_imports_and_exports_exactly(tmp_path: Path, fields: dict[str, Any]) -> None:
    model = roundtrip(tmp_path, "llama", **fields)
    heads = fields.get("num_attention_heads", 4)
    assert model.blocks[0].attn.qkv.weight.shape[0] == fields.get("hidden_size", 32) + 2 * fields[
        "num_key_value_heads"
    ] * (fields.get("hidden_size", 32) // heads)
    assert model.config.tie_embeddings is bool(fields.get("tie_word_embeddings", False))


def test_modern_preset_exports_as_llama_and_back(tmp_path: Path) -> None:
    model = zoo.build(
        "gpt2-small-modern",
        n_layers=2,
        d_model=64,
        n_heads=4,
        vocab_size=VOCAB,
        max_seq_len=64,
        attention={"name": "gqa", "n_kv_heads": 2},
    )
    randomise_(model)
    model.eval()
    out = zoo.to_hf(model, tmp_path / "llama")
    reference = transformers.LlamaForCausalLM.from_pretrained(out).eval()
    assert_same(model, reference)


@pytest.mark.parametrize(
    ("fields", "setting"),
    [
        ({"attention_bias": True}, "attention_bias"),
        ({"mlp_bias": True}, "mlp_bias"),
        ({"hidden_act": "gelu"}, "hidden_act"),
        ({"rope_scaling": {"rope_type": "longrope", "factor": 2.0}}, "rope_type"),  # linear and others: read
        ({"head_dim": 16}, "head_dim"),
    ],
)
def test_llama_refuses_settings_it_does_not_model(tmp_path: Path, fields: dict[str, Any], setting: str) -> None:
    _, folder = hf_model(tmp_path, "llama")
    config = json.loads((folder / "config.json").read_text())
    config.update(fields)
    if "rope_scaling" in fields:
        config.pop("rope_parameters", None)
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(zoo.InteropError, match=setting):
        zoo.from_hf(folder)


# -- Mistral -------------------------------------------------------------------------------


def test_mistral_imports_and_exports_exactly(tmp_path: Path) -> None:
    roundtrip(tmp_path, "mistral")


def test_mistral_sliding_window_shorter_than_the_context_is_exact(tmp_path: Path) -> None:
    model = roundtrip(tmp_path, "mistral", sliding_window=5)
    assert model.config.attention.options["window"] == 5 and model.blocks[0].window == 5
    reference, folder = hf_model(tmp_path, "mistral", name="wide", sliding_window=64)  # = max_position_embeddings
    wide = zoo.from_hf(folder)
    assert_same(wide, reference)
    assert "window" not in wide.config.attention.options  # a window over the whole context changes nothing


# -- registry and dispatch -------------------------------------------------------------------


def test_converters_are_listed_with_their_providers() -> None:
    found = {c.architecture: c for c in zoo.default_registry().converters()}
    assert found["GPT2LMHeadModel"].provider.startswith("zoo-lm ")
    for architecture in ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "GPTNeoXForCausalLM"):
        assert found[architecture].plugin.distribution == "zoo-lm-modern" and found[architecture].exports


def test_unknown_architecture_names_installed_converters_and_the_plugin(tmp_path: Path) -> None:
    _, folder = hf_model(tmp_path, "llama")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(
        json.dumps({**config, "architectures": ["RwkvForCausalLM"], "model_type": "rwkv"})
    )
    with pytest.raises(zoo.InteropError, match="RwkvForCausalLM.*GPT2LMHeadModel.*LlamaForCausalLM"):
        zoo.from_hf(folder)
    # Without zoo-modern a Llama folder names the plugin that reads it.
    (folder / "config.json").write_text(json.dumps(config))
    builtins_only = zoo.Registry(entry_points=False)
    with pytest.raises(
        zoo.InteropError,
        match="LlamaForCausalLM.*Installed converters: GPT2LMHeadModel.*plugin zoo-lm-modern.*pip install ./examples/zoo-modern\\)",
    ):
        zoo.from_hf(folder, registry=builtins_only)


# -- GPT-NeoX (Pythia) -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields",
    [
        {"rotary_pct": 0.25},
        {"rotary_pct": 0.5, "use_parallel_residual": False, "rotary_emb_base": 500.0},
        {"rotary_pct": 1.0, "tie_word_embeddings": True, "hidden_act": "gelu_new"},
        {
            "hidden_size": 48,
            "num_attention_heads": 3,
            "num_hidden_layers": 3,
            "rotary_pct": 0.25,
            "layer_norm_eps": 1e-6,
        },
    ],
    ids=["pythia-like", "sequential-half-rotary", "full-rotary-tied", "h3-L3"],
)
def test_gpt_neox_imports_and_exports_exactly(tmp_path: Path, fields: dict[str, Any]) -> None:
    pct = fields.pop("rotary_pct")
    base = fields.pop("rotary_emb_base", 10000.0)
    fields["rope_parameters"] = {"rope_type": "default", "rope_theta": base, "partial_rotary_factor": pct}
    model = roundtrip(tmp_path, "gpt_neox", **fields)
    assert model.config.placement.name == ("parallel" if fields.get("use_parallel_residual", True) else "pre")
    head_dim = model.config.head_dim
    assert model.config.position.options.get("rotary_dim") == (None if pct == 1.0 else int(head_dim * pct))


def test_gpt_neox_reads_the_older_config_fields(tmp_path: Path) -> None:
    """rotary_pct / rotary_emb_base at the top level, as configs before transformers 5 have them."""
    reference, folder = hf_model(
        tmp_path,
        "gpt_neox",
        rope_parameters={"rope_type": "default", "rope_theta": 500.0, "partial_rotary_factor": 0.5},
    )
    config = json.loads((folder / "config.json").read_text())
    del config["rope_parameters"]
    (folder / "config.json").write_text(json.dumps({**config, "rotary_pct": 0.5, "rotary_emb_base": 500.0}))
    model = zoo.from_hf(folder)
    options = model.config.position.options
    assert (options["base"], options["rotary_dim"], options.get("rotary_pct")) == (500.0, 4, None)
    assert_same(model, reference)


@pytest.mark.parametrize(
    ("fields", "setting"),
    [
        ({"attention_bias": False}, "attention_bias"),
        ({"hidden_act": "quick_gelu"}, "hidden_act"),
        ({"rope_parameters": {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}}, "rope_type"),
        (
            {"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.1}},
            "rotary_pct",
        ),
    ],
)
def test_gpt_neox_refuses_settings_it_does_not_model(tmp_path: Path, fields: dict[str, Any], setting: str) -> None:
    _, folder = hf_model(tmp_path, "gpt_neox")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **fields}))
    with pytest.raises(zoo.InteropError, match=setting):
        zoo.from_hf(folder)


def test_parallel_placement_is_one_residual_step() -> None:
    """x + attn(ln1(x)) + mlp(ln2(x)), and with a shared norm ln1 feeds both (GPT-J)."""
    for shared in (False, True):
        model = zoo.build(
            "gpt2-small",
            n_layers=1,
            d_model=32,
            n_heads=4,
            vocab_size=VOCAB,
            max_seq_len=32,
            position="rotary",
            placement={"name": "parallel", "shared_norm": shared},
            dropout=0.0,
        )
        randomise_(model)
        block = model.blocks[0]
        seen: dict[str, Any] = {}
        block.register_forward_hook(lambda module, args, out, seen=seen: seen.update(args=args, out=out))
        with torch.no_grad():
            model(ids(seq=8))
            x, ctx = seen["args"]
            norm2 = block.attn_residual.norm if shared else block.mlp_residual.norm
            expected = x + block.attn(block.attn_residual.norm(x), ctx) + block.mlp(norm2(x))
        torch.testing.assert_close(seen["out"], expected)
        norms = [n for n, _ in model.named_parameters() if "residual.norm" in n]
        assert len(norms) == (2 if shared else 4)  # weight + bias of one norm, or of two
    with pytest.raises(zoo.ConfigError, match="parallel"):
        zoo.get_config("transformer-2017-base", placement="parallel")


# -- presets of public shapes ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("preset", "architecture", "parameters"),
    [
        ("pythia-160m", "GPTNeoXForCausalLM", 162_322_944),
        ("pythia-410m", "GPTNeoXForCausalLM", 405_334_016),
        ("llama-style-small", "LlamaForCausalLM", 124_668_672),
        ("gpt2-small-modern", "LlamaForCausalLM", 114_114_048),
        ("gpt2-small", "GPT2LMHeadModel", 124_439_808),
    ],
)
def test_preset_parameter_counts_equal_transformers_model_of_the_same_config(
    preset: str, architecture: str, parameters: int
) -> None:
    from zoo.interop.hf import config_to_hf

    ours = zoo.build(preset, device="meta").num_parameters()
    hf = config_to_hf(zoo.get_config(preset))
    assert hf["architectures"] == [architecture]
    config = transformers.AutoConfig.for_model(**{k: v for k, v in hf.items() if k != "architectures"})
    with torch.device("meta"):
        reference = transformers.AutoModelForCausalLM.from_config(config)
    assert type(reference).__name__ == architecture
    assert ours == sum(p.numel() for p in reference.parameters()) == parameters


def test_compare_shows_pythia_as_component_swaps_of_gpt2(capsys: pytest.CaptureFixture[str]) -> None:
    from zoo.cli import main

    assert main(["compare", "gpt2-small", "pythia-160m"]) == 0
    out = capsys.readouterr().out
    for words in ("placement", "parallel", "rotary", "vocab_size", "50304", "tie_embeddings"):
        assert words in out


# -- a converter from a plugin registered inline ------------------------------------------------


class Toy(zoo.Converter):
    """A made-up architecture: GPT-2's design, weights under other names, q/k/v apart."""

    architecture = "ToyForCausalLM"
    model_type = "toy"
    description = "a toy family for the tests"
    prefix = "body."
    top_level = ("unembed",)
    embedding = "embed"
    head = "unembed"

    def config_from_hf(self, hf: Any, where: str) -> dict[str, Any]:
        if hf.get("fancy"):
            raise self.refuse(where, "fancy", hf["fancy"], "toys are plain")
        return {
            "vocab_size": hf["vocab"],
            "max_seq_len": 32,
            "d_model": hf["width"],
            "n_layers": hf["depth"],
            "n_heads": 2,
            "dropout": 0.0,
            "tie_embeddings": hf["tied"],
            "activation": "gelu",
        }

    def rules(self, config: zoo.ModelConfig) -> list[zoo.Rule]:
        d = config.d_model
        rules = [zoo.Rule.copy("tok_emb.weight", "embed"), zoo.Rule.copy("position.table.weight", "where")]
        for i in range(config.n_layers):
            z = f"blocks.{i}."
            rules.append(zoo.Rule.concat(z + "attn.qkv.weight", [f"{i}.q", f"{i}.k", f"{i}.v"], (d, d, d)))
            for name in (
                "attn_residual.norm.weight",
                "attn_residual.norm.bias",
                "attn.qkv.bias",
                "attn.out.weight",
                "attn.out.bias",
                "mlp_residual.norm.weight",
                "mlp_residual.norm.bias",
                "mlp.up.weight",
                "mlp.up.bias",
                "mlp.down.weight",
                "mlp.down.bias",
            ):
                rules.append(
                    zoo.Rule.transposed(z + name, f"{i}.{name}")
                    if name.endswith("up.weight")
                    else zoo.Rule.copy(z + name, f"{i}.{name}")
                )
        return [
            *rules,
            zoo.Rule.copy("final_norm.weight", "end.w"),
            zoo.Rule.copy("final_norm.bias", "end.b"),
            zoo.Rule.copy("head.weight", "unembed"),
        ]

    def blockers(self, config: zoo.ModelConfig) -> list[str]:
        return [] if config.activation.name == "gelu" and config.position.name == "learned" else ["not a toy"]

    def config_to_hf(self, config: zoo.ModelConfig) -> dict[str, Any]:
        return {
            "vocab": config.vocab_size,
            "width": config.d_model,
            "depth": config.n_layers,
            "tied": config.tie_embeddings,
        }


class ToyPlugin:
    @zoo.hookimpl
    def zoo_register_converters(self, register: Any) -> None:
        register(Toy())


@pytest.mark.parametrize("tied", [True, False])
def test_an_inline_plugin_adds_a_converter_without_touching_the_core(tmp_path: Path, tied: bool) -> None:
    registry = zoo.Registry(plugins=[ToyPlugin()])
    (entry,) = [c for c in registry.converters() if c.architecture == "ToyForCausalLM"]
    assert entry.plugin.name == "ToyPlugin-0" and entry.exports and entry.description == "a toy family for the tests"
    model = zoo.build(
        "gpt2-small",
        n_layers=2,
        d_model=32,
        n_heads=2,
        vocab_size=VOCAB,
        max_seq_len=32,
        activation="gelu",
        dropout=0.0,
        tie_embeddings=tied,
        registry=registry,
    )
    randomise_(model)
    folder = zoo.to_hf(model.eval(), tmp_path / "toy", architecture="ToyForCausalLM", registry=registry)
    stored = load_file(folder / "model.safetensors")
    assert json.loads((folder / "config.json").read_text())["architectures"] == ["ToyForCausalLM"]
    assert {"body.embed", "body.0.q", "body.1.k", "body.end.w"} <= set(stored) and ("unembed" in stored) is not tied
    assert torch.equal(stored["body.0.mlp.up.weight"], model.blocks[0].mlp.up.weight.t())
    back = zoo.from_hf(folder, registry=registry)
    with torch.no_grad():
        torch.testing.assert_close(back(ids()), model(ids()), atol=0, rtol=0)
    # The default registry has no toy converter: the same folder names what is installed.
    with pytest.raises(
        zoo.InteropError, match="no converter reads architectures \\['ToyForCausalLM'\\].*GPT2LMHeadModel"
    ):
        zoo.from_hf(folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "fancy": True}))
    with pytest.raises(zoo.InteropError, match="fancy=True: toys are plain"):
        zoo.from_hf(folder, registry=registry)


def test_a_converter_registered_twice_or_malformed_fails_its_plugin_only() -> None:
    class Again:
        @zoo.hookimpl
        def zoo_register_converters(self, register: Any) -> None:
            register(Toy())

    class Broken:
        @zoo.hookimpl
        def zoo_register_converters(self, register: Any) -> None:
            register(object())

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        registry = zoo.Registry(plugins=[ToyPlugin(), Again(), Broken()])
    assert [w.category for w in caught] == [RuntimeWarning, RuntimeWarning]
    status = {p.name: (p.status, str(p.error)) for p in registry.plugins if not p.builtin and p.distribution is None}
    assert status["ToyPlugin-0"][0] == "loaded"
    assert status["Again-1"][0] == "failed" and "converter 'ToyForCausalLM' is registered twice" in status["Again-1"][1]
    assert status["Broken-2"][0] == "failed" and "architecture" in status["Broken-2"][1]
    assert [c.architecture for c in registry.converters()].count("ToyForCausalLM") == 1


def test_plugins_command_lists_converters_with_providers(capsys: pytest.CaptureFixture[str]) -> None:
    from zoo.cli import main

    assert main(["plugins", "--json"]) == 0
    plugins = json.loads(capsys.readouterr().out)
    by_name = {p["name"]: p for p in plugins}
    assert by_name["zoo.plugins.hf_gpt2"]["converters"] == ["GPT2LMHeadModel"]
    assert set(by_name["modern"]["converters"]) >= {  # and the families of tests/family_cases
        "LlamaForCausalLM",
        "MistralForCausalLM",
        "Qwen2ForCausalLM",
        "GPTNeoXForCausalLM",
        "Qwen3ForCausalLM",
        "GemmaForCausalLM",
        "Olmo2ForCausalLM",
        "Phi3ForCausalLM",
        "GraniteForCausalLM",
        "CohereForCausalLM",
        "MixtralForCausalLM",
        "Qwen2MoeForCausalLM",
        "Qwen3MoeForCausalLM",
        "OlmoeForCausalLM",
    }
    assert main(["components"]) == 0
    out = capsys.readouterr().out
    assert "Hugging Face converters" in out and "GPTNeoXForCausalLM" in out and "zoo-lm-modern" in out


# -- Qwen2 ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields",
    [
        {"num_key_value_heads": 2},
        {"num_key_value_heads": 4, "tie_word_embeddings": True, "rope_theta": 1e6},
        {"num_key_value_heads": 1},
    ],
    ids=["gqa2", "mha-tied-theta1e6", "mqa"],
)
def test_qwen2_imports_and_exports_exactly(tmp_path: Path, fields: dict[str, Any]) -> None:
    model = roundtrip(tmp_path, "qwen2", **fields)
    attn = model.blocks[0].attn
    assert attn.qkv.bias is not None and attn.out.bias is None and model.blocks[0].mlp.up.bias is None
    with pytest.raises(zoo.InteropError, match="qkv_bias=True"):  # Llama has no biases to hold them
        zoo.to_hf(model, tmp_path / "as-llama", architecture="LlamaForCausalLM")
    assert json.loads((zoo.to_hf(model, tmp_path / "auto") / "config.json").read_text())["architectures"] == [
        "Qwen2ForCausalLM"
    ]


def test_qwen2_sliding_window_from_max_window_layers_is_exact(tmp_path: Path) -> None:
    model = roundtrip(
        tmp_path, "qwen2", use_sliding_window=True, sliding_window=5, max_window_layers=1, num_hidden_layers=3
    )
    assert [block.window for block in model.blocks] == [None, 5, 5]
    reference, folder = hf_model(tmp_path, "qwen2", name="off", use_sliding_window=False, sliding_window=5)
    off = zoo.from_hf(folder)
    assert_same(off, reference)  # the window is off: no layer slides
    assert not off.config.layer_pattern and "window" not in off.config.attention.options


def test_every_installed_converter_has_a_parity_test_here() -> None:
    """A converter added to the zoo or zoo-modern must join FAMILIES (and so the round trips)
    or the parity harness's cases (tests/family_cases, run by tests/test_families.py)."""
    harness = {case.model_type for case in all_cases()}
    assert {c.model_type for c in zoo.default_registry().converters()} == set(FAMILIES) | harness


def test_names_from_config_json_reach_messages_escaped_and_clipped(tmp_path: Path) -> None:
    _, folder = hf_model(tmp_path, "llama")
    config = json.loads((folder / "config.json").read_text())
    evil = "\x1b]8;;http://x\x07Evil" + "A" * 5000
    (folder / "config.json").write_text(json.dumps({**config, "architectures": [evil], "model_type": evil}))
    with pytest.raises(zoo.InteropError) as caught:
        zoo.from_hf(folder)
    message = str(caught.value)
    assert "\x1b" not in message and "\x07" not in message and "\\x1b" in message and len(message) < 1000

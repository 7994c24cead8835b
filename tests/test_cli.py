"""The ``zoo`` command: every subcommand on tiny configs, and the error path of each.

Most tests call ``zoo.cli.main(argv)`` in-process and read what it printed (JSON mode
where there is one); a few run the installed ``zoo`` script in a subprocess, the way a
user does, including with throwaway plugin distributions on its path.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

import zoo
from helpers import TINY, TINY_ABLATION
from zoo.cli import main
from zoo.nn.config import preset_family
from zoo.nn.registry import set_default_registry
from zoo.nn.sets import parse_sets, parse_value
from zoo.summary import summarize

ROOT = Path(__file__).resolve().parents[1]
ZOO_SCRIPT = Path(sys.executable).with_name("zoo")
PRESETS = zoo.list_models()
# TINY as --set flags, for commands that take a preset.
TINY_SETS = [arg for key, value in TINY.items() for arg in ("--set", f"{key}={value}")]


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        assert self.code == 0, self.err
        return json.loads(self.out)


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rich lays out tables for 200 columns, so values are not wrapped mid-word."""
    monkeypatch.setenv("COLUMNS", "200")


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Any:
    def run(*argv: str) -> Result:
        code = main(list(argv))
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run


def assert_one_error_line(result: Result, *fragments: str) -> None:
    """Exit status 1, nothing on stdout, and one red line on stderr saying why."""
    assert result.code == 1, (result.out, result.err)
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, result.err
    assert lines[0].startswith("error: ")
    assert "Traceback" not in result.err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


# -- --set ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        ("2", 2),
        ("0.1", 0.1),
        ("1e-5", 1e-5),
        ("false", False),
        ("true", True),
        ("eager", "eager"),
        ('"quoted"', "quoted"),
        ("[1, 2]", [1, 2]),
        ('{"n_kv_heads": 2}', {"n_kv_heads": 2}),
        ("{ n_kv_heads = 2 }", {"n_kv_heads": 2}),
        ("1_000", 1000),
        ("sqrt_d_model", "sqrt_d_model"),
    ],
)
def test_set_values_parse_as_json_or_toml_scalars(raw: str, value: Any) -> None:
    assert parse_value(raw) == value and type(parse_value(raw)) is type(value)


def test_set_dotted_keys_reach_into_components_and_merge() -> None:
    overrides = parse_sets(
        [
            "n_layers=2",
            "attention.name=eager",
            "attention.n_kv_heads=2",
            "dropout=0",
            "placement=post",
            "norm.x=1",
            "norm=rmsnorm",
            "n_layers=3",
        ]
    )
    assert overrides == {
        "n_layers": 3,  # the later --set wins
        "attention": {"name": "eager", "n_kv_heads": 2},
        "dropout": 0,
        "placement": "post",
        "norm": {"x": 1, "name": "rmsnorm"},
    }


@pytest.mark.parametrize(
    ("sets", "fragments"),
    [
        (["n_layers"], ["expected KEY=VALUE"]),
        (["=2"], ["expected KEY=VALUE"]),
        (["attention..name=eager"], ["expected KEY=VALUE"]),
        (["n_layer=2"], ["'n_layer' is not a config field", "Did you mean 'n_layers'"]),
        (["dropout=0", "dropout.attention=0.1"], ["dropout is already set to 0"]),
    ],
)
def test_bad_set_is_a_config_error(sets: list[str], fragments: list[str]) -> None:
    with pytest.raises(zoo.ConfigError) as err:
        parse_sets(sets)
    for fragment in fragments:
        assert fragment in str(err.value)


# -- list, components, plugins -------------------------------------------------------------


def test_list_json_has_every_preset_with_its_size(cli: Any) -> None:
    entries = {e["name"]: e for e in cli("list", "--json").json()}
    assert list(entries) == PRESETS
    assert entries["gpt2-small"]["parameters"] == 124_439_808
    for name, entry in entries.items():
        assert "error" not in entry, entry
        assert entry["config"] == zoo.get_config(name).model_dump(mode="json")
        model = zoo.build(name, device="meta")
        assert entry["parameters"] == sum({id(p): p.numel() for p in model.parameters()}.values())


def test_list_pattern_and_table(cli: Any) -> None:
    result = cli("list", "gpt2-*")
    assert result.code == 0
    shown = [line.split()[0] for line in result.out.splitlines() if line.strip().startswith("gpt2-")]
    assert shown == zoo.list_models("gpt2-*")
    assert "124,439,808" in result.out and "1,557,611,200" in result.out
    assert "transformer-2017" not in result.out


def families_in_table(out: str, names: list[str], families: set[str]) -> list[tuple[str, list[str]]]:
    """``zoo list``'s table as its sections: each family's header line, then the presets under it."""
    sections: list[tuple[str, list[str]]] = []
    for line in out.splitlines():
        words = line.split()
        if words and words[0] in names:
            sections[-1][1].append(words[0])
        elif line.strip() in families:
            sections.append((line.strip(), []))
    return sections


def test_every_preset_names_its_family(cli: Any) -> None:
    entries = cli("list", "--json").json()
    assert [e["name"] for e in entries] == PRESETS
    for entry in entries:
        assert entry["family"] == preset_family(entry["name"]) and entry["family"], entry["name"]
    family = {e["name"]: e["family"] for e in entries}
    assert family["gpt2-small"] == family["gpt2-xl"] == "GPT-2"
    assert family["transformer-2017"] == family["transformer-2017-base"] == "Transformer (2017)"


def test_list_shows_every_preset_once_under_its_family(cli: Any) -> None:
    family = {e["name"]: e["family"] for e in cli("list", "--json").json()}
    sections = families_in_table(cli("list").out, PRESETS, set(family.values()))
    shown = [(f, name) for f, members in sections for name in members]
    assert sorted(shown) == sorted((family[name], name) for name in PRESETS)  # each once, under its own
    assert [f for f, _ in sections] == sorted(set(family.values()), key=str.casefold)  # one section each
    assert all(members == sorted(members) for _, members in sections)
    pattern = families_in_table(cli("list", "gpt2-*").out, PRESETS, set(family.values()))
    assert pattern == [("GPT-2", zoo.list_models("gpt2-*"))]


def test_a_preset_without_a_family_inherits_its_parents_or_shows_under_other(cli: Any) -> None:
    class Presets:
        @zoo.hookimpl
        def zoo_register_presets(self, register: Any) -> None:
            register("fam-child", {"preset": {"extends": "gpt2-small"}, "n_layers": 1})
            register("fam-own", {"preset": {"extends": "gpt2-small", "family": "Mine"}, "n_layers": 1})
            register("fam-none", zoo.get_config("gpt2-small", n_layers=1))

    old = set_default_registry(zoo.Registry(plugins=[Presets()]))
    try:
        family = {e["name"]: e["family"] for e in cli("list", "fam-*", "--json").json()}
        sections = families_in_table(
            cli("list", "fam-*").out, ["fam-child", "fam-own", "fam-none"], {"GPT-2", "Mine", "other"}
        )
    finally:
        set_default_registry(old)
    assert family == {"fam-child": "GPT-2", "fam-none": None, "fam-own": "Mine"}
    assert sections == [("GPT-2", ["fam-child"]), ("Mine", ["fam-own"]), ("other", ["fam-none"])]


@pytest.mark.parametrize("family", [42, "", "[bold]GPT", "x" * 41, "GPT-2\n"])
def test_a_family_that_is_not_a_name_is_refused(family: Any) -> None:
    class Bad:
        @zoo.hookimpl
        def zoo_register_presets(self, register: Any) -> None:
            register("bad", {"preset": {"extends": "gpt2-small", "family": family}})

    with pytest.raises(zoo.PresetError, match=r"\[preset\] family = .* is not a family name; .*family = \"GPT-2\""):
        zoo.get_config("bad", registry=zoo.Registry(plugins=[Bad()]))


def test_list_without_a_match_is_an_error(cli: Any) -> None:
    assert_one_error_line(cli("list", "xlstm*"), "no preset matches 'xlstm*'", "gpt2-small")


@pytest.mark.parametrize("kind", zoo.KINDS)
def test_components_of_each_kind_with_their_providers(cli: Any, kind: str) -> None:
    listed = cli("components", kind, "--json").json()
    expected = zoo.components(kind)
    assert [(c["kind"], c["name"], c["provider"]) for c in listed] == [(c.kind, c.name, c.provider) for c in expected]
    table = cli("components", kind)
    for component in expected:
        row = next(line for line in table.out.splitlines() if line.split()[:2] == [kind, component.name])
        assert component.provider in row


def test_unknown_component_kind_is_one_line(cli: Any) -> None:
    assert_one_error_line(cli("components", "positon"), "unknown component kind 'positon'", "Did you mean 'position'")


def test_plugins_lists_every_loaded_plugin(cli: Any) -> None:
    listed = cli("plugins", "--json").json()
    expected = zoo.default_registry().plugins
    assert [(p["name"], p["distribution"], p["status"]) for p in listed] == [
        (p.name, p.distribution, p.status) for p in expected
    ]
    assert {p["name"] for p in listed if p["builtin"]} >= {"zoo.plugins.attention", "zoo.plugins.presets"}


GOOD_PLUGIN = '''
import torch
import zoo


def softsign():
    """Softsign, x / (1 + |x|)."""
    return torch.nn.Softsign()


@zoo.hookimpl
def zoo_register_components(register):
    register("activation", "softsign", softsign)


@zoo.hookimpl
def zoo_register_presets(register):
    register("cli-test-broken", {"vocab_size": 0, "max_seq_len": 8, "d_model": 8, "n_layers": 1, "n_heads": 2},
             description="a preset whose config does not validate")
'''


@pytest.fixture
def plugin_site(tmp_path: Path) -> Path:
    """A folder holding two throwaway plugin distributions (a package plus its
    ``*.dist-info``), one good and one whose import fails, as pip would install them.
    (tests/test_plugin_control.py runs the `zoo` script itself with such plugins.)"""
    site = tmp_path / "site"
    for dist, module, source in (
        ("zoo-cli-good", "zoo_cli_good", GOOD_PLUGIN),
        ("zoo-cli-broken", "zoo_cli_broken", "import a_module_that_does_not_exist\n"),
    ):
        (site / module).mkdir(parents=True)
        (site / module / "__init__.py").write_text(textwrap.dedent(source), encoding="utf-8")
        info = site / f"{dist.replace('-', '_')}-1.2.3.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.2.3\n", encoding="utf-8")
        entry_point = f"{module.removeprefix('zoo_cli_')} = {module}"
        (info / "entry_points.txt").write_text(f"[zoo]\n{entry_point}\n", encoding="utf-8")
    return site


@pytest.fixture
def with_plugins(plugin_site: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The default registry rebuilt with the throwaway plugins on sys.path."""
    monkeypatch.syspath_prepend(str(plugin_site))
    monkeypatch.delenv("ZOO_PLUGINS", raising=False)
    monkeypatch.delenv("ZOO_DISABLE_PLUGINS", raising=False)
    old = set_default_registry(None)
    yield
    set_default_registry(old)
    for module in ("zoo_cli_good", "zoo_cli_broken"):
        sys.modules.pop(module, None)


def test_plugins_show_the_failed_plugin_and_why(cli: Any, with_plugins: None) -> None:
    listed = {p["name"]: p for p in cli("plugins", "--json").json()}
    assert listed["good"]["status"] == "loaded" and listed["good"]["distribution"] == "zoo-cli-good"
    broken = listed["broken"]
    assert broken["status"] == "failed" and broken["version"] == "1.2.3"
    assert "ModuleNotFoundError" in broken["error"] and "ZOO_DISABLE_PLUGINS=broken" in broken["error"]
    table = cli("plugins")
    row = next(line for line in table.out.splitlines() if line.split()[:1] == ["broken"])
    assert "failed" in row and "zoo-cli-broken" in row
    assert "a_module_that_does_not_exist" in table.out
    assert table.err == ""  # `zoo plugins` reports the failure itself, no warning
    # Every other command warns in one line and still works, with the good plugin's parts.
    components = cli("components", "activation", "--json")
    assert ("softsign", "zoo-cli-good 1.2.3") in [(c["name"], c["provider"]) for c in components.json()]
    (warning,) = components.err.strip().splitlines()
    assert warning.startswith("warning: plugin 'broken'") and "see `zoo plugins`" in warning
    # A preset that does not validate is listed with why; the others are unaffected.
    entries = {e["name"]: e for e in cli("list", "--json").json()}
    assert "vocab_size" in entries["cli-test-broken"]["error"]
    assert entries["gpt2-small"]["parameters"] == 124_439_808
    listing = cli("list", "cli-*")
    assert listing.code == 0 and "vocab_size" in listing.out


# -- info and compare ----------------------------------------------------------------------


@pytest.mark.parametrize("name", PRESETS)
def test_info_json_for_every_preset(cli: Any, name: str) -> None:
    data = cli("info", name, "--json", "--context", "16").json()
    assert data["name"] == name and data["context"] == 16
    assert data["config"] == zoo.get_config(name).model_dump(mode="json")
    model = zoo.build(name, device="meta")
    parameters, flops = data.pop("parameters"), data.pop("flops_per_token")
    assert parameters.pop("total") == sum({id(p): p.numel() for p in model.parameters()}.values())
    assert flops.pop("total") == pytest.approx(sum(flops.values()))
    assert set(parameters) == set(flops) >= {"embeddings", "attention", "mlp", "norms", "head"}
    assert 0 < data["score_flops_per_token"] < flops["attention"]


def test_info_table_for_gpt2_small(cli: Any) -> None:
    result = cli("info", "gpt2-small")
    assert result.code == 0 and result.err == ""
    out = result.out
    for text in (
        "gpt2-small: GPT-2 Small",
        "gelu_tanh",
        "zoo-lm 0.1.0",
        "embeddings",
        "39,383,808",
        "attention",
        "28,348,416",
        "56,669,184",
        "head (tied to embeddings)",
        "124,439,808",
        "284.8 M",
        "FLOPs/token (ctx 1024)",
        "37.7 M",
    ):
        assert text in out, text


def test_info_with_sets_matches_the_built_model(cli: Any) -> None:
    sets = [
        "--set",
        "n_layers=3",
        "--set",
        "attention.name=eager",
        "--set",
        "dropout=0",
        "--set",
        "tie_embeddings=false",
    ]
    data = cli("info", "gpt2-small", *TINY_SETS, *sets, "--json").json()
    config = zoo.ModelConfig.model_validate(data["config"])
    assert (config.n_layers, config.attention.name) == (3, "eager")
    assert (config.dropout.attention, config.tie_embeddings) == (0.0, False)
    model = zoo.build(config)
    assert data["parameters"]["total"] == model.num_parameters()
    assert data["parameters"]["head"] == TINY["vocab_size"] * TINY["d_model"]


def test_info_sets_component_options(cli: Any) -> None:
    if ("attention", "gqa") not in {(c.kind, c.name) for c in zoo.components()}:
        pytest.skip("needs zoo-modern's gqa attention (make installs it)")
    gqa = ["--set", "attention.name=gqa", "--set", "attention.n_kv_heads=2"]
    data = cli("info", "gpt2-small", *TINY_SETS, *gqa, "--json").json()
    assert data["config"]["attention"]["name"] == "gqa" and data["config"]["attention"]["n_kv_heads"] == 2
    # k and v project to 2 heads of 8: qkv is (32 + 2 * 16) x 32, plus biases, plus out.
    d, kv = TINY["d_model"], 2 * (TINY["d_model"] // TINY["n_heads"])
    assert data["parameters"]["attention"] == TINY["n_layers"] * ((d + 2 * kv) * d + d + 2 * kv + d * d + d)


@pytest.mark.parametrize(
    ("argv", "fragments"),
    [
        (["info", "gpt2-smal"], ["unknown preset 'gpt2-smal'", "Did you mean 'gpt2-small'"]),
        (["info", "gpt2-small", "--set", "n_layers"], ["expected KEY=VALUE"]),
        (["info", "gpt2-small", "--set", "n_layer=2"], ["Did you mean 'n_layers'"]),
        (["info", "gpt2-small", "--set", "n_heads=5"], ["not divisible by n_heads=5"]),
        (["info", "gpt2-small", "--set", "attention.name=nope"], ["unknown attention component 'nope'"]),
        (["info", "gpt2-small", "--set", "position.base=5"], ["position 'learned' options"]),
        (["info", "gpt2-small", "--context", "0"], ["context must be at least 1"]),
        (["compare", "gpt2-small", "gtp2-medium"], ["unknown preset 'gtp2-medium'"]),
        (["compare", "gpt2-small", "gpt2-medium", "--set-b", "d_model=100"], ["not divisible"]),
    ],
)
def test_info_and_compare_errors_are_one_line(cli: Any, argv: list[str], fragments: list[str]) -> None:
    assert_one_error_line(cli(*argv), *fragments)


def test_debug_shows_the_traceback(cli: Any) -> None:
    result = cli("--debug", "info", "nope")
    assert result.code == 1
    assert "Traceback" in result.err and "PresetError" in result.err
    assert result.err.strip().splitlines()[-1].startswith("error: unknown preset 'nope'")
    assert "Traceback" in cli("info", "nope", "--debug").err  # after the subcommand too


def test_an_unexpected_exception_is_one_line_unless_debugging(cli: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr("zoo.cli.presets.summarize", broken)
    result = cli("info", "gpt2-small")
    assert result.code == 2
    assert result.err.strip() == (
        "error: unexpected RuntimeError: a bug (rerun with --debug for the traceback, and please report it)"
    )
    with pytest.raises(RuntimeError, match="a bug"):
        main(["--debug", "info", "gpt2-small"])


def test_compare_2017_and_gpt2_small(cli: Any) -> None:
    from zoo.ablate import diff_configs

    a, b = zoo.get_config("transformer-2017"), zoo.get_config("gpt2-small")
    data = cli("compare", "transformer-2017", "gpt2-small", "--json").json()
    expected = json.loads(json.dumps([list(row) for row in diff_configs(a, b)]))
    assert [[d["axis"], d["a"], d["b"]] for d in data["differences"]] == expected
    axes = {d["axis"]: (d["a"], d["b"]) for d in data["differences"]}
    assert axes["placement"] == ("post", "pre") and axes["activation"] == ("relu", "gelu_tanh")
    assert axes["position"] == ("sinusoidal", "learned") and axes["d_model"] == (512, 768)
    assert "attention" not in axes  # both use sdpa
    assert data["context"] == 1024
    assert data["a"]["parameters"] == summarize(a, context=1).total_parameters
    assert data["b"]["parameters"] == 124_439_808
    assert data["b"]["flops_per_token"] == 284_812_800
    table = cli("compare", "transformer-2017", "gpt2-small").out
    row = next(line for line in table.splitlines() if line.split()[:1] == ["placement"])
    assert row.split() == ["placement", "post", "pre"]
    assert "124,439,808" in table and "284.8 M" in table


@pytest.mark.parametrize("preset", [p for p in zoo.list_models() if zoo.get_config(p).mlp.name == "moe"])
def test_compare_shows_an_moes_experts_and_top_k_even_at_their_defaults(cli: Any, preset: str) -> None:
    """An MoE's expert count and top-k define the design: shown beside a dense model at any value."""
    config = zoo.get_config(preset)
    data = cli("compare", "gpt2-small", preset, "--json").json()
    mlp = next(d["b"] for d in data["differences"] if d["axis"] == "mlp")
    options = config.mlp.options
    assert mlp.startswith("moe(") and f"n_experts={options['n_experts']}" in mlp and f"top_k={options['top_k']}" in mlp


def test_compare_with_per_side_sets(cli: Any) -> None:
    b_only = ["--set-b", "placement=post", "--set-b", "norm=rmsnorm"]
    data = cli("compare", "gpt2-small", "gpt2-small", *TINY_SETS, *b_only, "--json").json()
    assert [(d["axis"], d["a"], d["b"]) for d in data["differences"]] == [
        ("placement", "pre", "post"),
        ("norm", "layernorm", "rmsnorm"),
    ]
    same = cli("compare", "gpt2-small", "gpt2-small", "--json").json()
    assert same["differences"] == [] and same["a"] == same["b"]
    assert "(no component or size differs)" in cli("compare", "gpt2-small", "gpt2-small").out


def test_compare_decoder_with_encoder_decoder(cli: Any) -> None:
    data = cli("compare", "transformer-2017", "transformer-2017-base", "--json", "--context", "64").json()
    axes = {d["axis"]: (d["a"], d["b"]) for d in data["differences"]}
    assert axes["architecture"] == ("decoder", "encoder_decoder")
    assert data["b"]["parameters"] == 63_082_496


# -- build and inspect ----------------------------------------------------------------------


def test_build_saves_a_loadable_checkpoint(cli: Any, tmp_path: Path) -> None:
    path = tmp_path / "tiny.safetensors"
    options = ["--set", "placement=post", "-o", str(path), "--seed", "3", "--metadata", "note=hi"]
    result = cli("build", "gpt2-small", *TINY_SETS, *options)
    assert result.code == 0, result.err
    assert f"saved to {path}" in result.out
    model = zoo.load(path)
    assert model.config == zoo.get_config("gpt2-small", **TINY, placement="post")
    torch.manual_seed(3)
    expected = zoo.build(model.config)
    for (name, a), (_, b) in zip(model.state_dict().items(), expected.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    info = cli("inspect", str(path), "--json").json()
    assert info["metadata"] == {"note": "hi"}


def test_build_into_a_folder_keeps_versions(cli: Any, tmp_path: Path) -> None:
    folder = tmp_path / "ckpts"
    folder.mkdir()
    for seed in ("0", "1"):
        assert cli("build", "gpt2-small", *TINY_SETS, "-o", str(folder), "--seed", seed).code == 0
    info = cli("inspect", str(folder), "--json").json()
    assert [v["version"] for v in info["versions"]] == [1, 2]
    assert info["version"] == 2
    first = cli("inspect", str(folder), "--version", "1", "--json").json()
    assert first["version"] == 1 and first["digest_ok"] is True
    table = cli("inspect", str(folder)).out
    assert "versions" in table


def test_build_inspect_and_info_of_an_encoder_decoder(cli: Any, tmp_path: Path) -> None:
    path = tmp_path / "seq2seq.safetensors"
    sets = [*TINY_SETS, "--set", "n_encoder_layers=1"]
    assert cli("build", "transformer-2017-base", *sets, "-o", str(path)).code == 0
    config = zoo.get_config("transformer-2017-base", **TINY, n_encoder_layers=1)
    info = cli("inspect", str(path), "--json").json()
    assert info["digest_ok"] is True and info["config"] == config.model_dump(mode="json")
    assert any(t["name"].startswith("encoder.0.") for t in info["tensors"])
    table = cli("info", str(path)).out
    assert "encoder_decoder" in table and "n_encoder_layers" in table
    assert cli("info", str(path), "--json").json()["parameters"]["total"] == zoo.load(path).num_parameters()


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    torch.manual_seed(0)
    path = tmp_path / "model.safetensors"
    zoo.save(zoo.build("gpt2-small", **TINY), path, metadata={"run": "test"})
    return path


def test_inspect_json_and_table(cli: Any, checkpoint: Path) -> None:
    info = cli("inspect", str(checkpoint), "--json").json()
    assert info["digest_ok"] is True
    assert info["zoo_version"] == zoo.__version__
    assert info["config"] == zoo.get_config("gpt2-small", **TINY).model_dump(mode="json")
    assert info["components"]["attention"]["name"] == "sdpa"
    assert info["components"]["attention"]["distribution"] == "zoo-lm"
    model = zoo.build("gpt2-small", device="meta", **TINY)
    saved = {t["name"]: (t["dtype"], tuple(t["shape"])) for t in info["tensors"]}
    assert "head.weight" not in saved  # tied: stored once
    assert saved == {n: ("float32", tuple(p.shape)) for n, p in model.named_parameters()}
    table = cli("inspect", str(checkpoint)).out
    for text in ("digest", "ok", "blocks.*.attn.qkv.weight", "x2", "(96, 32)", "run", "test", "sdpa", "zoo-lm 0.1.0"):
        assert text in table, text
    unchecked = cli("inspect", str(checkpoint), "--no-verify", "--json").json()
    assert unchecked["digest_ok"] is None


def test_inspect_a_damaged_checkpoint_is_one_line(cli: Any, checkpoint: Path) -> None:
    data = bytearray(checkpoint.read_bytes())
    data[-5] ^= 0xFF  # a byte of the last tensor's data
    checkpoint.write_bytes(bytes(data))
    assert_one_error_line(cli("inspect", str(checkpoint)), str(checkpoint))
    # the same file is readable when the check is skipped, for a look at what is left
    assert cli("inspect", str(checkpoint), "--no-verify", "--json").json()["digest_ok"] is None
    truncated = checkpoint.with_name("truncated.safetensors")
    truncated.write_bytes(checkpoint.read_bytes()[:100])
    assert_one_error_line(cli("inspect", str(truncated)), str(truncated))
    assert_one_error_line(cli("inspect", str(checkpoint.with_name("missing.safetensors"))), "missing.safetensors")
    assert_one_error_line(cli("info", str(truncated)), str(truncated))


def test_info_and_compare_read_a_checkpoints_config(cli: Any, checkpoint: Path) -> None:
    data = cli("info", str(checkpoint), "--json").json()
    assert data["config"] == zoo.get_config("gpt2-small", **TINY).model_dump(mode="json")
    diff = cli("compare", str(checkpoint), "gpt2-small", *TINY_SETS, "--set-b", "placement=post", "--json").json()
    assert [d["axis"] for d in diff["differences"]] == ["placement"]


def test_build_errors_are_one_line(cli: Any, tmp_path: Path) -> None:
    out = ["-o", str(tmp_path / "x.safetensors")]
    assert_one_error_line(cli("build", "gpt3", *out), "unknown preset 'gpt3'")
    assert_one_error_line(cli("build", "gpt2-small", "--set", "d_model=-1", *out), "d_model")
    assert_one_error_line(cli("build", "gpt2-small", *TINY_SETS, "--metadata", "novalue", *out), "--metadata 'novalue'")
    assert not (tmp_path / "x.safetensors").exists()


# -- convert and generate --------------------------------------------------------------------


def hf_folder(path: Path, vocab_size: int = 97, **fields: Any) -> Any:
    """A seeded random GPT2LMHeadModel of transformers, saved with save_pretrained."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    fields = {"n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 64, **fields}
    config = transformers.GPT2Config(vocab_size=vocab_size, **fields)
    model = transformers.GPT2LMHeadModel(config).eval()
    model.save_pretrained(path)
    return model


def test_convert_from_and_to_hugging_face_keeps_the_logits(cli: Any, tmp_path: Path) -> None:
    reference = hf_folder(tmp_path / "hf", activation_function="gelu_new")
    idx = torch.randint(0, 97, (2, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = reference(idx).logits
    checkpoint = tmp_path / "imported.safetensors"
    result = cli("convert", "--from-hf", str(tmp_path / "hf"), "-o", str(checkpoint))
    assert result.code == 0, result.err
    assert str(checkpoint) in result.out
    model = zoo.load(checkpoint).eval()
    assert model.config.activation.name == "gelu_tanh" and model.config.n_layers == 2
    with torch.no_grad():
        torch.testing.assert_close(model(idx), expected, atol=1e-4, rtol=0)
    result = cli("convert", "--to-hf", str(checkpoint), "-o", str(tmp_path / "exported"))
    assert result.code == 0, result.err
    import transformers

    exported = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "exported").eval()
    with torch.no_grad():
        torch.testing.assert_close(exported(idx).logits, expected, atol=1e-4, rtol=0)


def test_convert_errors_are_one_line(cli: Any, tmp_path: Path, checkpoint: Path) -> None:
    (tmp_path / "empty").mkdir()
    empty = cli("convert", "--from-hf", str(tmp_path / "empty"), "-o", str(tmp_path / "x.safetensors"))
    assert_one_error_line(empty, "no config.json")
    post = tmp_path / "post.safetensors"
    zoo.save(zoo.build("gpt2-small", placement="post", position="alibi", **TINY), post)  # no architecture has both
    assert_one_error_line(cli("convert", "--to-hf", str(post), "-o", str(tmp_path / "out")), "placement")
    missing = cli("convert", "--to-hf", str(tmp_path / "missing.safetensors"), "-o", str(tmp_path / "out"))
    assert_one_error_line(missing, "missing.safetensors")
    assert not (tmp_path / "out" / "model.safetensors").exists()


@pytest.fixture
def gpt2_vocab_checkpoint(tmp_path: Path) -> Path:
    """A small model over GPT-2's vocabulary, so the GPT-2 tokenizer fits it."""
    pytest.importorskip("tiktoken")
    torch.manual_seed(0)
    path = tmp_path / "tiny-gpt2.safetensors"
    zoo.save(zoo.build("gpt2-small", n_layers=1, d_model=16, n_heads=2, max_seq_len=64, dropout=0.0), path)
    return path


def test_generate_streams_what_generate_text_returns(
    cli: Any, gpt2_vocab_checkpoint: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from zoo import pipelines

    path, prompt = str(gpt2_vocab_checkpoint), "The quick brown fox"
    expected = pipelines.generate_text(path, prompt, max_new_tokens=12)
    real, pieces = pipelines.generate_text, []

    def spy(*args: Any, on_text: Any, **kwargs: Any) -> str:
        def seen(piece: str) -> None:
            on_text(piece)
            pieces.append(piece)
            # each piece is on stdout before the next token is generated
            assert sys.stdout.getvalue().endswith(piece)  # type: ignore[attr-defined]

        return real(*args, on_text=seen, **kwargs)

    monkeypatch.setattr("zoo.cli.generate.generate_text", spy)
    import io

    buffer = io.StringIO()
    monkeypatch.setattr(sys, "stdout", buffer)
    assert main(["generate", path, "--prompt", prompt, "--max-new-tokens", "12", "--greedy"]) == 0
    assert len(pieces) > 1 and "".join(pieces) == expected
    assert buffer.getvalue() == prompt + expected + "\n"


def test_generate_sampling_flags_and_seed(cli: Any, gpt2_vocab_checkpoint: Path) -> None:
    from zoo.pipelines import generate_text

    path = str(gpt2_vocab_checkpoint)
    flags = ["--temperature", "0.9", "--top-k", "50", "--top-p", "0.95", "--repetition-penalty", "1.2", "--seed", "7"]
    first = cli("generate", path, "--prompt", "Once", "--max-new-tokens", "10", "--no-echo", *flags)
    again = cli("generate", path, "--prompt", "Once", "--max-new-tokens", "10", "--no-echo", *flags)
    assert first.code == 0, first.err
    expected = generate_text(
        path,
        "Once",
        max_new_tokens=10,
        do_sample=True,
        temperature=0.9,
        top_k=50,
        top_p=0.95,
        repetition_penalty=1.2,
        seed=7,
    )
    assert first.out == again.out == expected + "\n"
    greedy = generate_text(path, "Once", max_new_tokens=10)
    assert expected != greedy  # the flags did make it sample


def test_generate_from_a_hugging_face_folder(cli: Any, tmp_path: Path) -> None:
    pytest.importorskip("tiktoken")
    hf_folder(tmp_path / "hf", vocab_size=50257, n_layer=1, n_embd=16, n_head=2)
    from zoo.pipelines import generate_text

    result = cli("generate", str(tmp_path / "hf"), "--prompt", "Hello", "--max-new-tokens", "6")
    assert result.code == 0, result.err
    assert result.out == "Hello" + generate_text(str(tmp_path / "hf"), "Hello", max_new_tokens=6) + "\n"


def test_generate_errors_are_one_line(cli: Any, tmp_path: Path, checkpoint: Path, gpt2_vocab_checkpoint: Path) -> None:
    assert_one_error_line(cli("generate", str(tmp_path / "nope"), "--prompt", "hi"), "nope")
    # TINY's 97-token vocabulary cannot take GPT-2's tokens
    assert_one_error_line(cli("generate", str(checkpoint), "--prompt", "hi"), "(97)", "--tokenizer)")
    too_long = cli("generate", str(gpt2_vocab_checkpoint), "--prompt", "hi", "--max-new-tokens", "500")
    assert_one_error_line(too_long, "max_seq_len=64")


# -- ablate ----------------------------------------------------------------------------------


def test_ablate_json_and_checkpoints(cli: Any, tmp_path: Path) -> None:
    out = tmp_path / "ablation"
    data = cli("ablate", *TINY_ABLATION, "--seeds", "2", "--out", str(out), "--json").json()
    runs = data["runs"]
    assert runs[0]["name"] == "transformer-2017" and runs[-1]["name"] == "gpt2-small"
    swapped = [d["axis"] for d in data["differences"] if d["swapped"]]
    assert [r["axis"] for r in runs[1:-1]] == [a for a in swapped if a != "architecture"]
    saved = json.loads((out / "ablation.json").read_text())
    assert saved["runs"] == runs and saved["table"] == data["table"]  # --json prints the same numbers
    for run in runs:
        losses = [s["final_val_loss"] for s in run["seeds"]]
        base = [s["final_val_loss"] for s in runs[0]["seeds"]]
        assert run["final_val_loss"]["mean"] == pytest.approx(sum(losses) / 2)
        assert run["delta_vs_base"]["mean"] == pytest.approx(sum(b - a for a, b in zip(base, losses)) / 2)
        for seed in run["seeds"]:
            model = zoo.load(seed["checkpoint"])
            assert model.config.model_dump(mode="json") == run["config"]
            assert model.config.d_model == 16


def test_ablate_table(cli: Any, tmp_path: Path) -> None:
    """A preset against a copy of itself: no swaps, just the base and the target."""
    result = cli(
        "ablate", "--from", "gpt2-small", "--to", "gpt2-small", *TINY_ABLATION, "--seeds", "2", "--out", str(tmp_path)
    )
    assert result.code == 0, result.err
    saved = json.loads((tmp_path / "ablation.json").read_text())
    runs = saved["runs"]
    curves = [[seed["curve"] for seed in run["seeds"]] for run in runs]
    assert len(runs) == 2 and curves[0] == curves[1]  # same design, seeds and data
    rows = [
        line.split()
        for line in result.out.splitlines()
        if line.strip().startswith("gpt2-small ") and "differ" not in line  # table rows, not the note
    ]
    loss = runs[0]["final_val_loss"]
    assert [row[1:4] for row in rows[-2:]] == [[f"{loss['mean']:.3f}", "±", f"{loss['half_width']:.3f}"]] * 2
    assert rows[-1][4:7] == ["+0.000", "±", "0.000"]
    for text in (
        "val loss",
        "Δ vs base",
        "2 steps, 2 seeds",
        "val loss: mean ± 95% CI over seeds",
        "significant at 95% after holm: none",
        f"report: {tmp_path / 'report.md'}",
        f"curves: {tmp_path / 'ablation.json'}",
        f"throughput: {saved['throughput']['tokens_per_second']:,.0f} tokens/s per run (1 run at once)",
    ):
        assert text in result.out, text
    assert saved["throughput"]["tokens_per_second"] > 0
    again = cli(
        "ablate", "--from", "gpt2-small", "--to", "gpt2-small", *TINY_ABLATION, "--seeds", "2", "--out", str(tmp_path)
    )
    assert f"reused 6 finished runs from {tmp_path}; trained 0" in again.out
    assert "tokens/s per run (runs reused)" in again.out


def test_ablate_flags_reach_run_ablation(cli: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def spy(**kwargs: Any) -> None:
        seen.update(kwargs)
        raise zoo.ConfigError("stopped by the test")

    monkeypatch.setattr("zoo.ablate.ablation.run_ablation", spy)
    flags = [
        "--from",
        "gpt2-small",
        "--to",
        "transformer-2017",
        "--set",
        "d_model=40",
        "--set",
        "n_layers=3",
        "--set",
        "n_heads=5",
        "--seq-len",
        "24",
        "--steps",
        "7",
        "--batch-size",
        "6",
        "--lr",
        "0.01",
        "--eval-every",
        "2",
        "--seed",
        "4",
        "--tokenizer",
        "gpt2",
        "--vocab-limit",
        "all",
        "--max-chars",
        "999",
        "--threads",
        "2",
        "--data",
        "corpus.txt",
        "--out",
        "somewhere",
        "--seeds",
        "5",
        "--lr-grid",
        "1e-3,0.01",
        "--tune-fraction",
        "0.5",
        "--path",
        "placement,position",
        "--order",
        "plan",
        "--workers",
        "3",
        "--device",
        "cpu",
        "--overwrite",
    ]
    assert_one_error_line(cli("ablate", *flags), "stopped by the test")
    on_progress = seen.pop("on_progress")
    assert callable(on_progress)
    assert seen == dict(
        base="gpt2-small",
        target="transformer-2017",
        d_model=40,
        layers=3,
        heads=5,
        seq_len=24,
        steps=7,
        batch=6,
        lr=0.01,
        eval_every=2,
        seed=4,
        tokenizer="gpt2",
        vocab_limit=None,
        max_chars=999,
        threads=2,
        data=Path("corpus.txt"),
        out_dir=Path("somewhere"),
        seeds=5,
        tune_lr=True,
        lr_grid=[1e-3, 0.01],
        tune_fraction=0.5,
        path=["placement", "position"],
        order="plan",
        workers=3,
        device="cpu",
        overwrite=True,
    )
    seen.clear()
    cli("ablate", "--vocab-limit", "300", "--tune-lr", "--path")
    assert (
        seen["vocab_limit"] == 300 and "steps" not in seen and seen["overwrite"] is False
    )  # unset flags leave run_ablation's defaults
    assert seen["tune_lr"] is True and "lr_grid" not in seen and seen["path"] is True
    with pytest.raises(SystemExit):
        main(["ablate", "--vocab-limit", "many"])


def test_ablate_errors_are_one_line(cli: Any, tmp_path: Path) -> None:
    assert_one_error_line(cli("ablate", "--from", "gpt2-smal", "--out", str(tmp_path)), "unknown preset 'gpt2-smal'")
    assert_one_error_line(
        cli("ablate", "--data", str(tmp_path / "missing.txt"), *TINY_ABLATION, "--out", str(tmp_path)), "missing.txt"
    )


# -- bench -----------------------------------------------------------------------------------


def test_bench_lists_and_runs_the_scripts_of_bench(
    capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    assert main(["bench", "--list"]) == 0
    listed = capfd.readouterr().out
    names = sorted(p.stem.removeprefix("bench_") for p in (ROOT / "bench").glob("bench_*.py"))
    assert names and all(name in listed for name in names)
    # Arguments are forwarded: the benchmark (a subprocess, hence capfd) answers its own --help.
    assert main(["bench", names[0], "--help"]) == 0
    out, err = capfd.readouterr()
    assert f"$ python -m bench.bench_{names[0]} --help" in err and "$ python -m" not in out  # stdout: the bench's
    assert f"usage: bench_{names[0]}.py" in out
    assert main(["bench", names[0], "--no-such-flag"]) == 2  # the benchmark's exit status comes back
    assert "unrecognized arguments: --no-such-flag" in capfd.readouterr().err


def test_bench_unknown_name_is_one_line(cli: Any) -> None:
    assert_one_error_line(cli("bench", "nope"), "no benchmark 'nope'", "zoo bench --list")


# -- the installed script ----------------------------------------------------------------------


def test_the_zoo_script_and_python_m_zoo() -> None:
    done = subprocess.run([str(ZOO_SCRIPT), "list", "gpt2-s*", "--json"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert [e["name"] for e in json.loads(done.stdout)] == zoo.list_models("gpt2-s*")
    command = [sys.executable, "-m", "zoo", "info", "gpt2-smal"]
    failed = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert failed.returncode == 1 and failed.stdout == ""
    (line,) = failed.stderr.strip().splitlines()
    assert line.startswith("error: unknown preset 'gpt2-smal'. Did you mean 'gpt2-small'")


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.strip() == f"zoo {zoo.__version__}"


def test_info_and_compare_show_a_number_one_way(cli: Any) -> None:
    """A rotary base of a million reads the same in both commands (not 1e+06 beside 1000000.0)."""
    info = cli("info", "qwen3-0.6b").out
    compare = cli("compare", "gpt2-small", "qwen3-0.6b").out
    assert "rotary(base=1000000)" in info and "rotary(base=1000000)" in compare
    assert "1e+06" not in info + compare and "1000000.0" not in info + compare

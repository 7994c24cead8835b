"""Plugin control with real entry points: allow-lists, deny-lists, and broken plugins.

Besides the installed zoo-modern, each test makes throwaway distributions: a package
plus a ``*.dist-info`` folder (METADATA, entry_points.txt) in a temporary directory on
``sys.path``, which is all importlib.metadata needs to list their entry points. So the
registry discovers, imports and attributes them through exactly the machinery a
pip-installed plugin goes through.
"""

from __future__ import annotations

import importlib.metadata as metadata
import json
import os
import subprocess
import sys
import textwrap
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import zoo
from helpers import TINY

MakeDist = Callable[..., None]

SQUAREPLUS = '''
import torch
import zoo


class Squareplus(torch.nn.Module):
    def forward(self, x):
        return (x + torch.sqrt(x * x + 4)) / 2


def squareplus():
    """Squareplus, (x + sqrt(x^2 + 4)) / 2: a smooth ReLU without exponentials."""
    return Squareplus()


@zoo.hookimpl
def zoo_register_components(register):
    register("activation", "squareplus", squareplus)
'''

CLASHES_WITH_MODERN = '''
import torch
import zoo


def identity():
    """Registered before the clash, so it must be rolled back with it."""
    return torch.nn.Identity()


@zoo.hookimpl
def zoo_register_components(register):
    register("activation", "clash_identity", identity)
    register("position", "rotary", identity)  # zoo-modern's name
'''


@pytest.fixture(autouse=True)
def no_plugin_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ZOO_PLUGINS", raising=False)
    monkeypatch.delenv("ZOO_DISABLE_PLUGINS", raising=False)


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[MakeDist]:
    """``make(dist, version, entry_point, module, source)`` installs a throwaway plugin."""
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    modules: list[str] = []

    def make(dist: str, version: str, entry_point: str, module: str, source: str) -> None:
        (root / module).mkdir()
        (root / module / "__init__.py").write_text(textwrap.dedent(source), encoding="utf-8")
        info = root / f"{dist.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n", encoding="utf-8")
        (info / "entry_points.txt").write_text(f"[zoo]\n{entry_point} = {module}\n", encoding="utf-8")
        modules.append(module)

    yield make
    for module in modules:
        sys.modules.pop(module, None)


@pytest.fixture
def broken(site: MakeDist) -> None:
    site("zoo-broken", "0.3", "broken", "zoo_broken_plugin", 'raise RuntimeError("boom on import")\n')


def by_name(registry: zoo.Registry) -> dict[str, object]:
    return {p.name: p for p in registry.plugins}


def quiet_registry(**kwargs: object) -> zoo.Registry:
    """A registry that must load without any plugin warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return zoo.Registry(**kwargs)


def test_installed_plugin_is_loaded_and_attributed() -> None:
    info = by_name(quiet_registry())["modern"]
    assert (info.status, info.distribution, info.version, info.builtin) == (
        "loaded",
        "zoo-lm-modern",
        metadata.version("zoo-lm-modern"),
        False,
    )


def test_zoo_plugins_none_loads_only_the_builtins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZOO_PLUGINS", "none")
    registry = quiet_registry()
    assert by_name(registry)["modern"].status == "skipped"
    assert {c.plugin.distribution for c in registry.components()} == {"zoo-lm"}
    with pytest.raises(zoo.PresetError, match="gpt2-small-modern"):
        zoo.get_config("gpt2-small-modern", registry=registry)
    with pytest.raises(zoo.UnknownComponentError, match="unknown attention component 'gqa'"):
        zoo.build("gpt2-small", registry=registry, attention="gqa", **TINY)


def test_allow_list_rules_out_a_misbehaving_plugin(monkeypatch: pytest.MonkeyPatch, broken: None) -> None:
    monkeypatch.setenv("ZOO_PLUGINS", "modern")
    registry = quiet_registry()  # the broken plugin is never imported, so nothing warns
    plugins = by_name(registry)
    assert plugins["broken"].status == "skipped" and plugins["broken"].distribution == "zoo-broken"
    assert plugins["modern"].status == "loaded"
    assert "zoo_broken_plugin" not in sys.modules
    model = zoo.build("gpt2-small", registry=registry, attention="gqa", **TINY)
    assert model.blocks[0].attn.n_kv_heads == 1 < TINY["n_heads"]  # built by the plugin's gqa (multi-query default)


def test_deny_list_skips_only_the_named_plugins(monkeypatch: pytest.MonkeyPatch, broken: None) -> None:
    monkeypatch.setenv("ZOO_DISABLE_PLUGINS", " broken ,")
    plugins = by_name(quiet_registry())
    assert (plugins["broken"].status, plugins["modern"].status) == ("skipped", "loaded")
    monkeypatch.setenv("ZOO_DISABLE_PLUGINS", "modern")
    with pytest.warns(RuntimeWarning, match="boom on import"):
        plugins = by_name(zoo.Registry())
    assert (plugins["broken"].status, plugins["modern"].status) == ("failed", "skipped")


def test_arguments_override_the_environment(monkeypatch: pytest.MonkeyPatch, broken: None) -> None:
    monkeypatch.setenv("ZOO_PLUGINS", "none")
    plugins = by_name(quiet_registry(allow=["modern"]))
    assert (plugins["modern"].status, plugins["broken"].status) == ("loaded", "skipped")
    plugins = by_name(quiet_registry(deny=["broken", "modern"]))  # deny given: ZOO_PLUGINS still applies
    assert {p.status for p in plugins.values() if not p.builtin} == {"skipped"}


def test_a_plugin_that_raises_on_import_is_contained_and_named(broken: None) -> None:
    with pytest.warns(RuntimeWarning, match="boom on import"):
        registry = zoo.Registry()
    failed = by_name(registry)["broken"]
    assert (failed.status, failed.distribution, failed.version) == ("failed", "zoo-broken", "0.3")
    message = str(failed.error)
    assert isinstance(failed.error, zoo.PluginError) and isinstance(failed.error.__cause__, RuntimeError)
    for part in (
        "'broken'",
        "distribution zoo-broken 0.3",
        "failed to import",
        "RuntimeError: boom on import",
        "ZOO_DISABLE_PLUGINS=broken",
    ):
        assert part in message, part
    # The others still work, and a missing component points at the failure.
    assert by_name(registry)["modern"].status == "loaded"
    model = zoo.build("gpt2-small-modern", registry=registry, **TINY)
    assert model.config.attention.name == "gqa"
    with pytest.raises(zoo.UnknownComponentError, match=r"'broken' failed to load \(see `zoo plugins`\)"):
        registry.get("activation", "squareplus")
    with pytest.raises(zoo.PluginError, match="boom on import"):
        zoo.Registry(strict=True)


def test_a_third_party_component_records_its_distribution(site: MakeDist) -> None:
    site("zoo-squareplus", "2.1", "squareplus", "zoo_squareplus_plugin", SQUAREPLUS)
    registry = quiet_registry()
    component = registry.get("activation", "squareplus")
    assert (component.plugin.name, component.provider) == ("squareplus", "zoo-squareplus 2.1")
    model = zoo.build("gpt2-small-modern", registry=registry, mlp="standard", activation="squareplus", **TINY)
    assert type(model.blocks[0].mlp.act).__module__ == "zoo_squareplus_plugin"
    assert registry.get("attention", "gqa").provider.startswith("zoo-lm-modern ")


def test_a_plugin_clashing_with_another_plugin_fails_whole(site: MakeDist) -> None:
    site("zoo-clash", "1.0", "zz-clash", "zoo_clash_plugin", CLASHES_WITH_MODERN)  # loads after 'modern'
    with pytest.warns(RuntimeWarning, match="registered twice"):
        registry = zoo.Registry()
    failed = by_name(registry)["zz-clash"]
    message = str(failed.error)
    assert failed.status == "failed" and "'rotary'" in message
    assert "'modern' (distribution zoo-lm-modern" in message and "'zz-clash' (distribution zoo-clash 1.0)" in message
    assert registry.get("position", "rotary").plugin.distribution == "zoo-lm-modern"
    with pytest.raises(zoo.UnknownComponentError):
        registry.get("activation", "clash_identity")  # rolled back with the rest of the plugin
    plugins = by_name(quiet_registry(deny=["zz-clash"]))
    assert plugins["zz-clash"].status == "skipped"


# -- the `zoo` command shows the same -----------------------------------------------------


def zoo_command(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the installed ``zoo`` console script (wide, so rich does not wrap the tables)."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("ZOO_")}
    environment |= {"COLUMNS": "250", **(env or {})}
    command = [str(Path(sys.executable).with_name("zoo")), *args]
    result = subprocess.run(command, capture_output=True, text=True, env=environment, timeout=120)
    assert result.returncode == 0, result.stderr
    return result


def test_zoo_components_shows_the_external_distribution() -> None:
    version = metadata.version("zoo-lm-modern")
    rows = [line.split() for line in zoo_command("components").stdout.splitlines()]
    for kind, name in [
        ("position", "rotary"),
        ("position", "alibi"),
        ("mlp", "swiglu"),
        ("attention", "gqa"),
        ("placement", "sandwich"),
    ]:
        row = next(r for r in rows if r[:2] == [kind, name])
        assert " ".join(row).count(f"zoo-lm-modern {version}") == 1, row
    assert any(r[:2] == ["attention", "sdpa"] and "zoo-lm" in r for r in rows)


def test_zoo_plugins_shows_loaded_skipped_and_failed(site: MakeDist, broken: None) -> None:
    site("zoo-squareplus", "2.1", "squareplus", "zoo_squareplus_plugin", SQUAREPLUS)
    env = {"PYTHONPATH": os.pathsep.join(p for p in sys.path if p), "ZOO_DISABLE_PLUGINS": "squareplus"}
    listed = {p["name"]: p for p in json.loads(zoo_command("plugins", "--json", env=env).stdout)}
    assert (listed["modern"]["status"], listed["modern"]["distribution"]) == ("loaded", "zoo-lm-modern")
    assert (listed["squareplus"]["status"], listed["squareplus"]["distribution"]) == ("skipped", "zoo-squareplus")
    assert listed["broken"]["status"] == "failed" and "RuntimeError: boom on import" in listed["broken"]["error"]
    text = zoo_command("plugins", env=env).stdout
    lines = {line.split()[0]: line for line in text.splitlines() if line.split()}
    assert "zoo-lm-modern" in lines["modern"] and "loaded" in lines["modern"]
    assert "skipped" in lines["squareplus"] and "zoo-squareplus" in lines["squareplus"]
    assert "failed" in lines["broken"] and "ZOO_DISABLE_PLUGINS=broken" in text

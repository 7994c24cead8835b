"""Plugins come in by one door: the zoo's built-in plugins and the zoo-modern example import
``zoo.plugin`` and nothing else of the zoo, so a third-party package sees exactly what the
built-ins use, and what the door offers is enough to write each of them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import zoo.plugin

ROOT = Path(__file__).resolve().parents[1]
PLUGIN_SOURCES = sorted(
    [*(ROOT / "plugins").glob("*.py"), *(ROOT / "examples/zoo-modern/src/zoo_modern").rglob("*.py")]
)


def zoo_imports(path: Path) -> list[str]:
    """Every module of the zoo that ``path`` imports, at any depth (functions included),
    with the name taken from it (``zoo.plugin.hookimpl``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found += [f"{node.module}.{alias.name}" for alias in node.names]
    return [name for name in found if name == "zoo" or name.startswith("zoo.")]


def test_the_walk_finds_the_plugins() -> None:
    assert len(PLUGIN_SOURCES) >= 15
    assert sum(bool(zoo_imports(path)) for path in PLUGIN_SOURCES) >= 12


@pytest.mark.parametrize("path", PLUGIN_SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_plugin_imports_only_the_door(path: Path) -> None:
    door = {"zoo.plugin", *(f"zoo.plugin.{name}" for name in zoo.plugin.__all__)}
    others = sorted(set(zoo_imports(path)) - door)
    assert not others, f"{path.relative_to(ROOT)} imports {others}; plugins import what zoo.plugin lists only"


@pytest.mark.parametrize("name", zoo.plugin.__all__)
def test_every_name_the_door_lists_is_there(name: str) -> None:
    assert getattr(zoo.plugin, name) is not None

"""No function in zoo/, plugins/ or zoo-modern is longer than a screen: over ~80 lines of code (its docstring
aside), a function does more than one thing and should be split by what it does."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ZOO = ROOT / "zoo"
#: zoo, the built-in plugins and the zoo-modern example are held to the same limit.
FOLDERS = (ZOO, ROOT / "plugins", ROOT / "examples/zoo-modern/src")
LIMIT = 80


def code_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines from ``def`` to the end, without the docstring."""
    total = (node.end_lineno or node.lineno) - node.lineno + 1
    first = node.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        total -= (first.end_lineno or first.lineno) - first.lineno + 1
    return total


def test_no_function_in_zoo_is_over_80_lines() -> None:
    lengths = {
        f"{path.relative_to(ROOT)}:{node.lineno} {node.name}": code_lines(node)
        for folder in FOLDERS
        for path in sorted(folder.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    }
    assert len(lengths) > 300 and any("zoo_modern/families" in name for name in lengths)  # the walk found them
    long = {name: n for name, n in lengths.items() if n > LIMIT}
    assert not long, f"functions over {LIMIT} lines of code (split them by role): {long}"

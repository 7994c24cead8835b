"""No function in zoo/ is longer than a screen: over ~80 lines of code (its docstring
aside), a function does more than one thing and should be split by what it does."""

from __future__ import annotations

import ast
from pathlib import Path

ZOO = Path(__file__).resolve().parents[1] / "zoo"
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
        f"{path.relative_to(ZOO.parent)}:{node.lineno} {node.name}": code_lines(node)
        for path in sorted(ZOO.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    }
    assert len(lengths) > 300  # the walk found zoo's functions
    long = {name: n for name, n in lengths.items() if n > LIMIT}
    assert not long, f"functions over {LIMIT} lines of code (split them by role): {long}"

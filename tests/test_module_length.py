"""No module in zoo/ (nor the built-in plugins, installed as zoo.plugins, nor zoo-modern) is over 600
lines: past that a module holds more than one role and should be split by role, as
``zoo.training``'s data modules are (corpus, sampling, manifest, shards, data)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 600


def test_no_module_in_zoo_is_over_600_lines() -> None:
    lengths = {
        str(path.relative_to(ROOT)): len(path.read_text(encoding="utf-8").splitlines())
        for folder in (ROOT / "zoo", ROOT / "plugins", ROOT / "examples/zoo-modern/src")
        for path in sorted(folder.rglob("*.py"))
    }
    assert len(lengths) > 90 and "zoo/training/loop.py" in lengths  # the walk found zoo's modules
    assert "examples/zoo-modern/src/zoo_modern/families/llama_like.py" in lengths  # and zoo-modern's
    long = {name: n for name, n in lengths.items() if n > LIMIT}
    assert not long, f"modules over {LIMIT} lines (split them by role): {long}"

"""The counts the README, docs/families.md and docs/install.md state are the installed zoo's: families,
presets with weights, and every extra the package declares."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import zoo
from zoo.nn.config import preset_pretrained

ROOT = Path(__file__).resolve().parents[1]


def test_the_readme_counts_the_installed_families_and_presets_with_weights() -> None:
    text = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    found = re.search(r"adds (\d+) more architectures, (\d+) in all", text)
    assert found is not None, "README.md's family count"
    architectures = {entry.architecture for entry in zoo.default_registry().converters()}
    assert (int(found[1]), int(found[2])) == (len(architectures) - 1, len(architectures))
    weights = re.search(r"with (\d+) presets that name released weights", text)
    with_weights = [name for name in zoo.list_models() if preset_pretrained(name)]
    assert weights is not None and int(weights[1]) == len(with_weights)


UNITS = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen".split()
UNITS += "seventeen eighteen nineteen".split()
TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90}


def spelled(words: str) -> int:
    """A number spelled as docs/families.md opens its table ("Seventy-three", "One hundred and eight")."""
    words = words.lower()
    if words.startswith("one hundred"):
        rest = words.removeprefix("one hundred").removeprefix(" and ").strip()
        return 100 + (spelled(rest) if rest else 0)
    tens, _, unit = words.partition("-")
    if tens in UNITS and not unit:
        return UNITS.index(tens)
    return TENS[tens] + (UNITS.index(unit) if unit else 0)


def test_the_families_page_counts_the_installed_families() -> None:
    text = (ROOT / "docs" / "families.md").read_text(encoding="utf-8")
    found = re.search(
        r"^((?:One hundred(?: and )?)?[A-Za-z]*(?:-[a-z]+)?) architectures besides nanoGPT's files", text, re.MULTILINE
    )
    assert found is not None, "docs/families.md's family count"
    assert spelled(found[1]) == len({entry.architecture for entry in zoo.default_registry().converters()})
    assert spelled("Seventy-three") == 73 and spelled("Fifty") == 50 and spelled("twelve") == 12
    assert spelled("One hundred and eight") == 108 and spelled("One hundred and twenty-one") == 121


def test_every_extra_is_in_the_install_page_and_named_in_the_readme() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    table = (ROOT / "docs" / "install.md").read_text(encoding="utf-8")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for extra in extras:
        assert re.search(rf"^\| `{extra}` +\|", table, re.MULTILINE), f"docs/install.md lacks the {extra} extra"
        assert f"`{extra}`" in readme or f"[{extra}" in readme or f",{extra}" in readme, f"README lacks {extra}"

"""Names a package loads on first use (PEP 562), so that ``import zoo`` and ``zoo ablate
--help`` import none of what they do not run."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_names(package: str, names: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: a name of ``names`` is looked up in the
    module it maps to when first asked for, and a submodule not imported yet is imported
    when first named (``zoo.training`` after a bare ``import zoo``); ``dir()`` lists the
    names beside the loaded ones."""

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            if name.isidentifier() and not name.startswith("_") and importlib.util.find_spec(f"{package}.{name}"):
                return importlib.import_module(f"{package}.{name}")  # `import zoo; zoo.training.prepare(...)`
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    def __dir__() -> list[str]:
        """The package's names, the lazily loaded ones included."""
        return sorted({*vars(sys.modules[package]), *names})

    return __getattr__, __dir__

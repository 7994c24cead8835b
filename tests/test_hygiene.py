"""Rules the test suite keeps about itself."""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def test_no_test_module_imports_conftest() -> None:
    # conftest.py is pytest's to load; shared helpers live in tests/helpers.py or are fixtures.
    offenders = [
        p.name
        for p in TESTS.glob("*.py")
        if re.search(r"^\s*(from (tests\.)?conftest import|import (tests\.)?conftest)", p.read_text(), re.M)
    ]
    assert not offenders, f"import from tests/helpers.py instead of conftest in: {offenders}"

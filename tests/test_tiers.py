"""The tier table in ``tests/tiers.py`` names tests that exist: a renamed test would leave the slow tier
silently and make the fast one slower."""

from __future__ import annotations

import re
from pathlib import Path

from tiers import SLOW_PATHS, SLOW_TESTS

TESTS = Path(__file__).resolve().parent


def test_every_test_named_slow_exists():
    missing = [
        f"{path}::{name}"
        for path, names in SLOW_TESTS.items()
        for name in names
        if not re.search(rf"^def {name}\(", (TESTS / path).read_text(), re.M)
    ]
    assert missing == []


def test_every_slow_path_names_files():
    for prefix in SLOW_PATHS:
        assert list(TESTS.glob(prefix + "*")), prefix

"""The tiers come from the measured table, and the run's order from measured file costs: both checked on
small tables written here, and the committed table against the tests that exist."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

from support.durations import TABLE, is_full_run, load_table, longest_files_first, own_seconds
from tiers import SLOW_TESTS, choose_slow_seconds, fast_tier_work, id_parts, slow_tests, tier_of

TESTS = Path(__file__).resolve().parent


def record(call: float, setup: float = 0.0, shared: float = 0.0) -> dict[str, float]:
    return {"setup": setup, "call": call, "teardown": 0.0, "shared_setup": shared}


def test_own_cost_leaves_out_the_shared_fixtures_a_test_built_first():
    assert own_seconds(record(2.0, setup=40.0, shared=39.5)) == 2.5
    assert own_seconds({"call": 1.0}) == 1.0


def test_test_key_strips_classes_and_parameters():
    assert id_parts("tests/test_a.py::test_b[x-1]") == ("test_a.py", "test_b")
    assert id_parts("tests/airflow/test_c.py::TestD::test_e") == ("airflow/test_c.py", "test_e")


def test_the_slow_bound_is_the_lowest_that_fits_the_budget():
    table = {
        "tests/test_a.py::test_world_first": record(1.0, setup=100.0, shared=100.0),
        "tests/test_a.py::test_quick": record(1.0),
        "tests/test_b.py::test_long": record(50.0),
        "tests/test_b.py::test_longer": record(80.0),
        "tests/test_c.py::test_medium[1]": record(20.0),
        "tests/e2e/test_d.py::test_servers": record(500.0),
    }
    # everything fast: 1 + 100 (a's world) + 1 + 50 + 80 + 20 = 252 s; e2e is a tier of its own
    assert fast_tier_work(table, float("inf")) == 252.0
    assert choose_slow_seconds(table, budget=300.0) == float("inf")
    assert choose_slow_seconds(table, budget=200.0) == 80.0  # 172 s left
    assert choose_slow_seconds(table, budget=150.0) == 50.0  # 122 s left
    assert choose_slow_seconds(table, budget=110.0) == 20.0  # 102 s: the world stays, its first test too
    assert slow_tests(table, 20.0) == {
        "test_b.py": {"test_long", "test_longer"},
        "test_c.py": {"test_medium"},
    }


def test_files_run_longest_first_in_their_own_order():
    items = [
        SimpleNamespace(nodeid=n)
        for n in ("tests/a.py::x", "tests/b.py::y", "tests/a.py::z", "tests/c.py::w")
    ]
    costs = {"tests/a.py": 5.0, "tests/b.py": 50.0}  # c.py was never measured: it counts as long
    ordered = [item.nodeid for item in longest_files_first(items, costs)]  # type: ignore[arg-type]
    assert ordered == ["tests/c.py::w", "tests/b.py::y", "tests/a.py::x", "tests/a.py::z"]


def test_only_a_green_run_of_every_tier_updates_the_table():
    full = {"args": ["-n", "2", "-p", "no:cacheprovider"], "markexpr": "", "exitstatus": 0}
    assert is_full_run(full)
    assert not is_full_run({**full, "exitstatus": 1})
    assert not is_full_run({**full, "markexpr": "not slow and not e2e"})
    assert not is_full_run({**full, "args": ["tests/engine/test_spec.py"]})
    assert not is_full_run({**full, "args": ["-k", "fk"]})


def test_the_committed_table_measured_a_full_run():
    assert load_table(TABLE), f"{TABLE} is missing: run ./scripts/test.sh --all, then durations.py update"
    assert tier_of("e2e/test_spark_connect.py", "anything") == "e2e"


def test_every_test_the_table_makes_slow_exists():
    """A renamed slow test would leave the slow tier silently until the table is measured again."""
    missing = [
        f"{path}::{name}"
        for path, names in SLOW_TESTS.items()
        for name in names
        if not (TESTS / path).is_file()
        or not re.search(rf"^\s*(async )?def {name}\(", (TESTS / path).read_text(), re.M)
    ]
    assert missing == [], (
        "measure again: ./scripts/test.sh --all && .venv/bin/python tests/support/durations.py update"
    )

"""The test tiers, derived from measurement: the one table ``tests/conftest.py`` marks tests from.

* ``e2e``: every test under ``tests/e2e/`` (real servers: Airflow, Spark Connect, a standalone cluster).
* ``slow``: every test under ``tests/objectstore/`` but the few that start no JVM; the tests whose own
  cost, as the committed table ``tests/durations.json`` measured it (a full
  ``./scripts/test.sh --all``; see ``support/durations.py``), is at least :data:`slow_seconds`, chosen as the
  lowest bound that keeps the fast tier's measured work within :data:`FAST_TIER_BUDGET_S`; and any test that
  declares ``@pytest.mark.slow``.
* the fast tier (``./scripts/test.sh``): everything else, including tests no run has measured yet.

A test's own cost leaves out the shared fixtures it happened to build first (a module's world of tables),
so a world's first test is not sent to the slow tier for the world's sake; the fast tier's work counts a
file's shared fixtures once if any of its tests stays fast.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from support.durations import load_table, own_seconds

#: Real servers: Airflow's api-server, scheduler and triggerer; a Spark Connect server; a standalone cluster.
E2E_PATHS = ("e2e/",)
#: Every join on an S3-protocol server (a moto server the fixtures start): slow, whatever each test costs,
#: except the listed tests that need no JVM.
SLOW_PATHS = ("objectstore/",)
QUICK_IN_SLOW_PATHS = frozenset(
    {"test_the_environment_alone_is_refused", "test_sensor_trigger_and_view_read_with_the_connections_key"}
)
#: The fast tier's measured work, in seconds of one worker: about 7 minutes of wall time on two workers
#: once set-up is counted, under the 10 the README promises for ``./scripts/test.sh``.
FAST_TIER_BUDGET_S = 12 * 60.0
#: No test under this many seconds of its own goes to the slow tier, whatever the budget allows.
MIN_SLOW_SECONDS = 5.0
#: The examples of a property test in the fast tier (Hypothesis profile ``fast``, tests/conftest.py): its
#: measured cost (at the ``ci`` count) is scaled to it.
FAST_EXAMPLES = 1


def fast_cost(record: Mapping[str, Any]) -> float:
    """What a test costs in the fast tier (a property test at the fast profile's example count)."""
    return own_seconds(record, examples=FAST_EXAMPLES)


def id_parts(test_id: str) -> tuple[str, str]:
    """``tests/a/test_x.py::Class::test_y[p]`` -> (``a/test_x.py``, ``test_y``): what tiers are by."""
    path, _, rest = test_id.partition("::")
    return path.removeprefix("tests/"), rest.rsplit("::", 1)[-1].split("[", 1)[0]


def fast_tier_work(table: Mapping[str, Mapping[str, Any]], bound: float) -> float:
    """Seconds of work in the fast tier if tests of at least ``bound`` own seconds were slow."""
    own = 0.0
    shared: dict[str, float] = defaultdict(float)
    files_kept: set[str] = set()
    for test_id, record in table.items():
        path, _ = id_parts(test_id)
        if path.startswith(E2E_PATHS):
            continue
        shared[path] += record.get("shared_setup", 0.0)
        if fast_cost(record) < bound:
            own += fast_cost(record)
            files_kept.add(path)
    return own + sum(shared[path] for path in files_kept)


def choose_slow_seconds(table: Mapping[str, Mapping[str, Any]], budget: float = FAST_TIER_BUDGET_S) -> float:
    """The lowest own-cost bound (at least :data:`MIN_SLOW_SECONDS`) whose fast tier fits ``budget``:
    tried from the highest measured cost down, so the fewest tests leave the fast tier."""
    costs = sorted(
        {
            fast_cost(r)
            for test_id, r in table.items()
            if fast_cost(r) >= MIN_SLOW_SECONDS and not id_parts(test_id)[0].startswith(E2E_PATHS)
        }
    )
    bound = float("inf")
    for cost in reversed(costs):
        if fast_tier_work(table, bound) <= budget:
            return bound
        bound = cost
    return max(bound, MIN_SLOW_SECONDS) if costs else bound


def slow_tests(table: Mapping[str, Mapping[str, Any]], bound: float) -> dict[str, set[str]]:
    """Path (relative to tests/) -> the names of its tests with an item of at least ``bound`` own seconds."""
    slow: dict[str, set[str]] = defaultdict(set)
    for test_id, record in table.items():
        path, name = id_parts(test_id)
        if fast_cost(record) >= bound and not path.startswith(E2E_PATHS):
            slow[path].add(name)
    return dict(slow)


MEASURED = load_table()
slow_seconds = choose_slow_seconds(MEASURED)
SLOW_TESTS = slow_tests(MEASURED, slow_seconds)


def tier_of(path: str, name: str) -> str | None:
    """The tier of test ``name`` in ``path`` (relative to tests/): "slow", "e2e", or None for the fast one."""
    if path.startswith(E2E_PATHS):
        return "e2e"
    if name in SLOW_TESTS.get(path, ()):
        return "slow"
    if path.startswith(SLOW_PATHS) and name not in QUICK_IN_SLOW_PATHS:
        return "slow"
    return None

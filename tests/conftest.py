"""Shared fixtures (one Delta-enabled SparkSession for the whole run, sized for 2 cores), the test tiers and
the Hypothesis profiles.

Tiers. ``./scripts/test.sh`` runs the fast tier (``-m "not slow and not e2e"``); ``./scripts/test.sh --all``
and CI run every tier. A test's tier comes from this file only: its path (:data:`SLOW_PATHS`,
:data:`E2E_PATHS`), or for the crash tests the phase it kills at (:data:`FAST_CRASH_PHASES`), or a
``@pytest.mark.slow`` the test declares itself.

Hypothesis. ``HYPOTHESIS_PROFILE`` picks the example count of every property test: ``fast`` (the fast
tier), ``ci`` (every tier, the default) or ``deep`` (a long local run). No test sets its own count.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

os.environ.setdefault("PYSPARK_PYTHON", os.sys.executable)

_PROPERTY_SETTINGS = {
    "deadline": None,  # a Spark action takes seconds, and its first run far longer than the next
    "suppress_health_check": [HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
}
settings.register_profile("fast", max_examples=3, **_PROPERTY_SETTINGS)
settings.register_profile("ci", max_examples=10, **_PROPERTY_SETTINGS)
settings.register_profile("deep", max_examples=60, **_PROPERTY_SETTINGS)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

TESTS = Path(__file__).resolve().parent
#: Every test in these files is in the slow tier: a subprocess killed at every phase, every example DAG run
#: twice with ``airflow dags test`` (one file per DAG, so that the two workers share them).
SLOW_PATHS = (
    "test_fk_crash.py",
    "test_multiway_crash.py",
    "test_windowed_crash.py",
    "airflow/test_dags_",
)
#: Real servers: Airflow's api-server, scheduler and triggerer; a Spark Connect server; a standalone cluster.
E2E_PATHS = ("e2e/",)
#: The one phase per kind whose crash test stays in the fast tier (the others are slow).
FAST_CRASH_PHASES = {
    "test_fk_crash.py": "committing",
    "test_multiway_crash.py": "committing",
    "test_windowed_crash.py": "state_written",
}


def _tier(path: str, item: pytest.Item) -> str | None:
    if path.startswith(E2E_PATHS):
        return "e2e"
    phase = getattr(getattr(item, "callspec", None), "params", {}).get("phase")
    if path in FAST_CRASH_PHASES and phase is not None:
        return None if phase == FAST_CRASH_PHASES[path] else "slow"
    if path.startswith(SLOW_PATHS):
        return "slow"
    return None


def pytest_itemcollected(item: pytest.Item) -> None:
    """Mark each test with its tier as it is collected."""
    tier = _tier(Path(str(item.fspath)).resolve().relative_to(TESTS).as_posix(), item)
    if tier is not None:
        item.add_marker(getattr(pytest.mark, tier))


@pytest.fixture(scope="session")
def spark():
    """The one SparkSession of a test run: local[2], 2 shuffle partitions, Delta on."""
    from airflow_provider_fkjoin.engine import get_spark

    session = get_spark(
        "local[2]",
        conf={
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.databricks.delta.snapshotPartitions": "2",
            "spark.sql.adaptive.coalescePartitions.initialPartitionNum": "2",
            # 8 MB memory pages, not Spark's 64 MB for this heap: each 64 MB page is a humongous G1 object
            # needing contiguous free regions, and a broadcast build once failed in a full run with
            # "Not enough memory to build and broadcast" (a subset's heap stays under 1 GB after GC)
            "spark.buffer.pageSize": "8m",
        },
        app_name="fkjoin-tests",
    )
    yield session
    session.stop()


@pytest.fixture
def warehouse(tmp_path: Path) -> Iterator[Path]:
    """A fresh folder for the Delta tables of one test."""
    path = tmp_path / "warehouse"
    path.mkdir()
    yield path


@pytest.fixture(autouse=True)
def no_cached_frames_left(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail a test whose run left a cached DataFrame behind: a long-lived session (Spark Connect, a
    notebook) would keep it for good, and a test session's heap fills up. Cleared either way."""
    yield
    if "spark" not in request.fixturenames:
        return
    spark = request.getfixturevalue("spark")
    cache = spark._jsparkSession.sharedState().cacheManager()
    if cache.isEmpty():
        return
    plans = cache.cachedData()
    leaked = [plans.apply(i).plan().simpleString(10)[:300] for i in range(plans.size())]
    spark.catalog.clearCache()
    pytest.fail(f"{len(leaked)} cached DataFrame(s) left behind:\n" + "\n".join(leaked))

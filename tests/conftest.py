"""Shared fixtures (one Delta-enabled SparkSession for the whole run, sized for 2 cores), the test tiers and
the Hypothesis profiles.

Tiers. ``./scripts/test.sh`` runs the fast tier (``-m "not slow and not e2e"``); ``./scripts/test.sh --all``
and CI run every tier. This file marks each test from the one table in ``tests/tiers.py`` (by path, or by
name); a ``@pytest.mark.slow`` in a test file adds to it.

Hypothesis. ``HYPOTHESIS_PROFILE`` picks the example count of every property test: ``fast`` (the fast
tier), ``ci`` (every tier, the default) or ``deep`` (a long local run). No test sets its own count. ``ci``
is Hypothesis's own CI profile with the count set: the same examples on every run (``derandomize``), no
example database, and a failure printed with its ``@reproduce_failure`` blob; Hypothesis stops shrinking a
failure after five minutes (``MAX_SHRINKING_SECONDS``), so a red property test ends within its timeout.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from tiers import FAST_EXAMPLES, tier_of

os.environ.setdefault("PYSPARK_PYTHON", os.sys.executable)

_PROPERTY_SETTINGS = {
    "deadline": None,  # a Spark action takes seconds, and its first run far longer than the next
    "suppress_health_check": [HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
}
settings.register_profile("fast", max_examples=FAST_EXAMPLES, **_PROPERTY_SETTINGS)
settings.register_profile("ci", settings.get_profile("ci"), max_examples=10, **_PROPERTY_SETTINGS)
settings.register_profile("deep", max_examples=60, **_PROPERTY_SETTINGS)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

TESTS = Path(__file__).resolve().parent


def pytest_configure(config: pytest.Config) -> None:
    """Record every test's durations, and start the longest files first (``support/durations.py``)."""
    from support.durations import DurationsPlugin

    config.pluginmanager.register(DurationsPlugin(config), "fkjoin-durations")


def pytest_itemcollected(item: pytest.Item) -> None:
    """Mark each test with its tier as it is collected."""
    path = Path(str(item.fspath)).resolve().relative_to(TESTS).as_posix()
    tier = tier_of(path, getattr(item, "originalname", item.name))
    if tier is not None:
        item.add_marker(getattr(pytest.mark, tier))


@pytest.fixture(scope="session")
def spark():
    """The one SparkSession of a test run: local[2], 2 shuffle partitions, Delta on; Delta's state in one
    partition and compiled plans kept, as the engine's own sessions do (a tiny refresh costs about a
    quarter less CPU); the default JIT (see ``driver_jvm``: a long-lived JVM needs C2)."""
    from airflow_provider_fkjoin.engine import get_spark

    session = get_spark(
        "local[2]",
        conf={
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.databricks.delta.snapshotPartitions": "1",
            "spark.sql.codegen.cache.maxEntries": "2000",
            "spark.sql.adaptive.coalescePartitions.initialPartitionNum": "2",
            # 8 MB memory pages, not Spark's 64 MB for this heap: each 64 MB page is a humongous G1 object
            # needing contiguous free regions, and a broadcast build once failed in a full run with
            # "Not enough memory to build and broadcast" (a subset's heap stays under 1 GB after GC)
            "spark.buffer.pageSize": "8m",
            # VACUUM lists and deletes in a job of this many tasks (Spark's default: 10,000), 25-40 s on
            # a two-file table here; the vacuumed-history tests take 1-3 s with it
            "spark.sql.sources.parallelPartitionDiscovery.parallelism": "2",
            # S3A configured (servers on 127.0.0.1 serve buckets by path), so the session loads the S3A
            # connector's jars for tests/objectstore
            "spark.hadoop.fs.s3a.path.style.access": "true",
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

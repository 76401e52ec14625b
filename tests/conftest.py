"""Shared fixtures: one Delta-enabled SparkSession for the whole run, sized for 2 cores."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("PYSPARK_PYTHON", os.sys.executable)


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

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

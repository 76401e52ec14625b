"""The engine's Spark and Delta internals (``engine/internals.py``): each one exercised on the pinned
versions, so an upgrade that changes them fails here, loudly, before it fails in a refresh."""

from __future__ import annotations

import os
from pathlib import Path

import deltalake
import pytest

from airflow_provider_fkjoin.engine.runtime import internals


def test_runtime_is_a_tested_version(spark) -> None:
    internals._checked.discard(id(spark))
    internals.check_versions(spark)
    assert ".".join(spark.version.split(".")[:2]) in internals.TESTED_SPARK
    assert internals._delta_version(spark).startswith(internals.TESTED_DELTA)


def test_an_untested_version_is_refused(spark, monkeypatch) -> None:
    internals._checked.discard(id(spark))
    monkeypatch.setattr(internals, "TESTED_DELTA", ("9.9",))
    with pytest.raises(internals.UnsupportedRuntimeError, match=r"Delta 4\.4"):
        internals.check_versions(spark)
    internals._checked.discard(id(spark))


def test_analysed_node_classes_sees_expressions_and_subqueries(spark) -> None:
    classes = internals.analysed_node_classes(spark.range(1).selectExpr("rand() AS x", "(SELECT 1) AS y"))
    assert {"Rand", "ScalarSubquery", "Subquery", "Project"} <= classes


def test_delta_transaction_version_matches_the_log(spark, warehouse: Path) -> None:
    path = str(warehouse / "t")
    spark.range(3).write.format("delta").option("txnAppId", "probe-app").option("txnVersion", 7).save(path)
    assert internals.delta_transaction_version(spark, path, "probe-app") == 7
    assert deltalake.DeltaTable(path).transaction_version("probe-app") == 7
    assert internals.delta_transaction_version(spark, path, "other-app") is None


def test_transaction_versions_read_from_the_log_match_deltalake(spark, warehouse: Path) -> None:
    """What Spark Connect reads instead of the snapshot: the last checkpoint plus the commits after it.
    ``deltalake`` reading the same log is the oracle, before and after checkpoints and for an app id
    whose only transaction is inside a checkpoint."""
    path = str(warehouse / "t")
    table = deltalake.DeltaTable
    writes = [("a", 1), ("b", 1), ("a", 2), ("c", 5), ("a", 3), ("b", 4), ("a", 4)]
    for number, (app, version) in enumerate(writes):
        writer = spark.range(1).write.format("delta").mode("append").option("txnAppId", app)
        if number == 0:
            writer = writer.option("delta.checkpointInterval", "3")
        writer.option("txnVersion", version).save(path)
        for app_id in ("a", "b", "c", "never"):
            assert internals.transaction_version_from_log(spark, path, app_id) == table(
                path
            ).transaction_version(app_id), (number, app_id)
    assert any(name.endswith(".checkpoint.parquet") for name in os.listdir(f"{path}/_delta_log"))


def test_path_has_files(spark, warehouse: Path) -> None:
    from airflow_provider_fkjoin.engine.delta.tables import path_has_files

    empty, full = warehouse / "empty", warehouse / "full"
    empty.mkdir()
    full.mkdir()
    (full / "x.csv").write_text("1\n")
    assert not path_has_files(spark, f"file://{empty}")
    assert path_has_files(spark, f"file://{full}")
    assert not path_has_files(spark, f"file://{warehouse}/missing")


def test_observed_metrics_are_read_without_waiting(spark) -> None:
    """After an action, an observation's metrics are there; before any action ran the observed frame,
    reading says so (None) instead of waiting forever as ``Observation.get`` would."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    ran = Observation()
    spark.range(5).observe(ran, F.count(F.lit(1)).alias("rows")).collect()
    assert internals.observation_metrics(ran) == {"rows": 5}

    never = Observation()
    spark.range(5).observe(never, F.count(F.lit(1)).alias("rows"))
    assert internals.observation_metrics(never) is None

"""The engine's Spark and Delta internals (``engine/internals.py``): each one exercised on the pinned
versions, so an upgrade that changes them fails here, loudly, before it fails in a refresh."""

from __future__ import annotations

from pathlib import Path

import deltalake
import pytest

from airflow_provider_fkjoin.engine import internals


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


def test_path_has_files(spark, warehouse: Path) -> None:
    empty, full = warehouse / "empty", warehouse / "full"
    empty.mkdir()
    full.mkdir()
    (full / "x.csv").write_text("1\n")
    assert not internals.path_has_files(spark, f"file://{empty}")
    assert internals.path_has_files(spark, f"file://{full}")
    assert not internals.path_has_files(spark, f"file://{warehouse}/missing")

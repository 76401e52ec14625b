"""Global tables (KIP-99) from a keyed Delta table: bootstrap to the high watermark, checkpoint in the
output commit, restore from it, and the full rebuilds an unusable checkpoint forces.

The expected table is always the source snapshot at the result's checkpoint, read back by Spark."""

from __future__ import annotations

from pathlib import Path

import pytest
from delta.tables import DeltaTable
from helpers import create_table, delete_keys, read_rows, upsert
from support.global_tables import PRODUCTS, spec_for, state

from airflow_provider_fkjoin.engine import SpecError, refresh_status, run_spec
from airflow_provider_fkjoin.engine.core.trace import phase_listener


def test_bootstrap_checkpoint_restore_and_noop(spark, warehouse: Path) -> None:
    src, out = warehouse / "products", warehouse / "products_global"
    create_table(
        spark, src, [{"product_id": i, "name": f"p{i}", "price": float(i)} for i in range(1, 5)], PRODUCTS
    )
    upsert(spark, src, [{"product_id": 5, "name": "p5", "price": 5.0}], ["product_id"])
    spec = spec_for(src, out)

    first = run_spec(spec, spark=spark)
    assert first["mode"] == "full" and first["reason"].startswith("first run")
    assert (first["high_watermark"], first["checkpoint"], first["caught_up"]) == (1, 1, True)
    assert first["inputs"]["source"] == {"path": str(src), "from_version": None, "to_version": 1}
    assert state(read_rows(spark, out)) == state(read_rows(spark, src, 1))
    assert (
        DeltaTable.forPath(spark, str(out)).detail().first()["properties"]["delta.enableChangeDataFeed"]
        == "true"
    )
    assert run_spec(spec, spark=spark)["mode"] == "noop"

    # updates, a delete (tombstone) and an insert, in three source commits: the restart applies them only
    upsert(spark, src, [{"product_id": 1, "name": "P1", "price": 10.0}], ["product_id"])
    delete_keys(spark, src, [2], ["product_id"])
    upsert(spark, src, [{"product_id": 6, "name": "p6", "price": 6.0}], ["product_id"])

    # a refresh that dies before its commit leaves the checkpoint where it was
    def crash(name: str) -> None:
        if name == "merge_started":
            raise RuntimeError("killed")

    with phase_listener(crash), pytest.raises(RuntimeError):
        run_spec(spec, spark=spark)
    assert refresh_status(spec, spark=spark)["inputs"]["source"]["consumed_version"] == 1

    second = run_spec(spec, spark=spark)
    assert second["mode"] == "incremental"
    assert second["inputs"]["source"] == {"path": str(src), "from_version": 1, "to_version": 4}
    assert (second["checkpoint"], second["caught_up"]) == (4, True)
    assert (second["rows"]["inserted"], second["rows"]["updated"], second["rows"]["deleted"]) == (1, 1, 1)
    assert state(read_rows(spark, out)) == state(read_rows(spark, src, 4))
    status = refresh_status(spec, spark=spark)
    assert (
        status["inputs"]["source"]["consumed_version"] == 4
        and status["inputs"]["source"]["lag_versions"] == 0
    )


def test_unusable_checkpoint_rebuilds(spark, warehouse: Path) -> None:
    """History vacuumed, then the spec changed: each is a full rebuild that says why."""
    src, out = warehouse / "products", warehouse / "products_global"
    create_table(
        spark, src, [{"product_id": i, "name": f"p{i}", "price": float(i)} for i in range(1, 4)], PRODUCTS
    )
    spec = spec_for(src, out)
    run_spec(spec, spark=spark)
    upsert(spark, src, [{"product_id": 1, "name": "P1", "price": 10.0}], ["product_id"])
    spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    try:
        DeltaTable.forPath(spark, str(src)).vacuum(0)
        for cdc in (src / "_change_data").glob("*"):
            cdc.unlink()
    finally:
        spark.conf.unset("spark.databricks.delta.retentionDurationCheck.enabled")
    # the incremental plan's fallback: a recompute (what auto picks for these few rows) reads no feed
    rebuilt = run_spec({**spec, "refresh_strategy": "incremental"}, spark=spark)
    assert rebuilt["mode"] == "full" and "unavailable" in rebuilt["reason"], rebuilt["reason"]
    assert (rebuilt["rows"]["inserted"], rebuilt["rows"]["updated"], rebuilt["rows"]["deleted"]) == (0, 1, 0)
    assert state(read_rows(spark, out)) == state(read_rows(spark, src, 1))

    changed = run_spec(spec_for(src, out, broadcast_warn_bytes=1), spark=spark)
    assert changed["mode"] == "noop", "a tuning field does not change the fingerprint"
    assert any("broadcast_warn_bytes" in w for w in changed["warnings"])
    renamed = dict(spec, source={"path": str(src), "key": ["product_id", "name"]})
    again = run_spec(renamed, spark=spark)
    assert again["mode"] == "full" and "spec changed" in again["reason"]


def test_empty_source_and_bad_specs(spark, warehouse: Path) -> None:
    src, out = warehouse / "products", warehouse / "products_global"
    create_table(spark, src, [], PRODUCTS)
    result = run_spec(spec_for(src, out), spark=spark)
    assert result["mode"] == "full" and result["rows"]["inserted"] == 0 and read_rows(spark, out) == []
    with pytest.raises(SpecError, match=r"source.key\[0\]: column 'sku' is not in source table"):
        run_spec(dict(spec_for(src, warehouse / "x"), source={"path": str(src), "key": ["sku"]}), spark=spark)
    with pytest.raises(SpecError, match="the output is the same table as source"):
        run_spec(spec_for(src, src), spark=spark)
    with pytest.raises(SpecError, match="no Delta table"):
        run_spec(spec_for(warehouse / "missing", warehouse / "y"), spark=spark)

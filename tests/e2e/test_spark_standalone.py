"""The engine's job submitted through FkJoinHook to a real Spark standalone cluster (master + worker).

The inputs are written with the ``deltalake`` package (no Spark), the join runs on the cluster through
the Airflow ``spark`` connection, and the output is checked against a pure-Python recomputation of the
left foreign-key join, after a first (full) refresh and after an incremental one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from e2e_support import wait_for

pytestmark = pytest.mark.timeout(600)

CDF = {"delta.enableChangeDataFeed": "true"}
CONN_ID = "spark_e2e_standalone"


def _expected(orders: list[dict[str, Any]], customers: list[dict[str, Any]]) -> dict[int, tuple[Any, ...]]:
    """Left FK join, recomputed independently: every order; the customer's name when its FK matches."""
    names = {c["customer_id"]: c["name"] for c in customers if c["customer_id"] is not None}
    out: dict[int, tuple[Any, ...]] = {}
    for order in orders:
        if order["order_id"] is None:
            continue
        fk = order["customer_id"]
        out[order["order_id"]] = (order["amount"], names.get(fk) if fk is not None else None)
    return out


def _rows(path: Path) -> list[dict[str, Any]]:
    """A Delta input table's current rows (the inputs have no deletion vectors, so deltalake reads them)."""
    return pa.table(DeltaTable(str(path)).to_pyarrow_table()).to_pylist()


def _output(spark: Any, path: Path) -> dict[int, tuple[Any, ...]]:
    """The output table's rows, read with Spark (the output uses deletion vectors)."""
    rows = spark.read.format("delta").load(str(path)).collect()
    result = {row["order_id"]: (row["amount"], row["customer_name"]) for row in rows}
    assert len(result) == len(rows), "duplicate keys in the output"
    return result


def test_foreign_key_join_on_standalone_cluster(
    spark_standalone: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spark: Any
) -> None:
    from airflow_provider_fkjoin.hooks import FkJoinHook

    orders, customers, output = tmp_path / "orders", tmp_path / "customers", tmp_path / "orders_named"
    write_deltalake(
        str(orders),
        pa.table(
            {
                "order_id": pa.array([1, 2, 3, 4, 5], pa.int64()),
                "customer_id": pa.array([10, 20, 10, None, 99], pa.int64()),
                "amount": pa.array([1.5, 2.5, 3.5, 4.5, 5.5], pa.float64()),
            }
        ),
        configuration=CDF,
    )
    write_deltalake(
        str(customers),
        pa.table(
            {
                "customer_id": pa.array([10, 20, 30], pa.int64()),
                "name": pa.array(["ada", "bob", "cy"], pa.string()),
            }
        ),
        configuration=CDF,
    )
    spec = {
        "kind": "foreign_key_join",
        "left": {"path": str(orders), "key": ["order_id"]},
        "right": {"path": str(customers), "key": ["customer_id"]},
        "foreign_key": ["customer_id"],
        "how": "left",
        "columns": {"amount": "l.amount", "customer_name": "r.name"},
        "output": {"path": str(output)},
    }
    # The Airflow connection, as a user would give it: the standalone master's URL.
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", spark_standalone.master_url)
    hook = FkJoinHook(
        conn_id=CONN_ID,
        conf={
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.driver.memory": "1g",
            "spark.executor.memory": "1g",
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.databricks.delta.snapshotPartitions": "1",
            "spark.ui.enabled": "false",
        },
    )
    argv = hook.spark_submit_command(spec)
    assert argv[argv.index("--master") + 1] == spark_standalone.master_url

    first = hook.run(spec)
    assert first["mode"] == "full", json.dumps(first)
    expected = _expected(_rows(orders), _rows(customers))
    assert _output(spark, output) == expected
    assert first["rows"]["inserted"] == len(expected)

    # Changes on both sides: a rename, a right delete (retracts to null), an FK move, a new order.
    DeltaTable(str(customers)).update(predicate="customer_id = 10", updates={"name": "'ada lovelace'"})
    DeltaTable(str(customers)).delete("customer_id = 20")
    DeltaTable(str(orders)).update(predicate="order_id = 3", updates={"customer_id": "30"})
    write_deltalake(
        str(orders),
        pa.table(
            {
                "order_id": pa.array([6], pa.int64()),
                "customer_id": pa.array([30], pa.int64()),
                "amount": pa.array([6.5], pa.float64()),
            }
        ),
        mode="append",
    )

    second = hook.run(spec)
    assert second["mode"] == "incremental", json.dumps(second)
    assert second["inputs"]["left"]["from_version"] == first["inputs"]["left"]["to_version"]
    expected_after = _expected(_rows(orders), _rows(customers))
    assert _output(spark, output) == expected_after
    assert expected_after != expected

    # Both refreshes ran on the cluster, not on a local master (the master records an application's end
    # asynchronously, so the second one may still be finishing).
    def finished_apps() -> list[dict] | None:
        apps = spark_standalone.state()["completedapps"]
        done = [app for app in apps if app.get("state") == "FINISHED" and app["name"].startswith("fkjoin")]
        return done if len(done) >= 2 else None

    assert len(wait_for(finished_apps, timeout_s=60, what="two finished fkjoin applications")) == 2

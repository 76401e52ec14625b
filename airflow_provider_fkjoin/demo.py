"""The demo behind ``fkjoin demo``: orders joined to customers by foreign key, refreshed incrementally.

It builds two small Delta tables, runs a full refresh, changes a few rows on both sides (a customer
renamed, one deleted, an order moved to another customer, an order deleted, new orders), refreshes
again and shows that only the affected orders were recomputed.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from delta.tables import DeltaTable
from pyspark.sql import SparkSession

from airflow_provider_fkjoin.engine import run_spec

CUSTOMERS = [
    (1, "Ada", "EU"),
    (2, "Grace", "US"),
    (3, "Linus", "EU"),
    (4, "Barbara", "US"),
    (5, "Alan", "UK"),
]


def _write(spark: SparkSession, rows: list[tuple[Any, ...]], schema: str, path: Path) -> None:
    (
        spark.createDataFrame(rows, schema)
        .write.format("delta")
        .option("delta.enableChangeDataFeed", "true")
        .mode("overwrite")
        .save(str(path))
    )


def _show(spark: SparkSession, path: Path, title: str, limit: int = 6) -> None:
    print(f"\n{title}")
    spark.read.format("delta").load(str(path)).orderBy("order_id").show(limit, truncate=False)


def run_demo(warehouse: Path, spark: SparkSession) -> dict[str, Any]:
    """Run the demo in ``warehouse`` (recreated) and return both refresh results."""
    shutil.rmtree(warehouse, ignore_errors=True)
    warehouse.mkdir(parents=True)
    orders, customers, enriched = warehouse / "orders", warehouse / "customers", warehouse / "orders_enriched"
    order_rows = [(i, 1 + i % 5, round(10.0 + 7.5 * i, 2), "open") for i in range(1, 21)]
    _write(spark, order_rows, "order_id long, customer_id long, amount double, status string", orders)
    _write(spark, CUSTOMERS, "customer_id long, name string, region string", customers)
    spec = {
        "kind": "foreign_key_join",
        "left": {"path": str(orders), "key": ["order_id"]},
        "right": {"path": str(customers), "key": ["customer_id"]},
        "foreign_key": ["customer_id"],
        "how": "left",
        "output": {"path": str(enriched)},
    }
    first = run_spec(spec, spark=spark)
    print(f"first refresh: mode={first['mode']} ({first['reason']}), rows={first['rows']}")
    _show(spark, enriched, "orders_enriched after the first refresh:")

    customers_table = DeltaTable.forPath(spark, str(customers))
    customers_table.update("customer_id = 2", {"name": "'Grace Hopper'"})
    customers_table.delete("customer_id = 5")
    orders_table = DeltaTable.forPath(spark, str(orders))
    orders_table.update("order_id = 1", {"customer_id": "3", "status": "'moved'"})
    orders_table.delete("order_id = 3")
    spark.createDataFrame(
        [(21, 4, 99.0, "new"), (22, 9, 5.0, "new")],
        "order_id long, customer_id long, amount double, status string",
    ).write.format("delta").mode("append").save(str(orders))

    second = run_spec(spec, spark=spark)
    print(f"\nsecond refresh: mode={second['mode']}, inputs={second['inputs']}, rows={second['rows']}")
    _show(spark, enriched, "orders_enriched after the incremental refresh:")
    return {"first": first, "second": second}

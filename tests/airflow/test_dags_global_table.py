"""End to end: ``airflow dags test`` of the global-table DAG (bootstrap, sensor gate, lookup join)."""

from __future__ import annotations

from typing import Any

import pytest
from dags_support import Airflow, output_rows, rows_at
from deltalake import DeltaTable

from airflow_provider_fkjoin.engine.logs.watermarks import progress

# Spark and Airflow start several JVMs and interpreters per DAG run: allow for a busy machine.
pytestmark = pytest.mark.timeout(2400)


def products_as_of(cdc: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """The table a CDC changelog describes: latest event per key by lsn; a delete removes the key."""
    latest: dict[int, dict[str, Any]] = {}
    for event in sorted(cdc, key=lambda e: e["lsn"]):
        latest[event["product_id"]] = event
    return {pid: e for pid, e in latest.items() if e["op"] != "d"}


def check_kip99(airflow: Airflow, spark: Any, runs: int) -> None:
    w = airflow.warehouse
    stream_version = DeltaTable(str(w / "orders_stream")).version()
    cdc_version = DeltaTable(str(w / "products_cdc")).version()
    assert stream_version == cdc_version == runs - 1  # the seed writes one commit per run to each

    global_progress = progress(w / "products_global")
    assert global_progress["inputs"]["source"]["version"] == cdc_version
    products = products_as_of(rows_at(w / "products_cdc", cdc_version))
    expected_global = sorted((pid, p["name"], p["price"]) for pid, p in products.items())
    assert output_rows(spark, w / "products_global", ["product_id", "name", "price"]) == expected_global

    # stream-table lookup: orders appended at version v joined with the products as of version v
    expected: list[tuple[Any, ...]] = []
    for version in range(stream_version + 1):
        before = {o["order_id"] for o in rows_at(w / "orders_stream", version - 1)} if version else set()
        table = products_as_of(rows_at(w / "products_cdc", version))
        for order in rows_at(w / "orders_stream", version):
            if order["order_id"] in before:
                continue
            product = table.get(order["product_id"])
            price = product["price"] if product else None
            expected.append(
                (
                    order["order_id"],
                    order["product_id"],
                    order["quantity"],
                    product["name"] if product else None,
                    price,
                    order["quantity"] * price if price is not None else None,
                )
            )
    columns = ["order_id", "product_id", "quantity", "product_name", "unit_price", "total"]
    assert output_rows(spark, w / "orders_enriched", columns) == sorted(expected)
    enriched = progress(w / "orders_enriched")
    assert enriched["inputs"]["stream"]["version"] == stream_version


def test_kip99_bootstrap_gate_and_enrich(airflow: Airflow, spark: Any):
    """One run (each costs two Spark applications); the engine's tests cover incremental refreshes."""
    output = airflow.dags_test("fkjoin_kip99_global_table")
    assert "products_caught_up" in output
    check_kip99(airflow, spark, runs=1)
    assert progress(airflow.warehouse / "products_global")["mode"] == "full"

"""End to end: ``airflow dags test`` of the foreign-key join DAG and the report downstream of its asset."""

from __future__ import annotations

import json
from typing import Any

import pytest
from dags_support import Airflow, output_rows, rows_at
from deltalake import DeltaTable

from airflow_provider_fkjoin.engine.logs.watermarks import progress

# Spark and Airflow start several JVMs and interpreters per DAG run: allow for a busy machine.
pytestmark = pytest.mark.timeout(2400)


# -- KIP-213 -------------------------------------------------------------------------------------------
def expected_fk_join(orders: list[dict[str, Any]], customers: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """orders LEFT JOIN customers ON customer_id, computed from scratch."""
    by_id = {c["customer_id"]: c for c in customers}
    result = []
    for order in orders:
        customer = by_id.get(order["customer_id"]) if order["customer_id"] is not None else None
        result.append(
            (
                order["order_id"],
                order["customer_id"],
                order["amount"],
                customer["name"] if customer else None,
                customer["tier"] if customer else None,
            )
        )
    return sorted(result, key=lambda r: r[0])


def check_kip213(airflow: Airflow, spark: Any, expected_mode: str) -> list[tuple[Any, ...]]:
    output = airflow.warehouse / "orders_customers"
    latest = progress(output)
    assert latest is not None and latest["mode"] == expected_mode, latest
    orders = rows_at(airflow.warehouse / "orders", latest["inputs"]["left"]["version"])
    customers = rows_at(airflow.warehouse / "customers", latest["inputs"]["right"]["version"])
    # the refresh pinned the inputs' latest versions: the seed of this run wrote them
    assert latest["inputs"]["left"]["version"] == DeltaTable(str(airflow.warehouse / "orders")).version()
    expected = expected_fk_join(orders, customers)
    columns = ["order_id", "customer_id", "amount", "customer_name", "tier"]
    assert output_rows(spark, output, columns) == expected
    return expected


def test_kip213_fk_join_full_then_incremental(airflow: Airflow, spark: Any):
    from airflow_provider_fkjoin.links import table_uri

    airflow.dags_test("fkjoin_kip213_fk_join")
    first = check_kip213(airflow, spark, "full")
    assert any(row[3] is None for row in first) is False  # every order has its customer at first

    airflow.dags_test("fkjoin_kip213_fk_join")
    second = check_kip213(airflow, spark, "incremental")
    assert any(row[3] is None for row in second)  # a deleted customer nulls its orders (left join)

    extras = airflow.asset_event_extras(table_uri(str(airflow.warehouse / "orders_customers")))
    assert [(e["mode"], e["version"]) for e in extras] == [("full", 0), ("incremental", 1)]
    assert extras[0]["rows"]["inserted"] == len(first)


def test_downstream_report_on_the_join_asset(airflow: Airflow, spark: Any):
    output = airflow.warehouse / "orders_customers"
    if not (output / "_delta_log").is_dir():  # run alone: make the join's output first
        airflow.dags_test("fkjoin_kip213_fk_join")
    airflow.dags_test("fkjoin_orders_report")
    report = json.loads((airflow.warehouse / "reports" / "orders_by_tier.json").read_text())
    joined = check_kip213(airflow, spark, progress(output)["mode"])
    expected: dict[str, dict[str, Any]] = {}
    for _, _, amount, _, tier in joined:
        entry = expected.setdefault(tier or "unknown", {"orders": 0, "revenue": 0.0})
        entry["orders"] += 1
        entry["revenue"] = round(entry["revenue"] + amount, 2)
    assert report["by_tier"] == expected
    assert report["join_version"] == progress(output)["output_version"]


# -- KIP-99 --------------------------------------------------------------------------------------------

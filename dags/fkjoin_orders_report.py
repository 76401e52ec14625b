"""Downstream example: scheduled on the ``orders_customers`` asset that the KIP-213 join updates.

Each time the join commits, this DAG reads the joined table and writes revenue per customer tier to
``reports/orders_by_tier.json`` in the warehouse, with the join's version and mode taken from the
triggering asset event. Run it alone with ``airflow dags test fkjoin_orders_report``.
"""

from __future__ import annotations

import datetime as dt
import json

from airflow.sdk import DAG, Asset, task
from fkjoin_example_data import warehouse

from airflow_provider_fkjoin.links import table_uri

ORDERS_CUSTOMERS = warehouse() / "orders_customers"
REPORT = warehouse() / "reports" / "orders_by_tier.json"

with DAG(
    dag_id="fkjoin_orders_report",
    description="Revenue per tier, recomputed whenever the orders_customers join commits",
    schedule=[Asset(uri=table_uri(str(ORDERS_CUSTOMERS)))],
    start_date=dt.datetime(2025, 1, 1, tzinfo=dt.UTC),
    catchup=False,
    tags=["fkjoin", "example"],
):

    @task
    def report(triggering_asset_events=None) -> dict:
        """Aggregate the joined table (as of its latest version) and write the report."""
        from airflow_provider_fkjoin.engine import get_spark, progress

        events = [event.extra for events in (triggering_asset_events or {}).values() for event in events]
        spark = get_spark("local[1]", conf={"spark.driver.memory": "512m", "spark.ui.enabled": "false"})
        try:
            rows = (
                spark.read.format("delta")
                .load(str(ORDERS_CUSTOMERS))
                .selectExpr("coalesce(tier, 'unknown') AS tier", "amount")
                .groupBy("tier")
                .agg({"amount": "sum", "*": "count"})
                .collect()
            )
        finally:
            spark.stop()
        latest = progress(str(ORDERS_CUSTOMERS)) or {}
        result = {
            "join_version": latest.get("output_version"),
            "join_mode": latest.get("mode"),
            "triggered_by": events,
            "by_tier": {
                row["tier"]: {"orders": row["count(1)"], "revenue": round(row["sum(amount)"], 2)}
                for row in rows
            },
        }
        REPORT.parent.mkdir(parents=True, exist_ok=True)
        REPORT.write_text(json.dumps(result, indent=2, sort_keys=True, default=str))
        return result

    report()

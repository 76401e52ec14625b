"""End to end through ``airflow dags test`` (the path ``scripts/demo.sh`` takes): the KIP-213 foreign-key
join DAG, a full run then an incremental one, and the report scheduled on its output asset. Every other
example DAG runs end to end on real servers: ``tests/e2e/test_airflow_servers.py``."""

from __future__ import annotations

import json
from typing import Any

import pytest
from dags_support import Airflow
from support.example_dags import check_kip213, check_kip213_events, check_kip213_run

from airflow_provider_fkjoin.engine.deltalog.watermarks import progress

# Spark and Airflow start several JVMs and interpreters per DAG run: allow for a busy machine.
pytestmark = pytest.mark.timeout(2400)


def test_kip213_fk_join_full_then_incremental(airflow: Airflow, spark: Any) -> None:
    from airflow_provider_fkjoin.links import table_uri

    for run in (1, 2):
        airflow.dags_test("fkjoin_kip213_fk_join")
        check_kip213_run(airflow.warehouse, spark, run)
    extras = airflow.asset_event_extras(table_uri(str(airflow.warehouse / "orders_customers")))
    check_kip213_events(airflow.warehouse, extras)


def test_downstream_report_on_the_join_asset(airflow: Airflow, spark: Any) -> None:
    output = airflow.warehouse / "orders_customers"
    if not (output / "_delta_log").is_dir():  # run alone: make the join's output first
        airflow.dags_test("fkjoin_kip213_fk_join")
    airflow.dags_test("fkjoin_orders_report")
    report = json.loads((airflow.warehouse / "reports" / "orders_by_tier.json").read_text())
    joined = check_kip213(airflow.warehouse, spark, progress(output)["mode"])
    expected: dict[str, dict[str, Any]] = {}
    for _, _, amount, _, tier in joined:
        entry = expected.setdefault(tier or "unknown", {"orders": 0, "revenue": 0.0})
        entry["orders"] += 1
        entry["revenue"] = round(entry["revenue"] + amount, 2)
    assert report["by_tier"] == expected
    assert report["join_version"] == progress(output)["output_version"]

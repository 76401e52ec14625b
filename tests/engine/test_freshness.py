"""An output's freshness read from Delta logs without a JVM (what the Airflow UI's Joins view shows),
checked against the refreshes' own results and Spark's ``DESCRIBE HISTORY`` of the inputs; the plan each
refresh ran, as the view and ``fkjoin status`` (both routes) show it, checked against the commits' own
metadata and timestamps; and the ``phases`` every result reports."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from delta.tables import DeltaTable
from helpers import orders_customers
from support.delta_log import plans_in_log

from airflow_provider_fkjoin.engine import (
    output_freshness,
    refresh_status,
    refresh_status_from_logs,
    run_spec,
)

ORIGIN = {"dag_id": "orders", "run_id": "manual__1", "task_id": "enrich", "map_index": -1, "try_number": 1}


def _commit_times(spark, path: Path) -> dict[int, object]:
    history = DeltaTable.forPath(spark, str(path)).history().collect()
    return {row["version"]: row["timestamp"] for row in history}


def test_freshness_reports_each_refresh_and_the_lag_behind_each_input(spark, warehouse: Path) -> None:
    orders = [(1, 10, 1.0), (2, 10, 2.0), (3, 20, 3.0)]
    spec, orders_path, customers, out = orders_customers(spark, warehouse, orders, [(10, "a"), (20, "b")])
    first = run_spec(spec, spark=spark, origin=ORIGIN)
    DeltaTable.forPath(spark, str(orders_path)).update("order_id = 1", {"amount": "9.0"})
    second = run_spec(spec, spark=spark, origin={**ORIGIN, "run_id": "manual__2"})
    DeltaTable.forPath(spark, str(customers)).update("customer_id = 20", {"name": "'B'"})  # not refreshed

    fresh = output_freshness(str(out))

    assert fresh["kind"] == "foreign_key_join"
    assert [r["mode"] for r in fresh["refreshes"]] == ["incremental", "full"]
    for refresh, result in zip(fresh["refreshes"], [second, first], strict=True):
        assert refresh["version"] == result["output"]["version"]
        assert refresh["rows"] == {k: result["rows"][k] for k in ("inserted", "updated", "deleted")}
        assert refresh["write_path"] == result["write_path"]
        assert refresh["reason"] == result["reason"]
        assert refresh["inputs"] == {side: info["to_version"] for side, info in result["inputs"].items()}
        assert 0 < refresh["duration_s"] <= result["duration_s"] + 0.5, (refresh, result["duration_s"])
    assert [r["origin"]["run_id"] for r in fresh["refreshes"]] == ["manual__2", "manual__1"]
    assert fresh["last_refresh"] == fresh["refreshes"][0]

    # the plan each refresh ran, as its commit recorded it, and its actual seconds to the commit
    plans = plans_in_log(out)
    for refresh in fresh["refreshes"]:
        expected, shown = plans[refresh["version"]], refresh["strategy"]
        assert expected is not None and shown is not None, refresh
        assert {k: shown[k] for k in ("chosen", "basis", "estimate")} == {
            k: expected[k] for k in ("chosen", "basis", "estimate")
        }
        assert shown["actual_s"] == pytest.approx(expected["actual_s"], abs=2e-3)
        assert 0 < shown["actual_s"] <= refresh["duration_s"] + 1e-3
    full, incremental = fresh["refreshes"][1]["strategy"], fresh["refreshes"][0]["strategy"]
    assert (full["chosen"], full["basis"], full["estimate"]) == ("full", "full", None)
    ran = second["strategy"]  # what the driver reported of the incremental refresh's plan
    assert incremental["chosen"] == ("incremental" if "fallback" in ran else ran["chosen"])
    assert incremental["basis"] == ("fallback" if "fallback" in ran else ran["basis"])
    estimated = ran["estimate"] and {k: ran["estimate"][k] for k in ("incremental_s", "recompute_s")}
    assert incremental["estimate"] == estimated
    assert incremental["actual_s"] <= ran["actual_s"] + 0.5, "the driver measured after its commit"

    # `fkjoin status` shows the last refresh's plan the same way, through Spark or the logs alone
    for status in (refresh_status(spec, spark=spark), refresh_status_from_logs(spec)):
        assert status["last_refresh"]["output_version"] == second["output"]["version"]
        assert status["last_refresh"]["strategy"] == incremental, status

    left, right = fresh["inputs"]["left"], fresh["inputs"]["right"]
    assert (left["consumed_version"], left["latest_version"], left["lag_versions"]) == (1, 1, 0)
    assert left["lag_s"] == 0.0 and left["behind_since"] is None
    times = _commit_times(spark, customers)
    assert (right["consumed_version"], right["latest_version"], right["lag_versions"]) == (0, 1, 1)
    written = times[1].astimezone(UTC)  # Spark's session time zone, made explicit
    parsed = datetime.fromisoformat(right["behind_since"])
    assert abs((parsed - written).total_seconds()) < 1, (right, times)

    later = output_freshness(str(out), now=parsed + timedelta(seconds=100))
    assert later["inputs"]["right"]["lag_s"] == 100.0
    assert later["lag_s"] == 100.0, "the output's lag is its stalest input's"

    shutil.rmtree(customers)
    gone = output_freshness(str(out), history=1)
    assert "error" in gone["inputs"]["right"] and "customers" in gone["inputs"]["right"]["error"]
    assert gone["inputs"]["left"]["lag_versions"] == 0 and len(gone["refreshes"]) == 1


def test_a_result_says_when_each_phase_was_reached(spark, warehouse: Path) -> None:
    spec, *_ = orders_customers(spark, warehouse, [(1, 10, 1.0)], [(10, "a")])
    result = run_spec(spec, spark=spark)
    phases = result["phases"]
    names = list(phases)
    assert names[0] == "pinned" and names[-1] == "committed", phases
    assert list(phases.values()) == sorted(phases.values()), phases
    assert phases["committed"] <= result["duration_s"]
    assert run_spec(spec, spark=spark)["phases"].keys() == {"pinned", "committed"}, "a noop"

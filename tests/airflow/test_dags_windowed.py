"""End to end: ``airflow dags test`` of the two windowed-join DAGs, each run twice."""

from __future__ import annotations

import sys
from typing import Any

import pytest
from dags_support import REPO, Airflow, epoch_millis, rows_at
from deltalake import DeltaTable

from airflow_provider_fkjoin.engine.logs.watermarks import progress

# Spark and Airflow start several JVMs and interpreters per DAG run: allow for a busy machine.
pytestmark = pytest.mark.timeout(2400)


# -- windowed join: impressions and clicks ------------------------------------------------------------
def test_windowed_ad_clicks_two_runs_match_the_model(airflow: Airflow, spark: Any):
    """Two runs (a full one, then an incremental one); what the output holds after each equals what the
    record-by-record model (``tests/windowed_model.py``) emits for the rows each run's seed appended."""
    sys.path.insert(0, str(REPO / "tests"))
    from windowed_model import Event, StreamJoinModel

    w = airflow.warehouse
    model = StreamJoinModel(before=0, after=3_600_000, grace=600_000, how="left")
    expected: list[tuple[Any, ...]] = []
    for run in range(2):
        airflow.dags_test("fkjoin_windowed_ad_clicks")
        sides = []
        tables = (("impressions", "impression_id", "shown_at"), ("clicks", "click_id", "clicked_at"))
        for table, key, time in tables:
            version = DeltaTable(str(w / table)).version()
            before = {r[key] for r in rows_at(w / table, version - 1)} if version else set()
            new = [r for r in rows_at(w / table, version) if r[key] not in before]
            new.sort(key=lambda r: r["offset"])
            sides.append([Event((r["ad_id"],), epoch_millis(r[time]), r) for r in new])
        for _kind, left, right, t in model.refresh(*sides):
            expected.append(
                (left["impression_id"] if left else None, right["click_id"] if right else None, t)
            )
        rows = spark.read.format("delta").load(str(w / "ad_clicks")).collect()
        got = sorted(
            ((r["impression_id"], r["click_id"], epoch_millis(r["event_time"])) for r in rows), key=repr
        )
        assert got == sorted(expected, key=repr), f"after run {run + 1}"
        assert progress(w / "ad_clicks")["mode"] == ("full" if run == 0 else "incremental")
    assert any(click is None for _, click, _ in expected)  # an impression nobody clicked was closed
    assert any(click is not None for _, click, _ in expected)


def test_windowed_errors_vs_last_week_two_runs_match_a_recompute(airflow: Airflow, spark: Any):
    """Table mode: the windowed table joined to itself a week earlier, after a full and an incremental
    run, equals the join recomputed in Python from the table at the version the refresh consumed."""
    w = airflow.warehouse
    week = 7 * 86_400_000
    for run in range(2):
        airflow.dags_test("fkjoin_windowed_errors_vs_last_week")
        latest = progress(w / "errors_vs_last_week")
        assert latest["mode"] == ("full" if run == 0 else "incremental")
        rows = rows_at(w / "errors_per_min", latest["inputs"]["left"]["version"])
        by_window = {(r["service"], epoch_millis(r["ws"]), epoch_millis(r["we"])): r["errors"] for r in rows}
        expected = sorted(
            (service, ws, we, errors, by_window.get((service, ws - week, we - week)))
            for (service, ws, we), errors in by_window.items()
        )
        got = sorted(
            (r["service"], epoch_millis(r["ws"]), epoch_millis(r["we"]), r["errors"], r["errors_week_ago"])
            for r in spark.read.format("delta").load(str(w / "errors_vs_last_week")).collect()
        )
        assert got == expected, f"after run {run + 1}"
        assert any(r[4] is not None for r in got) and any(r[4] is None for r in got)

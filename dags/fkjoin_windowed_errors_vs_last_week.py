"""Windowed join example, table mode: each minute's error count next to the same minute a week earlier.

    seed  ->  errors_vs_last_week (windowed_join, mode: table, the table joined to itself shifted -7d)

``errors_per_min`` is a windowed table (one row per service and one-minute window, as a windowed
aggregation writes it). Each run, ``seed`` adds this week's next minutes and corrects the count of a
minute written by the previous run (a late update). The join pairs every window with the same window a
week earlier (``offset: -7d``) and is refreshed incrementally: a correction rewrites one output row, a
new minute adds one. Run it with::

    AIRFLOW_CONN_SPARK_DEFAULT='{"conn_type": "spark", "host": "local[2]"}' \\
        airflow dags test fkjoin_windowed_errors_vs_last_week
"""

from __future__ import annotations

import datetime as dt

from airflow.sdk import DAG, task
from fkjoin_example_data import warehouse

from airflow_provider_fkjoin.operators import WindowedJoinOperator

WAREHOUSE = warehouse()
ERRORS_PER_MIN = WAREHOUSE / "errors_per_min"
ERRORS_VS_LAST_WEEK = WAREHOUSE / "errors_vs_last_week"

with DAG(
    dag_id="fkjoin_windowed_errors_vs_last_week",
    description="Windowed table joined to itself a week earlier: errors per minute vs a week ago",
    schedule="@hourly",
    start_date=dt.datetime(2025, 1, 1, tzinfo=dt.UTC),
    catchup=False,
    max_active_runs=1,
    tags=["fkjoin", "example", "windowed"],
    default_args={"retries": 1, "retry_delay": dt.timedelta(minutes=1)},
):

    @task
    def seed() -> dict:
        """Add this run's minutes and correct a late one (creating the table if absent)."""
        from fkjoin_example_data import write_batch

        return write_batch({"errors_per_min": ERRORS_PER_MIN}, "errors")

    window = {"start": "ws", "end": "we"}
    compare = WindowedJoinOperator(
        task_id="errors_vs_last_week",
        mode="table",
        left={"path": str(ERRORS_PER_MIN), "key": ["service"], "window": window},
        right={"path": str(ERRORS_PER_MIN), "key": ["service"], "window": {**window, "offset": "-7d"}},
        how="left",
        columns={"errors": "l.errors", "errors_week_ago": "r.errors"},
        output=str(ERRORS_VS_LAST_WEEK),
    )

    seed() >> compare

"""The benchmark's DAG (``bench/bench_airflow_modes.py``): one foreign-key join task whose connection and
noop check are DAG params, so one task runs through spark-submit, Spark Connect or the no-JVM check.

    airflow tasks test fkjoin_bench_modes join -t '{"conn_id": "spark_connect_bench", "noop_check": false}'
"""

from __future__ import annotations

import datetime as dt
import os

from airflow.sdk import DAG

from airflow_provider_fkjoin.operators import ForeignKeyJoinOperator

WAREHOUSE = os.environ.get("FKJOIN_BENCH_WAREHOUSE", "/tmp/fkjoin-bench-modes")

with DAG(
    dag_id="fkjoin_bench_modes",
    schedule=None,
    start_date=dt.datetime(2025, 1, 1, tzinfo=dt.UTC),
    params={"conn_id": "spark_default", "noop_check": True},
):
    ForeignKeyJoinOperator(
        task_id="join",
        left={"path": f"{WAREHOUSE}/orders", "key": ["order_id"]},
        right={"path": f"{WAREHOUSE}/customers", "key": ["customer_id"]},
        foreign_key=["customer_id"],
        how="left",
        output=f"{WAREHOUSE}/orders_customers",
        conn_id="{{ params.conn_id }}",
        noop_check="{{ params.noop_check }}",
    )

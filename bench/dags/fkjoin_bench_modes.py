"""The DAGs of ``python -m bench.airflow_modes``.

``fkjoin_bench_modes``: one foreign-key join task whose connection and noop check are DAG params, so one
task runs through spark-submit, Spark Connect or the no-JVM check::

    airflow tasks test fkjoin_bench_modes join -t '{"conn_id": "spark_connect_bench", "noop_check": false}'

``fkjoin_bench_noop_second``: the same join (no-JVM noop check on) after a Python task that does nothing.
``airflow dags test`` runs the tasks in its own process, through an in-process Execution API that sets
itself up on its first request, inside the first task's start and end dates; here the do-nothing task
pays that, so the join's dates show what the join itself costs (``--noop-dags-test``)::

    airflow dags test fkjoin_bench_noop_second
"""

from __future__ import annotations

import datetime as dt
import os

from airflow.sdk import DAG, task

from airflow_provider_fkjoin.operators import ForeignKeyJoinOperator

WAREHOUSE = os.environ.get("FKJOIN_BENCH_WAREHOUSE", "/tmp/fkjoin-bench-modes")


def join_task() -> ForeignKeyJoinOperator:
    return ForeignKeyJoinOperator(
        task_id="join",
        left={"path": f"{WAREHOUSE}/orders", "key": ["order_id"]},
        right={"path": f"{WAREHOUSE}/customers", "key": ["customer_id"]},
        foreign_key=["customer_id"],
        how="left",
        output=f"{WAREHOUSE}/orders_customers",
        conn_id="{{ params.conn_id }}",
        noop_check="{{ params.noop_check }}",
    )


with DAG(
    dag_id="fkjoin_bench_modes",
    schedule=None,
    start_date=dt.datetime(2025, 1, 1, tzinfo=dt.UTC),
    params={"conn_id": "spark_default", "noop_check": True},
):
    join_task()


@task
def first_task() -> None:
    """Nothing: the first task of the run, which pays the in-process Execution API's set-up."""


with DAG(
    dag_id="fkjoin_bench_noop_second",
    schedule=None,
    start_date=dt.datetime(2025, 1, 1, tzinfo=dt.UTC),
    params={"conn_id": "spark_default", "noop_check": True},
):
    first_task() >> join_task()

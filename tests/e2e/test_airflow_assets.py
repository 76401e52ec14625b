"""An asset-scheduled DAG on a real Airflow 3.3 runs only when the join changed its output.

The servers (``airflow_stack.running_airflow``) run with the scheduler creating runs from schedules and
asset events (``USE_JOB_SCHEDULE`` on, which the example-DAG stack turns off), over a DAGs folder of two
DAGs written here: a producer with no schedule, whose ``seed`` task changes the inputs unless told not to
and whose ``ForeignKeyJoinOperator`` refreshes the output, and a consumer scheduled on the output's
asset, which records the events that triggered it (no Spark). The producer runs three times: with
changes, with none (the join's no-JVM check finds nothing to do and emits no event), with changes again.
The consumer must then have run exactly twice, the first and the third producer runs' events alone
triggering it.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
from airflow_stack import AirflowStack, parsed, run_to_end, running_airflow
from e2e_support import wait_for

pytestmark = pytest.mark.timeout(1800)  # the module fixture (db migrate, start-up) counts too

PRODUCER, CONSUMER = "fkjoin_e2e_asset_producer", "fkjoin_e2e_asset_consumer"

DAGS = {
    "producer.py": """
        import datetime as dt
        import os

        from airflow.sdk import DAG, Param, task

        from airflow_provider_fkjoin.operators import ForeignKeyJoinOperator

        WAREHOUSE = os.environ["FKJOIN_WAREHOUSE"]

        with DAG(
            dag_id="fkjoin_e2e_asset_producer",
            schedule=None,
            start_date=dt.datetime(2025, 1, 1, tzinfo=dt.UTC),
            max_active_runs=1,
            params={"seed": Param(True, type="boolean")},
        ):

            @task
            def seed(params=None):
                import pyarrow as pa
                from deltalake import DeltaTable, write_deltalake

                if not params["seed"]:
                    return "nothing changed"
                orders, customers = f"{WAREHOUSE}/orders", f"{WAREHOUSE}/customers"
                cdf = {"delta.enableChangeDataFeed": "true"}
                if not os.path.isdir(customers):
                    ids = pa.array(range(6), pa.int64())
                    rows = {"order_id": ids, "customer_id": ids, "amount": [1.0] * 6}
                    write_deltalake(orders, pa.table(rows), configuration=cdf)
                    names = {"customer_id": ids, "name": [f"c{i}" for i in range(6)]}
                    write_deltalake(customers, pa.table(names), configuration=cdf)
                    return "created"
                table = DeltaTable(customers)
                table.update(predicate="customer_id = 1", updates={"name": f"'renamed {table.version()}'"})
                return "renamed"

            seed() >> ForeignKeyJoinOperator(
                task_id="join",
                left={"path": f"{WAREHOUSE}/orders", "key": ["order_id"]},
                right={"path": f"{WAREHOUSE}/customers", "key": ["customer_id"]},
                foreign_key=["customer_id"],
                how="left",
                output=f"{WAREHOUSE}/orders_customers",
            )
    """,
    "consumer.py": """
        import datetime as dt
        import os

        from airflow.sdk import DAG, Asset, task

        from airflow_provider_fkjoin.links import table_uri

        with DAG(
            dag_id="fkjoin_e2e_asset_consumer",
            schedule=[Asset(uri=table_uri(os.environ["FKJOIN_WAREHOUSE"] + "/orders_customers"))],
            start_date=dt.datetime(2025, 1, 1, tzinfo=dt.UTC),
        ):

            @task
            def report(triggering_asset_events=None):
                return [e.extra for events in (triggering_asset_events or {}).values() for e in events]

            report()
    """,
}


@pytest.fixture(scope="module")
def asset_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowStack]:
    dags = tmp_path_factory.mktemp("asset-dags")
    for name, source in DAGS.items():
        (dags / name).write_text(textwrap.dedent(source))
    home = tmp_path_factory.mktemp("airflow-home")
    with running_airflow(home, dags, {"AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "True"}) as stack:
        yield stack


def consumer_runs(stack: AirflowStack, count: int) -> list[dict[str, Any]]:
    """The consumer's runs once there are ``count`` of them, all finished."""

    def done() -> list[dict[str, Any]] | None:
        runs = stack.api("GET", f"/dags/{CONSUMER}/dagRuns?order_by=run_after")["dag_runs"]
        return runs if len(runs) >= count and all(r["state"] in ("success", "failed") for r in runs) else None

    return wait_for(done, timeout_s=600, what=f"{count} run(s) of {CONSUMER}", services=stack.services)


def test_an_asset_scheduled_dag_runs_only_when_the_join_changed_its_output(asset_stack: AirflowStack) -> None:
    stack = asset_stack
    for dag_id in (PRODUCER, CONSUMER):
        parsed(stack, dag_id)
        stack.api("PATCH", f"/dags/{dag_id}", {"is_paused": False})

    first = run_to_end(stack, PRODUCER, {"seed": True})
    [run] = consumer_runs(stack, 1)
    assert (run["state"], run["run_type"]) == ("success", "asset_triggered"), run

    quiet = run_to_end(stack, PRODUCER, {"seed": False})
    path = f"/dags/{PRODUCER}/dagRuns/{quote(quiet, safe='')}/taskInstances/join/xcomEntries/return_value"
    result = stack.api("GET", path)["value"]
    result = json.loads(result) if isinstance(result, str) else result
    assert (result["mode"], result["source"]) == ("noop", "precheck"), result
    by_quiet = f"source_dag_id={PRODUCER}&source_run_id={quote(quiet, safe='')}"
    assert stack.api("GET", f"/assets/events?{by_quiet}")["asset_events"] == []

    third = run_to_end(stack, PRODUCER, {"seed": True})
    runs = consumer_runs(stack, 2)
    assert len(runs) == 2 and all(r["state"] == "success" for r in runs), runs
    triggered_by = [
        {
            event["source_run_id"]
            for event in stack.api(
                "GET", f"/dags/{CONSUMER}/dagRuns/{quote(r['dag_run_id'], safe='')}/upstreamAssetEvents"
            )["asset_events"]
        }
        for r in runs
    ]
    assert triggered_by == [{first}, {third}], (first, quiet, third, triggered_by)

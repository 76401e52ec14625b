"""KIP-213 example: an hourly foreign-key join of ``orders`` to ``customers``, refreshed incrementally.

    seed  ->  orders_customers (foreign_key_join)   ->  [asset] fkjoin_orders_report

``seed`` creates both tables (change data feed on) on the first run; later runs rename and delete
customers, move and delete orders and add new ones. Each run of ``orders_customers`` reads only the
changes since the previous run and merges the affected orders into ``orders_customers``, whose asset
event (version, mode, row counts) schedules ``fkjoin_orders_report``. Run it with::

    AIRFLOW_CONN_SPARK_DEFAULT='{"conn_type": "spark", "host": "local[2]"}' \
        airflow dags test fkjoin_kip213_fk_join

Trigger it with ``{"seed": false}`` to see a run where nothing changed: the join's task reads the Delta
logs, finds no input moved, and finishes in a second or two without starting Spark; it emits no asset
event, so ``fkjoin_orders_report`` does not run for nothing. Trigger it with ``{"full_refresh": true}``
to rebuild the output from its inputs. A run consumes every change since the previous refresh (not its
hour), hence ``catchup=False`` and one active run; the Joins view flags the output ``warn`` once its
inputs have held unconsumed changes for 2 hours, ``error`` after 6.
"""

from __future__ import annotations

import datetime as dt

import pendulum
from airflow.sdk import DAG, Param, task
from fkjoin_example_data import warehouse

from airflow_provider_fkjoin.operators import ForeignKeyJoinOperator

WAREHOUSE = warehouse()
ORDERS = WAREHOUSE / "orders"
CUSTOMERS = WAREHOUSE / "customers"
ORDERS_CUSTOMERS = WAREHOUSE / "orders_customers"

with DAG(
    dag_id="fkjoin_kip213_fk_join",
    description="KIP-213: hourly incremental foreign-key join of orders to customers",
    schedule="@hourly",
    start_date=dt.datetime(2025, 1, 1, tzinfo=dt.UTC),
    catchup=False,
    max_active_runs=1,
    tags=["fkjoin", "example", "kip-213"],
    default_args={"retries": 1, "retry_delay": dt.timedelta(minutes=1)},
    params={
        "seed": Param(True, type="boolean", description="write this run's batch of changes"),
        "full_refresh": Param(False, type="boolean", description="rebuild the output from its inputs"),
    },
):

    @task
    def seed(params: dict | None = None) -> dict:
        """Create the tables on the first run; append this run's customer and order changes."""
        from fkjoin_example_data import write_batch

        if not (params or {}).get("seed", True):
            return {"batch": None, "versions": {}}
        return write_batch({"customers": CUSTOMERS, "orders": ORDERS}, "kip213")

    join = ForeignKeyJoinOperator(
        task_id="orders_customers",
        left={"path": str(ORDERS), "key": ["order_id"]},
        right={"path": str(CUSTOMERS), "key": ["customer_id"]},
        foreign_key=["customer_id"],
        how="left",
        columns={
            "customer_id": "l.customer_id",
            "amount": "l.amount",
            "customer_name": "r.name",
            "tier": "r.tier",
        },
        output=str(ORDERS_CUSTOMERS),
        full_refresh="{{ params.full_refresh }}",
        freshness={"warn_after": pendulum.duration(hours=2), "error_after": pendulum.duration(hours=6)},
    )

    seed() >> join

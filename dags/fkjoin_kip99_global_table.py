"""KIP-99 example: bootstrap a ``products`` global table from a CDC changelog, gate on its high
watermark, then enrich the ``orders`` stream by lookup.

    seed  ->  bootstrap_products (global_table_bootstrap)  ->  products_caught_up (HighWatermarkSensor)
          ->  enrich_orders (stream_table_join)

Each run, ``seed`` appends one batch of CDC events (snapshot, updates, deletes, creates) to
``products_cdc`` and a few orders to ``orders_stream``. The bootstrap restores ``products_global`` to
the changelog's high watermark; the sensor, deferred to the triggerer (no JVM, no worker slot), waits
until the global table has consumed the changelog up to the high watermark seen when the sensor
started; only then are the new orders joined to the products as
they are at that version. Run it with::

    AIRFLOW_CONN_SPARK_DEFAULT='{"conn_type": "spark", "host": "local[2]"}' \
        airflow dags test fkjoin_kip99_global_table
"""

from __future__ import annotations

import datetime as dt

from airflow.sdk import DAG, task
from fkjoin_example_data import CHANGELOG, warehouse

from airflow_provider_fkjoin.operators import GlobalTableBootstrapOperator, StreamTableJoinOperator
from airflow_provider_fkjoin.sensors import HighWatermarkSensor

WAREHOUSE = warehouse()
PRODUCTS_CDC = WAREHOUSE / "products_cdc"
ORDERS_STREAM = WAREHOUSE / "orders_stream"
PRODUCTS_GLOBAL = WAREHOUSE / "products_global"
ORDERS_ENRICHED = WAREHOUSE / "orders_enriched"

with DAG(
    dag_id="fkjoin_kip99_global_table",
    description="KIP-99: global table bootstrapped from CDC, high-watermark gate, stream enrichment",
    schedule="@daily",
    start_date=dt.datetime(2025, 1, 1, tzinfo=dt.UTC),
    catchup=False,
    max_active_runs=1,
    tags=["fkjoin", "example", "kip-99"],
    default_args={"retries": 1, "retry_delay": dt.timedelta(minutes=1)},
):

    @task
    def seed() -> dict:
        """Append this run's batch of product CDC events and orders (creating the tables if absent)."""
        from fkjoin_example_data import write_batch

        return write_batch({"products_cdc": PRODUCTS_CDC, "orders_stream": ORDERS_STREAM}, "kip99")

    bootstrap = GlobalTableBootstrapOperator(
        task_id="bootstrap_products",
        source={"path": str(PRODUCTS_CDC), "key": ["product_id"], "changelog": CHANGELOG},
        output=str(PRODUCTS_GLOBAL),
    )

    caught_up = HighWatermarkSensor(
        task_id="products_caught_up",
        target=str(PRODUCTS_GLOBAL),
        source=str(PRODUCTS_CDC),
        # or an exact version, e.g. version="{{ ti.xcom_pull(task_ids='seed')['versions']['products_cdc'] }}"
        deferrable=True,
        poke_interval=5,
        timeout=30 * 60,
    )

    enrich = StreamTableJoinOperator(
        task_id="enrich_orders",
        stream={"path": str(ORDERS_STREAM)},
        table={"path": str(PRODUCTS_GLOBAL), "key": ["product_id"]},
        key_mapper=["product_id"],
        how="left",
        columns={
            "order_id": "s.order_id",
            "product_id": "s.product_id",
            "quantity": "s.quantity",
            "ordered_at": "s.ordered_at",
            "product_name": "t.name",
            "unit_price": "t.price",
            "total": "s.quantity * t.price",
        },
        output=str(ORDERS_ENRICHED),
        spark_ui=True,  # the driver's UI is off unless asked for; this DAG shows its link while it runs
    )

    seed() >> bootstrap >> caught_up >> enrich

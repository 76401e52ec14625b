"""Windowed join example: ad impressions joined with the clicks that follow them within an hour.

    seed  ->  clicks_per_impression (windowed_join, mode: stream, left join)

Each run, ``seed`` appends a batch of impressions (ads a1..a4, ten minutes apart) and clicks (two within
minutes, one with no ad, and a late click on the previous batch's a4 exactly an hour after it was shown).
The join emits each impression with each click inside ``[shown_at, shown_at + 1h]``, and, once stream
time has passed the window and its ten minutes of grace, each impression nobody clicked with an empty
click (Kafka's left KStream-KStream join). Impressions still inside their window wait, as pending rows
in the join's state, for a later run. Run it with::

    AIRFLOW_CONN_SPARK_DEFAULT='{"conn_type": "spark", "host": "local[2]"}' \\
        airflow dags test fkjoin_windowed_ad_clicks
"""

from __future__ import annotations

import datetime as dt

from airflow.sdk import DAG, task
from fkjoin_example_data import warehouse

from airflow_provider_fkjoin.operators import WindowedJoinOperator

WAREHOUSE = warehouse()
IMPRESSIONS = WAREHOUSE / "impressions"
CLICKS = WAREHOUSE / "clicks"
AD_CLICKS = WAREHOUSE / "ad_clicks"

with DAG(
    dag_id="fkjoin_windowed_ad_clicks",
    description="Windowed stream-stream join: impressions and the clicks within an hour after them",
    schedule="@hourly",
    start_date=dt.datetime(2025, 1, 1, tzinfo=dt.UTC),
    catchup=False,
    max_active_runs=1,
    tags=["fkjoin", "example", "windowed"],
    default_args={"retries": 1, "retry_delay": dt.timedelta(minutes=1)},
):

    @task
    def seed() -> dict:
        """Append this run's impressions and clicks (creating the tables if absent)."""
        from fkjoin_example_data import write_batch

        return write_batch({"impressions": IMPRESSIONS, "clicks": CLICKS}, "ads")

    clicks = WindowedJoinOperator(
        task_id="clicks_per_impression",
        mode="stream",
        left={"path": str(IMPRESSIONS), "key": ["ad_id"], "time": "shown_at", "order_by": ["offset"]},
        right={"path": str(CLICKS), "key": ["ad_id"], "time": "clicked_at", "order_by": ["offset"]},
        window={"before": 0, "after": "1h", "grace": "10m"},
        how="left",
        columns={
            "ad_id": "coalesce(l.ad_id, r.ad_id)",
            "impression_id": "l.impression_id",
            "click_id": "r.click_id",
            "shown_at": "l.shown_at",
            "clicked_at": "r.clicked_at",
        },
        output=str(AD_CLICKS),
    )

    seed() >> clicks

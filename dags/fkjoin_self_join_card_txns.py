"""Self-join example: pairs of transactions on one card within ten minutes of each other (KIP-862).

    seed  ->  card_txn_pairs (self_join: card_txns joined with itself, read once)

Each run, ``seed`` appends an hour of card transactions: two on card c1 four minutes apart (a pair, both
ways, and each with itself), two on c2 fourteen minutes apart (only each with itself), one on c3, one
with no card (dropped), and from the second run on a late c3 transaction that pairs with the previous
hour's. The self-join reads the table once where the equivalent two-sided ``windowed_join`` reads it
twice; its output is the same, row for row. Run it with::

    AIRFLOW_CONN_SPARK_DEFAULT='{"conn_type": "spark", "host": "local[2]"}' \\
        airflow dags test fkjoin_self_join_card_txns
"""

from __future__ import annotations

import datetime as dt

from airflow.sdk import DAG, task
from fkjoin_example_data import warehouse

from airflow_provider_fkjoin.operators import SelfJoinOptimizeOperator

WAREHOUSE = warehouse()
CARD_TXNS = WAREHOUSE / "card_txns"
CARD_TXN_PAIRS = WAREHOUSE / "card_txn_pairs"

with DAG(
    dag_id="fkjoin_self_join_card_txns",
    description="Self-join: transactions on one card within ten minutes of each other",
    schedule="@hourly",
    start_date=dt.datetime(2025, 1, 1, tzinfo=dt.UTC),
    catchup=False,
    max_active_runs=1,
    tags=["fkjoin", "example", "windowed", "self-join"],
    default_args={"retries": 1, "retry_delay": dt.timedelta(minutes=1)},
):

    @task
    def seed() -> dict:
        """Append this run's card transactions (creating the table if absent)."""
        from fkjoin_example_data import write_batch

        return write_batch({"card_txns": CARD_TXNS}, "cards")

    pairs = SelfJoinOptimizeOperator(
        task_id="card_txn_pairs",
        input={"path": str(CARD_TXNS), "key": ["card_id"], "time": "txn_at", "order_by": ["offset"]},
        window={"before": "10m", "after": "10m", "grace": "1h"},
        columns={  # l and r: a pair's left and right rows; with a symmetric window, each pair both ways
            "card_id": "l.card_id",
            "txn_id": "l.txn_id",
            "paired_txn_id": "r.txn_id",
            "place": "l.place",
            "paired_place": "r.place",
        },
        output=str(CARD_TXN_PAIRS),
    )

    seed() >> pairs

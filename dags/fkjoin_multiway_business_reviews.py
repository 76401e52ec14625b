"""N-way join example (Yelp Joinery): every review of a business, next to the business and each of its owners.

    seed  ->  business_reviews (multiway_join: business ⋈ review ⋈ business_owner on the business id)

The spec is Joinery's own published example, business then reviews joined on ``business_id`` renamed to
``biz_id`` with the review text left out, plus a third input, the business's owners, in Joinery's config
format. A ``schemas:`` map resolves each Joinery ``schema_id`` to an example table; the engine converts the
config (Joinery's ``pkey: business_id`` is taken as ``biz_id``, the name its alias gives it, and since a
business has many reviews that pkey repeats: the result counts the repeats instead of failing). Each
output row is one (business, review, owner) combination, identified by the three inputs' keys.

The first run joins batch 0 (ten rows: b1's three reviews, b2's two reviews times its two owners...).
The second applies batch 1 incrementally: b1's new name reaches its three rows (1:N), review 7 moves
from b3 to b2 and so joins both of b2's owners (a join-key change into an N:M key), deleting review 4,
business b3 and b6's owner retracts their rows, and b4 and b5 join once a review and an owner arrive:
eleven rows (``fkjoin_example_data.business_reviews_batch`` lists every change). Run it with::

    AIRFLOW_CONN_SPARK_DEFAULT='{"conn_type": "spark", "host": "local[2]"}' \\
        airflow dags test fkjoin_multiway_business_reviews
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from airflow.sdk import DAG, task
from fkjoin_example_data import warehouse

from airflow_provider_fkjoin.operators import MultiWayJoinOperator

WAREHOUSE = warehouse()
BUSINESS = WAREHOUSE / "business"
REVIEW = WAREHOUSE / "review"
BUSINESS_OWNER = WAREHOUSE / "business_owner"
BUSINESS_REVIEWS = WAREHOUSE / "business_reviews"

#: The join in Joinery's format: Joinery's example (schemas 56789 and 12345) plus the owners (24680).
#: ``schemas`` is this project's addition: where Joinery asks Yelp's schema registry, it names the tables.
JOINERY_SPEC: dict[str, Any] = {
    "format": "joinery",
    "schemas": {
        56789: {"name": "business", "path": str(BUSINESS), "key": ["business_id"]},
        12345: {"name": "review", "path": str(REVIEW), "key": ["review_id"]},
        24680: {"name": "business_owner", "path": str(BUSINESS_OWNER), "key": ["owner_id", "business_id"]},
    },
    "join": [
        {
            "schema_id": 56789,
            "join_keys": ["business_id"],
            "aliases": [{"from": "business_id", "to": "biz_id"}],
        },
        {"schema_id": 12345, "join_keys": ["biz_id"], "exclude_fields": ["text"]},
        {  # its business_id takes the same name, so the three join keys are one output column
            "schema_id": 24680,
            "join_keys": ["business_id"],
            "aliases": [{"from": "business_id", "to": "biz_id"}],
        },
    ],
    "output": {
        "namespace": "joinery",
        "source": "business_reviews",
        "doc": "Each review of a business with the business's details and each of its owners",
        "pkey": "business_id",
        "path": str(BUSINESS_REVIEWS),
    },
}

with DAG(
    dag_id="fkjoin_multiway_business_reviews",
    description="N-way join (Joinery): businesses, their reviews and their owners",
    schedule="@hourly",
    start_date=dt.datetime(2025, 1, 1, tzinfo=dt.UTC),
    catchup=False,
    max_active_runs=1,
    tags=["fkjoin", "example", "multiway", "joinery"],
    default_args={"retries": 1, "retry_delay": dt.timedelta(minutes=1)},
):

    @task
    def seed() -> dict:
        """Apply this run's batch of business, review and owner changes (creating the tables if absent)."""
        from fkjoin_example_data import write_batch

        paths = {"business": BUSINESS, "review": REVIEW, "business_owner": BUSINESS_OWNER}
        return write_batch(paths, "business_reviews")

    business_reviews = MultiWayJoinOperator(task_id="business_reviews", **JOINERY_SPEC)

    seed() >> business_reviews

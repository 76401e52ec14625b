"""End to end: ``airflow dags test`` of the N-way join DAG, run twice."""

from __future__ import annotations

import sys
from typing import Any

import pytest
from dags_support import REPO, Airflow, output_rows, rows_at
from deltalake import DeltaTable

from airflow_provider_fkjoin.engine.logs.watermarks import progress

# Spark and Airflow start several JVMs and interpreters per DAG run: allow for a busy machine.
pytestmark = pytest.mark.timeout(2400)


# -- N-way join (Joinery): businesses, their reviews and their owners ----------------------------------
#: The output's visible columns: the business's (business_id renamed biz_id), the review's but its text,
#: the owner's; the three inputs' business id columns are one column, biz_id.
BUSINESS_REVIEWS_COLUMNS = [
    "biz_id", "name", "city", "review_id", "user_id", "stars", "owner_id", "owner_name", "share_pct",
]  # fmt: skip
Identity = tuple[Any, ...]


def business_reviews_tables(batches: int) -> dict[str, dict[Identity, dict[str, Any]]]:
    """The business, review and business_owner tables after the example's first ``batches`` batches,
    applied in Python (each batch's deletes, then its upserts by primary key)."""
    sys.path.insert(0, str(REPO / "dags"))
    from fkjoin_example_data import BUSINESS_REVIEWS_KEYS, business_reviews_batch

    tables: dict[str, dict[Identity, dict[str, Any]]] = {name: {} for name in BUSINESS_REVIEWS_KEYS}
    for batch in range(batches):
        for name, changes in business_reviews_batch(batch).items():
            for key in changes["delete"]:
                tables[name].pop(tuple(key), None)
            for row in changes["upsert"]:
                tables[name][tuple(row[c] for c in BUSINESS_REVIEWS_KEYS[name])] = row
    return tables


def expected_business_reviews(tables: dict[str, dict[Identity, dict[str, Any]]]) -> dict[Identity, Identity]:
    """business ⋈ review ⋈ business_owner on the business id, inner (a review naming no business, or one
    that does not exist, matches nothing), computed from scratch: identity (the three inputs' keys) ->
    the visible row (``BUSINESS_REVIEWS_COLUMNS``)."""
    joined: dict[Identity, Identity] = {}
    for business_key, business in tables["business"].items():
        reviews = [(k, r) for k, r in tables["review"].items() if r["biz_id"] == business["business_id"]]
        owners = [
            (k, o) for k, o in tables["business_owner"].items() if o["business_id"] == business["business_id"]
        ]
        for review_key, review in reviews:
            for owner_key, owner in owners:
                joined[(*business_key, *review_key, *owner_key)] = (
                    business["business_id"], business["name"], business["city"],
                    review["review_id"], review["user_id"], review["stars"],
                    owner["owner_id"], owner["owner_name"], owner["share_pct"],
                )  # fmt: skip
    return joined


def repeated_pkeys(rows: dict[Identity, Identity], among: set[Any] | None = None) -> int:
    """How many biz_id values (the Joinery pkey, business_id renamed) hold more than one row; ``among``:
    only those values (the pkeys a refresh wrote)."""
    counts: dict[Any, int] = {}
    for row in rows.values():
        counts[row[0]] = counts.get(row[0], 0) + 1
    return sum(1 for pkey, n in counts.items() if n > 1 and (among is None or pkey in among))


def test_multiway_business_reviews_two_runs_match_a_recompute(airflow: Airflow, spark: Any):
    """The Joinery DAG, a full run then an incremental one: after each, the output equals the three-way
    inner join recomputed in Python from the example batches, the input tables hold exactly those batches
    at the versions the refresh consumed, and the asset event's row counts equal the difference between
    the two recomputed joins (a key whose row did not change is not rewritten)."""
    from airflow_provider_fkjoin.links import table_uri

    w = airflow.warehouse
    output = w / "business_reviews"
    joins: list[dict[Identity, Identity]] = []
    for run in range(2):
        airflow.dags_test("fkjoin_multiway_business_reviews")
        latest = progress(output)
        assert latest is not None and latest["mode"] == ("full" if run == 0 else "incremental"), latest
        tables = business_reviews_tables(run + 1)
        for name, rows in tables.items():
            version = latest["inputs"][name]["version"]
            assert version == DeltaTable(str(w / name)).version()  # pinned the seed's last commit
            assert sorted(rows_at(w / name, version), key=repr) == sorted(rows.values(), key=repr), name
        expected = expected_business_reviews(tables)
        frame = spark.read.format("delta").load(str(output))
        visible = [c for c in frame.columns if not c.startswith("_fkjoin_")]
        assert sorted(visible) == sorted(BUSINESS_REVIEWS_COLUMNS)  # text excluded, biz_id shown once
        got = output_rows(spark, output, BUSINESS_REVIEWS_COLUMNS)
        assert got == sorted(expected.values()), f"after run {run + 1}"
        joins.append(expected)

    first, second = joins
    assert (len(first), len(second)) == (10, 11)
    # N:M: b2's two reviews times its two owners; then review 7 moved in from b3 and review 1001 arrived
    assert sum(row[0] == "b2" for row in first.values()) == 4
    assert sum(row[0] == "b2" for row in second.values()) == 6
    # 1:N: b1's new name reached its three rows; the moved review left b3; deletes retracted their rows
    assert [row[1] for row in second.values() if row[0] == "b1"] == ["Golden Dragon Express"] * 3
    assert {row[0] for row in second.values() if row[3] == 7} == {"b2"}
    assert not any(row[0] in ("b3", "b6") or row[3] == 4 for row in second.values())

    extras = airflow.asset_event_extras(table_uri(str(output)))
    assert [(e["mode"], e["version"]) for e in extras] == [("full", 0), ("incremental", 1)]
    assert extras[0]["inputs"] == {"business": 0, "review": 0, "business_owner": 0}
    assert extras[0]["rows"]["inserted"] == len(first)
    assert extras[0]["rows"].get("pkey_duplicates") == repeated_pkeys(first) == 3  # b1, b2, b3
    inserted = second.keys() - first.keys()
    deleted = first.keys() - second.keys()
    updated = {key for key in first.keys() & second.keys() if first[key] != second[key]}
    counts = extras[1]["rows"]
    assert (
        (counts["inserted"], counts["updated"], counts["deleted"])
        == (
            len(inserted),
            len(updated),
            len(deleted),
        )
        == (6, 3, 5)
    )
    written = {second[key][0] for key in inserted | updated}
    assert counts.get("pkey_duplicates") == repeated_pkeys(second, among=written) == 2  # b1 and b2

"""End to end: ``airflow dags test`` of every example DAG on the embedded default (local Spark, Delta
tables in a temporary warehouse, SQLite Airflow in a temporary AIRFLOW_HOME).

Each output is checked against a join recomputed from scratch in pure Python from the input tables
(read with ``deltalake`` at the versions the refresh consumed), never against the engine's own output.
The outputs have deletion vectors, which ``deltalake`` cannot read, so they are read with Spark.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from airflow_provider_fkjoin.engine.logs.watermarks import progress

# Spark and Airflow start several JVMs and interpreters per DAG run: allow for a busy machine.
pytestmark = pytest.mark.timeout(2400)

REPO = Path(__file__).resolve().parents[2]
AIRFLOW = str(Path(sys.executable).parent / "airflow")


class Airflow:
    """An isolated Airflow installation (AIRFLOW_HOME in tmp, SQLite) pointed at the repo's dags/."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.warehouse = home / "warehouse"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW_", "AIRFLOW__"))}
        env.update(
            {
                "AIRFLOW_HOME": str(home),
                "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "FKJOIN_WAREHOUSE": str(self.warehouse),
                "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
                "PATH": os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
            }
        )
        self.env = env

    def run(self, *args: str) -> str:
        done = subprocess.run(
            [AIRFLOW, *args], env=self.env, cwd=self.home, capture_output=True, text=True, timeout=900
        )
        output = done.stdout + done.stderr
        assert done.returncode == 0, f"airflow {' '.join(args)} failed:\n{output[-6000:]}"
        return output

    def dags_test(self, dag_id: str) -> str:
        output = self.run("dags", "test", dag_id)
        assert "state=success" in output or "successful" in output, output[-6000:]
        assert "new_state=failed" not in output, output[-6000:]
        return output

    def asset_event_extras(self, uri: str) -> list[dict[str, Any]]:
        with sqlite3.connect(self.home / "airflow.db") as db:
            rows = db.execute(
                "SELECT e.extra FROM asset_event e JOIN asset a ON a.id = e.asset_id WHERE a.uri = ? "
                "ORDER BY e.id",
                (uri,),
            ).fetchall()
        return [json.loads(extra) if isinstance(extra, str) else extra for (extra,) in rows]


@pytest.fixture(scope="module")
def airflow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Airflow]:
    installation = Airflow(tmp_path_factory.mktemp("airflow-home"))
    installation.run("db", "migrate")
    yield installation


def rows_at(path: Path, version: int) -> list[dict[str, Any]]:
    """An input table's rows at a version (inputs are written by deltalake: no deletion vectors)."""
    return pa.table(DeltaTable(str(path), version=version).to_pyarrow_table()).to_pylist()


def output_rows(spark: Any, path: Path, columns: list[str]) -> list[tuple[Any, ...]]:
    frame = spark.read.format("delta").load(str(path)).select(*columns)
    return sorted(tuple(row) for row in frame.collect())


# -- KIP-213 -------------------------------------------------------------------------------------------
def expected_fk_join(orders: list[dict[str, Any]], customers: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """orders LEFT JOIN customers ON customer_id, computed from scratch."""
    by_id = {c["customer_id"]: c for c in customers}
    result = []
    for order in orders:
        customer = by_id.get(order["customer_id"]) if order["customer_id"] is not None else None
        result.append(
            (
                order["order_id"],
                order["customer_id"],
                order["amount"],
                customer["name"] if customer else None,
                customer["tier"] if customer else None,
            )
        )
    return sorted(result, key=lambda r: r[0])


def check_kip213(airflow: Airflow, spark: Any, expected_mode: str) -> list[tuple[Any, ...]]:
    output = airflow.warehouse / "orders_customers"
    latest = progress(output)
    assert latest is not None and latest["mode"] == expected_mode, latest
    orders = rows_at(airflow.warehouse / "orders", latest["inputs"]["left"]["version"])
    customers = rows_at(airflow.warehouse / "customers", latest["inputs"]["right"]["version"])
    # the refresh pinned the inputs' latest versions: the seed of this run wrote them
    assert latest["inputs"]["left"]["version"] == DeltaTable(str(airflow.warehouse / "orders")).version()
    expected = expected_fk_join(orders, customers)
    columns = ["order_id", "customer_id", "amount", "customer_name", "tier"]
    assert output_rows(spark, output, columns) == expected
    return expected


def test_kip213_fk_join_full_then_incremental(airflow: Airflow, spark: Any):
    from airflow_provider_fkjoin.links import table_uri

    airflow.dags_test("fkjoin_kip213_fk_join")
    first = check_kip213(airflow, spark, "full")
    assert any(row[3] is None for row in first) is False  # every order has its customer at first

    airflow.dags_test("fkjoin_kip213_fk_join")
    second = check_kip213(airflow, spark, "incremental")
    assert any(row[3] is None for row in second)  # a deleted customer nulls its orders (left join)

    extras = airflow.asset_event_extras(table_uri(str(airflow.warehouse / "orders_customers")))
    assert [(e["mode"], e["version"]) for e in extras] == [("full", 0), ("incremental", 1)]
    assert extras[0]["rows"]["inserted"] == len(first)


def test_downstream_report_on_the_join_asset(airflow: Airflow, spark: Any):
    output = airflow.warehouse / "orders_customers"
    if not (output / "_delta_log").is_dir():  # run alone: make the join's output first
        airflow.dags_test("fkjoin_kip213_fk_join")
    airflow.dags_test("fkjoin_orders_report")
    report = json.loads((airflow.warehouse / "reports" / "orders_by_tier.json").read_text())
    joined = check_kip213(airflow, spark, progress(output)["mode"])
    expected: dict[str, dict[str, Any]] = {}
    for _, _, amount, _, tier in joined:
        entry = expected.setdefault(tier or "unknown", {"orders": 0, "revenue": 0.0})
        entry["orders"] += 1
        entry["revenue"] = round(entry["revenue"] + amount, 2)
    assert report["by_tier"] == expected
    assert report["join_version"] == progress(output)["output_version"]


# -- KIP-99 --------------------------------------------------------------------------------------------
def products_as_of(cdc: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """The table a CDC changelog describes: latest event per key by lsn; a delete removes the key."""
    latest: dict[int, dict[str, Any]] = {}
    for event in sorted(cdc, key=lambda e: e["lsn"]):
        latest[event["product_id"]] = event
    return {pid: e for pid, e in latest.items() if e["op"] != "d"}


def check_kip99(airflow: Airflow, spark: Any, runs: int) -> None:
    w = airflow.warehouse
    stream_version = DeltaTable(str(w / "orders_stream")).version()
    cdc_version = DeltaTable(str(w / "products_cdc")).version()
    assert stream_version == cdc_version == runs - 1  # the seed writes one commit per run to each

    global_progress = progress(w / "products_global")
    assert global_progress["inputs"]["source"]["version"] == cdc_version
    products = products_as_of(rows_at(w / "products_cdc", cdc_version))
    expected_global = sorted((pid, p["name"], p["price"]) for pid, p in products.items())
    assert output_rows(spark, w / "products_global", ["product_id", "name", "price"]) == expected_global

    # stream-table lookup: orders appended at version v joined with the products as of version v
    expected: list[tuple[Any, ...]] = []
    for version in range(stream_version + 1):
        before = {o["order_id"] for o in rows_at(w / "orders_stream", version - 1)} if version else set()
        table = products_as_of(rows_at(w / "products_cdc", version))
        for order in rows_at(w / "orders_stream", version):
            if order["order_id"] in before:
                continue
            product = table.get(order["product_id"])
            price = product["price"] if product else None
            expected.append(
                (
                    order["order_id"],
                    order["product_id"],
                    order["quantity"],
                    product["name"] if product else None,
                    price,
                    order["quantity"] * price if price is not None else None,
                )
            )
    columns = ["order_id", "product_id", "quantity", "product_name", "unit_price", "total"]
    assert output_rows(spark, w / "orders_enriched", columns) == sorted(expected)
    enriched = progress(w / "orders_enriched")
    assert enriched["inputs"]["stream"]["version"] == stream_version


def test_kip99_bootstrap_gate_and_enrich(airflow: Airflow, spark: Any):
    """One run (each costs two Spark applications); the engine's tests cover incremental refreshes."""
    output = airflow.dags_test("fkjoin_kip99_global_table")
    assert "products_caught_up" in output
    check_kip99(airflow, spark, runs=1)
    assert progress(airflow.warehouse / "products_global")["mode"] == "full"


# -- windowed join: impressions and clicks ------------------------------------------------------------
def _ms(value: Any) -> int:
    return int(value.timestamp() * 1000)


def test_windowed_ad_clicks_two_runs_match_the_model(airflow: Airflow, spark: Any):
    """Two runs (a full one, then an incremental one); what the output holds after each equals what the
    record-by-record model (``tests/windowed_model.py``) emits for the rows each run's seed appended."""
    sys.path.insert(0, str(REPO / "tests"))
    from windowed_model import Event, StreamJoinModel

    w = airflow.warehouse
    model = StreamJoinModel(before=0, after=3_600_000, grace=600_000, how="left")
    expected: list[tuple[Any, ...]] = []
    for run in range(2):
        airflow.dags_test("fkjoin_windowed_ad_clicks")
        sides = []
        tables = (("impressions", "impression_id", "shown_at"), ("clicks", "click_id", "clicked_at"))
        for table, key, time in tables:
            version = DeltaTable(str(w / table)).version()
            before = {r[key] for r in rows_at(w / table, version - 1)} if version else set()
            new = [r for r in rows_at(w / table, version) if r[key] not in before]
            new.sort(key=lambda r: r["offset"])
            sides.append([Event((r["ad_id"],), _ms(r[time]), r) for r in new])
        for _kind, left, right, t in model.refresh(*sides):
            expected.append(
                (left["impression_id"] if left else None, right["click_id"] if right else None, t)
            )
        rows = spark.read.format("delta").load(str(w / "ad_clicks")).collect()
        got = sorted(((r["impression_id"], r["click_id"], _ms(r["event_time"])) for r in rows), key=repr)
        assert got == sorted(expected, key=repr), f"after run {run + 1}"
        assert progress(w / "ad_clicks")["mode"] == ("full" if run == 0 else "incremental")
    assert any(click is None for _, click, _ in expected)  # an impression nobody clicked was closed
    assert any(click is not None for _, click, _ in expected)


def test_self_join_card_txns_two_runs_match_the_model(airflow: Airflow, spark: Any):
    """The self-join DAG, a full run then an incremental one: the output equals what the record-by-record
    model of the two-sided join of the table with itself emits for the rows each run's seed appended."""
    sys.path.insert(0, str(REPO / "tests"))
    from windowed_model import Event, StreamJoinModel

    w = airflow.warehouse
    model = StreamJoinModel(before=600_000, after=600_000, grace=3_600_000, how="inner", same_table=True)
    expected: list[tuple[Any, ...]] = []
    for run in range(2):
        airflow.dags_test("fkjoin_self_join_card_txns")
        version = DeltaTable(str(w / "card_txns")).version()
        before = {r["txn_id"] for r in rows_at(w / "card_txns", version - 1)} if version else set()
        new = sorted(
            (r for r in rows_at(w / "card_txns", version) if r["txn_id"] not in before),
            key=lambda r: r["offset"],
        )
        events = [Event((r["card_id"],), _ms(r["txn_at"]), r) for r in new]
        expected += [
            (left["txn_id"], right["txn_id"], t) for _kind, left, right, t in model.refresh(events, [])
        ]
        rows = spark.read.format("delta").load(str(w / "card_txn_pairs")).collect()
        got = sorted((r["txn_id"], r["paired_txn_id"], _ms(r["event_time"])) for r in rows)
        assert got == sorted(expected), f"after run {run + 1}"
        assert progress(w / "card_txn_pairs")["mode"] == ("full" if run == 0 else "incremental")
    assert any(first != second for first, second, _ in expected)  # c1's two transactions, both ways
    assert any(
        {first, second} == {5, 17} for first, second, _ in expected
    )  # the late c3 found the earlier c3


def test_windowed_errors_vs_last_week_two_runs_match_a_recompute(airflow: Airflow, spark: Any):
    """Table mode: the windowed table joined to itself a week earlier, after a full and an incremental
    run, equals the join recomputed in Python from the table at the version the refresh consumed."""
    w = airflow.warehouse
    week = 7 * 86_400_000
    for run in range(2):
        airflow.dags_test("fkjoin_windowed_errors_vs_last_week")
        latest = progress(w / "errors_vs_last_week")
        assert latest["mode"] == ("full" if run == 0 else "incremental")
        rows = rows_at(w / "errors_per_min", latest["inputs"]["left"]["version"])
        by_window = {(r["service"], _ms(r["ws"]), _ms(r["we"])): r["errors"] for r in rows}
        expected = sorted(
            (service, ws, we, errors, by_window.get((service, ws - week, we - week)))
            for (service, ws, we), errors in by_window.items()
        )
        got = sorted(
            (r["service"], _ms(r["ws"]), _ms(r["we"]), r["errors"], r["errors_week_ago"])
            for r in spark.read.format("delta").load(str(w / "errors_vs_last_week")).collect()
        )
        assert got == expected, f"after run {run + 1}"
        assert any(r[4] is not None for r in got) and any(r[4] is None for r in got)


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

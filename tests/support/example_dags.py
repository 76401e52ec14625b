"""What the example DAGs' end-to-end tests share: the Airflow metadata DB migrated once per test run, and
each example's expected output with the checks that compare a warehouse against it.

The real-server run (``tests/e2e/test_airflow_servers.py``) and the ``airflow dags test`` path
(``tests/airflow/test_dags_fk_join.py``) use the same checks. Each output is compared with a join recomputed
from scratch in pure Python from the input tables (read with ``deltalake`` at the versions the refresh
consumed) or with the record-by-record model (``tests/windowed_model.py``), never with the engine's own
output. The outputs have deletion vectors, which ``deltalake`` cannot read, so they are read with Spark.
Every seed writes one commit per input table per run, so run ``n``'s inputs are at version ``n - 1``.

    template = airflow_db_template(tmp_path_factory)   # airflow db migrate, once per run
    shutil.copyfile(template, home / "airflow.db")     # a fresh metadata DB
    check_kip213_run(warehouse, spark, run=1)
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from airflow_provider_fkjoin.engine.deltalog.watermarks import progress

REPO = Path(__file__).resolve().parents[2]
AIRFLOW = str(Path(sys.executable).parent / "airflow")
Identity = tuple[Any, ...]


# -- the metadata DB ------------------------------------------------------------------------------------
def airflow_db_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An ``airflow.db`` that ``airflow db migrate`` made, once per test run: the xdist workers share it
    through a file lock in the run's tmp root. Copy it to ``$AIRFLOW_HOME/airflow.db`` for a fresh DB."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the workers' common folder
    template = root / "airflow-db-template" / "airflow.db"
    with (root / "airflow-db-template.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if template.is_file():
            return template
        home = root / f"airflow-db-migrate-{os.getpid()}"
        home.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "_AIRFLOW"))}
        env.update(
            AIRFLOW_HOME=str(home),
            AIRFLOW__CORE__LOAD_EXAMPLES="False",
            PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
        )
        done = subprocess.run(
            [AIRFLOW, "db", "migrate"], env=env, cwd=home, capture_output=True, text=True, timeout=600
        )
        assert done.returncode == 0, f"airflow db migrate failed:\n{(done.stdout + done.stderr)[-6000:]}"
        template.parent.mkdir()
        (home / "airflow.db").rename(template)  # whole or absent: a failed migrate leaves no template
    return template


# -- readers ----------------------------------------------------------------------------------------------
def rows_at(path: Path, version: int) -> list[dict[str, Any]]:
    """An input table's rows at a version (inputs are written by deltalake: no deletion vectors)."""
    return pa.table(DeltaTable(str(path), version=version).to_pyarrow_table()).to_pylist()


def output_rows(spark: Any, path: Path, columns: list[str]) -> list[tuple[Any, ...]]:
    frame = spark.read.format("delta").load(str(path)).select(*columns)
    return sorted(tuple(row) for row in frame.collect())


def epoch_millis(value: Any) -> int:
    """A timestamp read back from Spark as epoch milliseconds (what the models compare)."""
    return int(value.timestamp() * 1000)


def new_rows(path: Path, key: str, version: int) -> list[dict[str, Any]]:
    """The rows an append-only table gained at ``version``, in their ``offset`` order."""
    before = {r[key] for r in rows_at(path, version - 1)} if version else set()
    return sorted((r for r in rows_at(path, version) if r[key] not in before), key=lambda r: r["offset"])


def mode_of(run: int) -> str:
    """The refresh mode of an example DAG's ``run``-th run (1-based): a full one, then incremental ones."""
    return "full" if run == 1 else "incremental"


# -- KIP-213: orders LEFT JOIN customers -------------------------------------------------------------------
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


def check_kip213(warehouse: Path, spark: Any, expected_mode: str) -> list[tuple[Any, ...]]:
    """The join's latest refresh has ``expected_mode``, pinned the seed's last commit, and its output is
    the join recomputed at the versions it consumed; returns those rows."""
    output = warehouse / "orders_customers"
    latest = progress(output)
    assert latest is not None and latest["mode"] == expected_mode, latest
    orders = rows_at(warehouse / "orders", latest["inputs"]["left"]["version"])
    customers = rows_at(warehouse / "customers", latest["inputs"]["right"]["version"])
    # the refresh pinned the inputs' latest versions: the seed of this run wrote them
    assert latest["inputs"]["left"]["version"] == DeltaTable(str(warehouse / "orders")).version()
    expected = expected_fk_join(orders, customers)
    columns = ["order_id", "customer_id", "amount", "customer_name", "tier"]
    assert output_rows(spark, output, columns) == expected
    return expected


def check_kip213_run(warehouse: Path, spark: Any, run: int) -> list[tuple[Any, ...]]:
    """:func:`check_kip213` after the DAG's ``run``-th run, and what the example shows by then."""
    joined = check_kip213(warehouse, spark, mode_of(run))
    if run == 1:
        assert any(row[3] is None for row in joined) is False  # every order has its customer at first
    else:
        assert any(row[3] is None for row in joined)  # a deleted customer nulls its orders (left join)
    return joined


def check_kip213_events(warehouse: Path, extras: list[dict[str, Any]]) -> None:
    """The output asset's event extras after two runs, oldest first."""
    assert [(e["mode"], e["version"]) for e in extras] == [("full", 0), ("incremental", 1)]
    first = expected_fk_join(rows_at(warehouse / "orders", 0), rows_at(warehouse / "customers", 0))
    assert extras[0]["rows"]["inserted"] == len(first)


# -- KIP-99: a global table from a CDC changelog, and an order stream enriched by lookup --------------------
def products_as_of(cdc: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """The table a CDC changelog describes: latest event per key by lsn; a delete removes the key."""
    latest: dict[int, dict[str, Any]] = {}
    for event in sorted(cdc, key=lambda e: e["lsn"]):
        latest[event["product_id"]] = event
    return {pid: e for pid, e in latest.items() if e["op"] != "d"}


def check_kip99(warehouse: Path, spark: Any, runs: int) -> None:
    """``products_global`` and ``orders_enriched`` after ``runs`` runs equal their recomputation."""
    w = warehouse
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


# -- N-way join (Joinery): businesses, their reviews and their owners --------------------------------------
#: The output's visible columns: the business's (business_id renamed biz_id), the review's but its text,
#: the owner's; the three inputs' business id columns are one column, biz_id.
BUSINESS_REVIEWS_COLUMNS = [
    "biz_id", "name", "city", "review_id", "user_id", "stars", "owner_id", "owner_name", "share_pct",
]  # fmt: skip


def business_reviews_tables(batches: int) -> dict[str, dict[Identity, dict[str, Any]]]:
    """The business, review and business_owner tables after the example's first ``batches`` batches,
    applied in Python (each batch's deletes, then its upserts by primary key)."""
    if str(REPO / "dags") not in sys.path:
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


def check_business_reviews_run(warehouse: Path, spark: Any, run: int) -> dict[Identity, Identity]:
    """After the Joinery DAG's ``run``-th run: the output equals the three-way inner join recomputed from
    the example batches, and the input tables hold exactly those batches at the versions the refresh
    consumed; returns the recomputed join."""
    w = warehouse
    output = w / "business_reviews"
    latest = progress(output)
    assert latest is not None and latest["mode"] == mode_of(run), latest
    tables = business_reviews_tables(run)
    for name, rows in tables.items():
        version = latest["inputs"][name]["version"]
        assert version == DeltaTable(str(w / name)).version()  # pinned the seed's last commit
        assert sorted(rows_at(w / name, version), key=repr) == sorted(rows.values(), key=repr), name
    expected = expected_business_reviews(tables)
    frame = spark.read.format("delta").load(str(output))
    visible = [c for c in frame.columns if not c.startswith("_fkjoin_")]
    assert sorted(visible) == sorted(BUSINESS_REVIEWS_COLUMNS)  # text excluded, biz_id shown once
    got = output_rows(spark, output, BUSINESS_REVIEWS_COLUMNS)
    assert got == sorted(expected.values()), f"after run {run}"
    if run == 2:
        check_business_reviews_story(expected_business_reviews(business_reviews_tables(1)), expected)
    return expected


def check_business_reviews_story(first: dict[Identity, Identity], second: dict[Identity, Identity]) -> None:
    """What the example's two batches show (``fkjoin_example_data.business_reviews_batch``)."""
    assert (len(first), len(second)) == (10, 11)
    # N:M: b2's two reviews times its two owners; then review 7 moved in from b3 and review 1001 arrived
    assert sum(row[0] == "b2" for row in first.values()) == 4
    assert sum(row[0] == "b2" for row in second.values()) == 6
    # 1:N: b1's new name reached its three rows; the moved review left b3; deletes retracted their rows
    assert [row[1] for row in second.values() if row[0] == "b1"] == ["Golden Dragon Express"] * 3
    assert {row[0] for row in second.values() if row[3] == 7} == {"b2"}
    assert not any(row[0] in ("b3", "b6") or row[3] == 4 for row in second.values())


def check_business_reviews_events(extras: list[dict[str, Any]]) -> None:
    """The output asset's event extras after two runs, oldest first: the row counts equal the difference
    between the two recomputed joins (a key whose row did not change is not rewritten)."""
    first = expected_business_reviews(business_reviews_tables(1))
    second = expected_business_reviews(business_reviews_tables(2))
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


# -- windowed and self joins: the record-by-record model -----------------------------------------------------
def check_card_txn_pairs(warehouse: Path, spark: Any, runs: int) -> list[tuple[Any, ...]]:
    """After ``runs`` runs of the self-join DAG, the output equals what the model of the two-sided join of
    the table with itself emits for the rows each run's seed appended; returns the model's pairs."""
    from windowed_model import Event, StreamJoinModel

    w = warehouse
    assert DeltaTable(str(w / "card_txns")).version() == runs - 1  # one commit per run
    model = StreamJoinModel(before=600_000, after=600_000, grace=3_600_000, how="inner", same_table=True)
    expected: list[tuple[Any, ...]] = []
    for version in range(runs):
        new = new_rows(w / "card_txns", "txn_id", version)
        events = [Event((r["card_id"],), epoch_millis(r["txn_at"]), r) for r in new]
        expected += [
            (left["txn_id"], right["txn_id"], t) for _kind, left, right, t in model.refresh(events, [])
        ]
    rows = spark.read.format("delta").load(str(w / "card_txn_pairs")).collect()
    got = sorted((r["txn_id"], r["paired_txn_id"], epoch_millis(r["event_time"])) for r in rows)
    assert got == sorted(expected), f"after run {runs}"
    assert progress(w / "card_txn_pairs")["mode"] == mode_of(runs)
    if runs >= 2:
        assert any(first != second for first, second, _ in expected)  # c1's two transactions, both ways
        assert any({first, second} == {5, 17} for first, second, _ in expected)  # the late c3 found c3
    return expected


def check_ad_clicks(warehouse: Path, spark: Any, runs: int) -> list[tuple[Any, ...]]:
    """After ``runs`` runs of the windowed-join DAG, the output equals what the model emits for the rows
    each run's seed appended to impressions and clicks; returns the model's rows."""
    from windowed_model import Event, StreamJoinModel

    w = warehouse
    model = StreamJoinModel(before=0, after=3_600_000, grace=600_000, how="left")
    tables = (("impressions", "impression_id", "shown_at"), ("clicks", "click_id", "clicked_at"))
    for table, _, _ in tables:
        assert DeltaTable(str(w / table)).version() == runs - 1, table  # one commit per run
    expected: list[tuple[Any, ...]] = []
    for version in range(runs):
        sides = [
            [Event((r["ad_id"],), epoch_millis(r[time]), r) for r in new_rows(w / table, key, version)]
            for table, key, time in tables
        ]
        for _kind, left, right, t in model.refresh(*sides):
            expected.append(
                (left["impression_id"] if left else None, right["click_id"] if right else None, t)
            )
    rows = spark.read.format("delta").load(str(w / "ad_clicks")).collect()
    got = sorted(((r["impression_id"], r["click_id"], epoch_millis(r["event_time"])) for r in rows), key=repr)
    assert got == sorted(expected, key=repr), f"after run {runs}"
    assert progress(w / "ad_clicks")["mode"] == mode_of(runs)
    if runs >= 2:
        assert any(click is None for _, click, _ in expected)  # an impression nobody clicked was closed
        assert any(click is not None for _, click, _ in expected)
    return expected


def check_errors_vs_last_week(warehouse: Path, spark: Any, run: int) -> None:
    """Table mode: the windowed table joined to itself a week earlier, after the DAG's ``run``-th run,
    equals the join recomputed from the table at the version the refresh consumed."""
    w = warehouse
    week = 7 * 86_400_000
    latest = progress(w / "errors_vs_last_week")
    assert latest["mode"] == mode_of(run)
    rows = rows_at(w / "errors_per_min", latest["inputs"]["left"]["version"])
    by_window = {(r["service"], epoch_millis(r["ws"]), epoch_millis(r["we"])): r["errors"] for r in rows}
    expected = sorted(
        (service, ws, we, errors, by_window.get((service, ws - week, we - week)))
        for (service, ws, we), errors in by_window.items()
    )
    got = sorted(
        (r["service"], epoch_millis(r["ws"]), epoch_millis(r["we"]), r["errors"], r["errors_week_ago"])
        for r in spark.read.format("delta").load(str(w / "errors_vs_last_week")).collect()
    )
    assert got == expected, f"after run {run}"
    assert any(r[4] is not None for r in got) and any(r[4] is None for r in got)

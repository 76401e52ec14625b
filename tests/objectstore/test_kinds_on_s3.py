"""Every kind of join with its inputs and output in a bucket of an S3-protocol server (``s3a://``): a first
run, an incremental refresh after inserts, updates and deletes, a noop (decided by the engine and by the
no-JVM check reading the logs over S3), the audit of table outputs, and ``refresh_status``.

Each output is checked against the suite's own independent oracles, unchanged, since the world builders
take a folder and :class:`conftest.Url` joins like one: the pure-Python FK join (``helpers.World``), the
multiway model, the record-by-record windowed model, the from-scratch windowed-table join, and the source
snapshot of a global table.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from helpers import (
    Batch,
    OutputSpec,
    World,
    append_rows,
    create_table,
    delete_keys,
    expected_fk_join,
    oracle,
    orders_customers,
    output_state,
    read_rows,
    rows_by_key,
    upsert,
)
from support.global_tables import PRODUCTS, spec_for, state
from support.multiway_worlds import yelp_world
from support.s3 import S3Server, Url
from support.stream_table_joins import ORDERS as STREAM_ORDERS
from support.stream_table_joins import PRODUCTS as STREAM_PRODUCTS
from support.stream_table_joins import join_spec, out_rows
from support.windowed_streams import EVENTS, appended, ev, expected, self_spec, with_keys
from support.windowed_streams import spec_for as windowed_spec
from support.windowed_tables import ERRORS, WEEK, errors_row, output_of, scratch
from windowed_model import Event, StreamJoinModel

from airflow_provider_fkjoin.engine import noop_result, refresh_status, run_spec
from airflow_provider_fkjoin.engine.core.spec import TableRef
from airflow_provider_fkjoin.engine.delta.tables import DeltaHandle
from airflow_provider_fkjoin.engine.delta.warm_state import WarmState

ORDERS = "order_id long, customer_id long, amount double"
CUSTOMERS = "customer_id long, name string"
CUSTOMER_EVENTS = "customer_id long, op string, lsn long, name string"


def no_jvm_noop(s3: S3Server, spec: dict[str, Any]) -> None:
    """The hook's no-JVM check reads every log over S3 and finds nothing to do."""
    found = noop_result(spec, storage_options=s3.storage_options)
    assert found is not None and found["mode"] == "noop", found


def audited(spark, spec: dict[str, Any]) -> None:
    report = run_spec(spec, spark=spark, audit=True)
    assert report["consistent"], report


def fk_tables(spark, s3: S3Server, root: Url) -> list[dict[str, Any]]:
    """Inner and left FK joins over orders x customers, checked per refresh by ``helpers.World``."""
    world = World(
        spark,
        root,
        left_schema=ORDERS,
        right_schema=CUSTOMERS,
        left_key=["order_id"],
        right_key=["customer_id"],
        outputs={
            "inner": OutputSpec("inner", ["customer_id"]),
            "left": OutputSpec("left", ["customer_id"]),
        },
    )
    world.create(
        [
            {"order_id": 1, "customer_id": 10, "amount": 1.0},
            {"order_id": 2, "customer_id": 20, "amount": 2.0},
            {"order_id": 3, "customer_id": None, "amount": 3.0},
            {"order_id": 4, "customer_id": 99, "amount": 4.0},
        ],
        [{"customer_id": 10, "name": "ann"}, {"customer_id": 20, "name": "bob"}],
    )
    world.refresh()
    world.apply(
        Batch(
            left_upserts=[
                {"order_id": 4, "customer_id": 10, "amount": 4.5},
                {"order_id": 5, "customer_id": 20},
            ],
            left_deletes=[1],
            right_upserts=[{"customer_id": 20, "name": "BOB"}, {"customer_id": 30, "name": "cy"}],
        )
    )
    world.refresh()
    world.refresh()  # nothing new: World expects a noop that keeps the output's version
    for name in world.outputs:
        world.assert_ok(name)
        modes = [record.result["mode"] for record in world.history[name] if record.result]
        assert modes == ["full", "incremental", "noop"], modes
    return list(world.specs.values())


def fk_changelog(spark, s3: S3Server, root: Url) -> list[dict[str, Any]]:
    """A left FK join whose right input is a CDC changelog (latest event per key; a delete removes it)."""
    orders, customers = root / "orders", root / "customers_cdc"
    create_table(
        spark,
        orders,
        [
            {"order_id": 1, "customer_id": 10, "amount": 1.0},
            {"order_id": 2, "customer_id": 20, "amount": 2.0},
        ],
        ORDERS,
    )
    events = [
        {"customer_id": 10, "op": "c", "lsn": 1, "name": "ann"},
        {"customer_id": 20, "op": "c", "lsn": 2, "name": "bob"},
        {"customer_id": 10, "op": "u", "lsn": 3, "name": "ANN"},
    ]
    create_table(spark, customers, events, CUSTOMER_EVENTS)
    spec = {
        "kind": "foreign_key_join",
        "left": {"path": orders, "key": ["order_id"]},
        "right": {
            "path": customers,
            "key": ["customer_id"],
            "changelog": {"op_column": "op", "order_by": "lsn"},
        },
        "foreign_key": ["customer_id"],
        "how": "left",
        "columns": {"customer_id": "l.customer_id", "amount": "l.amount", "name": "r.name"},
        "output": {"path": root / "out"},
    }

    def check(result: dict[str, Any]) -> None:
        latest: dict[Any, dict[str, Any]] = {}
        for event in read_rows(spark, customers, result["inputs"]["right"]["to_version"]):
            if event["customer_id"] not in latest or event["lsn"] > latest[event["customer_id"]]["lsn"]:
                latest[event["customer_id"]] = event
        right = [{"customer_id": k, "name": e["name"]} for k, e in latest.items() if e["op"] != "d"]
        left = read_rows(spark, orders, result["inputs"]["left"]["to_version"])
        columns = {"customer_id": "l.customer_id", "amount": "l.amount", "name": "r.name"}
        want = expected_fk_join(left, right, ["order_id"], ["customer_id"], ["customer_id"], "left", columns)
        assert rows_by_key(read_rows(spark, spec["output"]["path"]), ["order_id"]) == rows_by_key(
            want, ["order_id"]
        )

    first = run_spec(spec, spark=spark)
    assert first["mode"] == "full"
    check(first)
    append_rows(
        spark,
        customers,
        [
            {"customer_id": 20, "op": "d", "lsn": 4, "name": None},
            {"customer_id": 10, "op": "u", "lsn": 2, "name": "late"},  # older than lsn 3: ignored
        ],
    )
    upsert(spark, orders, [{"order_id": 3, "customer_id": 10, "amount": 3.0}], ["order_id"])
    second = run_spec(spec, spark=spark)
    assert second["mode"] == "incremental", second
    check(second)
    assert run_spec(spec, spark=spark)["mode"] == "noop"
    return [spec]


def global_table(spark, s3: S3Server, root: Url) -> list[dict[str, Any]]:
    """A global table bootstrapped to the source's high watermark, then caught up from its change feed."""
    src, out = root / "products", root / "products_global"
    create_table(
        spark, src, [{"product_id": i, "name": f"p{i}", "price": float(i)} for i in range(1, 5)], PRODUCTS
    )
    spec = spec_for(src, out)
    first = run_spec(spec, spark=spark)
    assert (first["mode"], first["caught_up"]) == ("full", True)
    assert state(read_rows(spark, out)) == state(read_rows(spark, src, first["checkpoint"]))
    upsert(spark, src, [{"product_id": 1, "name": "P1", "price": 10.0}], ["product_id"])
    delete_keys(spark, src, [2], ["product_id"])
    upsert(spark, src, [{"product_id": 6, "name": "p6", "price": 6.0}], ["product_id"])
    second = run_spec(spec, spark=spark)
    assert (second["mode"], second["checkpoint"]) == ("incremental", 3), second
    assert state(read_rows(spark, out)) == state(read_rows(spark, src, 3))
    assert run_spec(spec, spark=spark)["mode"] == "noop"
    return [spec]


def stream_table(spark, s3: S3Server, root: Url) -> list[dict[str, Any]]:
    """A stream-table lookup join: new stream records join the table as of their refresh."""
    orders, products, out = root / "orders", root / "products", root / "joined"
    create_table(
        spark, products, [{"product_id": 1, "name": "A"}, {"product_id": 2, "name": "B"}], STREAM_PRODUCTS
    )
    create_table(
        spark,
        orders,
        [{"order_id": 1, "product_id": 1, "qty": 1}, {"order_id": 2, "product_id": 3, "qty": 1}],
        STREAM_ORDERS,
    )
    spec = join_spec(orders, products, out, how="left")
    assert run_spec(spec, spark=spark)["mode"] == "full"
    assert out_rows(spark, out) == sorted([(1, 1, 1, "A"), (2, 3, 1, None)], key=repr)
    upsert(spark, products, [{"product_id": 1, "name": "A2"}, {"product_id": 3, "name": "C"}], ["product_id"])
    delete_keys(spark, products, [2], ["product_id"])
    append_rows(
        spark,
        orders,
        [{"order_id": 5, "product_id": 1, "qty": 2}, {"order_id": 6, "product_id": 2, "qty": 2}],
    )
    assert run_spec(spec, spark=spark)["mode"] == "incremental"
    assert out_rows(spark, out) == sorted(
        [(1, 1, 1, "A"), (2, 3, 1, None), (5, 1, 2, "A2"), (6, 2, 2, None)], key=repr
    )
    assert run_spec(spec, spark=spark)["mode"] == "noop"
    return [spec]


def _append_events(spark, path: Url, events: list[Event], seq: list[int], created: set[str]) -> None:
    rows = []
    for event in events:
        seq[0] += 1
        rows.append(
            {
                "k": None if event.key is None else event.key[0],
                "t": event.t,
                "seq": seq[0],
                "v": event.row["v"],
            }
        )
    if path not in created:
        create_table(spark, path, rows, EVENTS)
        created.add(path)
    elif rows:
        append_rows(spark, path, rows)


def windowed_streams(spark, s3: S3Server, root: Url) -> list[dict[str, Any]]:
    """A left windowed stream join and a self-join, each refresh's appended rows equal to the
    record-by-record model's."""
    window = {"before": 1000, "after": 1000, "grace": 0}
    left, right = root / "impressions", root / "clicks"
    specs = {
        "windowed": windowed_spec(left, right, root / "ad_clicks", window, "left"),
        "self": self_spec(left, root / "pairs", window),
    }
    models = {
        "windowed": StreamJoinModel(1000, 1000, 0, "left"),
        "self": StreamJoinModel(1000, 1000, 0, "inner", same_table=True),
    }
    seq, created = [0], set()
    batches = [
        ([ev("a", 1000, "l1"), ev("b", 1500, "l2")], [ev("a", 1800, "r1")]),
        ([ev("a", 2500, "l3"), ev("c", 9000, "l4")], [ev("b", 2000, "r2"), ev("a", 2600, "r3")]),
    ]
    for number, (lefts, rights) in enumerate(batches):
        _append_events(spark, left, lefts, seq, created)
        _append_events(spark, right, rights, seq, created)
        for name, spec in specs.items():
            result = run_spec(spec, spark=spark)
            assert result["mode"] == ("full" if number == 0 else "incremental"), result
            got = appended(spark, spec["output"]["path"], result)
            model_right = [] if name == "self" else with_keys(rights)
            assert got == expected(models[name].refresh(with_keys(lefts), model_right)), name
    for spec in specs.values():
        assert run_spec(spec, spark=spark)["mode"] == "noop"
    return list(specs.values())


def windowed_table(spark, s3: S3Server, root: Url) -> list[dict[str, Any]]:
    """Errors per minute joined (left) with the same table a week earlier: a table-mode windowed join."""
    table = root / "errors_per_min"
    create_table(
        spark,
        table,
        [errors_row("api", m, m) for m in range(3)]
        + [errors_row("api", m, 10 + m, week=1) for m in range(2)],
        ERRORS,
    )
    window = {"start": "ws", "end": "we"}
    spec = {
        "kind": "windowed_join",
        "mode": "table",
        "left": {"path": table, "key": ["service"], "window": window},
        "right": {"path": table, "key": ["service"], "window": {**window, "offset": "-7d"}},
        "how": "left",
        "columns": {"errors_now": "l.errors", "errors_week_ago": "r.errors"},
        "output": {"path": root / "vs_last_week"},
    }
    key, columns = ["service", "ws", "we"], ["errors_now", "errors_week_ago"]

    def check() -> None:
        rows = read_rows(spark, table)
        want = scratch(
            rows,
            rows,
            key,
            lambda r: (r["service"], r["ws"] + WEEK, r["we"] + WEEK),
            "left",
            lambda left, right: (left["errors"] if left else None, right["errors"] if right else None),
        )
        assert output_of(spark, spec["output"]["path"], key, columns) == want

    assert run_spec(spec, spark=spark)["mode"] == "full"
    check()
    upsert(spark, table, [errors_row("api", 1, 99, week=1), errors_row("web", 0, 2, week=1)], key)
    delete_keys(spark, table, [("api", 0, 60_000)], key)
    assert run_spec(spec, spark=spark)["mode"] == "incremental"
    check()
    assert run_spec(spec, spark=spark)["mode"] == "noop"
    return [spec]


def multiway(spark, s3: S3Server, root: Url) -> list[dict[str, Any]]:
    """Businesses, reviews and owners joined N-way, checked against the multiway model each refresh."""
    world = yelp_world(spark, root)
    assert world.refresh()["mode"] == "full"
    world.upsert("review", [{"review_id": 15, "biz_id": 2, "stars": 5, "text": "new"}])
    world.delete("owner", [101])
    world.upsert("business", [{"business_id": 1, "name": "Cafe 2", "city": "SF"}])
    assert world.refresh()["mode"] == "incremental"
    assert world.refresh()["mode"] == "noop"
    return [world.spec]


#: kind -> (builder of its world and refreshes, whether its output is a keyed table the audit recomputes)
KINDS: dict[str, tuple[Callable[..., list[dict[str, Any]]], bool]] = {
    "fk_inner_and_left": (fk_tables, True),
    "fk_changelog_input": (fk_changelog, True),
    "global_table": (global_table, True),
    "stream_table": (stream_table, False),
    "windowed_stream_and_self": (windowed_streams, False),
    "windowed_table": (windowed_table, True),
    "multiway": (multiway, True),
}


@pytest.mark.parametrize("kind", list(KINDS))
def test_kind_on_s3(s3: S3Server, s3_spark, kind: str) -> None:
    build, keyed = KINDS[kind]
    specs = build(s3_spark, s3, s3.url(f"kinds/{kind}"))
    for spec in specs:
        assert str(spec["output"]["path"]).startswith("s3a://")
        no_jvm_noop(s3, spec)
        status = refresh_status(spec, spark=s3_spark)
        assert all(side["lag_versions"] == 0 for side in status["inputs"].values()), status
        if keyed:
            audited(s3_spark, spec)


def test_warm_state_durable_on_s3(s3: S3Server, s3_spark) -> None:
    """The FK join's warm state writes its durable copy into the bucket, beside the output, and a JVM that
    lost the state (dropped here, as a restart does) loads it from there: the refresh it serves equals the
    join recomputed in Python."""
    spark = s3_spark
    spec, orders, _customers, out = orders_customers(
        spark,
        s3.url("kinds/warm_state"),
        [(1, 10, 1.0), (2, 20, 2.0), (3, None, 3.0)],
        [(10, "a"), (20, "b")],
    )
    spec["warm_state"] = True
    first = run_spec(spec, spark=spark)
    assert output_state(spark, out) == oracle(spark, first, "left")
    warm = WarmState(spark, DeltaHandle(spark, TableRef(path=str(out)), "output"))
    settled = warm.settle()
    assert settled.status == "persisted", (settled, first["warm_state"])
    warm.drop()
    upsert(spark, str(orders), [{"order_id": 2, "customer_id": 10, "amount": 2.5}], ["order_id"])
    second = run_spec(spec, spark=spark)
    state = second["warm_state"]
    assert state["used"] and state["advanced"] and state["loaded_in_s"] >= 0, state
    assert output_state(spark, out) == oracle(spark, second, "left")

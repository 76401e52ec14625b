"""Any column name Delta can store joins correctly: a dot, a space, non-ASCII letters, in keys and values,
for every kind's default projection (and the self-join's ``columns``). A backtick, which Delta's own MERGE
and UPDATE cannot name, is refused in an output column with a SpecError naming it, before anything is
written; the same input column joins under another name through ``columns``.

Inputs with such names need Delta's column mapping; the engine turns it on for an output that needs it.
Each refresh is checked against rows worked out here in plain Python (or the windowed model)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import append_rows, delete_keys, read_rows, upsert
from windowed_model import Event, StreamJoinModel

from airflow_provider_fkjoin.engine import SpecError, run_spec

#: A dot, a space, non-ASCII letters: each a value column of every input below.
ODD = ["a.b", "with space", "naïve_ünï"]


def odd_table(spark, path: Path, schema: str, rows: list[dict[str, Any]]) -> str:
    """A Delta table with column mapping (which names with spaces need) and its change data feed on from
    its first version (Delta takes both together in a CREATE TABLE, not in a CREATE TABLE AS SELECT)."""
    spark.sql(
        f"CREATE TABLE delta.`{path}` ({schema}) USING delta TBLPROPERTIES "
        "('delta.columnMapping.mode' = 'name', 'delta.enableChangeDataFeed' = 'true')"
    )
    append_rows(spark, str(path), rows)
    return str(path)


def state(spark, path: str, key: list[str]) -> dict[tuple, dict[str, Any]]:
    return {
        tuple(r[k] for k in key): {c: v for c, v in r.items() if not c.startswith("_fkjoin_")}
        for r in read_rows(spark, path)
    }


ORDERS = "`order id` long, `product.id` long, `a.b` string, `with space` string, `naïve_ünï` string"
PRODUCTS = "`product.id` long, `p.name` string, `p rice` double, `pä` string"


def order(i: int, product: int | None, tag: str = "") -> dict[str, Any]:
    return {
        "order id": i,
        "product.id": product,
        "a.b": f"a{i}{tag}",
        "with space": f"s{i}",
        "naïve_ünï": "é",
    }


def product(i: int, tag: str = "") -> dict[str, Any]:
    return {"product.id": i, "p.name": f"n{i}{tag}", "p rice": float(i), "pä": "ü"}


def expected_fk(orders: dict[int, dict], products: dict[int, dict], how: str) -> dict[tuple, dict]:
    out = {}
    for i, o in orders.items():
        p = products.get(o["product.id"])
        if p is None and how == "inner":
            continue
        values = {c: (p or {}).get(c) for c in ("p.name", "p rice", "pä")}
        out[(i,)] = {**o, **values}
    return out


def test_foreign_key_join_with_odd_names_in_keys_and_values(spark, warehouse: Path) -> None:
    orders = {i: order(i, 10 + i % 3) for i in range(1, 7)}
    products = {i: product(i) for i in (10, 11)}
    left = odd_table(spark, warehouse / "orders", ORDERS, list(orders.values()))
    right = odd_table(spark, warehouse / "products", PRODUCTS, list(products.values()))
    out = str(warehouse / "out")
    spec = {
        "kind": "foreign_key_join",
        "left": {"path": left, "key": ["order id"]},
        "right": {"path": right, "key": ["product.id"]},
        "foreign_key": ["product.id"],
        "how": "left",
        "output": {"path": out},
    }
    assert run_spec(spec, spark=spark)["mode"] == "full"
    assert state(spark, out, ["order id"]) == expected_fk(orders, products, "left")
    assert list(read_rows(spark, out)[0])[:5] == ["order id", "product.id", *ODD]

    products[11] = product(11, "!")
    products[12] = product(12)
    upsert(spark, right, [products[11], products[12]], ["product.id"])
    delete_keys(spark, right, [10], ["product.id"])
    del products[10]
    orders[2] = order(2, 12, "!")
    upsert(spark, left, [orders[2]], ["order id"])
    result = run_spec(spec, spark=spark)
    assert result["mode"] == "incremental"
    assert state(spark, out, ["order id"]) == expected_fk(orders, products, "left")


def test_global_table_with_odd_names(spark, warehouse: Path) -> None:
    products = {i: product(i) for i in (1, 2, 3)}
    source = odd_table(spark, warehouse / "products", PRODUCTS, list(products.values()))
    out = str(warehouse / "global")
    spec = {
        "kind": "global_table_bootstrap",
        "source": {"path": source, "key": ["product.id"]},
        "output": {"path": out},
    }
    run_spec(spec, spark=spark)
    upsert(spark, source, [product(2, "!"), product(4)], ["product.id"])
    products.update({2: product(2, "!"), 4: product(4)})
    assert run_spec(spec, spark=spark)["mode"] == "incremental"
    assert state(spark, out, ["product.id"]) == {(k,): v for k, v in products.items()}


def test_stream_table_join_with_odd_names(spark, warehouse: Path) -> None:
    clicks = [{"click.id": i, "product.id": 1 + i % 3, "naïve_ünï": f"c{i}"} for i in range(4)]
    products = {i: product(i) for i in (1, 2)}
    stream = odd_table(
        spark, warehouse / "clicks", "`click.id` long, `product.id` long, `naïve_ünï` string", clicks
    )
    table = odd_table(spark, warehouse / "products", PRODUCTS, list(products.values()))
    out = str(warehouse / "out")
    spec = {
        "kind": "stream_table_join",
        "stream": {"path": stream},
        "table": {"path": table, "key": ["product.id"]},
        "key_mapper": ["product.id"],
        "how": "left",
        "output": {"path": out},
    }
    run_spec(spec, spark=spark)
    more = [{"click.id": 9, "product.id": 2, "naïve_ünï": "c9"}]
    append_rows(spark, stream, more)
    assert run_spec(spec, spark=spark)["mode"] == "incremental"

    def joined(click: dict) -> dict:
        p = products.get(click["product.id"], {})
        return {**click, **{c: p.get(c) for c in ("p.name", "p rice", "pä")}}

    got = sorted((dict(r) for r in read_rows(spark, out)), key=lambda r: r["click.id"])
    assert got == [joined(c) for c in clicks + more]


IMPRESSIONS = "`ad.id` string, `shown at` long, `imp ü` string"
CLICKS = "`ad.id` string, `clicked at` long, `click.no` string"


def test_windowed_stream_join_with_odd_names(spark, warehouse: Path) -> None:
    shown = [{"ad.id": "a", "shown at": 1000 * i, "imp ü": f"i{i}"} for i in range(3)]
    clicked = [
        {"ad.id": "a", "clicked at": 1500, "click.no": "c1"},
        {"ad.id": "b", "clicked at": 10, "click.no": "c2"},
    ]
    left = odd_table(spark, warehouse / "imps", IMPRESSIONS, shown)
    right = odd_table(spark, warehouse / "clicks", CLICKS, clicked)
    out = str(warehouse / "out")
    spec = {
        "kind": "windowed_join",
        "mode": "stream",
        "left": {"path": left, "key": ["ad.id"], "time": "shown at"},
        "right": {"path": right, "key": ["ad.id"], "time": "clicked at"},
        "window": {"before": 600, "after": 600},
        "output": {"path": out},
    }
    model = StreamJoinModel(before=600, after=600, grace=0, how="inner")

    def events(rows: list[dict], time: str) -> list[Event]:
        return [Event((r["ad.id"],), r[time], r) for r in rows]

    expected = model.refresh(events(shown, "shown at"), events(clicked, "clicked at"))
    run_spec(spec, spark=spark)
    later = [{"ad.id": "a", "clicked at": 2400, "click.no": "c3"}]
    append_rows(spark, right, later)
    expected += model.refresh([], events(later, "clicked at"))
    assert run_spec(spec, spark=spark)["mode"] == "incremental"

    want = sorted(
        (lrow["ad.id"], lrow["shown at"], lrow["imp ü"], r["clicked at"], r["click.no"], t)
        for _, lrow, r, t in expected
    )
    got = sorted(
        (r["ad.id"], r["shown at"], r["imp ü"], r["clicked at"], r["click.no"], r["event_time"])
        for r in read_rows(spark, out)
    )
    assert got == want and len(want) == 3


def test_self_join_with_odd_names(spark, warehouse: Path) -> None:
    txns = [{"acct id": "x", "t.ms": 100 * i, "atm ö": f"m{i}"} for i in range(3)]
    source = odd_table(spark, warehouse / "txns", "`acct id` string, `t.ms` long, `atm ö` string", txns)
    out = str(warehouse / "out")
    spec = {
        "kind": "self_join",
        "input": {"path": source, "key": ["acct id"], "time": "t.ms"},
        "window": {"before": 150, "after": 150},
        "columns": {"acct id": "l.`acct id`", "first atm": "l.`atm ö`", "second atm": "r.`atm ö`"},
        "output": {"path": out},
    }
    model = StreamJoinModel(before=150, after=150, grace=0, how="inner", same_table=True)
    expected = model.refresh([Event((r["acct id"],), r["t.ms"], r) for r in txns], [])
    run_spec(spec, spark=spark)
    later = [{"acct id": "x", "t.ms": 250, "atm ö": "m9"}]
    append_rows(spark, source, later)
    expected += model.refresh([Event(("x",), 250, later[0])], [])
    assert run_spec(spec, spark=spark)["mode"] == "incremental"
    want = sorted((lrow["acct id"], lrow["atm ö"], r["atm ö"], t) for _, lrow, r, t in expected)
    got = sorted(
        (r["acct id"], r["first atm"], r["second atm"], r["event_time"]) for r in read_rows(spark, out)
    )
    assert got == want


def test_windowed_table_join_with_odd_names(spark, warehouse: Path) -> None:
    now = {"svc name": "api", "err.count": 3}, {"svc name": "db", "err.count": 1}
    week = {"svc name": "api", "err wk": 5}
    left = odd_table(spark, warehouse / "now", "`svc name` string, `err.count` long", list(now))
    right = odd_table(spark, warehouse / "week", "`svc name` string, `err wk` long", [week])
    out = str(warehouse / "out")
    spec = {
        "kind": "windowed_join",
        "mode": "table",
        "left": {"path": left, "key": ["svc name"]},
        "right": {"path": right, "key": ["svc name"]},
        "how": "left",
        "output": {"path": out},
    }
    run_spec(spec, spark=spark)
    upsert(spark, right, [{"svc name": "db", "err wk": 7}], ["svc name"])
    assert run_spec(spec, spark=spark)["mode"] == "incremental"
    assert state(spark, out, ["svc name"]) == {
        ("api",): {"svc name": "api", "err.count": 3, "err wk": 5},
        ("db",): {"svc name": "db", "err.count": 1, "err wk": 7},
    }


def test_multiway_join_with_odd_names(spark, warehouse: Path) -> None:
    business = [{"biz.id": 1, "naïve name": "cafe"}, {"biz.id": 2, "naïve name": "bar"}]
    reviews = [{"review id": 10, "biz.id": 1, "a.b": "good"}, {"review id": 11, "biz.id": 2, "a.b": "ok"}]
    b = odd_table(spark, warehouse / "business", "`biz.id` long, `naïve name` string", business)
    r = odd_table(spark, warehouse / "reviews", "`review id` long, `biz.id` long, `a.b` string", reviews)
    out = str(warehouse / "out")
    spec = {
        "kind": "multiway_join",
        "inputs": [
            {"name": "business", "path": b, "key": ["biz.id"], "join_keys": ["biz.id"]},
            {"name": "review", "path": r, "key": ["review id"], "join_keys": ["biz.id"]},
        ],
        "output": {"path": out},
    }
    run_spec(spec, spark=spark)
    upsert(spark, r, [{"review id": 12, "biz.id": 1, "a.b": "great"}], ["review id"])
    delete_keys(spark, r, [11], ["review id"])
    assert run_spec(spec, spark=spark)["mode"] == "incremental"
    rows = read_rows(spark, out)
    assert sorted(tuple(row.values()) for row in rows) == [(1, "cafe", 10, "good"), (1, "cafe", 12, "great")]
    assert list(rows[0]) == ["biz.id", "naïve name", "review id", "a.b"], "the output holds its columns only"


def test_a_backtick_in_an_output_column_is_refused_and_renaming_it_joins(spark, warehouse: Path) -> None:
    orders = {i: {"order id": i, "product.id": 10, "na`me": f"o{i}"} for i in (1, 2)}
    left = odd_table(
        spark,
        warehouse / "orders",
        "`order id` long, `product.id` long, `na``me` string",
        list(orders.values()),
    )
    right = odd_table(spark, warehouse / "products", PRODUCTS, [product(10)])
    out = warehouse / "out"
    spec = {
        "kind": "foreign_key_join",
        "left": {"path": left, "key": ["order id"]},
        "right": {"path": right, "key": ["product.id"]},
        "foreign_key": ["product.id"],
        "output": {"path": str(out)},
    }
    with pytest.raises(SpecError, match=r"'na`me'.*backtick.*columns"):
        run_spec(spec, spark=spark)
    assert not out.exists()
    spec["columns"] = {"name": "l.`na``me`", "product name": "r.`p.name`"}
    run_spec(spec, spark=spark)
    assert state(spark, str(out), ["order id"]) == {
        (i,): {"order id": i, "name": f"o{i}", "product name": "n10"} for i in (1, 2)
    }


def _backtick_specs(spark, warehouse: Path) -> dict[str, dict]:
    """Each kind's default projection over one input with a value column named ``na`me``."""
    odd = odd_table(
        spark, warehouse / "odd", "`k` long, `t` long, `na``me` string", [{"k": 1, "t": 5, "na`me": "x"}]
    )
    plain = odd_table(
        spark, warehouse / "plain", "`k` long, `t2` long, `v` string", [{"k": 1, "t2": 6, "v": "y"}]
    )
    out = {"path": str(warehouse / "out")}
    return {
        "foreign_key_join": {
            "kind": "foreign_key_join",
            "left": {"path": odd, "key": ["k"]},
            "right": {"path": plain, "key": ["k"]},
            "foreign_key": ["k"],
            "output": out,
        },
        "global_table_bootstrap": {
            "kind": "global_table_bootstrap",
            "source": {"path": odd, "key": ["k"]},
            "output": out,
        },
        "stream_table_join": {
            "kind": "stream_table_join",
            "stream": {"path": odd},
            "table": {"path": plain, "key": ["k"]},
            "key_mapper": ["k"],
            "output": out,
        },
        "windowed_join_stream": {
            "kind": "windowed_join",
            "mode": "stream",
            "left": {"path": odd, "key": ["k"], "time": "t"},
            "right": {"path": plain, "key": ["k"], "time": "t2"},
            "window": {"before": 10, "after": 10},
            "output": out,
        },
        "windowed_join_table": {
            "kind": "windowed_join",
            "mode": "table",
            "left": {"path": odd, "key": ["k"]},
            "right": {"path": plain, "key": ["k"]},
            "output": out,
        },
        "multiway_join": {
            "kind": "multiway_join",
            "inputs": [
                {"name": "odd", "path": odd, "key": ["k"], "join_keys": ["k"]},
                {"name": "plain", "path": plain, "key": ["k"], "join_keys": ["k"]},
            ],
            "output": out,
        },
    }


@pytest.mark.parametrize(
    "kind",
    [
        "foreign_key_join",
        "global_table_bootstrap",
        "stream_table_join",
        "windowed_join_stream",
        "windowed_join_table",
        "multiway_join",
    ],
)
def test_every_kind_refuses_a_backtick_in_its_default_projection(spark, warehouse: Path, kind: str) -> None:
    spec = _backtick_specs(spark, warehouse)[kind]
    with pytest.raises(SpecError, match=r"column 'na`me' holds a backtick"):
        run_spec(spec, spark=spark)
    assert not (warehouse / "out").exists()

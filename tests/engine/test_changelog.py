"""Changelog sources: a CDC event log read as the latest event per key by the ordering column.

Covers out-of-order events (within a refresh and across refreshes), deletes and a late event that must
not revive a deleted key, an identical event delivered twice, configurable ops and payload columns,
and bad input. The expected state is computed here from the events, not by the engine."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import append_rows, create_table, read_rows

from airflow_provider_fkjoin.engine import InputDataError, SpecError, run_spec

CDC = "id long, op string, lsn long, name string, price double"


def ev(
    id_: int | None, op: str, lsn: int | None, name: str | None = None, price: float | None = None
) -> dict:
    return {"id": id_, "op": op, "lsn": lsn, "name": name, "price": price}


def expected(events: list[dict], delete: str = "d") -> dict:
    """The oracle: per key, the event with the greatest lsn; a delete removes the key."""
    latest: dict = {}
    for e in events:
        if e["id"] is None or e["lsn"] is None:
            continue
        if e["id"] not in latest or e["lsn"] > latest[e["id"]]["lsn"]:
            latest[e["id"]] = e
    return {k: (e["name"], e["price"]) for k, e in latest.items() if e["op"] != delete}


def table(spark, path: Path) -> dict:
    return {r["id"]: (r["name"], r["price"]) for r in read_rows(spark, path)}


def spec_for(src: Path, out: Path, **changelog) -> dict:
    return {
        "kind": "global_table_bootstrap",
        "source": {
            "path": str(src),
            "key": ["id"],
            "changelog": {"op_column": "op", "order_by": "lsn", **changelog},
        },
        "output": {"path": str(out)},
    }


def test_out_of_order_events_and_deletes_across_refreshes(spark, warehouse: Path) -> None:
    src, out = warehouse / "cdc", warehouse / "global"
    batch1 = [
        ev(1, "r", 1, "a", 1.0),  # snapshot read (log op)
        ev(2, "c", 2, "b", 2.0),
        ev(1, "u", 5, "a5", 1.5),
        ev(1, "u", 3, "late", 0.0),  # sorts before lsn 5: ignored
        ev(3, "c", 4, "c", 3.0),
        ev(3, "d", 6),
        ev(None, "c", 7, "nullkey"),  # dropped, counted
        ev(4, "c", None, "nullorder"),  # dropped, counted
        ev(5, "c", 8, "dup", 5.0),
        ev(5, "c", 8, "dup", 5.0),  # the same event delivered twice
    ]
    create_table(spark, src, batch1, CDC)
    spec = spec_for(src, out)
    first = run_spec(spec, spark=spark)
    assert first["mode"] == "full"
    assert table(spark, out) == expected(batch1) == {1: ("a5", 1.5), 2: ("b", 2.0), 5: ("dup", 5.0)}
    assert first["rows"]["null_keys_dropped"] == {"source": 1}
    assert first["rows"]["null_order_dropped"] == {"source": 1}
    # the output holds key + payload, plus the engine's per-key order (documented)
    assert [c for c in read_rows(spark, out)[0] if not c.startswith("_fkjoin_")] == ["id", "name", "price"]

    batch2 = [
        ev(3, "u", 5, "revived?"),  # key 3 was deleted at lsn 6: a late update must not revive it
        ev(2, "d", 9),
        ev(2, "u", 3, "old"),  # older than both
        ev(1, "u", 4, "late again"),  # older than the stored lsn 5
        ev(6, "c", 10, "f", 6.0),
        ev(5, "u", 11, "e", 5.5),
        ev(5, "u", 8, "dup", 5.0),  # tie on lsn 8 with a different op: sorts before lsn 11 anyway
    ]
    append_rows(spark, src, batch2)
    second = run_spec(spec, spark=spark)
    assert second["mode"] == "incremental" and second["inputs"]["source"]["from_version"] == 0
    assert second["rows"]["changes_read"] == {"source": len(batch2)}
    assert second["rows"]["out_of_order_ignored"] == 2  # keys 1 and 3
    assert table(spark, out) == expected(batch1 + batch2) == {1: ("a5", 1.5), 5: ("e", 5.5), 6: ("f", 6.0)}

    batch3 = [ev(2, "c", 12, "back", 2.5), ev(6, "c", 10, "f", 6.0)]  # re-create after delete; a redelivery
    append_rows(spark, src, batch3)
    third = run_spec(spec, spark=spark)
    assert third["rows"]["inserted"] == 1 and third["rows"]["updated"] == 0
    assert table(spark, out) == expected(batch1 + batch2 + batch3)

    # a rewritten log (events deleted) cannot be applied incrementally: full rebuild, said in the reason
    from delta.tables import DeltaTable

    DeltaTable.forPath(spark, str(src)).delete("lsn < 3")
    rebuilt = run_spec(spec, spark=spark)
    assert rebuilt["mode"] == "full" and "not append-only" in rebuilt["reason"]
    remaining = [e for e in batch1 + batch2 + batch3 if e["lsn"] is None or e["lsn"] >= 3]
    assert table(spark, out) == expected(remaining)


def test_custom_ops_columns_and_bad_input(spark, warehouse: Path) -> None:
    src = warehouse / "cdc"
    create_table(
        spark,
        src,
        [
            ev(1, "INSERT", 1, "a", 1.0),
            ev(1, "UPDATE", 2, "b", 2.0),
            ev(2, "INSERT", 1, "x", 9.0),
            ev(2, "DELETE", 3),
        ],
        CDC,
    )
    ops = {"create": "INSERT", "update": "UPDATE", "delete": "DELETE", "log": "SNAPSHOT"}
    result = run_spec(spec_for(src, warehouse / "g1", ops=ops, columns=["name"]), spark=spark)
    assert result["rows"]["inserted"] == 1
    rows = read_rows(spark, warehouse / "g1")
    assert [{k: v for k, v in r.items() if not k.startswith("_fkjoin_")} for r in rows] == [
        {"id": 1, "name": "b"}
    ]

    with pytest.raises(
        InputDataError, match=r"holds op values \['DELETE', 'INSERT', 'UPDATE'\].*changelog.ops"
    ):
        run_spec(spec_for(src, warehouse / "g2"), spark=spark)
    assert not (warehouse / "g2").exists()
    with pytest.raises(
        SpecError, match=r"source.changelog.op_column: column 'kind' is not in changelog table"
    ):
        run_spec(spec_for(src, warehouse / "g3", op_column="kind"), spark=spark)
    with pytest.raises(SpecError, match=r"source.changelog.order_by\[0\]: column 'offset'"):
        run_spec(spec_for(src, warehouse / "g3", order_by=["offset"]), spark=spark)
    with pytest.raises(SpecError, match="cannot also be the op or order column"):
        run_spec(spec_for(src, warehouse / "g3", order_by=["id"]), spark=spark)

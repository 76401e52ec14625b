"""Foreign-key joins whose inputs are changelog sources (CDC event logs), left, right or both.

A changelog input is the table its events describe (latest event per key by the ordering column; a
delete removes the key; a late event is ignored). The oracle here reduces the events in Python and joins
with ``expected_fk_join``; the engine's output after every refresh must equal it, and each refresh's
output change feed must hold one net change per changed key.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import (
    append_rows,
    assert_clean_changes,
    create_table,
    expected_fk_join,
    read_rows,
    sorted_rows,
    table_version,
    upsert,
)

from airflow_provider_fkjoin.engine import InputDataError, SpecError, run_spec

ORDER_EVENTS = "order_id long, op string, lsn long, customer_id long, amount double"
CUSTOMER_EVENTS = "customer_id long, op string, lsn long, name string"


def order(order_id, op, lsn, customer_id=None, amount=None) -> dict:
    return {"order_id": order_id, "op": op, "lsn": lsn, "customer_id": customer_id, "amount": amount}


def customer(customer_id, op, lsn, name=None) -> dict:
    return {"customer_id": customer_id, "op": op, "lsn": lsn, "name": name}


def described(events: list[dict], key: str) -> list[dict]:
    """The oracle of a changelog: per key the event with the greatest lsn, deletes removed, op/lsn dropped."""
    latest: dict = {}
    for event in events:
        if event[key] is None or event["lsn"] is None:
            continue
        if event[key] not in latest or event["lsn"] > latest[event[key]]["lsn"]:
            latest[event[key]] = event
    return [
        {name: value for name, value in event.items() if name not in ("op", "lsn")}
        for event in latest.values()
        if event["op"] != "d"
    ]


def changelog_ref(path: Path, key: str) -> dict:
    return {"path": str(path), "key": [key], "changelog": {"op_column": "op", "order_by": "lsn"}}


def output_rows(spark, path: Path) -> list[dict]:
    return sorted_rows(read_rows(spark, str(path)), ["order_id"])


#: Both plans of an incremental refresh: joining what changed, or recomputing and comparing.
STRATEGIES = ["incremental", "recompute"]


def assert_plan(result: dict, strategy: str) -> None:
    """The refresh ran the plan the spec forced (no fallback to the other)."""
    assert result["strategy"]["chosen"] == strategy, result["strategy"]
    assert "fallback" not in result["strategy"], result["strategy"]


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("how", ["inner", "left"])
def test_changelog_left_joined_to_table_right(spark, warehouse: Path, how: str, strategy: str) -> None:
    orders, customers, out = warehouse / "orders_cdc", warehouse / "customers", warehouse / "out"
    order_events = [
        order(1, "c", 1, 10, 5.0),
        order(2, "c", 2, 20, 7.0),
        order(3, "c", 3, None, 1.0),  # null FK
        order(1, "u", 6, 20, 5.5),
        order(1, "u", 4, 30, 0.0),  # late: sorts before lsn 6, ignored
        order(None, "c", 5, 10, 9.0),  # null key: dropped
    ]
    customer_rows = [
        {"customer_id": 10, "name": "ann"},
        {"customer_id": 20, "name": "bob"},
        {"customer_id": 30, "name": "cyd"},
    ]
    create_table(spark, str(orders), order_events, ORDER_EVENTS)
    create_table(spark, str(customers), customer_rows, "customer_id long, name string")
    spec = {
        "kind": "foreign_key_join",
        "left": changelog_ref(orders, "order_id"),
        "right": {"path": str(customers), "key": ["customer_id"]},
        "foreign_key": ["customer_id"],
        "how": how,
        "output": {"path": str(out)},
        "refresh_strategy": strategy,
    }

    def check(result: dict) -> None:
        want = expected_fk_join(
            described(order_events, "order_id"),
            customer_rows,
            ["order_id"],
            ["customer_id"],
            ["customer_id"],
            how,
            left_columns=["order_id", "customer_id", "amount"],
            right_columns=["customer_id", "name"],
        )
        assert output_rows(spark, out) == sorted_rows(want, ["order_id"]), result

    first = run_spec(spec, spark=spark)
    assert first["mode"] == "full"
    assert first["rows"]["null_keys_dropped"]["left"] == 1
    assert any("changelog source" in w for w in first["warnings"])
    check(first)
    before = table_version(spark, str(out))

    batch = [
        order(2, "u", 10, 30, 7.0),  # FK change
        order(3, "u", 11, 10, 1.0),  # null FK gets a value
        order(1, "d", 12),  # delete
        order(1, "u", 9, 10, 1.0),  # late for a deleted key: must not revive it
        order(4, "c", 13, 40, 2.0),  # points at no customer yet
        order(2, "u", 8, 10, 0.0),  # late for key 2: ignored
    ]
    order_events += batch
    append_rows(spark, str(orders), batch)
    customer_rows.append({"customer_id": 40, "name": "dee"})
    upsert(spark, str(customers), [customer_rows[-1]], ["customer_id"])
    second = run_spec(spec, spark=spark)
    assert second["mode"] == "incremental", second
    assert_plan(second, strategy)
    check(second)
    assert_clean_changes(spark, str(out), ["order_id"], before, second["output"]["version"])

    only_late = [order(2, "u", 1, 10, 0.0)]
    order_events += only_late
    append_rows(spark, str(orders), only_late)
    third = run_spec(spec, spark=spark)
    assert third["mode"] == "incremental"
    assert third["rows"]["inserted"] == third["rows"]["updated"] == third["rows"]["deleted"] == 0
    check(third)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_both_sides_changelogs(spark, warehouse: Path, strategy: str) -> None:
    orders, customers, out = warehouse / "orders_cdc", warehouse / "customers_cdc", warehouse / "out"
    order_events = [order(1, "c", 1, 10, 5.0), order(2, "c", 2, 20, 7.0), order(3, "c", 3, 20, 8.0)]
    customer_events = [customer(10, "r", 1, "ann"), customer(20, "r", 2, "bob")]
    create_table(spark, str(orders), order_events, ORDER_EVENTS)
    create_table(spark, str(customers), customer_events, CUSTOMER_EVENTS)
    spec = {
        "kind": "foreign_key_join",
        "left": changelog_ref(orders, "order_id"),
        "right": changelog_ref(customers, "customer_id"),
        "foreign_key": ["customer_id"],
        "how": "inner",
        "columns": {"amount": "l.amount", "customer": "r.name"},
        "output": {"path": str(out)},
        "refresh_strategy": strategy,
    }

    def check() -> None:
        want = expected_fk_join(
            described(order_events, "order_id"),
            described(customer_events, "customer_id"),
            ["order_id"],
            ["customer_id"],
            ["customer_id"],
            "inner",
            {"amount": "l.amount", "customer": "r.name"},
        )
        assert output_rows(spark, out) == sorted_rows(want, ["order_id"])

    assert run_spec(spec, spark=spark)["mode"] == "full"
    check()
    before = table_version(spark, str(out))
    right_batch = [
        customer(20, "u", 5, "bobby"),  # fans out to orders 2 and 3
        customer(10, "d", 6),  # retracts order 1 (inner)
        customer(20, "u", 4, "late"),  # late: ignored
    ]
    customer_events += right_batch
    append_rows(spark, str(customers), right_batch)
    result = run_spec(spec, spark=spark)
    assert result["mode"] == "incremental"
    assert_plan(result, strategy)
    assert (result["rows"]["updated"], result["rows"]["deleted"]) == (2, 1), result["rows"]
    check()
    assert_clean_changes(spark, str(out), ["order_id"], before, result["output"]["version"])

    revive = [customer(10, "c", 7, "ann2"), order(9, "c", 8, 10, 1.0)]
    customer_events.append(revive[0])
    order_events.append(revive[1])
    append_rows(spark, str(customers), [revive[0]])
    append_rows(spark, str(orders), [revive[1]])
    assert run_spec(spec, spark=spark)["mode"] == "incremental"
    check()


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_unknown_op_in_new_events_fails_before_writing(spark, warehouse: Path, strategy: str) -> None:
    orders, customers, out = warehouse / "orders_cdc", warehouse / "customers", warehouse / "out"
    create_table(spark, str(orders), [order(1, "c", 1, 10, 5.0)], ORDER_EVENTS)
    create_table(spark, str(customers), [{"customer_id": 10, "name": "ann"}], "customer_id long, name string")
    spec = {
        "kind": "foreign_key_join",
        "left": changelog_ref(orders, "order_id"),
        "right": {"path": str(customers), "key": ["customer_id"]},
        "foreign_key": ["customer_id"],
        "output": {"path": str(out)},
        "refresh_strategy": strategy,
    }
    run_spec(spec, spark=spark)
    version = table_version(spark, str(out))
    append_rows(spark, str(orders), [order(2, "INSERT", 2, 10, 1.0)])
    with pytest.raises(InputDataError, match=r"'op' holds op values \['INSERT'\]"):
        run_spec(spec, spark=spark)
    assert table_version(spark, str(out)) == version


def test_changelog_column_errors_name_the_field(spark, warehouse: Path) -> None:
    orders, customers = warehouse / "orders_cdc", warehouse / "customers"
    create_table(spark, str(orders), [order(1, "c", 1, 10, 5.0)], ORDER_EVENTS)
    create_table(spark, str(customers), [{"customer_id": 10, "name": "ann"}], "customer_id long, name string")
    spec = {
        "kind": "foreign_key_join",
        "left": {**changelog_ref(orders, "order_id"), "changelog": {"op_column": "kind", "order_by": "lsn"}},
        "right": {"path": str(customers), "key": ["customer_id"]},
        "foreign_key": ["customer_id"],
        "output": {"path": str(warehouse / "out")},
    }
    with pytest.raises(SpecError, match=r"left.changelog.op_column: column 'kind' is not in"):
        run_spec(spec, spark=spark)
    assert not (warehouse / "out").exists()

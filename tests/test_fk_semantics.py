"""The foreign-key join against the reference table of observable behaviour (kafka_join_semantics.md §2.4).

Each test builds tiny ``orders -> customers`` tables, refreshes, applies one event and refreshes again. After
every refresh it checks the exact output rows (hand-written), the oracle at the result's input versions, and
the output's change data feed for that refresh (one net change per changed key, nothing else).

The port is a *table* (DESIGN.md §4): where Kafka emits a record, the output row changes; where Kafka emits a
tombstone for a key that never produced a result, the output has no row and nothing is written.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from helpers import (
    ColumnSpec,
    FkSpec,
    Row,
    append_rows,
    assert_clean_changes,
    assert_output_matches_oracle,
    assert_same_rows,
    create_table,
    delete_keys,
    key_of,
    read_changes,
    read_rows,
    table_version,
    upsert,
)
from pyspark.sql import SparkSession

from airflow_provider_fkjoin.engine import SpecError, run_spec
from airflow_provider_fkjoin.engine.errors import InputDataError

ORDERS = "order_id INT, customer_id INT, amount INT"
CUSTOMERS = "customer_id INT, name STRING, tier STRING"

ANN = {"customer_id": 10, "name": "ann", "tier": "gold"}
BOB = {"customer_id": 20, "name": "bob", "tier": "silver"}
CY = {"customer_id": 30, "name": "cy", "tier": "bronze"}
CUSTOMERS_BY_ID = {c["customer_id"]: c for c in (ANN, BOB, CY)}


def order(order_id: int, customer_id: int | None, amount: int = 100) -> Row:
    return {"order_id": order_id, "customer_id": customer_id, "amount": amount}


def joined(order_row: Row, customer: Row | None) -> Row:
    """One default-projection output row: every order column, then the customer's non-key columns."""
    return {
        **order_row,
        "name": customer["name"] if customer else None,
        "tier": customer["tier"] if customer else None,
    }


def pick(how: str, *, inner: list[Row], left: list[Row]) -> list[Row]:
    return inner if how == "inner" else left


@pytest.fixture(params=["inner", "left"])
def how(request: pytest.FixtureRequest) -> str:
    return request.param


class Join:
    """Two input tables, a spec, and a ``refresh`` that runs the engine and checks everything it can."""

    def __init__(
        self,
        spark: SparkSession,
        warehouse: Path,
        how: str,
        left_rows: Sequence[Row],
        right_rows: Sequence[Row],
        *,
        left_schema: str = ORDERS,
        right_schema: str = CUSTOMERS,
        left_key: Sequence[str] = ("order_id",),
        right_key: Sequence[str] = ("customer_id",),
        foreign_key: Any = ("customer_id",),
        columns: Mapping[str, str] | None = None,
        fk_oracle: FkSpec | None = None,
        columns_oracle: Mapping[str, ColumnSpec] | None = None,
    ) -> None:
        self.spark = spark
        self.left_path = str(warehouse / "left")
        self.right_path = str(warehouse / "right")
        self.out_path = str(warehouse / "out")
        self.left_key = list(left_key)
        self.right_key = list(right_key)
        create_table(spark, self.left_path, left_rows, left_schema)
        create_table(spark, self.right_path, right_rows, right_schema)
        self.spec: dict[str, Any] = {
            "kind": "foreign_key_join",
            "left": {"path": self.left_path, "key": self.left_key},
            "right": {"path": self.right_path, "key": self.right_key},
            "foreign_key": list(foreign_key) if isinstance(foreign_key, list | tuple) else foreign_key,
            "how": how,
            "output": {"path": self.out_path},
        }
        if columns is not None:
            self.spec["columns"] = dict(columns)
        self.fk_oracle = fk_oracle
        self.columns_oracle = columns_oracle
        self.last: dict[str, Any] | None = None
        self.changed: set[tuple[Any, ...]] = set()

    # input changes (each one Delta commit)
    def left_upsert(self, *rows: Row) -> None:
        upsert(self.spark, self.left_path, rows, self.left_key)

    def left_delete(self, *keys: Any) -> None:
        delete_keys(self.spark, self.left_path, keys, self.left_key)

    def right_upsert(self, *rows: Row) -> None:
        upsert(self.spark, self.right_path, rows, self.right_key)

    def right_delete(self, *keys: Any) -> None:
        delete_keys(self.spark, self.right_path, keys, self.right_key)

    def output_version(self) -> int:
        return table_version(self.spark, self.out_path)

    def refresh(
        self,
        expected: list[Row] | None = None,
        *,
        changed: set[Any] | None = None,
        mode: str | None = None,
    ) -> dict[str, Any]:
        """Run the engine once and check the result, the output rows and the output's change feed.

        ``changed``: the left keys (scalars for a one-column key) whose output row must have changed.
        """
        left_hw = table_version(self.spark, self.left_path)
        right_hw = table_version(self.spark, self.right_path)
        previous = self.last
        result = run_spec(self.spec, spark=self.spark)

        want_mode = mode or ("full" if previous is None else "incremental")
        assert result["mode"] == want_mode, result
        if want_mode == "full" and previous is None:
            assert "first" in result["reason"].lower(), result["reason"]
        assert result["kind"] == "foreign_key_join"
        assert result["inputs"]["left"]["to_version"] == left_hw
        assert result["inputs"]["right"]["to_version"] == right_hw
        version = result["output"]["version"]
        assert version == self.output_version(), "the result must name the output's latest version"

        prev_version = previous["output"]["version"] if previous else None
        if want_mode == "noop":
            assert version == prev_version, "a noop refresh must not commit"
        elif want_mode == "incremental":
            assert prev_version is not None
            assert version == prev_version + 1, "an incremental refresh is exactly one output commit"

        rows = assert_output_matches_oracle(
            self.spark, self.spec, result, fk=self.fk_oracle, columns=self.columns_oracle
        )
        if expected is not None:
            assert_same_rows(rows, expected, self.left_key)
        counts = assert_clean_changes(
            self.spark, self.out_path, self.left_key, prev_version, version, after_rows=rows
        )
        for kind in ("inserted", "updated", "deleted"):
            assert result["rows"][kind] == counts[kind], (kind, result["rows"], counts)

        start = 0 if prev_version is None else prev_version + 1
        feed = read_changes(self.spark, self.out_path, start, version) if version >= start else []
        self.changed = {key_of(c, self.left_key) for c in feed}
        if changed is not None:
            want = {k if isinstance(k, tuple) else (k,) for k in changed}
            assert self.changed == want, f"changed keys {self.changed}, expected {want}"
        self.last = result
        return result


# ------------------------------------------------------------------------------------- §2.4, row by row


def test_left_insert_right_exists(spark: SparkSession, warehouse: Path, how: str) -> None:
    j = Join(spark, warehouse, how, [order(1, 10)], [ANN, BOB])
    j.refresh([joined(order(1, 10), ANN)])
    j.left_upsert(order(2, 20, 7))
    j.refresh([joined(order(1, 10), ANN), joined(order(2, 20, 7), BOB)], changed={2})


def test_left_insert_right_missing(spark: SparkSession, warehouse: Path, how: str) -> None:
    j = Join(spark, warehouse, how, [order(1, 10)], [ANN])
    j.refresh([joined(order(1, 10), ANN)])
    j.left_upsert(order(2, 99))
    j.refresh(
        pick(
            how,
            inner=[joined(order(1, 10), ANN)],
            left=[joined(order(1, 10), ANN), joined(order(2, 99), None)],
        ),
        changed=pick(how, inner=set(), left={2}),
    )


def test_left_insert_fk_null(spark: SparkSession, warehouse: Path, how: str) -> None:
    j = Join(spark, warehouse, how, [order(1, 10)], [ANN])
    j.refresh([joined(order(1, 10), ANN)])
    j.left_upsert(order(2, None))
    j.refresh(
        pick(
            how,
            inner=[joined(order(1, 10), ANN)],
            left=[joined(order(1, 10), ANN), joined(order(2, None), None)],
        ),
        changed=pick(how, inner=set(), left={2}),
    )


def test_left_update_same_fk_right_exists(spark: SparkSession, warehouse: Path, how: str) -> None:
    j = Join(spark, warehouse, how, [order(1, 10), order(2, 10)], [ANN])
    j.refresh([joined(order(1, 10), ANN), joined(order(2, 10), ANN)])
    j.left_upsert(order(1, 10, 555))
    j.refresh([joined(order(1, 10, 555), ANN), joined(order(2, 10), ANN)], changed={1})


def test_left_update_same_fk_right_missing(spark: SparkSession, warehouse: Path, how: str) -> None:
    j = Join(spark, warehouse, how, [order(1, 99)], [ANN])
    j.refresh(pick(how, inner=[], left=[joined(order(1, 99), None)]))
    j.left_upsert(order(1, 99, 555))
    # trunk: the inner join emits nothing (4.0 emitted a useless tombstone; trap 2)
    j.refresh(
        pick(how, inner=[], left=[joined(order(1, 99, 555), None)]), changed=pick(how, inner=set(), left={1})
    )


def test_left_fk_change_to_existing(spark: SparkSession, warehouse: Path, how: str) -> None:
    j = Join(spark, warehouse, how, [order(1, 10)], [ANN, BOB])
    j.refresh([joined(order(1, 10), ANN)])
    j.left_upsert(order(1, 20))
    # one record, J(l', rB): never J(l', null) first (trap 1)
    j.refresh([joined(order(1, 20), BOB)], changed={1})


@pytest.mark.parametrize("old_fk_matched", [True, False], ids=["A-matched", "A-missing"])
def test_left_fk_change_to_missing(
    spark: SparkSession, warehouse: Path, how: str, old_fk_matched: bool
) -> None:
    old_fk = 10 if old_fk_matched else 98
    j = Join(spark, warehouse, how, [order(1, old_fk), order(2, 10)], [ANN])
    before_1 = joined(order(1, old_fk), ANN if old_fk_matched else None)
    j.refresh(
        pick(
            how,
            inner=[before_1, joined(order(2, 10), ANN)] if old_fk_matched else [joined(order(2, 10), ANN)],
            left=[before_1, joined(order(2, 10), ANN)],
        )
    )
    j.left_upsert(order(1, 99))
    # inner: a retraction, written only if the key is in the output; left: J(l', null)
    j.refresh(
        pick(
            how,
            inner=[joined(order(2, 10), ANN)],
            left=[joined(order(1, 99), None), joined(order(2, 10), ANN)],
        ),
        changed=pick(how, inner={1} if old_fk_matched else set(), left={1}),
    )


def test_left_fk_change_to_null(spark: SparkSession, warehouse: Path, how: str) -> None:
    j = Join(spark, warehouse, how, [order(1, 10), order(2, 10)], [ANN])
    j.refresh([joined(order(1, 10), ANN), joined(order(2, 10), ANN)])
    j.left_upsert(order(1, None))
    # trunk: the inner join retracts (4.0 kept the stale result; trap 3)
    j.refresh(
        pick(
            how,
            inner=[joined(order(2, 10), ANN)],
            left=[joined(order(1, None), None), joined(order(2, 10), ANN)],
        ),
        changed={1},
    )
    # and the old subscription is gone: a change to customer 10 no longer touches order 1
    j.right_upsert({**ANN, "name": "ann2"})
    ann2 = {**ANN, "name": "ann2"}
    j.refresh(
        pick(
            how,
            inner=[joined(order(2, 10), ann2)],
            left=[joined(order(1, None), None), joined(order(2, 10), ann2)],
        ),
        changed={2},
    )


@pytest.mark.parametrize("new_fk_exists", [True, False], ids=["B-exists", "B-missing"])
def test_left_fk_change_from_null(
    spark: SparkSession, warehouse: Path, how: str, new_fk_exists: bool
) -> None:
    j = Join(spark, warehouse, how, [order(1, None)], [ANN])
    j.refresh(pick(how, inner=[], left=[joined(order(1, None), None)]))
    new_fk = 10 if new_fk_exists else 99
    j.left_upsert(order(1, new_fk))
    # trunk: null -> B joins (4.0 ignored the update; trap 3)
    after = joined(order(1, new_fk), ANN if new_fk_exists else None)
    j.refresh(
        pick(how, inner=[after] if new_fk_exists else [], left=[after]),
        changed=pick(how, inner={1} if new_fk_exists else set(), left={1}),
    )


@pytest.mark.parametrize("matched", [True, False], ids=["joined", "never-joined"])
def test_left_delete_existing_row(spark: SparkSession, warehouse: Path, how: str, matched: bool) -> None:
    fk = 10 if matched else 99
    j = Join(spark, warehouse, how, [order(1, fk), order(2, 10)], [ANN])
    row_1 = joined(order(1, fk), ANN if matched else None)
    j.refresh(
        pick(
            how,
            inner=[row_1, joined(order(2, 10), ANN)] if matched else [joined(order(2, 10), ANN)],
            left=[row_1, joined(order(2, 10), ANN)],
        )
    )
    j.left_delete(1)
    # Kafka's inner join emits a tombstone even for a row that never joined; the table port writes a delete
    # only for a key the output holds (§2.6 port guidance), and exactly one (trap 1)
    j.refresh([joined(order(2, 10), ANN)], changed=pick(how, inner={1} if matched else set(), left={1}))


@pytest.mark.parametrize("history", ["never-existed", "already-deleted"])
def test_left_delete_of_absent_key(spark: SparkSession, warehouse: Path, how: str, history: str) -> None:
    j = Join(spark, warehouse, how, [order(1, 10), order(2, 10)], [ANN])
    j.refresh([joined(order(1, 10), ANN), joined(order(2, 10), ANN)])
    if history == "already-deleted":
        j.left_delete(2)
        j.refresh([joined(order(1, 10), ANN)], changed={2})
        j.left_delete(2)
    else:
        j.left_delete(77)
    expected = (
        [joined(order(1, 10), ANN)]
        if history == "already-deleted"
        else [joined(order(1, 10), ANN), joined(order(2, 10), ANN)]
    )
    j.right_upsert(CY)  # a change elsewhere, so the refresh has new input versions
    j.refresh(expected, changed=set())


@pytest.mark.parametrize("op", ["insert", "update"])
def test_right_change_with_subscribers(spark: SparkSession, warehouse: Path, how: str, op: str) -> None:
    right = [ANN, BOB] if op == "update" else [BOB]
    j = Join(spark, warehouse, how, [order(3, 10), order(1, 10), order(2, 20)], right)
    if op == "update":
        j.refresh([joined(order(1, 10), ANN), joined(order(2, 20), BOB), joined(order(3, 10), ANN)])
        new_ann = {**ANN, "name": "ann2", "tier": "platinum"}
    else:
        j.refresh(
            pick(
                how,
                inner=[joined(order(2, 20), BOB)],
                left=[joined(order(1, 10), None), joined(order(2, 20), BOB), joined(order(3, 10), None)],
            )
        )
        new_ann = ANN
    j.right_upsert(new_ann)
    # fan-out to every current subscriber, and only to them
    j.refresh(
        [joined(order(1, 10), new_ann), joined(order(2, 20), BOB), joined(order(3, 10), new_ann)],
        changed={1, 3},
    )


def test_right_delete_with_subscribers(spark: SparkSession, warehouse: Path, how: str) -> None:
    j = Join(spark, warehouse, how, [order(1, 10), order(2, 10), order(3, 20)], [ANN, BOB])
    j.refresh([joined(order(1, 10), ANN), joined(order(2, 10), ANN), joined(order(3, 20), BOB)])
    j.right_delete(10)
    j.refresh(
        pick(
            how,
            inner=[joined(order(3, 20), BOB)],
            left=[joined(order(1, 10), None), joined(order(2, 10), None), joined(order(3, 20), BOB)],
        ),
        changed={1, 2},
    )


@pytest.mark.parametrize("op", ["insert", "update", "delete"])
def test_right_change_without_subscribers(spark: SparkSession, warehouse: Path, how: str, op: str) -> None:
    j = Join(spark, warehouse, how, [order(1, 10), order(2, 99)], [ANN, BOB])
    expected = pick(
        how, inner=[joined(order(1, 10), ANN)], left=[joined(order(1, 10), ANN), joined(order(2, 99), None)]
    )
    j.refresh(expected)
    if op == "insert":
        j.right_upsert(CY)
    elif op == "update":
        j.right_upsert({**BOB, "name": "bob2"})
    else:
        j.right_delete(20)
    j.refresh(expected, changed=set())


def test_right_tombstone_for_never_existing_key(spark: SparkSession, warehouse: Path, how: str) -> None:
    j = Join(spark, warehouse, how, [order(1, 99), order(2, 10)], [ANN])
    expected = pick(
        how, inner=[joined(order(2, 10), ANN)], left=[joined(order(1, 99), None), joined(order(2, 10), ANN)]
    )
    j.refresh(expected)
    j.right_delete(99)
    j.left_upsert(order(3, 10))  # something new, so this is not a noop
    # Kafka re-emits J(l, null) / a tombstone; the table's value for order 1 is unchanged: nothing written
    j.refresh([*expected, joined(order(3, 10), ANN)], changed={3})


def test_old_right_row_changes_after_fk_moved_away(spark: SparkSession, warehouse: Path, how: str) -> None:
    j = Join(spark, warehouse, how, [order(1, 10), order(2, 10)], [ANN, BOB])
    j.refresh([joined(order(1, 10), ANN), joined(order(2, 10), ANN)])
    j.left_upsert(order(1, 20))
    j.refresh([joined(order(1, 20), BOB), joined(order(2, 10), ANN)], changed={1})
    ann2 = {**ANN, "tier": "lead"}
    j.right_upsert(ann2)
    j.refresh([joined(order(1, 20), BOB), joined(order(2, 10), ann2)], changed={2})
    j.right_delete(10)
    j.refresh(
        pick(
            how,
            inner=[joined(order(1, 20), BOB)],
            left=[joined(order(1, 20), BOB), joined(order(2, 10), None)],
        ),
        changed={2},
    )


# ----------------------------------------------------------------------------------- beyond the table


def test_fk_expression(spark: SparkSession, warehouse: Path, how: str) -> None:
    """FK computed by Spark SQL over left columns; keys compare by exact value after the expression."""
    left = [
        {"order_id": 1, "cust_code": "C10", "amount": 1},
        {"order_id": 2, "cust_code": "c20", "amount": 2},
        {"order_id": 3, "cust_code": None, "amount": 3},
    ]
    right = [{"code": "c10", "name": "ann"}, {"code": "c20", "name": "bob"}, {"code": "C30", "name": "upper"}]
    j = Join(
        spark,
        warehouse,
        how,
        left,
        right,
        left_schema="order_id INT, cust_code STRING, amount INT",
        right_schema="code STRING, name STRING",
        right_key=("code",),
        foreign_key={"expr": "lower(cust_code)"},
        fk_oracle=lambda row: None if row["cust_code"] is None else row["cust_code"].lower(),
    )

    def out(order_id: int, code: str | None, amount: int, name: str | None) -> Row:
        return {"order_id": order_id, "cust_code": code, "amount": amount, "name": name}

    j.refresh(
        pick(
            how,
            inner=[out(1, "C10", 1, "ann"), out(2, "c20", 2, "bob")],
            left=[out(1, "C10", 1, "ann"), out(2, "c20", 2, "bob"), out(3, None, 3, None)],
        )
    )
    # same FK after the expression but a different left value: rewritten; C30 never matches lower("C30")
    j.left_upsert(
        {"order_id": 1, "cust_code": "c10", "amount": 1}, {"order_id": 3, "cust_code": "C30", "amount": 3}
    )
    j.right_upsert({"code": "c10", "name": "ann2"})
    j.refresh(
        pick(
            how,
            inner=[out(1, "c10", 1, "ann2"), out(2, "c20", 2, "bob")],
            left=[out(1, "c10", 1, "ann2"), out(2, "c20", 2, "bob"), out(3, "C30", 3, None)],
        ),
        changed=pick(how, inner={1}, left={1, 3}),
    )
    j.right_upsert({"code": "c30", "name": "cy"})
    j.refresh(
        [out(1, "c10", 1, "ann2"), out(2, "c20", 2, "bob"), out(3, "C30", 3, "cy")],
        changed={3},
    )


def test_composite_fk(spark: SparkSession, warehouse: Path, how: str) -> None:
    """A two-column FK matched in order to a two-column right key named differently."""
    left = [
        {"order_id": 1, "cust_region": "eu", "cust_no": 1, "amount": 10},
        {"order_id": 2, "cust_region": "us", "cust_no": 1, "amount": 20},
        {"order_id": 3, "cust_region": "eu", "cust_no": 2, "amount": 30},
    ]
    right = [
        {"region": "eu", "no": 1, "name": "eu-one"},
        {"region": "us", "no": 1, "name": "us-one"},
        {"region": "us", "no": 2, "name": "us-two"},
    ]
    j = Join(
        spark,
        warehouse,
        how,
        left,
        right,
        left_schema="order_id INT, cust_region STRING, cust_no INT, amount INT",
        right_schema="region STRING, no INT, name STRING",
        right_key=("region", "no"),
        foreign_key=["cust_region", "cust_no"],
    )

    def out(order_id: int, region: str, no: int, amount: int, name: str | None) -> Row:
        return {"order_id": order_id, "cust_region": region, "cust_no": no, "amount": amount, "name": name}

    j.refresh(
        pick(
            how,
            inner=[out(1, "eu", 1, 10, "eu-one"), out(2, "us", 1, 20, "us-one")],
            left=[out(1, "eu", 1, 10, "eu-one"), out(2, "us", 1, 20, "us-one"), out(3, "eu", 2, 30, None)],
        )
    )
    j.right_upsert({"region": "us", "no": 1, "name": "us-ONE"}, {"region": "eu", "no": 2, "name": "eu-two"})
    j.refresh(
        [out(1, "eu", 1, 10, "eu-one"), out(2, "us", 1, 20, "us-ONE"), out(3, "eu", 2, 30, "eu-two")],
        changed=pick(how, inner={2, 3}, left={2, 3}),
    )
    j.left_upsert({"order_id": 1, "cust_region": "us", "cust_no": 2, "amount": 10})
    j.right_delete(("eu", 2))
    j.refresh(
        pick(
            how,
            inner=[out(1, "us", 2, 10, "us-two"), out(2, "us", 1, 20, "us-ONE")],
            left=[out(1, "us", 2, 10, "us-two"), out(2, "us", 1, 20, "us-ONE"), out(3, "eu", 2, 30, None)],
        ),
        changed={1, 3},
    )


def test_projection_columns(spark: SparkSession, warehouse: Path, how: str) -> None:
    """``columns`` projects Spark SQL over l and r; a change to an unprojected column rewrites nothing."""
    columns = {"customer_name": "r.name", "double_amount": "l.amount * 2"}
    j = Join(
        spark,
        warehouse,
        how,
        [order(1, 10, 5), order(2, 99, 6)],
        [ANN, BOB],
        columns=columns,
        columns_oracle={
            "customer_name": "r.name",
            "double_amount": lambda left, _right: None if left["amount"] is None else left["amount"] * 2,
        },
    )

    def out(order_id: int, name: str | None, double: int) -> Row:
        return {"order_id": order_id, "customer_name": name, "double_amount": double}

    j.refresh(pick(how, inner=[out(1, "ann", 10)], left=[out(1, "ann", 10), out(2, None, 12)]))
    j.right_upsert({**ANN, "tier": "changed"})  # not projected
    j.left_upsert(order(2, 99, 6))  # identical rewrite of a left row
    j.refresh(pick(how, inner=[out(1, "ann", 10)], left=[out(1, "ann", 10), out(2, None, 12)]), changed=set())
    j.left_upsert(order(1, 20, 5))  # FK change: name changes, amount does not
    j.refresh(pick(how, inner=[out(1, "bob", 10)], left=[out(1, "bob", 10), out(2, None, 12)]), changed={1})
    j.left_upsert(order(1, 10, 5))
    j.right_upsert({**BOB, "customer_id": 10, "tier": "x"})  # same name "bob" under key 10
    j.refresh(pick(how, inner=[out(1, "bob", 10)], left=[out(1, "bob", 10), out(2, None, 12)]), changed=set())


def test_reinsert_after_delete(spark: SparkSession, warehouse: Path, how: str) -> None:
    j = Join(spark, warehouse, how, [order(1, 10), order(2, 10)], [ANN, BOB])
    j.refresh([joined(order(1, 10), ANN), joined(order(2, 10), ANN)])
    j.left_delete(1)
    j.refresh([joined(order(2, 10), ANN)], changed={1})
    j.left_upsert(order(1, 20, 9))
    j.refresh([joined(order(1, 20, 9), BOB), joined(order(2, 10), ANN)], changed={1})
    # delete and re-insert the same row between two refreshes: no net change, nothing written
    j.left_delete(2)
    j.left_upsert(order(2, 10))
    j.refresh([joined(order(1, 20, 9), BOB), joined(order(2, 10), ANN)], changed=set())
    # right side too: delete then re-insert a customer with a new name
    j.right_delete(10)
    j.right_upsert({**ANN, "name": "ann-again"})
    j.refresh([joined(order(1, 20, 9), BOB), joined(order(2, 10), {**ANN, "name": "ann-again"})], changed={2})


def test_many_commits_to_one_key_between_refreshes(spark: SparkSession, warehouse: Path, how: str) -> None:
    j = Join(spark, warehouse, how, [order(1, 10), order(2, 20)], [ANN, BOB])
    j.refresh([joined(order(1, 10), ANN), joined(order(2, 20), BOB)])
    j.left_upsert(order(1, 20))
    j.left_upsert(order(1, None))
    j.right_upsert(CY)
    j.left_upsert(order(1, 30, 1))
    j.right_upsert({**CY, "name": "cy2"})
    j.left_upsert(order(1, 30, 2))
    j.right_upsert({**CY, "name": "cy3"})
    # one net change per key, against the latest snapshot of both sides
    j.refresh([joined(order(1, 30, 2), {**CY, "name": "cy3"}), joined(order(2, 20), BOB)], changed={1})
    # and a key that goes away and comes back to the same value: nothing at all
    j.left_upsert(order(2, 10))
    j.left_upsert(order(2, None))
    j.left_delete(2)
    j.left_upsert(order(2, 20))
    j.refresh([joined(order(1, 30, 2), {**CY, "name": "cy3"}), joined(order(2, 20), BOB)], changed=set())


def test_right_row_appears_after_its_left_rows(spark: SparkSession, warehouse: Path, how: str) -> None:
    j = Join(spark, warehouse, how, [order(1, 30), order(2, 30), order(3, 10)], [ANN])
    j.refresh(
        pick(
            how,
            inner=[joined(order(3, 10), ANN)],
            left=[joined(order(1, 30), None), joined(order(2, 30), None), joined(order(3, 10), ANN)],
        )
    )
    j.right_upsert(CY)
    j.refresh([joined(order(1, 30), CY), joined(order(2, 30), CY), joined(order(3, 10), ANN)], changed={1, 2})


def test_fk_prefix_does_not_match(spark: SparkSession, warehouse: Path, how: str) -> None:
    """Right key "fk" must not match left FK "fk1" (trap 6), nor "FK" / "fk " (exact value)."""
    left = [
        {"order_id": 1, "ref": "fk1", "amount": 1},
        {"order_id": 2, "ref": "fk", "amount": 2},
        {"order_id": 3, "ref": "FK", "amount": 3},
        {"order_id": 4, "ref": "fk ", "amount": 4},
    ]
    j = Join(
        spark,
        warehouse,
        how,
        left,
        [{"ref": "fk", "name": "plain"}],
        left_schema="order_id INT, ref STRING, amount INT",
        right_schema="ref STRING, name STRING",
        right_key=("ref",),
        foreign_key=["ref"],
    )

    def out(order_id: int, ref: str, name: str | None) -> Row:
        return {"order_id": order_id, "ref": ref, "amount": order_id, "name": name}

    misses = [out(1, "fk1", None), out(3, "FK", None), out(4, "fk ", None)]
    j.refresh(pick(how, inner=[out(2, "fk", "plain")], left=[out(2, "fk", "plain"), *misses]))
    j.right_upsert({"ref": "fk", "name": "plain2"}, {"ref": "f", "name": "shorter"})
    j.refresh(pick(how, inner=[out(2, "fk", "plain2")], left=[out(2, "fk", "plain2"), *misses]), changed={2})
    j.right_delete("fk")
    j.right_upsert({"ref": "fk1", "name": "one"})
    j.refresh(
        pick(
            how,
            inner=[out(1, "fk1", "one")],
            left=[out(1, "fk1", "one"), out(2, "fk", None), out(3, "FK", None), out(4, "fk ", None)],
        ),
        changed={1, 2},
    )


def test_noop_refresh_commits_nothing(spark: SparkSession, warehouse: Path) -> None:
    j = Join(spark, warehouse, "inner", [order(1, 10)], [ANN])
    first = j.refresh([joined(order(1, 10), ANN)])
    version = j.output_version()
    result = j.refresh([joined(order(1, 10), ANN)], mode="noop", changed=set())
    assert j.output_version() == version == result["output"]["version"]
    assert result["inputs"]["left"]["to_version"] == first["inputs"]["left"]["to_version"]
    assert (result["rows"]["inserted"], result["rows"]["updated"], result["rows"]["deleted"]) == (0, 0, 0)
    j.refresh([joined(order(1, 10), ANN)], mode="noop")
    assert j.output_version() == version


def test_unchanged_result_is_not_rewritten(spark: SparkSession, warehouse: Path, how: str) -> None:
    """Identical rewrites of inputs (Delta records them as updates) must not rewrite the output."""
    j = Join(spark, warehouse, how, [order(1, 10), order(2, 10), order(3, 99)], [ANN, BOB])
    expected = pick(
        how,
        inner=[joined(order(1, 10), ANN), joined(order(2, 10), ANN)],
        left=[joined(order(1, 10), ANN), joined(order(2, 10), ANN), joined(order(3, 99), None)],
    )
    j.refresh(expected)
    j.left_upsert(order(1, 10), order(3, 99))
    j.right_upsert(ANN)
    j.right_upsert({**ANN, "name": "tmp"})
    j.right_upsert(ANN)  # changed and changed back
    result = j.refresh(expected, changed=set())
    assert (result["rows"]["inserted"], result["rows"]["updated"], result["rows"]["deleted"]) == (0, 0, 0)
    out_version = result["output"]["version"]
    assert read_changes(spark, j.out_path, out_version, out_version) == []


def test_both_sides_change_in_one_refresh(spark: SparkSession, warehouse: Path, how: str) -> None:
    j = Join(spark, warehouse, how, [order(1, 10), order(2, 10), order(3, 20), order(4, None)], [ANN, BOB])
    j.refresh(
        pick(
            how,
            inner=[joined(order(1, 10), ANN), joined(order(2, 10), ANN), joined(order(3, 20), BOB)],
            left=[
                joined(order(1, 10), ANN),
                joined(order(2, 10), ANN),
                joined(order(3, 20), BOB),
                joined(order(4, None), None),
            ],
        )
    )
    bob2 = {**BOB, "name": "bob2"}
    j.left_upsert(order(1, 20))  # moves to a right row that changes in the same refresh
    j.right_upsert(bob2)
    j.right_delete(10)  # its old right row goes away
    j.left_delete(2)  # a subscriber of the deleted right row is deleted too
    j.left_upsert(order(4, 30))
    j.right_upsert(CY)  # the new target of order 4 appears
    j.refresh(
        [joined(order(1, 20), bob2), joined(order(3, 20), bob2), joined(order(4, 30), CY)],
        changed={1, 2, 3, 4},
    )


def test_spec_change_rebuilds_cleanly(spark: SparkSession, warehouse: Path) -> None:
    """Changing ``how`` on an existing output is a full rebuild that still writes only the net changes."""
    j = Join(spark, warehouse, "inner", [order(1, 10), order(2, 99)], [ANN])
    j.refresh([joined(order(1, 10), ANN)])
    j.spec["how"] = "left"
    result = j.refresh([joined(order(1, 10), ANN), joined(order(2, 99), None)], mode="full", changed={2})
    assert "spec" in result["reason"].lower(), result["reason"]


# ------------------------------------------------------------------------------------------ spec errors


def _spec(warehouse: Path, **overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "kind": "foreign_key_join",
        "left": {"path": str(warehouse / "left"), "key": ["order_id"]},
        "right": {"path": str(warehouse / "right"), "key": ["customer_id"]},
        "foreign_key": ["customer_id"],
        "how": "inner",
        "output": {"path": str(warehouse / "out")},
    }
    spec.update(overrides)
    return spec


@pytest.fixture
def small_inputs(spark: SparkSession, warehouse: Path) -> Path:
    create_table(spark, str(warehouse / "left"), [order(1, 10)], ORDERS + ", code STRING")
    create_table(spark, str(warehouse / "right"), [ANN], CUSTOMERS)
    return warehouse


@pytest.mark.parametrize(
    ("overrides", "must_name"),
    [
        pytest.param({"left": {"key": ["nope_id"]}}, ["left.key", "nope_id"], id="missing-left-key"),
        pytest.param({"right": {"key": ["nope_cid"]}}, ["right.key", "nope_cid"], id="missing-right-key"),
        pytest.param({"foreign_key": ["nope_fk"]}, ["foreign_key", "nope_fk"], id="missing-fk-column"),
        pytest.param({"foreign_key": ["code"]}, ["foreign_key", "code"], id="fk-type-mismatch"),
        pytest.param(
            {"foreign_key": {"expr": "concat(code, 'x')"}}, ["foreign_key"], id="fk-expr-type-mismatch"
        ),
        pytest.param({"foreign_key": ["customer_id", "amount"]}, ["foreign_key"], id="fk-arity"),
        pytest.param({"how": "outer"}, ["how"], id="bad-how"),
        pytest.param({"columns": {"x": "r.no_such_col"}}, ["columns", "no_such_col"], id="bad-projection"),
    ],
)
def test_spec_errors_name_the_field(
    spark: SparkSession, small_inputs: Path, overrides: dict[str, Any], must_name: list[str]
) -> None:
    spec = _spec(small_inputs)
    for field, value in overrides.items():
        if isinstance(value, dict) and isinstance(spec.get(field), dict) and field in ("left", "right"):
            spec[field] = {**spec[field], **value}
        else:
            spec[field] = value
    with pytest.raises(SpecError) as caught:
        run_spec(spec, spark=spark)
    message = str(caught.value)
    for text in must_name:
        assert text in message, f"{text!r} not in {message!r}"
    assert not (small_inputs / "out").exists(), "a SpecError must come before anything is written"


def test_default_projection_clash_suggests_columns(spark: SparkSession, warehouse: Path) -> None:
    create_table(spark, str(warehouse / "left"), [order(1, 10)], ORDERS + ", tier STRING")
    create_table(spark, str(warehouse / "right"), [ANN], CUSTOMERS)
    with pytest.raises(SpecError) as caught:
        run_spec(_spec(warehouse), spark=spark)
    message = str(caught.value)
    assert "tier" in message and "columns" in message, message
    assert not (warehouse / "out").exists()
    # the suggested fix works
    result = run_spec(_spec(warehouse, columns={"left_tier": "l.tier", "right_tier": "r.tier"}), spark=spark)
    assert read_rows(spark, str(warehouse / "out"), result["output"]["version"]) == [
        {"order_id": 1, "left_tier": None, "right_tier": "gold"}
    ]


# ------------------------------------------------------------------------------------- input data checks


@pytest.mark.parametrize("side", ["left", "right"])
def test_duplicate_keys_on_first_run(spark: SparkSession, warehouse: Path, side: str) -> None:
    j = Join(spark, warehouse, "left", [order(1, 4242), order(2, 10)], [ANN, {**BOB, "customer_id": 4242}])
    if side == "left":
        append_rows(spark, j.left_path, [order(4242, 10, 1)])
        append_rows(spark, j.left_path, [order(4242, 10, 2)])
    else:
        append_rows(spark, j.right_path, [{**CY, "customer_id": 4242}])
    with pytest.raises(InputDataError) as caught:
        run_spec(j.spec, spark=spark)
    assert "4242" in str(caught.value), str(caught.value)
    assert not (Path(j.out_path) / "_delta_log").exists(), "nothing may be written on a data error"


@pytest.mark.parametrize("case", ["left", "right-subscribed", "right-unsubscribed"])
def test_duplicate_keys_on_incremental_run(spark: SparkSession, warehouse: Path, case: str) -> None:
    j = Join(spark, warehouse, "left", [order(1, 10), order(2, 20)], [ANN, BOB])
    j.refresh([joined(order(1, 10), ANN), joined(order(2, 20), BOB)])
    version = j.output_version()
    before = read_rows(spark, j.out_path)
    if case == "left":
        append_rows(spark, j.left_path, [order(4242, 10, 1), order(4242, 20, 2)])
    elif case == "right-subscribed":
        upsert(spark, j.left_path, [order(3, 4242)], ["order_id"])
        append_rows(spark, j.right_path, [{**CY, "customer_id": 4242}, {**BOB, "customer_id": 4242}])
    else:
        # a duplicate right key nothing references yet: the table is still not a table
        append_rows(spark, j.right_path, [{**CY, "customer_id": 4242}, {**BOB, "customer_id": 4242}])
    with pytest.raises(InputDataError) as caught:
        run_spec(j.spec, spark=spark)
    assert "4242" in str(caught.value), str(caught.value)
    assert j.output_version() == version, "nothing may be written on a data error"
    assert_same_rows(read_rows(spark, j.out_path), before, ["order_id"])


def test_null_keys_are_dropped_and_counted(spark: SparkSession, warehouse: Path, how: str) -> None:
    j = Join(spark, warehouse, how, [order(1, 10), order(2, None)], [ANN])
    append_rows(spark, j.left_path, [order(None, 10, 1), order(None, None, 2)])
    append_rows(spark, j.right_path, [{"customer_id": None, "name": "nobody", "tier": "x"}])
    # the null FK of order 2 must not match the right row whose key is null
    result = j.refresh(
        pick(
            how,
            inner=[joined(order(1, 10), ANN)],
            left=[joined(order(1, 10), ANN), joined(order(2, None), None)],
        )
    )
    assert result["rows"]["null_keys_dropped"] == {"left": 2, "right": 1}
    # later changes to null-key rows never reach the output
    append_rows(spark, j.left_path, [order(None, 10, 3)])
    j.left_upsert(order(3, 10))
    result = j.refresh(
        pick(
            how,
            inner=[joined(order(1, 10), ANN), joined(order(3, 10), ANN)],
            left=[joined(order(1, 10), ANN), joined(order(2, None), None), joined(order(3, 10), ANN)],
        ),
        changed={3},
    )
    assert result["rows"]["null_keys_dropped"]["left"] >= 1


def test_oracle_helpers_are_sane() -> None:
    """The oracle itself, on the §2.4 basics (no Spark)."""
    from helpers import expected_fk_join

    left = [order(1, 10), order(2, None), order(3, 99), order(None, 10)]
    right = [ANN, {"customer_id": None, "name": "nobody", "tier": None}]
    inner = expected_fk_join(left, right, ["order_id"], ["customer_id"], ["customer_id"], "inner")
    assert inner == [joined(order(1, 10), ANN)]
    left_join = expected_fk_join(left, right, ["order_id"], ["customer_id"], ["customer_id"], "left")
    assert left_join == [joined(order(1, 10), ANN), joined(order(2, None), None), joined(order(3, 99), None)]
    with pytest.raises(ValueError, match="duplicate"):
        expected_fk_join(
            [order(1, 10), order(1, 20)], right, ["order_id"], ["customer_id"], ["customer_id"], "left"
        )
    projected = expected_fk_join(
        left, right, ["order_id"], ["customer_id"], lambda r: r["customer_id"], "left", {"n": "r.name"}
    )
    assert projected == [{"order_id": 1, "n": "ann"}, {"order_id": 2, "n": None}, {"order_id": 3, "n": None}]

"""The foreign-key join against the reference's table of observable behaviour
(``docs/kinds/foreign-key-join.md``, "Observable behaviour").

The port is a *table* (``docs/concepts/semantics.md``): where Kafka emits a record, the output row
changes; where Kafka emits a tombstone for a key that never produced a result, the output has no row and
nothing is written (``docs/concepts/semantics.md``, clean changelogs).

To keep the suite fast, the observable-behaviour scenarios share one pair of inputs (``orders -> customers``):
each scenario owns a block of order ids and its own customer ids, all scenarios' changes of a phase land
together, and one refresh per phase updates an inner and a left join. Each test then checks its own keys,
after every phase: the exact rows it expects (hand-written), the oracle at the result's input versions, and
the output's change data feed (one net change per changed key, nothing else).
``test_world_contract`` checks the whole of every refresh (modes, versions, one commit, counts, every key).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import (
    Batch,
    OutputSpec,
    Row,
    World,
    append_rows,
    assert_same_rows,
    create_table,
    delete_keys,
    expected_fk_join,
    read_changes,
    read_rows,
    table_version,
    upsert,
)
from pyspark.sql import SparkSession

from airflow_provider_fkjoin.engine import SpecError, run_spec
from airflow_provider_fkjoin.engine.core.errors import InputDataError

ORDERS = "order_id INT, customer_id STRING, amount INT"
CUSTOMERS = "customer_id STRING, name STRING, tier STRING"
HOWS = ["inner", "left"]
PROJECTION = {"customer_name": "r.name", "double_amount": "l.amount * 2"}
PROJECTION_ORACLE = {
    "customer_name": "r.name",
    "double_amount": lambda left, _right: None if left["amount"] is None else left["amount"] * 2,
}


def joined(order: Row, customer: Row | None) -> Row:
    """One default-projection output row: every order column, then the customer's non-key columns."""
    return {
        **order,
        "name": customer["name"] if customer else None,
        "tier": customer["tier"] if customer else None,
    }


# ------------------------------------------------------------------------------------------- scenarios


class Scenario:
    """Rows, per-phase changes and per-phase expectations of one observable-behaviour case, on keys of its
    own.

    Order ids are ``base + n``; customer ids are ``"<tag>-<suffix>"`` so scenarios never see each other.
    Expectations carry forward: a phase without ``expect`` must leave the scenario's rows untouched.
    """

    def __init__(self, name: str, index: int) -> None:
        self.name = name
        self.base = index * 100
        self.tag = f"s{index}"
        self.left0: list[Row] = []
        self.right0: list[Row] = []
        self.rounds: dict[int, list[Batch]] = {}
        self.expected: dict[str, dict[int, list[Row]]] = {}

    def o(self, n: int, cust: str | None, amount: int = 100) -> Row:
        return {"order_id": self.base + n, "customer_id": self.cid(cust), "amount": amount}

    def cid(self, cust: str | None) -> str | None:
        return None if cust is None else f"{self.tag}-{cust}"

    def c(self, cust: str, name: str | None = None, tier: str = "gold") -> Row:
        return {"customer_id": self.cid(cust), "name": name or f"{self.tag}-{cust}-name", "tier": tier}

    def initial(self, left: list[Row] | None = None, right: list[Row] | None = None) -> None:
        self.left0 += left or []
        self.right0 += right or []

    def at(self, phase: int, round_no: int = 0) -> Batch:
        """The batch of changes of round ``round_no`` of ``phase`` (rounds run in order within a phase)."""
        rounds = self.rounds.setdefault(phase, [])
        while len(rounds) <= round_no:
            rounds.append(Batch())
        return rounds[round_no]

    def expect(
        self,
        phase: int,
        *,
        both: list[Row] | None = None,
        inner: list[Row] | None = None,
        left: list[Row] | None = None,
    ) -> None:
        for how, rows in (
            ("inner", inner if both is None else both),
            ("left", left if both is None else both),
        ):
            assert rows is not None, f"{self.name}: phase {phase} needs an expectation for {how}"
            self.expected.setdefault(how, {})[phase] = rows

    def owns(self, key: tuple[Any, ...]) -> bool:
        return key[0] is not None and self.base <= key[0] < self.base + 100


SCENARIOS: dict[str, Scenario] = {}
PHASES = 3  # phase 0 is the first (full) refresh, 1-2 are incremental, phase 3 changes nothing (noop)


def scenario(build: Callable[[Scenario], None]) -> Callable[[Scenario], None]:
    s = Scenario(build.__name__, len(SCENARIOS) + 1)
    build(s)
    assert all(0 in s.expected.get(how, {}) for how in HOWS), f"{s.name}: expect(0, ...) is missing"
    SCENARIOS[s.name] = s
    return build


# Observable-behaviour row: left insert, right row exists -> J(l, r)
@scenario
def left_insert_right_exists(s: Scenario) -> None:
    s.initial(right=[s.c("A")])
    s.expect(0, both=[])
    s.at(1).left_upserts += [s.o(1, "A")]
    s.expect(1, both=[joined(s.o(1, "A"), s.c("A"))])


# left insert, right row missing -> inner nothing, left J(l, null)
@scenario
def left_insert_right_missing(s: Scenario) -> None:
    s.initial(right=[s.c("A")])
    s.expect(0, both=[])
    s.at(1).left_upserts += [s.o(1, "missing")]
    s.expect(1, inner=[], left=[joined(s.o(1, "missing"), None)])


# left insert, fk null -> inner nothing, left J(l, null) (KIP-962)
@scenario
def left_insert_fk_null(s: Scenario) -> None:
    s.initial(right=[s.c("A")])
    s.expect(0, both=[])
    s.at(1).left_upserts += [s.o(1, None)]
    s.expect(1, inner=[], left=[joined(s.o(1, None), None)])


# left update, same fk, right exists -> J(l', r)
@scenario
def left_update_same_fk_right_exists(s: Scenario) -> None:
    s.initial(left=[s.o(1, "A"), s.o(2, "A")], right=[s.c("A")])
    s.expect(0, both=[joined(s.o(1, "A"), s.c("A")), joined(s.o(2, "A"), s.c("A"))])
    s.at(1).left_upserts += [s.o(1, "A", 555)]
    s.expect(1, both=[joined(s.o(1, "A", 555), s.c("A")), joined(s.o(2, "A"), s.c("A"))])


# left update, same fk, right missing -> inner nothing (trap 2: 4.0 emitted a tombstone), left J(l', null)
@scenario
def left_update_same_fk_right_missing(s: Scenario) -> None:
    s.initial(left=[s.o(1, "missing")])
    s.expect(0, inner=[], left=[joined(s.o(1, "missing"), None)])
    s.at(1).left_upserts += [s.o(1, "missing", 555)]
    s.expect(1, inner=[], left=[joined(s.o(1, "missing", 555), None)])


# left fk A -> B, B exists -> one J(l', rB), never J(l', null) first (trap 1)
@scenario
def left_fk_change_to_existing(s: Scenario) -> None:
    s.initial(left=[s.o(1, "A")], right=[s.c("A"), s.c("B")])
    s.expect(0, both=[joined(s.o(1, "A"), s.c("A"))])
    s.at(1).left_upserts += [s.o(1, "B")]
    s.expect(1, both=[joined(s.o(1, "B"), s.c("B"))])


# left fk A -> B, B missing -> inner tombstone (even if A never matched), left J(l', null)
@scenario
def left_fk_change_to_missing_from_matched(s: Scenario) -> None:
    s.initial(left=[s.o(1, "A"), s.o(2, "A")], right=[s.c("A")])
    s.expect(0, both=[joined(s.o(1, "A"), s.c("A")), joined(s.o(2, "A"), s.c("A"))])
    s.at(1).left_upserts += [s.o(1, "missing")]
    s.expect(
        1,
        inner=[joined(s.o(2, "A"), s.c("A"))],
        left=[joined(s.o(1, "missing"), None), joined(s.o(2, "A"), s.c("A"))],
    )


@scenario
def left_fk_change_to_missing_from_unmatched(s: Scenario) -> None:
    s.initial(left=[s.o(1, "gone"), s.o(2, "A")], right=[s.c("A")])
    s.expect(
        0,
        inner=[joined(s.o(2, "A"), s.c("A"))],
        left=[joined(s.o(1, "gone"), None), joined(s.o(2, "A"), s.c("A"))],
    )
    s.at(1).left_upserts += [s.o(1, "missing")]
    # the inner join's tombstone is for a key the output never held: nothing is written
    s.expect(
        1,
        inner=[joined(s.o(2, "A"), s.c("A"))],
        left=[joined(s.o(1, "missing"), None), joined(s.o(2, "A"), s.c("A"))],
    )


# left fk A -> null -> inner tombstone (trap 3: 4.0 kept the stale row), left J(l', null); unsubscribed from A
@scenario
def left_fk_change_to_null(s: Scenario) -> None:
    a2 = s.c("A", name="renamed")
    s.initial(left=[s.o(1, "A"), s.o(2, "A")], right=[s.c("A")])
    s.expect(0, both=[joined(s.o(1, "A"), s.c("A")), joined(s.o(2, "A"), s.c("A"))])
    s.at(1).left_upserts += [s.o(1, None)]
    s.expect(
        1,
        inner=[joined(s.o(2, "A"), s.c("A"))],
        left=[joined(s.o(1, None), None), joined(s.o(2, "A"), s.c("A"))],
    )
    s.at(2).right_upserts += [a2]
    s.expect(2, inner=[joined(s.o(2, "A"), a2)], left=[joined(s.o(1, None), None), joined(s.o(2, "A"), a2)])


# left fk null -> B -> J(l', rB) if B exists (trap 3: 4.0 ignored it), else inner nothing / left J(l', null)
@scenario
def left_fk_change_from_null_to_existing(s: Scenario) -> None:
    s.initial(left=[s.o(1, None)], right=[s.c("B")])
    s.expect(0, inner=[], left=[joined(s.o(1, None), None)])
    s.at(1).left_upserts += [s.o(1, "B")]
    s.expect(1, both=[joined(s.o(1, "B"), s.c("B"))])


@scenario
def left_fk_change_from_null_to_missing(s: Scenario) -> None:
    s.initial(left=[s.o(1, None)], right=[s.c("B")])
    s.expect(0, inner=[], left=[joined(s.o(1, None), None)])
    s.at(1).left_upserts += [s.o(1, "missing")]
    s.expect(1, inner=[], left=[joined(s.o(1, "missing"), None)])


# left delete (row existed) -> one tombstone; written only for a key the output holds
@scenario
def left_delete_of_joined_row(s: Scenario) -> None:
    s.initial(left=[s.o(1, "A"), s.o(2, "A")], right=[s.c("A")])
    s.expect(0, both=[joined(s.o(1, "A"), s.c("A")), joined(s.o(2, "A"), s.c("A"))])
    s.at(1).left_deletes += [s.base + 1]
    s.expect(1, both=[joined(s.o(2, "A"), s.c("A"))])


@scenario
def left_delete_of_unjoined_row(s: Scenario) -> None:
    s.initial(left=[s.o(1, "missing"), s.o(2, "A")], right=[s.c("A")])
    s.expect(
        0,
        inner=[joined(s.o(2, "A"), s.c("A"))],
        left=[joined(s.o(1, "missing"), None), joined(s.o(2, "A"), s.c("A"))],
    )
    s.at(1).left_deletes += [s.base + 1]
    s.expect(1, both=[joined(s.o(2, "A"), s.c("A"))])


# left delete of a key that never existed / is already deleted -> nothing
@scenario
def left_delete_of_never_existing_key(s: Scenario) -> None:
    s.initial(left=[s.o(1, "A")], right=[s.c("A")])
    s.expect(0, both=[joined(s.o(1, "A"), s.c("A"))])
    s.at(1).left_deletes += [s.base + 77]


@scenario
def left_delete_of_already_deleted_key(s: Scenario) -> None:
    s.initial(left=[s.o(1, "A"), s.o(2, "A")], right=[s.c("A")])
    s.expect(0, both=[joined(s.o(1, "A"), s.c("A")), joined(s.o(2, "A"), s.c("A"))])
    s.at(1).left_deletes += [s.base + 2]
    s.expect(1, both=[joined(s.o(1, "A"), s.c("A"))])
    s.at(2).left_deletes += [s.base + 2]


# right insert/update, subscribers present -> J(l_i, r) for each subscribed left row, and only those
@scenario
def right_insert_with_subscribers(s: Scenario) -> None:
    s.initial(left=[s.o(3, "A"), s.o(1, "A"), s.o(2, "B")], right=[s.c("B")])
    s.expect(
        0,
        inner=[joined(s.o(2, "B"), s.c("B"))],
        left=[joined(s.o(1, "A"), None), joined(s.o(2, "B"), s.c("B")), joined(s.o(3, "A"), None)],
    )
    s.at(1).right_upserts += [s.c("A")]
    s.expect(
        1,
        both=[joined(s.o(1, "A"), s.c("A")), joined(s.o(2, "B"), s.c("B")), joined(s.o(3, "A"), s.c("A"))],
    )


@scenario
def right_update_with_subscribers(s: Scenario) -> None:
    a2 = s.c("A", name="renamed", tier="platinum")
    s.initial(left=[s.o(3, "A"), s.o(1, "A"), s.o(2, "B")], right=[s.c("A"), s.c("B")])
    s.expect(
        0,
        both=[joined(s.o(1, "A"), s.c("A")), joined(s.o(2, "B"), s.c("B")), joined(s.o(3, "A"), s.c("A"))],
    )
    s.at(1).right_upserts += [a2]
    s.expect(1, both=[joined(s.o(1, "A"), a2), joined(s.o(2, "B"), s.c("B")), joined(s.o(3, "A"), a2)])


# right delete, subscribers present -> inner: a tombstone per subscriber; left: J(l_i, null)
@scenario
def right_delete_with_subscribers(s: Scenario) -> None:
    s.initial(left=[s.o(1, "A"), s.o(2, "A"), s.o(3, "B")], right=[s.c("A"), s.c("B")])
    s.expect(
        0,
        both=[joined(s.o(1, "A"), s.c("A")), joined(s.o(2, "A"), s.c("A")), joined(s.o(3, "B"), s.c("B"))],
    )
    s.at(1).right_deletes += [s.cid("A")]
    s.expect(
        1,
        inner=[joined(s.o(3, "B"), s.c("B"))],
        left=[joined(s.o(1, "A"), None), joined(s.o(2, "A"), None), joined(s.o(3, "B"), s.c("B"))],
    )


# right insert/update/delete without subscribers -> nothing
def _right_change_without_subscribers(s: Scenario, op: str) -> None:
    s.initial(left=[s.o(1, "A"), s.o(2, "missing")], right=[s.c("A"), s.c("B")])
    s.expect(
        0,
        inner=[joined(s.o(1, "A"), s.c("A"))],
        left=[joined(s.o(1, "A"), s.c("A")), joined(s.o(2, "missing"), None)],
    )
    if op == "insert":
        s.at(1).right_upserts += [s.c("C")]
    elif op == "update":
        s.at(1).right_upserts += [s.c("B", name="changed")]
    else:
        s.at(1).right_deletes += [s.cid("B")]


@scenario
def right_insert_without_subscribers(s: Scenario) -> None:
    _right_change_without_subscribers(s, "insert")


@scenario
def right_update_without_subscribers(s: Scenario) -> None:
    _right_change_without_subscribers(s, "update")


@scenario
def right_delete_without_subscribers(s: Scenario) -> None:
    _right_change_without_subscribers(s, "delete")


# right tombstone for a key that never existed, subscribers present -> Kafka re-emits tombstone / J(l, null);
# the table's rows are unchanged, so nothing is written
@scenario
def right_delete_of_never_existing_key(s: Scenario) -> None:
    s.initial(left=[s.o(1, "X"), s.o(2, "A")], right=[s.c("A")])
    s.expect(
        0,
        inner=[joined(s.o(2, "A"), s.c("A"))],
        left=[joined(s.o(1, "X"), None), joined(s.o(2, "A"), s.c("A"))],
    )
    s.at(1).right_deletes += [s.cid("X")]


# old right row changes after the left row moved its fk away -> nothing for that row (KAFKA-9244)
@scenario
def old_right_row_changes_after_fk_moved_away(s: Scenario) -> None:
    a2 = s.c("A", tier="lead")
    s.initial(left=[s.o(1, "A"), s.o(2, "A"), s.o(3, "D")], right=[s.c("A"), s.c("B"), s.c("D")])
    s.expect(
        0,
        both=[joined(s.o(1, "A"), s.c("A")), joined(s.o(2, "A"), s.c("A")), joined(s.o(3, "D"), s.c("D"))],
    )
    s.at(1).left_upserts += [s.o(1, "B"), s.o(3, "B")]
    s.expect(
        1,
        both=[joined(s.o(1, "B"), s.c("B")), joined(s.o(2, "A"), s.c("A")), joined(s.o(3, "B"), s.c("B"))],
    )
    s.at(2).right_upserts += [a2]  # order 2 still subscribes to A; order 1 no longer does
    s.at(2).right_deletes += [s.cid("D")]  # nobody subscribes to D any more
    s.expect(
        2,
        both=[joined(s.o(1, "B"), s.c("B")), joined(s.o(2, "A"), a2), joined(s.o(3, "B"), s.c("B"))],
    )


# ---------------------------------------------------------------------------- beyond the observable-behaviour
# table


# trap 6: right key "fk" must not match left FK "fk1" (nor "FK", nor "fk ")
@scenario
def fk_prefix_does_not_match(s: Scenario) -> None:
    s.initial(
        left=[s.o(1, "fk1", 1), s.o(2, "fk", 2), s.o(3, "FK", 3), s.o(4, "fk ", 4)],
        right=[s.c("fk", name="plain")],
    )
    misses = [joined(s.o(1, "fk1", 1), None), joined(s.o(3, "FK", 3), None), joined(s.o(4, "fk ", 4), None)]
    plain, plain2, one = s.c("fk", name="plain"), s.c("fk", name="plain2"), s.c("fk1", name="one")
    s.expect(0, inner=[joined(s.o(2, "fk", 2), plain)], left=[joined(s.o(2, "fk", 2), plain), *misses])
    s.at(1).right_upserts += [plain2, s.c("f", name="shorter")]
    s.expect(1, inner=[joined(s.o(2, "fk", 2), plain2)], left=[joined(s.o(2, "fk", 2), plain2), *misses])
    s.at(2).right_deletes += [s.cid("fk")]
    s.at(2).right_upserts += [one]
    s.expect(
        2,
        inner=[joined(s.o(1, "fk1", 1), one)],
        left=[
            joined(s.o(1, "fk1", 1), one),
            joined(s.o(2, "fk", 2), None),
            joined(s.o(3, "FK", 3), None),
            joined(s.o(4, "fk ", 4), None),
        ],
    )


@scenario
def reinsert_after_delete(s: Scenario) -> None:
    a_again = s.c("A", name="again")
    s.initial(left=[s.o(1, "A"), s.o(2, "A"), s.o(3, "B")], right=[s.c("A"), s.c("B")])
    s.expect(
        0,
        both=[joined(s.o(1, "A"), s.c("A")), joined(s.o(2, "A"), s.c("A")), joined(s.o(3, "B"), s.c("B"))],
    )
    s.at(1).left_deletes += [s.base + 1]
    s.expect(1, both=[joined(s.o(2, "A"), s.c("A")), joined(s.o(3, "B"), s.c("B"))])
    # order 1 comes back elsewhere; order 3 is deleted and re-inserted identical (no net change); customer A
    # is deleted and re-inserted renamed
    batch = s.at(2)
    batch.left_upserts += [s.o(1, "B", 9), s.o(3, "B")]
    batch.left_deletes += [s.base + 3]
    batch.right_deletes += [s.cid("A")]
    batch.right_upserts += [a_again]
    s.expect(
        2,
        both=[joined(s.o(1, "B", 9), s.c("B")), joined(s.o(2, "A"), a_again), joined(s.o(3, "B"), s.c("B"))],
    )


@scenario
def many_commits_to_one_key_between_refreshes(s: Scenario) -> None:
    s.initial(left=[s.o(1, "A"), s.o(2, "B")], right=[s.c("A"), s.c("B")])
    s.expect(0, both=[joined(s.o(1, "A"), s.c("A")), joined(s.o(2, "B"), s.c("B"))])
    s.at(1, 0).left_upserts += [s.o(1, "B")]
    s.at(1, 1).left_upserts += [s.o(1, None)]
    s.at(1, 2).right_upserts += [s.c("C")]
    s.at(1, 2).left_upserts += [s.o(1, "C", 1)]
    s.at(1, 3).right_upserts += [s.c("C", name="cy2")]
    s.at(1, 3).left_upserts += [s.o(1, "C", 2)]
    s.at(1, 4).right_upserts += [s.c("C", name="cy3")]
    s.expect(1, both=[joined(s.o(1, "C", 2), s.c("C", name="cy3")), joined(s.o(2, "B"), s.c("B"))])
    # a key that goes away and comes back to the same value: nothing at all
    s.at(2, 0).left_upserts += [s.o(2, "A")]
    s.at(2, 1).left_upserts += [s.o(2, None)]
    s.at(2, 2).left_deletes += [s.base + 2]
    s.at(2, 3).left_upserts += [s.o(2, "B")]


@scenario
def right_row_appears_after_its_left_rows(s: Scenario) -> None:
    s.initial(left=[s.o(1, "C"), s.o(2, "C"), s.o(3, "A")], right=[s.c("A")])
    s.expect(
        0,
        inner=[joined(s.o(3, "A"), s.c("A"))],
        left=[joined(s.o(1, "C"), None), joined(s.o(2, "C"), None), joined(s.o(3, "A"), s.c("A"))],
    )
    s.at(2).right_upserts += [s.c("C")]
    s.expect(
        2,
        both=[joined(s.o(1, "C"), s.c("C")), joined(s.o(2, "C"), s.c("C")), joined(s.o(3, "A"), s.c("A"))],
    )


# identical rewrites of inputs (Delta's CDF records them as updates) must not rewrite the output
@scenario
def unchanged_result_is_not_rewritten(s: Scenario) -> None:
    s.initial(left=[s.o(1, "A"), s.o(2, "A"), s.o(3, "missing")], right=[s.c("A"), s.c("B")])
    s.expect(
        0,
        inner=[joined(s.o(1, "A"), s.c("A")), joined(s.o(2, "A"), s.c("A"))],
        left=[joined(s.o(1, "A"), s.c("A")), joined(s.o(2, "A"), s.c("A")), joined(s.o(3, "missing"), None)],
    )
    s.at(1, 0).left_upserts += [s.o(1, "A"), s.o(3, "missing")]
    s.at(1, 0).right_upserts += [s.c("A"), s.c("B")]
    s.at(1, 1).right_upserts += [s.c("A", name="temporary")]
    s.at(1, 2).right_upserts += [s.c("A")]  # changed and changed back


@scenario
def both_sides_change_in_one_refresh(s: Scenario) -> None:
    b2 = s.c("B", name="b2")
    s.initial(left=[s.o(1, "A"), s.o(2, "A"), s.o(3, "B"), s.o(4, None)], right=[s.c("A"), s.c("B")])
    s.expect(
        0,
        inner=[joined(s.o(1, "A"), s.c("A")), joined(s.o(2, "A"), s.c("A")), joined(s.o(3, "B"), s.c("B"))],
        left=[
            joined(s.o(1, "A"), s.c("A")),
            joined(s.o(2, "A"), s.c("A")),
            joined(s.o(3, "B"), s.c("B")),
            joined(s.o(4, None), None),
        ],
    )
    batch = s.at(1)
    batch.left_upserts += [s.o(1, "B"), s.o(4, "C")]  # order 1 moves to a right row that changes too
    batch.left_deletes += [s.base + 2]  # a subscriber of the right row that goes away is deleted too
    batch.right_upserts += [b2, s.c("C")]  # order 4's new right row appears
    batch.right_deletes += [s.cid("A")]
    s.expect(1, both=[joined(s.o(1, "B"), b2), joined(s.o(3, "B"), b2), joined(s.o(4, "C"), s.c("C"))])


NULL_KEY_LEFT_ROWS = 2
NULL_KEY_RIGHT_ROWS = 1


# null keys are dropped (and counted); a null FK never matches, not even the right row with a null key
@scenario
def null_keys_are_dropped(s: Scenario) -> None:
    s.initial(
        left=[
            s.o(1, "A"),
            s.o(2, None),
            {"order_id": None, "customer_id": s.cid("A"), "amount": 1},
            {"order_id": None, "customer_id": None, "amount": 2},
        ],
        right=[s.c("A"), {"customer_id": None, "name": "nobody", "tier": "none"}],
    )
    s.expect(
        0,
        inner=[joined(s.o(1, "A"), s.c("A"))],
        left=[joined(s.o(1, "A"), s.c("A")), joined(s.o(2, None), None)],
    )
    s.at(1).left_upserts += [{"order_id": None, "customer_id": s.cid("A"), "amount": 3}, s.o(3, "A")]
    s.expect(
        1,
        inner=[joined(s.o(1, "A"), s.c("A")), joined(s.o(3, "A"), s.c("A"))],
        left=[joined(s.o(1, "A"), s.c("A")), joined(s.o(2, None), None), joined(s.o(3, "A"), s.c("A"))],
    )


def world_outputs() -> dict[str, OutputSpec]:
    return {f"default_{how}": OutputSpec(how=how, foreign_key=["customer_id"]) for how in HOWS}


@pytest.fixture(scope="module")
def world(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> World:
    """All scenarios, refreshed together: phase 0 (full), 1-2 (incremental), 3 (nothing new: noop)."""
    w = World(
        spark,
        str(tmp_path_factory.mktemp("fk_world")),
        left_schema=ORDERS,
        right_schema=CUSTOMERS,
        left_key=["order_id"],
        right_key=["customer_id"],
        outputs=world_outputs(),
    )
    w.create(
        [r for s in SCENARIOS.values() for r in s.left0], [r for s in SCENARIOS.values() for r in s.right0]
    )
    w.refresh()
    for phase in range(1, PHASES + 1):
        rounds = max((len(s.rounds.get(phase, [])) for s in SCENARIOS.values()), default=0)
        for round_no in range(rounds):
            merged = Batch()
            for s in SCENARIOS.values():
                if round_no < len(s.rounds.get(phase, [])):
                    merged.extend(s.rounds[phase][round_no])
            w.apply(merged)
        w.refresh()
    print(w.timing_summary())
    return w


def check_scenario(world: World, name: str, how: str) -> None:
    """The scenario's keys, after every phase: hand-written rows, the oracle, and a clean change feed."""
    s = SCENARIOS[name]
    output = f"default_{how}"
    expectations = s.expected[how]
    failures: list[str] = []
    want: list[Row] | None = None
    for record in world.history[output]:
        if record.error:
            pytest.fail(f"{output}: phase {record.phase}: run_spec raised {record.error}")
        want = expectations.get(record.phase, want)
        got = {k: v for k, v in record.rows.items() if s.owns(k)}
        oracle = {k: v for k, v in record.oracle.items() if s.owns(k)}
        if want is not None:
            hand = {(r["order_id"],): r for r in want}
            if got != hand:
                failures.append(
                    f"phase {record.phase}: rows {sorted(got.values(), key=repr)}, expected {want}"
                )
        if got != oracle:
            failures.append(f"phase {record.phase}: rows {got} differ from the oracle {oracle}")
        for key, problems in record.change_problems.items():
            if s.owns(key):
                failures.extend(f"phase {record.phase}: change feed, key {key}: {p}" for p in problems)
    assert not failures, f"{name} [{output}]:\n" + "\n".join(failures)


@pytest.fixture(params=HOWS)
def how(request: pytest.FixtureRequest) -> str:
    return request.param


# One test per row of the observable-behaviour table (variants parametrized), for inner and left.


def test_left_insert_right_exists(world: World, how: str) -> None:
    check_scenario(world, "left_insert_right_exists", how)


def test_left_insert_right_missing(world: World, how: str) -> None:
    check_scenario(world, "left_insert_right_missing", how)


def test_left_insert_fk_null(world: World, how: str) -> None:
    check_scenario(world, "left_insert_fk_null", how)


def test_left_update_same_fk_right_exists(world: World, how: str) -> None:
    check_scenario(world, "left_update_same_fk_right_exists", how)


def test_left_update_same_fk_right_missing(world: World, how: str) -> None:
    check_scenario(world, "left_update_same_fk_right_missing", how)


def test_left_fk_change_to_existing(world: World, how: str) -> None:
    check_scenario(world, "left_fk_change_to_existing", how)


@pytest.mark.parametrize("old", ["from_matched", "from_unmatched"])
def test_left_fk_change_to_missing(world: World, how: str, old: str) -> None:
    check_scenario(world, f"left_fk_change_to_missing_{old}", how)


def test_left_fk_change_to_null(world: World, how: str) -> None:
    check_scenario(world, "left_fk_change_to_null", how)


@pytest.mark.parametrize("new", ["existing", "missing"])
def test_left_fk_change_from_null(world: World, how: str, new: str) -> None:
    check_scenario(world, f"left_fk_change_from_null_to_{new}", how)


@pytest.mark.parametrize("row", ["joined", "unjoined"])
def test_left_delete_of_existing_row(world: World, how: str, row: str) -> None:
    check_scenario(world, f"left_delete_of_{row}_row", how)


@pytest.mark.parametrize("key", ["never_existing", "already_deleted"])
def test_left_delete_of_absent_key(world: World, how: str, key: str) -> None:
    check_scenario(world, f"left_delete_of_{key}_key", how)


@pytest.mark.parametrize("op", ["insert", "update"])
def test_right_change_with_subscribers(world: World, how: str, op: str) -> None:
    check_scenario(world, f"right_{op}_with_subscribers", how)


def test_right_delete_with_subscribers(world: World, how: str) -> None:
    check_scenario(world, "right_delete_with_subscribers", how)


@pytest.mark.parametrize("op", ["insert", "update", "delete"])
def test_right_change_without_subscribers(world: World, how: str, op: str) -> None:
    check_scenario(world, f"right_{op}_without_subscribers", how)


def test_right_delete_of_never_existing_key(world: World, how: str) -> None:
    check_scenario(world, "right_delete_of_never_existing_key", how)


def test_old_right_row_changes_after_fk_moved_away(world: World, how: str) -> None:
    check_scenario(world, "old_right_row_changes_after_fk_moved_away", how)


def test_fk_prefix_does_not_match(world: World, how: str) -> None:
    check_scenario(world, "fk_prefix_does_not_match", how)


def test_reinsert_after_delete(world: World, how: str) -> None:
    check_scenario(world, "reinsert_after_delete", how)


def test_many_commits_to_one_key_between_refreshes(world: World, how: str) -> None:
    check_scenario(world, "many_commits_to_one_key_between_refreshes", how)


def test_right_row_appears_after_its_left_rows(world: World, how: str) -> None:
    check_scenario(world, "right_row_appears_after_its_left_rows", how)


def test_unchanged_result_is_not_rewritten(world: World, how: str) -> None:
    check_scenario(world, "unchanged_result_is_not_rewritten", how)
    s = SCENARIOS["unchanged_result_is_not_rewritten"]
    phase1 = world.history[f"default_{how}"][1]
    assert not {k for k in phase1.changed if s.owns(k)}, "identical input rewrites reached the output"


def test_both_sides_change_in_one_refresh(world: World, how: str) -> None:
    check_scenario(world, "both_sides_change_in_one_refresh", how)


def test_null_keys_are_dropped_and_counted(world: World, how: str) -> None:
    check_scenario(world, "null_keys_are_dropped", how)
    first = world.history[f"default_{how}"][0].result
    assert first is not None
    assert first["rows"]["null_keys_dropped"] == {"left": NULL_KEY_LEFT_ROWS, "right": NULL_KEY_RIGHT_ROWS}
    second = world.history[f"default_{how}"][1].result
    assert second is not None
    assert second["rows"]["null_keys_dropped"]["left"] >= 1, second["rows"]


@pytest.mark.parametrize("output", sorted(world_outputs()))
def test_world_contract(world: World, output: str) -> None:
    """Every refresh: mode, versions, one commit, counts, columns, every key vs the oracle, clean feed."""
    world.assert_ok(output)
    modes = [r.result["mode"] for r in world.history[output] if r.result]
    assert modes == ["full", "incremental", "incremental", "noop"]


def test_noop_refresh_commits_nothing(world: World) -> None:
    for output in world_outputs():
        history = world.history[output]
        last, before = history[-1].result, history[-2].result
        assert last is not None and before is not None
        assert last["mode"] == "noop", last
        assert last["output"]["version"] == before["output"]["version"]
        assert table_version(world.spark, world.out_path(output)) == before["output"]["version"]
        assert (last["rows"]["inserted"], last["rows"]["updated"], last["rows"]["deleted"]) == (0, 0, 0)
        assert last["inputs"]["left"]["to_version"] == before["inputs"]["left"]["to_version"]


# --------------------------------------------------------------------------------- FK as an expression


@pytest.fixture(scope="module")
def expr_world(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> World:
    """FK = lower(cust_code), projected through ``columns``: keys compare by exact value *after* the
    expression, and a change that leaves the projected values equal writes nothing.
    """
    fk_oracle = lambda row: None if row["cust_code"] is None else row["cust_code"].lower()  # noqa: E731
    w = World(
        spark,
        str(tmp_path_factory.mktemp("fk_expr")),
        left_schema="order_id INT, cust_code STRING, amount INT",
        right_schema="code STRING, name STRING, tier STRING",
        left_key=["order_id"],
        right_key=["code"],
        outputs={
            how: OutputSpec(
                how=how,
                foreign_key={"expr": "lower(cust_code)"},
                fk_oracle=fk_oracle,
                columns=PROJECTION,
                columns_oracle=PROJECTION_ORACLE,
            )
            for how in HOWS
        },
    )
    w.create(
        [
            {"order_id": 1, "cust_code": "C10", "amount": 1},
            {"order_id": 2, "cust_code": "c20", "amount": 2},
            {"order_id": 3, "cust_code": None, "amount": 3},
            {"order_id": 4, "cust_code": "C40", "amount": 4},
            {"order_id": 5, "cust_code": "c50", "amount": 5},
        ],
        [
            {"code": "c10", "name": "ann", "tier": "gold"},
            {"code": "c20", "name": "bob", "tier": "gold"},
            {"code": "C30", "name": "upper", "tier": "gold"},
            {"code": "c40", "name": "dee", "tier": "gold"},
            {"code": "c50", "name": "eve", "tier": "gold"},
            {"code": "c60", "name": "eve", "tier": "silver"},
        ],
    )
    w.refresh()
    w.apply(
        Batch(
            left_upserts=[
                {
                    "order_id": 1,
                    "cust_code": "c10",
                    "amount": 1,
                },  # same FK after lower(); cust_code unprojected
                {"order_id": 2, "cust_code": "C40", "amount": 2},  # FK change through the expression
                {"order_id": 3, "cust_code": "C30", "amount": 3},  # lower("C30") never matches "C30"
                {"order_id": 5, "cust_code": "C60", "amount": 5},  # FK change to a row with the same name
            ],
            right_upserts=[
                {"code": "c10", "name": "ann", "tier": "platinum"},  # unprojected column
                {"code": "c40", "name": "dee2", "tier": "gold"},  # fan-out to orders 2 and 4
            ],
        )
    )
    w.refresh()
    return w


def expr_out(order_id: int, name: str | None) -> Row:
    return {"order_id": order_id, "customer_name": name, "double_amount": order_id * 2}


def test_fk_expression(expr_world: World, how: str) -> None:
    expected = [
        {
            "inner": [expr_out(1, "ann"), expr_out(2, "bob"), expr_out(4, "dee"), expr_out(5, "eve")],
            "left": [
                expr_out(1, "ann"),
                expr_out(2, "bob"),
                expr_out(3, None),
                expr_out(4, "dee"),
                expr_out(5, "eve"),
            ],
        },
        {
            "inner": [expr_out(1, "ann"), expr_out(2, "dee2"), expr_out(4, "dee2"), expr_out(5, "eve")],
            "left": [
                expr_out(1, "ann"),
                expr_out(2, "dee2"),
                expr_out(3, None),
                expr_out(4, "dee2"),
                expr_out(5, "eve"),
            ],
        },
    ]
    expr_world.assert_ok(how)
    for record, want in zip(expr_world.history[how], expected, strict=True):
        assert_same_rows(record.rows.values(), want[how], ["order_id"])


def test_projection_columns(expr_world: World, how: str) -> None:
    """Output = left key + ``columns``; an input change that leaves the projected row equal writes nothing."""
    expr_world.assert_ok(how)  # includes the column list: order_id, customer_name, double_amount
    first, second = expr_world.history[how]
    assert first.result is not None and second.result is not None
    assert list(next(iter(first.rows.values()))) == ["order_id", "customer_name", "double_amount"]
    # four left rows and two right rows changed, but only two projected rows differ: only they are written
    assert second.changed == {(2,), (4,)}
    assert (second.result["rows"]["inserted"], second.result["rows"]["updated"]) == (0, 2)


# ------------------------------------------------------------------------------------------ composite FK


@pytest.fixture(scope="module")
def composite_world(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> World:
    """A two-column FK matched in order to a two-column right key with other names.

    The left key has two columns as well, and the left column names need quoting in Spark SQL.
    """
    w = World(
        spark,
        str(tmp_path_factory.mktemp("fk_composite")),
        left_schema="`order-id` INT, `line-no` INT, `cust-region` STRING, `cust-no` INT, amount INT",
        right_schema="region STRING, no INT, name STRING",
        left_key=["order-id", "line-no"],
        right_key=["region", "no"],
        outputs={how: OutputSpec(how=how, foreign_key=["cust-region", "cust-no"]) for how in HOWS},
    )
    w.create(
        [
            composite_line(1, 1, "eu", 1),
            composite_line(1, 2, "us", 1),
            composite_line(2, 1, "eu", 2),
            composite_line(2, 2, "1", None),
            composite_line(3, 1, "eu", 3),
        ],
        [
            {"region": "eu", "no": 1, "name": "eu-one"},
            {"region": "us", "no": 1, "name": "us-one"},
            {"region": "us", "no": 2, "name": "us-two"},
            {"region": "eu", "no": 3, "name": "eu-three"},
        ],
    )
    w.refresh()
    w.apply(
        Batch(
            left_upserts=[composite_line(1, 1, "us", 2)],  # FK change
            left_deletes=[(3, 2)],  # absent: (3, 1) exists, (3, 2) does not
            right_upserts=[
                {"region": "us", "no": 1, "name": "us-ONE"},  # fan-out to (us, 1) only, not (eu, 1)
                {"region": "eu", "no": 2, "name": "eu-two"},  # appears after its left row
            ],
            right_deletes=[("eu", 3)],
        )
    )
    w.refresh()
    return w


def composite_line(order: int, line: int, region: str, no: int | None) -> Row:
    return {
        "order-id": order,
        "line-no": line,
        "cust-region": region,
        "cust-no": no,
        "amount": order * 10 + line,
    }


def test_composite_fk(composite_world: World, how: str) -> None:
    def out(order: int, line: int, region: str, no: int | None, name: str | None) -> Row:
        return {**composite_line(order, line, region, no), "name": name}

    null_fk = out(2, 2, "1", None, None)  # a partly null composite FK never matches
    expected = [
        {
            "inner": [
                out(1, 1, "eu", 1, "eu-one"),
                out(1, 2, "us", 1, "us-one"),
                out(3, 1, "eu", 3, "eu-three"),
            ],
            "left": [
                out(1, 1, "eu", 1, "eu-one"),
                out(1, 2, "us", 1, "us-one"),
                out(2, 1, "eu", 2, None),
                null_fk,
                out(3, 1, "eu", 3, "eu-three"),
            ],
        },
        {
            "inner": [
                out(1, 1, "us", 2, "us-two"),
                out(1, 2, "us", 1, "us-ONE"),
                out(2, 1, "eu", 2, "eu-two"),
            ],
            "left": [
                out(1, 1, "us", 2, "us-two"),
                out(1, 2, "us", 1, "us-ONE"),
                out(2, 1, "eu", 2, "eu-two"),
                null_fk,
                out(3, 1, "eu", 3, None),
            ],
        },
    ]
    composite_world.assert_ok(how)
    for record, want in zip(composite_world.history[how], expected, strict=True):
        assert_same_rows(record.rows.values(), want[how], ["order-id", "line-no"])


# ------------------------------------------------------------------------------------ spec change


def test_spec_change_rebuilds_with_net_changes_only(spark: SparkSession, warehouse: Path) -> None:
    """Changing ``how`` on an existing output is a full rebuild that still writes only the net changes."""
    w = World(
        spark,
        str(warehouse),
        left_schema=ORDERS,
        right_schema=CUSTOMERS,
        left_key=["order_id"],
        right_key=["customer_id"],
        outputs={"out": OutputSpec(how="inner", foreign_key=["customer_id"])},
    )
    w.create(
        [{"order_id": 1, "customer_id": "a", "amount": 1}, {"order_id": 2, "customer_id": "z", "amount": 2}],
        [{"customer_id": "a", "name": "ann", "tier": "gold"}],
    )
    w.refresh()
    before = w.history["out"][0].result
    assert before is not None
    w.specs["out"]["how"] = "left"
    result = run_spec(w.specs["out"], spark=spark)
    assert result["mode"] == "full", result
    assert "spec" in result["reason"].lower(), result["reason"]
    version = result["output"]["version"]
    assert version == before["output"]["version"] + 1
    changes = read_changes(spark, w.out_path("out"), version, version)
    assert [(c["order_id"], c["_change_type"]) for c in changes] == [(2, "insert")]
    assert_same_rows(
        read_rows(spark, w.out_path("out")),
        [
            {"order_id": 1, "customer_id": "a", "amount": 1, "name": "ann", "tier": "gold"},
            {"order_id": 2, "customer_id": "z", "amount": 2, "name": None, "tier": None},
        ],
        ["order_id"],
    )


# ------------------------------------------------------------------------------------------ spec errors


@pytest.fixture(scope="module")
def small_inputs(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fk_spec_errors")
    create_table(
        spark, str(root / "left"), [{"order_id": 1, "customer_id": "a", "amount": 1}], ORDERS + ", code INT"
    )
    create_table(spark, str(root / "right"), [{"customer_id": "a", "name": "ann"}], CUSTOMERS)
    create_table(
        spark,
        str(root / "right_clash"),
        [{"customer_id": "a", "amount": 5}],
        "customer_id STRING, amount INT",
    )
    return root


def _spec(root: Path, **overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "kind": "foreign_key_join",
        "left": {"path": str(root / "left"), "key": ["order_id"]},
        "right": {"path": str(root / "right"), "key": ["customer_id"]},
        "foreign_key": ["customer_id"],
        "how": "inner",
        "output": {"path": str(root / "out")},
    }
    for field, value in overrides.items():
        if field in ("left", "right"):
            spec[field] = {**spec[field], **value}
            if not spec[field]["path"].startswith("/"):
                spec[field]["path"] = str(root / spec[field]["path"])
        else:
            spec[field] = value
    return spec


@pytest.mark.parametrize(
    ("overrides", "must_name"),
    [
        pytest.param({"left": {"key": ["nope_id"]}}, ["left.key", "nope_id"], id="missing-left-key"),
        pytest.param({"right": {"key": ["nope_cid"]}}, ["right.key", "nope_cid"], id="missing-right-key"),
        pytest.param({"foreign_key": ["nope_fk"]}, ["foreign_key", "nope_fk"], id="missing-fk-column"),
        pytest.param({"foreign_key": ["code"]}, ["foreign_key", "code"], id="fk-type-mismatch"),
        pytest.param({"foreign_key": {"expr": "code + 1"}}, ["foreign_key"], id="fk-expr-type-mismatch"),
        pytest.param({"foreign_key": ["customer_id", "amount"]}, ["foreign_key"], id="fk-arity"),
        pytest.param({"how": "outer"}, ["how"], id="bad-how"),
        pytest.param({"columns": {"x": "r.no_such_col"}}, ["columns", "no_such_col"], id="bad-projection"),
        pytest.param(
            {"right": {"path": "right_clash"}}, ["amount", "columns"], id="default-projection-clash"
        ),
    ],
)
def test_spec_errors_name_the_field(
    spark: SparkSession, small_inputs: Path, overrides: dict[str, Any], must_name: list[str]
) -> None:
    with pytest.raises(SpecError) as caught:
        run_spec(_spec(small_inputs, **overrides), spark=spark)
    message = str(caught.value)
    for text in must_name:
        assert text in message, f"{text!r} not in {message!r}"
    assert not (small_inputs / "out").exists(), "a SpecError must come before anything is written"


def test_default_projection_clash_fixed_by_columns(spark: SparkSession, small_inputs: Path) -> None:
    spec = _spec(
        small_inputs,
        right={"path": "right_clash"},
        columns={"left_amount": "l.amount", "right_amount": "r.amount"},
        output={"path": str(small_inputs / "out_clash_fixed")},
    )
    result = run_spec(spec, spark=spark)
    assert read_rows(spark, spec["output"]["path"], result["output"]["version"]) == [
        {"order_id": 1, "left_amount": 1, "right_amount": 5}
    ]


# ------------------------------------------------------------------------------------- input data checks


def _dup_join(spark: SparkSession, root: Path) -> dict[str, Any]:
    create_table(
        spark,
        str(root / "left"),
        [{"order_id": 1, "customer_id": "a", "amount": 1}, {"order_id": 2, "customer_id": "b", "amount": 2}],
        ORDERS,
    )
    create_table(
        spark,
        str(root / "right"),
        [{"customer_id": "a", "name": "ann"}, {"customer_id": "b", "name": "bob"}],
        CUSTOMERS,
    )
    return _spec(root, how="left")


@pytest.mark.parametrize("side", ["left", "right"])
def test_duplicate_keys_on_first_run(spark: SparkSession, warehouse: Path, side: str) -> None:
    spec = _dup_join(spark, warehouse)
    if side == "left":
        dup = {"order_id": 4242, "customer_id": "a", "amount": 1}
        append_rows(spark, spec["left"]["path"], [dup, {**dup, "amount": 2}])
    else:
        append_rows(spark, spec["right"]["path"], [{"customer_id": "a4242", "name": "x"}] * 2)
    with pytest.raises(InputDataError) as caught:
        run_spec(spec, spark=spark)
    assert "4242" in str(caught.value), str(caught.value)
    assert not (warehouse / "out" / "_delta_log").exists(), "nothing may be written on a data error"


def test_duplicate_keys_on_incremental_run(spark: SparkSession, warehouse: Path) -> None:
    """Three cases on one output, each undone before the next: every one must fail and write nothing."""
    spec = _dup_join(spark, warehouse)
    left, right, out = spec["left"]["path"], spec["right"]["path"], spec["output"]["path"]
    first = run_spec(spec, spark=spark)
    before = read_rows(spark, out)
    dup_right = [{"customer_id": "a4242", "name": "x"}, {"customer_id": "a4242", "name": "y"}]
    cases: dict[str, Callable[[], Any]] = {
        "left": lambda: append_rows(
            spark,
            left,
            [{"order_id": 4242, "customer_id": "a", "amount": 1}, {"order_id": 4242, "amount": 2}],
        ),
        "right, referenced": lambda: (
            upsert(spark, left, [{"order_id": 3, "customer_id": "a4242", "amount": 3}], ["order_id"]),
            append_rows(spark, right, dup_right),
        ),
        # a duplicate right key nothing references (yet): the input is still not a table
        "right, not referenced": lambda: append_rows(spark, right, dup_right),
    }
    undo = {
        "left": lambda: delete_keys(spark, left, [4242], ["order_id"]),
        "right, referenced": lambda: (
            delete_keys(spark, left, [3], ["order_id"]),
            delete_keys(spark, right, ["a4242"], ["customer_id"]),
        ),
        "right, not referenced": lambda: delete_keys(spark, right, ["a4242"], ["customer_id"]),
    }
    failures = []
    for case, introduce in cases.items():
        introduce()
        try:
            run_spec(spec, spark=spark)
            failures.append(f"{case}: no InputDataError")
        except InputDataError as exc:
            if "4242" not in str(exc):
                failures.append(f"{case}: the error does not name the key: {exc}")
        if table_version(spark, out) != first["output"]["version"]:
            failures.append(f"{case}: the output was written")
            break
        undo[case]()
    assert_same_rows(read_rows(spark, out), before, ["order_id"])
    assert not failures, "\n".join(failures)


# ------------------------------------------------------------------------------------------ the oracle


def test_oracle_matches_the_reference_basics() -> None:
    """The oracle itself, on the observable-behaviour basics (no Spark)."""
    ann = {"customer_id": "a", "name": "ann", "tier": "gold"}
    nobody = {"customer_id": None, "name": "nobody", "tier": None}
    left = [
        {"order_id": 1, "customer_id": "a", "amount": 1},
        {"order_id": 2, "customer_id": None, "amount": 2},
        {"order_id": 3, "customer_id": "a1", "amount": 3},
        {"order_id": None, "customer_id": "a", "amount": 4},
    ]
    key, rkey = ["order_id"], ["customer_id"]
    assert expected_fk_join(left, [ann, nobody], key, rkey, rkey, "inner") == [joined(left[0], ann)]
    assert expected_fk_join(left, [ann, nobody], key, rkey, rkey, "left") == [
        joined(left[0], ann),
        joined(left[1], None),
        joined(left[2], None),
    ]
    with pytest.raises(ValueError, match="duplicate"):
        expected_fk_join([left[0], left[0]], [ann], key, rkey, rkey, "left")
    projected = expected_fk_join(left, [ann], key, rkey, lambda r: r["customer_id"], "left", {"n": "r.name"})
    assert projected == [{"order_id": 1, "n": "ann"}, {"order_id": 2, "n": None}, {"order_id": 3, "n": None}]

"""The self-join (KIP-862): one read, one store, and the output of the unoptimized join, row for row.

Every refresh's appended rows are compared, as a multiset with event times, with the record-by-record
model of the two-sided join (``windowed_model``, written from the reference) and, in the property test,
with the engine's own two-sided join (``windowed_join`` with ``optimize: false``) on the same data.
Kafka's self-join behaviours are replayed with our own rows: every record joins itself, the A and B
pairs of one record, duplicates, late and expired records, and refreshes that pick up where the last one
stopped with no state but the input.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from support.windowed_streams import COLUMNS, Side, appended, ev, expected, self_spec, spec_for, with_keys
from windowed_model import Event, StreamJoinModel

from airflow_provider_fkjoin.engine import SpecError, as_self_join, run_spec


def replay(
    spark, warehouse: Path, batches: list[list[Event]], window: dict[str, int], *, two_sided: bool = False
) -> list[Counter]:
    """Append each batch, refresh the self-join and check its appended rows against the model; with
    ``two_sided``, refresh ``windowed_join(left = right = input, inner, optimize: false)`` too and check
    that it appended exactly the same rows. Returns the self-join's appended rows per refresh."""
    table = Side(spark, warehouse / "events")
    table.append([])
    specs = {"self_join": self_spec(table.path, warehouse / "out", window)}
    if two_sided:
        specs["two_sided"] = spec_for(
            table.path, table.path, warehouse / "two_sided", window, "inner", optimize=False
        )
    model = StreamJoinModel(
        window["before"], window["after"], window.get("grace", 0), "inner", same_table=True
    )
    found = []
    for number, batch in enumerate(batches):
        table.append(batch)
        want = expected(model.refresh(with_keys(batch), []))
        for name, spec in specs.items():
            result = run_spec(spec, spark=spark)
            assert result["optimized"] == (None if name == "two_sided" else "self_join"), result
            out = Path(spec["output"]["path"])
            got = Counter() if result["mode"] == "noop" else appended(spark, out, result)
            shown = f"engine {sorted(got.items())}, model {sorted(want.items())}"
            assert got == want, f"refresh {number}, {name} ({window}): {shown}"
            assert result["rows"]["pairs"] == sum(want.values())
            if name == "self_join":
                found.append(got)
    return found


def test_every_record_joins_itself_and_its_a_and_b_pairs(spark, warehouse: Path) -> None:
    [got] = replay(
        spark,
        warehouse,
        [[ev("a", 1, "x1"), ev("a", 5, "x2"), ev("b", 5, "x3")]],
        {"before": 10, "after": 10},
    )
    assert got == Counter(
        {
            ("a", "x1", "x1", 1): 1,  # x1: B with itself
            ("a", "x2", "x1", 5): 1,  # x2: A (x2 as the left row) finds x1
            ("a", "x1", "x2", 5): 1,  # x2: B (x2 as the right row) finds x1, then itself
            ("a", "x2", "x2", 5): 1,
            ("b", "x3", "x3", 5): 1,
        }
    )


def test_asymmetric_window_pairs_each_orientation_once(spark, warehouse: Path) -> None:
    """before 0, after 10: a pair (l, r) needs r no earlier than l and at most 10 later."""
    [got] = replay(
        spark,
        warehouse,
        [[ev("a", 10, "x1"), ev("a", 15, "x2"), ev("a", 5, "x3")]],
        {"before": 0, "after": 10},
    )
    assert ("a", "x1", "x2", 15) in got and ("a", "x2", "x1", 15) not in got
    assert ("a", "x3", "x1", 10) in got and ("a", "x1", "x3", 10) not in got


def test_duplicates_join_each_other_and_themselves(spark, warehouse: Path) -> None:
    batches = [[ev("a", 7, "d"), ev("a", 7, "d")], [ev("a", 7, "d")]]
    first, second = replay(spark, warehouse, batches, {"before": 5, "after": 5})
    assert first == Counter({("a", "d", "d", 7): 4})
    assert second == Counter({("a", "d", "d", 7): 5})  # with both earlier rows, both ways, and itself


def test_late_and_expired_records(spark, warehouse: Path) -> None:
    """Retention is before + after + grace = 25. A row more than 24 behind the observed time arrives
    expired: it does not join itself and no later row finds it, but it still finds the stored rows that
    have not expired (Kafka checks the stored row's expiry, not the arriving one's). A late row inside
    retention joins as usual."""
    batches = [
        [ev("a", 100, "on_time")],
        [ev("a", 200, "ahead")],
        [ev("a", 150, "expired"), ev("a", 190, "late"), ev("b", 175, "b_expired")],
        [ev("a", 176, "edge"), ev("a", 175, "just_expired")],  # the bound is 200 - 25 + 1 = 176
    ]
    got = replay(spark, warehouse, batches, {"before": 10, "after": 10, "grace": 5})
    assert got[2] == Counter(
        {("a", "late", "ahead", 200): 1, ("a", "ahead", "late", 200): 1, ("a", "late", "late", 190): 1}
    )
    assert got[3] == Counter(
        {
            ("a", "edge", "edge", 176): 1,
            ("a", "just_expired", "edge", 176): 1,  # A: the expired row finds 'edge'
            ("a", "edge", "just_expired", 176): 1,  # B: 'edge' (unexpired) is paired with it as well
        }
    )


def test_refreshes_continue_from_the_input_alone(spark, warehouse: Path) -> None:
    """No state table: the rows of earlier refreshes are re-read from the input at its consumed version,
    so each refresh (here one with another card only, then one on the first card again) pairs its new
    rows with old ones without anything kept between runs."""
    got = replay(
        spark,
        warehouse,
        [[ev("a", 10, "old"), ev("b", 10, "b_old")], [ev("c", 12, "c_only")], [ev("a", 15, "new")]],
        {"before": 10, "after": 10},
    )
    assert got[1] == Counter({("c", "c_only", "c_only", 12): 1})
    assert got[2][("a", "old", "new", 15)] == 1 and got[2][("a", "new", "old", 15)] == 1
    assert not (warehouse / "out_fkjoin_state").exists()


@pytest.mark.parametrize(
    ("window", "batch", "want"),
    [
        # A tests expiry against the observed time *before* the row: x1 (5) is 5 behind x2's own 10,
        # beyond the retention of 2, but not behind the observed time before x2 (5)
        ({"before": 5, "after": -3}, [ev("a", 5, "x1"), ev("a", 10, "x2")], {("a", "x2", "x1", 10): 1}),
        # B tests expiry against the observed time *including* the row: with a retention of 0 even the
        # row itself is expired (7 < 7 - 0 + 1), so nothing pairs
        ({"before": 0, "after": 0}, [ev("a", 7, "x1")], {}),
        # a retention of 1 keeps it: a zero-length window pairs the row with itself
        ({"before": 0, "after": 0, "grace": 1}, [ev("a", 7, "x1")], {("a", "x1", "x1", 7): 1}),
        # the upper bound clamps at 0: x1 (0) is inside x2's band [0, max(0, 2 - 5)]
        ({"before": 10, "after": -5}, [ev("a", 0, "x1"), ev("a", 2, "x2")], {("a", "x2", "x1", 2): 1}),
    ],
    ids=["a-uses-observed-before", "zero-retention", "zero-window", "clamped-upper-bound"],
)
def test_expiry_and_band_edges(spark, warehouse: Path, window: dict, batch: list[Event], want: dict) -> None:
    [got] = replay(spark, warehouse, [batch], window)
    assert got == Counter(want)


def test_windowed_join_of_a_table_with_itself_rewrites_unless_it_cannot(spark, warehouse: Path) -> None:
    table = Side(spark, warehouse / "events")
    table.append([ev("a", 1, "x1"), ev("a", 4, "x2")])
    window = {"before": 5, "after": 5}
    runs = {
        "auto": spec_for(table.path, table.path, warehouse / "auto", window, "inner"),
        "off": spec_for(table.path, table.path, warehouse / "off", window, "inner", optimize=False),
        "left": spec_for(table.path, table.path, warehouse / "left", window, "left"),
    }
    other_order = spec_for(table.path, table.path, warehouse / "order", window, "inner")
    other_order["right"] = {**other_order["right"], "order_by": ["v"]}
    runs["order"] = other_order
    results = {name: run_spec(spec, spark=spark) for name, spec in runs.items()}
    assert {name: r["optimized"] for name, r in results.items()} == {
        "auto": "self_join",
        "off": None,
        "left": None,
        "order": None,
    }
    assert appended(spark, warehouse / "auto", results["auto"]) == appended(
        spark, warehouse / "off", results["off"]
    )
    # optimize is not part of the output's identity: flipping it keeps the progress
    table.append([ev("a", 6, "x3")])
    flipped = run_spec({**runs["auto"], "optimize": False}, spark=spark)
    assert flipped["mode"] == "incremental" and flipped["optimized"] is None


def test_specs_that_cannot_be_self_joins_say_why() -> None:
    events = {"path": "/w/events", "key": ["k"], "time": "t", "order_by": ["seq"]}
    with pytest.raises(SpecError, match=r"how: a self_join is an inner join, not 'left'.*windowed_join"):
        run_spec({**self_spec(Path("/w/events"), Path("/w/out"), {"before": 1, "after": 1}), "how": "left"})
    windowed = {
        "kind": "windowed_join",
        "mode": "stream",
        "left": events,
        "right": {**events, "time": "t2"},
        "window": {"before": 1, "after": 1},
        "how": "outer",
        "output": {"path": "/w/out"},
    }
    with pytest.raises(SpecError, match=r"right.time 't2' differs from left.time 't'; how is 'outer'"):
        as_self_join(windowed)
    rewritten = as_self_join({**windowed, "right": events, "how": "inner", "columns": COLUMNS})
    assert rewritten.kind == "self_join" and rewritten.input.path == "/w/events"
    with pytest.raises(SpecError, match=r"columns: is required: both rows of a pair"):
        as_self_join({**windowed, "right": events, "how": "inner"})


def _batches(draw: st.DrawFn) -> list[list[Event]]:
    counter = iter(range(10_000))
    batches = []
    for _ in range(draw(st.integers(1, 4))):
        rows = draw(st.lists(st.tuples(st.sampled_from(["a", "b", None]), st.integers(0, 60)), max_size=7))
        batches.append([ev(k, t, f"x{next(counter)}") for k, t in rows])
    return batches


@given(
    batches=st.composite(_batches)(),
    before=st.integers(-5, 20),
    after=st.integers(-5, 20),
    grace=st.integers(0, 10),
)
@example(
    batches=[[ev("a", 5, "x0"), ev("a", 6, "x1"), ev("b", 40, "x2")], [ev("a", 2, "x3"), ev(None, 9, "x4")]],
    before=3,
    after=-2,
    grace=0,
).via("a window that does not hold its own row, and a late row")
def test_property_self_join_equals_the_unoptimized_join(
    spark, tmp_path_factory, batches: list[list[Event]], before: int, after: int, grace: int
) -> None:
    """Random single-stream inputs cut into random refreshes: every refresh of the self-join appends what
    the two-sided join appends (and what the model emits), event times included."""
    if before + after < 0:
        before = -after
    window = {"before": before, "after": after, "grace": grace}
    replay(spark, tmp_path_factory.mktemp("self_join"), batches, window, two_sided=True)

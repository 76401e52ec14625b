"""Stream-mode windowed joins (Kafka's KStream-KStream join) against a record-by-record model.

Every refresh's appended rows are compared, as a multiset, with what ``windowed_model`` (written from the
reference alone) emits for the same rows in the same refreshes: Kafka's behaviours with our own data
(window bounds, grace, late and expired rows, pending unmatched rows across refreshes, null keys, the
trigger order, ``emit_immediately``, a table joined with itself), a random property test, bad inputs
refused before any write, and a crash between the state commit and the output commit.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import create_table, table_version
from hypothesis import given
from hypothesis import strategies as st
from support.windowed_streams import EVENTS, Side, appended, ev, expected, spec_for, with_keys
from windowed_model import Event, StreamJoinModel

from airflow_provider_fkjoin.engine import InputDataError, SpecError, run_spec
from airflow_provider_fkjoin.engine.core.errors import FullRebuildRefusedError
from airflow_provider_fkjoin.engine.core.trace import phase_listener


def run_refreshes(
    spark,
    warehouse: Path,
    batches: list[tuple[list[Event], list[Event]]],
    window: dict[str, int],
    how: str,
    late: str | tuple[str, ...] = "respect_grace",
    same_table: bool = False,
) -> list[dict]:
    """Append each batch, refresh, and compare the appended rows with the model's; returns the results.
    With ``same_table`` both sides are one table (each batch's right rows are ignored). Several ``late``
    settings join the same input tables, each into an output of its own (``out_<late>``) against a model
    of its own, refreshed in that order after each batch; the results come batch by batch, in that order."""
    lates = (late,) if isinstance(late, str) else late
    left = Side(spark, warehouse / "left")
    right = left if same_table else Side(spark, warehouse / "right")
    outs = {each: warehouse / ("out" if isinstance(late, str) else f"out_{each}") for each in lates}
    left.append([])  # version 0: the empty tables
    right.append([])
    grace = window.get("grace", 0)
    models = {
        each: StreamJoinModel(window["before"], window["after"], grace, how, each, same_table=same_table)
        for each in lates
    }
    specs = {
        each: spec_for(left.path, right.path, outs[each], window, how, late_unmatched=each) for each in lates
    }
    results = []
    for number, (lefts, rights) in enumerate(batches):
        if same_table:
            rights = []
        left.append(lefts)
        if not same_table:
            right.append(rights)
        for each in lates:
            model, out = models[each], outs[each]
            want = expected(model.refresh(with_keys(lefts), with_keys(rights)))
            result = run_spec(specs[each], spark=spark)
            results.append(result)
            if result["mode"] == "noop":
                assert not want, f"refresh {number} ({each}): noop, but the model emitted {want}"
                continue
            got = appended(spark, out, result)
            shown = {"engine": sorted(got.items(), key=repr), "model": sorted(want.items(), key=repr)}
            assert got == want, f"refresh {number} ({how}, {window}, {each}): {shown}"
            if how != "inner":
                assert result["rows"]["pending"] == len(model.pending), (number, each, result["rows"])
    return results


WINDOW = {"before": 10, "after": 10, "grace": 5}


def test_inner_join_band_inclusive_and_expiry(spark, warehouse: Path) -> None:
    batches = [
        (
            [ev("a", 100, "l1"), ev("b", 100, "l2")],
            [ev("a", 110, "r1"), ev("a", 111, "r2"), ev("b", 90, "r3")],
        ),
        ([ev("a", 95, "l3")], [ev("b", 89, "r4")]),  # l3 joins r1 (110 - 95 = 15 > 10: no) and r2: no
        ([ev("a", 300, "l4")], [ev("a", 105, "r5")]),  # r5 arrives after stream time 300: l1 expired
    ]
    run_refreshes(spark, warehouse, batches, WINDOW, "inner")


def test_left_join_pending_rows_close_across_refreshes(spark, warehouse: Path) -> None:
    batches = [
        ([ev("a", 100, "l1"), ev("b", 100, "l2")], []),  # both pending
        ([], [ev("a", 105, "r1")]),  # l1 matched; l2 still pending
        ([ev("c", 114, "l3")], []),  # 114 is not > 100 + 10 + 5: nothing closes
        ([ev("c", 116, "l4")], []),  # stream time 116 closes l2 (and l3, l4 pending)
        ([], [ev("b", 101, "r2")]),  # l2 was emitted unmatched, but still joins r2: both outputs stand
        ([ev("d", 200, "l5")], [ev("x", 50, "r3")]),  # closes l3, l4; r3 never unmatched in a left join
    ]
    run_refreshes(spark, warehouse, batches, WINDOW, "left")


def test_outer_join_null_keys_and_right_unmatched(spark, warehouse: Path) -> None:
    batches = [
        ([ev(None, 10, "ln"), ev("a", 10, "l1")], [ev(None, 12, "rn"), ev("b", 12, "r1")]),
        ([ev("a", 40, "l2")], [ev("c", 41, "r2")]),
        ([], [ev("a", 9, "r3")]),  # late: joins l1 (still within retention), no unmatched emission
        ([ev("z", 100, "l3")], []),
    ]
    run_refreshes(spark, warehouse, batches, WINDOW, "outer")


def test_inner_join_drops_null_keys(spark, warehouse: Path) -> None:
    batches = [([ev(None, 10, "ln"), ev("a", 10, "l1")], [ev(None, 10, "rn"), ev("a", 10, "r1")])]
    results = run_refreshes(spark, warehouse, batches, WINDOW, "inner")
    assert results[-1]["rows"]["null_keys_dropped"] == {"left": 1, "right": 1}


def test_late_rows_respect_grace_or_emit_immediately(spark, warehouse: Path) -> None:
    batches = [
        ([ev("a", 100, "l1")], []),
        ([ev("b", 84, "l2")], []),  # 84 + 10 < 100 but 84 + 10 + 5 >= 100... closed only with grace 0
        ([ev("c", 80, "l3")], []),  # 80 + 10 + 5 < 100: closed on arrival either way
        ([ev("d", 200, "l4")], []),
    ]
    # one pair of input tables, joined once per setting (each into its own output, against its own model)
    run_refreshes(spark, warehouse, batches, WINDOW, "left", ("respect_grace", "emit_immediately"))


def test_negative_before_and_asymmetric_window(spark, warehouse: Path) -> None:
    window = {"before": -2, "after": 8, "grace": 0}
    batches = [
        ([ev("a", 10, "l1"), ev("a", 20, "l2")], [ev("a", 11, "r1"), ev("a", 12, "r2"), ev("a", 19, "r3")]),
        ([ev("a", 30, "l3")], [ev("a", 25, "r4"), ev("a", 38, "r5")]),
    ]
    run_refreshes(spark, warehouse, batches, window, "outer")


def test_same_table_joins_itself(spark, warehouse: Path) -> None:
    events = warehouse / "txns"
    out = warehouse / "pairs"
    table = Side(spark, events)
    spec = spec_for(events, events, out, {"before": 10, "after": 10}, "inner")
    model = StreamJoinModel(10, 10, 0, "inner", same_table=True)
    for batch in (
        [ev("a", 1, "x1"), ev("a", 5, "x2"), ev("b", 5, "x3")],
        [ev("a", 14, "x4"), ev("a", 3, "x5")],
    ):
        table.append(batch)
        want = expected(model.refresh(with_keys(batch), []))
        result = run_spec(spec, spark=spark)
        assert appended(spark, out, result) == want
    assert want[("a", "x4", "x4", 14)] == 1  # every row joins itself


def _events(keys: list[str | None], max_t: int) -> st.SearchStrategy[list[Event]]:
    return st.lists(st.builds(lambda k, t: (k, t), st.sampled_from(keys), st.integers(0, max_t)), max_size=6)


@given(
    data=st.data(),
    how=st.sampled_from(["inner", "left", "outer"]),
    before=st.integers(-5, 20),
    after=st.integers(-5, 20),
    grace=st.integers(0, 10),
    late=st.sampled_from(["respect_grace", "emit_immediately"]),
    same_table=st.booleans(),
)
def test_property_matches_the_model(
    spark, tmp_path_factory, data, how, before, after, grace, late, same_table
) -> None:
    if before + after < 0:
        before = -after
    keys = ["a", "b", None]
    batches = []
    counter = iter(range(10_000))
    for _ in range(data.draw(st.integers(1, 4))):
        sides = []
        for prefix in ("l", "r"):
            drawn = data.draw(_events(keys, 60))
            sides.append([ev(k, t, f"{prefix}{next(counter)}") for k, t in drawn])
        batches.append(tuple(sides))
    folder = tmp_path_factory.mktemp("windowed")
    window = {"before": before, "after": after, "grace": grace}
    run_refreshes(spark, folder, batches, window, how, late, same_table)


def test_same_table_left_join_keeps_a_row_pending_on_its_own_left_side(spark, warehouse: Path) -> None:
    """A row matched through its *right* copy stays pending as a left row (found by review: a model that
    removed the event from pending on both sides missed this unmatched emission)."""
    batches = [([ev("a", 0, "x0"), ev("a", 0, "x1"), ev("a", 1, "x2")], [])]
    run_refreshes(spark, warehouse, batches, {"before": 1, "after": -1, "grace": 1}, "left", same_table=True)


def test_bad_inputs_fail_before_any_write(spark, warehouse: Path) -> None:
    left, right, out = warehouse / "left", warehouse / "right", warehouse / "out"
    create_table(spark, left, [{"k": "a", "t": 1, "seq": 1, "v": "x"}], EVENTS)
    create_table(spark, right, [{"k": "a", "t": -5, "seq": 1, "v": "y"}], EVENTS)
    spec = spec_for(left, right, out, WINDOW, "inner")
    with pytest.raises(InputDataError, match="negative event time in column 't'"):
        run_spec(spec, spark=spark)
    assert not out.exists()
    with pytest.raises(SpecError, match="window: before"):
        run_spec(spec_for(left, right, out, {"before": 5, "after": -6}, "inner"), spark=spark)
    bad = dict(spec_for(left, right, out, WINDOW, "inner"))
    bad["left"] = {**bad["left"], "time": "v"}
    with pytest.raises(SpecError, match=r"left.time: column 'v'.*TIMESTAMP, DATE"):
        run_spec(bad, spark=spark)


def test_an_input_that_is_not_append_only_is_refused(spark, warehouse: Path) -> None:
    left, right, out = warehouse / "left", warehouse / "right", warehouse / "out"
    create_table(spark, left, [{"k": "a", "t": 1, "seq": 1, "v": "x"}], EVENTS)
    create_table(spark, right, [{"k": "a", "t": 2, "seq": 1, "v": "y"}], EVENTS)
    spec = spec_for(left, right, out, WINDOW, "left")
    run_spec(spec, spark=spark)
    spark.sql(f"UPDATE delta.`{left}` SET v = 'changed'")
    version = table_version(spark, out)
    with pytest.raises(InputDataError, match=r"left table .* is not append-only"):
        run_spec(spec, spark=spark)
    assert table_version(spark, out) == version


def test_spec_change_on_an_append_only_output_is_refused(spark, warehouse: Path) -> None:
    left, right, out = warehouse / "left", warehouse / "right", warehouse / "out"
    create_table(spark, left, [{"k": "a", "t": 1, "seq": 1, "v": "x"}], EVENTS)
    create_table(spark, right, [{"k": "a", "t": 2, "seq": 1, "v": "y"}], EVENTS)
    run_spec(spec_for(left, right, out, WINDOW, "left"), spark=spark)
    with pytest.raises(FullRebuildRefusedError, match="append-only") as refused:
        run_spec(spec_for(left, right, out, {"before": 1, "after": 1}, "left"), spark=spark)
    for way in (
        "operator argument full_refresh=True",
        "fkjoin run --full-refresh",
        "allow_full_replace: true",
    ):
        assert way in str(refused.value)  # an Airflow author and a CLI user each read how to ask
    result = run_spec(
        spec_for(left, right, out, {"before": 1, "after": 1}, "left", allow_full_replace=True), spark=spark
    )
    assert result["mode"] == "full"


def test_crash_between_state_and_output_commit_is_harmless(spark, warehouse: Path) -> None:
    left, right = Side(spark, warehouse / "left"), Side(spark, warehouse / "right")
    out = warehouse / "out"
    model = StreamJoinModel(10, 10, 5, "left")
    spec = spec_for(left.path, right.path, out, WINDOW, "left")
    first = ([ev("a", 100, "l1"), ev("b", 100, "l2")], [ev("a", 105, "r1")])
    left.append(first[0])
    right.append(first[1])
    assert appended(spark, out, run_spec(spec, spark=spark)) == expected(
        model.refresh(*map(with_keys, first))
    )

    second = ([ev("c", 200, "l3")], [])
    left.append(second[0])
    right.append([])

    class Crash(Exception):
        pass

    def crash(name: str) -> None:
        if name == "merge_started":  # the state table is written; the output commit is next
            raise Crash

    version = table_version(spark, out)
    with phase_listener(crash), pytest.raises(Crash):
        run_spec(spec, spark=spark)
    assert table_version(spark, out) == version
    result = run_spec(spec, spark=spark)
    assert appended(spark, out, result) == expected(model.refresh(*map(with_keys, second)))

"""Table-mode windowed joins (``docs/kinds/windowed-join.md``, table mode): KTable-KTable joins of plain
tables, windowed tables on the same or a shifted window ("errors this minute vs the same minute a week ago"),
and a windowed table enriched from a plain one; inner, left and outer. After every refresh the output equals
the join recomputed from scratch in Python over the inputs at the versions the refresh consumed, and the
output's change feed holds exactly one net change per changed key."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import assert_clean_changes, create_table, delete_keys, read_rows, table_version, upsert
from hypothesis import given
from hypothesis import strategies as st
from support.windowed_tables import ERRORS, MINUTE, WEEK, errors_row, output_of, scratch

from airflow_provider_fkjoin.engine import SpecError, run_spec

OWNERS = "service string, team string"


def check(spark, result: dict, out: Path, expected: dict, key: list[str], columns: list[str], before) -> None:
    assert output_of(spark, out, key, columns) == expected, result
    if before is not None and result["mode"] != "noop":
        assert_clean_changes(spark, str(out), key, before, result["output"]["version"])


def test_shifted_self_join_errors_vs_a_week_earlier(spark, warehouse: Path) -> None:
    """One windowed table joined to itself a week earlier: left and outer, across refreshes."""
    table = warehouse / "errors_per_min"
    create_table(
        spark,
        table,
        [errors_row("api", m, m, week=0) for m in range(3)]
        + [errors_row("api", m, 10 + m, week=1) for m in range(2)],
        ERRORS,
    )
    window = {"start": "ws", "end": "we"}
    specs = {
        how: {
            "kind": "windowed_join",
            "mode": "table",
            "left": {"path": str(table), "key": ["service"], "window": window},
            "right": {"path": str(table), "key": ["service"], "window": {**window, "offset": "-7d"}},
            "how": how,
            "columns": {"errors_now": "l.errors", "errors_week_ago": "r.errors"},
            "output": {"path": str(warehouse / f"vs_last_week_{how}")},
        }
        for how in ("inner", "left", "outer")
    }
    key, columns = ["service", "ws", "we"], ["errors_now", "errors_week_ago"]

    def expected(how: str) -> dict:
        rows = read_rows(spark, table)
        return scratch(
            rows,
            rows,
            key,
            lambda r: (r["service"], r["ws"] + WEEK, r["we"] + WEEK),
            how,
            lambda left, right: (left["errors"] if left else None, right["errors"] if right else None),
        )

    versions: dict[str, int | None] = dict.fromkeys(specs)
    changes = [
        lambda: upsert(
            spark, table, [errors_row("api", 1, 99, week=1), errors_row("api", 2, 7, week=1)], key
        ),
        lambda: delete_keys(
            spark, table, [("api", 0, MINUTE)], key
        ),  # week 0 minute 0: week 1's partner gone
        lambda: upsert(spark, table, [errors_row("web", 0, 1, week=0), errors_row("web", 0, 2, week=1)], key),
    ]
    for step in range(len(changes) + 1):
        for how, spec in specs.items():
            result = run_spec(spec, spark=spark)
            assert result["kind"] == "windowed_join"
            assert result["mode"] == ("full" if step == 0 else "incremental"), result
            check(
                spark, result, warehouse / f"vs_last_week_{how}", expected(how), key, columns, versions[how]
            )
            versions[how] = result["output"]["version"]
        if step < len(changes):
            changes[step]()


def test_windowed_table_enriched_from_a_plain_table(spark, warehouse: Path) -> None:
    """A right change re-joins every window of that key (the foreign-key join on the key part)."""
    errors, owners, out = warehouse / "errors", warehouse / "owners", warehouse / "errors_owned"
    create_table(
        spark, errors, [errors_row("api", m, m) for m in range(3)] + [errors_row("db", 0, 5)], ERRORS
    )
    create_table(spark, owners, [{"service": "api", "team": "core"}], OWNERS)
    spec = {
        "kind": "windowed_join",
        "mode": "table",
        "left": {"path": str(errors), "key": ["service"], "window": {"start": "ws", "end": "we"}},
        "right": {"path": str(owners), "key": ["service"]},
        "how": "left",
        "output": {"path": str(out)},
    }
    key = ["service", "ws", "we"]
    before = None
    for change in (
        None,
        lambda: upsert(
            spark,
            owners,
            [{"service": "api", "team": "platform"}, {"service": "db", "team": "d"}],
            ["service"],
        ),
        lambda: delete_keys(spark, owners, ["api"], ["service"]),
    ):
        if change:
            change()
        result = run_spec(spec, spark=spark)
        expected = scratch(
            read_rows(spark, errors),
            read_rows(spark, owners),
            key,
            lambda r: (r["service"],),
            "left",
            lambda left, right: (left["errors"], right["team"] if right else None),
        )
        got = {tuple(r[c] for c in key): (r["errors"], r["team"]) for r in read_rows(spark, out)}
        owners_now = {r["service"]: r["team"] for r in read_rows(spark, owners)}
        assert got == {k: (v[0], owners_now.get(k[0])) for k, v in expected.items()}
        if before is not None:
            assert_clean_changes(spark, str(out), key, before, result["output"]["version"])
        before = result["output"]["version"]


def test_table_mode_spec_errors(spark, warehouse: Path) -> None:
    errors, owners = warehouse / "errors", warehouse / "owners"
    base = {"kind": "windowed_join", "mode": "table", "output": {"path": str(warehouse / "o")}}
    windowed = {"path": str(errors), "key": ["service"], "window": {"start": "ws", "end": "we"}}
    plain = {"path": str(owners), "key": ["service"]}
    with pytest.raises(SpecError, match=r"right\.window: a plain left table"):
        run_spec({**base, "left": plain, "right": windowed}, spark=spark)
    with pytest.raises(SpecError, match="inner or left only"):
        run_spec({**base, "left": windowed, "right": plain, "how": "outer"}, spark=spark)
    with pytest.raises(SpecError, match=r"left\.window\.offset"):
        run_spec(
            {
                **base,
                "left": {**windowed, "window": {"start": "ws", "end": "we", "offset": 5}},
                "right": windowed,
            },
            spark=spark,
        )


@given(
    how=st.sampled_from(["inner", "left", "outer"]),
    steps=st.lists(
        st.tuples(
            st.sampled_from(["left", "right"]),
            st.sampled_from(["upsert", "delete"]),
            st.lists(st.tuples(st.integers(0, 5), st.integers(0, 3)), min_size=1, max_size=4),
        ),
        min_size=1,
        max_size=4,
    ),
    strategy=st.sampled_from(["auto", "incremental", "recompute"]),
)
def test_property_plain_tables_match_a_recompute(spark, tmp_path_factory, how, steps, strategy) -> None:
    """KTable-KTable joins: random upserts and deletes on both sides, a refresh after each, by each
    ``refresh_strategy``; the output equals the join from scratch and its change feed holds one net
    change per changed key, whichever plan ran."""
    folder = tmp_path_factory.mktemp("table_mode")
    left, right, out = folder / "left", folder / "right", folder / "out"
    schema = "id long, v int"
    create_table(spark, left, [{"id": i, "v": i} for i in range(0, 6, 2)], schema)
    create_table(spark, right, [{"id": i, "v": 10 * i} for i in range(0, 6, 3)], schema)
    spec = {
        "kind": "windowed_join",
        "mode": "table",
        "left": {"path": str(left), "key": ["id"]},
        "right": {"path": str(right), "key": ["id"]},
        "how": how,
        "columns": {"lv": "l.v", "rv": "r.v"},
        "output": {"path": str(out)},
        "refresh_strategy": strategy,
    }
    before = None
    for step in [None, *steps]:
        if step is not None:
            side, action, rows = step
            path = left if side == "left" else right
            ids = sorted({i for i, _ in rows})
            if action == "upsert":
                upsert(spark, path, [{"id": i, "v": v} for i, v in dict(rows).items()], ["id"])
            else:
                existing = {r["id"] for r in read_rows(spark, path)}
                gone = [i for i in ids if i in existing]
                if not gone:
                    continue
                delete_keys(spark, path, gone, ["id"])
        result = run_spec(spec, spark=spark)
        expected = scratch(
            read_rows(spark, left),
            read_rows(spark, right),
            ["id"],
            lambda r: (r["id"],),
            how,
            lambda lrow, rrow: (lrow["v"] if lrow else None, rrow["v"] if rrow else None),
        )
        check(spark, result, out, expected, ["id"], ["lv", "rv"], before)
        if result["mode"] == "incremental" and strategy != "auto":
            assert result["strategy"]["chosen"] == strategy, result["strategy"]
            assert "fallback" not in result["strategy"], result["strategy"]
        before = result["output"]["version"] if result["mode"] != "noop" else before
    assert table_version(spark, out) >= 0

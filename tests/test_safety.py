"""Safe by construction (``docs/safety.md``; ``docs/concepts/semantics.md``, safe by construction): one test
per class of bad input or interference. Each asserts the error type, that the message names the culprit, and
that no input and no output changed (versions and contents compared before and after); or, where the right
answer is a rebuild, that the output equals the join recomputed from scratch in Python.

``docs/safety.md`` lists every class with the test that keeps it true (``test_safety_doc_is_true``).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import test_column_names
from helpers import (
    CUSTOMERS,
    ORDERS,
    append_rows,
    create_table,
    oracle,
    output_state,
    read_rows,
    rows_at,
    write,
)
from test_stream_join import ORDERS as STREAM_ORDERS
from test_stream_join import PRODUCTS, join_spec

from airflow_provider_fkjoin.engine import (
    ConcurrentRefreshError,
    FkJoinError,
    InputDataError,
    SpecError,
    noop_result,
    run_spec,
)
from airflow_provider_fkjoin.engine.core import progress as commit_log_module
from airflow_provider_fkjoin.engine.core.errors import FullRebuildRefusedError
from airflow_provider_fkjoin.engine.core.spec import TableRef, load_spec
from airflow_provider_fkjoin.engine.core.trace import phase_listener
from airflow_provider_fkjoin.engine.delta.changes import FeedUnavailable, feed_errors
from airflow_provider_fkjoin.engine.delta.tables import DeltaHandle

ORDER_ROWS = [(1, 10, 5.0), (2, 10, 7.5), (3, 20, 1.0), (4, None, 2.0)]

CUSTOMER_ROWS = [(10, "ann"), (20, "bob"), (30, "cy")]


def snapshot(spark, *paths: Path) -> dict[str, Any]:
    """Each table's version and sorted rows (None when there is no Delta table): compare before/after."""
    state: dict[str, Any] = {}
    for path in paths:
        if not any((path / "_delta_log").glob("*.json")):
            files = sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.is_file())
            state[str(path)] = files or None
            continue
        handle = DeltaHandle(spark, TableRef(path=str(path)), "t")
        rows = sorted(json.dumps(r, sort_keys=True, default=str) for r in rows_at(spark, path))
        state[str(path)] = (handle.state().version, rows)
    return state


@pytest.fixture
def tables(spark, warehouse: Path) -> dict[str, Path]:
    orders, customers = warehouse / "orders", warehouse / "customers"
    write(spark, ORDER_ROWS, ORDERS, orders)
    write(spark, CUSTOMER_ROWS, CUSTOMERS, customers)
    return {"orders": orders, "customers": customers, "out": warehouse / "out", "w": warehouse}


def fk_spec(tables: dict[str, Path], **overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "kind": "foreign_key_join",
        "left": {"path": str(tables["orders"]), "key": ["order_id"]},
        "right": {"path": str(tables["customers"]), "key": ["customer_id"]},
        "foreign_key": ["customer_id"],
        "output": {"path": str(tables["out"])},
    }
    spec.update(overrides)
    return spec


def refused(spark, spec: dict, error: type[Exception], *culprits: str, watch: list[Path]) -> str:
    """Run ``spec``, expect ``error`` naming every culprit, and nothing changed in ``watch``."""
    before = snapshot(spark, *watch)
    with pytest.raises(error) as info:
        run_spec(spec, spark=spark)
    message = str(info.value)
    for culprit in culprits:
        assert culprit in message, message
    assert snapshot(spark, *watch) == before
    return message


# ------------------------------------------------------------------ 1. output ownership and locations


@pytest.mark.parametrize(
    "spelling",
    ["{orders}/", "file://{orders}", "file:{orders}", "{w}/./orders", "{w}/x/../orders", "/{orders}"],
)
def test_output_spelled_as_an_input_is_refused(spark, tables, spelling) -> None:
    out = spelling.format(orders=tables["orders"], w=tables["w"])
    spec = fk_spec(tables, output={"path": out})
    refused(spark, spec, SpecError, "output.path", "left", watch=[tables["orders"], tables["customers"]])


@pytest.mark.parametrize(
    ("output", "culprit"), [("{orders}/enriched", "inside left"), ("{w}", "inside output")]
)
def test_output_nested_with_an_input_is_refused(spark, tables, output, culprit) -> None:
    spec = fk_spec(tables, output={"path": output.format(orders=tables["orders"], w=tables["w"])})
    refused(spark, spec, SpecError, "output.path", culprit, watch=[tables["orders"], tables["customers"]])


@pytest.mark.parametrize(("path", "culprit"), [("out_relative", "relative"), ("ftp://host/out", "ftp")])
def test_relative_path_or_unknown_scheme_is_refused(spark, tables, path, culprit) -> None:
    spec = fk_spec(tables, output={"path": path})
    refused(spark, spec, SpecError, "output.path", culprit, watch=[tables["orders"], tables["customers"]])


def test_same_delta_table_id_on_both_sides_is_refused(spark, tables) -> None:
    copy = tables["w"] / "orders_copy"
    shutil.copytree(tables["orders"], copy)
    spec = fk_spec(tables, output={"path": str(copy)})
    refused(spark, spec, SpecError, "same Delta table as left", watch=[tables["orders"], copy])


def test_catalog_name_resolving_to_an_input_is_refused(spark, tables) -> None:
    spark.sql(f"CREATE TABLE IF NOT EXISTS default.safety_orders USING delta LOCATION '{tables['orders']}'")
    try:
        spec = fk_spec(tables, output={"name": "default.safety_orders"})
        refused(spark, spec, SpecError, "output.path", "left", watch=[tables["orders"], tables["customers"]])
    finally:
        spark.sql("DROP TABLE IF EXISTS default.safety_orders")


def test_foreign_delta_table_at_output_is_refused_then_adopted(spark, tables) -> None:
    write(spark, [(99, "theirs")], "id long, note string", tables["out"])
    spec = fk_spec(tables)
    refused(
        spark,
        spec,
        SpecError,
        str(tables["out"]),
        "did not create",
        "adopt_existing_output",
        watch=[tables["orders"], tables["customers"], tables["out"]],
    )
    result = run_spec(
        {**spec, "output": {"path": str(tables["out"]), "adopt_existing_output": True}}, spark=spark
    )
    assert result["mode"] == "full"
    assert output_state(spark, tables["out"]) == oracle(spark, result)
    again = run_spec(spec, spark=spark)  # owned now: no adopt flag needed
    assert again["mode"] == "noop"


def test_another_specs_output_is_refused(spark, tables) -> None:
    run_spec(fk_spec(tables), spark=spark)
    other = tables["w"] / "customers2"
    write(spark, CUSTOMER_ROWS, CUSTOMERS, other)
    spec = fk_spec(tables, right={"path": str(other), "key": ["customer_id"]})
    refused(
        spark,
        spec,
        SpecError,
        "belongs to an unnamed foreign_key_join",
        "adopt_existing_output",
        watch=[tables["out"]],
    )


def test_another_owners_output_is_refused_before_anything_is_read(spark, tables) -> None:
    """Two DAGs, same kind and inputs, different how and columns: the second is refused (it would rebuild
    the first's output on every run, each erasing the other's rows), by the Spark refresh and by the no-JVM
    noop check alike, until it says adopt_existing_output: true."""
    first = fk_spec(tables, output={"path": str(tables["out"]), "owner": "sales.orders_enriched"})
    run_spec(first, spark=spark)
    columns = {"amount": "l.amount", "customer": "r.name"}
    second = fk_spec(
        tables, how="left", columns=columns, output={"path": str(tables["out"]), "owner": "ops.orders_report"}
    )
    watch = [tables["out"], tables["orders"], tables["customers"]]
    refused(
        spark,
        second,
        SpecError,
        "owner 'sales.orders_enriched'",
        "owner 'ops.orders_report'",
        "adopt_existing_output: true",
        watch=watch,
    )
    unnamed = fk_spec(tables, how="left", columns=columns)
    refused(
        spark, unnamed, SpecError, "owner 'sales.orders_enriched'", "an unnamed foreign_key_join", watch=watch
    )
    assert noop_result(second) is None and noop_result(first)["mode"] == "noop"

    second["output"]["adopt_existing_output"] = True
    taken = run_spec(second, spark=spark)
    expected = {key: (amount, name) for key, (_, amount, name) in oracle(spark, taken, how="left").items()}
    assert taken["mode"] == "full"
    assert {r["order_id"]: (r["amount"], r["customer"]) for r in rows_at(spark, tables["out"])} == expected
    owner = json.loads(
        DeltaHandle(spark, TableRef(path=str(tables["out"])), "output").state().properties["fkjoin.owner"]
    )
    assert owner["owner"] == "ops.orders_report"
    refused(spark, first, SpecError, "owner 'ops.orders_report'", watch=watch)


def test_the_same_owner_editing_its_spec_rebuilds_naming_what_changed(spark, tables) -> None:
    output = {"path": str(tables["out"]), "owner": "sales.orders_enriched"}
    run_spec(fk_spec(tables, output=output), spark=spark)
    edited = fk_spec(tables, how="left", output=output)
    result = run_spec(edited, spark=spark)
    assert (result["mode"], result["reason"]) == ("full", "spec changed since the last refresh: how")
    assert output_state(spark, tables["out"]) == oracle(spark, result, how="left")
    renamed = fk_spec(tables, how="left", columns={"amount": "l.amount * 2", "name": "r.name"}, output=output)
    assert run_spec(renamed, spark=spark)["reason"] == "spec changed since the last refresh: columns"
    doubled = fk_spec(tables, how="left", columns={"amount": "l.amount * 3", "name": "r.name"}, output=output)
    assert run_spec(doubled, spark=spark)["reason"] == "spec changed since the last refresh: columns.amount"
    other = tables["w"] / "customers2"
    write(spark, CUSTOMER_ROWS, CUSTOMERS, other)
    moved = fk_spec(tables, right={"path": str(other), "key": ["customer_id"]}, output=output)
    assert run_spec(moved, spark=spark)["mode"] == "full"  # even its inputs: the owner's to change


def test_an_unnamed_output_is_claimed_by_the_same_spec_naming_its_owner(spark, tables) -> None:
    run_spec(fk_spec(tables), spark=spark)
    named = fk_spec(tables, output={"path": str(tables["out"]), "owner": "sales.orders_enriched"})
    assert noop_result(named)["mode"] == "noop" and run_spec(named, spark=spark)["mode"] == "noop"
    write(spark, [(5, 30, 1.0)], ORDERS, tables["orders"], mode="append")
    assert run_spec(named, spark=spark)["mode"] == "incremental"
    owner = json.loads(
        DeltaHandle(spark, TableRef(path=str(tables["out"])), "output").state().properties["fkjoin.owner"]
    )
    assert owner["owner"] == "sales.orders_enriched"
    refused(spark, fk_spec(tables), SpecError, "owner 'sales.orders_enriched'", watch=[tables["out"]])


def test_non_delta_files_at_output_are_refused(spark, tables) -> None:
    tables["out"].mkdir()
    (tables["out"] / "report.csv").write_text("a,b\n1,2\n")
    refused(spark, fk_spec(tables), SpecError, "holds files", watch=[tables["out"]])
    assert (tables["out"] / "report.csv").read_text() == "a,b\n1,2\n"


@pytest.mark.parametrize("leftovers", ["data files", "an empty log"])
def test_files_a_killed_create_left_do_not_block_the_rerun(spark, tables, leftovers) -> None:
    """A first refresh killed inside its create leaves a ``_delta_log`` with no commit, and perhaps data
    files no version references; the rerun creates the output over them, reading none of them."""
    (tables["out"] / "_delta_log").mkdir(parents=True)
    if leftovers == "data files":
        stray = tables["w"] / "stray"
        rows = [(7, 10, 1.0, "not joined")]
        spark.createDataFrame(rows, ORDERS + ", name string").write.parquet(str(stray))
        for part in stray.glob("part-*.parquet"):
            shutil.copy(part, tables["out"] / part.name)
    result = run_spec(fk_spec(tables), spark=spark)
    assert result["mode"] == "full" and result["output"]["version"] == 0
    assert output_state(spark, tables["out"]) == oracle(spark, result)
    assert run_spec(fk_spec(tables), spark=spark)["mode"] == "noop"


@pytest.mark.parametrize("beside", ["report.csv", "_delta_log/00000000000000000000.checkpoint.parquet"])
def test_a_log_without_commits_beside_other_files_is_still_refused(spark, tables, beside) -> None:
    """Only what a killed create leaves is gone over: a user's file, or a log that holds a checkpoint
    (a copy in progress), is someone's data."""
    (tables["out"] / "_delta_log").mkdir(parents=True)
    (tables["out"] / beside).write_text("theirs")
    refused(spark, fk_spec(tables), SpecError, "holds files", watch=[tables["out"]])
    assert (tables["out"] / beside).read_text() == "theirs"


def test_a_create_over_leftovers_never_replaces_a_table(spark, tables, monkeypatch) -> None:
    """Should another writer commit a table at the location between the leftovers check and the create
    (a race of milliseconds, forced here), the create puts that table back and fails as concurrent."""
    (tables["out"] / "_delta_log").mkdir(parents=True)
    phases: list[str] = []
    leftovers_check = DeltaHandle.left_by_failed_create

    def another_writer_commits_right_after(handle: DeltaHandle) -> bool:
        found = leftovers_check(handle)
        if found and "merge_started" in phases:
            write(spark, [(99, "theirs")], "id long, note string", tables["out"])
        return found

    monkeypatch.setattr(DeltaHandle, "left_by_failed_create", another_writer_commits_right_after)
    with phase_listener(phases.append), pytest.raises(ConcurrentRefreshError, match="restored to version 0"):
        run_spec(fk_spec(tables), spark=spark)
    assert rows_at(spark, tables["out"]) == [{"id": 99, "note": "theirs"}]
    history = spark.sql(f"DESCRIBE HISTORY delta.`{tables['out']}`").orderBy("version").collect()
    assert [row["operation"] for row in history] == ["WRITE", "CREATE OR REPLACE TABLE AS SELECT", "RESTORE"]


def test_output_records_its_owner(spark, tables) -> None:
    run_spec(fk_spec(tables), spark=spark)
    properties = DeltaHandle(spark, TableRef(path=str(tables["out"])), "output").state().properties
    owner = json.loads(properties["fkjoin.owner"])
    assert owner["kind"] == "foreign_key_join" and owner["spec"]
    assert properties["delta.enableChangeDataFeed"] == "true"


# ------------------------------------------------------------------ 2. expressions are pure row-level SQL


@pytest.mark.parametrize(
    ("expression", "construct"),
    [
        ("reflect('java.lang.System', 'getenv', 'HOME')", "reflect"),
        ("(SELECT max(id) FROM range(3))", "subquery"),
        ("rank() OVER (PARTITION BY l.customer_id ORDER BY l.amount)", "window"),
        ("rand()", "determin"),
        ("current_timestamp()", "time"),
        ("explode(array(1, 2))", "generator"),
    ],
)
def test_impure_expression_is_refused(spark, tables, expression, construct) -> None:
    spec = fk_spec(tables, columns={"bad": expression})
    message = refused(
        spark, spec, SpecError, "columns.bad", watch=[tables["orders"], tables["customers"], tables["out"]]
    )
    assert construct in message.lower(), message


def test_row_level_cast_failure_names_column_and_value(spark, tables) -> None:
    spec = fk_spec(tables, columns={"name_as_int": "CAST(r.name AS INT)"})
    message = refused(
        spark,
        spec,
        InputDataError,
        "columns.name_as_int",
        "ann",
        watch=[tables["orders"], tables["customers"], tables["out"]],
    )
    assert "try_cast" in message


# ---------------------------------------------------- 3. schema changes never get a refresh stuck


def test_added_input_column_rebuilds_with_reason(spark, tables) -> None:
    run_spec(fk_spec(tables), spark=spark)
    spark.sql(f"ALTER TABLE delta.`{tables['customers']}` ADD COLUMNS (tier STRING)")
    spark.sql(f"UPDATE delta.`{tables['customers']}` SET tier = 'gold' WHERE customer_id = 10")
    result = run_spec(fk_spec(tables), spark=spark)
    assert result["mode"] == "full" and "'tier' added" in result["reason"], result["reason"]
    tiers = {r["order_id"]: r["tier"] for r in rows_at(spark, tables["out"])}
    assert tiers == {1: "gold", 2: "gold", 3: None}
    assert run_spec(fk_spec(tables), spark=spark)["mode"] == "noop"


def test_widened_input_column_rebuilds_with_reason(spark, tables) -> None:
    run_spec(fk_spec(tables), spark=spark)
    write(
        spark,
        [(1, 10, 5), (2, 10, 7), (3, 20, 1)],
        "order_id long, customer_id long, amount bigint",
        tables["orders"],
        overwriteSchema="true",
    )
    result = run_spec(fk_spec(tables), spark=spark)
    assert result["mode"] == "full" and "'amount' changed type double -> bigint" in result["reason"]
    assert {r["order_id"]: r["amount"] for r in rows_at(spark, tables["out"])} == {1: 5, 2: 7, 3: 1}


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ("DROP COLUMN tier", "column 'tier' dropped"),
        ("RENAME COLUMN tier TO level", "column 'level' added; column 'tier' dropped"),
    ],
)
def test_dropped_or_renamed_input_column_rebuilds_with_reason(spark, tables, change, reason) -> None:
    write(
        spark,
        [(10, "ann", "gold"), (20, "bob", "silver")],
        "customer_id long, name string, tier string",
        tables["customers"],
        overwriteSchema="true",
    )
    spark.sql(
        f"ALTER TABLE delta.`{tables['customers']}` SET TBLPROPERTIES ("
        "'delta.columnMapping.mode' = 'name', 'delta.minReaderVersion' = '2', 'delta.minWriterVersion' = '5')"
    )
    run_spec(fk_spec(tables), spark=spark)
    spark.sql(f"ALTER TABLE delta.`{tables['customers']}` {change}")
    result = run_spec(fk_spec(tables), spark=spark)
    assert result["mode"] == "full" and reason in result["reason"], result["reason"]
    expected = {"order_id", "customer_id", "amount", "name", *(["level"] if "RENAME" in change else [])}
    assert set(rows_at(spark, tables["out"])[0]) == expected


def test_variant_value_column_works_across_refreshes(spark, tables) -> None:
    documents = spark.sql(
        "SELECT * FROM VALUES (10L, 'ann', parse_json('{\"a\": 1}')), (20L, 'bob', parse_json('[1, 2]')) "
        "AS c(customer_id, name, doc)"
    )
    documents.write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(
        str(tables["customers"])
    )
    run_spec(fk_spec(tables), spark=spark)
    spark.sql(
        f"UPDATE delta.`{tables['customers']}` SET doc = parse_json('{{\"a\": 2}}') WHERE customer_id = 10"
    )
    result = run_spec(fk_spec(tables), spark=spark)
    assert result["mode"] == "incremental" and result["rows"]["updated"] == 2, result
    docs = {
        r["order_id"]: r["doc"]
        for r in spark.read.format("delta")
        .load(str(tables["out"]))
        .selectExpr("order_id", "to_json(doc) AS doc")
        .collect()
    }
    assert docs == {1: '{"a":2}', 2: '{"a":2}', 3: "[1,2]"}
    assert run_spec(fk_spec(tables), spark=spark)["mode"] == "noop"


def test_projected_column_gone_is_a_spec_error(spark, tables) -> None:
    spec = fk_spec(tables, columns={"customer": "r.name"})
    run_spec(spec, spark=spark)
    write(spark, [(10,), (20,)], "customer_id long", tables["customers"], overwriteSchema="true")
    refused(spark, spec, SpecError, "columns.customer", "name", watch=[tables["out"]])


def test_map_and_struct_value_columns_work_across_refreshes(spark, tables) -> None:
    schema = "customer_id long, name string, tags map<string,string>, info struct<a:int,m:map<string,int>>"
    write(
        spark,
        [(10, "ann", {"x": "1"}, (1, {"k": 1})), (20, "bob", {}, (2, {}))],
        schema,
        tables["customers"],
        overwriteSchema="true",
    )
    first = run_spec(fk_spec(tables), spark=spark)
    spark.sql(f"UPDATE delta.`{tables['customers']}` SET tags = map('x', '2') WHERE customer_id = 10")
    spark.sql(f"UPDATE delta.`{tables['customers']}` SET name = 'bobby' WHERE customer_id = 20")
    second = run_spec(fk_spec(tables), spark=spark)
    assert second["mode"] == "incremental", second["reason"]
    assert second["rows"]["updated"] == 3 and second["rows"]["inserted"] == 0
    got = {r["order_id"]: (r["tags"], r["name"]) for r in rows_at(spark, tables["out"])}
    assert got == {1: ({"x": "2"}, "ann"), 2: ({"x": "2"}, "ann"), 3: ({}, "bobby")}
    assert first["output"]["version"] < second["output"]["version"]
    assert run_spec(fk_spec(tables), spark=spark)["mode"] == "noop"


# ------------------------------------------------------------------ 4. writes by others are detected


@pytest.mark.parametrize(
    "interference",
    [
        "DELETE FROM delta.`{out}` WHERE order_id = 1",
        "UPDATE delta.`{out}` SET name = 'forged' WHERE order_id = 2",
        "RESTORE TABLE delta.`{out}` TO VERSION AS OF 0",
    ],
)
def test_output_changed_by_others_rebuilds(spark, tables, interference) -> None:
    run_spec(fk_spec(tables), spark=spark)
    write(spark, [(5, 30, 9.0)], ORDERS, tables["orders"], mode="append")
    run_spec(fk_spec(tables), spark=spark)
    spark.sql(interference.format(out=tables["out"]))
    result = run_spec(fk_spec(tables), spark=spark)
    assert result["mode"] == "full" and "changed outside this engine" in result["reason"], result["reason"]
    assert output_state(spark, tables["out"]) == oracle(spark, result)


def test_optimize_and_properties_are_not_changes(spark, tables) -> None:
    run_spec(fk_spec(tables), spark=spark)
    spark.sql(f"OPTIMIZE delta.`{tables['out']}`")
    spark.sql(f"ALTER TABLE delta.`{tables['out']}` SET TBLPROPERTIES ('team' = 'data')")
    assert run_spec(fk_spec(tables), spark=spark)["mode"] == "noop"
    write(spark, [(6, 20, 3.0)], ORDERS, tables["orders"], mode="append")
    result = run_spec(fk_spec(tables), spark=spark)
    assert result["mode"] == "incremental"
    assert output_state(spark, tables["out"]) == oracle(spark, result)


# ------------------------------------------------------------------ 5. full-refresh escape


def test_full_refresh_rebuilds_and_rewrites_nothing_unchanged(spark, tables) -> None:
    first = run_spec(fk_spec(tables), spark=spark)
    result = run_spec(fk_spec(tables), spark=spark, full_refresh=True)
    assert result["mode"] == "full" and result["reason"] == "full refresh requested"
    assert result["rows"] == {**result["rows"], "inserted": 0, "updated": 0, "deleted": 0}
    assert output_state(spark, tables["out"]) == oracle(spark, first)


# ---------------------------------------------------- 6. exactly once without assumptions about history


def test_progress_beyond_the_scanned_history_still_commits(spark, tables, monkeypatch) -> None:
    run_spec(fk_spec(tables), spark=spark)
    monkeypatch.setattr(commit_log_module, "HISTORY_SCAN", 2)
    for _ in range(3):
        spark.sql(f"OPTIMIZE delta.`{tables['out']}`")
        spark.sql(f"ALTER TABLE delta.`{tables['out']}` SET TBLPROPERTIES ('touched' = 'yes')")
    write(spark, [(7, 10, 1.0)], ORDERS, tables["orders"], mode="append")
    result = run_spec(fk_spec(tables), spark=spark)
    assert result["mode"] == "full" and "no refresh progress" in result["reason"]
    assert output_state(spark, tables["out"]) == oracle(spark, result)
    monkeypatch.setattr(commit_log_module, "HISTORY_SCAN", 1000)
    assert run_spec(fk_spec(tables), spark=spark)["mode"] == "noop"


def test_only_genuine_feed_errors_mean_feed_unavailable(spark, tables) -> None:
    handle = DeltaHandle(spark, TableRef(path=str(tables["orders"])), "left")
    with pytest.raises(FeedUnavailable, match="left"), feed_errors(handle, 0, 1):
        raise RuntimeError("[DELTA_MISSING_CHANGE_DATA] Error getting change data for range [1 , 1]")
    with pytest.raises(RuntimeError, match="executor lost"), feed_errors(handle, 0, 1):
        raise RuntimeError("executor lost")


def stream_spec(tables: dict[str, Path], **overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "kind": "stream_table_join",
        "stream": {"path": str(tables["orders"])},
        "table": {"path": str(tables["customers"]), "key": ["customer_id"]},
        "key_mapper": ["customer_id"],
        "how": "left",
        "output": {"path": str(tables["out"])},
    }
    spec.update(overrides)
    return spec


def test_append_only_output_is_never_replaced_without_opt_in(spark, tables) -> None:
    run_spec(stream_spec(tables), spark=spark)
    changed = stream_spec(tables, how="inner")
    message = refused(
        spark,
        changed,
        FullRebuildRefusedError,
        str(tables["out"]),
        "allow_full_replace",
        watch=[tables["out"]],
    )
    assert "spec changed" in message
    result = run_spec({**changed, "allow_full_replace": True}, spark=spark)
    assert result["mode"] == "full" and result["rows"]["inserted"] == 3


def test_append_only_output_changed_by_others_keeps_appending(spark, tables) -> None:
    run_spec(stream_spec(tables), spark=spark)
    spark.sql(f"DELETE FROM delta.`{tables['out']}` WHERE order_id = 1")
    write(spark, [(8, 20, 4.0)], ORDERS, tables["orders"], mode="append")
    result = run_spec(stream_spec(tables), spark=spark)
    assert result["mode"] == "incremental" and result["rows"]["inserted"] == 1
    assert any("changed outside this engine" in w for w in result["warnings"])
    assert sorted(r["order_id"] for r in rows_at(spark, tables["out"])) == [2, 3, 4, 8]


# ------------------------------------------------------------------ 7. names and reserved columns


def test_backtick_in_an_input_column_name_is_quoted(spark, tables) -> None:
    write(
        spark,
        [(10, "ann", "x"), (20, "bob", "y")],
        "customer_id long, name string, `we``ird` string",
        tables["customers"],
        overwriteSchema="true",
    )
    # as an output column it is refused (Delta's MERGE cannot name it); renamed through columns it joins
    refused(spark, fk_spec(tables), SpecError, "column 'we`ird' holds a backtick", watch=[tables["out"]])
    renamed = fk_spec(tables, columns={"name": "r.name", "weird": "r.`we``ird`"})
    result = run_spec(renamed, spark=spark)
    assert result["mode"] == "full"
    assert {r["order_id"]: r["weird"] for r in rows_at(spark, tables["out"])} == {1: "x", 2: "x", 3: "y"}
    write(spark, [(5, 20, 3.0)], ORDERS, tables["orders"], mode="append")
    again = run_spec(renamed, spark=spark)
    assert again["mode"] == "incremental" and again["rows"]["inserted"] == 1
    assert {r["order_id"]: r["weird"] for r in rows_at(spark, tables["out"])}[5] == "y"


def test_reserved_prefix_in_an_input_is_refused(spark, tables) -> None:
    write(
        spark,
        [(10, "ann", True)],
        "customer_id long, name string, _fkjoin_present boolean",
        tables["customers"],
        overwriteSchema="true",
    )
    refused(
        spark,
        fk_spec(tables),
        SpecError,
        "_fkjoin_present",
        "right",
        watch=[tables["customers"], tables["out"]],
    )


def test_global_table_as_an_input_keeps_its_engine_columns_out(spark, tables) -> None:
    events = tables["w"] / "customers_cdc"
    write(
        spark,
        [(10, "c", 1, "ann"), (20, "c", 2, "bob")],
        "customer_id long, op string, lsn long, name string",
        events,
    )
    global_out = tables["w"] / "customers_global"
    run_spec(
        {
            "kind": "global_table_bootstrap",
            "source": {
                "path": str(events),
                "key": ["customer_id"],
                "changelog": {"op_column": "op", "order_by": ["lsn"]},
            },
            "output": {"path": str(global_out)},
        },
        spark=spark,
    )
    result = run_spec(fk_spec(tables, right={"path": str(global_out), "key": ["customer_id"]}), spark=spark)
    assert set(rows_at(spark, tables["out"])[0]) == {"order_id", "customer_id", "amount", "name"}
    assert output_state(spark, tables["out"]) == oracle(spark, result)


# ------------------------------------------------------------------ 8. key values stay out of commit history


def test_commit_history_holds_no_key_values(spark, warehouse) -> None:
    users, accounts, out = warehouse / "users", warehouse / "accounts", warehouse / "out"
    write(
        spark,
        [("alice@example.com", "acct-4111"), ("bob@example.com", "acct-5500")],
        "email string, account string",
        users,
    )
    write(spark, [("acct-4111", "gold"), ("acct-5500", "silver")], "account string, tier string", accounts)
    spec = {
        "kind": "foreign_key_join",
        "left": {"path": str(users), "key": ["email"]},
        "right": {"path": str(accounts), "key": ["account"]},
        "foreign_key": ["account"],
        "output": {"path": str(out)},
    }
    run_spec(spec, spark=spark)
    spark.sql(f"UPDATE delta.`{accounts}` SET tier = 'platinum' WHERE account = 'acct-4111'")
    spark.sql(f"UPDATE delta.`{users}` SET account = 'acct-5500' WHERE email = 'bob@example.com'")
    assert run_spec(spec, spark=spark)["mode"] == "incremental"
    history = [
        line
        for commit in sorted((out / "_delta_log").glob("*.json"))
        for line in commit.read_text().splitlines()
        if line.startswith('{"commitInfo"')
    ]
    assert len(history) == 2 and ('"MERGE"' in history[1] or '"UPDATE"' in history[1])
    log = "\n".join(history)
    for secret in (
        "alice@example.com",
        "bob@example.com",
        "acct-4111",
        "acct-5500",
        b"alice@example.com".hex(),
    ):
        assert secret not in log


@pytest.mark.parametrize("race_at", ["merge_started", "committing"])
def test_two_runs_of_one_append_refresh_append_once(spark, warehouse: Path, race_at: str) -> None:
    """A second run of the same stream refresh commits first, before the first's write begins or
    between its files and its commit: the first fails cleanly (nothing of it lands), every record is
    appended once, and a retry is a noop. The appended output is also a blind append whose row count
    the log records, as a stream input reading it needs."""
    orders, products, out = warehouse / "orders", warehouse / "products", warehouse / "out"
    create_table(spark, products, [{"product_id": 1, "name": "A"}], PRODUCTS)
    create_table(spark, orders, [{"order_id": 1, "product_id": 1, "qty": 1}], STREAM_ORDERS)
    spec = join_spec(orders, products, out, how="left")
    run_spec(spec, spark=spark)
    append_rows(spark, orders, [{"order_id": i, "product_id": 1, "qty": i} for i in (2, 3)])
    raced: list[dict] = []

    def other_run_commits_first(name: str) -> None:
        if name == race_at and not raced:
            raced.append({})
            raced[0] = run_spec(spec, spark=spark)

    with phase_listener(other_run_commits_first), pytest.raises(ConcurrentRefreshError, match="retry"):
        run_spec(spec, spark=spark)
    assert raced[0]["mode"] == "incremental" and raced[0]["rows"]["inserted"] == 2
    assert sorted(r["order_id"] for r in read_rows(spark, out)) == [1, 2, 3]
    assert run_spec(spec, spark=spark)["mode"] == "noop"
    written = DeltaHandle(spark, load_spec(spec).output, "output")
    version = raced[0]["output"]["version"]
    assert written.appended_rows(version - 1, version) == 2


# ------------------------------------------------------------------ the docs table


def test_safety_doc_is_true() -> None:
    """Every row of docs/safety.md names a test in this module or test_column_names, and every test in them
    has a row."""
    doc = (Path(__file__).resolve().parents[1] / "docs" / "safety.md").read_text()
    named = set(re.findall(r"`(test_[a-z0-9_]+)`", doc)) - {"test_safety_doc_is_true"}
    tests = {**globals(), **vars(test_column_names)}
    here = {name for name, test in tests.items() if name.startswith("test_") and callable(test)}
    here.discard("test_safety_doc_is_true")
    assert named - here == set(), f"docs/safety.md names tests that do not exist: {sorted(named - here)}"
    assert here - named == set(), f"tests missing from docs/safety.md: {sorted(here - named)}"


def test_every_engine_error_is_an_fkjoin_error() -> None:
    assert issubclass(FullRebuildRefusedError, FkJoinError)
    assert not FullRebuildRefusedError.retryable


def test_duplicates_are_found_among_many_partially_null_keys(spark, warehouse) -> None:
    """A thousand partially-null composite keys must not hide a duplicate (nor under-count null keys)."""
    left, right, out = warehouse / "pairs", warehouse / "groups", warehouse / "out"
    rows = [(i, None, 1) for i in range(1500)] + [(7, 7, 1), (7, 7, 1)]
    write(spark, rows, "a long, b long, g long", left)
    write(spark, [(1, "one")], "g long, name string", right)
    spec = {
        "kind": "foreign_key_join",
        "left": {"path": str(left), "key": ["a", "b"]},
        "right": {"path": str(right), "key": ["g"]},
        "foreign_key": ["g"],
        "output": {"path": str(out)},
    }
    refused(spark, spec, InputDataError, "duplicate keys", "a=7, b=7", "x2", watch=[left, right, out])

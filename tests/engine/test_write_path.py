"""The net-change write path (:mod:`airflow_provider_fkjoin.engine.write.net_changes`): one real-operation
commit per refresh, Delta's conflict detection kept, MERGE when the path cannot prove itself right, and
compaction that keeps deletion vectors and small files from piling up.

Every refresh is compared with a join recomputed from scratch in Python (``helpers.oracle``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from delta.tables import DeltaTable
from helpers import CUSTOMERS, ORDERS, oracle, output_state, rows_at, write
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from support.tables import SavedStates

from airflow_provider_fkjoin.engine import ConcurrentRefreshError, run_spec
from airflow_provider_fkjoin.engine.core.spec import TableRef
from airflow_provider_fkjoin.engine.core.trace import phase_listener
from airflow_provider_fkjoin.engine.delta.tables import DeltaHandle
from airflow_provider_fkjoin.engine.runtime import engine_protocol as protocol
from airflow_provider_fkjoin.engine.write import net_changes as change_writer
from airflow_provider_fkjoin.engine.write.net_changes import MergeRequired, commit_net_changes, net_changes

ORDER_ROWS = [(1, 10, 5.0), (2, 10, 7.0), (3, 20, 9.0), (4, 30, 1.0)]
CUSTOMER_ROWS = [(10, "ann"), (20, "bob"), (30, "cy")]


def _spec(root: Path) -> dict[str, Any]:
    return {
        "kind": "foreign_key_join",
        "left": {"path": str(root / "orders"), "key": ["order_id"]},
        "right": {"path": str(root / "customers"), "key": ["customer_id"]},
        "foreign_key": ["customer_id"],
        "output": {"path": str(root / "out")},
    }


@pytest.fixture(scope="module")
def states(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> tuple[SavedStates, dict[str, Any]]:
    """The module's one set of tables (fixed paths), in two saved states built once on first use:
    ``refreshed`` (the inputs and a first full refresh) and ``changed`` (then :func:`_change` on the
    inputs, not yet refreshed)."""
    root = tmp_path_factory.mktemp("write_path")
    paths = {
        "spec": _spec(root),
        "orders": root / "orders",
        "customers": root / "customers",
        "out": root / "out",
    }

    def first_refresh() -> None:
        write(spark, ORDER_ROWS, ORDERS, paths["orders"])
        write(spark, CUSTOMER_ROWS, CUSTOMERS, paths["customers"])
        first = run_spec(paths["spec"], spark=spark)
        assert first["mode"] == "full" and output_state(spark, paths["out"]) == oracle(spark, first)

    builders = {"refreshed": (None, first_refresh), "changed": ("refreshed", lambda: _change(spark, paths))}
    return SavedStates(spark, root, [paths["orders"], paths["customers"], paths["out"]], builders), paths


@pytest.fixture
def refreshed(states: tuple[SavedStates, dict[str, Any]]) -> dict[str, Any]:
    """The tables after a first full refresh: ``spec``, ``orders``, ``customers``, ``out``."""
    states[0].restore("refreshed")
    return states[1]


@pytest.fixture
def changed(states: tuple[SavedStates, dict[str, Any]]) -> dict[str, Any]:
    """The tables after a first full refresh and then one change of each kind to the inputs."""
    states[0].restore("changed")
    return states[1]


def _commits(out: Path) -> list[dict[str, Any]]:
    """Each commit's commitInfo, oldest first, read from the log files."""
    infos = []
    for path in sorted((out / "_delta_log").glob("*.json")):
        for line in path.read_text().splitlines():
            action = json.loads(line)
            if "commitInfo" in action:
                infos.append(action["commitInfo"])
    return infos


def _change(spark: SparkSession, tables: dict[str, Any]) -> None:
    """One update of each kind: an amount, an FK move, a delete, an insert, a right-side rename."""
    orders = DeltaTable.forPath(spark, str(tables["orders"]))
    orders.update("order_id = 1", {"amount": F.col("amount") + 1})
    orders.update("order_id = 2", {"customer_id": F.lit(20).cast("long")})
    orders.delete("order_id = 4")
    write(spark, [(5, 30, 2.0)], ORDERS, tables["orders"], mode="append")
    DeltaTable.forPath(spark, str(tables["customers"])).update("customer_id = 20", {"name": F.lit("bo")})


def test_incremental_refresh_is_one_update_commit_with_its_progress(spark, changed) -> None:
    spec, out = changed["spec"], changed["out"]
    result = run_spec(spec, spark=spark)
    assert result["mode"] == "incremental" and result["write_path"] == "net_changes"
    assert output_state(spark, out) == oracle(spark, result)
    last = _commits(out)[-1]
    assert last["operation"] == "UPDATE"
    assert json.loads(last["userMetadata"])["fkjoin"]["seq"] == 2
    # The change feed holds one net change per changed key, pre-images included.
    feed = (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", result["output"]["version"])
        .load(str(out))
        .select("order_id", "_change_type", "amount", "name")
        .collect()
    )
    got = sorted((r["order_id"], r["_change_type"], r["amount"], r["name"]) for r in feed)
    assert got == [
        (1, "update_postimage", 6.0, "ann"),
        (1, "update_preimage", 5.0, "ann"),
        (2, "update_postimage", 7.0, "bo"),
        (2, "update_preimage", 7.0, "ann"),
        (3, "update_postimage", 9.0, "bo"),
        (3, "update_preimage", 9.0, "bob"),
        (4, "delete", 1.0, "cy"),
        (5, "insert", 2.0, "cy"),
    ]
    assert result["rows"] | {"changes_read": None, "null_keys_dropped": None} == {
        "inserted": 1,
        "updated": 3,
        "deleted": 1,
        "left_rows_rejoined": 4,
        "changes_read": None,
        "null_keys_dropped": None,
    }


def test_a_commit_landing_during_the_refresh_fails_it_cleanly(spark, changed) -> None:
    """Delta's conflict detection is kept: a foreign commit between the transaction's read and its
    commit makes the refresh fail with nothing written; the next refresh rebuilds (the output was
    changed by someone else) and is exact."""
    spec, out = changed["spec"], changed["out"]

    def someone_writes(name: str) -> None:
        if name == "committing":
            spark.sql(f"DELETE FROM delta.`{out}` WHERE order_id = 3")

    before = len(_commits(out))
    with phase_listener(someone_writes), pytest.raises(ConcurrentRefreshError, match="retry"):
        run_spec(spec, spark=spark)
    assert len(_commits(out)) == before + 1  # the foreign DELETE only
    again = run_spec(spec, spark=spark)
    assert again["mode"] == "full" and "changed outside this engine" in again["reason"]
    assert output_state(spark, out) == oracle(spark, again)


def test_a_failed_commit_names_the_output_and_writes_nothing(spark, changed, monkeypatch) -> None:
    """A failure of the engine procedure's commit that is not a conflict (the server's disk, a bug)
    propagates as it is, with a note naming the output; the prepared commit is aborted, nothing lands,
    and the next refresh is incremental and exact."""
    spec, out = changed["spec"], changed["out"]
    call = change_writer.engine_procedure.call
    asked: list[str] = []

    def failing_commit(session: SparkSession, request: protocol.Request[Any]) -> protocol.Answer:
        asked.append(request.action)
        if request.action == "commit":
            raise OSError("No space left on device")
        return call(session, request)

    monkeypatch.setattr(change_writer.engine_procedure, "call", failing_commit)
    before = len(_commits(out))
    with pytest.raises(OSError, match="No space left on device") as raised:
        run_spec(spec, spark=spark)
    assert raised.value.__notes__ == [f"while committing the net changes of output {out}"]
    assert asked[-3:] == ["prepare", "commit", "abort"], asked
    assert len(_commits(out)) == before
    monkeypatch.setattr(change_writer.engine_procedure, "call", call)
    again = run_spec(spec, spark=spark)
    assert (again["mode"], again["write_path"]) == ("incremental", "net_changes"), again
    assert output_state(spark, out) == oracle(spark, again)


def test_an_output_that_moved_before_the_commit_is_merged(spark, changed) -> None:
    """A commit that changes no rows (a property) between planning and the write: the net-change path
    cannot vouch for the version it planned against, so MERGE writes the refresh, with a warning."""
    spec, out = changed["spec"], changed["out"]

    def someone_sets_a_property(name: str) -> None:
        if name == "merge_started":
            spark.sql(f"ALTER TABLE delta.`{out}` SET TBLPROPERTIES ('team' = 'orders')")

    with phase_listener(someone_sets_a_property):
        result = run_spec(spec, spark=spark)
    assert result["mode"] == "incremental" and result["write_path"] == "merge"
    assert any("written by MERGE" in w for w in result["warnings"])
    assert output_state(spark, out) == oracle(spark, result)


@pytest.mark.parametrize(
    ("setting", "reason"),
    [
        ("'delta.enableChangeDataFeed' = 'false'", "change data feed is off"),
        ("'delta.enableDeletionVectors' = 'false'", "deletion vectors"),
    ],
)
def test_an_output_whose_properties_were_changed_is_merged(spark, changed, setting, reason) -> None:
    """Someone turned the output's change feed or deletion vectors off between refreshes (a property
    change is not a change of rows): a hand-built commit would write change rows as data or refused
    vectors, so MERGE writes the refresh, and it is exact."""
    spec, out = changed["spec"], changed["out"]
    # the output's log is the same whether the inputs change before or after this commit of its own
    spark.sql(f"ALTER TABLE delta.`{out}` SET TBLPROPERTIES ({setting})")
    result = run_spec(spec, spark=spark)
    assert result["mode"] == "incremental" and result["write_path"] == "merge"
    assert any(reason in w for w in result["warnings"]), result["warnings"]
    assert output_state(spark, out) == oracle(spark, result)


@pytest.mark.parametrize("claim", ["insert of a held key", "unchanged key the output lacks"])
def test_changes_the_output_does_not_bear_out_are_refused_before_writing(spark, refreshed, claim) -> None:
    """The proof: the inputs' account of the affected keys must match the output's keys. An insert of a
    key the output holds, or an unchanged key it does not hold (the previous rows were wrong), is
    refused, and nothing is written."""
    out = refreshed["out"]
    output = DeltaHandle(spark, TableRef(path=str(out)), "output")
    current = output.read()
    values = ["customer_id", "amount", "name"]
    if claim == "insert of a held key":
        claimed = current.where("order_id = 1").withColumn("amount", F.lit(99.0))
        changes = net_changes(current.limit(0), claimed, ["order_id"], values)
    else:
        ghost = current.where("order_id = 1").withColumn("order_id", F.lit(77).cast("long"))
        changes = net_changes(ghost, ghost, ["order_id"], values)
    version = len(_commits(out)) - 1
    try:
        assert changes.keys == 1
        with pytest.raises(MergeRequired, match="1 affected key"):
            commit_net_changes(
                output,
                changes,
                ["order_id"],
                user_metadata="{}",
                app_id="test",
                seq=99,
                expected_version=version,
            )
    finally:
        changes.release()
    assert len(_commits(out)) == version + 1
    assert sorted((r["order_id"], r["amount"]) for r in rows_at(spark, out)) == [
        (1, 5.0),
        (2, 7.0),
        (3, 9.0),
        (4, 1.0),
    ]


def test_refreshes_compact_the_output_when_small_files_pile_up(spark, refreshed, monkeypatch) -> None:
    spec, out = refreshed["spec"], refreshed["out"]
    # A tiny table: every file counts as small, and the deleted-rows rule applies to one-row files.
    monkeypatch.setattr(change_writer, "COMPACT_SMALL_FILES", 2)
    monkeypatch.setattr(change_writer, "SMALL_FILE_SHARE", 10.0)
    monkeypatch.setattr(change_writer, "DV_MIN_ROWS", 1)  # (the first, full refresh never compacts)
    compacted: list[bool] = []
    warnings: list[str] = []
    for amount in range(4):
        DeltaTable.forPath(spark, str(refreshed["orders"])).update(
            "order_id = 1", {"amount": F.lit(float(amount))}
        )
        result = run_spec(spec, spark=spark)
        assert result["write_path"] == "net_changes"
        assert output_state(spark, out) == oracle(spark, result)
        compacted.append(result["compacted"])
        warnings.extend(result["warnings"])
    assert True in compacted, warnings
    assert "OPTIMIZE" in [c["operation"] for c in _commits(out)]
    # OPTIMIZE changes no rows: the next refresh is still incremental and exact.
    write(spark, [(6, 10, 3.0)], ORDERS, refreshed["orders"], mode="append")
    after = run_spec(spec, spark=spark)
    assert after["mode"] == "incremental" and after["write_path"] == "net_changes"
    assert output_state(spark, out) == oracle(spark, after)


def test_a_concurrent_refresh_that_changed_nothing_still_fails_the_other(spark, changed) -> None:
    """Two runs of the same refresh (same seq): the first commits no data change (only its progress),
    so no file conflicts with the second, which still must not commit the same seq again. The
    transaction reads the refresh's ``txnVersion``, so Delta fails the second commit cleanly."""
    from airflow_provider_fkjoin.engine.delta.output_log import read_output_log
    from airflow_provider_fkjoin.engine.runtime import engine_procedure

    spec, out = changed["spec"], changed["out"]
    handle = DeltaHandle(spark, TableRef(path=str(out)), "output")
    log = read_output_log(handle)

    def another_run_commits_first(name: str) -> None:
        if name == "committing":
            request = {"output": str(out), "app_id": log.app_id, "seq": log.last_seq + 1, "replaced": False}
            empty = engine_procedure.call(
                spark, protocol.Prepare(expected_version=log.latest_version, **request)
            )
            assert empty.token is not None
            engine_procedure.call(spark, protocol.Commit(token=empty.token))

    before = len(_commits(out))
    with phase_listener(another_run_commits_first), pytest.raises(ConcurrentRefreshError, match="retry"):
        run_spec(spec, spark=spark)
    assert len(_commits(out)) == before + 1  # the other run's commit only

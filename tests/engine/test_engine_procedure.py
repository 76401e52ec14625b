"""The engine's JVM side (``jvm/``, the ``engine`` procedure): every Delta internal the net-change
commit uses, exercised on the pinned versions through the same SQL call classic Spark and Spark Connect
make, plus the protocol's refusals. An upgrade that changes Delta's internals fails here first."""

from __future__ import annotations

import json
import weakref
from pathlib import Path
from typing import Any

import pytest
from pydantic import ConfigDict
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from airflow_provider_fkjoin.engine.runtime import engine_procedure, internals
from airflow_provider_fkjoin.engine.runtime import engine_protocol as protocol
from airflow_provider_fkjoin.engine.write.net_changes import key_hashes

APP = "probe-app"


def tiny_output(spark: SparkSession, path: str, rows: int = 6) -> None:
    """``id, v`` rows in one file, with the change feed and deletion vectors an output has."""
    (
        spark.range(rows)
        .selectExpr("id", "CAST(id * 10 AS BIGINT) AS v")
        .coalesce(1)
        .write.format("delta")
        .option("delta.enableChangeDataFeed", "true")
        .option("delta.enableDeletionVectors", "true")
        .save(path)
    )


def view(frame: DataFrame, name: str) -> str:
    frame.createOrReplaceTempView(name)
    return name


def located(spark: SparkSession, path: str, version: int, changes: dict[int, str]) -> DataFrame:
    """The rows of ``changes``' ids in the output at ``version``, with file, row index, key hashes, the
    change and the rows expected (1: the id has a row)."""
    live = (
        spark.read.format("delta")
        .option("versionAsOf", version)
        .load(path)
        .selectExpr("id", "_metadata.file_path AS _fkjoin_file", "_metadata.row_index AS _fkjoin_row")
    )
    wanted = spark.createDataFrame(
        [(key, change, 0 if change == "insert" else 1) for key, change in changes.items()],
        "id long, _fkjoin_change string, _fkjoin_expected int",
    )
    return live.join(wanted.select(*key_hashes(["id"]), "_fkjoin_change", "_fkjoin_expected"), "id")


def proof_of(spark: SparkSession, ids: list[int]) -> dict[str, Any]:
    """The proof the output must bear out: ``ids`` present once each (hash sums computed by Spark)."""
    sums = (
        spark.createDataFrame([(i,) for i in ids], "id long")
        .select(*key_hashes(["id"]))
        .agg(F.sum("_fkjoin_h1").alias("h1"), F.sum("_fkjoin_h2").alias("h2"))
        .first()
    )
    return {"rows": len(ids), "h1": str(sums["h1"] or 0), "h2": str(sums["h2"] or 0)}


def ask(spark: SparkSession, request: protocol.Request[Any]) -> dict[str, Any]:
    """The JVM side's answer to ``request`` as its JSON (the fields it set)."""
    return engine_procedure.call(spark, request).model_dump(mode="json", exclude_defaults=True)


def prepare(spark: SparkSession, path: str, **fields: Any) -> dict[str, Any]:
    request = {"output": path, "expected_version": 0, "app_id": APP, "seq": 1, "replaced": False}
    return ask(spark, protocol.Prepare(**(request | fields)))


def test_the_session_has_the_engine_procedure(spark) -> None:
    assert engine_procedure.unavailable_reason(spark) is None
    assert ask(spark, protocol.Describe())["status"] == "ready"


def test_net_change_deletes_by_position_and_commits_one_update(spark, warehouse: Path) -> None:
    """Locate rows by file and row index, prove the keys, write deletion vectors, new rows and change data,
    commit with a SetTransaction as an UPDATE: exactly that in the table, its feed and its log."""
    path = str(warehouse / "t")
    tiny_output(spark, path)
    rows = spark.createDataFrame(
        [(1, 11, None), (1, 11, "update_postimage"), (1, 10, "update_preimage"), (4, 40, "delete")],
        "id long, v long, _change_type string",
    )
    prepared = prepare(
        spark,
        path,
        located=view(located(spark, path, 0, {1: "update", 4: "delete", 2: None}), "probe_located"),
        replaced=True,
        rows=view(rows, "probe_rows"),
        proof=proof_of(spark, [1, 2, 4]),
    )
    assert prepared["status"] == "prepared", prepared
    assert prepared["version"] == 0
    (size, records, deleted), *others = prepared["files"]  # the output's one file, as listed
    assert (records, deleted, others) == (6, 0, []) and size > 0
    committed = ask(spark, protocol.Commit(token=prepared["token"]))
    added = committed.pop("added")
    assert committed == {"protocol": 1, "status": "committed", "version": 1}
    # the new rows' one data file, as an absolute path inside the table (where a warm state reads them)
    assert len(added) == 1 and added[0].endswith(".parquet") and str(path) in added[0], added
    table = spark.read.format("delta").load(path)
    assert sorted(tuple(r) for r in table.collect()) == [(0, 0), (1, 11), (2, 20), (3, 30), (5, 50)]
    feed = spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", 1).load(path)
    assert sorted((r["id"], r["v"], r["_change_type"]) for r in feed.collect()) == [
        (1, 10, "update_preimage"),
        (1, 11, "update_postimage"),
        (4, 40, "delete"),
    ]
    assert internals.delta_transaction_version(spark, path, APP) == 1
    assert spark.sql(f"DESCRIBE HISTORY delta.`{path}` LIMIT 1").first()["operation"] == "UPDATE"
    # the commit sent again (its answer was lost on the way back): the same answer, nothing written again
    assert ask(spark, protocol.Commit(token=prepared["token"]))["version"] == 1
    assert len(list((Path(path) / "_delta_log").glob("*.json"))) == 2


@pytest.mark.parametrize(
    ("changes", "claimed", "why"),
    [
        ({1: "update"}, [1, 3], "a key the inputs say the output holds is missing"),
        ({1: "insert"}, [], "an inserted key is already there"),
    ],
)
def test_a_proof_the_output_does_not_bear_out_is_refused_before_writing(
    spark, warehouse: Path, changes: dict[int, str], claimed: list[int], why: str
) -> None:
    path = str(warehouse / "t")
    tiny_output(spark, path)
    prepared = prepare(
        spark,
        path,
        located=view(located(spark, path, 0, changes), "probe_located"),
        replaced="update" in changes.values(),
        proof=proof_of(spark, claimed),
    )
    assert prepared["status"] == "merge_required", why
    assert "not in the output as the inputs' previous versions say" in prepared["reason"]
    # nothing committed (a deletion-vector file the locating pass wrote is referenced by no version)
    assert len(list((Path(path) / "_delta_log").glob("*.json"))) == 1
    assert sorted(tuple(r) for r in spark.read.format("delta").load(path).collect()) == [
        (i, i * 10) for i in range(6)
    ]


def test_an_output_that_moved_or_lacks_deletion_vectors_is_left_to_merge(spark, warehouse: Path) -> None:
    path, plain = str(warehouse / "t"), str(warehouse / "plain")
    tiny_output(spark, path)
    assert prepare(spark, path, expected_version=3) == {
        "protocol": 1,
        "status": "merge_required",
        "reason": "the output is at version 0, not 3 as when the refresh began",
    }
    spark.range(2).write.format("delta").option("delta.enableChangeDataFeed", "true").save(plain)
    assert "deletion vectors" in prepare(spark, plain)["reason"]


def test_concurrent_commits_conflict(spark, warehouse: Path) -> None:
    """Two transactions on one output: the second to commit fails with Delta's conflict, recognised as
    one; and a transaction that read its app id's txn version conflicts even with an empty commit of it
    (a refresh that changed nothing)."""
    path = str(warehouse / "t")
    tiny_output(spark, path)
    more = spark.createDataFrame(
        [(6, 60, None), (6, 60, "insert")], "id long, v long, _change_type string"
    )  # a new row and its change data
    first = prepare(spark, path, rows=view(more, "probe_rows"))
    second = prepare(spark, path, app_id="another-app", rows="probe_rows")
    ask(spark, protocol.Commit(token=first["token"]))
    with pytest.raises(Exception) as raised:
        ask(spark, protocol.Commit(token=second["token"]))
    assert internals.is_concurrent_modification(raised.value)
    assert not internals.is_concurrent_modification(ValueError("no"))

    empty_first, empty_second = (prepare(spark, path, expected_version=1, seq=2) for _ in range(2))
    ask(spark, protocol.Commit(token=empty_first["token"]))
    with pytest.raises(Exception) as raised:
        ask(spark, protocol.Commit(token=empty_second["token"]))
    assert internals.is_concurrent_modification(raised.value)
    with pytest.raises(Exception, match=r"no prepared commit .* \(its commit failed: "):
        ask(spark, protocol.Commit(token=empty_second["token"]))


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        ({"protocol": 2, "action": "describe"}, "protocol 2 is not understood"),
        ({"protocol": 1, "action": "rollback"}, "action 'rollback' is not one of"),
        ({"protocol": 1, "action": "commit", "token": "t", "force": True}, "field 'force' is not part of"),
        ({"protocol": 1, "action": "commit"}, "field 'token' is required"),
    ],
)
def test_a_request_the_jvm_side_does_not_understand_is_refused(spark, request_, message) -> None:
    assert engine_procedure.unavailable_reason(spark) is None  # the session names the engine's catalog
    literal = json.dumps(request_).replace("'", "\\'")
    with pytest.raises(Exception, match=message):
        procedure = f"{engine_procedure.CATALOG}.system.{engine_procedure.PROCEDURE}"
        spark.sql(f"CALL {procedure}(request => '{literal}')").collect()


class _CommitWithExtras(protocol.Commit):
    """A commit request carrying fields the protocol does not define (this side would refuse them)."""

    model_config = ConfigDict(frozen=True, extra="allow")


def test_a_request_reaches_the_jvm_side_unaltered_whatever_the_session_parses(spark) -> None:
    """Quotes, backslashes, ``${...}`` and non-ASCII text arrive as sent, even in a session that reads string
    literals raw and substitutes variables (a string literal in the SQL text would be altered)."""
    field = 'a\'b\\c "${fkjoin.probe.variable}" é'
    settings = {"spark.sql.parser.escapedStringLiterals": "true", "fkjoin.probe.variable": "substituted"}
    previous = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        with pytest.raises(Exception) as refused:
            engine_procedure.call(spark, _CommitWithExtras(token="t", **{field: 1}))
    finally:
        for key, value in previous.items():
            spark.conf.unset(key) if value is None else spark.conf.set(key, value)
    assert f"field '{field}' is not part of" in str(refused.value), str(refused.value)[:500]


def test_a_session_without_the_engine_jar_is_told_so(spark, monkeypatch) -> None:
    monkeypatch.setattr(engine_procedure, "CATALOG", "fkjoin_probe_missing")
    monkeypatch.setattr(engine_procedure, "CATALOG_CLASS", "io.github.fkjoin.engine.NoSuchCatalog")
    monkeypatch.setattr(engine_procedure, "_checked", weakref.WeakKeyDictionary())
    monkeypatch.setattr(engine_procedure, "_registered", weakref.WeakSet())
    reason = engine_procedure.unavailable_reason(spark)
    assert reason is not None and reason.startswith("the Spark session has no engine jar"), reason


class _Session:  # weak-referenceable and hashable, as the answers are kept by session
    pass


def _asked(monkeypatch, answers: list[Exception | dict]) -> _Session:
    """A session whose describe calls answer (or raise) ``answers`` in turn."""

    def describe(session: object, request: protocol.Request[Any]) -> protocol.Answer:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return request.answer(answer)

    monkeypatch.setattr(engine_procedure, "call", describe)
    monkeypatch.setattr(engine_procedure, "_checked", weakref.WeakKeyDictionary())
    return _Session()


@pytest.mark.parametrize(
    "lost",
    [
        ConnectionError("connection reset by peer"),
        RuntimeError(
            "<_MultiThreadedRendezvous: StatusCode.UNAVAILABLE: failed to connect to all addresses>"
        ),
    ],
)
def test_a_question_that_did_not_reach_the_jvm_is_asked_again(monkeypatch, lost: Exception) -> None:
    """A dropped connection while asking makes this refresh MERGE; the next refresh asks again, and then
    the answer is kept."""
    answers: list[Exception | dict] = [lost, {"protocol": 1, "status": "ready", "actions": "describe"}]
    session = _asked(monkeypatch, answers)
    first = engine_procedure.unavailable_reason(session)  # type: ignore[arg-type]
    assert first is not None and first.startswith("the engine procedure could not be reached this time"), (
        first
    )
    assert engine_procedure.unavailable_reason(session) is None  # type: ignore[arg-type]
    assert engine_procedure.unavailable_reason(session) is None  # type: ignore[arg-type]
    assert answers == []


def test_any_other_failure_to_answer_is_kept_for_the_session(monkeypatch) -> None:
    answers: list[Exception | dict] = [RuntimeError("[INTERNAL_ERROR] the catalog failed to initialise")]
    session = _asked(monkeypatch, answers)
    reason = engine_procedure.unavailable_reason(session)  # type: ignore[arg-type]
    assert reason == "the Spark session has no engine jar ([INTERNAL_ERROR] the catalog failed to initialise)"
    assert engine_procedure.unavailable_reason(session) == reason  # type: ignore[arg-type]  # not asked again


def test_a_jar_from_before_the_procedure_was_renamed_is_named_as_such(monkeypatch) -> None:
    answers: list[Exception | dict] = [
        RuntimeError(
            "java.lang.IllegalArgumentException: "
            "catalog fkjoin_engine has one procedure, net_change, not engine"
        )
    ]
    session = _asked(monkeypatch, answers)
    reason = engine_procedure.unavailable_reason(session)  # type: ignore[arg-type]
    assert reason is not None and "engine jar predates this version" in reason, reason

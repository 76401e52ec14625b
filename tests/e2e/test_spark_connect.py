"""The engine and the Airflow hook through a real Spark Connect server on 127.0.0.1 (``fkjoin
connect-server``: pyspark's own Connect server with Delta's jars; no Delta Connect plugin).

* Every join kind, refreshed over Spark Connect (the ``fkjoin`` CLI as a Connect client, as the hook runs
  it) and by the classic engine, from the same inputs at the same versions, twice (a first run, then
  changes): the outputs are the same rows. The classic engine is checked against models elsewhere; the
  foreign-key join is also checked here against a join recomputed in Python.
* The hook with a ``spark_connect`` connection: a full refresh, an incremental one, a noop (decided by the
  engine over Connect, and by the no-JVM check), bad input failing without retry (a missing column, and
  ``rand()`` refused by the Connect reading of expressions), all with their result or error class.
* ``on_kill`` during a refresh: the server-side operations are interrupted, the client ends, nothing is
  committed, and the session is released on the server.
* The client SIGKILLed at every traced phase of an incremental refresh (as ``test_fk_crash`` does under
  spark-submit): old state or new, and a retry that lands exactly one commit; killed at ``committed`` (the
  commit landed, its answer was lost), the retry finds the commit and writes nothing.

The engine runs over Connect only in child processes: a Connect session switches PySpark's functions to
Connect mode for the whole process, and this one holds the classic test session.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from e2e_support import wait_for
from helpers import (
    CUSTOMERS,
    ORDERS,
    append_rows,
    assert_clean_changes,
    assert_same_rows,
    create_table,
    delete_keys,
    oracle,
    output_state,
    read_rows,
    table_version,
    upsert,
    write,
)
from support.crash import CHANGED as CRASH_CHANGED
from support.crash import KEY as CRASH_KEY
from support.crash import PHASE_ORDER as CRASH_PHASES
from support.crash import FkCrashWorld, fk_crash_world
from support.crash import same as same_rows

from airflow_provider_fkjoin.engine import run_spec

pytestmark = pytest.mark.timeout(900)


def run_over_connect(url: str, spec: dict[str, Any]) -> dict[str, Any]:
    """``fkjoin run`` as a Spark Connect client in a child process; its result line."""
    done = subprocess.run(
        [sys.executable, "-m", "airflow_provider_fkjoin.cli", "--master", url, "run", "--spec-json",
         json.dumps(spec)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def rows(spark: Any, path: Path) -> list[tuple[Any, ...]]:
    frame = spark.read.format("delta").load(str(path))
    return sorted((tuple(row) for row in frame.collect()), key=repr)


@dataclass
class Scenario:
    """One join: its input tables (schema, first rows), its spec over them, and the changes between the
    first and the second refresh."""

    tables: dict[str, tuple[str, list[dict[str, Any]]]]
    spec: Callable[[dict[str, str], str], dict[str, Any]]
    change: Callable[[Any, dict[str, str]], None]


EVENTS = "k string, t long, seq int, v string"
SCENARIOS = {
    "foreign_key_join": Scenario(
        {
            "orders": (
                ORDERS,
                [{"order_id": i, "customer_id": 10 + i % 3, "amount": i * 1.5} for i in range(8)],
            ),
            "customers": (CUSTOMERS, [{"customer_id": 10 + i, "name": f"c{i}"} for i in range(3)]),
        },
        lambda p, out: {
            "kind": "foreign_key_join",
            "left": {"path": p["orders"], "key": ["order_id"]},
            "right": {"path": p["customers"], "key": ["customer_id"]},
            "foreign_key": ["customer_id"],
            "how": "left",
            "columns": {"customer_id": "l.customer_id", "amount": "l.amount * 2", "name": "upper(r.name)"},
            "output": {"path": out},
        },
        lambda spark, p: (
            upsert(spark, p["customers"], [{"customer_id": 11, "name": "renamed"}], ["customer_id"]),
            delete_keys(spark, p["orders"], [2], ["order_id"]),
            upsert(spark, p["orders"], [{"order_id": 3, "customer_id": 12, "amount": 9.0}], ["order_id"]),
        ),
    ),
    "global_table_bootstrap": Scenario(
        {
            "cdc": (
                "product_id long, op string, lsn long, name string",
                [
                    {"product_id": i % 4, "op": "c" if i < 4 else "u", "lsn": i, "name": f"p{i}"}
                    for i in range(7)
                ],
            )
        },
        lambda p, out: {
            "kind": "global_table_bootstrap",
            "source": {
                "path": p["cdc"],
                "key": ["product_id"],
                "changelog": {"op_column": "op", "order_by": ["lsn"]},
            },
            "output": {"path": out},
        },
        lambda spark, p: append_rows(
            spark,
            p["cdc"],
            [
                {"product_id": 1, "op": "d", "lsn": 10, "name": None},
                {"product_id": 9, "op": "c", "lsn": 11, "name": "new"},
                {"product_id": 2, "op": "u", "lsn": 12, "name": "p2b"},
            ],
        ),
    ),
    "stream_table_join": Scenario(
        {
            "stream": (
                "order_id long, product_id long",
                [{"order_id": i, "product_id": i % 3} for i in range(5)],
            ),
            "table": ("product_id long, name string", [{"product_id": i, "name": f"p{i}"} for i in range(2)]),
        },
        lambda p, out: {
            "kind": "stream_table_join",
            "stream": {"path": p["stream"]},
            "table": {"path": p["table"], "key": ["product_id"]},
            "key_mapper": ["product_id"],
            "how": "left",
            "allow_unbootstrapped_table": True,
            "output": {"path": out},
        },
        lambda spark, p: (
            upsert(spark, p["table"], [{"product_id": 2, "name": "late"}], ["product_id"]),
            append_rows(
                spark, p["stream"], [{"order_id": 10, "product_id": 2}, {"order_id": 11, "product_id": 0}]
            ),
        ),
    ),
    "windowed_join (stream)": Scenario(
        {
            "left": (
                EVENTS,
                [{"k": "a", "t": 10, "seq": 1, "v": "l1"}, {"k": "b", "t": 20, "seq": 2, "v": "l2"}],
            ),
            "right": (EVENTS, [{"k": "a", "t": 12, "seq": 1, "v": "r1"}]),
        },
        lambda p, out: {
            "kind": "windowed_join",
            "mode": "stream",
            "left": {"path": p["left"], "key": ["k"], "time": "t", "order_by": ["seq"]},
            "right": {"path": p["right"], "key": ["k"], "time": "t", "order_by": ["seq"]},
            "window": {"before": 5, "after": 5, "grace": 2},
            "how": "outer",
            "columns": {"k": "coalesce(l.k, r.k)", "lv": "l.v", "rv": "r.v"},
            "output": {"path": out},
        },
        lambda spark, p: (
            append_rows(spark, p["right"], [{"k": "b", "t": 22, "seq": 2, "v": "r2"}]),
            append_rows(spark, p["left"], [{"k": "c", "t": 40, "seq": 3, "v": "l3"}]),
        ),
    ),
    "self_join": Scenario(
        {"events": (EVENTS, [{"k": "a", "t": t, "seq": t, "v": f"e{t}"} for t in (1, 4, 30)])},
        lambda p, out: {
            "kind": "self_join",
            "input": {"path": p["events"], "key": ["k"], "time": "t", "order_by": ["seq"]},
            "window": {"before": 5, "after": 5},
            "columns": {"k": "l.k", "first": "l.v", "second": "r.v"},
            "output": {"path": out},
        },
        lambda spark, p: append_rows(spark, p["events"], [{"k": "a", "t": 33, "seq": 40, "v": "e33"}]),
    ),
    "windowed_join (table)": Scenario(
        {
            "now": (
                "service string, errors long",
                [{"service": s, "errors": i} for i, s in enumerate("abc")],
            ),
            "before": (
                "service string, errors long",
                [{"service": s, "errors": 10 + i} for i, s in enumerate("bcd")],
            ),
        },
        lambda p, out: {
            "kind": "windowed_join",
            "mode": "table",
            "left": {"path": p["now"], "key": ["service"]},
            "right": {"path": p["before"], "key": ["service"]},
            "how": "outer",
            "columns": {"errors_now": "l.errors", "errors_before": "r.errors"},
            "output": {"path": out},
        },
        lambda spark, p: (
            upsert(
                spark, p["now"], [{"service": "d", "errors": 7}, {"service": "a", "errors": 5}], ["service"]
            ),
            delete_keys(spark, p["before"], ["b"], ["service"]),
        ),
    ),
    "multiway_join": Scenario(
        {
            "review": (
                "review_id long, biz_id long, stars int",
                [{"review_id": i, "biz_id": i % 2, "stars": i} for i in range(4)],
            ),
            "business": (
                "business_id long, name string",
                [{"business_id": b, "name": f"b{b}"} for b in range(2)],
            ),
        },
        lambda p, out: {
            "kind": "multiway_join",
            "inputs": [
                {"name": "review", "path": p["review"], "key": ["review_id"], "join_keys": ["biz_id"]},
                {
                    "name": "business",
                    "path": p["business"],
                    "key": ["business_id"],
                    "join_keys": ["business_id"],
                    "aliases": [{"from": "business_id", "to": "biz_id"}],
                },
            ],
            "output": {"path": out, "pkey": ["review_id"]},
        },
        lambda spark, p: (
            upsert(spark, p["business"], [{"business_id": 1, "name": "renamed"}], ["business_id"]),
            upsert(spark, p["review"], [{"review_id": 0, "biz_id": 1, "stars": 5}], ["review_id"]),
        ),
    ),
}

SCENARIOS["foreign_key_join (warm state)"] = Scenario(
    SCENARIOS["foreign_key_join"].tables,
    lambda p, out: {**SCENARIOS["foreign_key_join"].spec(p, out), "warm_state": True},
    SCENARIOS["foreign_key_join"].change,
)


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_every_kind_over_spark_connect_equals_the_classic_engine(
    spark: Any, spark_connect_server: Any, tmp_path: Path, name: str
) -> None:
    scenario = SCENARIOS[name]
    paths = {table: str(tmp_path / table) for table in scenario.tables}
    for table, (schema, first) in scenario.tables.items():
        create_table(spark, paths[table], first, schema)
    classic_spec = scenario.spec(paths, str(tmp_path / "out_classic"))
    connect_spec = scenario.spec(paths, str(tmp_path / "out_connect"))
    for refresh in ("first", "second"):
        if refresh == "second":
            scenario.change(spark, paths)
        classic = run_spec(classic_spec, spark=spark)
        remote = run_over_connect(spark_connect_server.url, connect_spec)
        assert remote["mode"] == classic["mode"], (refresh, remote, classic)
        assert remote["inputs"] == classic["inputs"], refresh
        # the same write path: the engine's net-change commit over Connect too, not a MERGE fallback
        assert remote.get("write_path") == classic.get("write_path"), (refresh, remote, classic)
        if connect_spec.get("warm_state"):
            # the first client's refresh built the state in the server's JVM; the second client uses it
            assert remote["warm_state"]["used"] == (refresh == "second"), remote["warm_state"]
        got = rows(spark, tmp_path / "out_connect")
        assert got == rows(spark, tmp_path / "out_classic"), f"{name}, {refresh} refresh"
        assert got, f"{name}: an empty output proves nothing"


# -- the hook --------------------------------------------------------------------------------------------
@pytest.fixture
def connect_conn(spark_connect_server: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    """A ``spark_connect`` connection (the Spark provider's type) to the test server."""
    conn = {"conn_type": "spark_connect", "host": "127.0.0.1", "port": spark_connect_server.port}
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_CONNECT_E2E", json.dumps(conn))
    return "spark_connect_e2e"


def _fk(tmp_path: Path, **overrides: Any) -> dict[str, Any]:
    return {
        "kind": "foreign_key_join",
        "left": {"path": str(tmp_path / "orders"), "key": ["order_id"]},
        "right": {"path": str(tmp_path / "customers"), "key": ["customer_id"]},
        "foreign_key": ["customer_id"],
        "how": "left",
        "output": {"path": str(tmp_path / "out")},
        **overrides,
    }


def test_hook_refresh_noop_and_bad_input_through_spark_connect(
    spark: Any, connect_conn: str, tmp_path: Path
) -> None:
    from airflow_provider_fkjoin.hooks.fkjoin import FkJoinBadInputError, FkJoinHook

    write(spark, [(1, 10, 1.0), (2, 20, 2.0), (3, None, 3.0)], ORDERS, tmp_path / "orders")
    write(spark, [(10, "a"), (20, "b")], CUSTOMERS, tmp_path / "customers")
    spec = _fk(tmp_path)
    first = FkJoinHook(connect_conn).run(spec)
    assert (first["mode"], first["source"]) == ("full", "driver_stdout"), first
    assert output_state(spark, tmp_path / "out") == oracle(spark, first, "left")

    upsert(spark, str(tmp_path / "customers"), [{"customer_id": 20, "name": "B"}], ["customer_id"])
    delete_keys(spark, str(tmp_path / "orders"), [1], ["order_id"])
    second = FkJoinHook(connect_conn).run(spec)
    assert (second["mode"], second["write_path"]) == ("incremental", "net_changes"), second
    assert output_state(spark, tmp_path / "out") == oracle(spark, second, "left")
    history = spark.sql(f"DESCRIBE HISTORY delta.`{tmp_path / 'out'}` LIMIT 1").first()
    assert history["operation"] == "UPDATE", history  # the net-change commit, not MERGE

    engine_noop = FkJoinHook(connect_conn, noop_check=False).run(spec)
    assert (engine_noop["mode"], engine_noop["source"]) == ("noop", "driver_stdout")
    checked_noop = FkJoinHook(connect_conn).run(spec)
    assert (checked_noop["mode"], checked_noop["source"]) == ("noop", "precheck")

    with pytest.raises(FkJoinBadInputError, match=r"columns\.x"):
        FkJoinHook(connect_conn).run(
            _fk(tmp_path, columns={"x": "l.no_such_column"}, output={"path": str(tmp_path / "o2")})
        )
    with pytest.raises(
        FkJoinBadInputError, match=r"columns\.noise: expression 'rand\(\)' uses a non-deterministic"
    ):
        FkJoinHook(connect_conn).run(
            _fk(tmp_path, columns={"noise": "rand()"}, output={"path": str(tmp_path / "o3")})
        )
    assert not (tmp_path / "o2").exists() and not (tmp_path / "o3").exists()


def _refresh_commits(spark: Any, path: Path) -> list[dict[str, Any]]:
    """The output's refresh commits (their progress payload), oldest first; none when it has no table.

    A kill during the first refresh can leave data files and an empty ``_delta_log`` folder (Delta makes
    it before committing version 0): that is no table yet, so no commit."""
    if not any((path / "_delta_log").glob("*.json")):
        return []
    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").orderBy("version").collect()
    return [json.loads(r["userMetadata"])["fkjoin"] for r in history if r["userMetadata"]]


def _assert_output_is_the_recompute(spark: Any, tmp_path: Path, progress: dict[str, Any]) -> None:
    """The output equals the killed refresh's join recomputed from scratch at the versions it pinned."""
    versions = {side: info["version"] for side, info in progress["inputs"].items()}
    orders = spark.read.format("delta").option("versionAsOf", versions["left"]).load(str(tmp_path / "orders"))
    customers = (
        spark.read.format("delta").option("versionAsOf", versions["right"]).load(str(tmp_path / "customers"))
    )
    expected = (
        orders.alias("l")
        .join(customers.alias("r"), "customer_id", "left")
        .selectExpr("l.order_id", "l.amount * 2 AS amount", "r.name")
    )
    output = spark.read.format("delta").load(str(tmp_path / "out")).select("order_id", "amount", "name")

    def digest(rows: Any) -> tuple[int, int, int]:
        """Row count, distinct keys and an order-free checksum of every row: one scan, not two set
        differences of 3M rows."""
        found = rows.selectExpr(
            "count(*) AS n",
            "count(DISTINCT order_id) AS keys",
            "sum(CAST(xxhash64(order_id, amount, name) AS DECIMAL(38, 0))) AS h",
        ).first()
        return found["n"], found["keys"], found["h"]

    assert digest(output) == digest(expected)
    assert digest(output)[:2] == (3_000_000, 3_000_000)


def test_on_kill_interrupts_the_refresh_and_releases_its_session(
    spark: Any, connect_conn: str, tmp_path: Path
) -> None:
    """A refresh over a few million rows is killed once its write has begun (``merge_started``: the
    output's creation, seconds of work on the server). The kill can land before the commit (the operation
    is interrupted, the refresh fails, the output gets no commit) or, on a fast server, just after it (a
    Delta commit is atomic: the output then holds exactly the refresh's result). Either way the client
    ends, the session is gone on the server, and a rerun lands one clean refresh or finds nothing to do (or,
    when the killed refresh's commit lands while the rerun runs, loses to it, writes nothing, and its retry
    finds nothing to do)."""
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    from airflow_provider_fkjoin.hooks.fkjoin import FkJoinHook, FkJoinRetryableError

    (
        spark.range(3_000_000)
        .selectExpr("id AS order_id", "id % 1000 AS customer_id", "CAST(id AS DOUBLE) AS amount")
        .write.format("delta").option("delta.enableChangeDataFeed", "true").save(str(tmp_path / "orders"))
    )  # fmt: skip
    write(spark, [(i, f"c{i}") for i in range(1000)], CUSTOMERS, tmp_path / "customers")
    spec = _fk(tmp_path, columns={"amount": "l.amount * 2", "name": "r.name"})
    hook = FkJoinHook(connect_conn, env_vars={"FKJOIN_TRACE": "1"})
    failures: list[BaseException] = []

    def refresh() -> None:
        try:
            hook.run(spec)
        except BaseException as error:
            failures.append(error)

    thread = threading.Thread(target=refresh, daemon=True)
    thread.start()
    wait_for(
        lambda: (
            (hook.driver_output is not None and "merge_started" in hook.driver_output.phases)
            or not thread.is_alive()
        ),
        timeout_s=300,
        interval_s=0.05,
        what="the refresh's write to begin",
    )
    assert hook.driver_output is not None and "merge_started" in hook.driver_output.phases, failures
    hook.on_kill()
    thread.join(60)
    assert not thread.is_alive(), "the killed refresh's client must end"
    assert hook._connect_run is not None and hook._connect_run._process.poll() is not None

    def session_released() -> bool:
        session = ConnectSession.builder.remote(hook._connect_run.url).create()
        try:
            session.sql("SELECT 1").collect()
        except Exception as error:  # the server's answer for a released session
            return "SESSION_CLOSED" in str(error) or "INVALID_HANDLE" in str(error)
        return False

    # on_kill waits at most 3 s (Airflow's grace period) for the interrupt and the release: on a loaded
    # machine they land later. A released session runs nothing more, so what is committed now is final.
    wait_for(session_released, timeout_s=60, what="the server to release the killed refresh's session")
    commits = _refresh_commits(spark, tmp_path / "out")
    if commits:  # the kill landed after the commit: nothing is lost, nothing is half-written
        assert len(commits) == 1
        _assert_output_is_the_recompute(spark, tmp_path, commits[0])
    else:  # interrupted mid-operation, or between two of them: either way the refresh failed
        assert failures, "a refresh killed before its commit must fail"

    # A released session's operation is interrupted, not awaited: a write already under way may still
    # commit after the release. Before the rerun reads the output, the rerun finds nothing to do; while it
    # runs, the rerun's own commit loses, writes nothing and is retried, as Airflow retries the task.
    try:
        rerun = FkJoinHook(connect_conn).run(spec)
    except FkJoinRetryableError as error:
        assert not commits and "ConcurrentRefreshError" in str(error), error
        commits = _refresh_commits(spark, tmp_path / "out")
        assert len(commits) == 1, "the conflict was the killed refresh's commit"
        rerun = FkJoinHook(connect_conn).run(spec)
    after = _refresh_commits(spark, tmp_path / "out")
    assert len(after) == 1, "the killed refresh and its rerun land one refresh between them"
    assert rerun["mode"] in (("noop",) if commits else ("noop", "full")), rerun
    _assert_output_is_the_recompute(spark, tmp_path, after[0])


def test_a_connect_server_without_the_engine_jar_still_refreshes_through_merge(
    spark: Any, spark_connect_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Someone else's Connect server has no engine jar: the client finds no procedure (here, the session
    names a catalog class the server lacks), warns, and writes the refresh with Delta's MERGE; the result
    says so."""
    write(spark, [(1, 10, 1.0), (2, 20, 2.0)], ORDERS, tmp_path / "orders")
    write(spark, [(10, "a"), (20, "b")], CUSTOMERS, tmp_path / "customers")
    spec = _fk(tmp_path)
    absent = "spark.sql.catalog.fkjoin_engine=io.github.fkjoin.engine.AbsentCatalog"
    monkeypatch.setenv("FKJOIN_SPARK_CONF", absent)
    assert run_over_connect(spark_connect_server.url, spec)["mode"] == "full"
    upsert(spark, str(tmp_path / "customers"), [{"customer_id": 20, "name": "B"}], ["customer_id"])
    second = run_over_connect(spark_connect_server.url, spec)
    assert (second["mode"], second["write_path"]) == ("incremental", "merge"), second
    assert any("no engine jar" in warning for warning in second["warnings"]), second["warnings"]
    assert output_state(spark, tmp_path / "out") == oracle(spark, second, "left")


# -- kills at every phase, and the retry after a lost answer ----------------------------------------------
@pytest.fixture(scope="module")
def crash_world(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> FkCrashWorld:
    """``test_fk_crash``'s world, prepared once for the kills below and put back before each."""
    return fk_crash_world(spark, tmp_path_factory.mktemp("connect_crash"))


@pytest.mark.parametrize("phase", CRASH_PHASES)
def test_a_connect_client_killed_at_each_phase_leaves_old_or_new_and_the_retry_lands_once(
    spark: Any, spark_connect_server: Any, crash_world: FkCrashWorld, phase: str
) -> None:
    """The refresh's Connect client (the ``fkjoin`` CLI as the hook runs it) is SIGKILLed the moment it
    traces ``phase``, as a worker dies, then its session is interrupted and released as ``on_kill`` does.
    The output is the old state or the new one, never a mix; nothing commits before ``committing``; at
    ``committed`` the commit landed and its answer was lost, so the retry must find it (the refresh's
    transaction id) and write nothing. The retry, over Connect, reaches the new state: the killed refresh
    and the retry land exactly one clean commit between them."""
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    from airflow_provider_fkjoin.hooks.connect import SparkConnectRun

    crash_world.restore(CRASH_CHANGED)  # the same paths, tables and versions before every kill
    spec, spec_path = crash_world.spec, crash_world.spec_path
    out = spec["output"]["path"]
    base_version, old_rows, new_rows = crash_world.base_version, crash_world.old_rows, crash_world.new_rows
    versions = crash_world.versions

    client = SparkConnectRun(spark_connect_server.url, env_vars={"FKJOIN_TRACE": "1"})
    traced: list[str] = []
    #: phases the child had already traced when the kill landed (it runs ahead of this reader)
    after_kill: list[str] = []

    def on_line(line: str) -> None:
        if not line.startswith("FKJOIN_PHASE "):
            return
        if traced[-1:] == [phase]:
            after_kill.append(line.split()[1])
            return
        traced.append(line.split()[1])
        if traced[-1] == phase and client._process is not None:
            client._process.kill()

    returncode = client.run(["run", str(spec_path)], on_line)
    assert traced == CRASH_PHASES[: CRASH_PHASES.index(phase) + 1], traced
    assert returncode == -signal.SIGKILL, returncode
    client.on_kill()

    def session_released() -> bool:
        session = ConnectSession.builder.remote(client.url).create()
        try:
            session.sql("SELECT 1").collect()
        except Exception as error:  # the server's answer for a released session
            return "SESSION_CLOSED" in str(error) or "INVALID_HANDLE" in str(error)
        finally:
            session.client.close()  # the channel only: a stop() would release the session itself
        return False

    wait_for(session_released, timeout_s=60, what="the server to release the killed client's session")
    version = table_version(spark, out)
    may_have_committed = phase == "committing" or "committing" in after_kill
    if phase == "committed":
        assert version == base_version + 1, "the refresh committed before tracing 'committed'"
    elif not may_have_committed:
        assert version == base_version, f"nothing may be committed before 'committing' (killed at {phase})"
    assert version in (base_version, base_version + 1), (base_version, version)
    assert same_rows(read_rows(spark, out, version), old_rows if version == base_version else new_rows)

    retry = run_over_connect(spark_connect_server.url, json.loads(spec_path.read_text()))
    landed = table_version(spark, out)
    # a commit sent just before the kill at 'committing' may land after the check above: the retry then
    # finds it as surely as one that landed before
    assert landed == base_version + 1 == retry["output"]["version"], (base_version, landed, retry)
    if phase == "committed":
        assert retry["mode"] == "noop", retry
    elif may_have_committed:
        assert retry["mode"] in ("noop", "incremental"), retry
    else:
        assert (retry["mode"], retry["write_path"]) == ("incremental", "net_changes"), retry
    assert (retry["inputs"]["left"]["to_version"], retry["inputs"]["right"]["to_version"]) == versions
    assert_same_rows(read_rows(spark, out), new_rows, CRASH_KEY)
    assert_clean_changes(spark, out, CRASH_KEY, base_version, base_version + 1, before_rows=old_rows)

"""How many Spark jobs and SQL executions a small incremental refresh runs, counted, not timed.

A refresh's fixed cost is its number of separate Spark actions (each plans, lists the Delta files it
reads and schedules its stages), not the rows it touches. These bounds keep that number from creeping
back unseen: a change that adds an action to a kind's refresh fails here and must raise the bound on
purpose. Counted from Spark's own scheduler and SQL status store, after its listener bus is drained.
Every refresh is also checked against a recompute, so a bound is never met by skipping work.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from delta.tables import DeltaTable
from helpers import (
    CUSTOMERS,
    ORDERS,
    append_rows,
    create_table,
    delete_keys,
    oracle,
    output_state,
    read_rows,
    upsert,
    write,
)
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from support.global_tables import PRODUCTS as CATALOG
from support.global_tables import spec_for as global_table_spec
from support.global_tables import state
from support.multiway_worlds import (
    BUSINESS,
    BUSINESS_INPUT,
    OWNER,
    OWNER_INPUT,
    REVIEW,
    REVIEW_INPUT,
    World,
    as_rows,
    net_counts,
    output_rows,
)
from support.stream_table_joins import ORDERS as LOOKUP_ORDERS
from support.stream_table_joins import PRODUCTS, join_spec, out_rows
from support.windowed_streams import Side, appended, ev, self_spec, with_keys
from support.windowed_streams import expected as model_rows
from support.windowed_streams import spec_for as windowed_stream_spec
from support.windowed_tables import ERRORS, MINUTE, WEEK, errors_row, output_of, scratch
from windowed_model import Event, StreamJoinModel

from airflow_provider_fkjoin.engine import SpecError, run_spec
from airflow_provider_fkjoin.engine.core.trace import phase_listener
from airflow_provider_fkjoin.engine.runtime.session import UNCLONED_CACHE_SETTINGS


class Counted(NamedTuple):
    result: dict[str, Any]
    jobs: int
    executions: int
    #: Jobs that rebuilt a table version's state (Delta's "Compute snapshot for version" executions).
    snapshot_jobs: int = 0


def _settled(spark: SparkSession) -> tuple[int, int]:
    """(jobs submitted so far, the newest SQL execution's id), once Spark's listeners caught up. The id, not
    the status store's size: the store keeps only the newest ``spark.sql.ui.retainedExecutions`` (1,000),
    so in a long session its size stops growing and a count by size would always be 0."""
    context = spark.sparkContext._jsc.sc()  # type: ignore[union-attr]
    context.listenerBus().waitUntilEmpty()
    executions = spark._jsparkSession.sharedState().statusStore().executionsList()  # type: ignore[attr-defined]
    newest = executions.apply(executions.size() - 1).executionId() if executions.size() else -1
    return int(context.dagScheduler().nextJobId()), int(newest)


def counted(spark: SparkSession, refresh: Callable[[], dict[str, Any]]) -> Counted:
    """Run ``refresh`` and count the Spark jobs and SQL executions (nested ones included) it started."""
    jobs_before, executions_before = _settled(spark)
    result = refresh()
    jobs_after, executions_after = _settled(spark)
    return Counted(
        result,
        jobs_after - jobs_before,
        executions_after - executions_before,
        _snapshot_jobs(spark, executions_before),
    )


def _snapshot_jobs(spark: SparkSession, after_execution: int) -> int:
    """The jobs of Delta's table-state reconstructions ("Delta: Compute snapshot for version: N") among
    the SQL executions newer than ``after_execution``."""
    executions = spark._jsparkSession.sharedState().statusStore().executionsList()  # type: ignore[attr-defined]
    jobs = 0
    for index in range(executions.size()):
        execution = executions.apply(index)
        if execution.executionId() > after_execution and str(execution.description()).startswith(
            "Delta: Compute snapshot"
        ):
            jobs += execution.jobs().size()
    return jobs


Change = Callable[[], object]


def count_second_refresh(
    spark: SparkSession, spec: dict[str, Any], change_1: Change, change_2: Change
) -> Counted:
    """A full refresh, ``change_1`` and a warm-up incremental refresh (the first one of a kind in a session
    also loads classes and fills caches: no cost of the refresh itself), then ``change_2`` and the counted
    incremental refresh."""
    first = run_spec(spec, spark=spark)
    assert first["mode"] == "full", first
    change_1()
    warm = counted(spark, lambda: run_spec(spec, spark=spark))
    assert warm.result["mode"] == "incremental", warm.result
    print(f"[action counts] warm-up: {warm.jobs} jobs, {warm.executions} SQL executions")
    change_2()
    refresh = counted(spark, lambda: run_spec(spec, spark=spark))
    assert refresh.result["mode"] == "incremental", refresh.result
    return refresh


def assert_bounded(refresh: Counted, max_jobs: int, max_executions: int, max_snapshot_jobs: int = 0) -> None:
    """At most ``max_jobs`` Spark jobs and ``max_executions`` SQL executions, of which at most
    ``max_snapshot_jobs`` rebuilt a table's state (none by default: the engine's warm file lists already
    hold each table's version, or advance to it without a job), saying how many on failure."""
    measured = (
        f"{refresh.jobs} jobs, {refresh.executions} SQL executions, "
        f"{refresh.snapshot_jobs} state reconstruction jobs"
    )
    print(f"[action counts] {measured}")
    assert refresh.jobs <= max_jobs, measured
    assert refresh.executions <= max_executions, measured
    assert refresh.snapshot_jobs <= max_snapshot_jobs, measured


#: The most jobs and SQL executions a small incremental foreign-key refresh (one order and one customer
#: changed, 11 output rows) may run with the net-change writer: 6 jobs (the product's bound for a small
#: refresh, Delta's jobs included) and 24 executions when the bound was set (the engine procedure's
#: calls, the temporary views that hand it the rows and the three tables' warm-file views are most of the
#: executions; none runs a job). Every refresh counted here is small, so it runs without adaptive
#: execution (``spark.fkjoin.smallRefreshBytes``), whose query stages would each be a job of their own
#: (the same refresh ran 50-51 jobs with it), without broadcasts (each a job of its own: 24 jobs with
#: them), and reads each table over the engine's warm file list (31 jobs with Delta's own file listing).
FK_REFRESH_MAX_JOBS = 6
FK_REFRESH_MAX_EXECUTIONS = 27

#: The session settings a small refresh decides on, as :func:`fk_world` reads them.
SMALL_REFRESH_KEYS = ("spark.sql.adaptive.enabled", "spark.sql.shuffle.partitions", *UNCLONED_CACHE_SETTINGS)
#: The session the small-refresh phases start from, and must get back after each refresh.
SESSION_BEFORE = {
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.shuffle.partitions": "16",
    **dict.fromkeys(UNCLONED_CACHE_SETTINGS),
}


@dataclass
class FkRefresh:
    """One counted foreign-key refresh: its counts, the output and the oracle right after it, and the
    small-refresh settings in force when it read its changes."""

    counted: Counted
    output: dict[int, tuple]
    oracle: dict[int, tuple]
    settings_seen: list[tuple[str | None, ...]] = field(default_factory=list)
    session_after: dict[str, str | None] = field(default_factory=dict)


@dataclass
class FkWorld:
    """A foreign-key join of 1000 orders and 100 customers, refreshed through the phases every
    foreign-key test of this module reads (see :func:`fk_world`)."""

    first: dict[str, Any]
    logged: FkRefresh
    log_loads: dict[str, int]
    statements: list[str]
    small: FkRefresh
    recomputed: FkRefresh
    adaptive: FkRefresh
    failure: BaseException | None
    session_after_failure: dict[str, str | None]
    bad_bound: BaseException | None
    out_version_before_bad_bound: int
    out_version_after_bad_bound: int


def _fk_refresh(spark: SparkSession, spec: dict[str, Any], out: Path) -> FkRefresh:
    """Run one refresh of ``spec``, counted, noting the settings in force at ``changes_read``."""
    seen: list[tuple[str | None, ...]] = []

    def settings_at(name: str) -> None:
        if name == "changes_read":
            seen.append(tuple(spark.conf.get(key, None) for key in SMALL_REFRESH_KEYS))

    with phase_listener(settings_at):
        refresh = counted(spark, lambda: run_spec(spec, spark=spark))
    session = {key: spark.conf.get(key, None) for key in SMALL_REFRESH_KEYS}
    return FkRefresh(refresh, output_state(spark, out), oracle(spark, refresh.result), seen, session)


@pytest.fixture(scope="module")
def fk_world(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> FkWorld:
    """One foreign-key world, refreshed in phases (each a small incremental refresh but the first):

    0. the full refresh;
    1. an order and a customer changed, refreshed with each Delta log load and each SQL statement
       recorded (also the warm-up: the first incremental refresh of a kind in a session loads classes
       and fills caches, no cost of the refresh itself);
    2. an order and a customer changed (11 output rows), on a session of 16 shuffle partitions: the
       counted small refresh; then another order and customer, refreshed by the recompute strategy, counted;
    3. another order and customer, with ``spark.fkjoin.smallRefreshBytes=0``: the same refresh with
       adaptive execution, counted;
    4. an order changed and a refresh failed at ``changes_read``;
    5. a refresh under a bad ``spark.fkjoin.smallRefreshBytes``, refused before writing.
    """
    import deltalake

    warehouse = tmp_path_factory.mktemp("fk_counts")
    orders, customers, out = warehouse / "orders", warehouse / "customers", warehouse / "out"
    write(spark, [(i, i % 100, float(i)) for i in range(1000)], ORDERS, orders)
    write(spark, [(i, f"c{i}") for i in range(100)], CUSTOMERS, customers)
    spec = {
        "kind": "foreign_key_join",
        "left": {"path": str(orders), "key": ["order_id"]},
        "right": {"path": str(customers), "key": ["customer_id"]},
        "foreign_key": ["customer_id"],
        "output": {"path": str(out)},
        "refresh_strategy": "incremental",
    }

    def change(order: int, amount: float, customer: int | None = None, name: str = "") -> None:
        DeltaTable.forPath(spark, str(orders)).update(f"order_id = {order}", {"amount": F.lit(amount)})
        if customer is not None:
            DeltaTable.forPath(spark, str(customers)).update(
                f"customer_id = {customer}", {"name": F.lit(name)}
            )

    first = run_spec(spec, spark=spark)

    change(3, 0.5, 5, "e")
    loads: Counter[str] = Counter()
    statements: list[str] = []
    load, sql = deltalake.DeltaTable.__init__, spark.sql

    def counting_load(self: deltalake.DeltaTable, table_uri: Any, *args: Any, **kwargs: Any) -> None:
        loads[Path(str(table_uri)).name] += 1
        load(self, table_uri, *args, **kwargs)

    def recording_sql(query: str, *args: Any, **kwargs: Any) -> Any:
        statements.append(" ".join(query.split()[:2]).upper())
        return sql(query, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(deltalake.DeltaTable, "__init__", counting_load)
        patch.setattr(spark, "sql", recording_sql)
        warm = counted(spark, lambda: run_spec(spec, spark=spark))
    logged = FkRefresh(warm, output_state(spark, out), oracle(spark, warm.result))

    spark.conf.set("spark.sql.shuffle.partitions", "16")
    try:
        change(7, 3.5, 5, "x")
        small = _fk_refresh(spark, spec, out)
        change(8, 2.5, 7, "y")
        recomputed = _fk_refresh(spark, {**spec, "refresh_strategy": "recompute"}, out)
        change(9, 4.5, 6, "x")
        spark.conf.set("spark.fkjoin.smallRefreshBytes", "0")
        try:
            adaptive = _fk_refresh(spark, spec, out)
        finally:
            spark.conf.unset("spark.fkjoin.smallRefreshBytes")
        adaptive.session_after = {key: spark.conf.get(key, None) for key in SMALL_REFRESH_KEYS}

        def fail_at(name: str) -> None:
            if name == "changes_read":
                raise RuntimeError("the refresh failed here")

        change(11, 3.0)
        failure: BaseException | None = None
        try:
            with phase_listener(fail_at):
                run_spec(spec, spark=spark)
        except RuntimeError as error:
            failure = error
        session_after_failure = {key: spark.conf.get(key, None) for key in SMALL_REFRESH_KEYS}
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", "2")

    version_before = DeltaTable.forPath(spark, str(out)).history(1).first()["version"]
    spark.conf.set("spark.fkjoin.smallRefreshBytes", "64MB")
    bad_bound: BaseException | None = None
    try:
        run_spec(spec, spark=spark)
    except SpecError as error:
        bad_bound = error
    finally:
        spark.conf.unset("spark.fkjoin.smallRefreshBytes")
    version_after = DeltaTable.forPath(spark, str(out)).history(1).first()["version"]
    return FkWorld(
        first,
        logged,
        dict(loads),
        statements,
        small,
        recomputed,
        adaptive,
        failure,
        session_after_failure,
        bad_bound,
        version_before,
        version_after,
    )


def test_a_refresh_loads_each_table_log_once_and_runs_no_describe(fk_world: FkWorld) -> None:
    """Ownership, planning, progress and the commit read one load of each table's Delta log, brought up
    to date rather than loaded again; tables by path need no ``DESCRIBE`` command."""
    result = fk_world.logged.counted.result
    assert result["mode"] == "incremental", result
    assert fk_world.logged.output == fk_world.logged.oracle
    assert fk_world.log_loads == {"orders": 1, "customers": 1, "out": 1}
    assert not [s for s in fk_world.statements if s.startswith("DESCRIBE")], fk_world.statements


def test_a_small_foreign_key_refresh_runs_a_few_spark_actions(fk_world: FkWorld) -> None:
    """Phase 2: the small refresh after a full one and a warm-up incremental one."""
    assert fk_world.first["mode"] == "full", fk_world.first
    assert fk_world.logged.counted.result["mode"] == "incremental", fk_world.logged.counted.result
    refresh = fk_world.small.counted
    assert refresh.result["mode"] == "incremental", refresh.result
    assert refresh.result["write_path"] == "net_changes"
    assert refresh.result["rows"]["updated"] == 11
    assert fk_world.small.output == fk_world.small.oracle
    assert_bounded(refresh, FK_REFRESH_MAX_JOBS, FK_REFRESH_MAX_EXECUTIONS)


#: The most jobs and SQL executions of the same small refresh by the recompute strategy: the join and
#: its comparison with the output in one job (the inputs' key checks observed on it), then the commit's.
FK_RECOMPUTE_MAX_JOBS = 5
FK_RECOMPUTE_MAX_EXECUTIONS = 24


def test_a_small_foreign_key_recompute_runs_a_few_spark_actions(fk_world: FkWorld) -> None:
    """The same small refresh with ``refresh_strategy: recompute``: the output equals the oracle, only the
    11 changed rows are written (by the net-change commit), and in fewer jobs than the incremental plan."""
    refresh = fk_world.recomputed.counted
    assert refresh.result["mode"] == "incremental", refresh.result
    assert refresh.result["strategy"]["chosen"] == "recompute", refresh.result
    assert refresh.result["write_path"] == "net_changes"
    assert refresh.result["rows"]["updated"] == 11
    assert fk_world.recomputed.output == fk_world.recomputed.oracle
    assert_bounded(refresh, FK_RECOMPUTE_MAX_JOBS, FK_RECOMPUTE_MAX_EXECUTIONS)


def test_a_small_refresh_runs_without_adaptive_execution_and_restores_the_session(fk_world: FkWorld) -> None:
    """Under ``spark.fkjoin.smallRefreshBytes`` the refresh turns adaptive execution off for itself (each
    query stage is then not a job of its own), on one shuffle partition for these few kilobytes, and gives
    the session back as it was, after a failed refresh too; at 0 it keeps the session's settings, and runs
    more jobs for the same output."""
    small, adaptive = fk_world.small, fk_world.adaptive
    assert adaptive.output == adaptive.oracle
    assert small.output == small.oracle
    assert adaptive.settings_seen == [("true", "16", None, None)]
    assert small.settings_seen == [("false", "1", "false", "true")]
    assert small.session_after == SESSION_BEFORE
    assert adaptive.session_after == SESSION_BEFORE
    assert isinstance(fk_world.failure, RuntimeError), fk_world.failure
    assert re.search("the refresh failed here", str(fk_world.failure))
    assert fk_world.session_after_failure == SESSION_BEFORE
    paths = (adaptive.counted.result["write_path"], small.counted.result["write_path"])
    assert paths == ("net_changes", "net_changes")
    assert small.counted.result["rows"]["updated"] == adaptive.counted.result["rows"]["updated"] == 11
    assert small.counted.jobs < adaptive.counted.jobs, (small.counted.jobs, adaptive.counted.jobs)


def test_a_bad_small_refresh_bound_names_the_setting(fk_world: FkWorld) -> None:
    assert isinstance(fk_world.bad_bound, SpecError), fk_world.bad_bound
    assert re.search(
        r"spark\.fkjoin\.smallRefreshBytes='64MB': give a number of bytes", str(fk_world.bad_bound)
    )
    assert fk_world.out_version_after_bad_bound == fk_world.out_version_before_bad_bound


#: multiway_join, 3 inputs (50 businesses, 500 reviews, 60 owners), a review changed, then a business
#: and a review: 10 jobs and 39 executions when the bound was set (with the engine procedure's calls and
#: views, as above), plus headroom.
MULTIWAY_REFRESH_MAX_JOBS = 11
MULTIWAY_REFRESH_MAX_EXECUTIONS = 42
#: The same world's next small refresh (a business renamed, a review moved) by the recompute strategy: the
#: N:M guard's job over the whole inputs (their key checks observed on it), the join compared with the
#: output in one job, then the commit's: 6 jobs and 27 executions when the bound was set, plus headroom.
MULTIWAY_RECOMPUTE_MAX_JOBS = 7
MULTIWAY_RECOMPUTE_MAX_EXECUTIONS = 30


@dataclass
class MultiwayRefresh:
    """One counted multiway refresh, the model's join before and after it (the oracle), and the output."""

    counted: Counted
    before: dict[tuple, Any]
    after: dict[tuple, Any]
    output: Counter


@pytest.fixture(scope="module")
def multiway_refreshes(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> tuple[World, dict[str, MultiwayRefresh]]:
    """The yelp world of three inputs (keyed by the inputs' keys), refreshed in full, then once as a warm-up
    and once counted by the incremental plan (``refresh_strategy: incremental``, as ``auto`` may recompute
    tables this small), then once counted by the recompute plan; each counted refresh with the model's join
    before and after it."""
    rows = {
        "business": [{"business_id": b, "name": f"b{b}", "city": f"c{b % 7}"} for b in range(50)],
        "review": [{"review_id": r, "biz_id": r % 50, "stars": r % 5, "text": "t"} for r in range(500)],
        "owner": [{"owner_id": o, "business_id": o % 50, "owner_name": f"o{o}"} for o in range(60)],
    }
    world = World.create(
        spark,
        tmp_path_factory.mktemp("multiway_counts"),
        [BUSINESS_INPUT, REVIEW_INPUT, OWNER_INPUT],
        {"business": BUSINESS, "review": REVIEW, "owner": OWNER},
        rows,
        refresh_strategy="incremental",
    )

    models: list[dict[tuple, Any]] = []

    def second_change() -> None:
        models.append(world.expected())
        world.upsert("business", [{"business_id": 3, "name": "renamed", "city": "c3"}])
        world.upsert("review", [{"review_id": 8, "biz_id": 9, "stars": 1, "text": "moved"}])
        models.append(world.expected())

    incremental = count_second_refresh(
        spark,
        world.spec,
        lambda: world.upsert("review", [{"review_id": 7, "biz_id": 7, "stars": 5, "text": "t"}]),
        second_change,
    )
    out = world.spec["output"]["path"]
    refreshes = {"incremental": MultiwayRefresh(incremental, *models, output_rows(spark, out))}

    world.upsert("business", [{"business_id": 4, "name": "renamed", "city": "c4"}])
    world.upsert("review", [{"review_id": 9, "biz_id": 10, "stars": 2, "text": "moved"}])
    recompute = {**world.spec, "refresh_strategy": "recompute"}
    recomputed = counted(spark, lambda: run_spec(recompute, spark=spark))
    refreshes["recompute"] = MultiwayRefresh(
        recomputed, models[-1], world.expected(), output_rows(spark, out)
    )
    return world, refreshes


@pytest.mark.parametrize(
    ("plan", "max_jobs", "max_executions"),
    [
        ("incremental", MULTIWAY_REFRESH_MAX_JOBS, MULTIWAY_REFRESH_MAX_EXECUTIONS),
        ("recompute", MULTIWAY_RECOMPUTE_MAX_JOBS, MULTIWAY_RECOMPUTE_MAX_EXECUTIONS),
    ],
)
def test_a_small_multiway_refresh_runs_a_few_spark_actions(
    multiway_refreshes: tuple[World, dict[str, MultiwayRefresh]],
    plan: str,
    max_jobs: int,
    max_executions: int,
) -> None:
    """Each plan's small refresh: the output equals the model's join, its counts are the model's net change
    (only the rows that differ are written, by the net-change commit), in a few jobs: what the kind's
    ``incremental_jobs`` and ``recompute_jobs`` (the strategy estimate's charge per plan) were set from."""
    world, refreshes = multiway_refreshes
    refresh = refreshes[plan]
    result = refresh.counted.result
    assert result["mode"] == "incremental", result
    assert result["strategy"]["chosen"] == plan and "fallback" not in result["strategy"], result["strategy"]
    assert result["write_path"] == "net_changes"
    assert refresh.output == as_rows(refresh.after)
    counts = {kind: result["rows"][kind] for kind in ("inserted", "updated", "deleted")}
    assert counts == net_counts(world.spec, refresh.before, refresh.after), counts
    assert counts["updated"] > 0, "the counted refresh changes output rows"
    assert_bounded(refresh.counted, max_jobs, max_executions)


#: windowed_join, table mode, outer (the shape with its own refresh: inner and left ones run as the
#: foreign-key join above): errors per minute joined to themselves a week earlier, 500 rows, one row
#: changed, then one changed and one deleted: 15 jobs and 29 executions when the bound was set (a Delta
#: MERGE into the output, not the net-change writer; the overwrite of its state table rebuilds that
#: table's state, one job), plus headroom.
WINDOWED_TABLE_REFRESH_MAX_JOBS = 16
WINDOWED_TABLE_REFRESH_MAX_EXECUTIONS = 32


#: The same refresh by the recompute plan (the join of both sides compared with the output, the rows that
#: differ committed by the net-change writer): the kind's ``recompute_jobs``.
WINDOWED_TABLE_RECOMPUTE_MAX_JOBS = 8
WINDOWED_TABLE_RECOMPUTE_MAX_EXECUTIONS = 20


@pytest.mark.parametrize("plan", ["incremental", "recompute"])
def test_a_small_windowed_table_refresh_runs_a_few_spark_actions(
    spark: SparkSession, warehouse: Path, plan: str
) -> None:
    table, out = warehouse / "errors_per_min", warehouse / "vs_last_week"
    create_table(
        spark,
        table,
        [errors_row(f"s{s}", m, s + m, week=w) for s in range(10) for m in range(25) for w in (0, 1)],
        ERRORS,
    )
    window = {"start": "ws", "end": "we"}
    spec = {
        "kind": "windowed_join",
        "mode": "table",
        "left": {"path": str(table), "key": ["service"], "window": window},
        "right": {"path": str(table), "key": ["service"], "window": {**window, "offset": "-7d"}},
        "how": "outer",
        "columns": {"errors_now": "l.errors", "errors_week_ago": "r.errors"},
        "output": {"path": str(out)},
        "refresh_strategy": plan,
    }
    key, columns = ["service", "ws", "we"], ["errors_now", "errors_week_ago"]

    def second_change() -> None:
        upsert(spark, table, [errors_row("s2", 4, 99, week=0)], key)
        delete_keys(spark, table, [("s3", WEEK + 5 * MINUTE, WEEK + 6 * MINUTE)], key)

    refresh = count_second_refresh(
        spark, spec, lambda: upsert(spark, table, [errors_row("s1", 3, 42, week=1)], key), second_change
    )

    rows = read_rows(spark, table)
    want = scratch(
        rows,
        rows,
        key,
        lambda r: (r["service"], r["ws"] + WEEK, r["we"] + WEEK),
        "outer",
        lambda left, right: (left["errors"] if left else None, right["errors"] if right else None),
    )
    assert output_of(spark, out, key, columns) == want
    assert refresh.result["strategy"]["chosen"] == plan, refresh.result["strategy"]
    bounds = {
        "incremental": (WINDOWED_TABLE_REFRESH_MAX_JOBS, WINDOWED_TABLE_REFRESH_MAX_EXECUTIONS),
        "recompute": (WINDOWED_TABLE_RECOMPUTE_MAX_JOBS, WINDOWED_TABLE_RECOMPUTE_MAX_EXECUTIONS),
    }
    assert_bounded(refresh, *bounds[plan], max_snapshot_jobs=1)


class Replay:
    """Event tables appended a batch at a time, each batch also fed to the record-by-record model, whose
    emitted rows per batch are kept: what the refresh that consumes the batch must append."""

    def __init__(self, model: StreamJoinModel, left: Side, right: Side | None = None) -> None:
        self.model, self.left, self.right = model, left, right
        self.emitted: list[Counter] = []

    def append(self, lefts: list[Event], rights: Sequence[Event] = ()) -> Change:
        def apply() -> None:
            self.left.append(lefts)
            if self.right is not None:
                self.right.append(list(rights))
            self.emitted.append(model_rows(self.model.refresh(with_keys(lefts), with_keys(list(rights)))))

        return apply


#: windowed_join, stream mode, left join with grace (450 events, then two left and one right event per
#: refresh, the counted one closing a pending row): 8 jobs and 25 executions when the bound was set (the
#: overwrite of its state table rebuilds that table's state, one job), plus headroom.
WINDOWED_STREAM_REFRESH_MAX_JOBS = 9
WINDOWED_STREAM_REFRESH_MAX_EXECUTIONS = 28


def test_a_small_windowed_stream_refresh_runs_a_few_spark_actions(
    spark: SparkSession, warehouse: Path
) -> None:
    """Keys of odd number have no right rows, so their left rows wait unmatched until stream time passes
    their window and grace: the counted refresh both pairs rows and closes pending ones."""
    window = {"before": 10, "after": 10, "grace": 5}
    replay = Replay(
        StreamJoinModel(10, 10, 5, "left"), Side(spark, warehouse / "l"), Side(spark, warehouse / "r")
    )
    replay.append(
        [ev(f"k{i % 30}", 3 * i, f"l{i}") for i in range(300)],
        [ev(f"k{i % 30}", 3 * i + 1, f"r{i}") for i in range(0, 300, 2)],
    )()
    spec = windowed_stream_spec(replay.left.path, replay.right.path, warehouse / "out", window, "left")

    refresh = count_second_refresh(
        spark,
        spec,
        replay.append([ev("k1", 1000, "l300"), ev("k2", 1001, "l301")], [ev("k2", 1003, "r300")]),
        replay.append([ev("k4", 1100, "l302"), ev("k5", 1101, "l303")], [ev("k4", 1102, "r301")]),
    )

    assert replay.emitted[-1][("k1", "l300", None, 1000)] == 1, "the counted refresh closes a pending row"
    assert appended(spark, Path(spec["output"]["path"]), refresh.result) == replay.emitted[-1]
    assert refresh.result["rows"]["pending"] == len(replay.model.pending)
    assert_bounded(
        refresh, WINDOWED_STREAM_REFRESH_MAX_JOBS, WINDOWED_STREAM_REFRESH_MAX_EXECUTIONS, max_snapshot_jobs=1
    )


#: self_join (300 events, then two per refresh): 2 jobs and 9 executions when the bound was set, plus
#: headroom.
SELF_JOIN_REFRESH_MAX_JOBS = 3
SELF_JOIN_REFRESH_MAX_EXECUTIONS = 9


def test_a_small_self_join_refresh_runs_a_few_spark_actions(spark: SparkSession, warehouse: Path) -> None:
    window = {"before": 20, "after": 20, "grace": 5}
    replay = Replay(StreamJoinModel(20, 20, 5, "inner", same_table=True), Side(spark, warehouse / "events"))
    replay.append([ev(f"k{i % 20}", i, f"x{i}") for i in range(300)])()
    spec = self_spec(replay.left.path, warehouse / "out", window)

    refresh = count_second_refresh(
        spark,
        spec,
        replay.append([ev("k0", 300, "x300"), ev("k1", 302, "x301")]),
        replay.append([ev("k0", 310, "x302"), ev("k2", 311, "x303")]),
    )

    assert refresh.result["optimized"] == "self_join"
    assert appended(spark, Path(spec["output"]["path"]), refresh.result) == replay.emitted[-1]
    assert refresh.result["rows"]["pairs"] == sum(replay.emitted[-1].values()) > 0
    assert_bounded(refresh, SELF_JOIN_REFRESH_MAX_JOBS, SELF_JOIN_REFRESH_MAX_EXECUTIONS)


#: stream_table_join, left (1000 orders looking up 100 products), one order appended, then a product
#: renamed and two orders appended: 5 jobs and 12 executions when the bound was set, plus headroom.
STREAM_JOIN_REFRESH_MAX_JOBS = 6
STREAM_JOIN_REFRESH_MAX_EXECUTIONS = 14


def test_a_small_stream_table_join_refresh_runs_a_few_spark_actions(
    spark: SparkSession, warehouse: Path
) -> None:
    """The oracle follows the lookup semantics in Python: each order joins the products as they were at
    the refresh that read it; a product's later change rewrites no earlier output."""
    orders, products, out = warehouse / "orders", warehouse / "products", warehouse / "out"
    names = {p: f"p{p}" for p in range(100)}
    create_table(spark, products, [{"product_id": p, "name": n} for p, n in names.items()], PRODUCTS)
    create_table(
        spark, orders, [{"order_id": o, "product_id": o % 100, "qty": 1} for o in range(1000)], LOOKUP_ORDERS
    )
    want = {(o, o % 100, 1, names[o % 100]) for o in range(1000)}

    def order(order_id: int, product_id: int) -> None:
        append_rows(spark, orders, [{"order_id": order_id, "product_id": product_id, "qty": 2}])
        want.add((order_id, product_id, 2, names.get(product_id)))

    def second_change() -> None:
        upsert(spark, products, [{"product_id": 5, "name": "renamed"}], ["product_id"])
        names[5] = "renamed"
        order(1001, 5)
        order(1002, 7)

    refresh = count_second_refresh(
        spark, join_spec(orders, products, out, how="left"), lambda: order(1000, 5), second_change
    )

    assert out_rows(spark, out) == sorted(want, key=repr)
    assert_bounded(refresh, STREAM_JOIN_REFRESH_MAX_JOBS, STREAM_JOIN_REFRESH_MAX_EXECUTIONS)


#: global_table_bootstrap catching up from its checkpoint (1000 products; one updated, then one updated
#: and one deleted): 7 jobs and 22 executions when the bound was set (with the engine procedure's calls
#: and views, as above), plus headroom.
GLOBAL_TABLE_REFRESH_MAX_JOBS = 8
GLOBAL_TABLE_REFRESH_MAX_EXECUTIONS = 25


def test_a_small_global_table_catch_up_runs_a_few_spark_actions(spark: SparkSession, warehouse: Path) -> None:
    source, out = warehouse / "products", warehouse / "products_global"
    create_table(
        spark, source, [{"product_id": p, "name": f"p{p}", "price": float(p)} for p in range(1000)], CATALOG
    )
    key = ["product_id"]

    def second_change() -> None:
        upsert(spark, source, [{"product_id": 7, "name": "P7", "price": 7.5}], key)
        delete_keys(spark, source, [9], key)

    refresh = count_second_refresh(
        spark,
        global_table_spec(source, out),
        lambda: upsert(spark, source, [{"product_id": 3, "name": "P3", "price": 3.5}], key),
        second_change,
    )

    assert (refresh.result["checkpoint"], refresh.result["caught_up"]) == (3, True)
    assert state(read_rows(spark, out)) == state(read_rows(spark, source, 3))
    assert_bounded(refresh, GLOBAL_TABLE_REFRESH_MAX_JOBS, GLOBAL_TABLE_REFRESH_MAX_EXECUTIONS)

"""Property: any sequence of input changes, refreshed at any points, keeps the output equal to the join
recomputed from scratch at the refresh's input versions, with a clean change feed.

Hypothesis draws tiny inputs (8 left keys, 5 right keys, FKs that include a null, a key that never
exists and keys that are prefixes of each other) and a sequence of commits: inserts, updates, FK changes,
deletes on both sides, identical rewrites, null-key rows, with refreshes in between, for an inner or a left
join, into one output written with net changes, one written with MERGE and one refreshed by recomputing
the join and committing its net changes (``refresh_strategy: recompute``), and one refreshed with its
warm join state (``warm_state: true``), which a ``restart`` step drops from the JVM so that the next
refresh loads its durable copy. Every refresh is checked by
:class:`helpers.World` (mode, versions, one commit per refresh, counts, the oracle on every key, one net
change per changed key in the output's change feed), and the two outputs against each other.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from typing import Any

from helpers import Batch, OutputSpec, Row, World, small_refresh_bound
from hypothesis import given
from hypothesis import strategies as st
from pyspark.sql import SparkSession

from airflow_provider_fkjoin.engine.core.spec import TableRef
from airflow_provider_fkjoin.engine.delta.tables import DeltaHandle
from airflow_provider_fkjoin.engine.delta.warm_state import WarmState

LEFT = "id INT, fk STRING, v INT"
RIGHT = "rk STRING, name STRING"
LEFT_KEYS = list(range(8))
RIGHT_KEYS = ["k1", "k11", "k2", "K1", "k3"]  # "k1" is a prefix of "k11"; "K1" differs only in case
FKS = [*RIGHT_KEYS, "k4", None]  # "k4" never exists on the right
MAX_REFRESHES = 3  # the first (full) one included

fk_values = st.sampled_from(FKS)
small_ints = st.integers(0, 2)  # a small value domain, so identical rewrites happen
names = st.sampled_from(["a", "b"])


def left_row(key: int | None, fk: str | None, v: int) -> Row:
    return {"id": key, "fk": fk, "v": v}


def right_row(key: str | None, name: str) -> Row:
    return {"rk": key, "name": name}


left_upserts = st.dictionaries(
    st.sampled_from([*LEFT_KEYS, None]), st.tuples(fk_values, small_ints), min_size=1, max_size=3
).map(lambda rows: Batch(left_upserts=[left_row(k, fk, v) for k, (fk, v) in rows.items()]))
left_deletes = st.lists(st.sampled_from(LEFT_KEYS), min_size=1, max_size=2, unique=True).map(
    lambda keys: Batch(left_deletes=keys)
)
right_upserts = st.dictionaries(st.sampled_from([*RIGHT_KEYS, None]), names, min_size=1, max_size=2).map(
    lambda rows: Batch(right_upserts=[right_row(k, n) for k, n in rows.items()])
)
right_deletes = st.lists(st.sampled_from(RIGHT_KEYS), min_size=1, max_size=2, unique=True).map(
    lambda keys: Batch(right_deletes=keys)
)
steps = st.one_of(
    left_upserts, left_deletes, right_upserts, right_deletes, st.just("refresh"), st.just("restart")
)


@st.composite
def plans(draw: st.DrawFn) -> dict[str, Any]:
    left0 = draw(st.dictionaries(st.sampled_from(LEFT_KEYS), st.tuples(fk_values, small_ints), max_size=6))
    right0 = draw(st.dictionaries(st.sampled_from(RIGHT_KEYS), names, max_size=4))
    return {
        "left": [left_row(k, fk, v) for k, (fk, v) in left0.items()],
        "right": [right_row(k, n) for k, n in right0.items()],
        "steps": draw(st.lists(steps, min_size=1, max_size=7)),
        "how": draw(st.sampled_from(["inner", "left"])),
    }


def play(
    world: World, steps: list[Any], refresh: Callable[[], None], restart: Callable[[], None] = lambda: None
) -> None:
    """Refresh, then apply the plan's steps, refreshing where a step says so (at most MAX_REFRESHES in
    all, only when something changed) and once more at the end if changes are pending; ``restart`` where
    a step says ``restart``."""
    refresh()
    refreshes, pending = 1, False
    for step in steps:
        if step == "restart":
            restart()
            continue
        if step == "refresh":
            if pending and refreshes < MAX_REFRESHES - 1:
                refresh()
                refreshes, pending = refreshes + 1, False
            continue
        world.apply(step)
        pending = True
    if pending:
        refresh()


def _feed(spark: SparkSession, path: str, start: int, end: int) -> list[tuple[Any, ...]]:
    """The output's change feed of versions ``start..end`` as sorted (change type, row) tuples, without
    the commit version and timestamp (the two outputs commit at their own versions and times)."""
    feed = (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", start)
        .option("endingVersion", end)
        .load(path)
        .drop("_commit_version", "_commit_timestamp")
    )
    return sorted((tuple(row) for row in feed.collect()), key=repr)


@given(plan=plans(), adaptive=st.booleans(), warm=st.booleans())
def test_refreshes_equal_recompute(
    spark: SparkSession, plan: dict[str, Any], adaptive: bool, warm: bool
) -> None:
    """Random change sequences refreshed into several outputs, one through the net-change commit, one
    through MERGE, one recomputed and, with ``warm``, one served by its join state: after every refresh
    each equals the join recomputed from scratch, and all have identical rows and identical change
    feeds, refresh after refresh; the net-change path really wrote every incremental refresh of the
    first. Run as the small refreshes they are (adaptive execution off) or, with ``adaptive``, as large
    ones are. (The join state's output is drawn, not always there, for the test's time: its build and
    durable copy cost about as much as the other three outputs together.)"""
    how = plan["how"]
    with tempfile.TemporaryDirectory(prefix="fkjoin-prop-") as root, small_refresh_bound(spark, adaptive):
        world = World(
            spark,
            root,
            left_schema=LEFT,
            right_schema=RIGHT,
            left_key=["id"],
            right_key=["rk"],
            outputs={
                "direct": OutputSpec(how=how, foreign_key=["fk"], strategy="incremental"),
                "merge": OutputSpec(how=how, foreign_key=["fk"], write_path="merge"),
                "recompute": OutputSpec(how=how, foreign_key=["fk"], strategy="recompute"),
                **(
                    {"warm": OutputSpec(how=how, foreign_key=["fk"], strategy="incremental", warm_state=True)}
                    if warm
                    else {}
                ),
            },
        )
        world.create(plan["left"], plan["right"])
        seen = dict.fromkeys(world.outputs, -1)

        def refresh() -> None:
            records = world.refresh()
            for name in world.outputs:
                world.assert_ok(name)
            results = {name: record.result for name, record in records.items()}
            assert all(result is not None for result in results.values()), results
            if results["direct"]["mode"] == "incremental":
                assert results["direct"]["write_path"] == "net_changes", results["direct"]
                assert results["merge"]["write_path"] == "merge", results["merge"]
                assert results["recompute"]["write_path"] == "net_changes", results["recompute"]
                assert results["recompute"]["strategy"]["chosen"] == "recompute", results["recompute"]
                assert results["direct"]["strategy"]["chosen"] == "incremental", results["direct"]
            assert all(
                result["rows"] == results["direct"]["rows"]
                for name, result in results.items()
                if name != "recompute"  # its counts are compared below; its other figures are its own
            ), results
            if warm and results["warm"]["mode"] == "incremental":
                assert results["warm"]["write_path"] == "net_changes", results["warm"]
            for count in ("inserted", "updated", "deleted"):
                assert results["recompute"]["rows"][count] == results["direct"]["rows"][count]
            feeds = {}
            for name, result in results.items():
                version = result["output"]["version"]
                changed = version > seen[name]
                feeds[name] = _feed(spark, world.out_path(name), seen[name] + 1, version) if changed else []
                seen[name] = version
            assert all(feed == feeds["direct"] for feed in feeds.values()), feeds
            tables = {
                name: sorted(spark.read.format("delta").load(world.out_path(name)).collect(), key=repr)
                for name in world.outputs
            }
            assert all(table == tables["direct"] for table in tables.values()), tables

        def restart() -> None:
            """The warm output's JVM loses its state, as a restart does: the next refresh loads the
            state's durable copy (or builds it again)."""
            state = WarmState(spark, DeltaHandle(spark, TableRef(path=world.out_path("warm")), "output"))
            state.settle()
            state.drop()

        play(world, plan["steps"], refresh, restart if warm else lambda: None)

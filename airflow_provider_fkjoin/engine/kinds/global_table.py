"""Global tables (Kafka KIP-99): a source bootstrapped to its high watermark, checkpointed, restored.

Kafka's GlobalKTable reads its topic's end offset once at startup (the *high watermark*), restores its
store from the checkpointed offset (or from the beginning) up to it, and only then lets stream threads
run; the offset reached is checkpointed so a restart resumes there. Here:

* the source is a keyed Delta table, or a changelog source (:mod:`..delta.changelog`);
* its latest version, pinned at the start of a refresh, is the high watermark;
* the output (the global table: keyed, laid out by key for lookups, change data feed on) holds the
  source as of that version, and the version is written in the same Delta commit as the rows: that
  commit metadata *is* the checkpoint;
* a rerun restores from the checkpoint and applies only later versions (the change feed of a table,
  or the events appended to a changelog); an unusable checkpoint (history vacuumed, spec changed,
  source recreated, checkpoint ahead of the source) means a full rebuild, and the result says why.

Example::

    refresh_once(GlobalTableRefresh(load_spec({"kind": "global_table_bootstrap",
        "source": {"path": "/w/products", "key": ["product_id"]},
        "output": {"path": "/w/products_global"}}), spark), options)
    # {"mode": "incremental", "high_watermark": 12, "checkpoint": 12, "caught_up": True, ...}
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from ..core.cost_history import PlanChoice
from ..core.planning import InputState, RefreshPlan
from ..core.spec import GlobalTableBootstrapSpec, SourceRef, quote
from ..core.trace import phase
from ..delta import changelog as cl
from ..delta.changes import (
    FeedUnavailable,
    changed_keys,
    check_keys,
    feed_errors,
    maybe_broadcast,
    observed_keys,
    read_feed,
    verify_observed,
)
from ..delta.tables import (
    DeltaHandle,
    TableState,
    cdf_off_warnings,
    input_frame,
    key_is_null,
    pinned_input,
    require_columns,
    table_size_bytes,
)
from ..refresh.skeleton import KindRefresh, Recomputed, RefreshContext, Written
from ..write.merge import PRESENT, Commit, CommitRequest, write_full_output
from ..write.net_changes import NetChanges, net_changes

SIDE = "source"


@dataclass(frozen=True)
class SourceShape:
    """The global table's columns: key, value columns (payload, plus ``_fkjoin_order`` for changelogs)."""

    key: list[str]
    value_columns: list[str]
    changelog: cl.ChangelogShape | None


def resolve_source(ref: SourceRef, table: DeltaHandle, frame: DataFrame) -> SourceShape:
    """Check the source spec against the live table; reads no data."""
    if ref.changelog is not None:
        shape = cl.resolve_changelog(ref, table, frame.schema)
        return SourceShape(list(ref.key), [*shape.payload, cl.ORDER_COLUMN], shape)
    names = frame.columns
    require_columns(names, list(ref.key), f"{table.role}.key", table)
    return SourceShape(list(ref.key), [c for c in names if c not in ref.key], None)


def expected_output(
    spec: GlobalTableBootstrapSpec, spark: SparkSession, states: dict[str, TableState]
) -> tuple[DataFrame, list[str], list[str]]:
    """The global table recomputed from scratch: the source at ``states`` (for an audit)."""
    source = DeltaHandle(spark, spec.source, SIDE)
    source_df = input_frame(source, states[SIDE])
    shape = resolve_source(spec.source, source, source_df)
    if shape.changelog is None:
        rows = source_df.where(~key_is_null(shape.key))
    else:
        rows = cl.latest_state(source_df, shape.changelog, keep_order=True)
    return rows, shape.key, shape.value_columns


def _rows(
    commit: Commit | None = None,
    *,
    changes: int = 0,
    null_keys: int = 0,
    null_orders: int = 0,
    ignored: int = 0,
) -> dict[str, Any]:
    return {
        "inserted": commit.inserted if commit else 0,
        "updated": commit.updated if commit else 0,
        "deleted": commit.deleted if commit else 0,
        "changes_read": {SIDE: changes},
        "null_keys_dropped": {SIDE: null_keys},
        "null_order_dropped": {SIDE: null_orders},
        "out_of_order_ignored": ignored,
    }


class GlobalTableRefresh(KindRefresh):
    """One refresh of a global table: bring it to the source's high watermark; see the module docstring.

    >>> refresh_once(GlobalTableRefresh(load_spec("products_global.yaml"), spark), options)["caught_up"]
    True
    """

    spec: GlobalTableBootstrapSpec
    incremental_jobs = 6
    recompute_jobs = 5
    #: What ``prepare`` resolved, read by every step: the source, the version it is pinned at (the
    #: refresh's high watermark), its rows at that version and its columns.
    source: DeltaHandle
    high_watermark: int
    source_df: DataFrame
    shape: SourceShape

    def prepare(self, states: dict[str, TableState]) -> dict[str, InputState]:
        self.source, state = self.handles[SIDE], states[SIDE]
        self.high_watermark = state.version
        self.source_df = input_frame(self.source, state)
        self.shape = resolve_source(self.spec.source, self.source, self.source_df)
        self.warnings += cdf_off_warnings({SIDE: (self.source, state)})
        return {SIDE: pinned_input(self.source, state, self.source_df.schema, self.high_watermark)}

    def noop_rows(self) -> dict[str, Any]:
        return _rows()

    def incremental(self, refresh: RefreshContext, plan: RefreshPlan) -> Written:
        after = plan.from_versions[SIDE]
        assert after is not None
        request = refresh.request("incremental", plan.reason)
        if self.shape.changelog is None:
            return Written(*self._incremental_table(after, refresh, request))
        return Written(*self._incremental_changelog(self.shape.changelog, after, refresh, request))

    def full(self, refresh: RefreshContext, plan: RefreshPlan) -> Written:
        request = refresh.request("full", plan.reason)
        return Written(*self._full(request))

    def preferred_strategy(self) -> PlanChoice | None:
        if self.shape.changelog is None:
            return None
        return PlanChoice(
            "incremental",
            "a changelog source's catch-up reads only the events appended since the checkpoint, while a "
            "recompute reduces the whole log (refresh_strategy: recompute forces it)",
            "kind",
        )

    def recompute(self) -> Recomputed | None:
        """A keyed source at its pinned version, its keys checked as a bootstrap checks them on the way of
        the action that compares it with the output. A changelog source is its whole log reduced to each
        key's latest event, its ops checked (a job), as a bootstrap reduces it: the incremental catch-up
        reads only the appended events, so ``auto`` recomputes only when much of the log is new."""
        shape = self.shape
        if shape.changelog is not None:
            stats = cl.check_events(self.source_df, shape.changelog, self.source)
            latest = cl.latest_state(self.source_df, shape.changelog, keep_order=True)

            def reduced(commit: Commit) -> dict[str, Any]:
                return _rows(commit, null_keys=stats.null_keys, null_orders=stats.null_orders)

            return Recomputed(latest, list(shape.key), list(shape.value_columns), reduced)
        checked = observed_keys(self.source_df, shape.key, self.source, self.high_watermark)

        def rows(commit: Commit) -> dict[str, Any]:
            (counts,) = verify_observed([checked])
            return _rows(commit, null_keys=counts.null_keys)

        return Recomputed(checked.rows, list(shape.key), list(shape.value_columns), rows, (checked,))

    def result_fields(
        self, refresh: RefreshContext, plan: RefreshPlan, output_version: int
    ) -> dict[str, Any]:
        """The checkpoint, whether it still equals the source's latest version; and a warning when the
        table has grown too large to broadcast."""
        size = table_size_bytes(self.output, output_version)
        if size > self.spec.broadcast_warn_bytes:
            self.warnings.append(
                f"global table {self.output.location} is {size} bytes on disk, above broadcast_warn_bytes "
                f"({self.spec.broadcast_warn_bytes}): a stream_table_join may not broadcast it (each "
                "broadcast costs a few times that in memory); consider a foreign_key_join instead"
            )
        return {
            "high_watermark": self.high_watermark,
            "checkpoint": self.high_watermark,
            "caught_up": self.high_watermark >= self.source.state().version,
        }

    def _full(self, request: CommitRequest) -> tuple[Commit, dict[str, Any]]:
        """Materialise the source at its pinned version into the output (create, reconcile, or replace)."""
        shape, source, output, source_df = self.shape, self.source, self.output, self.source_df
        version = self.high_watermark
        if shape.changelog is None:
            null_keys = check_keys(source_df, shape.key, source, version, count_nulls=True).null_keys
            rows = source_df.where(~key_is_null(shape.key))
            stats = None
        else:
            stats = cl.check_events(source_df, shape.changelog, source)
            null_keys = stats.null_keys
            rows = cl.latest_state(source_df, shape.changelog, keep_order=True)
        phase("changes_read")
        phase("merge_started")
        commit = write_full_output(output, rows, shape.key, shape.value_columns, request)
        return commit, _rows(commit, null_keys=null_keys, null_orders=stats.null_orders if stats else 0)

    def _incremental_table(
        self, after: int, refresh: RefreshContext, request: CommitRequest
    ) -> tuple[Commit, dict[str, Any]]:
        """A keyed source: re-read the keys its change feed touched from the pinned snapshot and write
        their net changes; each key's previous value is its first pre-image in the feed."""
        shape, source, source_df, to = self.shape, self.source, self.source_df, self.high_watermark
        direct = refresh.direct_write_possible()
        changes = changed_keys(source, shape.key, after, to, source_df.columns if direct else None)
        cached: list[DataFrame] = []
        net: NetChanges | None = None
        try:
            phase("changes_read")
            keys = maybe_broadcast(changes.keys, changes.count)
            rows = (
                source_df.where(~key_is_null(shape.key)).join(keys, on=shape.key, how="left_semi").persist()
            )
            cached.append(rows)
            check_keys(rows, shape.key, source, to, count_nulls=False)
            if direct:
                assert changes.before is not None
                net = net_changes(changes.before, rows, shape.key, shape.value_columns)
            phase("merge_started")

            def merge_source() -> DataFrame:
                retractions = changes.keys.join(
                    rows.select(*[quote(c) for c in shape.key]), on=shape.key, how="left_anti"
                )
                source = rows.withColumn(PRESENT, F.lit(True)).unionByName(
                    retractions.withColumn(PRESENT, F.lit(False)), allowMissingColumns=True
                )
                return maybe_broadcast(source, changes.count)

            commit = refresh.write(net, shape.key, shape.value_columns, request, merge_source)
        finally:
            if net is not None:
                net.release()
            for frame in cached:
                frame.unpersist()
            changes.release()
        return commit, _rows(commit, changes=changes.change_rows, null_keys=changes.null_keys)

    def _incremental_changelog(
        self, log_shape: cl.ChangelogShape, after: int, refresh: RefreshContext, request: CommitRequest
    ) -> tuple[Commit, dict[str, Any]]:
        """A changelog source: apply only the events appended since the checkpoint.

        Each key's newest new event wins if it sorts after the key's current event: the ``_fkjoin_order``
        the output holds for present keys, or, for absent keys, the latest delete in the events up to the
        checkpoint (a late event must not revive a deleted key).
        """
        shape, source, output, to = self.shape, self.source, self.output, self.high_watermark
        feed = read_feed(source, after, to)
        needed = [*shape.key, log_shape.op_column, *log_shape.order_by, *log_shape.payload]
        batch = feed.select(*[F.col(quote(c)) for c in dict.fromkeys(needed)], "_change_type").persist()
        cached: list[DataFrame] = [batch]
        try:
            with feed_errors(source, after, to):  # vacuumed change files surface when the feed is first read
                rewritten = batch.where(F.col("_change_type") != "insert").limit(1).count()
            if rewritten:
                raise FeedUnavailable(
                    f"changelog source {source.location} is not append-only: versions {after + 1}..{to} "
                    "deleted or updated events, so the log is read again from scratch"
                )
            events = batch.drop("_change_type")
            stats = cl.check_events(events, log_shape, source)
            newest = cl.latest_events(cl.usable_events(events, log_shape), log_shape).persist()
            cached.append(newest)
            keys = newest.select(*[quote(c) for c in shape.key])
            key_count = keys.count()
            phase("changes_read")
            previous_order = "_fkjoin_prev"
            present = (
                output.read()
                .select(*[quote(c) for c in shape.key], F.col(cl.ORDER_COLUMN).alias(previous_order))
                .join(maybe_broadcast(keys, key_count), on=shape.key, how="left_semi")
                .persist()
            )
            cached.append(present)
            absent = keys.join(
                present.select(*[quote(c) for c in shape.key]), on=shape.key, how="left_anti"
            ).persist()
            cached.append(absent)
            known = present
            if absent.count():
                with feed_errors(source, after, to):  # the checkpoint version may be gone from the log
                    tombstones = cl.tombstone_orders(source.read(after), log_shape, absent).persist()
                    cached.append(tombstones)
                    tombstones.count()
                known = present.unionByName(tombstones.withColumnRenamed(cl.ORDER_COLUMN, previous_order))
            decided = (
                newest.join(known, on=shape.key, how="left")
                .where(F.col(previous_order).isNull() | (F.col(cl.ORDER_COLUMN) > F.col(previous_order)))
                .persist()
            )
            cached.append(decided)
            applied = decided.count()
            merge_source = decided.select(
                *[quote(c) for c in shape.key],
                *[quote(c) for c in shape.value_columns],
                (~F.col("is_delete")).alias(PRESENT),
            )
            phase("merge_started")
            commit = refresh.write(
                None, shape.key, shape.value_columns, request, lambda: maybe_broadcast(merge_source, applied)
            )
        finally:
            for frame in cached:
                frame.unpersist()
        rows = _rows(
            commit,
            changes=stats.events,
            null_keys=stats.null_keys,
            null_orders=stats.null_orders,
            ignored=key_count - applied,
        )
        return commit, rows

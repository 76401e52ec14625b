"""Stream-table lookup join (Kafka KIP-99 ``KStream.join(GlobalKTable)``), one refresh at a time.

Each refresh pins the stream's and the table's latest versions, reads the stream records appended
since the last refresh (the stream's change feed), joins each to the table **as of the pinned
version**, and appends the results to the output in one Delta commit that also records the stream
version consumed (exactly once). It is a lookup: table changes never re-emit or retract earlier
output, a table update only affects stream records of later refreshes, and a refresh with no new
stream version is a ``noop`` even if the table changed.

* At most one output row per stream record (the table has one row per key; a duplicate among the
  looked-up keys is an InputDataError).
* Inner join: a record whose mapped key is null or missing from the table emits nothing. Left join:
  it emits the record with a null table side (KAFKA-19208's behaviour for a null mapped key).
  A null *stream* key is fine (KAFKA-10277): only the mapped key matters.
* The table is broadcast (the stream is never shuffled, which is the point of a global table). An
  incremental refresh first narrows the table to the batch's mapped keys, so only that small slice
  is broadcast; a full refresh broadcasts the whole table when its on-disk size is within
  ``broadcast_limit_bytes``, and above it falls back to a shuffle join with a warning.
* When the table is a global table (a ``global_table_bootstrap`` output) whose checkpoint is behind
  its source's high watermark, the refresh refuses to start (``TableNotBootstrappedError``) unless the
  spec sets ``allow_unbootstrapped_table``: Kafka starts stream threads only after global tables
  are restored.

Example::

    refresh_once(StreamTableJoinRefresh(load_spec({"kind": "stream_table_join",
        "stream": {"path": "/w/orders_stream"},
        "table": {"path": "/w/products_global", "key": ["product_id"]},
        "key_mapper": ["product_id"], "how": "left", "output": {"path": "/w/orders_enriched"}}), spark),
        options)
    # {"mode": "incremental", "rows": {"inserted": 120, "stream_records_read": 120, ...}, ...}
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame, Observation
from pyspark.sql import functions as F

from ..core.errors import SpecError, TableNotBootstrappedError
from ..core.planning import InputState, RefreshPlan
from ..core.progress import InputProgress
from ..core.spec import StreamTableJoinSpec, TableRef, quote
from ..core.trace import phase
from ..delta import changelog as cl
from ..delta.changes import BROADCAST_LIMIT_ROWS, check_keys, feed_errors, read_feed
from ..delta.output_log import read_progress
from ..delta.tables import (
    CDF_COLUMNS,
    DeltaHandle,
    TableState,
    input_frame,
    key_is_null,
    pinned_input,
    require_columns,
    table_size_bytes,
)
from ..deltalog import watermarks
from ..refresh.skeleton import KindRefresh, RefreshContext, Written
from ..runtime.expressions import analysed, check_expressions, schema_probe
from ..write.merge import Commit, CommitRequest, append_output

MAPPED_PREFIX = "_fkjoin_mk"
BOOTSTRAP_KIND = "global_table_bootstrap"


@dataclass(frozen=True)
class StreamJoinShape:
    """The join's columns, resolved against the live schemas."""

    table_key: list[str]
    mapped_columns: list[str]
    mapped_exprs: list[Column]
    output_columns: list[str]
    projection: list[Column]


class LookupTable:
    """The table side as the join sees it: key and value columns, from a table or a changelog source.

    A global table's internal ``_fkjoin_*`` columns are left out.
    """

    def __init__(
        self,
        spec: StreamTableJoinSpec,
        handle: DeltaHandle,
        state: TableState,
        *,
        keyed_by_engine: bool = False,
    ) -> None:
        self.handle = handle
        self.version = state.version
        self.needs_key_check = spec.table.changelog is None and not keyed_by_engine
        self.key = list(spec.table.key)
        raw = input_frame(handle, state, engine_owned=keyed_by_engine)
        self.changelog = (
            cl.resolve_changelog(spec.table, handle, raw.schema) if spec.table.changelog is not None else None
        )
        self.raw = raw
        if self.changelog is None:
            require_columns(raw.columns, self.key, "table.key", handle)
            self.columns = list(raw.columns)
        else:
            self.columns = self.changelog.table_columns

    def rows(self, keys: DataFrame | None = None) -> DataFrame:
        """The table's rows (non-null keys), narrowed to ``keys`` (a small frame of key columns) if given."""
        if self.changelog is None:
            frame = self.raw.where(~key_is_null(self.key)).select(*[quote(c) for c in self.columns])
            if keys is not None:
                frame = frame.join(F.broadcast(keys), on=self.key, how="left_semi")
            return frame
        events = self.raw
        if keys is not None:
            events = events.join(F.broadcast(keys), on=self.key, how="left_semi")
        return cl.latest_state(events, self.changelog, keep_order=False)

    def empty(self) -> DataFrame:
        return self.rows().limit(0)


def resolve_shape(
    spec: StreamTableJoinSpec, stream: DeltaHandle, stream_df: DataFrame, table: LookupTable
) -> StreamJoinShape:
    """Check the spec against the live tables and build the column expressions; reads no data."""
    stream_names = stream_df.columns
    if spec.stream.key:
        require_columns(stream_names, spec.stream.key, "stream.key", stream)
    table_df = table.empty()
    table_types = {f.name: f.dataType for f in table_df.schema.fields}
    mapped_columns = [f"{MAPPED_PREFIX}{i}" for i in range(len(spec.table.key))]
    if isinstance(spec.key_mapper, list):
        require_columns(stream_names, spec.key_mapper, "key_mapper", stream)
        exprs = [F.col(quote(c)) for c in spec.key_mapper]
        sources = [f"stream column {c!r}" for c in spec.key_mapper]
        paths = [f"key_mapper[{i}]" for i in range(len(exprs))]
    else:
        paths = [f"key_mapper.expr[{i}]" for i in range(len(spec.key_mapper.expressions))]
        checked = check_expressions(
            schema_probe(stream_df.sparkSession, {"s": stream_df.schema}),
            dict(zip(paths, spec.key_mapper.expressions, strict=True)),
        )
        exprs = list(checked.values())
        sources = [f"expression {e!r}" for e in spec.key_mapper.expressions]
    typed = analysed(
        "key_mapper",
        lambda: stream_df.select(*[e.alias(n) for e, n in zip(exprs, mapped_columns, strict=True)]),
    )
    for index, (field, key_column) in enumerate(zip(typed.schema.fields, spec.table.key, strict=True)):
        expected = table_types[key_column]
        if field.dataType != expected:
            raise SpecError(
                f"{paths[index]}: {sources[index]} is {field.dataType.simpleString()} but table.key "
                f"{key_column!r} is {expected.simpleString()}; keys compare by exact value, so cast it: "
                f'key_mapper: {{expr: "CAST(... AS {expected.simpleString().upper()})"}}'
            )
    if spec.columns is None:
        values = [c for c in table.columns if c not in spec.table.key]
        clash = sorted(set(values) & set(stream_names))
        if clash:
            raise SpecError(
                f"columns: the default projection (every stream column, then every table non-key column) "
                f"has {clash} on both sides; set 'columns' to name the output columns, e.g. "
                f"columns: {{table_{clash[0]}: t.{clash[0]}}}"
            )
        output_columns = stream_names + values
        projection = [F.col(f"s.{quote(c)}").alias(c) for c in stream_names] + [
            F.col(f"t.{quote(c)}").alias(c) for c in values
        ]
    else:
        key = [c for c in spec.stream.key or [] if c not in spec.columns]
        output_columns = key + list(spec.columns)
        checked = check_expressions(
            schema_probe(stream_df.sparkSession, {"s": stream_df.schema, "t": table_df.schema}),
            {f"columns.{name}": expression for name, expression in spec.columns.items()},
        )
        projection = [F.col(f"s.{quote(c)}").alias(c) for c in key] + [
            column.alias(name) for name, column in zip(spec.columns, checked.values(), strict=True)
        ]
    probe = stream_df.limit(0).alias("s").join(table_df.alias("t"), F.lit(False), "left")
    analysed("columns", lambda: probe.select(*projection))
    return StreamJoinShape(list(spec.table.key), mapped_columns, exprs, output_columns, projection)


def lookup_join(
    records: DataFrame, table_rows: DataFrame, shape: StreamJoinShape, how: str, *, broadcast: bool
) -> DataFrame:
    """Join stream records to table rows by the mapped key and project the output columns.

    With ``broadcast`` the table side is broadcast (a BroadcastHashJoin: the stream is not shuffled);
    without, a sort-merge join is forced. A null mapped key never matches (equality with null is not
    true), so the inner join drops the record and the left join keeps it with a null table side.
    """
    mapped = records.select(
        "*", *[e.alias(n) for e, n in zip(shape.mapped_exprs, shape.mapped_columns, strict=True)]
    )
    side = F.broadcast(table_rows) if broadcast else table_rows.hint("merge")
    condition = None
    for mapped_column, key_column in zip(shape.mapped_columns, shape.table_key, strict=True):
        term = F.col(f"s.{mapped_column}") == F.col(f"t.{quote(key_column)}")
        condition = term if condition is None else condition & term
    joined = mapped.alias("s").join(side.alias("t"), condition, "inner" if how == "inner" else "left")
    return joined.select(*shape.projection)


def global_table_checkpoint(table: DeltaHandle) -> tuple[str, int] | None:
    """(source location, checkpoint version) when ``table`` is a global table this engine maintains.

    Reads only the Delta log (``watermarks``, no Spark job for local tables).
    """
    local = table.local_path
    if local is not None:
        latest = watermarks.progress(local)
        if latest is None or latest["kind"] != BOOTSTRAP_KIND or "source" not in latest["inputs"]:
            return None
        return str(latest["inputs"]["source"]["location"]), int(latest["inputs"]["source"]["version"])
    previous = read_progress(table)
    if previous is None or previous.kind != BOOTSTRAP_KIND or "source" not in previous.inputs:
        return None
    return previous.inputs["source"].location, previous.inputs["source"].version


def check_bootstrapped(
    spec: StreamTableJoinSpec, table: DeltaHandle, checkpoint_of: tuple[str, int] | None
) -> str | None:
    """Refuse to start when the table is a global table behind its source (Kafka's bootstrap latch).

    ``checkpoint_of`` is :func:`global_table_checkpoint` of the table. Returns a warning when the spec
    allows it, None when the table is not a global table or is caught up.
    """
    if spec.table.changelog is not None or checkpoint_of is None:
        return None
    source_location, checkpoint = checkpoint_of
    source_ref = (
        TableRef(name=source_location.removeprefix("name:"))
        if source_location.startswith("name:")
        else TableRef(path=source_location)
    )
    source = DeltaHandle(table.spark, source_ref, "source")
    try:
        if source.local_path is not None:
            high = watermarks.high_watermark(source.local_path)
        else:
            high = source.state().version
    except watermarks.TableMissingError:
        return f"global table {table.location}: its source {source_location} is gone; joining the table as is"
    if checkpoint >= high:
        return None
    message = (
        f"table {table.location} is a global table at checkpoint version {checkpoint} of its source "
        f"{source_location}, behind the source's high watermark {high}"
    )
    if not spec.allow_unbootstrapped_table:
        raise TableNotBootstrappedError(
            f"{message}: run its global_table_bootstrap first (stream records must see the fully "
            "bootstrapped table), or set allow_unbootstrapped_table: true to join the table as it is. "
            "Nothing was written."
        )
    return f"{message}; joining it anyway (allow_unbootstrapped_table)"


def _rows(
    commit: Commit | None = None,
    *,
    read: int = 0,
    ignored: int = 0,
    looked_up: int = 0,
    strategy: str = "none",
) -> dict[str, Any]:
    return {
        "inserted": commit.inserted if commit else 0,
        "updated": 0,
        "deleted": 0,
        "stream_records_read": read,
        "stream_changes_ignored": ignored,
        "table_rows_looked_up": looked_up,
        "join_strategy": strategy,
    }


class StreamTableJoinRefresh(KindRefresh):
    """Join the stream records appended since the last refresh to the pinned table; append the result.

    >>> refresh_once(StreamTableJoinRefresh(load_spec("orders_x_products.yaml"), spark), options)["mode"]
    'incremental'
    """

    spec: StreamTableJoinSpec
    append_only = True
    replace_consequence = (
        "Replacing re-joins every stream record against the table as it is now, so earlier lookups change."
    )

    def before_pin(self) -> None:
        """Kafka's bootstrap latch, checked before the table is pinned: the pinned table is at least as
        far as the checkpoint checked."""
        self.stream, self.table = self.handles["stream"], self.handles["table"]
        self.checkpoint_of = (
            global_table_checkpoint(self.table) if self.spec.table.changelog is None else None
        )
        bootstrap_warning = check_bootstrapped(self.spec, self.table, self.checkpoint_of)
        if bootstrap_warning:
            self.warnings.append(bootstrap_warning)

    def prepare(self, states: dict[str, TableState]) -> dict[str, InputState]:
        spec, checkpoint_of = self.spec, self.checkpoint_of
        self.versions = {side: state.version for side, state in states.items()}
        self.stream_df = input_frame(self.stream, states["stream"])
        # A global table is written by MERGE on its key, so it holds one row per key: no duplicate check.
        self.lookup = LookupTable(
            spec, self.table, states["table"], keyed_by_engine=checkpoint_of is not None
        )
        self.shape = resolve_shape(spec, self.stream, self.stream_df, self.lookup)
        if not states["stream"].cdf_enabled:
            self.warnings.append(
                f"change data feed is off on stream {self.stream.location}: every refresh re-joins the whole "
                "stream against the current table; enable it with ALTER TABLE ... SET TBLPROPERTIES "
                "(delta.enableChangeDataFeed = true)"
            )
        if spec.table.changelog is not None:
            self.warnings.append(
                f"table {self.table.location} is a changelog source: each refresh reduces its events to the "
                "latest per key; bootstrap it into a global table (global_table_bootstrap) to join a "
                "materialised table"
            )
        self.table_state = states["table"]
        return {"stream": pinned_input(self.stream, states["stream"], self.stream_df.schema)}

    def consumed(self, current: dict[str, InputState]) -> dict[str, InputProgress]:
        """The stream's version, and the table's: looked up, not consumed, but recorded for the result."""
        return {
            "stream": current["stream"].consumed(),
            "table": InputProgress(self.table.location, self.table_state.table_id, self.versions["table"]),
        }

    def noop_rows(self) -> dict[str, Any]:
        return _rows()

    def result_inputs(self, refresh: RefreshContext, plan: RefreshPlan) -> dict[str, dict[str, Any]]:
        """The table's range is the versions the output's records saw, not a range consumed."""
        previous = refresh.previous
        table_from = previous.inputs["table"].version if previous and "table" in previous.inputs else None
        return {
            "stream": {
                "path": self.stream.location,
                "from_version": plan.from_versions.get("stream"),
                "to_version": self.versions["stream"],
            },
            "table": {
                "path": self.table.location,
                "from_version": table_from if plan.mode != "full" else None,
                "to_version": self.versions["table"] if plan.mode != "noop" else table_from,
            },
        }

    def incremental(self, refresh: RefreshContext, plan: RefreshPlan) -> Written:
        after = plan.from_versions["stream"]
        assert after is not None
        request = refresh.request("incremental", plan.reason)
        return Written(
            *_incremental(
                self.spec,
                self.shape,
                self.stream,
                self.lookup,
                self.output,
                after,
                self.versions["stream"],
                self.warnings,
                request,
            )
        )

    def full(self, refresh: RefreshContext, plan: RefreshPlan) -> Written:
        request = refresh.request("full", plan.reason)
        return Written(
            *_full(self.spec, self.shape, self.stream_df, self.lookup, self.output, self.warnings, request)
        )


def _full(
    spec: StreamTableJoinSpec,
    shape: StreamJoinShape,
    stream_df: DataFrame,
    lookup: LookupTable,
    output: DeltaHandle,
    warnings: list[str],
    request: CommitRequest,
) -> tuple[Commit, dict[str, Any]]:
    """Join every stream record to the pinned table; create or replace the output."""
    broadcast = _fits_broadcast(spec, lookup, warnings, "the whole stream")
    table_rows = lookup.rows()
    if lookup.needs_key_check:
        check_keys(table_rows, lookup.key, lookup.handle, lookup.version, count_nulls=False)
    phase("changes_read")
    joined = lookup_join(stream_df, table_rows, shape, spec.how, broadcast=broadcast)
    phase("merge_started")
    commit = append_output(output, joined, request, replace=output.exists())
    return commit, _rows(commit, read=_row_count(stream_df), strategy="broadcast" if broadcast else "shuffle")


def _fits_broadcast(
    spec: StreamTableJoinSpec, lookup: LookupTable, warnings: list[str], shuffled: str
) -> bool:
    """Whether the whole table is small enough on disk to broadcast; warns (naming what is shuffled
    instead, e.g. "the batch") when it is not."""
    size = table_size_bytes(lookup.handle, lookup.version)
    if size <= spec.broadcast_limit_bytes:
        return True
    warnings.append(
        f"table {lookup.handle.location} is {size} bytes on disk, above broadcast_limit_bytes "
        f"({spec.broadcast_limit_bytes}): {shuffled} is shuffled for a sort-merge join"
    )
    return False


def _row_count(frame: DataFrame) -> int:
    """Rows of a pinned Delta snapshot: Delta answers ``count()`` from the log's file statistics when
    they cover every file (a metadata-only query), else it runs a count job."""
    return int(frame.count())


def _incremental(
    spec: StreamTableJoinSpec,
    shape: StreamJoinShape,
    stream: DeltaHandle,
    lookup: LookupTable,
    output: DeltaHandle,
    after: int,
    to: int,
    warnings: list[str],
    request: CommitRequest,
) -> tuple[Commit, dict[str, Any]]:
    """Join the stream records appended in versions ``after+1..to`` and append them.

    The table is first narrowed to the batch's mapped keys (a scan of the table, no shuffle), and
    that slice is broadcast into the join.
    """
    feed = read_feed(stream, after, to)
    cached: list[DataFrame] = []
    appended = stream.appended_rows(after, to)
    try:
        if appended is not None:
            # Blind appends only: the log gives the count, and the feed is first read by the write.
            read, ignored = appended, 0
        else:
            feed = feed.persist()
            cached.append(feed)
            with feed_errors(stream, after, to):  # vacuumed change files surface when first read
                counts = {row[0]: int(row[1]) for row in feed.groupBy("_change_type").count().collect()}
            read = counts.get("insert", 0)
            ignored = sum(n for change, n in counts.items() if change not in {"insert", "update_preimage"})
        if ignored:
            warnings.append(
                f"stream {stream.location} deleted or updated {ignored} record(s) in versions {after + 1}.."
                f"{to}; a stream is append-only, so they were ignored (earlier output is never retracted)"
            )
        records = feed.where(F.col("_change_type") == "insert").drop(*CDF_COLUMNS)
        phase("changes_read")
        # Without the counting job the batch's change files are first read here.
        reading = feed_errors(stream, after, to) if appended is not None else nullcontext()
        with reading:
            table_rows, looked_up_rows, broadcast = _batch_lookup(
                spec, shape, lookup, records, read, warnings, cached
            )
            joined = lookup_join(records, table_rows, shape, spec.how, broadcast=broadcast)
            phase("merge_started")
            commit = append_output(output, joined, request)
        looked_up = looked_up_rows()
    finally:
        for frame in cached:
            frame.unpersist()
    rows = _rows(
        commit,
        read=read,
        ignored=ignored,
        looked_up=looked_up,
        strategy="broadcast" if broadcast else "shuffle",
    )
    return commit, rows


def _batch_lookup(
    spec: StreamTableJoinSpec,
    shape: StreamJoinShape,
    lookup: LookupTable,
    records: DataFrame,
    read: int,
    warnings: list[str],
    cached: list[DataFrame],
) -> tuple[DataFrame, Callable[[], int], bool]:
    """The table rows a batch of ``read`` records joins: (rows, rows looked up once joined, broadcast).

    A batch of up to ``BROADCAST_LIMIT_ROWS`` records narrows the table to its mapped keys and
    broadcasts that slice; a larger one joins the whole table, broadcast when it is small enough on
    disk. The slice of a table that needs no duplicate check is neither cached nor counted: the join
    reads it once, and an observed metric counts it on the way.
    """
    if read > BROADCAST_LIMIT_ROWS:
        return lookup.rows(), lambda: 0, _fits_broadcast(spec, lookup, warnings, "the batch")
    mapped = records.select(
        *[e.alias(k) for e, k in zip(shape.mapped_exprs, shape.table_key, strict=True)]
    ).where(~key_is_null(shape.table_key))
    table_rows = lookup.rows(mapped.distinct())
    if lookup.needs_key_check:
        table_rows = table_rows.persist()
        cached.append(table_rows)
        check_keys(table_rows, lookup.key, lookup.handle, lookup.version, count_nulls=False)
        looked_up = table_rows.count()
        return table_rows, lambda: looked_up, True
    observation = Observation()
    table_rows = table_rows.observe(observation, F.count(F.lit(1)).alias("rows"))
    return table_rows, lambda: _observed_rows(observation), True


def _observed_rows(observation: Observation) -> int:
    """The row count an observation collected; 0 when its node never ran (the optimizer removed it for
    an empty table), which Spark reports as an empty metrics map.

    Classic PySpark's ``get`` waits forever for a node that never runs and fails on an empty map, so the
    JVM object is asked directly, once the action is done. A Spark Connect observation has no JVM object:
    its ``get`` holds what the action's response carried (nothing, for a node that never ran).
    """
    if not hasattr(observation, "_jo"):  # a Spark Connect observation
        return int(observation.get.get("rows") or 0)
    jvm_observation = observation._jo  # type: ignore[attr-defined]
    if jvm_observation is None or not jvm_observation.future().isCompleted():
        return 0
    rows = jvm_observation.getAsJava().get("rows")
    return int(rows) if rows is not None else 0

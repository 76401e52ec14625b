"""The stream-stream windowed join (Kafka's KStream-KStream join with ``JoinWindows``), one refresh at a time.

The semantics are ``docs/kinds/windowed-join.md``'s stream mode: Kafka processes records one by one; a
refresh here processes the rows appended to both inputs since the last refresh *as if* one by one, in
the reference's order, but computes every outcome with joins and window functions over all of them:

1. **Order** (processing order). Each input's new rows are numbered by (Delta commit version, ``order_by``, a
row
   hash): ``pos``. Their running maximum event time ``m`` merges the two inputs: a row's global rank is
   ``(m, side, pos)`` (Kafka's "take the input whose head has the smaller timestamp"), or ``(pos, side)``
   when both sides are one table (each row is processed as a left row, then as a right row).
2. **Times** (state). Stream time at a row is ``max(previous stream time, m)``: every earlier row has a
   running maximum at most ``m``. A side's observed time at a row is a running maximum over that side's
   non-null-key rows in global order (one window pass over the new rows' narrow columns).
3. **Pairs** (row rules, step 4). A new row ``x`` joins every row ``o`` of the other side with the same key
that
   came before it (an earlier refresh's row, or an earlier rank) whose time is in ``x``'s band (Kafka's
   clamped ``[t - before, t + after]`` for a left row, ``[t - after, t + before]`` for a right row) and
   that had not expired: ``o.t >= observed(other side at x) - retention + 1``. Each pair is found once,
   from its later member. Earlier rows come from the input at its consumed version, limited to the
   retention window: the window stores are the inputs themselves.
4. **Unmatched rows** (left and outer joins; row rules, steps 2, 3 and 5). A null-key row of an outer side is
   emitted at once. A row of an outer side that matched nothing on arrival is emitted at once when its
   window has closed (``t + lookback (+ grace) < stream time``), else it is *pending*. A pending row (new,
   or carried from earlier refreshes) ends at the first later row that matches it (then it never appears
   unmatched) or at the first *trigger* (a non-null row whose time equals stream time) at which stream
   time passes ``t + lookback + grace``, whichever comes first (a trigger closes before it joins): then
   it is emitted unmatched. Otherwise it stays pending.

State between refreshes: stream time and each side's observed time ride in the output commit's progress;
pending rows live in an engine-owned Delta table beside the output (``<output>_fkjoin_state/pending``,
:mod:`...delta.state_tables`). Each refresh rewrites the state table first, then appends to the output with a
commit recording that state version, so a crash between the two commits leaves the state version the
output names untouched, and the rerun starts from it.

Example::

    refresh_once(EventJoinRefresh(load_spec({"kind": "windowed_join", "mode": "stream",
        "left": {"path": "/w/impressions", "key": ["ad_id"], "time": "shown_at", "order_by": ["offset"]},
        "right": {"path": "/w/clicks", "key": ["ad_id"], "time": "clicked_at"},
        "window": {"before": "1h", "after": "1h", "grace": "10m"}, "how": "left",
        "output": {"path": "/w/ad_clicks"}}), spark), options)
    # {"mode": "incremental", "rows": {"inserted": 42, "pairs": 40, "unmatched": 2, "pending": 7, ...}}
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ...core.errors import InputDataError, SpecError
from ...core.planning import InputState, RebuildRequired, RefreshPlan
from ...core.spec import EVENT_TIME, EventStreamRef, WindowedJoinSpec, quote
from ...core.trace import phase
from ...delta.changes import maybe_broadcast, read_feed
from ...delta.state_tables import StateTable
from ...delta.tables import DeltaHandle, TableState, input_frame, null_of, pinned_input, require_columns
from ...refresh.skeleton import KindRefresh, RefreshContext, Written
from ...runtime.expressions import analysed, check_expressions, schema_probe
from ...write.merge import Commit, append_output

SIDES = ("left", "right")
_SIDE = "_fkjoin_side"  # 0: left, 1: right
_POS = "_fkjoin_pos"
_T = "_fkjoin_t"
_M = "_fkjoin_m"
_NULL = "_fkjoin_knull"
_LEFT_ROW, _RIGHT_ROW = "_fkjoin_l", "_fkjoin_r"
_G = "_fkjoin_g"
#: A row's rank in a refresh's processing order (a struct compares field by field); null for a row of an
#: earlier refresh, which comes before every new row.
_RANK_TYPE = T.StructType(
    [T.StructField("a", T.LongType()), T.StructField("b", T.LongType()), T.StructField("c", T.LongType())]
)
_VERSION = "_fkjoin_version"
_ST = "_fkjoin_st"
_OBS = ("_fkjoin_obs_l", "_fkjoin_obs_r")
_OBS_OTHER = "_fkjoin_obs_other"
#: The extra progress a stream-mode refresh records: stream time, observed times, state version.
STATE_EXTRA = "windowed_stream"


def _key_column(index: int) -> str:
    return f"_fkjoin_k{index}"


def epoch_ms(column: Column, data_type: T.DataType) -> Column:
    """An event-time column as epoch milliseconds (BIGINT): TIMESTAMP to the millisecond, DATE at midnight
    UTC, BIGINT/INT as given."""
    if isinstance(data_type, T.TimestampType):
        return F.unix_millis(column)  # an exact floor division of the microseconds
    if isinstance(data_type, T.DateType):
        return (F.unix_date(column).cast("long") * F.lit(86_400_000)).cast("long")
    return column.cast("long")


def time_at_least(column: Column, data_type: T.DataType, ms: int) -> Column:
    """``epoch_ms(column) >= ms`` written on the column itself against a constant, so that Delta can skip
    files by their min/max statistics (it cannot see through ``epoch_ms``).

    >>> time_at_least(F.col("shown_at"), T.TimestampType(), 1_700_000_000_123)  # shown_at >= ...:00.123
    """
    if isinstance(data_type, T.TimestampType):
        return column >= F.timestamp_micros(F.lit(ms * 1000))
    if isinstance(data_type, T.DateType):
        return column >= F.date_from_unix_date(F.lit(-(-ms // 86_400_000)).cast("int"))
    return column >= F.lit(ms)


_TIME_TYPES = (T.TimestampType, T.DateType, T.LongType, T.IntegerType)


@dataclass(frozen=True)
class StreamShape:
    """The join's columns, checked against both inputs' live schemas (no data read)."""

    left_schema: T.StructType
    right_schema: T.StructType
    time_type: T.DataType
    projection: list[Column]
    output_columns: list[str]


def resolve_shape(
    spec: WindowedJoinSpec,
    handles: dict[str, DeltaHandle],
    frames: dict[str, DataFrame],
    names: tuple[str, str] = SIDES,
) -> StreamShape:
    """Check keys, time and order columns and the projection; SpecError naming the field otherwise
    (``names``: what the spec calls the two sides, ``("input", "input")`` for a self_join)."""
    refs: dict[str, EventStreamRef] = {"left": spec.left, "right": spec.right}
    types: dict[str, dict[str, T.DataType]] = {}
    for side, name in zip(SIDES, names, strict=True):
        ref, handle, schema = refs[side], handles[side], frames[side].schema
        columns = [f.name for f in schema.fields]
        require_columns(columns, ref.key, f"{name}.key", handle)
        require_columns(columns, [ref.time], f"{name}.time", handle)
        require_columns(columns, ref.order_by, f"{name}.order_by", handle)
        types[side] = {f.name: f.dataType for f in schema.fields}
        time_type = types[side][ref.time]
        if not isinstance(time_type, _TIME_TYPES):
            raise SpecError(
                f"{name}.time: column {ref.time!r} of {name} table {handle.location} is "
                f"{time_type.simpleString()}; an event time must be TIMESTAMP, DATE or epoch milliseconds "
                "(BIGINT)"
            )
    left_time, right_time = types["left"][spec.left.time], types["right"][spec.right.time]
    if left_time != right_time:
        raise SpecError(
            f"right.time: column {spec.right.time!r} is {right_time.simpleString()} but left.time "
            f"{spec.left.time!r} is {left_time.simpleString()}; both event times must have one type (the "
            "output's event_time has it), so cast one side in a view written to a Delta table"
        )
    for index, (lk, rk) in enumerate(zip(spec.left.key, spec.right.key, strict=True)):
        if types["left"][lk] != types["right"][rk]:
            raise SpecError(
                f"right.key[{index}]: column {rk!r} is {types['right'][rk].simpleString()} but left.key "
                f"{lk!r} is {types['left'][lk].simpleString()}; keys compare by exact value, so both must "
                "have one type"
            )
    left_schema, right_schema = frames["left"].schema, frames["right"].schema
    if spec.columns is None:
        left_values = [c for c in left_schema.names if c not in spec.left.key]
        right_values = [c for c in right_schema.names if c not in spec.right.key]
        names = list(spec.left.key) + left_values + right_values
        clash = sorted({c for c in names if names.count(c) > 1} | ({EVENT_TIME} & set(names)))
        if clash:
            raise SpecError(
                f"columns: the default projection (the key, every left column, then every right column, "
                f"and {EVENT_TIME}) has {clash} twice; set 'columns' to name the output columns, e.g. "
                f"columns: {{right_{clash[0]}: r.{clash[0]}}}"
            )
        projection = [
            F.coalesce(F.col(f"l.{quote(lk)}"), F.col(f"r.{quote(rk)}")).alias(lk)
            for lk, rk in zip(spec.left.key, spec.right.key, strict=True)
        ]
        projection += [F.col(f"l.{quote(c)}").alias(c) for c in left_values]
        projection += [F.col(f"r.{quote(c)}").alias(c) for c in right_values]
    else:
        probe = schema_probe(frames["left"].sparkSession, {"l": left_schema, "r": right_schema})
        checked = check_expressions(probe, {f"columns.{name}": text for name, text in spec.columns.items()})
        projection = [column.alias(name) for name, column in zip(spec.columns, checked.values(), strict=True)]
    probe_rows = frames["left"].sparkSession.createDataFrame(
        [], T.StructType([T.StructField("l", left_schema), T.StructField("r", right_schema)])
    )
    projected = analysed("columns", lambda: probe_rows.select(*projection))
    return StreamShape(left_schema, right_schema, left_time, projection, projected.columns)


@dataclass(frozen=True)
class StreamRefreshState:
    """What :meth:`EventJoinRefresh.prepare` resolved, handed to the computation as one value: the join to
    compute, its columns, the inputs (handles and pinned states, by name), the pending-rows table, the
    refresh's warnings (appended to) and the inputs' names by side (index 0: left, 1: right; keys of
    ``handles``, ``states``, the plan and the result; ``("input", "input")`` for a self_join)."""

    spec: WindowedJoinSpec
    shape: StreamShape
    handles: dict[str, DeltaHandle]
    states: dict[str, TableState]
    state: StateTable
    warnings: list[str]
    names: tuple[str, str] = SIDES


@dataclass(frozen=True)
class CarriedState:
    """What a refresh hands the next one besides the inputs: stream time, each side's observed time (None:
    nothing seen yet), the version of the pending-rows table (None: the join keeps none) and how many rows
    it holds (sizes the next write)."""

    stream_time: int | None
    observed: tuple[int | None, int | None]
    state_version: int | None
    pending_rows: int | None = None

    @staticmethod
    def empty() -> CarriedState:
        return CarriedState(None, (None, None), None)

    @staticmethod
    def from_extra(extra: dict[str, Any] | None) -> CarriedState | None:
        if not extra:
            return None
        observed = extra.get("observed", {})
        return CarriedState(
            extra.get("stream_time"),
            (observed.get("left"), observed.get("right")),
            extra.get("state_version"),
            extra.get("pending_rows"),
        )

    def to_extra(self) -> dict[str, Any]:
        return {
            STATE_EXTRA: {
                "stream_time": self.stream_time,
                "observed": {"left": self.observed[0], "right": self.observed[1]},
                "state_version": self.state_version,
                "pending_rows": self.pending_rows,
            }
        }


def _rows(names: tuple[str, str], inserted: int = 0, **counts: Any) -> dict[str, Any]:
    rows = {
        "inserted": inserted,
        "updated": 0,
        "deleted": 0,
        "pairs": 0,
        "unmatched": 0,
        "pending": 0,
        "rows_read": dict.fromkeys(names, 0),
        "null_keys_dropped": dict.fromkeys(names, 0),
    }
    rows.update(counts)
    return rows


class StreamJoinRefresh:
    """One refresh's computation (module docstring, steps 1-4) and its two commits (state, then output)."""

    def __init__(self, prepared: StreamRefreshState, plan: RefreshPlan, carried: CarriedState) -> None:
        #: What the refresh prepared (:class:`StreamRefreshState`), and this path's plan and carried state.
        self.prepared, self.plan, self.carried = prepared, plan, carried
        spec, shape = prepared.spec, prepared.shape
        self.spark = prepared.handles[prepared.names[0]].spark
        self.refs: tuple[EventStreamRef, EventStreamRef] = (spec.left, spec.right)
        window = spec.window
        self.before, self.after, self.grace = window.before, window.after, window.grace
        self.retention = window.retention
        self.key_columns = [_key_column(i) for i in range(len(spec.left.key))]
        self.outer = (spec.how in ("left", "outer"), spec.how == "outer")
        self.cached: list[DataFrame] = []
        self.row_types = (
            T.StructType(list(shape.left_schema.fields)),
            T.StructType(list(shape.right_schema.fields)),
        )

    # -- reading ---------------------------------------------------------------------------------------

    def _canonical(
        self, frame: DataFrame, side: int, version: Column, extra: list[Column] | None = None
    ) -> DataFrame:
        """Rows of one side in the join's own columns: side, version, key parts, time in ms, null-key flag,
        the row itself (a struct of the input's columns) and the ``order_by`` values."""
        ref = self.refs[side]
        time_type = self.prepared.shape.time_type
        keys = [F.col(quote(c)).alias(k) for c, k in zip(ref.key, self.key_columns, strict=True)]
        null = F.lit(False)
        for column in ref.key:
            null = null | F.col(quote(column)).isNull()
        schema = self.prepared.shape.left_schema if side == 0 else self.prepared.shape.right_schema
        row = F.struct(*[F.col(quote(c)) for c in schema.names])
        return frame.select(
            F.lit(side).alias(_SIDE),
            version.cast("long").alias(_VERSION),
            *keys,
            epoch_ms(F.col(quote(ref.time)), time_type).alias(_T),
            null.alias(_NULL),
            row.alias(_LEFT_ROW) if side == 0 else null_of(self.row_types[0]).alias(_LEFT_ROW),
            row.alias(_RIGHT_ROW) if side == 1 else null_of(self.row_types[1]).alias(_RIGHT_ROW),
            F.xxhash64(*[F.col(quote(c)) for c in schema.names]).alias("_fkjoin_hash"),
            *[F.col(quote(c)).alias(f"_fkjoin_o{i}") for i, c in enumerate(ref.order_by)],
            *(extra or []),
        )

    def _new_rows(self, side: int) -> tuple[DataFrame, dict[str, int]]:
        """The rows a side appended since its consumed version, numbered in processing order (``pos``),
        with what the checks counted. A row that is not an insert, or has a null or negative event time,
        is an InputDataError before anything is written."""
        name = self.prepared.names[side]
        handle, to = self.prepared.handles[name], self.prepared.states[name].version
        after = self.plan.from_versions.get(name)
        first = after if after is not None else -1
        version, change_type = F.col("_commit_version"), F.col("_change_type")
        if first == to:
            feed, version, change_type = handle.read(to).limit(0), F.lit(0), F.lit("insert")
        else:
            try:
                feed = read_feed(handle, first, to)
            except RebuildRequired:
                if after is not None:
                    raise
                # A first run over a table whose change feed does not reach back to version 0: its rows
                # have no commit version, so they are ordered by order_by (and a row hash) alone.
                self.prepared.warnings.append(
                    f"{name} table {handle.location}'s change feed does not cover its whole history: this "
                    f"full run orders its rows by {name}.order_by (and a row hash), not by commit version"
                )
                feed, version, change_type = handle.read(to), F.lit(0), F.lit("insert")
        rows = self._canonical(feed, side, version, [change_type.alias("_fkjoin_ct")])
        ordering = [F.col(_VERSION)] + [F.col(f"_fkjoin_o{i}") for i in range(len(self.refs[side].order_by))]
        ordering.append(F.col("_fkjoin_hash"))
        order_columns = [f"_fkjoin_o{i}" for i in range(len(self.refs[side].order_by))]
        in_order = Window.orderBy(*ordering)
        numbered = rows.withColumn(_POS, F.row_number().over(in_order).cast("long"))
        for column, value in self._numbered_columns(in_order).items():
            numbered = numbered.withColumn(column, value)
        # Cached once: the checks, the processing order and the pairs all read these rows, and the change
        # feed is then read once per refresh instead of once per use.
        numbered = numbered.drop("_fkjoin_hash", _VERSION, *order_columns)
        numbered = numbered.persist(StorageLevel.MEMORY_AND_DISK)
        self.cached.append(numbered)
        counts = self._check(numbered, side, handle, first, to)
        return numbered.drop("_fkjoin_ct"), counts

    def _numbered_columns(self, in_order: Window) -> dict[str, Column]:
        """Columns computed over a side's new rows in processing order, in the numbering's own window pass
        (one sort): none here; a self-join adds its observed times."""
        return {}

    def _check(self, rows: DataFrame, side: int, handle: DeltaHandle, after: int, to: int) -> dict[str, int]:
        ref, name = self.refs[side], self.prepared.names[side]
        stats = rows.agg(
            F.count(F.lit(1)).alias("rows"),
            F.count(F.when(F.col("_fkjoin_ct") != "insert", 1)).alias("not_inserts"),
            F.count(F.when(F.col(_T).isNull(), 1)).alias("null_times"),
            F.count(F.when(F.col(_T) < 0, 1)).alias("negative_times"),
            F.count(F.when(F.col(_NULL), 1)).alias("null_keys"),
            F.max(F.col(_T)).alias("max_t"),
            F.max(F.when(~F.col(_NULL), F.col(_T))).alias("max_stored_t"),
        ).first()
        versions = f"versions {after + 1}..{to}"
        if stats["not_inserts"]:
            raise InputDataError(
                f"{name} table {handle.location} is not append-only: {versions} updated or deleted "
                f"{stats['not_inserts']} row(s) (change feed). A stream-mode windowed join reads event "
                "tables that only ever get new rows; write corrections as new events, or use mode: table"
            )
        if stats["null_times"] or stats["negative_times"]:
            problem = "null" if stats["null_times"] else "negative"
            count = stats["null_times"] or stats["negative_times"]
            raise InputDataError(
                f"{name} table {handle.location} has {count} row(s) with a {problem} event time in column "
                f"{ref.time!r} ({versions}); every event needs a time at or after 1970-01-01, so fix or "
                "filter those rows upstream; nothing was written"
            )
        return {
            "rows": int(stats["rows"]),
            "null_keys": int(stats["null_keys"]),
            "max_t": stats["max_t"],
            "max_stored_t": stats["max_stored_t"],
        }

    def _earlier_rows(self, side: int) -> DataFrame | None:
        """The rows a side stored in earlier refreshes that can still match (``t >= observed - retention
        + 1``): the input at its consumed version, filtered on the time column."""
        observed = self.carried.observed[side]
        after = self.plan.from_versions.get(self.prepared.names[side])
        if observed is None or after is None:
            return None
        handle = self.prepared.handles[self.prepared.names[side]]
        floor = observed - self.retention + 1
        retained = handle.read(after)
        if floor > 0:  # every stored time is at or after 0 (checked), so a floor below it filters nothing
            # The filter on the input's own column lets Delta skip files by their statistics; the one on
            # milliseconds is the exact rule.
            retained = retained.where(
                time_at_least(F.col(quote(self.refs[side].time)), self.prepared.shape.time_type, floor)
            )
        rows = self._canonical(retained, side, F.lit(-1)).drop("_fkjoin_hash")
        return rows.where(~F.col(_NULL) & (F.col(_T) >= F.lit(floor)))

    # -- computing -------------------------------------------------------------------------------------

    def _ranked(self, new: dict[int, DataFrame]) -> DataFrame:
        """Both sides' new rows with their processing rank, stream time and observed times (steps 1-2)."""
        if self.prepared.spec.same_table:
            rows = new[0].unionByName(self._as_right(new[0]))
        else:
            rows = new[0].unionByName(new[1])
        running = Window.partitionBy(_SIDE).orderBy(_POS).rowsBetween(Window.unboundedPreceding, 0)
        rows = rows.withColumn(_M, F.max(_T).over(running))
        if self.prepared.spec.same_table:
            rank = F.struct(
                F.col(_POS).alias("a"), F.col(_SIDE).cast("long").alias("b"), F.lit(0).cast("long").alias("c")
            )
        else:
            rank = F.struct(
                F.col(_M).alias("a"), F.col(_SIDE).cast("long").alias("b"), F.col(_POS).alias("c")
            )
        rows = rows.withColumn(_G, rank)
        in_order = Window.orderBy(F.col(f"{_G}.a"), F.col(f"{_G}.b"), F.col(f"{_G}.c")).rowsBetween(
            Window.unboundedPreceding, 0
        )
        narrow = rows.select(_SIDE, _POS, _G, _T, _NULL)
        previous_st, (previous_l, previous_r) = self.carried.stream_time, self.carried.observed
        times = narrow.select(
            _SIDE,
            _POS,
            *[
                F.greatest(
                    F.lit(prev).cast("long"),
                    F.max(F.when((F.col(_SIDE) == side) & ~F.col(_NULL), F.col(_T))).over(in_order),
                ).alias(_OBS[side])
                for side, prev in ((0, previous_l), (1, previous_r))
            ],
        )
        ranked = rows.join(times, [_SIDE, _POS]).withColumn(
            _ST, F.greatest(F.lit(previous_st).cast("long"), F.col(_M))
        )
        ranked = ranked.withColumn(
            _OBS_OTHER, F.when(F.col(_SIDE) == 0, F.col(_OBS[1])).otherwise(F.col(_OBS[0]))
        ).persist(StorageLevel.MEMORY_AND_DISK)
        self.cached.append(ranked)
        return ranked

    @staticmethod
    def _as_right(rows: DataFrame) -> DataFrame:
        """A same-table join's rows as right rows: the same positions, the row on the right."""
        return rows.withColumn(_SIDE, F.lit(1)).select(
            *[
                F.col(_LEFT_ROW).alias(_RIGHT_ROW)
                if c == _RIGHT_ROW
                else null_of(rows.schema[_LEFT_ROW].dataType).alias(_LEFT_ROW)
                if c == _LEFT_ROW
                else F.col(c)
                for c in rows.columns
            ]
        )

    def _band(self, probe: str, stored_time: Column) -> Column:
        """Whether a stored row's time is in the band of the row ``probe`` (an alias) that fetches it: Kafka's
        clamped ``[t - before, t + after]`` for a left row, ``[t - after, t + before]`` for a right row."""
        t, side = F.col(f"{probe}.{_T}"), F.col(f"{probe}.{_SIDE}")
        zero = F.lit(0).cast("long")
        low = F.when(side == 0, F.greatest(zero, t - self.before)).otherwise(F.greatest(zero, t - self.after))
        high = F.when(side == 0, F.greatest(zero, t + self.after)).otherwise(
            F.greatest(zero, t + self.before)
        )
        return (stored_time >= low) & (stored_time <= high)

    def _fetch_condition(self, probe: str, stored: str) -> Column:
        """``stored`` (alias) is a row ``probe`` fetches: other side, same key, in the band, not expired,
        stored before it (an earlier refresh's row has no rank)."""
        condition = F.col(f"{stored}.{_SIDE}") == F.lit(1) - F.col(f"{probe}.{_SIDE}")
        for column in self.key_columns:
            condition = condition & (F.col(f"{stored}.{column}") == F.col(f"{probe}.{column}"))
        stored_time = F.col(f"{stored}.{_T}")
        condition = condition & self._band(probe, stored_time)
        condition = condition & (stored_time >= F.col(f"{probe}.{_OBS_OTHER}") - F.lit(self.retention - 1))
        stored_rank = F.col(f"{stored}.{_G}")
        return condition & (stored_rank.isNull() | (stored_rank < F.col(f"{probe}.{_G}")))

    def _lookback(self) -> Column:
        return F.when(F.col(_SIDE) == 0, F.lit(self.after)).otherwise(F.lit(self.before))

    def _is_outer(self) -> Column:
        return F.when(F.col(_SIDE) == 0, F.lit(self.outer[0])).otherwise(F.lit(self.outer[1]))

    def _output(self, rows: DataFrame, event_time: Column, kind: str) -> DataFrame:
        """Output rows (the projection over ``l`` and ``r``, then ``event_time``), tagged with ``kind``."""
        framed = rows.select(
            F.col(_LEFT_ROW).alias("l"),
            F.col(_RIGHT_ROW).alias("r"),
            event_time.alias(EVENT_TIME),
            *[c for c in rows.columns if c.startswith("_fkjoin_") and c not in (_LEFT_ROW, _RIGHT_ROW)],
        )
        extra = [c for c in framed.columns if c.startswith("_fkjoin_")]
        return framed.select(
            *self.prepared.shape.projection, EVENT_TIME, *extra, F.lit(kind).alias("_fkjoin_kind")
        )

    def _own_time(self) -> Column:
        """An unmatched row's event time: its own time column, in the input's type."""
        left_time = F.col(f"{_LEFT_ROW}.{quote(self.prepared.spec.left.time)}")
        right_time = F.col(f"{_RIGHT_ROW}.{quote(self.prepared.spec.right.time)}")
        return F.coalesce(left_time, right_time)

    def compute(self, new: dict[int, DataFrame]) -> tuple[DataFrame, DataFrame | None]:
        """(output rows tagged ``_fkjoin_kind``, pending rows to keep or None for an inner join)."""
        ranked = self._ranked(new)
        stored = ranked.where(~F.col(_NULL))
        columns = [_SIDE, *self.key_columns, _T, _G, _LEFT_ROW, _RIGHT_ROW]
        candidates = stored.select(*columns)
        # Earlier rows can only pair with a new row of the same key: keep those keys' rows only.
        new_keys = stored.select(*self.key_columns).distinct()
        new_keys = maybe_broadcast(new_keys, self.new_row_count)
        for side in (0, 1):
            earlier = self._earlier_rows(side)
            if earlier is not None:
                earlier = earlier.join(new_keys, self.key_columns, "left_semi")
                earlier = earlier.withColumn(_G, F.lit(None).cast(_RANK_TYPE))
                candidates = candidates.unionByName(earlier.select(*columns))
                if self.prepared.spec.same_table:
                    candidates = candidates.unionByName(self._as_right(earlier).select(*columns))
                    break
        pairs = stored.alias("x").join(candidates.alias("o"), self._fetch_condition("x", "o"))
        pairs = pairs.persist(StorageLevel.MEMORY_AND_DISK)
        self.cached.append(pairs)
        left_time = F.col(f"l.{quote(self.prepared.spec.left.time)}")
        right_time = F.col(f"r.{quote(self.prepared.spec.right.time)}")
        joined = pairs.select(
            F.coalesce(F.col(f"x.{_LEFT_ROW}"), F.col(f"o.{_LEFT_ROW}")).alias(_LEFT_ROW),
            F.coalesce(F.col(f"x.{_RIGHT_ROW}"), F.col(f"o.{_RIGHT_ROW}")).alias(_RIGHT_ROW),
        )
        joined = joined.select(F.col(_LEFT_ROW).alias("l"), F.col(_RIGHT_ROW).alias("r")).select(
            *self.prepared.shape.projection,
            F.greatest(left_time, right_time).alias(EVENT_TIME),
            F.lit("J").alias("_fkjoin_kind"),
        )
        if self.prepared.spec.how == "inner":
            return joined, None
        outputs = [joined]
        outer = self._is_outer()
        null_outer = ranked.where(F.col(_NULL) & outer)
        outputs.append(self._output(null_outer, self._own_time(), "U").select(*joined.columns))
        matched_on_arrival = pairs.select(
            F.col(f"x.{_SIDE}").alias(_SIDE), F.col(f"x.{_POS}").alias(_POS)
        ).distinct()
        lonely = stored.where(outer).join(matched_on_arrival, [_SIDE, _POS], "left_anti")
        slack = self.grace if self.prepared.spec.late_unmatched == "respect_grace" else 0
        closed = F.col(_T) + self._lookback() + F.lit(slack) < F.col(_ST)
        outputs.append(self._output(lonely.where(closed), self._own_time(), "U").select(*joined.columns))
        pending_new = self._output(lonely.where(~closed), self._own_time(), "P").select(
            *joined.columns, _SIDE, *self.key_columns, _T, _G
        )
        pending = pending_new.drop("_fkjoin_kind")
        if self.carried.state_version is not None and self.plan.mode == "incremental":
            earlier_pending = self.prepared.state.read(self.carried.state_version).withColumn(
                _G, F.lit(None).cast(_RANK_TYPE)
            )
            pending = pending.unionByName(earlier_pending.select(*pending.columns))
        pending = pending.persist(StorageLevel.MEMORY_AND_DISK)
        self.cached.append(pending)
        settled = self._settle(pending, stored).persist(StorageLevel.MEMORY_AND_DISK)
        self.cached.append(settled)
        emitted = (
            settled.where(F.col("_fkjoin_emit"))
            .select(*[c for c in joined.columns if c != "_fkjoin_kind"])
            .withColumn("_fkjoin_kind", F.lit("U"))
        )
        outputs.append(emitted)
        remaining = settled.where(F.col("_fkjoin_keep")).select(
            _SIDE, *self.key_columns, _T, *[c for c in joined.columns if c != "_fkjoin_kind"]
        )
        result = outputs[0]
        for frame in outputs[1:]:
            result = result.unionByName(frame)
        return result, remaining

    def _settle(self, pending: DataFrame, stored: DataFrame) -> DataFrame:
        """Each pending row's fate in this refresh: matched by a later row (dropped), closed by a trigger
        first (``_fkjoin_emit``), or neither (``_fkjoin_keep``)."""
        identity = [_SIDE, *self.key_columns, _T, _G]
        distinct = pending.select(*identity).distinct()
        probe = stored.alias("x")
        held = distinct.alias("p")
        condition = F.col(f"x.{_SIDE}") == F.lit(1) - F.col(f"p.{_SIDE}")
        for column in self.key_columns:
            condition = condition & (F.col(f"x.{column}") == F.col(f"p.{column}"))
        held_time = F.col(f"p.{_T}")
        condition = condition & self._band("x", held_time)
        condition = condition & (held_time >= F.col(f"x.{_OBS_OTHER}") - F.lit(self.retention - 1))
        held_rank = F.col(f"p.{_G}")
        condition = condition & (held_rank.isNull() | (held_rank < F.col(f"x.{_G}")))
        matches = (
            held.join(probe, condition)
            .groupBy(*[F.col(f"p.{c}").alias(c) for c in identity])
            .agg(F.min(F.col(f"x.{_G}")).alias("_fkjoin_match"))
        )
        deadline = (F.col(_T) + self._lookback() + F.lit(self.grace)).alias("_fkjoin_deadline")
        triggers = (
            stored.where(F.col(_T) == F.col(_ST))
            .groupBy(_ST)
            .agg(F.min(_G).alias("_fkjoin_close"))
            .select(F.col(_ST).alias("_fkjoin_value"), F.lit(1).alias("_fkjoin_is_trigger"), "_fkjoin_close")
        )
        deadlines = pending.select(deadline).distinct()
        events = deadlines.select(
            F.col("_fkjoin_deadline").alias("_fkjoin_value"),
            F.lit(0).alias("_fkjoin_is_trigger"),
            F.lit(None).cast(_RANK_TYPE).alias("_fkjoin_close"),
        ).unionByName(triggers)
        nearest = Window.orderBy(
            F.col("_fkjoin_value").desc(), F.col("_fkjoin_is_trigger").asc()
        ).rowsBetween(Window.unboundedPreceding, 0)
        closes = (
            events.withColumn("_fkjoin_close", F.last("_fkjoin_close", ignorenulls=True).over(nearest))
            .where(F.col("_fkjoin_is_trigger") == 0)
            .select(F.col("_fkjoin_value").alias("_fkjoin_deadline"), "_fkjoin_close")
        )
        settled = pending.withColumn("_fkjoin_deadline", deadline)
        on = [settled[c].eqNullSafe(matches[c]) for c in identity]
        settled = settled.join(matches, on, "left").select(settled["*"], matches["_fkjoin_match"])
        settled = settled.join(closes, "_fkjoin_deadline", "left")
        match, close = F.col("_fkjoin_match"), F.col("_fkjoin_close")
        matched = match.isNotNull() & (close.isNull() | (match < close))
        return settled.withColumn("_fkjoin_emit", ~matched & close.isNotNull()).withColumn(
            "_fkjoin_keep", ~matched & close.isNull()
        )

    # -- committing ------------------------------------------------------------------------------------

    def run(self, refresh: RefreshContext, *, replace: bool) -> tuple[Commit, dict[str, Any]]:
        try:
            new, counts = {}, {}
            sides = (0,) if self.prepared.spec.same_table else (0, 1)
            for side in sides:
                new[side], counts[side] = self._new_rows(side)
            if self.prepared.spec.same_table:
                counts[1] = counts[0]
            self.new_row_count = counts[0]["rows"] + counts[1]["rows"]
            phase("changes_read")
            output_rows, remaining = self.compute(new)
            kinds: dict[str, int] | None = None
            if remaining is None and self.new_row_count <= SMALL_REFRESH_ROWS:
                # A small inner-join refresh: every row is a pair, written as one file (one task is
                # plenty for this little), counted by the commit; no job to count them first.
                written = output_rows.drop("_fkjoin_kind").coalesce(1)
            else:
                output_rows = output_rows.persist(StorageLevel.MEMORY_AND_DISK)
                self.cached.append(output_rows)
                counted = output_rows.groupBy("_fkjoin_kind").count().collect()
                kinds = {row[0]: int(row[1]) for row in counted}
                written = output_rows.drop("_fkjoin_kind").coalesce(_files_for(sum(kinds.values())))
            carried = self._next_state(counts, remaining)
            phase("merge_started")
            request = refresh.request(self.plan.mode, self.plan.reason, extra=carried.to_extra())
            commit = append_output(refresh.output, written, request, replace=replace)
            if kinds is None:
                kinds = {"J": commit.inserted}
        finally:
            for frame in self.cached:
                frame.unpersist()
        dropped = [counts[side]["null_keys"] if not self.outer[side] else 0 for side in (0, 1)]
        if self.prepared.spec.same_table:
            dropped[1] = 0  # one table: each row counted once, as the left row it is first processed as
        null_dropped = dict.fromkeys(self.prepared.names, 0)
        rows_read = dict.fromkeys(self.prepared.names, 0)
        for side in (0, 1):
            null_dropped[self.prepared.names[side]] += dropped[side]
            rows_read[self.prepared.names[side]] = counts[side]["rows"]
        rows = _rows(
            self.prepared.names,
            commit.inserted,
            pairs=kinds.get("J", 0),
            unmatched=kinds.get("U", 0),
            pending=self.pending_rows,
            rows_read=rows_read,
            null_keys_dropped=null_dropped,
            stream_time=carried.stream_time,
        )
        return commit, rows

    pending_rows = 0
    new_row_count = 0

    def _next_state(self, counts: dict[int, dict[str, Any]], remaining: DataFrame | None) -> CarriedState:
        """The state after this refresh: the pending rows written (state table first), and the times."""
        stream_time = _max(self.carried.stream_time, counts[0]["max_t"], counts[1]["max_t"])
        observed = (
            _max(self.carried.observed[0], counts[0]["max_stored_t"]),
            _max(self.carried.observed[1], counts[1]["max_stored_t"]),
        )
        version = None
        if remaining is not None:
            bound = self.new_row_count + (self.carried.pending_rows or 0)
            written = self.prepared.state.write(remaining, files=_files_for(bound))
            version, self.pending_rows = written.version, written.rows
            phase("state_written")
        return CarriedState(stream_time, observed, version, self.pending_rows)


class EventJoinRefresh(KindRefresh):
    """One refresh of a join of event streams: pin the inputs, compute with :attr:`computation` (a
    :class:`StreamJoinRefresh`, or the self-join's) and append, carrying the join's state to the next.

    The spec it is built with is the one the output's progress is keyed by and names the inputs (``left``
    and ``right``, or a self-join's one ``input``); :meth:`computed_spec` says what to compute.
    :attr:`optimized` is reported in the result.

    >>> refresh_once(EventJoinRefresh(spec, spark), options)["rows"]["pairs"]
    40
    """

    spec: WindowedJoinSpec
    append_only = True
    replace_consequence = (
        "Replacing re-runs the join over every input row as one refresh, so rows emitted by earlier "
        "refreshes may differ."
    )
    #: The computation one refresh runs (a subclass swaps in the self-join's one-store computation).
    computation: ClassVar[type[StreamJoinRefresh]] = StreamJoinRefresh
    #: What the result's ``optimized`` says (None: the join ran as written).
    optimized: ClassVar[str | None] = None
    #: What ``prepare`` resolved, read by both paths.
    prepared: StreamRefreshState

    def __init__(self, identity: Any, spark: SparkSession) -> None:
        super().__init__(self.computed_spec(identity), spark, identity)
        names = list(self.handles)
        self.names = (names[0], names[-1])
        self.state = StateTable(self.output)
        if self.spec.how != "inner":
            self.state.path  # noqa: B018 - a join that keeps pending rows needs an output path: refused here, early

    @classmethod
    def computed_spec(cls, identity: Any) -> WindowedJoinSpec:
        """The stream-mode join to compute for ``identity`` (the spec itself here; a self_join's as the
        windowed join it is)."""
        spec: WindowedJoinSpec = identity
        return spec

    def inputs(self) -> dict[str, Any]:
        return dict(self.identity.inputs())

    def prepare(self, states: dict[str, TableState]) -> dict[str, InputState]:
        handles = self.handles
        frames = {name: input_frame(handles[name], states[name]) for name in handles}
        by_side = dict(zip(SIDES, self.names, strict=True))
        shape = resolve_shape(
            self.spec,
            {side: handles[name] for side, name in by_side.items()},
            {side: frames[name] for side, name in by_side.items()},
            self.names,
        )
        self.prepared = StreamRefreshState(
            self.spec, shape, self.handles, states, self.state, self.warnings, self.names
        )
        return {name: pinned_input(handles[name], states[name], frames[name].schema) for name in handles}

    def noop_rows(self) -> dict[str, Any]:
        return _rows(self.names)

    def result_fields(
        self, refresh: RefreshContext, plan: RefreshPlan, output_version: int
    ) -> dict[str, Any]:
        return {"optimized": self.optimized}

    def _join(self, plan: RefreshPlan, carried: CarriedState) -> StreamJoinRefresh:
        """One path's computation (a fresh one each: a failed incremental leaves nothing to the full)."""
        return self.computation(self.prepared, plan, carried)

    def incremental(self, refresh: RefreshContext, plan: RefreshPlan) -> Written:
        assert refresh.previous is not None
        carried = CarriedState.from_extra(refresh.previous.extra.get(STATE_EXTRA))
        if carried is None or (
            carried.state_version is not None and not self.state.readable(carried.state_version)
        ):
            raise RebuildRequired(
                "the join's state (stream time, pending rows) recorded by the last refresh is gone"
            )
        return Written(*self._join(plan, carried).run(refresh, replace=False))

    def full(self, refresh: RefreshContext, plan: RefreshPlan) -> Written:
        return Written(*self._join(plan, CarriedState.empty()).run(refresh, replace=self.output.exists()))


#: Rows per file the join writes (output and state): a small refresh writes one file, not one per task.
ROWS_PER_FILE = 2_000_000
#: New rows up to which an inner join's refresh computes and writes its pairs in one task, uncounted.
SMALL_REFRESH_ROWS = 200_000


def _files_for(rows: int) -> int:
    """How many files ``rows`` rows are written as (at least one)."""
    return max(1, -(-rows // ROWS_PER_FILE))


def _max(*values: int | None) -> int | None:
    present = [int(v) for v in values if v is not None]
    return max(present) if present else None

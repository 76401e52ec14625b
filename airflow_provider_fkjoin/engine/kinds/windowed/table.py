"""Table-mode windowed joins (``docs/kinds/windowed-join.md``, table mode), maintained incrementally.

Both sides are tables with one row per key; a windowed table's key is ``(key..., window start, window
end)``. Three shapes, one output keyed like the left side:

* **Inner and left joins** (plain tables, windowed tables on the same or a shifted window, or a windowed
  table enriched from a plain one) *are* foreign-key joins: each left row references at most one right
  row, through the left key (with the window shifted by the right side's ``offset``: ``-7d`` looks up the
  window a week earlier). They run as one (:class:`..fk_join.ForeignKeyJoinRefresh`), so they share its
  incremental refresh, its write path and its tests; progress is recorded under this spec.
* **Outer joins** (plain tables, or both windowed) also keep right rows without a left partner, keyed by
  their window shifted back into the left's. A refresh recomputes only the keys either side changed
  (right keys mapped into the left's key space), and MERGEs the new rows and the retractions into the
  output: one net change per key, nothing rewritten that did not change. Its recompute plan
  (``refresh_strategy``) joins both sides whole and commits the rows that differ from the output.

Example::

    refresh_once(KINDS["windowed_join"].refresh_for(load_spec({"kind": "windowed_join", "mode": "table",
        "left": {"path": "/w/errors_per_min", "key": ["service"], "window": {"start": "ws", "end": "we"}},
        "right": {"path": "/w/errors_per_min", "key": ["service"],
                  "window": {"start": "ws", "end": "we", "offset": "-7d"}},
        "how": "left", "columns": {"errors": "l.errors", "week_ago": "r.errors"},
        "output": {"path": "/w/errors_vs_last_week"}}), spark), options)
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ...core.errors import SpecError
from ...core.planning import InputState, RefreshPlan
from ...core.spec import ForeignKeyJoinSpec, WindowedTableJoinSpec, WindowedTableRef, quote
from ...core.trace import phase
from ...delta.changes import (
    ChangedKeys,
    KeyCheck,
    check_keys_of,
    maybe_broadcast,
    observed_keys,
    verify_observed,
)
from ...delta.tables import DeltaHandle, TableState, key_is_null, pinned_input, require_columns
from ...refresh.skeleton import KindRefresh, Recomputed, RefreshContext, Written
from ...runtime.expressions import analysed, check_expressions, schema_probe
from ...write.merge import PRESENT, Commit, write_full_output
from ..fk_join import ForeignKeyJoinRefresh, JoinInput, read_changes_of, read_input
from ..fk_join import expected_output as fk_expected_output

SIDES = ("left", "right")


class WindowedTableAsForeignKeyRefresh(ForeignKeyJoinRefresh):
    """A table-mode windowed inner or left join, refreshed as the foreign-key join it is (module
    docstring), with its progress recorded under this spec."""

    def __init__(self, spec: WindowedTableJoinSpec, spark: SparkSession) -> None:
        super().__init__(foreign_key_form(spec, spark), spark, identity=spec)

    @classmethod
    def serves(cls, spec: Any) -> bool:
        """A table-mode inner or left join."""
        return spec.mode == "table" and spec.how in ("inner", "left")


def expected_output(
    spec: WindowedTableJoinSpec, spark: SparkSession, states: dict[str, TableState]
) -> tuple[DataFrame, list[str], list[str]]:
    """The output recomputed from scratch over the inputs at ``states`` (for an audit)."""
    if spec.how in ("inner", "left"):
        return fk_expected_output(foreign_key_form(spec, spark), spark, states)
    handles = {side: DeltaHandle(spark, getattr(spec, side), side) for side in SIDES}
    sides = {side: read_input(getattr(spec, side), handles[side], states[side]) for side in SIDES}
    shape = OuterShape(spec, sides, spark)
    left_rows = sides["left"].rows.where(~key_is_null(shape.key))
    right_rows = sides["right"].rows.where(~key_is_null(shape.right_key))
    return shape.join(left_rows, right_rows), shape.key, shape.value_columns


def _window_types(spec: WindowedTableJoinSpec, spark: SparkSession) -> dict[str, T.DataType]:
    """The left window columns' types (read from the table's schema; no data)."""
    handle = DeltaHandle(spark, spec.left, "left")
    handle.require()
    schema = handle.read().schema
    assert spec.left.window is not None
    window = [spec.left.window.start, spec.left.window.end]
    require_columns(schema.names, window, "left.window", handle)
    return {name: schema[name].dataType for name in window}


def shifted(column: str, data_type: T.DataType, offset_ms: int, field: str) -> str:
    """Spark SQL for window bound ``column`` moved by ``offset_ms``, keeping its type.

    >>> shifted("ws", T.TimestampType(), -604800000, "right.window.offset")
    'timestamp_millis(unix_millis(`ws`) + -604800000)'
    """
    name = quote(column)
    if isinstance(data_type, T.TimestampType):
        return f"timestamp_millis(unix_millis({name}) + {offset_ms})"
    if isinstance(data_type, T.DateType):
        if offset_ms % 86_400_000:
            raise SpecError(f"{field}: window column {column!r} is a DATE, so the offset must be whole days")
        return f"date_add({name}, {offset_ms // 86_400_000})"
    if isinstance(data_type, T.LongType):
        return f"{name} + CAST({offset_ms} AS BIGINT)"
    if isinstance(data_type, T.IntegerType):
        return f"CAST({name} + {offset_ms} AS INT)"
    raise SpecError(
        f"{field}: window column {column!r} is {data_type.simpleString()}; a shifted window needs TIMESTAMP, "
        "DATE or an integer (epoch milliseconds)"
    )


def _side(ref: WindowedTableRef) -> dict[str, Any]:
    side = ref.model_dump(exclude={"window"}, exclude_none=True)
    side["key"] = ref.full_key
    return side


def foreign_key_form(spec: WindowedTableJoinSpec, spark: SparkSession) -> ForeignKeyJoinSpec:
    """The inner or left join as the foreign-key join it is: left key (window shifted) -> right key."""
    left, right = spec.left, spec.right
    foreign_key: list[str] | dict[str, list[str]] = list(left.key)
    if left.window is not None and right.window is not None:
        offset = right.window.offset
        if offset:
            types = _window_types(spec, spark)
            parts = [quote(k) for k in left.key] + [
                shifted(column, types[column], offset, "right.window.offset")
                for column in (left.window.start, left.window.end)
            ]
            foreign_key = {"expr": parts}
        else:
            foreign_key = [*left.key, left.window.start, left.window.end]
    data: dict[str, Any] = {
        "kind": "foreign_key_join",
        "left": _side(left),
        "right": _side(right),
        "foreign_key": foreign_key,
        "how": spec.how,
        "output": spec.output.model_dump(exclude_none=True),
        "adopt_existing_output": spec.adopt_existing_output,
    }
    if spec.columns is not None:
        data["columns"] = dict(spec.columns)
    return ForeignKeyJoinSpec.model_validate(data)


# -- outer joins ---------------------------------------------------------------------------------------


class OuterShape:
    """An outer join's columns: the left key, the right key mapped into it, and the projection."""

    def __init__(self, spec: WindowedTableJoinSpec, sides: dict[str, JoinInput], spark: SparkSession) -> None:
        left, right = spec.left, spec.right
        frames = {side: sides[side].rows for side in SIDES}
        for side, ref in (("left", left), ("right", right)):
            names = frames[side].columns
            require_columns(names, ref.key, f"{side}.key", sides[side].handle)
            if ref.window is not None:
                require_columns(
                    names, [ref.window.start, ref.window.end], f"{side}.window", sides[side].handle
                )
        self.key = left.full_key
        self.right_key = right.full_key
        types = {f.name: f.dataType for f in frames["right"].schema.fields}
        mapped: list[Column] = [F.col(quote(c)) for c in right.key]
        if right.window is not None:
            offset = right.window.offset
            for column in (right.window.start, right.window.end):
                text = (
                    quote(column)
                    if not offset
                    else shifted(column, types[column], -offset, "right.window.offset")
                )
                mapped.append(F.expr(text))
        #: the right rows' key in the left's key space (their window shifted back by the offset)
        self.mapped = [c.alias(k) for c, k in zip(mapped, self.key, strict=True)]
        left_types = {f.name: f.dataType for f in frames["left"].schema.fields}
        probe_right = analysed("right.key", lambda: frames["right"].limit(0).select(*self.mapped))
        for index, field in enumerate(probe_right.schema.fields):
            wanted = left_types[self.key[index]]
            if field.dataType != wanted:
                raise SpecError(
                    f"right.key: part {index} ({self.right_key[index]!r}) is {field.dataType.simpleString()} "
                    f"but the left's {self.key[index]!r} is {wanted.simpleString()}; keys compare by exact "
                    "value, so both must have one type"
                )
        right_key_set = set(self.right_key)
        if spec.columns is None:
            left_values = [c for c in frames["left"].columns if c not in self.key]
            right_values = [c for c in frames["right"].columns if c not in right_key_set]
            names = self.key + left_values + right_values
            clash = sorted({c for c in names if names.count(c) > 1})
            if clash:
                raise SpecError(
                    f"columns: the default projection (the key, every left column, then every right non-key "
                    f"column) has {clash} twice; set 'columns' to name the output columns, e.g. "
                    f"columns: {{right_{clash[0]}: r.{clash[0]}}}"
                )
            values = [F.col(f"l.{quote(c)}").alias(c) for c in left_values]
            values += [F.col(f"r.{quote(c)}").alias(c) for c in right_values]
        else:
            checked = check_expressions(
                schema_probe(spark, {"l": frames["left"].schema, "r": frames["right"].schema}),
                {f"columns.{name}": text for name, text in spec.columns.items()},
            )
            values = [column.alias(name) for name, column in zip(spec.columns, checked.values(), strict=True)]
        keys = [F.coalesce(F.col(f"l.{quote(k)}"), F.col(f"m.{quote(k)}")).alias(k) for k in self.key]
        self.projection = keys + values
        probe = analysed("columns", lambda: self.join(frames["left"].limit(0), frames["right"].limit(0)))
        self.value_columns = [c for c in probe.columns if c not in self.key]

    def join(self, left_rows: DataFrame, right_rows: DataFrame) -> DataFrame:
        """The full outer join of (non-null-key) left and right rows, projected."""
        mapped = right_rows.select(
            F.struct(*[F.col(quote(c)) for c in right_rows.columns]).alias("r"), *self.mapped
        )
        on = None
        for k in self.key:
            term = F.col(f"l.{quote(k)}") == F.col(f"m.{quote(k)}")
            on = term if on is None else on & term
        joined = left_rows.alias("l").join(mapped.alias("m"), on, "full_outer")
        return joined.select(*self.projection)


class OuterWindowedTableJoinRefresh(KindRefresh):
    """One refresh of a table-mode windowed outer join: recompute the keys either side changed."""

    spec: WindowedTableJoinSpec
    #: Spark jobs of a small refresh of each plan (``tests/engine/test_action_counts.py``): the incremental
    #: plan MERGEs; the recompute commits its net changes.
    incremental_jobs = 15
    recompute_jobs = 5

    #: What ``prepare`` resolved, read by every step: each side as the join reads it, the join's
    #: columns, and each side's rows with a key (null keys never join).
    sides: dict[str, JoinInput]
    shape: OuterShape
    left_rows: DataFrame
    right_rows: DataFrame

    @classmethod
    def serves(cls, spec: Any) -> bool:
        """A table-mode outer join (inner and left ones are foreign-key joins:
        :class:`WindowedTableAsForeignKeyRefresh`)."""
        return spec.mode == "table" and spec.how == "outer"

    def prepare(self, states: dict[str, TableState]) -> dict[str, InputState]:
        spec, handles = self.spec, self.handles
        self.sides = {side: read_input(getattr(spec, side), handles[side], states[side]) for side in SIDES}
        self.shape = OuterShape(spec, self.sides, self.spark)
        self.left_rows = self.sides["left"].rows.where(~key_is_null(self.shape.key))
        self.right_rows = self.sides["right"].rows.where(~key_is_null(self.shape.right_key))
        return {
            side: pinned_input(handles[side], states[side], self.sides[side].raw.schema) for side in SIDES
        }

    def noop_rows(self) -> dict[str, Any]:
        return _rows()

    def recompute(self) -> Recomputed:
        """The outer join of both sides at their pinned versions, their keys checked as a full rebuild
        checks them, on the way of the action that compares the join with the output."""
        shape, sides = self.shape, self.sides
        left, right = (
            observed_keys(rows, key, sides[side].handle, sides[side].version)
            for side, rows, key in (
                ("left", self.left_rows, shape.key),
                ("right", self.right_rows, shape.right_key),
            )
        )

        def rows(commit: Commit) -> dict[str, Any]:
            verify_observed([left, right])
            return _rows(commit, commit.inserted + commit.updated + commit.deleted)

        joined = shape.join(left.rows, right.rows)
        return Recomputed(joined, list(shape.key), list(shape.value_columns), rows, (left, right))

    def incremental(self, refresh: RefreshContext, plan: RefreshPlan) -> Written:
        commit, recomputed = self._incremental(plan, refresh)
        return Written(commit, _rows(commit, recomputed))

    def full(self, refresh: RefreshContext, plan: RefreshPlan) -> Written:
        shape, sides = self.shape, self.sides
        check_keys_of(
            [
                KeyCheck(self.left_rows, shape.key, sides["left"].handle, sides["left"].version),
                KeyCheck(self.right_rows, shape.right_key, sides["right"].handle, sides["right"].version),
            ]
        )
        phase("changes_read")
        joined = shape.join(self.left_rows, self.right_rows)
        phase("merge_started")
        commit = write_full_output(
            self.output, joined, shape.key, shape.value_columns, refresh.request("full", plan.reason)
        )
        return Written(commit, _rows(commit))

    def _incremental(self, plan: RefreshPlan, refresh: RefreshContext) -> tuple[Commit, int]:
        """Recompute the keys either side changed and MERGE them; (commit, keys recomputed)."""
        shape, sides, left_rows, right_rows = self.shape, self.sides, self.left_rows, self.right_rows
        opened: list[ChangedKeys] = []
        cached: list[DataFrame] = []
        try:
            left_from, right_from = plan.from_versions["left"], plan.from_versions["right"]
            assert left_from is not None and right_from is not None
            left_changes, right_changes = read_changes_of(
                [(sides["left"], shape.key, left_from), (sides["right"], shape.right_key, right_from)],
                opened,
                images=False,
            )
            changes = {"left": left_changes, "right": right_changes}
            phase("changes_read")
            right_keys = changes["right"].keys.select(*shape.mapped)
            affected = (
                changes["left"].keys.select(*[quote(k) for k in shape.key]).unionByName(right_keys).distinct()
            )
            affected = affected.persist()
            cached.append(affected)
            count = affected.count()
            left_part = left_rows.join(F.broadcast(affected), shape.key, "left_semi")
            right_part = (
                right_rows.select("*", *[c.alias(f"_fkjoin_m{i}") for i, c in enumerate(shape.mapped)])
                .join(
                    F.broadcast(
                        affected.select(
                            *[F.col(quote(k)).alias(f"_fkjoin_m{i}") for i, k in enumerate(shape.key)]
                        )
                    ),
                    [f"_fkjoin_m{i}" for i in range(len(shape.key))],
                    "left_semi",
                )
                .drop(*[f"_fkjoin_m{i}" for i in range(len(shape.key))])
            )
            left_part, right_part = left_part.persist(), right_part.persist()
            cached += [left_part, right_part]
            check_keys_of(
                [
                    KeyCheck(left_part, shape.key, sides["left"].handle, sides["left"].version),
                    KeyCheck(right_part, shape.right_key, sides["right"].handle, sides["right"].version),
                ]
            )
            joined = shape.join(left_part, right_part)
            retractions = affected.join(joined.select(*[quote(k) for k in shape.key]), shape.key, "left_anti")
            source = (
                joined.withColumn(PRESENT, F.lit(True))
                .unionByName(retractions.withColumn(PRESENT, F.lit(False)), allowMissingColumns=True)
                .persist()
            )
            cached.append(source)
            phase("merge_started")
            request = refresh.request("incremental", plan.reason)
            commit = refresh.write(
                None, shape.key, shape.value_columns, request, lambda: maybe_broadcast(source, source.count())
            )
            return commit, count
        finally:
            for frame in cached:
                frame.unpersist()
            for found in opened:
                found.release()


def _rows(commit: Commit | None = None, recomputed: int = 0) -> dict[str, Any]:
    if commit is None:
        return {"inserted": 0, "updated": 0, "deleted": 0, "keys_recomputed": 0}
    return {
        "inserted": commit.inserted,
        "updated": commit.updated,
        "deleted": commit.deleted,
        "keys_recomputed": recomputed,
    }

"""The foreign-key table-table join (Kafka KIP-213), maintained incrementally on Delta tables.

Many left rows reference one right row through a foreign key. The output is keyed by the left key and
equals, after every refresh, the join computed from scratch over both inputs at the pinned versions.

An incremental refresh reads both change feeds and recomputes only the *affected* left keys:

* every left key that changed (insert, update, FK change, delete), and
* every current left row whose FK points at a right key that changed (Kafka's subscription fan-out).

Each affected key is re-joined against the pinned right snapshot (so the output pairs the current left
row with the current right row, as KIP-213's hash check guarantees) and merged into the output: a new
value, an unchanged value (not rewritten), or a retraction (deleted only if the output holds the key).

Example::

    refresh_once(ForeignKeyJoinRefresh(load_spec({...}), spark), options)
    # {"mode": "incremental", "rows": {"inserted": 3, "updated": 12, "deleted": 1, ...}, ...}
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from ..core.errors import SpecError
from ..core.planning import InputState, RefreshPlan
from ..core.spec import ForeignKeyJoinSpec, SourceRef, quote
from ..core.trace import phase
from ..delta import changelog as cl
from ..delta.changes import (
    ChangedKeys,
    FeedRequest,
    KeyCheck,
    KeyedRows,
    ObservedKeys,
    broadcast_whole_table,
    changed_keys_of,
    check_keys_of,
    feed_errors,
    maybe_broadcast,
    observed_keys,
    observed_rows,
    one_row_per_key,
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
)
from ..delta.warm_state import StateLookup
from ..refresh.skeleton import KindRefresh, Recomputed, RefreshContext, Written
from ..refresh.store import StateInputs, StateSide
from ..runtime.expressions import analysed, check_expressions, schema_probe
from ..write.merge import PRESENT, Commit, CommitRequest, write_full_output
from ..write.net_changes import NetChanges, net_changes

SIDES = ("left", "right")
FK_PREFIX = "_fkjoin_fk"
LEFT_CHANGED = "_fkjoin_lchg"
RIGHT_CHANGED = "_fkjoin_rchg"


@dataclass(frozen=True)
class FkJoinShape:
    """The join's columns, resolved against the live schemas (validated, with Spark SQL analysed)."""

    left_key: list[str]
    right_key: list[str]
    fk_columns: list[str]
    fk_exprs: list[Column]
    output_columns: list[str]
    value_columns: list[str]
    projection: list[Column]


def _names(schema: StructType) -> list[str]:
    return [field.name for field in schema.fields]


def resolve_shape(
    spec: ForeignKeyJoinSpec, left: DeltaHandle, right: DeltaHandle, left_df: DataFrame, right_df: DataFrame
) -> FkJoinShape:
    """Check the spec against the live tables and build the column expressions; reads no data."""
    left_schema, right_schema = left_df.schema, right_df.schema
    require_columns(_names(left_schema), spec.left.key, "left.key", left)
    require_columns(_names(right_schema), spec.right.key, "right.key", right)
    right_types = {f.name: f.dataType for f in right_schema.fields}
    fk_columns = [f"{FK_PREFIX}{i}" for i in range(len(spec.right.key))]
    if isinstance(spec.foreign_key, list):
        require_columns(_names(left_schema), spec.foreign_key, "foreign_key", left)
        fk_exprs = [F.col(quote(c)) for c in spec.foreign_key]
        sources = [f"left column {c!r}" for c in spec.foreign_key]
        field_paths = [f"foreign_key[{i}]" for i in range(len(spec.foreign_key))]
    else:
        field_paths = [f"foreign_key.expr[{i}]" for i in range(len(spec.foreign_key.expressions))]
        checked = check_expressions(
            schema_probe(left_df.sparkSession, {"l": left_schema}),
            dict(zip(field_paths, spec.foreign_key.expressions, strict=True)),
        )
        fk_exprs = list(checked.values())
        sources = [f"expression {e!r}" for e in spec.foreign_key.expressions]
    typed = analysed(
        "foreign_key",
        lambda: left_df.select(*[e.alias(n) for e, n in zip(fk_exprs, fk_columns, strict=True)]),
    )
    for index, (field, right_column) in enumerate(zip(typed.schema.fields, spec.right.key, strict=True)):
        expected = right_types[right_column]
        if field.dataType != expected:
            raise SpecError(
                f"{field_paths[index]}: {sources[index]} is {field.dataType.simpleString()} but right.key "
                f"{right_column!r} is {expected.simpleString()}; keys compare by exact value, so cast it: "
                f'foreign_key: {{expr: "CAST(... AS {expected.simpleString().upper()})"}}'
            )

    left_names = _names(left_schema)
    if spec.columns is None:
        right_values = [c for c in _names(right_schema) if c not in spec.right.key]
        clash = sorted(set(right_values) & set(left_names))
        if clash:
            raise SpecError(
                f"columns: the default projection (every left column, then every right non-key column) "
                f"has {clash} on both sides; set 'columns' to name the output columns, e.g. "
                f"columns: {{right_{clash[0]}: r.{clash[0]}}}"
            )
        output_columns = left_names + right_values
        projection = [F.col(f"l.{quote(c)}").alias(c) for c in left_names] + [
            F.col(f"r.{quote(c)}").alias(c) for c in right_values
        ]
    else:
        output_columns = list(spec.left.key) + list(spec.columns)
        checked = check_expressions(
            schema_probe(left_df.sparkSession, {"l": left_schema, "r": right_schema}),
            {f"columns.{name}": expression for name, expression in spec.columns.items()},
        )
        projection = [F.col(f"l.{quote(c)}").alias(c) for c in spec.left.key] + [
            column.alias(name) for name, column in zip(spec.columns, checked.values(), strict=True)
        ]
    probe = left_df.limit(0).alias("l").join(right_df.limit(0).alias("r"), F.lit(False), "left")
    analysed("columns", lambda: probe.select(*projection))
    value_columns = [c for c in output_columns if c not in spec.left.key]
    return FkJoinShape(
        left_key=list(spec.left.key),
        right_key=list(spec.right.key),
        fk_columns=fk_columns,
        fk_exprs=fk_exprs,
        output_columns=output_columns,
        value_columns=value_columns,
        projection=projection,
    )


@dataclass(frozen=True)
class JoinInput:
    """One side as the join reads it: the Delta table at the pinned version, or, for a changelog
    source, its events (``raw``) reduced to the table they describe (``rows``: latest event per key).
    """

    handle: DeltaHandle
    version: int
    raw: DataFrame
    rows: DataFrame
    changelog: cl.ChangelogShape | None


def read_input(ref: SourceRef, handle: DeltaHandle, state: TableState) -> JoinInput:
    """Read one side at its pinned version; columns are checked here (SpecError), before any job."""
    version = state.version
    raw = input_frame(handle, state)
    if ref.changelog is None:
        return JoinInput(handle, version, raw, raw, None)
    shape = cl.resolve_changelog(ref, handle, raw.schema)
    return JoinInput(handle, version, raw, cl.latest_state(raw, shape, keep_order=False), shape)


def null_keys_of(reads: list[tuple[JoinInput, list[str]]]) -> list[int]:
    """Null-key rows (or events) dropped from each side in a full build; fails on duplicate keys or bad
    ops. The table sides are checked by one job."""
    tables = [index for index, (side, _) in enumerate(reads) if side.changelog is None]
    checks = [
        KeyCheck(side.rows, key, side.handle, side.version, count_nulls=True)
        for side, key in (reads[i] for i in tables)
    ]
    found = {index: count.null_keys for index, count in zip(tables, check_keys_of(checks), strict=True)}
    for index, (side, _) in enumerate(reads):
        if side.changelog is not None:
            found[index] = cl.check_events(side.raw, side.changelog, side.handle).null_keys
    return [found[index] for index in range(len(reads))]


def _with_fk(left_df: DataFrame, shape: FkJoinShape) -> DataFrame:
    return left_df.where(~key_is_null(shape.left_key)).select(
        "*", *[e.alias(n) for e, n in zip(shape.fk_exprs, shape.fk_columns, strict=True)]
    )


def _join(left_rows: DataFrame, right_rows: DataFrame, shape: FkJoinShape, how: str) -> DataFrame:
    """Join prepared left rows (with FK columns) to right rows and project the output columns."""
    condition = None
    for fk, right_column in zip(shape.fk_columns, shape.right_key, strict=True):
        term = F.col(f"l.{fk}") == F.col(f"r.{quote(right_column)}")
        condition = term if condition is None else condition & term
    joined = left_rows.alias("l").join(
        right_rows.alias("r"), condition, "inner" if how == "inner" else "left"
    )
    return joined.select(*shape.projection)


def expected_output(
    spec: ForeignKeyJoinSpec, spark: SparkSession, states: dict[str, TableState]
) -> tuple[DataFrame, list[str], list[str]]:
    """The output recomputed from scratch over the inputs at ``states``: (rows, key, value columns).
    What an audit (:mod:`..audit`) compares the output with."""
    left = DeltaHandle(spark, spec.left, "left")
    right = DeltaHandle(spark, spec.right, "right")
    sides = {
        "left": read_input(spec.left, left, states["left"]),
        "right": read_input(spec.right, right, states["right"]),
    }
    shape = resolve_shape(spec, left, right, sides["left"].rows, sides["right"].rows)
    right_rows = sides["right"].rows.where(~key_is_null(shape.right_key))
    joined = _join(_with_fk(sides["left"].rows, shape), right_rows, shape, spec.how)
    return joined, shape.left_key, shape.value_columns


def read_changes_of(
    reads: list[tuple[JoinInput, list[str], int]], opened: list[ChangedKeys], *, images: bool
) -> list[ChangedKeys]:
    """The keys each side changed after its version ``after``: (side, key, after) each, read by one Spark
    action. With ``images``, a table side's changed rows as they stood at ``after`` and at its pinned
    version (``ChangedKeys.before``, ``after``).

    A changelog key with any new event is re-read from the log's latest state, so late events (which
    change nothing) and a rewritten log are handled by the same re-read. New events' ops are checked.
    """
    found: dict[int, ChangedKeys] = {}
    requests: list[tuple[int, FeedRequest]] = []
    for index, (side, key, after) in enumerate(reads):
        with_images = images and side.changelog is None
        if after == side.version:
            nothing = side.handle.read(side.version).limit(0)
            empty = nothing.select(*[quote(c) for c in key])
            before = side.rows.limit(0) if with_images else None
            found[index] = ChangedKeys(
                keys=empty, count=0, change_rows=0, null_keys=0, cached=empty, before=before
            )
            opened.append(found[index])
        else:
            columns = side.rows.columns if with_images else None
            requests.append((index, FeedRequest(side.handle, key, after, side.version, columns)))
    if requests:
        for (index, _), changes in zip(requests, changed_keys_of([r for _, r in requests]), strict=True):
            found[index] = changes
            opened.append(changes)
    for side, _, after in reads:
        if side.changelog is not None and after != side.version:
            table = side.handle
            with feed_errors(table, after, side.version):
                events = table.changes(after, side.version).where(F.col("_change_type") == "insert")
                cl.check_events(events, side.changelog, table)
    return [found[index] for index in range(len(reads))]


@dataclass(frozen=True)
class Affected:
    """The affected left keys of an incremental refresh and their new output rows.

    ``left_rows``: the current left rows to re-join (with FK columns); ``right_rows``: the current right
    rows they (and the previous left rows) reference; ``joined``: their new output rows; ``keys``: every
    affected key, including changed left keys that no longer exist. ``checks``: the duplicate-key
    checks of the left and right rows, taken by the action that computes ``joined``.
    """

    left_rows: DataFrame
    right_rows: DataFrame
    joined: DataFrame
    keys: DataFrame
    checks: tuple[KeyedRows, ...] = ()
    previous_left: DataFrame | None = None
    #: The left rows re-joined, when known without a check (a warm state's lookup counted them).
    rejoined: int = 0

    def verify(self) -> int:
        """Fail on duplicate keys among the rows read (nothing is written yet); the left rows re-joined.
        Call it after the action that read ``joined``."""
        counts = [check.verify() for check in self.checks]
        return counts[0] if counts else self.rejoined


def _rows(
    inserted: int = 0,
    updated: int = 0,
    deleted: int = 0,
    *,
    null_left: int = 0,
    null_right: int = 0,
    changes_left: int = 0,
    changes_right: int = 0,
    recomputed: int = 0,
) -> dict[str, Any]:
    return {
        "inserted": inserted,
        "updated": updated,
        "deleted": deleted,
        "left_rows_rejoined": recomputed,
        "changes_read": {"left": changes_left, "right": changes_right},
        "null_keys_dropped": {"left": null_left, "right": null_right},
    }


class ForeignKeyJoinRefresh(KindRefresh):
    """One refresh of a foreign-key join's output; see the module docstring for the algorithm.

    ``identity`` is the spec the output's progress is recorded under when another kind runs as a
    foreign-key join (a table-mode windowed join enriching a windowed table): its kind and fingerprint.

    >>> refresh_once(ForeignKeyJoinRefresh(load_spec("orders_enriched.yaml"), spark), options)["mode"]
    'incremental'
    """

    spec: ForeignKeyJoinSpec
    incremental_jobs = 6
    recompute_jobs = 5
    #: What ``prepare`` resolved, read by every step: each side's pinned version, each side as the
    #: join reads it, and the join's columns.
    to_versions: dict[str, int]
    table_ids: dict[str, str]
    #: Each side's data-file bytes at its pinned version (None: unknown).
    sizes: dict[str, int | None]
    sides: dict[str, JoinInput]
    shape: FkJoinShape

    def prepare(self, states: dict[str, TableState]) -> dict[str, InputState]:
        spec, handles = self.spec, self.handles
        self.to_versions = {side: state.version for side, state in states.items()}
        self.table_ids = {side: state.table_id for side, state in states.items()}
        self.sizes = {side: state.size_bytes for side, state in states.items()}
        self.sides = {side: read_input(getattr(spec, side), handles[side], states[side]) for side in SIDES}
        self.shape = resolve_shape(
            spec, handles["left"], handles["right"], self.sides["left"].rows, self.sides["right"].rows
        )
        self.warnings += cdf_off_warnings({side: (handles[side], states[side]) for side in SIDES})
        self.warnings += [
            f"input {side} ({self.sides[side].handle.location}) is a changelog source: each refresh reduces "
            "its whole log to the latest event per key; bootstrap it into a global table "
            "(global_table_bootstrap) and join that, so a refresh reads only what changed"
            for side in SIDES
            if self.sides[side].changelog is not None
        ]
        return {
            side: pinned_input(
                handles[side], states[side], self.sides[side].raw.schema, self.to_versions[side]
            )
            for side in SIDES
        }

    def noop_rows(self) -> dict[str, Any]:
        return _rows()

    def state_inputs(self) -> StateInputs | None:
        """The join state of KIP-213's stores, with ``warm_state: true``: the left rows by key with their
        foreign keys, and the right rows by key (see :mod:`..refresh.store`)."""
        if not getattr(self.spec, "warm_state", False):
            return None
        shape, sides = self.shape, self.sides
        changelog = any(side.changelog is not None for side in sides.values())
        return StateInputs(
            {
                "left": StateSide(
                    self.handles["left"],
                    self.table_ids["left"],
                    self.to_versions["left"],
                    list(shape.left_key),
                    lambda: _with_fk(sides["left"].rows, shape),
                    fk=list(shape.fk_columns),
                ),
                "right": StateSide(
                    self.handles["right"],
                    self.table_ids["right"],
                    self.to_versions["right"],
                    list(shape.right_key),
                    lambda: sides["right"].rows.where(~key_is_null(shape.right_key)),
                ),
            },
            refused="a changelog input has no warm state" if changelog else None,
        )

    def incremental(self, refresh: RefreshContext, plan: RefreshPlan) -> Written:
        return Written(*self._incremental(plan, refresh))

    def full(self, refresh: RefreshContext, plan: RefreshPlan) -> Written:
        request = refresh.request("full", plan.reason)
        return Written(*self._full(request))

    def recompute(self) -> Recomputed | None:
        """The join of both sides at their pinned versions, their keys checked as a full rebuild checks
        them, on the way of the action that compares the join with the output.

        A left join keeps every left row, so the comparison finds a repeated left key itself
        (:func:`..delta.changes.observed_rows`: the left rows are not grouped by key, which would sort
        them all); an inner join drops unmatched rows, whose keys are checked by grouping. A changelog
        side is its log reduced to each key's latest event, one row per key, its ops checked over the
        whole log (a job, as in a full rebuild)."""
        spec, shape, sides = self.spec, self.shape, self.sides
        checks: dict[str, ObservedKeys] = {}
        event_nulls: dict[str, int] = {}
        for name, key in (("left", shape.left_key), ("right", shape.right_key)):
            side = sides[name]
            if side.changelog is not None:
                event_nulls[name] = cl.check_events(side.raw, side.changelog, side.handle).null_keys
                checks[name] = observed_rows(side.rows, key, side.handle, side.version)
                checks[name].repeated = 0
            elif name == "left" and spec.how == "left":
                checks[name] = observed_rows(side.rows, key, side.handle, side.version)
            else:
                checks[name] = observed_keys(side.rows, key, side.handle, side.version)
        left, right = checks["left"], checks["right"]
        right_rows = broadcast_whole_table(right.rows, self.sizes["right"], self.sizes["left"])
        joined = _join(_with_fk(left.rows, shape), right_rows, shape, spec.how)

        def rows(commit: Commit) -> dict[str, Any]:
            left_counts, right_counts = verify_observed([left, right])
            return _rows(
                commit.inserted,
                commit.updated,
                commit.deleted,
                null_left=event_nulls.get("left", left_counts.null_keys),
                null_right=event_nulls.get("right", right_counts.null_keys),
                recomputed=left_counts.rows - left_counts.null_keys,
            )

        return Recomputed(joined, list(shape.left_key), list(shape.value_columns), rows, (left, right))

    def _full(self, request: CommitRequest) -> tuple[Commit, dict[str, Any]]:
        """The full rebuild: the join of both sides at their pinned versions, written over the output."""
        spec, shape, sides, output = self.spec, self.shape, self.sides, self.output
        left_df, right_df = sides["left"].rows, sides["right"].rows
        null_left, null_right = null_keys_of(
            [(sides["left"], shape.left_key), (sides["right"], shape.right_key)]
        )
        phase("changes_read")
        right_rows = broadcast_whole_table(
            right_df.where(~key_is_null(shape.right_key)), self.sizes["right"], self.sizes["left"]
        )
        joined = _join(_with_fk(left_df, shape), right_rows, shape, spec.how)
        phase("merge_started")
        commit = write_full_output(output, joined, shape.left_key, shape.value_columns, request)
        rows = _rows(
            commit.inserted, commit.updated, commit.deleted, null_left=null_left, null_right=null_right
        )
        return commit, rows

    def _incremental(self, plan: RefreshPlan, refresh: RefreshContext) -> tuple[Commit, dict[str, Any]]:
        """The incremental path: its commit and rows. Raises :class:`..core.planning.RebuildRequired` when a
        feed cannot serve."""
        shape, sides = self.shape, self.sides
        request = refresh.request("incremental", plan.reason)
        left_from, right_from = plan.from_versions["left"], plan.from_versions["right"]
        assert left_from is not None and right_from is not None
        direct = refresh.direct_write_possible(*[side.changelog is None for side in sides.values()])
        empty: list[ChangedKeys] = []
        try:
            left_changes, right_changes = read_changes_of(
                [(sides["left"], shape.left_key, left_from), (sides["right"], shape.right_key, right_from)],
                empty,
                images=direct,
            )
        except BaseException:
            # a vacuumed feed rebuilds, any other failure (a bad changelog op) propagates: either way, what
            # was already cached is released
            for changes in empty:
                changes.release()
            raise
        cached: list[DataFrame] = []
        net: NetChanges | None = None
        store = refresh.store if direct else None
        try:
            phase("changes_read")
            found = None
            if store is not None:
                left_after = None if left_changes.after is None else _with_fk(left_changes.after, shape)
                found = store.lookup(
                    plan, refresh, (left_changes, left_after), (right_changes, right_changes.after)
                )
            affected = self._affected(left_changes, right_changes, cached, found)
            if direct:
                old = self._previous_output(affected, left_changes, right_changes)
                net = net_changes(old, affected.joined, shape.left_key, shape.value_columns)
                recomputed = affected.verify()
            phase("merge_started")

            def merge_source() -> DataFrame:
                nonlocal recomputed
                source = _merge_source(affected, cached)
                recomputed = affected.verify()
                return source

            commit = refresh.write(
                net, shape.left_key, shape.value_columns, request, merge_source, found=found
            )
        finally:
            if net is not None:
                net.release()
            for frame in cached:
                frame.unpersist()
            left_changes.release()
            right_changes.release()
        rows = _rows(
            commit.inserted,
            commit.updated,
            commit.deleted,
            null_left=left_changes.null_keys,
            null_right=right_changes.null_keys,
            changes_left=left_changes.change_rows,
            changes_right=right_changes.change_rows,
            recomputed=recomputed,
        )
        return commit, rows

    def _affected(
        self,
        left_changes: ChangedKeys,
        right_changes: ChangedKeys,
        cached: list[DataFrame],
        warm: StateLookup | None = None,
    ) -> Affected:
        """The affected left keys (changed, or pointing at a changed right key) and their new output rows.

        Nothing runs here: the frames are cached when the action that computes the net changes (or the
        MERGE source) first reads them, and their duplicate-key checks are observed on the way. With a
        ``warm`` lookup, the affected left rows and the right rows they need come from it (one row per
        key, checked by the lookup), not from scans of the tables.
        """
        spec, shape, to_versions = self.spec, self.shape, self.to_versions
        left, right = self.sides["left"].handle, self.sides["right"].handle
        left_df, right_df = self.sides["left"].rows, self.sides["right"].rows
        left_key_cols = list(shape.left_key)
        if warm is not None:
            previous_left = None
            if left_changes.before is not None:
                previous_left = warm.left.join(
                    left_changes.keys, on=shape.left_key, how="left_anti"
                ).unionByName(_with_fk(left_changes.before, shape))
            keys = warm.left.select(*left_key_cols)
            if left_changes.count:
                keys = keys.unionByName(left_changes.keys.select(*left_key_cols)).distinct()
            joined = _join(warm.left, warm.right, shape, spec.how)
            return Affected(
                warm.left, warm.right, joined, keys, (), previous_left, rejoined=warm.counts["left_rows"]
            )
        if left_changes.count == 0 and right_changes.count == 0:
            none = _with_fk(left_df.limit(0), shape)
            right_none = right_df.limit(0)
            joined = _join(none, right_none, shape, spec.how)
            return Affected(none, right_none, joined, none.select(*left_key_cols), (), none)

        flags = []
        if left_changes.count:
            flags.append(
                (
                    maybe_broadcast(
                        left_changes.keys.withColumn(LEFT_CHANGED, F.lit(True)), left_changes.count
                    ),
                    left_key_cols,
                    LEFT_CHANGED,
                )
            )
        if right_changes.count:
            renamed = right_changes.keys.select(
                *[
                    F.col(quote(rk)).alias(fk)
                    for rk, fk in zip(shape.right_key, shape.fk_columns, strict=True)
                ]
            ).withColumn(RIGHT_CHANGED, F.lit(True))
            flags.append((maybe_broadcast(renamed, right_changes.count), shape.fk_columns, RIGHT_CHANGED))
        scan = _with_fk(left_df, shape)
        hit = F.lit(False)
        for frame, on, flag in flags:
            scan = scan.join(frame, on=on, how="left")
            hit = hit | F.coalesce(F.col(flag), F.lit(False))
        left_check = one_row_per_key(
            scan.where(hit).drop(*[flag for _, _, flag in flags]), shape.left_key, left, to_versions["left"]
        )
        affected = left_check.rows
        cached.append(left_check.counted)

        previous_left = None
        if left_changes.before is not None:
            previous_left = affected.join(left_changes.keys, on=shape.left_key, how="left_anti").unionByName(
                _with_fk(left_changes.before, shape)
            )
        # Right rows referenced by an affected left row (now or, for a net-change commit, before), and every
        # changed right key (for the duplicate check). At most two per changed left key (its new and its
        # previous foreign key) and one per changed right key.
        needed = affected.select(
            *[F.col(fk).alias(rk) for fk, rk in zip(shape.fk_columns, shape.right_key, strict=True)]
        )
        if previous_left is not None:
            needed = needed.unionByName(
                previous_left.select(
                    *[F.col(fk).alias(rk) for fk, rk in zip(shape.fk_columns, shape.right_key, strict=True)]
                )
            )
        needed = needed.where(~key_is_null(shape.right_key))
        if right_changes.count:
            needed = needed.unionByName(right_changes.keys.select(*[quote(c) for c in shape.right_key]))
        needed = needed.distinct()
        right_check = one_row_per_key(
            right_df.where(~key_is_null(shape.right_key)).join(
                maybe_broadcast(needed, 2 * left_changes.count + right_changes.count),
                on=list(shape.right_key),
                how="left_semi",
            ),
            shape.right_key,
            right,
            to_versions["right"],
        )
        right_rows = right_check.rows
        cached.append(right_check.counted)

        joined = _join(affected, right_rows, shape, spec.how)
        keys = affected.select(*left_key_cols)
        if left_changes.count:
            keys = keys.unionByName(left_changes.keys.select(*left_key_cols)).distinct()
        return Affected(affected, right_rows, joined, keys, (left_check, right_check), previous_left)

    def _previous_output(
        self, affected: Affected, left_changes: ChangedKeys, right_changes: ChangedKeys
    ) -> DataFrame:
        """The affected keys' output rows as the last refresh wrote them, from the inputs alone.

        The output held the join at the versions the last refresh consumed, so a key's previous row is
        the join of its previous left row (its first pre-image in the left feed, or the current row when
        only its right side changed: ``Affected.previous_left``) with that row's previous right row (the
        first pre-image in the right feed, or the current row when the right key did not change).
        """
        assert affected.previous_left is not None and right_changes.before is not None
        spec, shape = self.spec, self.shape
        right_key = list(shape.right_key)
        previous_right = affected.right_rows
        if right_changes.count:
            previous_right = previous_right.join(
                right_changes.keys, on=right_key, how="left_anti"
            ).unionByName(right_changes.before)
        return _join(affected.previous_left, previous_right, shape, spec.how)


def _merge_source(affected: Affected, cached: list[DataFrame]) -> DataFrame:
    """The MERGE source: the new joined values, and a retraction for each affected key without one."""
    key = affected.keys.columns
    retractions = affected.keys.join(
        affected.joined.select(*[quote(c) for c in key]), on=key, how="left_anti"
    )
    source = (
        affected.joined.withColumn(PRESENT, F.lit(True))
        .unionByName(retractions.withColumn(PRESENT, F.lit(False)), allowMissingColumns=True)
        .persist()
    )
    cached.append(source)
    # Materialised and counted, the source is broadcast into the MERGE: the output is scanned, not shuffled.
    return maybe_broadcast(source, source.count())

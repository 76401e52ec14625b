"""N-way un-windowed inner joins (Yelp Joinery; ``docs/kinds/multiway-join.md``), maintained
incrementally by the telescoping delta rule.

Two to eight keyed inputs (tables or changelog sources) join on their ``join_keys``, matched by
position: 1:1, 1:N and N:M. The output holds the visible columns only (every field minus
``exclude_fields``, renamed by ``aliases``, equal join-key columns merged). Inside a refresh each row is
identified by the tuple of its inputs' primary keys (the identity, computed from the inputs and never
stored); the output is written by its **key**:

* ``output.pkey`` when it is unique: it holds every input's key, or ``enforce_pkey`` checks it;
* else the columns showing every input's key, when the output shows them all;
* else none: the output is a multiset of rows, written per copy of a row (``_copy_changes``): k of m equal
  rows deleted, new copies inserted, located by a hash of the row and their position in the output.

**Incremental refresh.** With the inputs in spec order, old states ``O_i`` (the consumed versions), new
states ``N_i`` (the pinned versions) and changes ``Δ_i = N_i - O_i``, the change of the join is::

    ΔQ = Σ_i  N_1 ⋈ … ⋈ N_(i-1) ⋈ Δ_i ⋈ O_(i+1) ⋈ … ⋈ O_n

Every input's rows are tagged with the image they are (``0`` unchanged, ``1`` new, ``2`` old), each term's
rows carry a weight (``+1`` for a new image of input i, ``-1`` for an old one), and the terms' rows are
summed per (identity, tags): combinations that two terms produce with opposite signs cancel exactly,
whatever their values. What is left is, per identity, at most one new row (+1) and one old row (-1):
an insert, an update (when a value differs) or a delete; re-keyed by the output's key (or counted per
distinct row for a keyless output), that is one net change per output key.

Only the join keys that a change touches are read (``G``), once per input: ``N_i|G`` is a scan of the
input filtered by a broadcast of ``G``; the old state ``O_i|G`` is that minus the changed keys plus their
pre-images from the change feed. A changelog input's pre-images come from its log as of the consumed
version (time travel); when that snapshot is gone the refresh falls back to recomputing the changed
identities from the new states and diffing them against the output's rows that show a changed input key,
and says so in ``reason`` (an output that does not show those keys is rebuilt, with the reason).

**Recompute.** The other plan of an incremental refresh (``refresh_strategy``, chosen by the skeleton):
the whole join from the pinned inputs, checked as a full rebuild checks it, which the skeleton compares
with the output key by key and commits as net changes (:meth:`MultiWayJoinRefresh.recompute`). Cheaper
than the telescoping sum when the tables are tiny or much of an input changed; a keyless output, or one
whose key may hold nulls, has only the incremental plan.

An N:M join key whose bucket-size product exceeds ``max_rows_per_join_key`` fails before any join is
materialised; ``output.pkey`` is checked (or, with ``enforce_pkey: false``, its repeats are counted).

Example::

    refresh_once(MultiWayJoinRefresh(load_spec("business_reviews.yaml"), spark), options)
    # {"mode": "incremental", "rows": {"inserted": 3, "updated": 12, "deleted": 1, ...}, ...}
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import reduce
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..core.errors import InputDataError, SpecError
from ..core.planning import InputState, RebuildRequired, RefreshPlan
from ..core.spec import MultiWayJoinSpec, quote
from ..core.trace import phase
from ..delta import changelog as cl
from ..delta.changes import (
    ChangedKeys,
    KeyCheck,
    ObservedKeys,
    check_keys_of,
    cut_lineage,
    feed_errors,
    maybe_broadcast,
    observed_keys,
    verify_observed,
)
from ..delta.tables import (
    ROW_POSITION_COLUMNS,
    DeltaHandle,
    TableState,
    cdf_off_warnings,
    key_is_null,
    pinned_input,
    require_columns,
)
from ..refresh.skeleton import KindRefresh, Recomputed, RefreshContext, Written
from ..write.merge import PRESENT, Commit, CommitRequest, append_output, merge_output, write_full_output
from ..write.net_changes import (
    CHANGE,
    EXPECTED,
    PRE_IMAGE,
    MergeRequired,
    NetChanges,
    counted_changes,
    net_changes,
)
from .fk_join import JoinInput, null_keys_of, read_changes_of, read_input

ID_PREFIX = "_fkjoin_id__"
ON_PREFIX = "_fkjoin_on"
TAG_PREFIX = "_fkjoin_tag_"
WEIGHT = "_fkjoin_weight"
UNCHANGED, NEW_IMAGE, OLD_IMAGE = 0, 1, 2
_PKEY_COUNT = "_fkjoin_n"
#: A keyless output's derived key: a hash of the whole row, and the copy's number among equal rows.
ROW_HASH, COPY = "_fkjoin_row_hash", "_fkjoin_copy"
KEYLESS = (
    "the output has no key (no unique output.pkey, and not every input's key is an output column), so "
    "equal rows may repeat"
)


def identity_column(input_name: str, column: str) -> str:
    """The internal column holding one part of an input's primary key while a refresh computes (never
    written to the output; an output written by an earlier version that holds one is rebuilt).

    >>> identity_column("review", "review_id")
    '_fkjoin_id__review__review_id'
    """
    return f"{ID_PREFIX}{input_name}__{column}"


@dataclass(frozen=True)
class InputShape:
    """How one input enters the join: its key, join keys, and the fields it shows (source -> output)."""

    name: str
    key: list[str]
    join_keys: list[str]
    shown: list[tuple[str, str]]

    @property
    def identity(self) -> list[tuple[str, str]]:
        return [(column, identity_column(self.name, column)) for column in self.key]


@dataclass(frozen=True)
class MultiWayShape:
    """The join's columns, resolved against the live schemas: what each input shows and the output."""

    inputs: list[InputShape]
    #: A row's identity while a refresh computes: every input's primary key, in input order (internal
    #: columns, never written).
    identity: list[str]
    #: The output's columns, in order: all it holds.
    value_columns: list[str]
    #: The join keys' output names per position where an input shows them (for messages).
    on: list[str]
    pkey: list[str] | None
    #: Whether ``pkey`` needs a data check (False when it holds every input's key, so it is unique).
    pkey_checked: bool
    #: The output's key (see the module docstring); None for a keyless output (a multiset of rows).
    key: list[str] | None = None
    #: Whether a key column may hold nulls (a ``pkey`` column that is neither an input key nor a join key),
    #: so keys compare null-safe.
    nullable_key: bool = False
    #: Per input, the output column showing each of its key columns (None: not shown).
    key_names: dict[str, list[str | None]] = field(default_factory=dict)

    @property
    def rest(self) -> list[str]:
        """The output's columns outside its key (all of them for a keyless output)."""
        return [c for c in self.value_columns if c not in (self.key or [])]


def resolve_shape(
    spec: MultiWayJoinSpec, frames: dict[str, DataFrame], handles: dict[str, DeltaHandle]
) -> MultiWayShape:
    """Check the spec against the live schemas and name the output's columns; reads no data."""
    shapes: list[InputShape] = []
    owner: dict[str, str] = {}
    merged_on: dict[str, int] = {}
    types: list[T.DataType | None] = [None] * len(spec.inputs_[0].join_keys)
    first_typed: list[str] = [""] * len(types)
    for index, item in enumerate(spec.inputs_):
        schema = frames[item.name].schema
        names = schema.names
        where = f"inputs[{index}]"
        handle = handles[item.name]
        require_columns(names, item.key, f"{where}.key", handle)
        require_columns(names, item.join_keys, f"{where}.join_keys", handle)
        require_columns(names, item.exclude_fields, f"{where}.exclude_fields", handle)
        require_columns(names, [a.from_ for a in item.aliases], f"{where}.aliases", handle)
        for position, column in enumerate(item.join_keys):
            data_type = schema[column].dataType
            if types[position] is None:
                types[position], first_typed[position] = data_type, f"{item.name}.{column}"
            elif data_type != types[position]:
                raise SpecError(
                    f"{where}.join_keys[{position}]: {item.name}.{column} is {data_type.simpleString()} but "
                    f"{first_typed[position]} is {types[position].simpleString()}; join keys compare by "
                    "exact value, so both must have one type (cast one in the table that feeds the join)"
                )
        on_names = {item.shown_name(c): p for p, c in enumerate(item.join_keys)}
        shown: list[tuple[str, str]] = []
        for column in names:
            if column in item.exclude_fields:
                continue
            name = item.shown_name(column)
            position = on_names.get(name) if column in item.join_keys else None
            if name in owner:
                if position is not None and merged_on.get(name) == position:
                    continue  # the same join-key column as an earlier input's: shown once
                raise SpecError(
                    f"{where}: column {name!r} of input {item.name!r} clashes with the same name from input "
                    f"{owner[name]!r}; rename one with aliases (e.g. {{from: {column}, to: "
                    f"{item.name}_{column}}}) or drop it with exclude_fields"
                )
            owner[name] = item.name
            if position is not None:
                merged_on[name] = position
            shown.append((column, name))
        shapes.append(InputShape(item.name, list(item.key), list(item.join_keys), shown))
    identity = [hidden for shape in shapes for _, hidden in shape.identity]
    value_columns = [name for shape in shapes for _, name in shape.shown]
    on = [
        next((n for n, p in merged_on.items() if p == position), f"join key {position}")
        for position in range(len(types))
    ]
    pkey = spec.output.pkey
    if pkey is not None:
        missing = [c for c in pkey if c not in value_columns]
        if missing:
            raise SpecError(
                f"output.pkey: {missing} are not output columns (the output has {value_columns}); name "
                "output columns, after aliases"
            )
    # an input's key column shows unless excluded (shown, or merged with an equal join key); an excluded
    # join key still shows where another input shows its position
    positions: dict[int, str] = {}
    for name, position in merged_on.items():
        positions.setdefault(position, name)
    key_names = {
        item.name: [
            item.shown_name(column)
            if column not in item.exclude_fields
            else positions.get(item.join_keys.index(column))
            if column in item.join_keys
            else None
            for column in item.key
        ]
        for item in spec.inputs_
    }
    shown_keys = [name for names in key_names.values() for name in names]
    covered = pkey is not None and all(name is not None and name in pkey for name in shown_keys)
    key: list[str] | None = None
    if pkey is not None and (covered or spec.enforce_pkey):
        key = list(pkey)
    elif all(name is not None for name in shown_keys):
        key = list(dict.fromkeys(name for name in shown_keys if name is not None))
    never_null = {name for name in shown_keys if name is not None} | set(merged_on)
    nullable = key is not None and any(c not in never_null for c in key)
    return MultiWayShape(
        shapes, identity, value_columns, on, pkey, pkey is not None and not covered, key, nullable, key_names
    )


def _on_columns(shape: InputShape) -> list[Column]:
    return [F.col(quote(c)).alias(f"{ON_PREFIX}{p}") for p, c in enumerate(shape.join_keys)]


def _on_names(count: int) -> list[str]:
    return [f"{ON_PREFIX}{p}" for p in range(count)]


def prepared(shape: InputShape, rows: DataFrame, tag: Column, weight: Column | None = None) -> DataFrame:
    """An input's rows as the join takes them: join keys, hidden identity, shown fields, image tag."""
    columns = [
        *_on_columns(shape),
        *[F.col(quote(source)).alias(hidden) for source, hidden in shape.identity],
        *[F.col(quote(source)).alias(name) for source, name in shape.shown],
        tag.alias(TAG_PREFIX + shape.name),
    ]
    if weight is not None:
        columns.append(weight.alias(WEIGHT))
    on = [F.col(quote(c)).isNotNull() for c in shape.join_keys]
    return rows.where(reduce(lambda a, b: a & b, on)).select(*columns)


def join_all(frames: list[DataFrame], arity: int) -> DataFrame:
    """The inner join of prepared inputs on their join keys (by position), in the given order."""
    return reduce(lambda left, right: left.join(right, on=_on_names(arity), how="inner"), frames)


@dataclass
class InputChanges:
    """One input's change since its consumed version: changed keys, new and old images (rows)."""

    changed: ChangedKeys
    new_rows: DataFrame
    old_rows: DataFrame | None
    cached: list[DataFrame] = field(default_factory=list)

    @property
    def count(self) -> int:
        """The number of changed keys."""
        return self.changed.count

    def release(self) -> None:
        self.changed.release()
        for frame in self.cached:
            frame.unpersist()


@dataclass(frozen=True)
class WholeJoin:
    """The join of every input's whole table, as :func:`whole_join` builds it (nothing runs yet)."""

    #: Each input's rows prepared as the join takes them, in input order: what the N:M guard counts.
    inputs: list[DataFrame]
    #: The joined rows: the output's columns, then the hidden identity (for the pkey check's message).
    rows: DataFrame


def whole_join(shape: MultiWayShape, tables: Mapping[str, DataFrame]) -> WholeJoin:
    """The join of the inputs' whole ``tables`` (by input name: its rows at the pinned version, one per
    non-null key): what a full rebuild writes, a recompute compares with the output and an audit with the
    output it reads, built once here so the three join alike.

    >>> whole_join(shape, {"review": reviews, "business": businesses}).rows.columns  # doctest: +SKIP
    ['review_id', 'biz_id', 'stars', 'name', '_fkjoin_id__review__review_id', '_fkjoin_id__business__...']
    """
    frames = [prepared(item, tables[item.name], F.lit(UNCHANGED)) for item in shape.inputs]
    joined = join_all(frames, len(shape.on)).select(*[quote(c) for c in shape.value_columns + shape.identity])
    return WholeJoin(frames, joined)


def expected_output(
    spec: MultiWayJoinSpec, spark: SparkSession, states: dict[str, TableState]
) -> tuple[DataFrame, list[str], list[str]]:
    """The join recomputed from scratch over the inputs at ``states`` (for an audit)."""
    refs = spec.inputs()
    handles = {name: DeltaHandle(spark, ref, name) for name, ref in refs.items()}
    sides = {name: read_input(refs[name], handles[name], states[name]) for name in refs}
    shape = resolve_shape(spec, {name: side.rows for name, side in sides.items()}, handles)
    joined = whole_join(shape, _non_null_tables(shape, sides)).rows
    return joined.select(*[quote(c) for c in shape.value_columns]), list(shape.key or []), shape.rest


class MultiWayJoinRefresh(KindRefresh):
    """One refresh of a ``multiway_join``'s output (see the module docstring).

    >>> refresh_once(MultiWayJoinRefresh(load_spec("business_reviews.yaml"), spark), options)["mode"]
    'incremental'
    """

    spec: MultiWayJoinSpec
    #: A small refresh's Spark jobs by each plan (measured in ``tests/engine/test_action_counts.py``): the
    #: telescoping sum's reads, checks and joins, against the guard's job and one comparison.
    incremental_jobs = 10
    recompute_jobs = 6
    #: What ``prepare`` resolved, read by every step: each input (by name) as the join reads it, and the
    #: join's columns.
    sides: dict[str, JoinInput]
    shape: MultiWayShape

    def prepare(self, states: dict[str, TableState]) -> dict[str, InputState]:
        refs, handles = self.spec.inputs(), self.handles
        self.sides = {name: read_input(refs[name], handles[name], states[name]) for name in refs}
        self.shape = resolve_shape(self.spec, {name: side.rows for name, side in self.sides.items()}, handles)
        self.warnings += list(self.spec.notes)
        self.warnings += cdf_off_warnings({name: (handles[name], states[name]) for name in refs})
        return {name: pinned_input(handles[name], states[name], self.sides[name].raw.schema) for name in refs}

    def noop_rows(self) -> dict[str, Any]:
        return _rows(self.spec)

    def incremental(self, refresh: RefreshContext, plan: RefreshPlan) -> Written:
        """The telescoping refresh: what it wrote. Raises :class:`RebuildRequired` when a feed cannot
        serve, the output holds an earlier version's identity columns, or a keyless output cannot take
        its changes without MERGE."""
        spec, shape = self.spec, self.shape
        self._require_current_layout()
        changes: dict[str, InputChanges] = {}
        cached: list[DataFrame] = []
        net: NetChanges | None = None
        try:
            changes = self.read_all_changes(plan)
            phase("changes_read")
            gone = [name for name, found in changes.items() if found.old_rows is None]
            arity = len(shape.on)
            if gone:
                old, new, affected = self._recompute_changed(changes, arity, gone)
                reason = (
                    f"{plan.reason}; the log of changelog input(s) {gone} cannot be read as of the consumed "
                    "version (vacuumed), so the changed identities were recomputed from the new states and "
                    "diffed against the output"
                )
            else:
                old, new, affected = self._telescoped(changes, arity)
                reason = plan.reason
            visible = [quote(c) for c in shape.value_columns]
            old, new = old.select(*visible), new.select(*visible)
            duplicates = self._check_pkey_changes(old, new, refresh.warnings)
            net = self._net_changes(old, new)
            phase("merge_started")
            commit = self._commit(refresh, net, refresh.request("incremental", reason), cached)
        finally:
            if net is not None:
                net.release()
            for frame in cached:
                frame.unpersist()
            for found in changes.values():
                found.release()
        counts: dict[str, Any] = {
            "inserted": commit.inserted,
            "updated": commit.updated,
            "deleted": commit.deleted,
            "join_keys": affected,
            "changes": {name: found.changed.change_rows for name, found in changes.items()},
            "nulls": {name: found.changed.null_keys for name, found in changes.items()},
        }
        if duplicates is not None:
            counts["pkey_duplicates"] = duplicates
        return Written(commit, _rows(spec, **counts), reason if reason != plan.reason else None)

    def _require_current_layout(self) -> None:
        """Rebuild an output whose rows carry the identity columns an earlier version of the engine kept
        in them: once, in full, without them (never a half-migrated table)."""
        hidden = [c for c in self.output.read().columns if c.startswith(ID_PREFIX)]
        if hidden:
            raise RebuildRequired(
                f"the output holds the row-identity columns {hidden} that an earlier version of this engine "
                "kept in it; the identity now stays inside the engine, so the output is rebuilt once, "
                "holding your columns only"
            )

    def _net_changes(self, old: DataFrame, new: DataFrame) -> NetChanges:
        """The net change per output key (per copy of a row for a keyless output) from the previous and
        new rows of the identities this refresh changes."""
        shape = self.shape
        if shape.key is None:
            return _copy_changes(old, new, shape.value_columns)
        return net_changes(old, new, shape.key, shape.rest, null_safe=shape.nullable_key)

    def _commit(
        self, refresh: RefreshContext, net: NetChanges, request: CommitRequest, cached: list[DataFrame]
    ) -> Commit:
        """Commit ``net`` without MERGE where the engine can prove it right, else by MERGE. A keyless
        output takes net changes only (MERGE cannot delete some of several equal rows): else it is rebuilt
        (:meth:`_commit_copies`)."""
        shape = self.shape
        if shape.key is None:
            return self._commit_copies(refresh, net, request)
        commit = (
            refresh.commit_net_changes(net, shape.key, request)
            if refresh.direct_write_possible(True)
            else None
        )
        if commit is None:
            commit = merge_output(
                self.output,
                _merge_source(net, shape, cached),
                shape.key,
                shape.rest,
                request,
                null_safe=shape.nullable_key,
            )
        return commit

    def _commit_copies(self, refresh: RefreshContext, net: NetChanges, request: CommitRequest) -> Commit:
        """A keyless output's net changes, committed without MERGE even when MERGE was asked for (with a
        warning); :class:`RebuildRequired` when they cannot be (the output is being adopted, the session
        has no engine jar, or the proof fails)."""
        if refresh.log.latest_version is None or refresh.ownership.claim:
            raise RebuildRequired(f"{KEYLESS}, and the output is being adopted: rebuilding in full")
        if refresh.write_path == "merge":
            refresh.warnings.append(
                f"output {self.output.location}: {KEYLESS}; MERGE cannot delete some of several equal rows, "
                "so the refresh was written as net changes"
            )
        try:
            commit = refresh.commit_net_changes(net, [ROW_HASH, COPY], request, merge_fallback=False)
        except MergeRequired as why:
            raise RebuildRequired(
                f"{KEYLESS}, and its net changes could not be committed without MERGE ({why}); MERGE "
                "cannot delete some of several equal rows, so the output is rebuilt in full"
            ) from None
        assert commit is not None
        return commit

    def full(self, refresh: RefreshContext, plan: RefreshPlan) -> Written:
        """The full rebuild: every input at its pinned version joined, its pkey checked, written over the
        output (a keyless output is replaced: MERGE cannot reconcile equal rows)."""
        spec, shape, sides, output = self.spec, self.shape, self.sides, self.output
        dropped = null_keys_of([(sides[item.name], item.key) for item in shape.inputs])
        nulls = {item.name: count for item, count in zip(shape.inputs, dropped, strict=True)}
        phase("changes_read")
        joined, duplicates = self._checked_join(_non_null_tables(shape, sides), refresh.warnings, keep=True)
        try:
            phase("merge_started")
            rows = joined.select(*[quote(c) for c in shape.value_columns])
            request = refresh.request("full", plan.reason)
            if shape.key is not None:
                commit = write_full_output(
                    output, rows, shape.key, shape.rest, request, null_safe=shape.nullable_key
                )
            else:
                commit = self._replace_copies(refresh, rows, request)
        finally:
            joined.unpersist()
        counts: dict[str, Any] = {
            "inserted": commit.inserted,
            "updated": commit.updated,
            "deleted": commit.deleted,
        }
        if duplicates is not None:
            counts["pkey_duplicates"] = duplicates
        return Written(commit, _rows(spec, **counts, nulls=nulls))

    def recompute(self) -> Recomputed | None:
        """The whole join from the pinned inputs, checked as a full rebuild checks it, for the skeleton to
        compare with the output key by key (the recompute strategy).

        The checks are a full rebuild's, with no job of their own where one can ride on another: a changelog
        input's ops over its whole log (a job each; its rows are its latest event per key, as in a full
        rebuild); the N:M guard, whose job also observes each table input's repeated and null keys
        (:func:`..delta.changes.observed_keys`), verified right after it; then ``output.pkey`` over every
        row. A key repeated in a table input is the error raised even when the guard or the pkey check
        fails too, as a full rebuild, which checks the keys first, raises it.

        An output holding an earlier version's identity columns is rebuilt, with the incremental plan's
        reason (:meth:`_require_current_layout`).

        An output whose key may hold nulls (a ``pkey`` column that is neither an input key nor a join key)
        is compared null-safe (``<=>``). None, and the incremental plan runs, for a keyless output (a
        multiset of rows): equal rows are told apart by their copy number in the output's files
        (``derive_key`` in :func:`_copy_changes`), which a key-by-key comparison has no place for.

        >>> MultiWayJoinRefresh(load_spec("business_reviews.yaml"), spark).recompute().key  # doctest: +SKIP
        ['biz_id', 'review_id', 'owner_id']
        """
        spec, shape, sides = self.spec, self.shape, self.sides
        if shape.key is None:
            return None
        self._require_current_layout()
        observed: dict[str, ObservedKeys] = {}
        nulls: dict[str, int] = {}
        tables: dict[str, DataFrame] = {}
        for item in shape.inputs:
            side = sides[item.name]
            if side.changelog is None:
                observed[item.name] = observed_keys(side.rows, item.key, side.handle, side.version)
                tables[item.name] = observed[item.name].rows
            else:
                nulls[item.name] = cl.check_events(side.raw, side.changelog, side.handle).null_keys
                tables[item.name] = side.rows
        checks = list(observed.values())
        try:
            joined, duplicates = self._checked_join(tables, self.warnings, keep=False)
        except InputDataError:
            verify_observed(checks)  # a key repeated in an input is what a full rebuild reports first
            raise
        for name, counts in zip(observed, verify_observed(checks), strict=True):
            nulls[name] = counts.null_keys

        def result_rows(commit: Commit) -> dict[str, Any]:
            counts: dict[str, Any] = {"nulls": nulls}
            if duplicates is not None:
                counts["pkey_duplicates"] = duplicates
            return _rows(
                spec, inserted=commit.inserted, updated=commit.updated, deleted=commit.deleted, **counts
            )

        rows = joined.select(*[quote(c) for c in shape.value_columns])
        return Recomputed(
            rows, list(shape.key), shape.rest, result_rows, tuple(checks), null_safe=shape.nullable_key
        )

    def _checked_join(
        self, tables: Mapping[str, DataFrame], warnings: list[str], *, keep: bool
    ) -> tuple[DataFrame, int | None]:
        """The join of the inputs' whole ``tables`` (:func:`whole_join`) with a full rebuild's checks: the
        N:M guard before the join runs, then ``output.pkey`` over every row (:meth:`check_pkey`). Returns the
        joined rows (output columns, then the identity) and the repeated pkeys counted when they are not
        enforced (else None).

        With ``keep``, a join whose pkey is checked is cached for the write that follows (the caller
        unpersists it); a recompute's is not, as nothing could release it once the skeleton has compared
        it: it is computed again instead.

        >>> joined, repeats = refresh._checked_join(tables, warnings, keep=True)  # doctest: +SKIP
        """
        shape = self.shape
        joined = whole_join(shape, tables)
        self.guard_buckets([joined.inputs], len(shape.on))
        rows = joined.rows
        if keep and shape.pkey_checked:
            rows = rows.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            return rows, self.check_pkey(rows, warnings)
        except BaseException:
            rows.unpersist()
            raise

    def _replace_copies(self, refresh: RefreshContext, rows: DataFrame, request: CommitRequest) -> Commit:
        """A keyless output made to hold exactly ``rows``: created; or, over an output with the same
        columns, only the copies that differ deleted or inserted (net changes against the whole output, so
        the change feed stays clean); else (other columns, no engine jar, an output being adopted) replaced
        by an overwrite."""
        output = self.output
        version = refresh.log.latest_version
        if output.exists() and version is not None and not refresh.ownership.claim:
            previous = output.read(version)
            if _column_types(previous) == _column_types(rows):
                net = _copy_changes(previous, rows, self.shape.value_columns)
                try:
                    commit = refresh.commit_net_changes(net, [ROW_HASH, COPY], request, merge_fallback=False)
                    assert commit is not None
                    return commit
                except MergeRequired as why:
                    refresh.warnings.append(
                        f"output {output.location}: {KEYLESS}; its rows were replaced by an overwrite ({why})"
                    )
                finally:
                    net.release()
        return append_output(output, rows, request, replace=True)

    # -- the N:M guard and the pkey check --------------------------------------------------------------

    def guard_buckets(self, states: list[list[DataFrame]], arity: int) -> None:
        """Fail before joining when a join key's bucket-size product exceeds ``max_rows_per_join_key``.

        ``states`` holds, per state considered (new, old), each input's prepared rows; a key's bucket size
        for an input is its largest over those states. Only counts are computed (one aggregation per frame).
        """
        spec, shape = self.spec, self.shape
        on = _on_names(arity)
        sized = []
        for index in range(len(shape.inputs)):
            counts = [frames[index].groupBy(*on).agg(F.count(F.lit(1)).alias("n")) for frames in states]
            size = (
                reduce(lambda a, b: a.unionByName(b), counts).groupBy(*on).agg(F.max("n").alias(f"n{index}"))
            )
            sized.append(size)
        products = reduce(lambda a, b: a.join(b, on=on, how="inner"), sized)
        product = reduce(
            lambda a, b: a * b, [F.col(f"n{i}").cast("double") for i in range(len(shape.inputs))]
        )
        worst = (
            products.where(product > F.lit(float(spec.max_rows_per_join_key))).orderBy(product.desc()).first()
        )
        if worst is None:
            return
        key = ", ".join(f"{shape.on[p]}={worst[f'{ON_PREFIX}{p}']!r}" for p in range(arity))
        sizes = " x ".join(f"{item.name} {worst[f'n{i}']}" for i, item in enumerate(shape.inputs))
        rows = reduce(lambda a, b: a * b, [int(worst[f"n{i}"]) for i in range(len(shape.inputs))])
        raise InputDataError(
            f"join key ({key}) would produce {rows} output rows "
            f"({sizes}), more than max_rows_per_join_key ({spec.max_rows_per_join_key}): an N:M explosion. "
            "Fix the data, or raise max_rows_per_join_key if the key really fans out that far; nothing was "
            "written."
        )

    def check_pkey(self, rows: DataFrame, warnings: list[str]) -> int | None:
        """Check ``output.pkey`` over the whole join ``rows`` (a full rebuild): see :meth:`_pkey_verdict`."""
        if not self.shape.pkey_checked or self.shape.pkey is None:
            return None
        pkey = [quote(c) for c in self.shape.pkey]
        counted = rows.groupBy(*pkey).agg(F.count(F.lit(1)).alias(_PKEY_COUNT))
        return self._pkey_verdict(counted, rows, warnings)

    def _check_pkey_changes(self, old: DataFrame, new: DataFrame, warnings: list[str]) -> int | None:
        """Check ``output.pkey`` over what the output holds after this refresh, for the pkeys of ``new``
        (the changed identities' new rows; ``old``, their previous rows, leave the output).

        Per pkey, the count after the refresh is the output's count minus ``old``'s plus ``new``'s. With
        ``enforce_pkey`` every refresh checked the output, so it holds each pkey once, and a pkey of
        ``old`` is held by that old row only: the output is read only for new pkeys not in ``old`` (the
        usual refresh, values changing and pkeys staying, reads nothing of it)."""
        spec, shape = self.spec, self.shape
        if not shape.pkey_checked or shape.pkey is None:
            return None
        pkey = list(shape.pkey)
        signed = [new.select(*[quote(c) for c in pkey], F.lit(1).alias(_PKEY_COUNT))]
        wanted = new.select(*[quote(c) for c in pkey]).distinct()
        if spec.enforce_pkey:
            wanted = _null_safe_join(wanted, old.select(*[quote(c) for c in pkey]), pkey, "left_anti")
        else:
            signed.append(old.select(*[quote(c) for c in pkey], F.lit(-1).alias(_PKEY_COUNT)))
        held: DataFrame | None = None
        if not wanted.isEmpty():
            held = _null_safe_join(
                self.output.read().select(*[quote(c) for c in shape.value_columns]),
                F.broadcast(wanted),
                pkey,
                "left_semi",
            )
            signed.append(held.select(*[quote(c) for c in pkey], F.lit(1).alias(_PKEY_COUNT)))
        counted = (
            reduce(lambda a, b: a.unionByName(b), signed)
            .groupBy(*[quote(c) for c in pkey])
            .agg(F.sum(_PKEY_COUNT).alias(_PKEY_COUNT))
        )
        clashing = new if held is None else new.unionByName(held)
        return self._pkey_verdict(counted, clashing, warnings)

    def _pkey_verdict(self, counted: DataFrame, rows: DataFrame, warnings: list[str]) -> int | None:
        """From the rows per pkey (``counted``): an InputDataError naming the smallest repeated key (the
        same one on every run) and the input that repeats it (found among ``rows``), or, with
        ``enforce_pkey: false``, the count of repeated pkey values with a warning."""
        spec, shape = self.spec, self.shape
        assert shape.pkey is not None
        pkey = [quote(c) for c in shape.pkey]
        repeated = counted.where(F.col(_PKEY_COUNT) > 1)
        if not spec.enforce_pkey:
            found = repeated.count()
            if found:
                warnings.append(
                    f"output.pkey {shape.pkey} is not unique: {found} value(s) repeat among the rows this "
                    "refresh wrote and the output rows sharing their pkey; the output keeps every row"
                )
            return found
        example = repeated.orderBy(*pkey).first()
        if example is None:
            return None
        value = {c: example[c] for c in shape.pkey}
        clash = rows
        for column, wanted in value.items():
            clash = clash.where(F.col(quote(column)).eqNullSafe(F.lit(wanted)))
        culprits = _culprits(shape, [row.asDict() for row in clash.limit(20).collect()])
        shown = ", ".join(f"{c}={v!r}" for c, v in value.items())
        raise InputDataError(
            f"output.pkey {shape.pkey}: ({shown}) repeats {example[_PKEY_COUNT]} times; input "
            f"{' and '.join(repr(c) for c in culprits)} gives it several rows. A pkey must identify one "
            f"output row: add {culprits[0] if culprits else 'that input'}'s key to pkey, or set "
            "enforce_pkey: false to keep every row; nothing was written."
        )

    # -- the incremental refresh -----------------------------------------------------------------------

    def read_all_changes(self, plan: RefreshPlan) -> dict[str, InputChanges]:
        """Each changed input's changed keys with their new and old rows, the feeds read by one Spark
        action (old rows: None when a changelog's log cannot be read as of the consumed version)."""
        shape, sides = self.shape, self.sides
        changed = [item for item in shape.inputs if plan.from_versions[item.name] != sides[item.name].version]
        opened: list[ChangedKeys] = []
        changes: dict[str, InputChanges] = {}
        try:
            feeds = read_changes_of(
                [(sides[item.name], item.key, _consumed(plan, item.name)) for item in changed],
                opened,
                images=True,
            )
            for item, found in zip(changed, feeds, strict=True):
                side = sides[item.name]
                if side.changelog is None:
                    assert found.after is not None and found.before is not None
                    changes[item.name] = InputChanges(found, found.after, found.before)
                else:
                    changes[item.name] = _changelog_images(item, side, found, _consumed(plan, item.name))
        except BaseException:
            for frame in opened:  # e.g. a changelog's events failed their check after the feeds were read
                frame.release()
            for done in changes.values():
                done.release()
            raise
        return changes

    def _check_identities(self, states: list[DataFrame]) -> None:
        """Fail on an input key repeated in a state; one job for every input, which also computes and
        keeps the states (their lineage cut)."""
        shape, sides = self.shape, self.sides
        check_keys_of(
            [
                _identity_check(item, sides[item.name], state)
                for item, state in zip(shape.inputs, states, strict=True)
            ]
        )

    def _telescoped(self, changes: dict[str, InputChanges], arity: int) -> tuple[DataFrame, DataFrame, int]:
        """(old rows, new rows, affected join keys) of the identities this refresh changes, by the
        telescoping rule (module docstring)."""
        shape, sides = self.shape, self.sides
        images = [
            prepared(item, frame, F.lit(NEW_IMAGE))
            for item in shape.inputs
            if item.name in changes and changes[item.name].count
            for frame in (changes[item.name].new_rows, changes[item.name].old_rows)
            if frame is not None
        ]
        if not images:
            none = self._empty()
            return none, none, 0
        keys, affected = _affected_join_keys(images, arity)
        # a changed input's change (delta) is its new rows (weight +1) and its old rows (weight -1)
        deltas: dict[str, DataFrame] = {}
        new_states = [
            _state(item, sides[item.name], keys, affected, arity, changes.get(item.name))
            for item in shape.inputs
        ]
        self._check_identities(new_states)
        old_states: list[DataFrame] = []
        for item, state in zip(shape.inputs, new_states, strict=True):
            found = changes.get(item.name)
            if found is None or found.count == 0:
                old_states.append(state)
                continue
            assert found.old_rows is not None
            tag = F.col(TAG_PREFIX + item.name)
            minus = cut_lineage(prepared(item, found.old_rows, F.lit(OLD_IMAGE), F.lit(-1)), eager=False)
            deltas[item.name] = state.where(tag == NEW_IMAGE).withColumn(WEIGHT, F.lit(1)).unionByName(minus)
            old_states.append(state.where(tag == UNCHANGED).unionByName(minus.drop(WEIGHT)))
        self.guard_buckets([new_states, old_states], arity)
        terms = []
        for index, item in enumerate(shape.inputs):
            if item.name not in deltas:
                continue
            frames = [*new_states[:index], deltas[item.name], *old_states[index + 1 :]]
            # the change first: the join grows from the few changed rows, not from a whole input
            order = [frames[index], *frames[:index], *frames[index + 1 :]]
            terms.append(join_all(order, arity))
        tags = [TAG_PREFIX + item.name for item in shape.inputs]
        summed = (
            reduce(lambda a, b: a.unionByName(b), terms)
            .groupBy(*[quote(c) for c in shape.identity], *tags)
            .agg(F.sum(WEIGHT).alias(WEIGHT), *[F.any_value(quote(c)).alias(c) for c in shape.value_columns])
            .where(F.col(WEIGHT) != 0)
        )
        summed = cut_lineage(summed)
        columns = [quote(c) for c in shape.identity + shape.value_columns]
        new = summed.where(F.col(WEIGHT) > 0).select(*columns)
        old = summed.where(F.col(WEIGHT) < 0).select(*columns)
        return old, new, affected

    def _empty(self) -> DataFrame:
        """The join's identity and output columns, with no rows (when no input changed a row)."""
        shape, sides = self.shape, self.sides
        frames = [prepared(item, sides[item.name].rows.limit(0), F.lit(UNCHANGED)) for item in shape.inputs]
        return join_all(frames, len(shape.on)).select(
            *[quote(c) for c in shape.identity + shape.value_columns]
        )

    def _recompute_changed(
        self, changes: dict[str, InputChanges], arity: int, gone: list[str]
    ) -> tuple[DataFrame, DataFrame, int]:
        """The fallback when an old snapshot is gone: the output rows showing a changed input key (old) and
        the new join's rows holding one (new), recomputed over the join keys the new images touch. An
        output that does not show every changed input's key cannot be searched that way: it is rebuilt."""
        shape, sides, output = self.shape, self.sides, self.output
        hidden = [
            f"{item.name}.{column}"
            for item in shape.inputs
            if item.name in changes and changes[item.name].count
            for column, name in zip(item.key, shape.key_names[item.name], strict=True)
            if name is None
        ]
        if hidden:
            raise RebuildRequired(
                f"the log of changelog input(s) {gone} cannot be read as of the consumed version (vacuumed), "
                f"and the output does not show the changed inputs' keys {hidden}, so the rows to replace "
                "cannot be found in it: rebuilding in full"
            )
        plus = [
            prepared(item, changes[item.name].new_rows, F.lit(NEW_IMAGE))
            for item in shape.inputs
            if item.name in changes
        ]
        keys, affected = _affected_join_keys(plus, arity)
        frames = [
            _state(item, sides[item.name], keys, affected, arity, changes.get(item.name))
            for item in shape.inputs
        ]
        self._check_identities(frames)
        self.guard_buckets([frames], arity)
        joined = join_all(frames, arity)
        any_new = reduce(
            lambda a, b: a | b, [F.col(TAG_PREFIX + item.name) == NEW_IMAGE for item in shape.inputs]
        )
        columns = [quote(c) for c in shape.value_columns]
        new = joined.where(any_new).select(*columns)
        flagged, hit = _key_flags(shape, output.read().select(*columns), changes)
        old = flagged.where(hit).select(*columns)
        return old, new, affected


def _rows(spec: MultiWayJoinSpec, **counts: Any) -> dict[str, Any]:
    names = [item.name for item in spec.inputs_]
    rows: dict[str, Any] = {
        "inserted": counts.get("inserted", 0),
        "updated": counts.get("updated", 0),
        "deleted": counts.get("deleted", 0),
        "join_keys_affected": counts.get("join_keys", 0),
        "changes_read": {n: counts.get("changes", {}).get(n, 0) for n in names},
        "null_keys_dropped": {n: counts.get("nulls", {}).get(n, 0) for n in names},
    }
    if "pkey_duplicates" in counts:
        rows["pkey_duplicates"] = counts["pkey_duplicates"]
    return rows


def _non_null(side: JoinInput, key: list[str]) -> DataFrame:
    return side.rows.where(~key_is_null(key))


def _non_null_tables(shape: MultiWayShape, sides: Mapping[str, JoinInput]) -> dict[str, DataFrame]:
    """Each input's rows with a non-null key, by input name (a full rebuild's and an audit's join)."""
    return {item.name: _non_null(sides[item.name], item.key) for item in shape.inputs}


# -- one input's part of the incremental refresh, and the MERGE source --------------------------------


def _consumed(plan: RefreshPlan, name: str) -> int:
    after = plan.from_versions[name]
    assert after is not None
    return after


def _changelog_images(item: InputShape, side: JoinInput, found: ChangedKeys, after: int) -> InputChanges:
    """A changelog input's new and old rows for its changed keys; old: None when the log cannot be read
    as of ``after`` (vacuumed)."""
    assert side.changelog is not None
    keys = maybe_broadcast(found.keys, found.count)
    cached: list[DataFrame] = []
    old_rows: DataFrame | None = None
    try:
        new_rows = side.rows.join(keys, on=item.key, how="left_semi").persist()
        cached.append(new_rows)
        table = side.handle
        with feed_errors(table, after, side.version):
            # read now: a snapshot whose files were vacuumed fails here, not halfway through the refresh
            before = cl.latest_state(table.read(after), side.changelog, keep_order=False)
            old_rows = before.join(keys, on=item.key, how="left_semi").persist()
            cached.append(old_rows)
            old_rows.count()
    except RebuildRequired:
        if old_rows is not None:
            cached.remove(old_rows)
            old_rows.unpersist()
        old_rows = None
    except BaseException:
        for frame in cached:
            frame.unpersist()
        raise
    return InputChanges(found, new_rows, old_rows, cached)


def _affected_join_keys(frames: list[DataFrame], arity: int) -> tuple[DataFrame, int]:
    on = _on_names(arity)
    keys = reduce(lambda a, b: a.unionByName(b), [frame.select(*on) for frame in frames]).distinct()
    keys = cut_lineage(keys, eager=False)
    return keys, keys.count()


def _restricted(item: InputShape, side: JoinInput, keys: DataFrame, count: int, arity: int) -> DataFrame:
    """The input's current rows whose join key is in ``keys`` (the affected join keys)."""
    rows = _non_null(side, item.key).select("*", *_on_columns(item))
    return rows.join(maybe_broadcast(keys, count), on=_on_names(arity), how="left_semi").drop(
        *_on_names(arity)
    )


def _identity_check(item: InputShape, side: JoinInput, state: DataFrame) -> KeyCheck:
    """The key check of a prepared state, naming the input's key columns (not the hidden identity)."""
    keys = state.select(*[F.col(quote(hidden)).alias(source) for source, hidden in item.identity])
    return KeyCheck(keys, item.key, side.handle, side.version)


def _changed_state(
    item: InputShape, side: JoinInput, keys: DataFrame, affected: int, arity: int, found: InputChanges
) -> DataFrame:
    """A changed input's rows in its pinned snapshot, prepared and tagged NEW_IMAGE where the key changed:
    those on an affected join key (``keys``), and every row of a changed key, so that a key this
    refresh's commits repeat (an append of an existing key) fails check_keys as it would in a full run,
    whatever the repeat's join key."""
    on = _on_names(arity)
    hit, changed = "_fkjoin_affected", "_fkjoin_changed"
    rows = (
        _non_null(side, item.key)
        .select("*", *_on_columns(item))
        .join(maybe_broadcast(keys.withColumn(hit, F.lit(True)), affected), on=on, how="left")
        .join(
            maybe_broadcast(found.changed.keys.withColumn(changed, F.lit(True)), found.count),
            on=item.key,
            how="left",
        )
        .where(F.col(hit).isNotNull() | F.col(changed).isNotNull())
    )
    tag = F.when(F.col(changed).isNotNull(), F.lit(NEW_IMAGE)).otherwise(F.lit(UNCHANGED))
    return prepared(item, rows.drop(*on), tag)


def _state(
    item: InputShape, side: JoinInput, keys: DataFrame, affected: int, arity: int, found: InputChanges | None
) -> DataFrame:
    """An input's state for the affected join keys ``keys``: its pinned snapshot's rows on them, prepared
    (tagged NEW_IMAGE where the key changed, with every row of a changed key), kept under a cut lineage
    by the first job that reads it (:meth:`MultiWayJoinRefresh._check_identities`)."""
    if found is None or found.count == 0:
        rows = prepared(item, _restricted(item, side, keys, affected, arity), F.lit(UNCHANGED))
    else:
        rows = _changed_state(item, side, keys, affected, arity, found)
    return cut_lineage(rows, eager=False)


def _key_flags(
    shape: MultiWayShape, rows: DataFrame, changes: dict[str, InputChanges]
) -> tuple[DataFrame, Column]:
    """Output ``rows`` flagged where a changed input's key, as the output shows it, is a changed key."""
    hit = F.lit(False)
    for item in shape.inputs:
        found = changes.get(item.name)
        if found is None or found.count == 0:
            continue
        flag = f"_fkjoin_hit_{item.name}"
        shown = [name for name in shape.key_names[item.name] if name is not None]
        names = list(dict.fromkeys(shown))
        keys = (
            found.changed.keys.select(
                *[F.col(quote(c)).alias(n) for c, n in zip(item.key, shown, strict=True)]
            )
            .select(*[quote(n) for n in names])
            .distinct()
            .withColumn(flag, F.lit(True))
        )
        rows = rows.join(maybe_broadcast(keys, found.count), on=names, how="left")
        hit = hit | F.coalesce(F.col(flag), F.lit(False))
    return rows, hit


def _merge_source(net: NetChanges, shape: MultiWayShape, cached: list[DataFrame]) -> DataFrame:
    """The MERGE source from net changes: new values (present) and deletes (absent)."""
    assert shape.key is not None
    changed = net.frame.where(F.col(CHANGE).isNotNull())
    source = changed.select(
        *[quote(c) for c in shape.key + shape.rest],
        (F.col(CHANGE) != "delete").alias(PRESENT),
    ).persist()
    cached.append(source)
    return maybe_broadcast(source, source.count())


def _null_safe_join(left: DataFrame, right: DataFrame, columns: list[str], how: str) -> DataFrame:
    """``left`` semi- or anti-joined with ``right`` on ``columns``, nulls matching nulls (pkey values may
    be null, and the pkey check counts them as one value)."""
    a, b = left.alias("_fkjoin_l"), right.alias("_fkjoin_r")
    on = reduce(
        lambda x, y: x & y,
        [F.col(f"_fkjoin_l.{quote(c)}").eqNullSafe(F.col(f"_fkjoin_r.{quote(c)}")) for c in columns],
    )
    return a.join(b, on, how)


def _culprits(shape: MultiWayShape, rows: list[dict[str, Any]]) -> list[str]:
    """The inputs whose part differs among ``rows``, which share a pkey: by identity where the rows carry
    it (a full rebuild's join), else by the columns each input shows."""
    found = []
    for item in shape.inputs:
        columns = [hidden for _, hidden in item.identity]
        if not rows or any(c not in row for row in rows for c in columns):
            columns = [name for _, name in item.shown]
        if len({tuple(row.get(c) for c in columns) for row in rows}) > 1:
            found.append(item.name)
    return found


def row_hash(columns: list[str]) -> Column:
    """A keyless output row's hash: SHA-256 of the row as JSON (equal rows, nulls included, hash equal).

    >>> row_hash(["biz_id", "stars"])  # doctest: +SKIP
    Column<'sha2(to_json(struct(biz_id, stars)), 256)'>
    """
    return F.sha2(F.to_json(F.struct(*[F.col(quote(c)) for c in columns])), 256)


def _copy_changes(old: DataFrame, new: DataFrame, columns: list[str]) -> NetChanges:
    """A keyless output's net changes: per distinct row, the copies to delete or insert.

    With ``m`` old and ``n`` new copies of a row among the changed identities, copies ``1..min(m, n)``
    stay (checked, not written), ``n+1..m`` are deleted, and ``n-m`` new copies are inserted. A copy is
    keyed by ``_fkjoin_row_hash`` (:func:`row_hash`) and ``_fkjoin_copy``, its number among the output's
    equal rows in file order (``derive_key``: located copies are 1, 2, ...; inserted ones are numbered
    below zero and never located). The commit's proof then checks that the output holds at least the
    ``m`` copies the inputs say, and deletes the first of them.

    >>> _copy_changes(old, new, ["biz_id", "stars"]).deleted  # doctest: +SKIP
    2
    """
    had, has, step = "_fkjoin_had", "_fkjoin_has", "_fkjoin_step"

    def counted(frame: DataFrame, count: str, alias: str) -> DataFrame:
        return (
            frame.select(*[quote(c) for c in columns])
            .withColumn(ROW_HASH, row_hash(columns))
            .groupBy(ROW_HASH)
            .agg(
                F.count(F.lit(1)).cast("int").alias(count), *[F.any_value(quote(c)).alias(c) for c in columns]
            )
            .alias(alias)
        )

    o, n = counted(old, had, "o"), counted(new, has, "n")
    joined = o.join(n, F.col(f"o.{ROW_HASH}") == F.col(f"n.{ROW_HASH}"), "full_outer")
    in_new = F.col(f"n.{ROW_HASH}").isNotNull()
    m_old, m_new = F.coalesce(F.col(f"o.{had}"), F.lit(0)), F.coalesce(F.col(f"n.{has}"), F.lit(0))
    steps = joined.select(
        F.coalesce(F.col(f"n.{ROW_HASH}"), F.col(f"o.{ROW_HASH}")).alias(ROW_HASH),
        *[F.when(in_new, F.col(f"n.{quote(c)}")).otherwise(F.col(f"o.{quote(c)}")).alias(c) for c in columns],
        m_old.alias(had),
        m_new.alias(has),
        F.explode(F.sequence(F.lit(1), F.greatest(m_old, m_new))).alias(step),
    )
    i, was, now = F.col(step), F.col(had), F.col(has)
    located = i <= was
    change = (
        F.when(located & (i <= now), F.lit(None).cast("string"))
        .when(located, F.lit("delete"))
        .otherwise(F.lit("insert"))
    )
    classified = steps.select(
        ROW_HASH,
        F.when(located, i).otherwise(-i).alias(COPY),
        *[F.when(~located | (i <= now), F.col(quote(c))).alias(c) for c in columns],
        *[F.when(located, F.col(quote(c))).alias(PRE_IMAGE + c) for c in columns],
        change.alias(CHANGE),
        located.cast("int").alias(EXPECTED),
    )
    net = counted_changes(classified, [ROW_HASH, COPY])

    def derive_key(live: DataFrame) -> DataFrame:
        wanted = net.frame.where(F.col(EXPECTED) == 1).select(ROW_HASH).distinct()
        hashed = live.withColumn(ROW_HASH, row_hash(columns)).join(
            maybe_broadcast(wanted, net.keys), on=ROW_HASH, how="left_semi"
        )
        order = Window.partitionBy(ROW_HASH).orderBy(*ROW_POSITION_COLUMNS)
        return hashed.withColumn(COPY, F.row_number().over(order))

    net.derive_key = derive_key
    return net


def _column_types(frame: DataFrame) -> list[tuple[str, str]]:
    return [(f.name, f.dataType.simpleString()) for f in frame.schema.fields]

"""N-way un-windowed inner joins (Yelp Joinery; ``docs/kinds/multiway-join.md``), maintained
incrementally by the telescoping delta rule.

Two to eight keyed inputs (tables or changelog sources) join on their ``join_keys``, matched by
position: 1:1, 1:N and N:M. Each output row is identified by the tuple of its inputs' primary keys, kept
in hidden ``_fkjoin_id__<input>__<column>`` columns: that identity is the merge key, so the visible
columns (every field minus ``exclude_fields``, renamed by ``aliases``, equal join-key columns merged)
may repeat.

**Incremental refresh.** With the inputs in spec order, old states ``O_i`` (the consumed versions), new
states ``N_i`` (the pinned versions) and changes ``Δ_i = N_i - O_i``, the change of the join is::

    ΔQ = Σ_i  N_1 ⋈ … ⋈ N_(i-1) ⋈ Δ_i ⋈ O_(i+1) ⋈ … ⋈ O_n

Every input's rows are tagged with the image they are (``0`` unchanged, ``1`` new, ``2`` old), each term's
rows carry a weight (``+1`` for a new image of input i, ``-1`` for an old one), and the terms' rows are
summed per (identity, tags): combinations that two terms produce with opposite signs cancel exactly,
whatever their values. What is left is, per identity, at most one new row (+1) and one old row (-1):
an insert, an update (when a value differs) or a delete, written as one net change.

Only the join keys that a change touches are read (``G``), once per input: ``N_i|G`` is a scan of the
input filtered by a broadcast of ``G``; the old state ``O_i|G`` is that minus the changed keys plus their
pre-images from the change feed. A changelog input's pre-images come from its log as of the consumed
version (time travel); when that snapshot is gone the refresh falls back to recomputing the changed
identities from the new states and diffing them against the output, and says so in ``reason``.

An N:M join key whose bucket-size product exceeds ``max_rows_per_join_key`` fails before any join is
materialised; ``output.pkey`` is checked (or, with ``enforce_pkey: false``, its repeats are counted).

Example::

    refresh_once(MultiWayJoinRefresh(load_spec("business_reviews.yaml"), spark), options)
    # {"mode": "incremental", "rows": {"inserted": 3, "updated": 12, "deleted": 1, ...}, ...}
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import reduce
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession
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
    check_keys_of,
    cut_lineage,
    feed_errors,
    maybe_broadcast,
)
from ..delta.tables import (
    DeltaHandle,
    TableState,
    cdf_off_warnings,
    key_is_null,
    pinned_input,
    require_columns,
)
from ..refresh.skeleton import KindRefresh, RefreshContext, Written
from ..write.merge import PRESENT, write_full_output
from ..write.net_changes import CHANGE, PRE_IMAGE, NetChanges, net_changes
from .fk_join import JoinInput, null_keys_of, read_changes_of, read_input

ID_PREFIX = "_fkjoin_id__"
ON_PREFIX = "_fkjoin_on"
TAG_PREFIX = "_fkjoin_tag_"
WEIGHT = "_fkjoin_weight"
UNCHANGED, NEW_IMAGE, OLD_IMAGE = 0, 1, 2


def identity_column(input_name: str, column: str) -> str:
    """The hidden output column holding one part of an input's primary key.

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
    #: The output's merge key: every input's primary key, hidden, in input order.
    identity: list[str]
    #: The visible output columns, in order.
    value_columns: list[str]
    #: The join keys' output names per position where an input shows them (for messages).
    on: list[str]
    pkey: list[str] | None
    #: Whether ``pkey`` needs a data check (False when it holds every input's key, so it is unique).
    pkey_checked: bool


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
    covered = pkey is not None and all(
        any(source == key and name in pkey for source, name in shape.shown)
        for shape in shapes
        for key in shape.key
    )
    return MultiWayShape(shapes, identity, value_columns, on, pkey, pkey is not None and not covered)


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


def expected_output(
    spec: MultiWayJoinSpec, spark: SparkSession, states: dict[str, TableState]
) -> tuple[DataFrame, list[str], list[str]]:
    """The join recomputed from scratch over the inputs at ``states`` (for an audit)."""
    refs = spec.inputs()
    handles = {name: DeltaHandle(spark, ref, name) for name, ref in refs.items()}
    sides = {name: read_input(refs[name], handles[name], states[name]) for name in refs}
    shape = resolve_shape(spec, {name: side.rows for name, side in sides.items()}, handles)
    frames = [
        prepared(item, _non_null(sides[item.name], item.key), F.lit(UNCHANGED)) for item in shape.inputs
    ]
    joined = join_all(frames, len(shape.on)).select(*[quote(c) for c in shape.identity + shape.value_columns])
    return joined, shape.identity, shape.value_columns


class MultiWayJoinRefresh(KindRefresh):
    """One refresh of a ``multiway_join``'s output (see the module docstring).

    >>> refresh_once(MultiWayJoinRefresh(load_spec("business_reviews.yaml"), spark), options)["mode"]
    'incremental'
    """

    spec: MultiWayJoinSpec
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
        serve."""
        spec, shape = self.spec, self.shape
        changes: dict[str, InputChanges] = {}
        cached: list[DataFrame] = []
        net: NetChanges | None = None
        try:
            changes = self.read_all_changes(plan)
            phase("changes_read")
            gone = [name for name, found in changes.items() if found.old_rows is None]
            arity = len(shape.on)
            if gone:
                old, new, affected = self._recompute_changed(changes, arity)
                reason = (
                    f"{plan.reason}; the log of changelog input(s) {gone} cannot be read as of the consumed "
                    "version (vacuumed), so the changed identities were recomputed from the new states and "
                    "diffed against the output"
                )
            else:
                old, new, affected = self._telescoped(changes, arity)
                reason = plan.reason
            net = net_changes(old, new, shape.identity, shape.value_columns)
            others = None
            duplicates = None
            if shape.pkey_checked:
                written = self._rows_to_check_pkey(net.frame)
                if written.isEmpty():
                    duplicates = None if spec.enforce_pkey else 0
                else:
                    others = self._output_rows_sharing_pkey(written, net.frame)
                    duplicates = self.check_pkey(written, others, refresh.warnings)
            phase("merge_started")
            request = refresh.request("incremental", reason)
            commit = refresh.write(
                net if refresh.direct_write_possible(True) else None,
                shape.identity,
                shape.value_columns,
                request,
                lambda: _merge_source(net, shape, cached),
            )
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

    def full(self, refresh: RefreshContext, plan: RefreshPlan) -> Written:
        """The full rebuild: every input at its pinned version joined, its pkey checked, written over the
        output."""
        spec, shape, sides, output = self.spec, self.shape, self.sides, self.output
        dropped = null_keys_of([(sides[item.name], item.key) for item in shape.inputs])
        nulls = {item.name: count for item, count in zip(shape.inputs, dropped, strict=True)}
        frames = [
            prepared(item, _non_null(sides[item.name], item.key), F.lit(UNCHANGED)) for item in shape.inputs
        ]
        phase("changes_read")
        arity = len(shape.on)
        self.guard_buckets([frames], arity)
        joined = join_all(frames, arity).select(*[quote(c) for c in shape.value_columns + shape.identity])
        if shape.pkey_checked:
            joined = joined.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            duplicates = self.check_pkey(joined, None, refresh.warnings)
            phase("merge_started")
            commit = write_full_output(
                output, joined, shape.identity, shape.value_columns, refresh.request("full", plan.reason)
            )
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

    def check_pkey(self, rows: DataFrame, others: DataFrame | None, warnings: list[str]) -> int | None:
        """Check ``output.pkey`` over ``rows`` (and ``others``, the output rows they join): an
        InputDataError naming the smallest repeated key (the same one on every run) and the input that
        repeats it, or, with ``enforce_pkey: false``, the count of repeated pkey values (None when there
        is no pkey, or it holds every input's key)."""
        spec, shape = self.spec, self.shape
        if not shape.pkey_checked or shape.pkey is None:
            return None
        pkey = [quote(c) for c in shape.pkey]
        candidates = rows.select(*pkey, *[quote(c) for c in shape.identity])
        if others is not None:
            candidates = candidates.unionByName(others.select(*pkey, *[quote(c) for c in shape.identity]))
        repeated = candidates.groupBy(*pkey).agg(F.count(F.lit(1)).alias("_fkjoin_n")).where("_fkjoin_n > 1")
        if not spec.enforce_pkey:
            found = repeated.count()
            if found:
                warnings.append(
                    f"output.pkey {shape.pkey} is not unique: {found} value(s) repeat among the rows this "
                    "refresh wrote and the output rows sharing their pkey; the output keeps every row "
                    "(its identity is the inputs' keys)"
                )
            return found
        example = repeated.orderBy(*pkey).first()
        if example is None:
            return None
        value = {c: example[c] for c in shape.pkey}
        clash = candidates
        for column, wanted in value.items():
            clash = clash.where(F.col(quote(column)).eqNullSafe(F.lit(wanted)))
        clashing = clash.limit(20).collect()
        culprits = [
            item.name
            for item in shape.inputs
            if len({tuple(row[hidden] for _, hidden in item.identity) for row in clashing}) > 1
        ]
        shown = ", ".join(f"{c}={v!r}" for c, v in value.items())
        raise InputDataError(
            f"output.pkey {shape.pkey}: ({shown}) repeats {example['_fkjoin_n']} times; input "
            f"{' and '.join(repr(c) for c in culprits)} gives it several rows. A pkey must identify one "
            f"output row: add {culprits[0] if culprits else 'that input'}'s key to pkey, or set "
            "enforce_pkey: false to keep every row; nothing was written."
        )

    def _rows_to_check_pkey(self, frame: DataFrame) -> DataFrame:
        """The rows of net changes ``frame`` whose pkey may repeat another row's: every insert and update,
        or, with ``enforce_pkey``, only the inserts and the updates that change the pkey's value. Every
        refresh checked the output then, so it repeats no pkey and an update keeping its pkey cannot add a
        repeat; the usual refresh (values change, pkeys stay) then reads nothing of the output."""
        spec, shape = self.spec, self.shape
        assert shape.pkey is not None
        if not spec.enforce_pkey:
            return frame.where(F.col(CHANGE).isin("insert", "update"))
        kept = reduce(
            lambda a, b: a & b,
            [F.col(quote(c)).eqNullSafe(F.col(quote(PRE_IMAGE + c))) for c in shape.pkey],
        )
        return frame.where((F.col(CHANGE) == "insert") | ((F.col(CHANGE) == "update") & ~kept))

    def _output_rows_sharing_pkey(self, written: DataFrame, frame: DataFrame) -> DataFrame:
        """The output's rows (pkey and identity) that share a pkey with a row in ``written``, except the
        rows this refresh deletes or writes again (``written``'s updates)."""
        shape, output = self.shape, self.output
        assert shape.pkey is not None
        pkey = [quote(c) for c in shape.pkey]
        identity = [quote(c) for c in shape.identity]
        wanted = written.select(*pkey).distinct()
        replaced = (
            frame.where(F.col(CHANGE) == "delete")
            .select(*identity)
            .unionByName(written.where(F.col(CHANGE) == "update").select(*identity))
        )
        return (
            output.read()
            .select(*pkey, *identity)
            .join(F.broadcast(wanted), on=list(shape.pkey), how="left_semi")
            .join(replaced, on=list(shape.identity), how="left_anti")
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
        self, changes: dict[str, InputChanges], arity: int
    ) -> tuple[DataFrame, DataFrame, int]:
        """The fallback when an old snapshot is gone: the output rows holding a changed key (old) and the
        new join's rows holding one (new), recomputed over the join keys the new images touch."""
        shape, sides, output = self.shape, self.sides, self.output
        columns = [quote(c) for c in shape.identity + shape.value_columns]
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
        new = joined.where(any_new).select(*columns)
        flagged, hit = _identity_flags(shape, output.read().select(*columns), changes)
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


def _identity_flags(
    shape: MultiWayShape, rows: DataFrame, changes: dict[str, InputChanges]
) -> tuple[DataFrame, Column]:
    """``rows`` (holding identity columns) flagged where some input's part of the identity changed."""
    hit = F.lit(False)
    for item in shape.inputs:
        found = changes.get(item.name)
        if found is None or found.count == 0:
            continue
        flag = f"_fkjoin_hit_{item.name}"
        keys = found.changed.keys.select(
            *[F.col(quote(source)).alias(hidden) for source, hidden in item.identity]
        ).withColumn(flag, F.lit(True))
        rows = rows.join(maybe_broadcast(keys, found.count), on=[h for _, h in item.identity], how="left")
        hit = hit | F.coalesce(F.col(flag), F.lit(False))
    return rows, hit


def _merge_source(net: NetChanges, shape: MultiWayShape, cached: list[DataFrame]) -> DataFrame:
    """The MERGE source from net changes: new values (present) and deletes (absent)."""
    changed = net.frame.where(F.col(CHANGE).isNotNull())
    source = changed.select(
        *[quote(c) for c in shape.identity + shape.value_columns],
        (F.col(CHANGE) != "delete").alias(PRESENT),
    ).persist()
    cached.append(source)
    return maybe_broadcast(source, source.count())

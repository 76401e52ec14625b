"""Changelog sources: an append-only Delta table of CDC events read as the table it describes.

A CDC tool (Debezium, a database's log reader) writes one row per change event: the key columns, an
op column (create / update / delete / log, i.e. a snapshot read), an ordering column (offset, LSN or
timestamp) and the payload columns. The table those events describe is, per key, the **latest event
by the ordering column**: a create, update or log event sets the key's row to its payload, a delete
removes the key, and an event that sorts before the key's current one is ignored (it arrived late).

Example: events for key 1 ``(c, lsn 10, "a")``, ``(u, lsn 30, "c")``, ``(u, lsn 20, "b")`` describe
the row ``(1, "c")``: the lsn-20 update arrived after the lsn-30 one and is ignored.

Ties are broken deterministically, whatever order the events arrived in: the order is the struct
``(order_by..., tiebreak)`` where ``tiebreak`` is a hash of the event (op and payload; op only for a
delete, whose payload does not matter). An identical event delivered twice (at-least-once CDC) is
therefore harmless; two *different* events with equal order values get an arbitrary but stable
winner, so give ``order_by`` a tiebreak column (``[lsn, event_serial]``) when arrival must decide.

The output of a changelog-sourced global table keeps this struct per key in a column named
``_fkjoin_order`` (the engine's reserved prefix, never a user column), so a later refresh can tell an
out-of-order event from a newer one without re-reading the whole log.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import MapType, StructType

from ..core.errors import InputDataError, SpecError
from ..core.spec import SourceRef, quote
from .tables import DeltaHandle, key_is_null

ORDER_COLUMN = "_fkjoin_order"
TIEBREAK_FIELD = "_fkjoin_tiebreak"
_OP = "_fkjoin_op"
_EVENT = "_fkjoin_event"


@dataclass(frozen=True)
class ChangelogShape:
    """A changelog source's columns, checked against the live table.

    ``payload`` is what the described table holds besides the key.
    """

    key: list[str]
    op_column: str
    order_by: list[str]
    payload: list[str]
    delete_op: str
    upsert_ops: list[str]
    hash_as_json: frozenset[str]

    @property
    def table_columns(self) -> list[str]:
        """The described table's columns: key then payload."""
        return self.key + self.payload


def resolve_changelog(ref: SourceRef, table: DeltaHandle, schema: StructType) -> ChangelogShape:
    """Check a changelog source's columns against the table's schema; raises SpecError naming the fix."""
    assert ref.changelog is not None
    log = ref.changelog
    names = [field.name for field in schema.fields]
    types = {field.name: field.dataType for field in schema.fields}

    def require(columns: list[str], field_path: str) -> None:
        for index, column in enumerate(columns):
            if column not in types:
                raise SpecError(
                    f"{field_path}[{index}]: column {column!r} is not in {table.role} changelog table "
                    f"{table.location} (columns: {', '.join(names)})"
                )

    prefix = table.role
    require(ref.key, f"{prefix}.key")
    if log.op_column not in types:
        raise SpecError(
            f"{prefix}.changelog.op_column: column {log.op_column!r} is not in changelog table "
            f"{table.location} (columns: {', '.join(names)})"
        )
    require(log.order_by, f"{prefix}.changelog.order_by")
    for column in log.order_by:
        if isinstance(types[column], MapType):
            raise SpecError(
                f"{prefix}.changelog.order_by: column {column!r} of {table.location} is a map, which has no "
                "order; use an offset, LSN or timestamp column"
            )
    special = {log.op_column, *log.order_by, *ref.key}
    if log.columns is None:
        payload = [c for c in names if c not in special]
    else:
        require(log.columns, f"{prefix}.changelog.columns")
        payload = list(log.columns)
    return ChangelogShape(
        key=list(ref.key),
        op_column=log.op_column,
        order_by=list(log.order_by),
        payload=payload,
        delete_op=log.ops.delete,
        upsert_ops=log.ops.upserts,
        hash_as_json=frozenset(c for c in payload if isinstance(types[c], MapType)),
    )


def order_struct(shape: ChangelogShape) -> Column:
    """The total order of a key's events: ``struct(order_by..., tiebreak)``, compared field by field."""
    op = F.col(quote(shape.op_column))
    payload = [
        F.to_json(F.col(quote(c))) if c in shape.hash_as_json else F.col(quote(c)) for c in shape.payload
    ]
    tiebreak = F.when(op == F.lit(shape.delete_op), F.xxhash64(op)).otherwise(F.xxhash64(op, *payload))
    return F.struct(*[F.col(quote(c)).alias(c) for c in shape.order_by], tiebreak.alias(TIEBREAK_FIELD))


@dataclass(frozen=True)
class EventStats:
    """What a batch of events held besides usable events."""

    events: int
    null_keys: int
    null_orders: int


def check_events(events: DataFrame, shape: ChangelogShape, table: DeltaHandle) -> EventStats:
    """Count unusable events and fail on ops the spec does not name (one aggregation over key/op/order).

    An op value outside ``changelog.ops`` means the mapping is wrong (say the tool writes ``INSERT``),
    so it is an InputDataError naming the values, raised before anything is written.
    """
    op = F.col(quote(shape.op_column))
    known = op.isin(shape.delete_op, *shape.upsert_ops)
    null_key = key_is_null(shape.key)
    null_order = F.lit(False)
    for column in shape.order_by:
        null_order = null_order | F.col(quote(column)).isNull()
    unknown = ~F.coalesce(known, F.lit(False))
    row = events.agg(
        F.count(F.lit(1)).alias("events"),
        F.sum(null_key.cast("long")).alias("null_keys"),
        F.sum((~null_key & null_order).cast("long")).alias("null_orders"),
        F.slice(F.collect_set(F.when(unknown, F.coalesce(op.cast("string"), F.lit("<null>")))), 1, 5).alias(
            "unknown"
        ),
    ).first()
    if row["unknown"]:
        raise InputDataError(
            f"{table.role} changelog table {table.location}: column {shape.op_column!r} holds op values "
            f"{sorted(row['unknown'])} that changelog.ops does not name (create/update/log: "
            f"{shape.upsert_ops}, delete: {shape.delete_op!r}); set changelog.ops to the values your CDC "
            "tool writes. Nothing was written."
        )
    return EventStats(int(row["events"] or 0), int(row["null_keys"] or 0), int(row["null_orders"] or 0))


def usable_events(events: DataFrame, shape: ChangelogShape) -> DataFrame:
    """Events with a non-null key and order, as key, op, ``_fkjoin_order`` and payload."""
    condition = ~key_is_null(shape.key)
    for column in shape.order_by:
        condition = condition & F.col(quote(column)).isNotNull()
    return events.where(condition).select(
        *[F.col(quote(c)) for c in shape.key],
        F.col(quote(shape.op_column)).alias(_OP),
        order_struct(shape).alias(ORDER_COLUMN),
        *[F.col(quote(c)) for c in shape.payload],
    )


def latest_events(usable: DataFrame, shape: ChangelogShape) -> DataFrame:
    """The latest event per key (deletes included): key, ``is_delete``, ``_fkjoin_order``, payload."""
    event = F.struct(F.col(_OP).alias(_OP), *[F.col(quote(c)).alias(c) for c in shape.payload])
    latest = usable.groupBy(*[quote(c) for c in shape.key]).agg(
        F.max_by(event, F.col(ORDER_COLUMN)).alias(_EVENT), F.max(ORDER_COLUMN).alias(ORDER_COLUMN)
    )
    return latest.select(
        *[F.col(quote(c)) for c in shape.key],
        (F.col(f"{_EVENT}.{_OP}") == F.lit(shape.delete_op)).alias("is_delete"),
        F.col(ORDER_COLUMN),
        *[F.col(f"{_EVENT}.{quote(c)}").alias(c) for c in shape.payload],
    )


def latest_state(events: DataFrame, shape: ChangelogShape, *, keep_order: bool) -> DataFrame:
    """The table the events describe: one row per live key (key, payload[, ``_fkjoin_order``]).

    >>> latest_state(spark.read.format("delta").load("/w/products_cdc"), shape, keep_order=False)
    DataFrame[product_id: bigint, name: string, price: double]
    """
    latest = latest_events(usable_events(events, shape), shape).where(~F.col("is_delete"))
    extra = [F.col(ORDER_COLUMN)] if keep_order else []
    return latest.select(*[F.col(quote(c)) for c in shape.table_columns], *extra)


def tombstone_orders(events: DataFrame, shape: ChangelogShape, keys: DataFrame) -> DataFrame:
    """The order of the latest delete of each of ``keys`` (key, ``_fkjoin_order``) among ``events``.

    A key absent from a global table was either never seen or deleted; a late event must not bring a
    deleted key back, so its new events are compared with this. Reads only key, op and order columns.
    """
    op = F.col(quote(shape.op_column))
    condition = ~key_is_null(shape.key) & (op == F.lit(shape.delete_op))
    for column in shape.order_by:
        condition = condition & F.col(quote(column)).isNotNull()
    deletes = events.where(condition).select(
        *[F.col(quote(c)) for c in shape.key],
        *[F.col(quote(c)) for c in shape.order_by],
        op,
    )
    deletes = deletes.join(F.broadcast(keys), on=list(shape.key), how="left_semi")
    return deletes.groupBy(*[quote(c) for c in shape.key]).agg(
        F.max(
            F.struct(
                *[F.col(quote(c)).alias(c) for c in shape.order_by],
                F.xxhash64(op).alias(TIEBREAK_FIELD),
            )
        ).alias(ORDER_COLUMN)
    )

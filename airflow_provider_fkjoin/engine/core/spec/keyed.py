"""The kinds that look rows up in a keyed table by a key mapping: ``foreign_key_join``,
``global_table_bootstrap`` and ``stream_table_join`` (KIP-213 and KIP-99), with the foreign key or key
mapper (:class:`ForeignKeyExpr`, :func:`check_key_mapping`) and the stream reference they share.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from .refs import (
    OutputRef,
    SourceRef,
    TableRef,
    _KindSpec,
    _Strict,
    allow_full_replace_field,
    check_column_name,
    check_columns_leave_the_key,
    check_distinct_locations,
    check_projection,
)


class ForeignKeyExpr(_Strict):
    """The foreign key computed from left columns: one Spark SQL expression per right key column."""

    expr: str | list[str] = Field(
        description=(
            "Spark SQL computing the key from the row's own columns: one expression, or a list with one per "
            "key column of the other side, in order. Cast here when the two sides' key types differ."
        ),
        examples=["CAST(customer AS BIGINT)", ["region", "upper(sku)"]],
    )

    @property
    def expressions(self) -> list[str]:
        return [self.expr] if isinstance(self.expr, str) else list(self.expr)


KeyMapping = list[str] | ForeignKeyExpr


def check_key_mapping(value: KeyMapping, columns_of: str) -> KeyMapping:
    """A foreign key (or a stream's key mapper): at least one column of ``columns_of``, each a usable
    name, or non-empty Spark SQL expressions.

    >>> check_key_mapping(["customer_id"], "left")
    ['customer_id']
    >>> check_key_mapping([], "left")
    Traceback (most recent call last):
    ValueError: needs at least one left column
    """
    if isinstance(value, list):
        if not value:
            raise ValueError(f"needs at least one {columns_of} column")
        for column in value:
            check_column_name(column)
    elif not all(e.strip() for e in value.expressions):
        raise ValueError("expr must be non-empty Spark SQL")
    return value


def key_mapping_arity(value: KeyMapping) -> int:
    """How many right (or table) key columns a foreign key or key mapper gives values for."""
    return len(value) if isinstance(value, list) else len(value.expressions)


class ForeignKeyJoinSpec(_KindSpec):
    """KIP-213 foreign-key table-table join: many left rows reference one right row."""

    kind: Literal["foreign_key_join"] = Field(
        description="The join kind: a foreign-key join of two tables.", examples=["foreign_key_join"]
    )
    left: SourceRef = Field(
        description=(
            "The referencing table (orders, say): many left rows may reference one right row. The output "
            "has one row per left key."
        ),
        examples=[{"path": "/warehouse/orders", "key": ["order_id"]}],
    )
    right: SourceRef = Field(
        description="The referenced table (customers, say), one row per `key`.",
        examples=[{"path": "/warehouse/customers", "key": ["customer_id"]}],
    )
    foreign_key: list[str] | ForeignKeyExpr = Field(
        description=(
            "How a left row names its right row: left columns matched in order to `right.key`, or "
            "`{expr: ...}`, Spark SQL over left columns. Keys compare by exact value: cast in an "
            "expression when the types differ."
        ),
        examples=[["customer_id"], {"expr": "CAST(customer AS BIGINT)"}],
    )
    how: Literal["inner", "left"] = Field(
        default="inner",
        description=(
            "What happens to a left row whose foreign key matches no right row (or is null): `inner` leaves "
            "it out of the output, `left` keeps it with nulls for the right columns."
        ),
        examples=["left"],
    )
    columns: dict[str, str] | None = Field(
        default=None,
        description=(
            "The output's columns: output column name to a Spark SQL expression over the aliases `l` "
            "(left row) and `r` (right row). The left key is always included. Default: every left column, "
            "then every right column that is not the right key."
        ),
        examples=[{"product_name": "r.name", "total": "l.qty * r.price"}],
    )
    output: OutputRef = Field(
        description=(
            "The output Delta table, created by the first refresh and owned by one spec from then on."
        ),
        examples=[{"path": "/warehouse/orders_enriched"}],
    )
    warm_state: bool = Field(
        default=False,
        description=(
            "Keep the join's state in the JVM that runs the refresh (a Spark Connect server, a long-lived "
            "session's driver): both inputs' rows, the foreign key -> left keys index and each output row's "
            "position, in RocksDB on the JVM's local disk. A refresh then looks up the rows a change touches "
            "instead of scanning the left table and the output. The first refresh in a JVM, and the one "
            "after any write the engine did not make, builds it in the background (one scan of each table). "
            "Its memory is off the heap and bounded in bytes: all of a JVM's states share one cache of "
            "`spark.fkjoin.state.memoryBytes` (by default an eighth of the heap, 64 MiB to 1 GiB); the rest "
            "is read from disk, and a build stops with a reason when the disk would keep less than "
            "`spark.fkjoin.state.diskReserveBytes` (512 MiB) free. A durable copy is kept beside the "
            "output (`_fkjoin/state/`), so a new JVM (a restarted server, a spark-submit task) loads the "
            "state instead of building it. Pays on large tables refreshed often."
        ),
        examples=[True],
    )

    def tuning_fields(self) -> set[str]:
        """Fields that change how a refresh runs, not the output (left out of the fingerprint)."""
        return {"warm_state"}

    @field_validator("foreign_key")
    @classmethod
    def _fk_ok(cls, value: KeyMapping) -> KeyMapping:
        return check_key_mapping(value, "left")

    @field_validator("columns")
    @classmethod
    def _columns_ok(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        return check_projection(value)

    @model_validator(mode="after")
    def _consistent(self) -> ForeignKeyJoinSpec:
        arity = key_mapping_arity(self.foreign_key)
        if arity != len(self.right.key):
            raise ValueError(
                f"foreign_key has {arity} part(s) but right.key {self.right.key} has {len(self.right.key)}: "
                "give one left column (or expression) per right key column, in order"
            )
        check_columns_leave_the_key(self.columns, self.left.key, "the left key")
        check_distinct_locations(self.output, dict(self.inputs()))
        return self

    def inputs(self) -> dict[str, SourceRef]:
        """The input tables by side name, in the order they appear in results."""
        return {"left": self.left, "right": self.right}


class StreamRef(TableRef):
    """An append-only Delta table of events (a KStream); ``key`` is optional and may be null."""

    key: list[str] | None = Field(
        default=None,
        description=(
            "The columns that describe a record's key, for documentation only: a stream may repeat a key "
            "or leave it null. Optional."
        ),
        examples=[["order_id"]],
    )

    @field_validator("key")
    @classmethod
    def _key_ok(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return value
        if not value:
            raise ValueError("give at least one column, or leave key out")
        for column in value:
            check_column_name(column)
        if len(set(value)) != len(value):
            raise ValueError("lists a column twice")
        return value


DEFAULT_BROADCAST_WARN_BYTES = 100 * 1024 * 1024
DEFAULT_BROADCAST_LIMIT_BYTES = 256 * 1024 * 1024


class GlobalTableBootstrapSpec(_KindSpec):
    """KIP-99 global table: a source materialised to its high watermark, checkpointed in the output.

    Example::

        {"kind": "global_table_bootstrap",
         "source": {"path": "/w/products_cdc", "key": ["product_id"],
                    "changelog": {"op_column": "op", "order_by": ["lsn"]}},
         "output": {"path": "/w/products_global"}}
    """

    kind: Literal["global_table_bootstrap"] = Field(
        description="The join kind: a global table materialised from its source.",
        examples=["global_table_bootstrap"],
    )
    source: SourceRef = Field(
        description="The table to materialise: a keyed table, or a changelog of CDC events (`changelog`).",
        examples=[
            {
                "path": "/warehouse/products_cdc",
                "key": ["product_id"],
                "changelog": {"op_column": "op", "order_by": ["lsn"]},
            }
        ],
    )
    output: OutputRef = Field(
        description=(
            "The global table: the source as of its high watermark, with the checkpoint a "
            "`stream_table_join` checks."
        ),
        examples=[{"path": "/warehouse/products_global"}],
    )
    broadcast_warn_bytes: int = Field(
        default=DEFAULT_BROADCAST_WARN_BYTES,
        ge=0,
        description=(
            "Warn when the global table is larger than this many bytes on disk: lookup joins broadcast it. "
            "Default 104857600 (100 MiB). Changing it rebuilds nothing."
        ),
        examples=[52428800],
    )

    @model_validator(mode="after")
    def _consistent(self) -> GlobalTableBootstrapSpec:
        check_distinct_locations(self.output, dict(self.inputs()))
        return self

    def inputs(self) -> dict[str, SourceRef]:
        """The input tables by side name, in the order they appear in results."""
        return {"source": self.source}

    def tuning_fields(self) -> set[str]:
        """Tuning fields that do not change the output's content (left out of the fingerprint)."""
        return {"broadcast_warn_bytes"}


class StreamTableJoinSpec(_KindSpec):
    """KIP-99 stream-table lookup join: each new stream record joins the table as of its refresh.

    Example::

        {"kind": "stream_table_join",
         "stream": {"path": "/w/orders_stream"},
         "table": {"path": "/w/products_global", "key": ["product_id"]},
         "key_mapper": ["product_id"], "how": "left",
         "output": {"path": "/w/orders_enriched"}}
    """

    kind: Literal["stream_table_join"] = Field(
        description="The join kind: each new stream record looks its row up in a table.",
        examples=["stream_table_join"],
    )
    stream: StreamRef = Field(
        description=(
            "The append-only Delta table of events; each refresh joins the records appended since the last "
            "one. Its updates and deletes are ignored with a warning."
        ),
        examples=[{"path": "/warehouse/orders_stream"}],
    )
    table: SourceRef = Field(
        description=(
            "The table records look up, as of the refresh: a keyed table, a changelog or a global table. "
            "Its changes never change earlier output."
        ),
        examples=[{"path": "/warehouse/products_global", "key": ["product_id"]}],
    )
    key_mapper: list[str] | ForeignKeyExpr = Field(
        description=(
            "How a stream record names its table row: stream columns matched in order to `table.key`, or "
            "`{expr: ...}`, Spark SQL over stream columns. A null mapped key never matches."
        ),
        examples=[["product_id"], {"expr": "CAST(sku AS BIGINT)"}],
    )
    how: Literal["inner", "left"] = Field(
        default="inner",
        description=(
            "What happens to a record that matches no table row: `inner` drops it, `left` emits it with "
            "nulls for the table's columns."
        ),
        examples=["left"],
    )
    columns: dict[str, str] | None = Field(
        default=None,
        description=(
            "The output's columns: output column name to a Spark SQL expression over the aliases `s` "
            "(stream record) and `t` (table row). Default: every stream column, then the table's columns "
            "that are not its key."
        ),
        examples=[{"order_id": "s.order_id", "product_name": "t.name"}],
    )
    broadcast_limit_bytes: int = Field(
        default=DEFAULT_BROADCAST_LIMIT_BYTES,
        ge=0,
        description=(
            "The largest table, in bytes on disk, a full run broadcasts; above it the run uses a shuffle "
            "join and warns. Default 268435456 (256 MiB). Changing it rebuilds nothing."
        ),
        examples=[536870912],
    )
    allow_unbootstrapped_table: bool = Field(
        default=False,
        description=(
            "Join a global table whose `global_table_bootstrap` is behind its source, as it is, with a "
            "warning. Default `false`: such a refresh is refused (retryable) until the bootstrap has run."
        ),
        examples=[True],
    )
    allow_full_replace: bool = allow_full_replace_field()
    output: OutputRef = Field(
        description="The append-only output Delta table: one row per joined stream record.",
        examples=[{"path": "/warehouse/orders_enriched"}],
    )

    @field_validator("key_mapper")
    @classmethod
    def _mapper_ok(cls, value: KeyMapping) -> KeyMapping:
        return check_key_mapping(value, "stream")

    @field_validator("columns")
    @classmethod
    def _columns_ok(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        return check_projection(value)

    @model_validator(mode="after")
    def _consistent(self) -> StreamTableJoinSpec:
        arity = key_mapping_arity(self.key_mapper)
        if arity != len(self.table.key):
            raise ValueError(
                f"key_mapper has {arity} part(s) but table.key {self.table.key} has {len(self.table.key)}: "
                "give one stream column (or expression) per table key column, in order"
            )
        check_distinct_locations(self.output, dict(self.inputs()))
        return self

    def inputs(self) -> dict[str, TableRef]:
        """The input tables by side name, in the order they appear in results."""
        return {"stream": self.stream, "table": self.table}

    def tuning_fields(self) -> set[str]:
        """Tuning fields that do not change the output's content (left out of the fingerprint)."""
        return {"broadcast_limit_bytes", "allow_unbootstrapped_table", "allow_full_replace"}

"""What every spec is built from: table references (:class:`TableRef` and its keyed, output and
changelog forms), the name and projection checks every kind's fields share, and :func:`quote`.

Every kind's model (``keyed``, ``windowed``, ``multiway``) is made of these, so they sit below all of them.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..locations import is_within, location_identity, normalise_location

RESERVED_PREFIX = "_fkjoin_"
_CATALOG_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*){0,2}$")
_FORBIDDEN_IN_NAMES = re.compile(r"[`\x00-\x1f\x7f]")
#: What a list-of-columns field that also takes one column as a string accepts (for the JSON Schema).
_COLUMNS_OR_ONE = Annotated[list[str], Field(min_length=1)] | str


def check_column_name(name: str) -> str:
    """A column name that can be quoted safely in Spark SQL: no backticks, no control characters."""
    if not name or _FORBIDDEN_IN_NAMES.search(name):
        raise ValueError(f"{name!r} is not a usable column name (no backticks or control characters)")
    if name.startswith(RESERVED_PREFIX):
        raise ValueError(f"{name!r}: names starting with {RESERVED_PREFIX!r} are reserved for the engine")
    return name


def check_projection(value: dict[str, str] | None) -> dict[str, str] | None:
    """A spec's ``columns`` (output column -> Spark SQL): None, or non-empty with usable names and
    non-empty expressions (what each expression may contain is checked against the live schemas)."""
    if value is None:
        return value
    if not value:
        raise ValueError("is empty: leave it out for the default projection")
    for name, expression in value.items():
        check_column_name(name)
        if not expression.strip():
            raise ValueError(f"{name}: expression is empty")
    return value


def quote(name: str) -> str:
    """Quote a column name for Spark SQL, escaping backticks, so any name read from a schema is safe.

    >>> quote("order id"), quote("a`b")
    ('`order id`', '`a``b`')
    """
    return "`" + name.replace("`", "``") + "`"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _KindSpec(_Strict):
    """What every kind's spec has: ``adopt_existing_output`` here or on ``output`` (either spelling)."""

    adopt_existing_output: bool = Field(
        default=False,
        description=(
            "Take over an output table this engine did not create, or that another owner's spec wrote: its "
            "first refresh rebuilds it in full. Leave it out otherwise, so a mistyped output path fails "
            "instead of replacing somebody else's table. The same as `output.adopt_existing_output`."
        ),
        examples=[True],
    )
    refresh_strategy: Literal["auto", "incremental", "recompute"] = Field(
        default="auto",
        description=(
            "How an incremental refresh computes the output's net changes: `auto` (default) weighs the "
            "incremental plan against recomputing the join from the pinned inputs, from the sizes in the "
            "Delta logs, and takes the cheaper; `incremental` always joins only what changed; `recompute` "
            "always recomputes the join and commits only the rows that differ. Either way the output's "
            "change feed holds only real changes. `auto` learns each plan's cost from the output's earlier "
            "refreshes. Keyed outputs: foreign-key, table-mode windowed and N-way joins, and global tables "
            "over a keyed source; append-only outputs only append, so they have no recompute."
        ),
        examples=["recompute"],
    )

    @property
    def adopts_existing_output(self) -> bool:
        """Whether the spec takes over an output table it does not own (see :class:`OutputRef`)."""
        output = getattr(self, "output", None)
        return self.adopt_existing_output or bool(getattr(output, "adopt_existing_output", False))


def allow_full_replace_field() -> Any:
    """``allow_full_replace``, as every kind with an append-only output declares it."""
    return Field(
        default=False,
        description=(
            "Let a refresh replace the append-only output when it must be rebuilt (a changed spec, a change "
            "feed that cannot serve). Default `false`: such a refresh is refused unless the run asks for a "
            "full refresh."
        ),
        examples=[True],
    )


class TableRef(_Strict):
    """A Delta table by ``path`` (local or any Hadoop file system URI) or catalog ``name``."""

    path: str | None = Field(
        default=None,
        description=(
            "Where the Delta table lives: an absolute local path, or a URL with a table-store scheme "
            "(`s3://`, `s3a://`, `abfss://`, `gs://`, ...). Give `path` or `name`, not both. Relative paths, "
            "unknown schemes and credentials in the URL are refused."
        ),
        examples=["/warehouse/orders", "s3a://lake/warehouse/orders"],
    )
    name: str | None = Field(
        default=None,
        description=(
            "The table's catalog name, `table`, `db.table` or `catalog.db.table` (letters, digits and "
            "underscores), instead of a `path`."
        ),
        examples=["sales.orders"],
    )

    @model_validator(mode="before")
    @classmethod
    def _a_path_alone(cls, value: Any) -> Any:
        """A table given as its path alone (``output: /w/x``) is ``{path: /w/x}``, as operators take it."""
        return {"path": value} if isinstance(value, str) else value

    @field_validator("path")
    @classmethod
    def _path_ok(cls, value: str | None) -> str | None:
        """Normalised (``file:`` URIs, ``//``, ``.``, ``..``, trailing ``/``); relative paths and unknown
        schemes are refused."""
        if value is None:
            return value
        return normalise_location(value)

    @field_validator("name")
    @classmethod
    def _name_ok(cls, value: str | None) -> str | None:
        if value is not None and not _CATALOG_NAME.match(value):
            raise ValueError("must be a catalog table name like db.table (letters, digits, underscores)")
        return value

    @model_validator(mode="after")
    def _one_location(self) -> TableRef:
        if (self.path is None) == (self.name is None):
            raise ValueError("give exactly one of 'path' or 'name'")
        return self

    @property
    def location(self) -> str:
        """What error messages and results call this table."""
        return self.path if self.path is not None else f"name:{self.name}"

    @property
    def identity(self) -> str:
        """What two table references are compared by before either is opened: the location with
        scheme aliases folded, or the lower-cased catalog name."""
        return location_identity(self.path) if self.path is not None else f"name:{self.name.lower()}"


class KeyedTableRef(TableRef):
    """An input table with its primary key (one row per key, like a KTable)."""

    key: list[str] = Field(
        min_length=1,
        description=(
            "The table's primary key: the columns that identify a row (the table holds one row per key)."
        ),
        examples=[["order_id"], ["tenant_id", "order_id"]],
    )

    @field_validator("key")
    @classmethod
    def _key_ok(cls, value: list[str]) -> list[str]:
        for column in value:
            check_column_name(column)
        if len(set(value)) != len(value):
            raise ValueError("lists a column twice")
        return value


class OutputRef(TableRef):
    """The output table; created on the first run, and owned by one spec from then on.

    ``adopt_existing_output: true`` takes over a table this engine did not create (or that another spec
    owns): its first refresh rebuilds it in full. Leave it out otherwise: a mistyped path then fails
    instead of replacing somebody else's table.
    """

    adopt_existing_output: bool = Field(
        default=False,
        description=(
            "Take over this table although this engine did not create it, or another owner's spec wrote "
            "it: its first refresh rebuilds it in full. The same as the top-level `adopt_existing_output`."
        ),
        examples=[True],
    )
    owner: str | None = Field(
        default=None,
        min_length=1,
        max_length=250,
        description=(
            "Who owns the output, as free text (the Airflow operators fill in `dag_id.task_id`). A refresh "
            "by another owner is refused; the same owner editing its spec rebuilds the output. After a "
            "renamed DAG or task, set it to the old owner. Changing it rebuilds nothing."
        ),
        examples=["orders_dag.enrich_orders"],
    )

    @field_validator("owner")
    @classmethod
    def _owner_ok(cls, value: str | None) -> str | None:
        if value is not None and (value != value.strip() or _FORBIDDEN_IN_NAMES.search(value)):
            raise ValueError(
                f"{value!r} is not a usable owner: no control characters, backticks or surrounding spaces"
            )
        return value


def check_columns_leave_the_key(columns: dict[str, str] | None, key: list[str], key_is: str) -> None:
    """Refuse ``columns`` that name an output key column: the key is always in the output, so a projection
    naming it again would be a second column of the same name. ``key_is`` says what the key is made of.

    >>> check_columns_leave_the_key({"total": "l.amount"}, ["id"], "the left key")  # fine: no clash
    >>> check_columns_leave_the_key({"id": "l.id"}, ["id"], "the left key")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ValueError: columns: ['id'] are the output key (the left key) and are always included; ...
    """
    clash = sorted(set(columns or {}) & set(key))
    if clash:
        raise ValueError(
            f"columns: {clash} are the output key ({key_is}) and are always included; "
            "drop them from columns or rename them"
        )


def check_distinct_locations(output: TableRef, inputs: dict[str, TableRef]) -> None:
    """Refuse an output that is an input, sits inside one, or contains one (ValueError naming the side).

    Paths are compared normalised (``/w/orders/``, ``file:///w/orders`` and ``/w/./orders`` are one
    table); catalog names by their lower-cased name. The run-time ownership check also compares
    resolved catalog locations and Delta table ids.
    """
    out = output.identity
    for side, ref in inputs.items():
        other = ref.identity
        if out == other:
            raise ValueError(
                f"output.path: the output is the same table as {side} ({ref.location}): a refresh would "
                "overwrite its own input; write the output to a new location"
            )
        if output.path is not None and ref.path is not None:
            if is_within(out, other):
                raise ValueError(
                    f"output.path: {output.location} is inside {side} table {ref.location}: a VACUUM of the "
                    "input would delete the output's files; write the output outside every input's folder"
                )
            if is_within(other, out):
                raise ValueError(
                    f"output.path: {side} table {ref.location} is inside output {output.location}: writing "
                    "the output "
                    "there would corrupt or delete the input; write the output outside every input's folder"
                )


class ChangelogOps(_Strict):
    """The op column's value for each kind of change event (defaults: Debezium's letters).

    ``create``, ``update`` and ``log`` (a snapshot read, Debezium's ``r``) all upsert the key;
    ``delete`` removes it.
    """

    create: str = Field(
        default="c", description="The op value of an insert event; it upserts the key.", examples=["I"]
    )
    update: str = Field(
        default="u", description="The op value of an update event; it upserts the key.", examples=["U"]
    )
    delete: str = Field(
        default="d",
        description="The op value of a delete event; it removes the key. Must differ from the other ops.",
        examples=["D"],
    )
    log: str = Field(
        default="r",
        description="The op value of a snapshot read (Debezium's `r`); it upserts the key.",
        examples=["R"],
    )

    @model_validator(mode="after")
    def _distinct(self) -> ChangelogOps:
        values = [self.create, self.update, self.delete, self.log]
        if self.delete in {self.create, self.update, self.log}:
            raise ValueError(f"the delete op {self.delete!r} must differ from the create/update/log ops")
        if any(not v for v in values):
            raise ValueError("op values must be non-empty")
        return self

    @property
    def upserts(self) -> list[str]:
        return sorted({self.create, self.update, self.log})


class ChangelogFormat(_Strict):
    """How to read an append-only Delta table of CDC events as the table they describe.

    The table is the latest event per key by ``order_by`` (an offset, LSN or timestamp); a delete
    removes the key and an event that sorts before the key's current one is ignored.
    """

    op_column: str = Field(
        description="The column holding each event's operation (see `ops` for its values).",
        examples=["op"],
    )
    order_by: list[str] = Field(
        min_length=1,
        description=(
            "The columns that order a key's events (an offset, LSN or timestamp); the latest event per key "
            "is the row, and an event that sorts before the key's current one is ignored. One column may be "
            "given as a string."
        ),
        examples=[["lsn"], ["ts_ms", "offset"]],
    )
    ops: ChangelogOps = Field(
        default_factory=ChangelogOps,
        description="The op column's value for each kind of event. Default: Debezium's `c`, `u`, `d`, `r`.",
        examples=[{"create": "I", "update": "U", "delete": "D", "log": "R"}],
    )
    columns: list[str] | None = Field(
        default=None,
        description=(
            "The payload columns the described table has. Default: every column but the key, op and order "
            "columns."
        ),
        examples=[["name", "price"]],
    )

    @field_validator("order_by", mode="before", json_schema_input_type=_COLUMNS_OR_ONE)
    @classmethod
    def _order_list(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @field_validator("op_column")
    @classmethod
    def _op_ok(cls, value: str) -> str:
        return check_column_name(value)

    @field_validator("order_by", "columns")
    @classmethod
    def _names_ok(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return value
        for column in value:
            check_column_name(column)
        if len(set(value)) != len(value):
            raise ValueError("lists a column twice")
        return value


class SourceRef(KeyedTableRef):
    """A keyed input: a Delta table with one row per key, or (with ``changelog``) a CDC event log."""

    changelog: ChangelogFormat | None = Field(
        default=None,
        description=(
            "Read this table as a log of CDC events (as Debezium writes them) and join the table they "
            "describe: the latest event per key. Leave it out for a table with one row per key."
        ),
        examples=[{"op_column": "op", "order_by": ["lsn"]}],
    )

    @model_validator(mode="after")
    def _changelog_consistent(self) -> SourceRef:
        log = self.changelog
        if log is None:
            return self
        special = {log.op_column, *log.order_by}
        if special & set(self.key):
            raise ValueError(
                f"changelog: key columns {sorted(special & set(self.key))} cannot also be the op or "
                "order column"
            )
        if log.op_column in log.order_by:
            raise ValueError(f"changelog: op_column {log.op_column!r} is also in order_by")
        if log.columns is not None:
            bad = sorted(set(log.columns) & (special | set(self.key)))
            if bad:
                raise ValueError(
                    f"changelog.columns: {bad} are key, op or order columns; list only payload columns"
                )
        return self

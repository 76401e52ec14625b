"""Specs: a dict, YAML or JSON file turned into typed, validated objects.

Every problem raises :class:`SpecError` naming the field path and what to do, before any data is read.

Example::

    spec = load_spec({
        "kind": "foreign_key_join",
        "left": {"path": "/warehouse/orders", "key": ["order_id"]},
        "right": {"path": "/warehouse/customers", "key": ["customer_id"]},
        "foreign_key": ["customer_id"],
        "output": {"path": "/warehouse/orders_enriched"},
    })
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from .errors import SpecError
from .joinery import from_joinery, is_joinery
from .locations import is_within, location_identity, normalise_location

RESERVED_PREFIX = "_fkjoin_"
#: The column a stream-mode windowed join adds to its output: the pair's later event time.
EVENT_TIME = "event_time"
_CATALOG_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*){0,2}$")
_FORBIDDEN_IN_NAMES = re.compile(r"[`\x00-\x1f\x7f]")


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

    adopt_existing_output: bool = False

    @property
    def adopts_existing_output(self) -> bool:
        """Whether the spec takes over an output table it does not own (see :class:`OutputRef`)."""
        output = getattr(self, "output", None)
        return self.adopt_existing_output or bool(getattr(output, "adopt_existing_output", False))


class TableRef(_Strict):
    """A Delta table by ``path`` (local or any Hadoop file system URI) or catalog ``name``."""

    path: str | None = None
    name: str | None = None

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

    key: list[str] = Field(min_length=1)

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

    adopt_existing_output: bool = False
    #: Who owns the output (free text, e.g. ``dag_id.task_id``; the operators fill it from the task). A
    #: refresh by another owner is refused; the same owner editing its spec rebuilds. Not part of the
    #: spec's fingerprint: naming the owner changes no row.
    owner: str | None = Field(default=None, min_length=1, max_length=250)

    @field_validator("owner")
    @classmethod
    def _owner_ok(cls, value: str | None) -> str | None:
        if value is not None and (value != value.strip() or _FORBIDDEN_IN_NAMES.search(value)):
            raise ValueError(
                f"{value!r} is not a usable owner: no control characters, backticks or surrounding spaces"
            )
        return value


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


class ForeignKeyExpr(_Strict):
    """The foreign key computed from left columns: one Spark SQL expression per right key column."""

    expr: str | list[str]

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

    kind: Literal["foreign_key_join"]
    left: SourceRef
    right: SourceRef
    foreign_key: list[str] | ForeignKeyExpr
    how: Literal["inner", "left"] = "inner"
    columns: dict[str, str] | None = None
    output: OutputRef

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
        if self.columns:
            clash = sorted(set(self.columns) & set(self.left.key))
            if clash:
                raise ValueError(
                    f"columns: {clash} are the output key (the left key) and are always included; "
                    "drop them from columns or rename them"
                )
        check_distinct_locations(self.output, dict(self.inputs()))
        return self

    def inputs(self) -> dict[str, SourceRef]:
        """The input tables by side name, in the order they appear in results."""
        return {"left": self.left, "right": self.right}


class ChangelogOps(_Strict):
    """The op column's value for each kind of change event (defaults: Debezium's letters).

    ``create``, ``update`` and ``log`` (a snapshot read, Debezium's ``r``) all upsert the key;
    ``delete`` removes it.
    """

    create: str = "c"
    update: str = "u"
    delete: str = "d"
    log: str = "r"

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

    op_column: str
    order_by: list[str] = Field(min_length=1)
    ops: ChangelogOps = Field(default_factory=ChangelogOps)
    columns: list[str] | None = None

    @field_validator("order_by", mode="before")
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

    changelog: ChangelogFormat | None = None

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


class StreamRef(TableRef):
    """An append-only Delta table of events (a KStream); ``key`` is optional and may be null."""

    key: list[str] | None = None

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

    kind: Literal["global_table_bootstrap"]
    source: SourceRef
    output: OutputRef
    broadcast_warn_bytes: int = Field(default=DEFAULT_BROADCAST_WARN_BYTES, ge=0)

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

    kind: Literal["stream_table_join"]
    stream: StreamRef
    table: SourceRef
    key_mapper: list[str] | ForeignKeyExpr
    how: Literal["inner", "left"] = "inner"
    columns: dict[str, str] | None = None
    broadcast_limit_bytes: int = Field(default=DEFAULT_BROADCAST_LIMIT_BYTES, ge=0)
    allow_unbootstrapped_table: bool = False
    allow_full_replace: bool = False
    output: OutputRef

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


_DURATION = re.compile(r"^\s*(-?\d+)\s*(ms|s|m|h|d)\s*$")
_DURATION_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration(value: Any) -> int:
    """A duration in milliseconds: an integer is ms; a string is ``<n><unit>`` with unit ms, s, m, h or d.

    >>> parse_duration(1500), parse_duration("10s"), parse_duration("-7d")
    (1500, 10000, -604800000)
    """
    if isinstance(value, bool):
        raise ValueError("is a boolean; give milliseconds (an integer) or a string like '10s', '5m', '2h'")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        found = _DURATION.match(value)
        if found:
            return int(found.group(1)) * _DURATION_MS[found.group(2)]
    raise ValueError(
        f"{value!r} is not a duration; give milliseconds (an integer) or a string like '250ms', '10s', "
        "'5m', '2h', '7d'"
    )


Duration = Annotated[int, BeforeValidator(parse_duration)]


class JoinWindow(_Strict):
    """Kafka's ``JoinWindows``: a right row joins a left row at ``t`` when its time is in
    ``[t - before, t + after]``; ``grace`` is how long after a window ends late rows are still awaited.

    ``before`` or ``after`` may be negative (a window that does not contain ``t``), not both: their sum
    is the window's length and must be at least 0.
    """

    before: Duration
    after: Duration
    grace: Duration = 0

    @model_validator(mode="after")
    def _sane(self) -> JoinWindow:
        if self.before + self.after < 0:
            raise ValueError(
                f"before ({self.before} ms) + after ({self.after} ms) is negative: the window is inverted "
                "and can never match; make their sum 0 or more"
            )
        if self.grace < 0:
            raise ValueError(f"grace is {self.grace} ms; it must be 0 or more")
        return self

    @property
    def retention(self) -> int:
        """How long a side keeps a row for matching after the side's observed time (Kafka's window store
        retention): ``before + after + grace``."""
        return self.before + self.after + self.grace


class EventStreamRef(TableRef):
    """An append-only Delta table of events for a stream-mode windowed join: the join ``key`` (rows with a
    null key part never join), the event ``time`` column (TIMESTAMP, DATE or epoch-ms BIGINT) and
    ``order_by``, the columns that order rows written in one Delta commit (an offset, say)."""

    key: list[str] = Field(min_length=1)
    time: str
    order_by: list[str] = Field(default_factory=list)

    @field_validator("order_by", mode="before")
    @classmethod
    def _order_list(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @field_validator("key", "order_by")
    @classmethod
    def _names_ok(cls, value: list[str]) -> list[str]:
        for column in value:
            check_column_name(column)
        if len(set(value)) != len(value):
            raise ValueError("lists a column twice")
        return value

    @field_validator("time")
    @classmethod
    def _time_ok(cls, value: str) -> str:
        return check_column_name(value)


class WindowedJoinSpec(_KindSpec):
    """A windowed join (``docs/kinds/windowed-join.md``). ``mode: stream`` is Kafka's
    KStream-KStream join with ``JoinWindows`` over two append-only event tables; its output is
    append-only, one row per joined pair or unmatched row, with an ``event_time`` column.

    Example::

        {"kind": "windowed_join", "mode": "stream",
         "left": {"path": "/w/impressions", "key": ["ad_id"], "time": "shown_at", "order_by": ["offset"]},
         "right": {"path": "/w/clicks", "key": ["ad_id"], "time": "clicked_at"},
         "window": {"before": "1h", "after": "1h", "grace": "10m"}, "how": "left",
         "output": {"path": "/w/ad_clicks"}}
    """

    kind: Literal["windowed_join"]
    mode: Literal["stream"]
    left: EventStreamRef
    right: EventStreamRef
    window: JoinWindow
    how: Literal["inner", "left", "outer"] = "inner"
    late_unmatched: Literal["respect_grace", "emit_immediately"] = "respect_grace"
    columns: dict[str, str] | None = None
    allow_full_replace: bool = False
    #: Run a join of one table with itself (same key, time and order_by, inner) as a ``self_join``: one
    #: read and one shuffle instead of two, identical output. ``false`` keeps the two-sided join.
    optimize: bool = True
    output: OutputRef

    @field_validator("columns")
    @classmethod
    def _columns_ok(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        return check_event_projection(value)

    @model_validator(mode="after")
    def _consistent(self) -> WindowedJoinSpec:
        if len(self.left.key) != len(self.right.key):
            raise ValueError(
                f"left.key {self.left.key} and right.key {self.right.key} have different lengths: the sides "
                "join on their keys, part by part"
            )
        check_distinct_locations(self.output, dict(self.inputs()))
        return self

    @property
    def same_table(self) -> bool:
        """Whether both sides are one table read the same way (Kafka's ``stream.join(stream)``): each row
        is then processed as a left row and then as a right row."""
        return not self.self_join_obstacles(sides_only=True)

    def self_join_obstacles(self, *, sides_only: bool = False) -> list[str]:
        """Why this join does not run as a ``self_join`` (empty: it does): what makes the two sides differ,
        and unless ``sides_only``, a join other than inner or ``optimize: false``.

        >>> spec.self_join_obstacles()
        ["right.time 'clicked_at' differs from left.time 'shown_at'"]
        """
        left, right = self.left, self.right
        found = []
        if left.identity != right.identity:
            found.append(f"left ({left.location}) and right ({right.location}) are different tables")
        for field in ("key", "time", "order_by"):
            ours, theirs = getattr(left, field), getattr(right, field)
            if ours != theirs:
                found.append(f"right.{field} {theirs!r} differs from left.{field} {ours!r}")
        if sides_only:
            return found
        if self.how != "inner":
            found.append(f"how is {self.how!r}; a self_join is inner only (keep this as a windowed_join)")
        if not self.optimize:
            found.append("optimize: false asks for the two-sided join; remove it")
        return found

    @property
    def runs_as_self_join(self) -> bool:
        """Whether this join runs as a ``self_join`` (KIP-862's rewrite): one table on both sides, read the
        same way, an inner join, and ``optimize`` left on. Anything that could make the sides differ keeps
        the two-sided join."""
        return not self.self_join_obstacles()

    def inputs(self) -> dict[str, TableRef]:
        """The input tables by side name, in the order they appear in results."""
        return {"left": self.left, "right": self.right}

    def tuning_fields(self) -> set[str]:
        """Tuning fields that do not change the output's content (left out of the fingerprint): the
        self-join rewrite writes the same rows, so turning it on or off does not rebuild the output."""
        return {"allow_full_replace", "optimize"}


def check_event_projection(value: dict[str, str] | None) -> dict[str, str] | None:
    """A stream join's ``columns``: checked like every projection, and never naming ``event_time``."""
    value = check_projection(value)
    if value is not None and EVENT_TIME in value:
        raise ValueError(
            f"{EVENT_TIME}: the output always has an {EVENT_TIME!r} column (the pair's later time); "
            "name this column differently"
        )
    return value


class SelfJoinSpec(_KindSpec):
    """A stream joined with itself inside a time window, read once (Kafka's KIP-862 self-join;
    ``docs/kinds/self-join.md``, "Contract"). Its output equals, row for row, the stream-mode
    ``windowed_join`` with ``left = right = input`` and ``how: inner``. ``columns`` is required: ``l`` and
    ``r`` are a pair's left and right rows as that join defines them (a right row's time is within
    ``[l.t - before, l.t + after]``; with a symmetric window every pair appears both ways), and both
    have the input's columns, so the output's names must be chosen.

    Example (two withdrawals on one account within ten minutes)::

        {"kind": "self_join",
         "input": {"path": "/w/atm_txns", "key": ["account_id"], "time": "txn_ts", "order_by": ["offset"]},
         "window": {"before": "10m", "after": "10m", "grace": "1m"},
         "columns": {"account_id": "l.account_id", "atm": "l.atm", "paired_atm": "r.atm"},
         "output": {"path": "/w/atm_pairs"}}
    """

    kind: Literal["self_join"]
    input: EventStreamRef
    window: JoinWindow
    how: str = "inner"
    columns: dict[str, str] | None = Field(default=None, validate_default=True)
    allow_full_replace: bool = False
    output: OutputRef

    @field_validator("how")
    @classmethod
    def _inner_only(cls, value: str) -> str:
        if value != "inner":
            raise ValueError(
                f"a self_join is an inner join, not {value!r}; for a {value} join of a stream with itself "
                "use kind: windowed_join, mode: stream, with the same table as left and right"
            )
        return value

    @field_validator("columns", mode="before")
    @classmethod
    def _columns_given(cls, value: Any) -> Any:
        if value is None:
            raise ValueError(
                "is required: both rows of a pair have the input's columns, so name the output's, e.g. "
                "{card_id: l.card_id, txn_id: l.txn_id, paired_txn_id: r.txn_id}"
            )
        return value

    @field_validator("columns")
    @classmethod
    def _columns_ok(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        return check_event_projection(value)

    @model_validator(mode="after")
    def _consistent(self) -> SelfJoinSpec:
        check_distinct_locations(self.output, dict(self.inputs()))
        return self

    def as_windowed_join(self) -> WindowedJoinSpec:
        """The join this one equals: ``windowed_join`` (stream, inner) with the input on both sides."""
        fields = self.model_dump(exclude={"kind", "input", "how"})
        return WindowedJoinSpec.model_validate(
            {
                **fields,
                "kind": "windowed_join",
                "mode": "stream",
                "left": self.input.model_dump(),
                "right": self.input.model_dump(),
                "how": "inner",
            }
        )

    def inputs(self) -> dict[str, TableRef]:
        """The input table, under the name results and progress use."""
        return {"input": self.input}

    def tuning_fields(self) -> set[str]:
        """Tuning fields that do not change the output's content (left out of the fingerprint)."""
        return {"allow_full_replace"}


class TableWindow(_Strict):
    """The window columns of a windowed table (one row per key and window, as a windowed aggregation
    writes them), and for the right side an ``offset`` that shifts its windows before matching
    (``-7d``: a left window joins the right window a week earlier)."""

    start: str
    end: str
    offset: Duration = 0

    @field_validator("start", "end")
    @classmethod
    def _names_ok(cls, value: str) -> str:
        return check_column_name(value)

    @model_validator(mode="after")
    def _distinct(self) -> TableWindow:
        if self.start == self.end:
            raise ValueError("start and end must be different columns")
        return self


class WindowedTableRef(SourceRef):
    """A table side of a table-mode windowed join: keyed (``key``), optionally windowed (``window``)."""

    window: TableWindow | None = None

    @model_validator(mode="after")
    def _window_not_in_key(self) -> WindowedTableRef:
        if self.window is not None:
            both = sorted({self.window.start, self.window.end} & set(self.key))
            if both:
                raise ValueError(
                    f"window columns {both} are also in key; the key is the part without the window"
                )
        return self

    @property
    def full_key(self) -> list[str]:
        """The table's primary key: ``key``, then the window's start and end."""
        return list(self.key) + ([self.window.start, self.window.end] if self.window else [])


class WindowedTableJoinSpec(_KindSpec):
    """``windowed_join`` with ``mode: table``: Kafka's KTable-KTable join of two keyed tables, windowed
    tables matched on the same (or a shifted) window, or a windowed table enriched from a plain one.

    Example::

        {"kind": "windowed_join", "mode": "table",
         "left": {"path": "/w/errors_per_min", "key": ["service"], "window": {"start": "ws", "end": "we"}},
         "right": {"path": "/w/errors_per_min", "key": ["service"],
                   "window": {"start": "ws", "end": "we", "offset": "-7d"}},
         "how": "left", "columns": {"errors_now": "l.errors", "errors_week_ago": "r.errors"},
         "output": {"path": "/w/errors_vs_last_week"}}
    """

    kind: Literal["windowed_join"]
    mode: Literal["table"]
    left: WindowedTableRef
    right: WindowedTableRef
    how: Literal["inner", "left", "outer"] = "inner"
    columns: dict[str, str] | None = None
    output: OutputRef

    @field_validator("columns")
    @classmethod
    def _columns_ok(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        return check_projection(value)

    @model_validator(mode="after")
    def _consistent(self) -> WindowedTableJoinSpec:
        if len(self.left.key) != len(self.right.key):
            raise ValueError(
                f"left.key {self.left.key} and right.key {self.right.key} have different lengths: the sides "
                "join on their keys, part by part"
            )
        if self.left.window is not None and self.left.window.offset:
            raise ValueError("left.window.offset: only the right side's windows shift; move the offset there")
        if self.left.window is None and self.right.window is not None:
            raise ValueError(
                "right.window: a plain left table cannot join a windowed right table; put the windowed table "
                "on the left (it is then enriched from the plain one), or window both sides"
            )
        if self.enrichment and self.how == "outer":
            raise ValueError(
                "how: a windowed table enriched from a plain table is a foreign-key join: inner or left only"
            )
        if self.columns:
            clash = sorted(set(self.columns) & set(self.left.full_key))
            if clash:
                raise ValueError(
                    f"columns: {clash} are the output key (the left key and window) and are always included; "
                    "drop them from columns or rename them"
                )
        check_distinct_locations(self.output, dict(self.inputs()))
        return self

    @property
    def enrichment(self) -> bool:
        """A windowed left table joined to a plain right table on the key part (a foreign-key join)."""
        return self.left.window is not None and self.right.window is None

    def inputs(self) -> dict[str, SourceRef]:
        """The input tables by side name, in the order they appear in results."""
        return {"left": self.left, "right": self.right}


_INPUT_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
DEFAULT_MAX_ROWS_PER_JOIN_KEY = 1_000_000


class FieldAlias(_Strict):
    """Joinery's rename of one input field: ``{from: business_id, to: biz_id}``."""

    from_: str = Field(alias="from")
    to: str

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @field_validator("from_", "to")
    @classmethod
    def _names_ok(cls, value: str) -> str:
        return check_column_name(value)


class MultiWayInput(_Strict):
    """One input of a ``multiway_join``: a keyed table (``path``, or catalog ``table``) or a changelog
    source, named for results and progress, with the columns it joins on and how its fields are shown.

    ``join_keys`` match the other inputs' by position. Every field is shown except ``exclude_fields``
    (named before renaming), renamed by ``aliases``; ``key`` is the primary key (one row per key).
    """

    name: str
    path: str | None = None
    table: str | None = None
    key: list[str] = Field(min_length=1)
    changelog: ChangelogFormat | None = None
    join_keys: list[str] = Field(min_length=1)
    exclude_fields: list[str] = Field(default_factory=list)
    aliases: list[FieldAlias] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _input_name_ok(cls, value: str) -> str:
        if not _INPUT_NAME.match(value):
            raise ValueError("must be an identifier (letters, digits, underscores; at most 64) like 'review'")
        return value

    @field_validator("key", "join_keys", "exclude_fields", mode="before")
    @classmethod
    def _as_list(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @field_validator("key", "join_keys", "exclude_fields")
    @classmethod
    def _columns_ok(cls, value: list[str]) -> list[str]:
        for column in value:
            check_column_name(column)
        if len(set(value)) != len(value):
            raise ValueError("lists a column twice")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> MultiWayInput:
        sources = [a.from_ for a in self.aliases]
        if len(set(sources)) != len(sources):
            raise ValueError(f"aliases: a field is renamed twice ({sources})")
        excluded_and_renamed = sorted(set(sources) & set(self.exclude_fields))
        if excluded_and_renamed:
            raise ValueError(f"aliases: {excluded_and_renamed} are also in exclude_fields; keep one")
        self.source_ref()  # the table reference's own checks (one location, changelog columns)
        return self

    def source_ref(self) -> SourceRef:
        """The input as the table reference every kind reads."""
        fields: dict[str, Any] = {"key": list(self.key)}
        if self.path is not None:
            fields["path"] = self.path
        if self.table is not None:
            fields["name"] = self.table
        if self.changelog is not None:
            fields["changelog"] = self.changelog
        return SourceRef.model_validate(fields)

    def shown_name(self, column: str) -> str:
        """The output name of one of this input's fields (its alias, or itself)."""
        for alias in self.aliases:
            if alias.from_ == column:
                return alias.to
        return column


class MultiWayOutputRef(OutputRef):
    """A ``multiway_join``'s output, with ``pkey``: the output columns that identify a row (checked on
    every refresh unless the spec says ``enforce_pkey: false``)."""

    pkey: list[str] | None = None

    @field_validator("pkey", mode="before")
    @classmethod
    def _pkey_list(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @field_validator("pkey")
    @classmethod
    def _pkey_ok(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return value
        if not value:
            raise ValueError("give at least one output column, or leave pkey out")
        for column in value:
            check_column_name(column)
        if len(set(value)) != len(value):
            raise ValueError("lists a column twice")
        return value


class MultiWayJoinSpec(_KindSpec):
    """Yelp Joinery's N-way un-windowed inner join (``docs/kinds/multiway-join.md``): 2 to 8 keyed
    inputs joined on their ``join_keys`` (by position), 1:1, 1:N or N:M. Each output row is identified by
    its inputs' primary keys, kept in hidden ``_fkjoin_id__<input>__<column>`` columns (the merge key).

    Example (a business's reviews, with its owner)::

        {"kind": "multiway_join",
         "inputs": [
             {"name": "review", "path": "/w/reviews", "key": ["review_id"], "join_keys": ["biz_id"],
              "exclude_fields": ["content"]},
             {"name": "business", "path": "/w/business", "key": ["business_id"],
              "join_keys": ["business_id"], "aliases": [{"from": "business_id", "to": "biz_id"}]}],
         "output": {"path": "/w/business_reviews", "pkey": ["review_id"]}}
    """

    kind: Literal["multiway_join"]
    inputs_: list[MultiWayInput] = Field(alias="inputs", min_length=2, max_length=8)
    output: MultiWayOutputRef
    enforce_pkey: bool = True
    max_rows_per_join_key: int = Field(default=DEFAULT_MAX_ROWS_PER_JOIN_KEY, ge=1)
    #: Where the spec came from: ``native``, or ``joinery`` (converted from Joinery's own YAML).
    format: Literal["native", "joinery"] = "native"
    #: What converting the spec noticed (a Joinery ``pkey`` resolved through an alias); results repeat them.
    notes: list[str] = Field(default_factory=list)
    #: Joinery's descriptive output fields (``namespace``, ``source``, ``doc``), kept for reference.
    description: dict[str, str] = Field(default_factory=dict)

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @model_validator(mode="after")
    def _consistent(self) -> MultiWayJoinSpec:
        names = [i.name for i in self.inputs_]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"inputs: names {repeated} are used twice; give each input its own name")
        arity = len(self.inputs_[0].join_keys)
        for index, item in enumerate(self.inputs_):
            if len(item.join_keys) != arity:
                raise ValueError(
                    f"inputs[{index}].join_keys: {item.name!r} joins on {len(item.join_keys)} column(s) but "
                    f"{self.inputs_[0].name!r} on {arity}; join keys match by position, so give each input "
                    "the same number"
                )
        refs = self.inputs()
        identities: dict[str, str] = {}
        for name, ref in refs.items():
            if ref.identity in identities:
                raise ValueError(
                    f"inputs: {name!r} and {identities[ref.identity]!r} are the same table ({ref.location}); "
                    "an N-way join of a table with itself is not supported"
                )
            identities[ref.identity] = name
        check_distinct_locations(self.output, dict(refs))
        return self

    def inputs(self) -> dict[str, SourceRef]:
        """The input tables by name, in spec order (the order of the telescoping rule)."""
        return {item.name: item.source_ref() for item in self.inputs_}

    def tuning_fields(self) -> set[str]:
        """Fields that do not change the output's rows (left out of the fingerprint)."""
        return {"enforce_pkey", "max_rows_per_join_key", "format", "notes", "description"}


WindowedJoinModes = Annotated[WindowedJoinSpec | WindowedTableJoinSpec, Field(discriminator="mode")]


AnySpec = (
    ForeignKeyJoinSpec
    | GlobalTableBootstrapSpec
    | StreamTableJoinSpec
    | WindowedJoinSpec
    | WindowedTableJoinSpec
    | SelfJoinSpec
    | MultiWayJoinSpec
)
Spec = Annotated[
    ForeignKeyJoinSpec
    | GlobalTableBootstrapSpec
    | StreamTableJoinSpec
    | WindowedJoinModes
    | SelfJoinSpec
    | MultiWayJoinSpec,
    Field(discriminator="kind"),
]
_SPEC_ADAPTER: TypeAdapter[AnySpec] = TypeAdapter(Spec)
#: The spec kinds' names, for messages (the registry of their algorithms is ``kinds.KINDS``).
KIND_NAMES = (
    "foreign_key_join",
    "global_table_bootstrap",
    "stream_table_join",
    "windowed_join",
    "self_join",
    "multiway_join",
)

#: How a refresh may write its output (``run_spec(write_path=...)``, ``fkjoin run --write-path``, the
#: operators' ``write_path``): ``auto`` commits net changes without MERGE where the engine can prove them
#: right (:mod:`..write.net_changes`), ``merge`` always uses Delta's MERGE.
WRITE_PATHS = ("auto", "merge")


def _field_path(loc: tuple[Any, ...]) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif item in KIND_NAMES or item in {
            "list[str]",
            "ForeignKeyExpr",
            "ChangelogFormat",
            "stream",
            "table",
        }:
            continue
        else:
            parts.append(("." if parts else "") + str(item))
    return "".join(parts) or "spec"


def _format_errors(error: ValidationError) -> str:
    lines = []
    seen: set[str] = set()
    for item in error.errors():
        path = _field_path(tuple(item["loc"]))
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "missing":
            message = "is required"
        elif item["type"] == "extra_forbidden":
            message = "is not a known field (check the spelling)"
        elif item["type"] == "union_tag_invalid" and "mode" in str(item.get("ctx", {}).get("discriminator")):
            path = "mode"
            message = f"unknown mode {item.get('input', {}).get('mode')!r}; expected stream or table"
        elif item["type"] == "union_tag_not_found" and "mode" in str(
            item.get("ctx", {}).get("discriminator")
        ):
            path, message = "mode", "is required: stream or table"
        elif item["type"] == "union_tag_invalid":
            path = "kind"
            message = (
                f"unknown kind {item.get('input', {}).get('kind')!r}; expected one of {', '.join(KIND_NAMES)}"
            )
        elif item["type"] == "union_tag_not_found":
            path, message = "kind", f"is required; one of {', '.join(KIND_NAMES)}"
        names_a_field = re.match(r"^[A-Za-z_][\w.\[\]]*: ", message) is not None
        line = message if path == "spec" and names_a_field else f"{path}: {message}"
        if line not in seen:
            seen.add(line)
            lines.append(line)
    return "invalid spec: " + "; ".join(lines)


def read_spec_file(path: str | Path) -> dict[str, Any]:
    """Read a YAML or JSON spec file into a dict (JSON is YAML, so one parser serves both)."""
    file = Path(path)
    if not file.is_file():
        raise SpecError(f"spec file {str(file)!r} does not exist")
    try:
        data = yaml.safe_load(file.read_text())
    except yaml.YAMLError as exc:
        raise SpecError(f"spec file {str(file)!r} is not valid YAML/JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise SpecError(f"spec file {str(file)!r} must hold a mapping with a 'kind'")
    return data


def load_spec(spec: AnySpec | dict[str, Any] | str | Path) -> AnySpec:
    """Turn a dict, a spec object, or a path to a YAML/JSON file into a validated spec."""
    if isinstance(spec, BaseModel):
        return spec
    data = read_spec_file(spec) if isinstance(spec, str | Path) else spec
    if not isinstance(data, dict):
        raise SpecError(f"a spec must be a mapping, not {type(data).__name__}")
    if is_joinery(data):
        data = from_joinery(data)
    try:
        return _SPEC_ADAPTER.validate_python(data)
    except ValidationError as exc:
        raise SpecError(_format_errors(exc)) from None


def as_self_join(spec: AnySpec | dict[str, Any] | str | Path) -> SelfJoinSpec:
    """The ``self_join`` a spec runs as: a ``self_join`` as it is, or a stream-mode ``windowed_join`` of one
    table with itself rewritten (KIP-862's rewrite, done where a DAG asks for it). A SpecError lists every
    reason the rewrite does not apply, so a DAG author sees what makes the two sides differ.

    >>> txns = {"path": "/w/card_txns", "key": ["card_id"], "time": "txn_at"}
    >>> as_self_join({"kind": "windowed_join", "mode": "stream", "left": txns, "right": txns,
    ...               "window": {"before": "10m", "after": "10m"}, "output": {"path": "/w/pairs"},
    ...               "columns": {"txn_id": "l.txn_id", "paired_txn_id": "r.txn_id"}}).kind
    'self_join'
    """
    loaded = load_spec(spec)
    if isinstance(loaded, SelfJoinSpec):
        return loaded
    if not isinstance(loaded, WindowedJoinSpec):
        mode = getattr(loaded, "mode", None)
        shown = f"{loaded.kind} (mode {mode})" if mode else loaded.kind
        raise SpecError(
            f"kind: a {shown} spec cannot run as a self_join; give a self_join spec, or a windowed_join "
            "with mode: stream and the same table as left and right"
        )
    reasons = loaded.self_join_obstacles()
    if reasons:
        raise SpecError("windowed_join cannot run as a self_join: " + "; ".join(reasons))
    fields = loaded.model_dump(exclude={"kind", "mode", "left", "right", "how", "late_unmatched", "optimize"})
    rewritten = load_spec({**fields, "kind": "self_join", "input": loaded.left.model_dump()})
    assert isinstance(rewritten, SelfJoinSpec)
    return rewritten


def spec_expressions(spec: BaseModel) -> dict[str, str]:
    """Every Spark SQL expression in a spec by field path: what expression checks and errors name.

    >>> spec_expressions(load_spec({..., "foreign_key": {"expr": "CAST(c AS BIGINT)"},
    ...                             "columns": {"n": "r.name"}}))
    {'foreign_key.expr[0]': 'CAST(c AS BIGINT)', 'columns.n': 'r.name'}
    """
    found: dict[str, str] = {}
    for field in ("foreign_key", "key_mapper"):
        value = getattr(spec, field, None)
        if isinstance(value, ForeignKeyExpr):
            found.update({f"{field}.expr[{i}]": text for i, text in enumerate(value.expressions)})
    for name, text in (getattr(spec, "columns", None) or {}).items():
        found[f"columns.{name}"] = text
    return found


def _fingerprinted(spec: BaseModel) -> dict[str, Any]:
    """The part of a spec that decides the output's content (see :func:`spec_fingerprint`)."""
    excluded: dict[str, Any] = dict.fromkeys(
        spec.tuning_fields() if hasattr(spec, "tuning_fields") else set(), True
    )
    excluded["adopt_existing_output"] = True
    if hasattr(spec, "output"):
        excluded["output"] = {"adopt_existing_output", "owner"}
    return spec.model_dump(mode="json", exclude=excluded)


def spec_fingerprint(spec: BaseModel) -> str:
    """A short stable hash of everything in a spec that changes the output's content.

    Stored in each output commit: a different fingerprint on the next run means a full rebuild.
    Tuning fields a spec lists in ``tuning_fields()`` (a size limit, say) are left out, so changing
    them does not rebuild the output; so are ``adopt_existing_output`` and the output's ``owner``.
    """
    canonical = json.dumps(_fingerprinted(spec), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def spec_field_hashes(spec: BaseModel) -> dict[str, str]:
    """A short hash of each fingerprinted field, by its path (``how``, ``columns.product_name``): stored
    beside the fingerprint, so a rebuild's reason names what changed without the commit holding any
    expression or value.

    >>> spec_field_hashes(fk_spec)
    {'columns.product_name': '1f2e3d4c', 'foreign_key': '9a8b7c6d', 'how': '5e4f3a2b', ...}
    """
    flat: dict[str, str] = {}

    def walk(value: Any, path: str) -> None:
        if isinstance(value, dict) and value:
            for key, item in value.items():
                walk(item, f"{path}.{key}" if path else str(key))
            return
        text = json.dumps(value, sort_keys=True, separators=(",", ":"))
        flat[path] = hashlib.sha256(text.encode()).hexdigest()[:8]

    walk(_fingerprinted(spec), "")
    return flat

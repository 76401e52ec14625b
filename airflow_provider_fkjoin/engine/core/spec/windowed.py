"""The kinds that match rows inside a time window: ``windowed_join`` (``mode: stream`` and
``mode: table``) and ``self_join``, with what they share: durations, :class:`JoinWindow`, event-stream and
windowed-table references, and the ``event_time`` column a stream-mode join adds.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator

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

#: The column a stream-mode windowed join adds to its output: the pair's later event time.
EVENT_TIME = "event_time"


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


#: A duration as a spec writes it: milliseconds, or a number and a unit (the JSON Schema says both).
Duration = Annotated[
    int,
    BeforeValidator(
        parse_duration,
        json_schema_input_type=int | Annotated[str, Field(pattern=r"^\s*-?\d+\s*(ms|s|m|h|d)\s*$")],
    ),
]


class JoinWindow(_Strict):
    """Kafka's ``JoinWindows``: a right row joins a left row at ``t`` when its time is in
    ``[t - before, t + after]``; ``grace`` is how long after a window ends late rows are still awaited.

    ``before`` or ``after`` may be negative (a window that does not contain ``t``), not both: their sum
    is the window's length and must be at least 0.
    """

    before: Duration = Field(
        description=(
            "How far before a left row's time a right row may be and still join it: a duration. May be "
            "negative if `after` makes up for it (`before + after` is at least 0)."
        ),
        examples=["1h", 3600000],
    )
    after: Duration = Field(
        description="How far after a left row's time a right row may be and still join it: a duration.",
        examples=["1h", "15m"],
    )
    grace: Duration = Field(
        default=0,
        description=(
            "How long after a window ends late rows are still awaited (and, for a left or outer join, "
            "before a row is emitted unmatched): a duration, at least 0. Default 0."
        ),
        examples=["10m"],
    )

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


def _window_field() -> Any:
    """``window``, as the stream-mode join and the self-join declare it."""
    return Field(
        description=(
            "The time window: a right row joins a left row at time `t` when its time is within "
            "`[t - before, t + after]`."
        ),
        examples=[{"before": "1h", "after": "1h", "grace": "10m"}],
    )


class EventStreamRef(TableRef):
    """An append-only Delta table of events for a stream-mode windowed join: the join ``key`` (rows with a
    null key part never join), the event ``time`` column (TIMESTAMP, DATE or epoch-ms BIGINT) and
    ``order_by``, the columns that order rows written in one Delta commit (an offset, say)."""

    key: list[str] = Field(
        min_length=1,
        description=(
            "The join key: rows join when their keys are equal, part by part. A row with a null key part "
            "never joins."
        ),
        examples=[["ad_id"]],
    )
    time: str = Field(
        description="The event-time column: TIMESTAMP, DATE or BIGINT milliseconds since the epoch.",
        examples=["shown_at"],
    )
    order_by: list[str] = Field(
        default_factory=list,
        description=(
            "The columns that order the rows written in one Delta commit (an offset, say), so the join "
            "processes them as Kafka would. One column may be given as a string. Default: none."
        ),
        examples=[["offset"]],
    )

    @field_validator("order_by", mode="before", json_schema_input_type=list[str] | str)
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

    kind: Literal["windowed_join"] = Field(
        description="The join kind: rows of two sides matched inside a time window.",
        examples=["windowed_join"],
    )
    mode: Literal["stream"] = Field(
        description=(
            "`stream`: two append-only event tables, each pair of rows within the window is an output row "
            "(Kafka's KStream-KStream join)."
        ),
        examples=["stream"],
    )
    left: EventStreamRef = Field(
        description="The left append-only event table.",
        examples=[
            {"path": "/warehouse/impressions", "key": ["ad_id"], "time": "shown_at", "order_by": ["offset"]}
        ],
    )
    right: EventStreamRef = Field(
        description="The right append-only event table; its `key` has as many columns as the left's.",
        examples=[{"path": "/warehouse/clicks", "key": ["ad_id"], "time": "clicked_at"}],
    )
    window: JoinWindow = _window_field()
    how: Literal["inner", "left", "outer"] = Field(
        default="inner",
        description=(
            "Which rows without a partner are emitted once their window and grace have passed: `inner` "
            "none, `left` the left ones, `outer` both sides'."
        ),
        examples=["left"],
    )
    late_unmatched: Literal["respect_grace", "emit_immediately"] = Field(
        default="respect_grace",
        description=(
            "When a late row without a partner is emitted: `respect_grace` (default) holds it until its "
            "grace has passed; `emit_immediately` emits it at once, as Kafka 4.x does."
        ),
        examples=["emit_immediately"],
    )
    columns: dict[str, str] | None = Field(
        default=None,
        description=(
            "The output's columns: output column name to a Spark SQL expression over the aliases `l` and "
            "`r` (either may be null in an unmatched row). May not name `event_time`, which is always "
            "added. Default: the coalesced key, then the left values, then the right values."
        ),
        examples=[{"ad_id": "coalesce(l.ad_id, r.ad_id)", "click_id": "r.click_id"}],
    )
    allow_full_replace: bool = allow_full_replace_field()
    optimize: bool = Field(
        default=True,
        description=(
            "Run a join of one table with itself (same key, time and order_by, inner) as a `self_join`: one "
            "read instead of two, the same output. `false` keeps the two-sided join. Changing it rebuilds "
            "nothing."
        ),
        examples=[False],
    )
    output: OutputRef = Field(
        description=(
            "The append-only output Delta table: one row per joined pair or emitted unmatched row, with an "
            "`event_time` column (the pair's later time)."
        ),
        examples=[{"path": "/warehouse/ad_clicks"}],
    )

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

    kind: Literal["self_join"] = Field(
        description="The join kind: an append-only event table joined with itself inside a time window.",
        examples=["self_join"],
    )
    input: EventStreamRef = Field(
        description="The append-only event table, read once and used as both sides `l` and `r`.",
        examples=[
            {"path": "/warehouse/atm_txns", "key": ["account_id"], "time": "txn_ts", "order_by": ["offset"]}
        ],
    )
    window: JoinWindow = _window_field()
    how: str = Field(
        default="inner",
        description=(
            "Only `inner`. For a left or outer join of a table with itself, use a `windowed_join` with "
            "`mode: stream` and the table on both sides."
        ),
        examples=["inner"],
        json_schema_extra={"enum": ["inner"]},
    )
    columns: dict[str, str] | None = Field(
        default=None,
        validate_default=True,
        description=(
            "Required: the output's columns, output column name to a Spark SQL expression over the aliases "
            "`l` and `r`, the two rows of a pair (both have the input's columns). May not name "
            "`event_time`, which is always added."
        ),
        examples=[{"account_id": "l.account_id", "atm": "l.atm", "paired_atm": "r.atm"}],
    )
    allow_full_replace: bool = allow_full_replace_field()
    output: OutputRef = Field(
        description=(
            "The append-only output Delta table: one row per pair, with an `event_time` column (the pair's "
            "later time)."
        ),
        examples=[{"path": "/warehouse/atm_pairs"}],
    )

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

    start: str = Field(description="The column holding each window's start.", examples=["window_start"])
    end: str = Field(description="The column holding each window's end.", examples=["window_end"])
    offset: Duration = Field(
        default=0,
        description=(
            "Right side only: shift this side's windows by a duration before matching (`-7d`: a left "
            "window joins the right window a week earlier). Default 0."
        ),
        examples=["-7d"],
    )

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

    window: TableWindow | None = Field(
        default=None,
        description=(
            "This table's window columns, when it has one row per key and window (as a windowed "
            "aggregation writes it). Leave it out for a plain keyed table."
        ),
        examples=[{"start": "window_start", "end": "window_end"}],
    )

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

    kind: Literal["windowed_join"] = Field(
        description="The join kind: rows of two sides matched inside a time window.",
        examples=["windowed_join"],
    )
    mode: Literal["table"] = Field(
        description=(
            "`table`: two keyed tables joined on key (and window), kept up to date as they change (Kafka's "
            "KTable-KTable join)."
        ),
        examples=["table"],
    )
    left: WindowedTableRef = Field(
        description="The left keyed table, windowed or not.",
        examples=[
            {"path": "/warehouse/errors_per_min", "key": ["service"], "window": {"start": "ws", "end": "we"}}
        ],
    )
    right: WindowedTableRef = Field(
        description=(
            "The right keyed table; its `key` has as many columns as the left's. Windowed only if the left "
            "is."
        ),
        examples=[
            {
                "path": "/warehouse/errors_per_min",
                "key": ["service"],
                "window": {"start": "ws", "end": "we", "offset": "-7d"},
            }
        ],
    )
    how: Literal["inner", "left", "outer"] = Field(
        default="inner",
        description=(
            "Which rows without a partner are kept, with nulls for the other side: `inner` none, `left` "
            "the left ones, `outer` both sides' (only when both sides are windowed, or neither)."
        ),
        examples=["left"],
    )
    columns: dict[str, str] | None = Field(
        default=None,
        description=(
            "The output's columns: output column name to a Spark SQL expression over the aliases `l` and "
            "`r`. The key (and window) is always included. Default: every left column, then every right "
            "column that is not part of its key or window."
        ),
        examples=[{"errors_now": "l.errors", "errors_week_ago": "r.errors"}],
    )
    output: OutputRef = Field(
        description=(
            "The output Delta table, keyed by the left key (and window), kept equal to the join of the "
            "inputs."
        ),
        examples=[{"path": "/warehouse/errors_vs_last_week"}],
    )

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
        check_columns_leave_the_key(self.columns, self.left.full_key, "the left key and window")
        check_distinct_locations(self.output, dict(self.inputs()))
        return self

    @property
    def enrichment(self) -> bool:
        """A windowed left table joined to a plain right table on the key part (a foreign-key join)."""
        return self.left.window is not None and self.right.window is None

    def inputs(self) -> dict[str, SourceRef]:
        """The input tables by side name, in the order they appear in results."""
        return {"left": self.left, "right": self.right}

"""Test utilities: tiny Delta tables with CDF on, and an independent pure-Python oracle of the FK join.

The oracle (``expected_fk_join``) never touches the engine: it recomputes the join from collected rows,
following ``docs/kinds/foreign-key-join.md`` as a *table* (the state a Kafka FK join converges to):

* one output row per non-null left key (inner: only when the FK is non-null and the right row exists);
* a null FK (or any null component of a composite FK) never matches, not even a right row with a null key;
* rows with a null key (any null component) are dropped on both sides; duplicate keys are an error;
* keys compare by exact value (``"fk"`` never matches ``"fk1"``).
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

Row = dict[str, Any]
KeyTuple = tuple[Any, ...]
FkSpec = Sequence[str] | Callable[[Row], Any]
ColumnSpec = str | Callable[[Row, Row], Any]

CDF_META = ("_change_type", "_commit_version", "_commit_timestamp")


# --------------------------------------------------------------------------------------------- Delta tables


def _schema_of(spark: SparkSession, schema: str | StructType) -> StructType:
    if isinstance(schema, StructType):
        return schema
    return spark.createDataFrame([], schema).schema


def _frame(spark: SparkSession, rows: Iterable[Mapping[str, Any]], schema: str | StructType) -> DataFrame:
    struct = _schema_of(spark, schema)
    unknown = {name for row in rows for name in row} - set(struct.fieldNames())
    if unknown:
        raise ValueError(f"rows have columns not in the schema: {sorted(unknown)}")
    data = [tuple(row.get(field.name) for field in struct.fields) for row in rows]
    return spark.createDataFrame(data, struct)


def table_schema(spark: SparkSession, path: str) -> StructType:
    return spark.read.format("delta").load(str(path)).schema


def table_columns(spark: SparkSession, path: str, version: int | None = None) -> list[str]:
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    return reader.load(str(path)).columns


def table_version(spark: SparkSession, path: str) -> int:
    """The latest committed version of the Delta table at ``path``.

    For a local path this lists ``_delta_log/<version>.json`` (the Delta protocol's commit files; no Spark
    job), else it asks Delta's history.
    """
    log = Path(str(path).removeprefix("file:")) / "_delta_log"
    if "://" not in str(path).removeprefix("file://") and log.is_dir():
        versions = [int(f.name[:-5]) for f in log.glob("*.json") if f.name[:-5].isdigit()]
        if versions:
            return max(versions)
    from delta.tables import DeltaTable

    last = DeltaTable.forPath(spark, str(path)).history(1).select("version").collect()
    return int(last[0]["version"])


def create_table(
    spark: SparkSession, path: str, rows: Iterable[Mapping[str, Any]], schema: str | StructType
) -> int:
    """Create a Delta table with the change data feed on, holding ``rows`` (missing columns are null)."""
    frame = _frame(spark, list(rows), schema)
    (
        frame.coalesce(1)
        .write.format("delta")
        .mode("errorifexists")
        .option("delta.enableChangeDataFeed", "true")
        .save(str(path))
    )
    return table_version(spark, path)


def append_rows(spark: SparkSession, path: str, rows: Iterable[Mapping[str, Any]]) -> int:
    """Blind append (no key check): for null keys and duplicate keys."""
    frame = _frame(spark, list(rows), table_schema(spark, path))
    frame.coalesce(1).write.format("delta").mode("append").save(str(path))
    return table_version(spark, path)


def _key_condition(key: Sequence[str], target: str = "t", source: str = "s") -> str:
    return " AND ".join(f"{target}.`{col}` = {source}.`{col}`" for col in key)


def upsert(spark: SparkSession, path: str, rows: Iterable[Mapping[str, Any]], key: Sequence[str]) -> int:
    """MERGE ``rows`` into the table by ``key`` (update every column of a match, insert the rest): one commit.

    An identical row is still rewritten (Delta's CDF then shows a no-op update): engines must cope.
    """
    from delta.tables import DeltaTable

    frame = _frame(spark, list(rows), table_schema(spark, path))
    (
        DeltaTable.forPath(spark, str(path))
        .alias("t")
        .merge(frame.alias("s"), _key_condition(key))
        .whenMatchedUpdateAll()
        .whenNotMatchedInsertAll()
        .execute()
    )
    return table_version(spark, path)


def _literal(value: Any) -> str:
    if value is None:
        raise ValueError("cannot delete a null key by value")
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"


def delete_keys(spark: SparkSession, path: str, keys: Iterable[Any], key: Sequence[str]) -> int:
    """Delete the rows whose key is in ``keys`` (scalars for a one-column key, else tuples): one commit."""
    from delta.tables import DeltaTable

    clauses = []
    for value in keys:
        parts = value if isinstance(value, tuple) else (value,)
        if len(parts) != len(key):
            raise ValueError(f"key {value!r} does not fit key columns {list(key)}")
        clauses.append(
            "(" + " AND ".join(f"`{c}` = {_literal(v)}" for c, v in zip(key, parts, strict=True)) + ")"
        )
    if not clauses:
        raise ValueError("delete_keys needs at least one key")
    DeltaTable.forPath(spark, str(path)).delete(" OR ".join(clauses))
    return table_version(spark, path)


def read_table(spark: SparkSession, path: str, version: int | None = None) -> tuple[list[Row], list[str]]:
    """All rows of the table (at ``version`` if given) as dicts, and its column names, in one read."""
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    frame = reader.load(str(path))
    return [row.asDict(recursive=True) for row in frame.collect()], frame.columns


def read_rows(spark: SparkSession, path: str, version: int | None = None) -> list[Row]:
    """All rows of the table (at ``version`` if given) as dicts."""
    return read_table(spark, path, version)[0]


def read_changes(spark: SparkSession, path: str, start: int, end: int) -> list[Row]:
    """The change data feed of versions ``start``..``end`` (inclusive) as dicts, with ``_change_type``."""
    frame = (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", start)
        .option("endingVersion", end)
        .load(str(path))
    )
    return [row.asDict(recursive=True) for row in frame.collect()]


# ----------------------------------------------------------------------------------------------- the oracle


def key_of(row: Mapping[str, Any], key: Sequence[str]) -> KeyTuple:
    return tuple(row[col] for col in key)


def is_null_key(value: KeyTuple) -> bool:
    return any(part is None for part in value)


def index_by_key(
    rows: Iterable[Mapping[str, Any]], key: Sequence[str], side: str = "table"
) -> dict[KeyTuple, Row]:
    """Rows by key, null keys dropped; a duplicate key raises ``ValueError`` naming it."""
    counts: Counter[KeyTuple] = Counter()
    indexed: dict[KeyTuple, Row] = {}
    for row in rows:
        value = key_of(row, key)
        if is_null_key(value):
            continue
        counts[value] += 1
        indexed[value] = dict(row)
    duplicates = sorted((k for k, n in counts.items() if n > 1), key=repr)
    if duplicates:
        raise ValueError(f"{side}: duplicate keys {duplicates}")
    return indexed


def _fk_value(left_row: Row, fk: FkSpec) -> KeyTuple | None:
    if callable(fk):
        value = fk(left_row)
        parts = value if isinstance(value, tuple) else (value,)
    else:
        parts = tuple(left_row[col] for col in fk)
    return None if is_null_key(parts) else parts


def _project(expr: ColumnSpec, left_row: Row, right_row: Row) -> Any:
    if callable(expr):
        return expr(left_row, right_row)
    alias, _, col = expr.strip().partition(".")
    if alias == "l":
        return left_row[col]
    if alias == "r":
        return right_row[col]
    raise ValueError(f"oracle only understands 'l.col', 'r.col' or a callable, not {expr!r}")


def output_columns(
    left_columns: Sequence[str],
    right_columns: Sequence[str],
    left_key: Sequence[str],
    right_key: Sequence[str],
    columns: Mapping[str, ColumnSpec] | None = None,
) -> list[str]:
    """The output's columns in order: left key + projection, or every left column then right non-key ones."""
    if columns is not None:
        return [*left_key, *(name for name in columns if name not in left_key)]
    right_rest = [c for c in right_columns if c not in right_key]
    clash = sorted(set(left_columns) & set(right_rest))
    if clash:
        raise ValueError(f"default projection clashes on {clash}")
    return [*left_key, *(c for c in left_columns if c not in left_key), *right_rest]


def expected_fk_join(
    left_rows: Iterable[Mapping[str, Any]],
    right_rows: Iterable[Mapping[str, Any]],
    left_key: Sequence[str],
    right_key: Sequence[str],
    fk: FkSpec,
    how: str,
    columns: Mapping[str, ColumnSpec] | None = None,
    *,
    left_columns: Sequence[str] | None = None,
    right_columns: Sequence[str] | None = None,
) -> list[Row]:
    """The FK join recomputed from scratch, as output rows (dicts), sorted by the left key.

    ``fk``: left column names matched in order to ``right_key``, or a callable ``left_row -> value or tuple``.
    ``columns``: optional projection ``{out_col: "l.col" | "r.col" | callable(l, r)}``; ``r`` holds nulls when
    a left join finds no right row. ``left_columns``/``right_columns`` default to the first row's keys
    (pass them when a side may be empty).
    """
    if how not in ("inner", "left"):
        raise ValueError(f"how must be inner or left, not {how!r}")
    left_list = [dict(r) for r in left_rows]
    right_list = [dict(r) for r in right_rows]
    if left_columns is None:
        left_columns = list(left_list[0]) if left_list else list(left_key)
    if right_columns is None:
        if not right_list and (how == "left" or columns is None):
            raise ValueError("right_columns is needed when the right side is empty")
        right_columns = list(right_list[0]) if right_list else list(right_key)
    if not callable(fk) and len(fk) != len(right_key):
        raise ValueError(f"foreign key {list(fk)} does not fit right key {list(right_key)}")

    lefts = index_by_key(left_list, left_key, "left")
    rights = index_by_key(right_list, right_key, "right")
    names = output_columns(left_columns, right_columns, left_key, right_key, columns)
    null_right: Row = dict.fromkeys(right_columns)

    out: list[Row] = []
    for lkey in sorted(lefts, key=repr):
        left_row = lefts[lkey]
        fk_value = _fk_value(left_row, fk)
        right_row = rights.get(fk_value) if fk_value is not None else None
        if right_row is None and how == "inner":
            continue
        matched = right_row if right_row is not None else null_right
        if columns is not None:
            row = {col: left_row[col] for col in left_key}
            row.update({name: _project(expr, left_row, matched) for name, expr in columns.items()})
        else:
            row = {col: left_row[col] for col in left_columns}
            row.update({col: matched[col] for col in right_columns if col not in right_key})
        out.append({name: row[name] for name in names})
    return out


# ----------------------------------------------------------------------------------------------- assertions


def rows_by_key(rows: Iterable[Mapping[str, Any]], key: Sequence[str]) -> dict[KeyTuple, Row]:
    """Rows by key; a duplicate key in an *output* is a failure."""
    indexed: dict[KeyTuple, Row] = {}
    for row in rows:
        value = key_of(row, key)
        assert value not in indexed, f"output holds key {value} twice: {indexed[value]} and {dict(row)}"
        indexed[value] = dict(row)
    return indexed


def sorted_rows(rows: Iterable[Mapping[str, Any]], key: Sequence[str]) -> list[Row]:
    return [dict(r) for r in sorted(rows, key=lambda r: repr(key_of(r, key)))]


def assert_same_rows(
    actual: Iterable[Mapping[str, Any]], expected: Iterable[Mapping[str, Any]], key: Sequence[str]
) -> None:
    """Equal as sets of rows keyed by ``key``, with a readable per-key diff on failure."""
    got = rows_by_key(actual, key)
    want = rows_by_key(expected, key)
    if got == want:
        return
    lines = []
    for k in sorted(set(got) | set(want), key=repr):
        if got.get(k) != want.get(k):
            lines.append(f"  key {k}: got {got.get(k)} expected {want.get(k)}")
    raise AssertionError("output differs from expected:\n" + "\n".join(lines))


def spec_fk(spec: Mapping[str, Any]) -> FkSpec | None:
    fk = spec["foreign_key"]
    return list(fk) if isinstance(fk, list | tuple) else None


def oracle_for_result(
    spark: SparkSession,
    spec: Mapping[str, Any],
    result: Mapping[str, Any],
    *,
    fk: FkSpec | None = None,
    columns: Mapping[str, ColumnSpec] | None = None,
) -> list[Row]:
    """The oracle over the inputs at the versions the result says it consumed (``to_version``)."""
    left_v = result["inputs"]["left"]["to_version"]
    right_v = result["inputs"]["right"]["to_version"]
    fk = fk if fk is not None else spec_fk(spec)
    assert fk is not None, "pass fk= (a callable) when the spec's foreign_key is an expression"
    if columns is None and spec.get("columns"):
        columns = dict(spec["columns"])
    return expected_fk_join(
        read_rows(spark, spec["left"]["path"], left_v),
        read_rows(spark, spec["right"]["path"], right_v),
        spec["left"]["key"],
        spec["right"]["key"],
        fk,
        spec.get("how", "inner"),
        columns,
        left_columns=table_columns(spark, spec["left"]["path"], left_v),
        right_columns=table_columns(spark, spec["right"]["path"], right_v),
    )


def assert_output_matches_oracle(
    spark: SparkSession,
    spec: Mapping[str, Any],
    result: Mapping[str, Any],
    *,
    fk: FkSpec | None = None,
    columns: Mapping[str, ColumnSpec] | None = None,
    check_column_order: bool = True,
) -> list[Row]:
    """The output at the result's version equals the oracle at the result's input ``to_version``s.

    Returns the output rows.
    """
    expected = oracle_for_result(spark, spec, result, fk=fk, columns=columns)
    out_path = spec["output"]["path"]
    version = result["output"]["version"]
    actual = read_rows(spark, out_path, version)
    if check_column_order:
        left_v = result["inputs"]["left"]["to_version"]
        right_v = result["inputs"]["right"]["to_version"]
        want_cols = output_columns(
            table_columns(spark, spec["left"]["path"], left_v),
            table_columns(spark, spec["right"]["path"], right_v),
            spec["left"]["key"],
            spec["right"]["key"],
            columns if columns is not None else spec.get("columns"),
        )
        assert table_columns(spark, out_path, version) == want_cols
    assert_same_rows(actual, expected, spec["left"]["key"])
    return actual


def diff_states(
    before: Iterable[Mapping[str, Any]], after: Iterable[Mapping[str, Any]], key: Sequence[str]
) -> dict[str, dict[KeyTuple, Any]]:
    """Net changes between two output states: inserted / deleted rows and updated (pre, post) pairs."""
    old = rows_by_key(before, key)
    new = rows_by_key(after, key)
    return {
        "inserted": {k: new[k] for k in new.keys() - old.keys()},
        "deleted": {k: old[k] for k in old.keys() - new.keys()},
        "updated": {k: (old[k], new[k]) for k in old.keys() & new.keys() if old[k] != new[k]},
    }


def change_problems(
    changes: Iterable[Mapping[str, Any]],
    before_rows: Iterable[Mapping[str, Any]],
    after_rows: Iterable[Mapping[str, Any]],
    key: Sequence[str],
) -> tuple[dict[KeyTuple, list[str]], dict[str, int]]:
    """Check an output's change feed over one refresh against the states before and after it.

    Clean means: per output key exactly one net change, i.e. one ``insert`` (of the new row), one ``delete``
    (of a row that was there) or one ``update_preimage``/``update_postimage`` pair whose images differ; and a
    change for exactly the keys whose row differs between the two states. Returns the problems by key and the
    ``{"inserted", "updated", "deleted"}`` counts of the net change.
    """
    expected = diff_states(before_rows, after_rows, key)
    per_key: dict[KeyTuple, list[Row]] = defaultdict(list)
    for change in changes:
        per_key[key_of(change, key)].append(dict(change))

    problems: dict[KeyTuple, list[str]] = defaultdict(list)
    for k, items in per_key.items():
        kinds = sorted(c["_change_type"] for c in items)
        images = {c["_change_type"]: {n: v for n, v in c.items() if n not in CDF_META} for c in items}
        if kinds == ["insert"]:
            if k not in expected["inserted"]:
                problems[k].append(f"insert {images['insert']}, but the key was already there or is gone")
            elif images["insert"] != expected["inserted"][k]:
                problems[k].append(f"inserted {images['insert']}, final row {expected['inserted'][k]}")
        elif kinds == ["delete"]:
            if k not in expected["deleted"]:
                problems[k].append(f"delete of {images['delete']}, but the key was absent or is still there")
            elif images["delete"] != expected["deleted"][k]:
                problems[k].append(f"deleted {images['delete']}, previous row {expected['deleted'][k]}")
        elif kinds == ["update_postimage", "update_preimage"]:
            pre, post = images["update_preimage"], images["update_postimage"]
            if pre == post:
                problems[k].append(f"no-op update rewrote {pre}")
            elif k not in expected["updated"]:
                problems[k].append(f"update {pre} -> {post}, but the key did not change that way")
            elif (pre, post) != expected["updated"][k]:
                problems[k].append(f"update {pre} -> {post}, expected {expected['updated'][k]}")
        else:
            problems[k].append(f"{len(items)} changes {kinds} in one refresh (want exactly one net change)")
    for kind in ("inserted", "deleted", "updated"):
        for k in expected[kind]:
            if k not in per_key:
                problems[k].append(f"{kind} between the two states, but the change feed has no row for it")
    return dict(problems), {kind: len(expected[kind]) for kind in ("inserted", "updated", "deleted")}


def format_problems(problems: Mapping[KeyTuple, Sequence[str]]) -> str:
    return "\n".join(f"  key {k}: {msg}" for k in sorted(problems, key=repr) for msg in problems[k])


def assert_clean_changes(
    spark: SparkSession,
    out_path: str,
    key: Sequence[str],
    before_version: int | None,
    after_version: int,
    *,
    before_rows: Iterable[Mapping[str, Any]] | None = None,
    after_rows: Iterable[Mapping[str, Any]] | None = None,
) -> dict[str, int]:
    """The output's change feed over a refresh (``before_version``+1 .. ``after_version``) is clean.

    See :func:`change_problems`. ``before_version=None`` means the output did not exist before.
    Returns the ``{"inserted", "updated", "deleted"}`` counts.
    """
    if before_rows is None:
        before_rows = [] if before_version is None else read_rows(spark, out_path, before_version)
    if after_rows is None:
        after_rows = read_rows(spark, out_path, after_version)
    start = 0 if before_version is None else before_version + 1
    changes = read_changes(spark, out_path, start, after_version) if after_version >= start else []
    problems, counts = change_problems(changes, before_rows, after_rows, key)
    assert not problems, f"output change feed of versions {start}..{after_version} is not clean:\n" + (
        format_problems(problems)
    )
    return counts


# ------------------------------------------------------------------------------------ a world of refreshes


@dataclass
class Batch:
    """Input changes applied together: deletes first, then upserts, one Delta commit per non-empty list."""

    left_upserts: list[Row] = field(default_factory=list)
    left_deletes: list[Any] = field(default_factory=list)
    right_upserts: list[Row] = field(default_factory=list)
    right_deletes: list[Any] = field(default_factory=list)

    def extend(self, other: Batch) -> None:
        self.left_upserts += other.left_upserts
        self.left_deletes += other.left_deletes
        self.right_upserts += other.right_upserts
        self.right_deletes += other.right_deletes

    def is_empty(self) -> bool:
        return not (self.left_upserts or self.left_deletes or self.right_upserts or self.right_deletes)


@dataclass
class OutputSpec:
    """One join over a world's two inputs: the spec's join fields plus how the oracle reproduces them."""

    how: str
    foreign_key: Any
    columns: dict[str, str] | None = None
    fk_oracle: FkSpec | None = None
    columns_oracle: Mapping[str, ColumnSpec] | None = None
    write_path: str = "auto"
    #: The spec's ``refresh_strategy`` (left out when None).
    strategy: str | None = None
    #: The spec's ``warm_state`` (left out when False).
    warm_state: bool = False


@dataclass
class Refresh:
    """What one refresh of one output did, and everything found wrong with it."""

    phase: int
    result: dict[str, Any] | None = None
    error: str | None = None
    rows: dict[KeyTuple, Row] = field(default_factory=dict)
    oracle: dict[KeyTuple, Row] = field(default_factory=dict)
    change_problems: dict[KeyTuple, list[str]] = field(default_factory=dict)
    changed: set[KeyTuple] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)
    run_s: float = 0.0
    check_s: float = 0.0

    def describe(self) -> str:
        if self.error:
            return f"phase {self.phase}: run_spec raised {self.error}"
        lines = [f"phase {self.phase}: {p}" for p in self.problems]
        diff = {
            k: [f"output {self.rows.get(k)} != oracle {self.oracle.get(k)}"]
            for k in set(self.rows) | set(self.oracle)
            if self.rows.get(k) != self.oracle.get(k)
        }
        if diff:
            lines.append(f"phase {self.phase}: output differs from the oracle:\n" + format_problems(diff))
        if self.change_problems:
            lines.append(
                f"phase {self.phase}: change feed not clean:\n" + format_problems(self.change_problems)
            )
        return "\n".join(lines)

    def ok(self) -> bool:
        return not self.describe()


class World:
    """Two input tables (CDF on), several outputs joined from them, refreshed together phase by phase.

    Every refresh of every output is checked against the contract (mode, versions, one commit, counts,
    columns), the oracle at the result's input versions, and the output's change feed; findings are recorded
    per key in :class:`Refresh` records so that each test can look at the keys it owns.
    """

    def __init__(
        self,
        spark: SparkSession,
        root: str,
        *,
        left_schema: str,
        right_schema: str,
        left_key: Sequence[str],
        right_key: Sequence[str],
        outputs: Mapping[str, OutputSpec],
    ) -> None:
        self.spark = spark
        self.root = str(root)
        self.left_path = f"{self.root}/left"
        self.right_path = f"{self.root}/right"
        self.left_schema = left_schema
        self.right_schema = right_schema
        self.left_key = list(left_key)
        self.right_key = list(right_key)
        self.outputs = dict(outputs)
        self.specs: dict[str, dict[str, Any]] = {}
        for name, out in self.outputs.items():
            spec: dict[str, Any] = {
                "kind": "foreign_key_join",
                "left": {"path": self.left_path, "key": self.left_key},
                "right": {"path": self.right_path, "key": self.right_key},
                "foreign_key": out.foreign_key,
                "how": out.how,
                "output": {"path": f"{self.root}/out_{name}"},
            }
            if out.columns is not None:
                spec["columns"] = dict(out.columns)
            if out.strategy is not None:
                spec["refresh_strategy"] = out.strategy
            if out.warm_state:
                spec["warm_state"] = True
            self.specs[name] = spec
        self.history: dict[str, list[Refresh]] = {name: [] for name in self.outputs}
        self._last_ok: dict[str, Refresh] = {}
        self._inputs_cache: dict[tuple[str, int], tuple[list[Row], list[str]]] = {}
        self.phase = -1

    def out_path(self, name: str) -> str:
        return self.specs[name]["output"]["path"]

    def create(self, left_rows: Sequence[Row], right_rows: Sequence[Row]) -> None:
        create_table(self.spark, self.left_path, left_rows, self.left_schema)
        create_table(self.spark, self.right_path, right_rows, self.right_schema)

    def apply(self, batch: Batch) -> None:
        if batch.left_deletes:
            delete_keys(self.spark, self.left_path, batch.left_deletes, self.left_key)
        if batch.left_upserts:
            upsert(self.spark, self.left_path, batch.left_upserts, self.left_key)
        if batch.right_deletes:
            delete_keys(self.spark, self.right_path, batch.right_deletes, self.right_key)
        if batch.right_upserts:
            upsert(self.spark, self.right_path, batch.right_upserts, self.right_key)

    def _input(self, path: str, version: int) -> tuple[list[Row], list[str]]:
        cached = self._inputs_cache.get((path, version))
        if cached is None:
            cached = read_table(self.spark, path, version)
            self._inputs_cache[(path, version)] = cached
        return cached

    def refresh(self) -> dict[str, Refresh]:
        """Refresh every output once (one phase) and check each refresh."""
        from airflow_provider_fkjoin.engine import run_spec

        self.phase += 1
        left_hw = table_version(self.spark, self.left_path)
        right_hw = table_version(self.spark, self.right_path)
        records: dict[str, Refresh] = {}
        for name, spec in self.specs.items():
            record = Refresh(self.phase)
            records[name] = record
            self.history[name].append(record)
            started = time.monotonic()
            try:
                result = run_spec(spec, spark=self.spark, write_path=self.outputs[name].write_path)
            except Exception as exc:
                record.error = f"{type(exc).__name__}: {exc}"
                continue
            finally:
                record.run_s = time.monotonic() - started
            record.result = result
            self._check(name, record, left_hw, right_hw)
            record.check_s = time.monotonic() - started - record.run_s
            self._last_ok[name] = record
        return records

    def _check(self, name: str, record: Refresh, left_hw: int, right_hw: int) -> None:
        out = self.outputs[name]
        result = record.result
        assert result is not None
        previous = self._last_ok.get(name)
        problems = record.problems

        if previous is None:
            want_mode = "full"
        else:
            prev_in = previous.result["inputs"] if previous.result else {}
            moved = (prev_in["left"]["to_version"], prev_in["right"]["to_version"]) != (left_hw, right_hw)
            want_mode = "incremental" if moved else "noop"
        if result.get("mode") != want_mode:
            problems.append(f"mode {result.get('mode')!r} ({result.get('reason')!r}), expected {want_mode!r}")
        if want_mode == "full" and "first" not in str(result.get("reason", "")).lower():
            problems.append(f"first run's reason does not say so: {result.get('reason')!r}")
        got_versions = (result["inputs"]["left"]["to_version"], result["inputs"]["right"]["to_version"])
        if got_versions != (left_hw, right_hw):
            problems.append(f"to_versions {got_versions}, the inputs were at {(left_hw, right_hw)}")

        out_path = self.out_path(name)
        version = result["output"]["version"]
        latest = table_version(self.spark, out_path)
        if version != latest:
            problems.append(f"result names output version {version}, the output is at {latest}")
        prev_version = previous.result["output"]["version"] if previous and previous.result else None
        if want_mode == "incremental" and prev_version is not None and version != prev_version + 1:
            problems.append(f"incremental refresh went from output version {prev_version} to {version}")
        if want_mode == "noop" and version != prev_version:
            problems.append(f"noop refresh moved the output from version {prev_version} to {version}")

        left_rows, left_cols = self._input(self.left_path, got_versions[0])
        right_rows, right_cols = self._input(self.right_path, got_versions[1])
        fk = out.fk_oracle if out.fk_oracle is not None else list(out.foreign_key)
        columns = out.columns_oracle if out.columns_oracle is not None else out.columns
        expected = expected_fk_join(
            left_rows, right_rows, self.left_key, self.right_key, fk, out.how, columns,
            left_columns=left_cols, right_columns=right_cols,
        )  # fmt: skip
        want_cols = output_columns(left_cols, right_cols, self.left_key, self.right_key, columns)
        after, got_cols = read_table(self.spark, out_path, version)
        if got_cols != want_cols:
            problems.append(f"output columns {got_cols}, expected {want_cols}")
        record.rows = rows_by_key(after, self.left_key)
        record.oracle = rows_by_key(expected, self.left_key)
        before = list(previous.rows.values()) if previous else []
        start = 0 if prev_version is None else prev_version + 1
        changes = read_changes(self.spark, out_path, start, version) if version >= start else []
        record.changed = {key_of(c, self.left_key) for c in changes}
        record.change_problems, counts = change_problems(changes, before, after, self.left_key)
        got_counts = {kind: result.get("rows", {}).get(kind) for kind in counts}
        if got_counts != counts:
            problems.append(f"result rows {got_counts}, the change feed says {counts}")

    def timing_summary(self) -> str:
        """Seconds spent in ``run_spec`` and in the checks, per output (fixtures print it; ``pytest -s``)."""
        lines = []
        for name, records in self.history.items():
            runs = ", ".join(f"{r.run_s:.1f}" for r in records)
            checks = sum(r.check_s for r in records)
            lines.append(f"{name}: run_spec s per phase [{runs}], checks {checks:.1f}s")
        return "\n".join(lines)

    def assert_ok(self, name: str) -> None:
        """Every refresh of output ``name`` so far met the whole contract."""
        report = "\n".join(r.describe() for r in self.history[name] if not r.ok())
        assert not report, f"output {name}:\n{report}"


# --------------------------------------------- the orders x customers join of the lifecycle and safety tests

ORDERS = "order_id long, customer_id long, amount double"
CUSTOMERS = "customer_id long, name string"


def write(spark, rows, schema, path: Path, mode: str = "overwrite", cdf: bool = True, **options: str) -> None:
    """Write tuples as a Delta table (CDF on unless ``cdf`` is False); ``options`` go to the writer."""
    writer = spark.createDataFrame(rows, schema).write.format("delta").mode(mode)
    if cdf:
        writer = writer.option("delta.enableChangeDataFeed", "true")
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.save(str(path))


def orders_customers(
    spark, warehouse: Path, orders: list[tuple], customers: list[tuple], how: str = "left"
) -> tuple[dict[str, Any], Path, Path, Path]:
    """``orders`` and ``customers`` written in ``warehouse`` (CDF on), and the foreign-key join spec over
    them into ``warehouse/out``: ``(spec, orders_path, customers_path, out_path)``."""
    from support.tables import orders_customers_spec

    spec, orders_path, customers_path, out = orders_customers_spec(warehouse, how)
    write(spark, orders, ORDERS, orders_path)
    write(spark, customers, CUSTOMERS, customers_path)
    return spec, orders_path, customers_path, out


def rows_at(spark, path: Path | str, version: int | None = None) -> list[dict[str, Any]]:
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    return [r.asDict() for r in reader.load(str(path)).collect()]


def oracle(spark, result: dict, how: str = "inner") -> dict[int, tuple]:
    """orders x customers joined from scratch, in Python, over the inputs at the result's pinned versions."""
    left = rows_at(spark, result["inputs"]["left"]["path"], result["inputs"]["left"]["to_version"])
    right = rows_at(spark, result["inputs"]["right"]["path"], result["inputs"]["right"]["to_version"])
    by_key = {r["customer_id"]: r for r in right if r["customer_id"] is not None}
    out = {}
    for row in left:
        if row["order_id"] is None:
            continue
        match = by_key.get(row["customer_id"]) if row["customer_id"] is not None else None
        if match is None and how == "inner":
            continue
        out[row["order_id"]] = (row["customer_id"], row["amount"], match["name"] if match else None)
    return out


def output_state(spark, path: Path) -> dict[int, tuple]:
    return {r["order_id"]: (r["customer_id"], r["amount"], r["name"]) for r in rows_at(spark, path)}


@contextmanager
def small_refresh_bound(spark: SparkSession, adaptive: bool) -> Iterator[None]:
    """With ``adaptive``, refreshes run as large ones do (``spark.fkjoin.smallRefreshBytes=0``)."""
    if adaptive:
        spark.conf.set("spark.fkjoin.smallRefreshBytes", "0")
    try:
        yield
    finally:
        spark.conf.unset("spark.fkjoin.smallRefreshBytes")

"""Test utilities: tiny Delta tables with CDF on, and an independent pure-Python oracle of the FK join.

The oracle (``expected_fk_join``) never touches the engine: it recomputes the join from collected rows,
following ``reference/kafka_join_semantics.md`` §2 as a *table* (the state a Kafka FK join converges to):

* one output row per non-null left key (inner: only when the FK is non-null and the right row exists);
* a null FK (or any null component of a composite FK) never matches, not even a right row with a null key;
* rows with a null key (any null component) are dropped on both sides; duplicate keys are an error;
* keys compare by exact value (``"fk"`` never matches ``"fk1"``).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
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
    """The latest committed version of the Delta table at ``path``."""
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


def read_rows(spark: SparkSession, path: str, version: int | None = None) -> list[Row]:
    """All rows of the table (at ``version`` if given) as dicts."""
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    return [row.asDict(recursive=True) for row in reader.load(str(path)).collect()]


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

    Per output key there is exactly one net change: one ``insert`` (of the new row), one ``delete`` (of a row
    that was there), or one ``update_preimage``/``update_postimage`` pair whose images differ; and a change
    appears exactly for the keys whose row differs between the two states. ``before_version=None`` means the
    output did not exist before. Returns ``{"inserted", "updated", "deleted"}`` counts.
    """
    if before_rows is None:
        before_rows = [] if before_version is None else read_rows(spark, out_path, before_version)
    if after_rows is None:
        after_rows = read_rows(spark, out_path, after_version)
    expected = diff_states(before_rows, after_rows, key)
    start = 0 if before_version is None else before_version + 1
    changes = read_changes(spark, out_path, start, after_version) if after_version >= start else []

    per_key: dict[KeyTuple, list[Row]] = defaultdict(list)
    for change in changes:
        per_key[key_of(change, key)].append(change)

    problems: list[str] = []
    for k, items in sorted(per_key.items(), key=lambda kv: repr(kv[0])):
        kinds = sorted(c["_change_type"] for c in items)
        images = {c["_change_type"]: {n: v for n, v in c.items() if n not in CDF_META} for c in items}
        if kinds == ["insert"]:
            if k not in expected["inserted"]:
                problems.append(
                    f"key {k}: insert {images['insert']}, but the key was already there or is gone"
                )
            elif images["insert"] != expected["inserted"][k]:
                problems.append(f"key {k}: inserted {images['insert']}, final row {expected['inserted'][k]}")
        elif kinds == ["delete"]:
            if k not in expected["deleted"]:
                problems.append(
                    f"key {k}: delete of {images['delete']}, but the key was absent or is still there"
                )
            elif images["delete"] != expected["deleted"][k]:
                problems.append(f"key {k}: deleted {images['delete']}, previous row {expected['deleted'][k]}")
        elif kinds == ["update_postimage", "update_preimage"]:
            pre, post = images["update_preimage"], images["update_postimage"]
            if pre == post:
                problems.append(f"key {k}: no-op update rewrote {pre}")
            elif k not in expected["updated"]:
                problems.append(f"key {k}: update {pre} -> {post}, but the key did not change that way")
            elif (pre, post) != expected["updated"][k]:
                problems.append(f"key {k}: update {pre} -> {post}, expected {expected['updated'][k]}")
        else:
            problems.append(
                f"key {k}: {len(items)} changes {kinds} in one refresh (want exactly one net change)"
            )
    for kind in ("inserted", "deleted", "updated"):
        for k in expected[kind]:
            if k not in per_key:
                problems.append(
                    f"key {k}: {kind} between the two states, but the change feed has no row for it"
                )
    assert not problems, (
        f"output change feed of versions {start}..{after_version} is not clean:\n  " + "\n  ".join(problems)
    )
    return {kind: len(expected[kind]) for kind in ("inserted", "updated", "deleted")}

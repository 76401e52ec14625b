"""Writing an output table: create, reconcile by MERGE, or replace, always one Delta commit per refresh.

The commit carries the refresh's progress (see :mod:`..core.progress`), so data and progress land together.
A MERGE source row is either a new joined value (``_fkjoin_present`` true) or a retraction of a key
(false). Matched rows whose value is unchanged are left alone, and a retraction only deletes a key the
output holds, so the output's change feed has at most one net change per key and no no-op updates.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import logging
import re
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..core.errors import ConcurrentRefreshError, SpecError
from ..core.planning import RebuildRequired
from ..core.spec import quote
from ..core.trace import phase
from ..delta.ownership import OWNER_PROPERTY
from ..delta.tables import DeltaHandle, values_equal
from ..runtime import internals
from ..runtime.commit_settings import commit_settings, metadata_settings, session_settings
from ..runtime.internals import is_concurrent_modification
from ..runtime.session import is_connect

log = logging.getLogger(__name__)

PRESENT = "_fkjoin_present"
# Up to this many distinct keys, the MERGE condition lists their salted hashes (``_key_prune_condition``).
KEY_PRUNE_LIMIT = 100_000
OUTPUT_PROPERTIES = {
    "delta.enableChangeDataFeed": "true",
    "delta.enableDeletionVectors": "true",
}
#: Characters Delta accepts in a column name only with column mapping on (its physical names are then
#: generated): an output with such a column is created with ``delta.columnMapping.mode = name``.
_NEEDS_COLUMN_MAPPING = re.compile(r"[ ,;{}()\n\t=]")
COLUMN_MAPPING = {"delta.columnMapping.mode": "name"}


def needs_column_mapping(columns: list[str]) -> bool:
    """Whether Delta can store these column names only with column mapping on.

    >>> needs_column_mapping(["order id", "total"]), needs_column_mapping(["a.b", "na`me", "naïve"])
    (True, False)
    """
    return any(_NEEDS_COLUMN_MAPPING.search(name) for name in columns)


@dataclass(frozen=True)
class Commit:
    """One output commit and what it changed."""

    version: int
    inserted: int
    updated: int
    deleted: int
    #: How it was written: ``create``, ``overwrite``, ``append``, ``merge`` or ``net_changes``.
    write_path: str = "merge"
    #: Whether the refresh compacted the output after its commit (:func:`.net_changes.compact_output`).
    compacted: bool = False
    #: A net-change commit's new data files (absolute paths).
    added_files: tuple[str, ...] = ()


@dataclass(frozen=True)
class CommitRequest:
    """What identifies a refresh's commit: its progress metadata, transaction id and sequence number,
    and the output's owner (recorded when the commit creates the table, or first when ``claim``)."""

    user_metadata: str
    token: str
    app_id: str
    seq: int
    owner: str = ""
    claim: bool = False
    #: The output version the refresh planned against (None: the output did not exist).
    read_version: int | None = None


@contextmanager
def _conflicts_are_concurrent(output: DeltaHandle) -> Iterator[None]:
    """Delta's conflict with another commit (as PySpark, py4j or Spark Connect reports it) becomes the
    engine's retryable :class:`ConcurrentRefreshError`; any other error passes through."""
    try:
        yield
    except Exception as exc:
        if is_concurrent_modification(exc):
            raise _concurrent(output, exc) from None
        raise


def _concurrent(output: DeltaHandle, cause: Exception | None = None) -> ConcurrentRefreshError:
    detail = f" ({type(cause).__name__})" if cause else ""
    return ConcurrentRefreshError(
        f"output {output.location}: another refresh committed first{detail}; nothing of this refresh was "
        "written. Retry: the retry continues from the versions the other refresh consumed."
    )


def _find_commit(output: DeltaHandle, request: CommitRequest, write_path: str) -> Commit:
    """Our commit in the output's recent history, found by token; its absence means Delta skipped it."""
    for row in output.history(20):
        if row["userMetadata"] and request.token in row["userMetadata"]:
            metrics = row["operationMetrics"]
            return Commit(
                version=int(row["version"]),
                inserted=int(metrics.get("numTargetRowsInserted", metrics.get("numOutputRows", 0))),
                updated=int(metrics.get("numTargetRowsUpdated", 0)),
                deleted=int(metrics.get("numTargetRowsDeleted", 0)),
                write_path=write_path,
            )
    raise _concurrent(output)


def _write_rows(output: DeltaHandle, rows: DataFrame, request: CommitRequest, mode: str) -> Commit:
    """Write ``rows`` to the output in one commit carrying the refresh's progress and transaction id.

    ``mode`` is ``create`` (a new table, with the output's properties and its owner), ``overwrite``
    (replace, schema included; properties are kept) or ``append``. Another refresh creating or
    committing first is a ConcurrentRefreshError.
    """
    require_writable_columns(rows.columns)
    if mode == "create":
        return _create_table(output, rows, request)
    if mode == "append":
        appended = _append_in_transaction(output, rows, request)
        if appended is not None:
            return appended
    _claim_owner(output, request)
    writer = (
        rows.write.format("delta")
        .mode(mode)
        .option("userMetadata", request.user_metadata)
        .option("txnAppId", request.app_id)
        .option("txnVersion", request.seq)
    )
    if mode == "overwrite":
        writer = writer.option("overwriteSchema", "true")
        _map_columns_if_needed(output, rows.columns)
    with _conflicts_are_concurrent(output):
        if output.ref.path is not None:
            writer.save(output.ref.path)
        else:
            writer.saveAsTable(output.ref.name)
    return _find_commit(output, request, mode)


def _append_in_transaction(output: DeltaHandle, rows: DataFrame, request: CommitRequest) -> Commit | None:
    """Append through :class:`..runtime.internals.AppendTransaction` (no rebuild of the output's state)
    when the output is still at the version the refresh planned against and the rows fit it as they are;
    None when Delta's writer must do it instead (Spark Connect, an owner to claim, a moved output, other
    columns)."""
    if request.read_version is None or request.claim or is_connect(output.spark):
        return None
    with _conflicts_are_concurrent(output):
        transaction = internals.AppendTransaction(output.spark, output.storage_path(), request.app_id)
        if transaction.version != request.read_version or not transaction.accepts(_column_types(rows.schema)):
            return None
        files = transaction.write_files(rows)
        phase("committing")
        with metadata_settings(output.spark, request.user_metadata):
            transaction.commit(files, request.seq)
    return _find_commit(output, request, "append")


def _create_table(output: DeltaHandle, rows: DataFrame, request: CommitRequest) -> Commit:
    """Create the output (CTAS) with CDF, deletion vectors and ``fkjoin.owner`` in its first commit."""
    if needs_column_mapping(rows.columns):
        return _create_mapped_table(output, rows, request)
    return _create_as_select(output, rows, {**OUTPUT_PROPERTIES, OWNER_PROPERTY: request.owner}, request)


def _create_mapped_table(output: DeltaHandle, rows: DataFrame, request: CommitRequest) -> Commit:
    """Create an output whose column names need column mapping (``order id``).

    Delta refuses change data feed and column mapping together in one CREATE TABLE AS SELECT, so the
    table is created empty with column mapping and its owner, then gets its change data feed, and its rows
    come last, in the commit that carries the refresh's progress. A crash before that commit leaves an
    empty table with no progress, which the next refresh rebuilds in full."""
    created = {**OUTPUT_PROPERTIES, **COLUMN_MAPPING, OWNER_PROPERTY: request.owner}
    cdf = "delta.enableChangeDataFeed"
    _create_as_select(output, rows.limit(0), {k: v for k, v in created.items() if k != cdf}, None)
    output.spark.sql(f"ALTER TABLE {output.sql_identifier} SET TBLPROPERTIES ('{cdf}' = 'true')")
    return _write_rows(output, rows, dataclasses.replace(request, claim=False), "append")


def _create_as_select(
    output: DeltaHandle, rows: DataFrame, properties: dict[str, str], request: CommitRequest | None
) -> Commit | None:
    """CREATE TABLE AS SELECT with these properties; with a ``request``, the commit carries its progress.

    Over what a killed create left (:meth:`DeltaHandle.left_by_failed_create`), which Delta's CREATE
    refuses as an existing table, the create is a CREATE OR REPLACE (:func:`_undo_a_replace`)."""
    writer = rows.writeTo(output.sql_identifier).using("delta")
    for name, value in properties.items():
        writer = writer.tableProperty(name, value)
    over_leftovers = output.left_by_failed_create()
    token = request.token if request is not None else f"fkjoin-create {secrets.token_hex(8)}"
    if request is not None:
        settings = commit_settings(
            output.spark, user_metadata=request.user_metadata, app_id=request.app_id, seq=request.seq
        )
    elif over_leftovers:
        settings = metadata_settings(output.spark, token)
    else:
        settings = contextlib.nullcontext()
    try:
        with _conflicts_are_concurrent(output), settings:
            if over_leftovers:
                writer.createOrReplace()
            else:
                writer.create()
    except AnalysisException as exc:
        text = str(exc)
        if "ALREADY_EXISTS" in text or "already exists" in text.lower():
            raise _concurrent(output, exc) from None
        raise
    if over_leftovers:
        _undo_a_replace(output, token)
    return _find_commit(output, request, "create") if request is not None else None


def _undo_a_replace(output: DeltaHandle, token: str) -> None:
    """Put back a table that a create over a killed create's leftovers replaced.

    Delta's CREATE OR REPLACE conflicts with a table committed after its transaction began, but not with
    one committed between the leftovers check and that moment (while Spark plans the create). Then the
    create, which must be the table's first commit, is not: restore the table to the version before it
    and fail as a concurrent refresh. Readers may have seen this refresh's rows meanwhile, and the
    restored table keeps the table features the create enabled."""
    history = output.history(20)
    ours = next((int(r["version"]) for r in history if r["userMetadata"] and token in r["userMetadata"]), 0)
    if ours == 0:
        return
    restore = f"RESTORE TABLE {output.sql_identifier} TO VERSION AS OF {ours - 1}"
    problem = (
        f"output {output.location}: a table was committed there while this refresh was creating the "
        f"output over what a killed create had left, and the create replaced it (version {ours})"
    )
    if int(history[0]["version"]) != ours:
        raise ConcurrentRefreshError(f"{problem}; later commits followed, so it was not undone: {restore}")
    try:
        with _conflicts_are_concurrent(output):
            output.spark.sql(restore)
    except Exception:
        log.error("%s; restoring it failed: run %s", problem, restore)
        raise
    raise ConcurrentRefreshError(f"{problem}; it is restored to version {ours - 1}. Retry the refresh.")


def require_writable_columns(columns: list[str]) -> None:
    """Refuse an output column whose name Delta's own MERGE and UPDATE cannot resolve (a backtick), before
    anything is written: the output could be created, but never maintained.

    >>> require_writable_columns(["order id", "na`me"])
    SpecError: output: column 'na`me' holds a backtick ...
    """
    for name in columns:
        if "`" in name:
            escaped = name.replace("`", "``")
            plain = re.sub(r"\W+", "_", name).strip("_") or "column"
            raise SpecError(
                f"output: column {name!r} holds a backtick, which Delta's MERGE and UPDATE cannot name, so "
                f"the output could not be refreshed; name the output columns with columns, e.g. "
                f"columns: {{{plain}: <alias>.`{escaped}`}}"
            )


def _map_columns_if_needed(output: DeltaHandle, columns: list[str]) -> None:
    """Turn column mapping on before an overwrite brings a column name that needs it (a metadata-only
    commit: the rows are unchanged)."""
    if (
        needs_column_mapping(columns)
        and output.state().properties.get("delta.columnMapping.mode", "none") == "none"
    ):
        settings = ", ".join(f"'{k}' = '{v}'" for k, v in COLUMN_MAPPING.items())
        output.spark.sql(f"ALTER TABLE {output.sql_identifier} SET TBLPROPERTIES ({settings})")


def _claim_owner(output: DeltaHandle, request: CommitRequest) -> None:
    """Record the owner on a table this spec adopts (or that predates owners), just before its commit."""
    if not request.claim:
        return
    output.spark.sql(
        f"ALTER TABLE {output.sql_identifier} SET TBLPROPERTIES "
        f"('{OWNER_PROPERTY}' = {_sql_string(request.owner)}, "
        + ", ".join(f"'{k}' = '{v}'" for k, v in OUTPUT_PROPERTIES.items())
        + ")"
    )


def _sql_string(value: str) -> str:
    """A single-quoted SQL string literal (TBLPROPERTIES takes literals only, not expressions)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _write_output(
    output: DeltaHandle, rows: DataFrame, key: list[str], request: CommitRequest, mode: str
) -> Commit:
    """Write ``rows`` as the whole output in one commit, laid out by key for pruned merges later."""
    laid_out = rows.repartitionByRange(*[quote(c) for c in key]).sortWithinPartitions(
        *[quote(c) for c in key]
    )
    return _write_rows(output, laid_out, request, mode)


def create_output(output: DeltaHandle, rows: DataFrame, key: list[str], request: CommitRequest) -> Commit:
    """Create the output table from ``rows``; another refresh creating it first is a conflict."""
    return _write_output(output, rows, key, request, "create")


def replace_output(output: DeltaHandle, rows: DataFrame, key: list[str], request: CommitRequest) -> Commit:
    """Overwrite the output, schema included, in one commit (a spec whose columns changed)."""
    return _write_output(output, rows, key, request, "overwrite")


def merge_output(
    output: DeltaHandle,
    source: DataFrame,
    key: list[str],
    value_columns: list[str],
    request: CommitRequest,
    *,
    delete_unmatched: bool = False,
    null_safe: bool = False,
) -> Commit:
    """Reconcile the output with ``source`` in one MERGE commit.

    ``source`` holds the key, the value columns and ``_fkjoin_present``. With ``delete_unmatched`` (a full
    rebuild) every output key missing from ``source`` is deleted as well. ``null_safe`` keys (a declared
    ``pkey`` may hold nulls) match with ``<=>``.
    """
    all_columns = key + value_columns
    require_writable_columns(all_columns)
    _require_same_columns(output, source, all_columns)
    equals = "<=>" if null_safe else "="
    on = " AND ".join(f"t.{quote(c)} {equals} s.{quote(c)}" for c in key)
    if not delete_unmatched:
        prune = _key_prune_condition(source, key)
        if prune is not None:
            on = f"{on} AND {prune}"
    types = {f.name: f.dataType for f in source.schema.fields}
    changed = f"NOT ({values_equal('t', 's', [(c, types[c]) for c in value_columns])})"
    names = ", ".join(quote(c) for c in all_columns)
    values = ", ".join(f"s.{quote(c)}" for c in all_columns)
    assignments = ", ".join(f"{quote(c)} = s.{quote(c)}" for c in all_columns)
    view = f"_fkjoin_merge_source_{secrets.token_hex(8)}"
    # Delta's SQL MERGE, not delta-spark's DeltaTable builder: the same command, and it also runs over
    # Spark Connect, where the builder would need Delta's Connect server plugin. Every name in it is
    # quoted (quote(), sql_identifier) and it holds no value but the salted key hashes.
    statement = (
        f"MERGE INTO {output.sql_identifier} AS t USING {view} AS s ON {on} "  # noqa: S608
        f"WHEN MATCHED AND NOT s.{PRESENT} THEN DELETE "
        f"WHEN MATCHED AND s.{PRESENT} AND {changed} THEN UPDATE SET {assignments} "
        f"WHEN NOT MATCHED AND s.{PRESENT} THEN INSERT ({names}) VALUES ({values})"
        + (" WHEN NOT MATCHED BY SOURCE THEN DELETE" if delete_unmatched else "")
    )
    spark = output.spark
    _claim_owner(output, request)
    source.createOrReplaceTempView(view)
    try:
        with (
            _conflicts_are_concurrent(output),
            commit_settings(
                spark, user_metadata=request.user_metadata, app_id=request.app_id, seq=request.seq
            ),
            session_settings(spark, {"spark.sql.join.preferSortMergeJoin": "false"}),
        ):
            spark.sql(statement)
    finally:
        spark.catalog.dropTempView(view)
    return _find_commit(output, request, "merge")


def write_full_output(
    output: DeltaHandle,
    rows: DataFrame,
    key: list[str],
    value_columns: list[str],
    request: CommitRequest,
    *,
    null_safe: bool = False,
) -> Commit:
    """Make the output hold exactly ``rows`` (a full rebuild) in one commit.

    Creates the output on the first run; with the same columns it reconciles by MERGE, so only keys
    whose value changed are rewritten and the change feed stays clean; with other columns (the spec
    changed them) it replaces the table, schema included.

    >>> write_full_output(output, snapshot_rows, ["product_id"], ["name", "price"], request).version
    4
    """
    if not output.exists():
        return create_output(output, rows, key, request)
    same = _column_types(output.read().schema) == _column_types(rows.schema)
    if same:
        source = rows.withColumn(PRESENT, F.lit(True))
        return merge_output(
            output, source, key, value_columns, request, delete_unmatched=True, null_safe=null_safe
        )
    return replace_output(output, rows, key, request)


def append_output(
    output: DeltaHandle, rows: DataFrame, request: CommitRequest, *, replace: bool = False
) -> Commit:
    """Append ``rows`` to the output (creating it) in one commit, or replace it with them.

    For append-only outputs (a stream join): no key layout, so the rows are written as they come,
    without a shuffle. The transaction id makes a second writer of the same refresh a no-op
    (Delta skips a txnVersion it has seen), so a retried append never duplicates rows.

    >>> append_output(output, joined_batch, request).inserted
    120
    """
    if not output.exists():
        return _write_rows(output, rows, request, "create")
    return _write_rows(output, rows, request, "overwrite" if replace else "append")


def _key_prune_condition(source: DataFrame, key: list[str]) -> str | None:
    """``xxhash64(salt, t.<key>...) IN (<the source keys' hashes>)`` when the source is small, else None.

    Delta's MERGE joins ``source LEFT OUTER JOIN target`` over every file that holds a changed key,
    and changes spread over the key range touch every file. Spark cannot broadcast the preserved
    side of an outer join, so without this the whole output is shuffled. The predicate is evaluated
    in the target's scan: the touched files are still read, but only matching rows reach the join,
    which then broadcasts them.

    Delta records the MERGE condition in the commit's history, readable by anyone with ``DESCRIBE
    HISTORY``; keys are often personal data (emails, account numbers), so the condition lists salted
    hashes, never key values. A hash collision only lets an extra row into the join, where the key
    equality drops it. The predicate is one SQL string: ``Column.isin`` costs a py4j call per value.
    """
    salt = secrets.randbits(62)
    hashed = F.xxhash64(F.lit(salt).cast("bigint"), *[F.col(quote(c)) for c in key])
    values = source.select(hashed.alias("h")).distinct()
    found = values.limit(KEY_PRUNE_LIMIT + 1).collect()
    if len(found) > KEY_PRUNE_LIMIT:
        return None
    if not found:
        return "FALSE"
    columns = ", ".join(f"t.{quote(c)}" for c in key)
    literals = ", ".join(f"{int(row[0])}L" for row in found)
    return f"xxhash64(CAST({salt} AS BIGINT), {columns}) IN ({literals})"


def _column_types(schema: T.StructType) -> list[tuple[str, str]]:
    """Columns as (name, type) ignoring nullability, which Delta does not keep exactly."""
    return [(field.name, field.dataType.simpleString()) for field in schema.fields]


def _require_same_columns(output: DeltaHandle, source: DataFrame, columns: list[str]) -> None:
    """An incremental MERGE needs the output to have exactly the join's columns; else rebuild."""
    wanted = {f.name: f.dataType.simpleString() for f in source.schema.fields if f.name in columns}
    have = dict(_column_types(output.read().schema))
    if {c: wanted.get(c) for c in columns} != have:
        raise RebuildRequired(
            f"the output {output.location}'s columns {have} differ from the join's columns "
            f"{dict((c, wanted.get(c)) for c in columns)}"
        )


_INTEGER_SUFFIX = {T.ByteType: "Y", T.ShortType: "S", T.IntegerType: "", T.LongType: "L"}


def sql_literal(value: object, data_type: T.DataType) -> str:
    """A Spark SQL literal of an exact key value and type, whatever the parser's escape settings.

    Integers carry their type's suffix, so the IN list needs no coercion. Strings are written as
    UTF-8 bytes in hex and cast back, so quotes, backslashes and newlines in a key cannot change the
    SQL; the optimizer folds the casts into constants.

    >>> sql_literal(42, T.LongType()), sql_literal("it's", T.StringType())
    ('42L', "CAST(X'69742773' AS STRING)")
    >>> sql_literal(datetime.date(2026, 1, 2), T.DateType())
    "DATE'2026-01-02'"
    """
    suffix = _INTEGER_SUFFIX.get(type(data_type))
    if suffix is not None and isinstance(value, int) and not isinstance(value, bool):
        return f"{value}{suffix}"
    if isinstance(data_type, T.StringType) and isinstance(value, str):
        return f"CAST(X'{value.encode('utf-8').hex()}' AS STRING)"
    if (
        isinstance(data_type, T.DateType)
        and isinstance(value, datetime.date)
        and not isinstance(value, datetime.datetime)
    ):
        return f"DATE'{value.isoformat()}'"
    raise TypeError(f"not an exact {data_type.simpleString()} key literal: {value!r}")

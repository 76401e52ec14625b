"""Writing an output table: create, reconcile by MERGE, or replace, always one Delta commit per refresh.

The commit carries the refresh's progress (see :mod:`.commit_log`), so data and progress land together.
A MERGE source row is either a new joined value (``_fkjoin_present`` true) or a retraction of a key
(false). Matched rows whose value is unchanged are left alone, and a retraction only deletes a key the
output holds, so the output's change feed has at most one net change per key and no no-op updates.
"""

from __future__ import annotations

import datetime
import logging
from dataclasses import dataclass
from typing import Any

from delta.exceptions import DeltaConcurrentModificationException
from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from .commit_log import (
    InputProgress,
    Progress,
    commit_settings,
    new_progress_metadata,
    session_settings,
    transaction_app_id,
)
from .errors import ConcurrentRefreshError
from .planning import RefreshPlan, refresh_result
from .spec import quote
from .tables import DeltaHandle, null_safe_equal

log = logging.getLogger(__name__)

PRESENT = "_fkjoin_present"
# Up to this many distinct keys, the MERGE condition names them as literals (see ``_key_prune_condition``).
KEY_PRUNE_LIMIT = 100_000
_PRUNABLE_KEY_TYPES = (T.ByteType, T.ShortType, T.IntegerType, T.LongType, T.StringType, T.DateType)
OUTPUT_PROPERTIES = {
    "delta.enableChangeDataFeed": "true",
    "delta.enableDeletionVectors": "true",
}


@dataclass(frozen=True)
class Commit:
    """One output commit and what it changed."""

    version: int
    inserted: int
    updated: int
    deleted: int


@dataclass(frozen=True)
class CommitRequest:
    """What identifies a refresh's commit: its progress metadata, transaction id and sequence number."""

    user_metadata: str
    token: str
    app_id: str
    seq: int


@dataclass
class RefreshContext:
    """One refresh of one output, from its pinned inputs to its result: what every kind shares.

    ``consumed`` is what the refresh's commit records per input; ``warnings`` collects what the
    result reports and logs (a list the caller may keep appending to until then).

    >>> refresh = RefreshContext("foreign_key_join", out, read_progress(out), "9f2c",
    ...                          {"left": state.consumed()}, time.monotonic(), [])
    >>> refresh.request("full", "first run").seq
    1
    """

    kind: str
    output: DeltaHandle
    previous: Progress | None
    fingerprint: str
    consumed: dict[str, InputProgress]
    started: float
    warnings: list[str]

    def request(self, mode: str, reason: str) -> CommitRequest:
        """The identity of the refresh commit that follows ``previous``: next seq, progress, txn id."""
        seq = (self.previous.seq if self.previous else 0) + 1
        metadata, token = new_progress_metadata(
            seq=seq,
            kind=self.kind,
            fingerprint=self.fingerprint,
            mode=mode,
            inputs=self.consumed,
            reason=reason,
        )
        return CommitRequest(metadata, token, transaction_app_id(self.output.location), seq)

    def result(
        self,
        plan: RefreshPlan,
        output_version: int | None,
        rows: dict[str, Any],
        *,
        inputs: dict[str, dict[str, Any]] | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        """The result dict (its warnings logged once); ``inputs`` defaults to each consumed input's path
        and version range."""
        for warning in self.warnings:
            log.warning(warning)
        if inputs is None:
            inputs = {
                side: {
                    "path": progress.location,
                    "from_version": plan.from_versions.get(side),
                    "to_version": progress.version,
                }
                for side, progress in self.consumed.items()
            }
        return refresh_result(
            kind=self.kind,
            plan=plan,
            output_location=self.output.location,
            output_version=output_version,
            inputs=inputs,
            rows=rows,
            warnings=self.warnings,
            started=self.started,
            **extra,
        )


def _concurrent(output: DeltaHandle, cause: Exception | None = None) -> ConcurrentRefreshError:
    detail = f" ({type(cause).__name__})" if cause else ""
    return ConcurrentRefreshError(
        f"output {output.location}: another refresh committed first{detail}; nothing of this refresh was "
        "written. Retry: the retry continues from the versions the other refresh consumed."
    )


def _find_commit(output: DeltaHandle, request: CommitRequest) -> Commit:
    """Our commit in the output's recent history, found by token; its absence means Delta skipped it."""
    for row in output.history(20):
        if row["userMetadata"] and request.token in row["userMetadata"]:
            metrics = row["operationMetrics"]
            return Commit(
                version=int(row["version"]),
                inserted=int(metrics.get("numTargetRowsInserted", metrics.get("numOutputRows", 0))),
                updated=int(metrics.get("numTargetRowsUpdated", 0)),
                deleted=int(metrics.get("numTargetRowsDeleted", 0)),
            )
    raise _concurrent(output)


def _write_rows(
    output: DeltaHandle, rows: DataFrame, request: CommitRequest, mode: str, *, set_properties: bool
) -> Commit:
    """Write ``rows`` to the output in one commit carrying the refresh's progress and transaction id.

    ``mode`` is Delta's save mode: ``errorifexists`` (create), ``overwrite`` (replace, schema
    included) or ``append``. Another refresh creating or committing first is a ConcurrentRefreshError.
    """
    writer = (
        rows.write.format("delta")
        .mode(mode)
        .option("userMetadata", request.user_metadata)
        .option("txnAppId", request.app_id)
        .option("txnVersion", request.seq)
    )
    if mode == "overwrite":
        writer = writer.option("overwriteSchema", "true")
    if set_properties:
        for name, value in OUTPUT_PROPERTIES.items():
            writer = writer.option(name, value)
    try:
        if output.ref.path is not None:
            writer.save(output.ref.path)
        else:
            writer.saveAsTable(output.ref.name)
    except AnalysisException as exc:
        text = str(exc)
        if mode == "errorifexists" and ("already exists" in text.lower() or "EXISTS" in text):
            raise _concurrent(output, exc) from None
        raise
    except DeltaConcurrentModificationException as exc:
        raise _concurrent(output, exc) from None
    return _find_commit(output, request)


def _write_output(
    output: DeltaHandle, rows: DataFrame, key: list[str], request: CommitRequest, mode: str
) -> Commit:
    """Write ``rows`` as the whole output in one commit, laid out by key for pruned merges later."""
    laid_out = rows.repartitionByRange(*[quote(c) for c in key]).sortWithinPartitions(
        *[quote(c) for c in key]
    )
    return _write_rows(output, laid_out, request, mode, set_properties=True)


def create_output(output: DeltaHandle, rows: DataFrame, key: list[str], request: CommitRequest) -> Commit:
    """Create the output table from ``rows``; another refresh creating it first is a conflict."""
    return _write_output(output, rows, key, request, "errorifexists")


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
) -> Commit:
    """Reconcile the output with ``source`` in one MERGE commit.

    ``source`` holds the key, the value columns and ``_fkjoin_present``. With ``delete_unmatched`` (a full
    rebuild) every output key missing from ``source`` is deleted as well.
    """
    on = F.expr(" AND ".join(f"t.{quote(c)} = s.{quote(c)}" for c in key))
    if not delete_unmatched:
        prune = _key_prune_condition(source, key[0])
        if prune is not None:
            on = on & prune
    all_columns = key + value_columns
    values = {quote(c): f"s.{quote(c)}" for c in all_columns}
    changed = f"NOT ({null_safe_equal('t', 's', value_columns)})"
    builder = (
        output.delta_table.alias("t")
        .merge(source.alias("s"), on)
        .whenMatchedDelete(condition=f"NOT s.{PRESENT}")
        .whenMatchedUpdate(condition=f"s.{PRESENT} AND {changed}", set=values)
        .whenNotMatchedInsert(condition=f"s.{PRESENT}", values=values)
    )
    if delete_unmatched:
        builder = builder.whenNotMatchedBySourceDelete()
    spark = output.spark
    try:
        with (
            commit_settings(
                spark, user_metadata=request.user_metadata, app_id=request.app_id, seq=request.seq
            ),
            session_settings(spark, {"spark.sql.join.preferSortMergeJoin": "false"}),
        ):
            builder.execute()
    except DeltaConcurrentModificationException as exc:
        raise _concurrent(output, exc) from None
    return _find_commit(output, request)


def write_full_output(
    output: DeltaHandle, rows: DataFrame, key: list[str], value_columns: list[str], request: CommitRequest
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
    current = output.read().schema
    same = [(f.name, f.dataType) for f in current.fields] == [
        (f.name, f.dataType) for f in rows.schema.fields
    ]
    if same:
        source = rows.withColumn(PRESENT, F.lit(True))
        return merge_output(output, source, key, value_columns, request, delete_unmatched=True)
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
    creating = not output.exists()
    mode = "overwrite" if replace else "append"
    return _write_rows(output, rows, request, mode, set_properties=creating or replace)


def _key_prune_condition(source: DataFrame, column: str) -> Column | None:
    """``t.<key> IN (<the source's keys>)`` when the source is small, else None.

    Delta's MERGE joins ``source LEFT OUTER JOIN target`` over every file that holds a changed key,
    and changes spread over the key range touch every file. Spark cannot broadcast the preserved
    side of an outer join, so without this the whole output is shuffled. The literal predicate is
    evaluated in the target's scan: the touched files are still read, but only matching rows reach
    the join, which then broadcasts them. Delta also uses it to skip files by their key statistics.
    Only exact-valued types are named as literals; others fall back to the plain join.

    The predicate is built as one SQL string: ``Column.isin`` makes a py4j call per value, which
    took 6-7 s for 17,000 keys; parsing the string takes milliseconds.
    """
    if not isinstance(source.schema[column].dataType, _PRUNABLE_KEY_TYPES):
        return None
    values = source.select(quote(column)).where(F.col(quote(column)).isNotNull()).distinct()
    found = values.limit(KEY_PRUNE_LIMIT + 1).collect()
    if len(found) > KEY_PRUNE_LIMIT:
        return None
    if not found:
        return F.lit(False)
    data_type = source.schema[column].dataType
    literals = ", ".join(sql_literal(row[0], data_type) for row in found)
    return F.expr(f"t.{quote(column)} IN ({literals})")


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

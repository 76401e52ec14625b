"""Writing an output table: create, reconcile by MERGE, or replace, always one Delta commit per refresh.

The commit carries the refresh's progress (see :mod:`.progress`), so data and progress land together.
A MERGE source row is either a new joined value (``_fkjoin_present`` true) or a retraction of a key
(false). Matched rows whose value is unchanged are left alone, and a retraction only deletes a key the
output holds, so the output's change feed has at most one net change per key and no no-op updates.
"""

from __future__ import annotations

from dataclasses import dataclass

from delta.exceptions import DeltaConcurrentModificationException
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame

from .errors import ConcurrentRefreshError
from .progress import commit_settings
from .spec import quote
from .tables import DeltaHandle, null_safe_equal

PRESENT = "_fkjoin_present"
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


def _write_output(
    output: DeltaHandle, rows: DataFrame, key: list[str], request: CommitRequest, mode: str
) -> Commit:
    """Write ``rows`` as the whole output in one commit, laid out by key for pruned merges later."""
    writer = (
        rows.repartitionByRange(*[quote(c) for c in key])
        .sortWithinPartitions(*[quote(c) for c in key])
        .write.format("delta")
        .mode(mode)
        .option("userMetadata", request.user_metadata)
        .option("txnAppId", request.app_id)
        .option("txnVersion", request.seq)
    )
    if mode == "overwrite":
        writer = writer.option("overwriteSchema", "true")
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
    on = " AND ".join(f"t.{quote(c)} = s.{quote(c)}" for c in key)
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
        with commit_settings(
            spark, user_metadata=request.user_metadata, app_id=request.app_id, seq=request.seq
        ):
            builder.execute()
    except DeltaConcurrentModificationException as exc:
        raise _concurrent(output, exc) from None
    return _find_commit(output, request)

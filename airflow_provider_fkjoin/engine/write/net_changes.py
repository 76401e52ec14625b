"""Applying a refresh's net changes to a keyed output without MERGE: the output's values are never read.

Delta's MERGE reads every column of every file that holds a changed key, to build the change feed's
pre-images and to skip unchanged rows; with changes spread over the key range that is the whole
output. But the engine knows each affected output row's previous value without reading it: the
output equals the join at the versions the last refresh consumed (the exactly-once invariant), so
the previous value is the same join over the inputs' pre-images (:func:`.changes.first_images`).
A kind computes the previous and the new values of its affected keys, and this module:

1. classifies each key (:func:`net_changes`): ``insert``, ``update`` (pre- and post-image differ),
   ``delete``, or nothing when the value is unchanged;
2. reads only the output's key columns, with each row's file and row index, and checks the proof
   that the invariant holds for these keys: every updated or deleted key is in the output exactly
   once, and no inserted key is in it;
3. writes, in one Delta ``UPDATE`` commit that also carries the refresh's progress and transaction
   id: deletion vectors for the replaced rows, the new rows, and the change-data rows.

When the proof fails, or the output moved since the refresh read its log, :class:`MergeRequired`
sends the kind back to MERGE, which does not rely on the invariant.

    >>> changes = net_changes(old_rows, new_rows, ["order_id"], ["status", "city"])
    >>> commit_net_changes(output, changes, ["order_id"], request, expected_version=7).updated
    12
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark import StorageLevel
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ..core.errors import ConcurrentRefreshError
from ..core.planning import RebuildRequired
from ..core.progress import metadata_settings, session_settings, with_row_counts, without_commit_metadata
from ..core.spec import quote
from ..core.trace import phase
from ..delta.changes import maybe_broadcast
from ..delta.tables import DeltaHandle, values_equal
from ..runtime import internals

#: Compaction thresholds: a refresh compacts its output when ``COMPACT_SMALL_FILES`` files are small
#: (under ``SMALL_FILE_BYTES`` and under ``SMALL_FILE_SHARE`` of the table's mean file size: each refresh
#: adds one such file, while a small table's own files are not "small" against each other), or when a
#: file of at least ``DV_MIN_ROWS`` rows has deletion vectors hiding more than ``DELETED_ROWS_RATIO`` of
#: them (Delta's own OPTIMIZE default for rewriting such a file).
COMPACT_SMALL_FILES = 8
SMALL_FILE_BYTES = 32 * 1024 * 1024
SMALL_FILE_SHARE = 0.25
DELETED_ROWS_RATIO = 0.05
DV_MIN_ROWS = 100_000

CHANGE = "_fkjoin_change"
#: How many rows the output must hold for the key before the commit (1 when it had a previous row).
EXPECTED = "_fkjoin_expected"
PRE_IMAGE = "_fkjoin_pre_"
_OLD, _NEW = "_fkjoin_had", "_fkjoin_has"


class MergeRequired(Exception):
    """The net-change commit cannot prove it is right for this refresh; the message says why."""


@dataclass
class NetChanges:
    """Every affected key (cached): key, post-image values, ``_fkjoin_pre_<column>`` pre-image values,
    ``_fkjoin_change`` (null when the value did not change) and ``_fkjoin_expected`` (the rows the
    output holds for the key, by the inputs), with the count of each kind of change."""

    frame: DataFrame
    inserted: int
    updated: int
    deleted: int
    keys: int = 0

    @property
    def total(self) -> int:
        return self.inserted + self.updated + self.deleted

    def release(self) -> None:
        self.frame.unpersist()


def net_changes(old: DataFrame, new: DataFrame, key: list[str], value_columns: list[str]) -> NetChanges:
    """Classify each key of ``old`` (previous output rows) and ``new`` (its rows after this refresh).

    Both hold the key and value columns; a key missing from ``old`` is an insert, missing from ``new``
    a delete, and in both an update only when a value differs (``values_equal``, so maps and variants
    compare by value). Unchanged keys stay in the frame (no change) so the commit can check that the
    output holds them as the inputs say. One job materialises the frame and counts the changes.
    """
    types = {f.name: f.dataType for f in new.schema.fields}
    o = old.select(*[quote(c) for c in key + value_columns]).withColumn(_OLD, F.lit(True)).alias("o")
    n = new.select(*[quote(c) for c in key + value_columns]).withColumn(_NEW, F.lit(True)).alias("n")
    on = None
    for column in key:
        term = F.col(f"o.{quote(column)}") == F.col(f"n.{quote(column)}")
        on = term if on is None else on & term
    joined = o.join(n, on, "full_outer")
    same = F.expr(values_equal("o", "n", [(c, types[c]) for c in value_columns]))
    had, has = F.col(f"o.{_OLD}").isNotNull(), F.col(f"n.{_NEW}").isNotNull()
    change = F.when(had & has & ~same, "update").when(had & ~has, "delete").when(~had & has, "insert")
    frame = joined.select(
        *[F.coalesce(F.col(f"n.{quote(c)}"), F.col(f"o.{quote(c)}")).alias(c) for c in key],
        *[F.col(f"n.{quote(c)}").alias(c) for c in value_columns],
        *[F.col(f"o.{quote(c)}").alias(PRE_IMAGE + c) for c in value_columns],
        change.alias(CHANGE),
        had.cast("int").alias(EXPECTED),
    ).persist(StorageLevel.MEMORY_AND_DISK)
    counts = {row[CHANGE]: int(row["count"]) for row in frame.groupBy(CHANGE).count().collect()}
    return NetChanges(
        frame,
        counts.get("insert", 0),
        counts.get("update", 0),
        counts.get("delete", 0),
        sum(counts.values()),
    )


@dataclass(frozen=True)
class NetCommit:
    """A net-change commit's version, and whether the output was compacted after it."""

    version: int
    compact: bool


def commit_net_changes(
    output: DeltaHandle,
    changes: NetChanges,
    key: list[str],
    *,
    user_metadata: str,
    app_id: str,
    seq: int,
    expected_version: int,
) -> NetCommit:
    """Apply ``changes`` to the output in one commit (see the module docstring); returns its version
    and whether the output's files now need compacting (:func:`compact_output`).

    Raises :class:`MergeRequired` when the output is not at ``expected_version`` (the version the
    refresh planned against) or does not hold the keys the changes assume; nothing is written then.
    """
    transaction = internals.OutputTransaction(output.spark, output.storage_path())
    if transaction.version != expected_version:
        raise MergeRequired(
            f"the output is at version {transaction.version}, not {expected_version} as when the "
            "refresh began"
        )
    _require_properties(transaction)
    # Read through the transaction so Delta fails the commit if another run of this refresh commits
    # first, even one that changed no file (the version itself was checked against the log above).
    transaction.read_transaction_version(app_id)
    live = transaction.live_rows()
    table_columns = [c for c in live.columns if c not in ("_fkjoin_file", "_fkjoin_row")]
    _require_columns(output, live, changes.frame, table_columns)
    action_groups = []
    located: DataFrame | None = None
    try:
        if changes.keys:
            wanted = changes.frame.select(*[quote(c) for c in key], CHANGE, EXPECTED)
            located = (
                live.select(*[quote(c) for c in key], "_fkjoin_file", "_fkjoin_row")
                .join(maybe_broadcast(wanted, changes.keys), on=key, how="inner")
                .persist(StorageLevel.MEMORY_AND_DISK)
            )
            _prove(located, wanted, key)
            if changes.updated or changes.deleted:
                replaced = located.where(F.col(CHANGE).isin("update", "delete"))
                action_groups.append(transaction.deletion_vectors(replaced))
        if changes.total:
            action_groups.append(transaction.write_files(_rows_to_write(changes.frame, table_columns)))
        layout = transaction.layout(SMALL_FILE_BYTES, SMALL_FILE_SHARE, DELETED_ROWS_RATIO, DV_MIN_ROWS)
        compact = layout["small_files"] >= COMPACT_SMALL_FILES or layout["files_over_ratio"] > 0
        phase("committing")
        counts = {"inserted": changes.inserted, "updated": changes.updated, "deleted": changes.deleted}
        with metadata_settings(output.spark, with_row_counts(user_metadata, counts)):
            return NetCommit(transaction.commit(action_groups, app_id, seq), compact)
    except Exception as error:
        if internals.is_concurrent_modification(error):
            raise ConcurrentRefreshError(
                f"output {output.location}: another refresh committed first; nothing of this refresh was "
                "written. Retry: the retry continues from the versions the other refresh consumed."
            ) from None
        raise
    finally:
        if located is not None:
            located.unpersist()


def _require_columns(
    output: DeltaHandle, live: DataFrame, frame: DataFrame, table_columns: list[str]
) -> None:
    """The output must have exactly the join's columns and types (else the refresh rebuilds it)."""
    have = {f.name: f.dataType.simpleString() for f in live.schema.fields if f.name in table_columns}
    want = {
        f.name: f.dataType.simpleString()
        for f in frame.schema.fields
        if f.name not in (CHANGE, EXPECTED) and not f.name.startswith(PRE_IMAGE)
    }
    if have != want:
        raise RebuildRequired(
            f"the output {output.location}'s columns {have} differ from the join's columns {want}"
        )


def _require_properties(transaction: internals.OutputTransaction) -> None:
    """The output must keep a change feed and take deletion vectors, with nothing that a commit built
    by hand would not maintain (row tracking, a commit coordinator); else MERGE writes the refresh."""
    if (transaction.table_property("delta.enableChangeDataFeed") or "").lower() != "true":
        raise MergeRequired("the output's change data feed is off (delta.enableChangeDataFeed)")
    if (transaction.table_property("delta.enableDeletionVectors") or "").lower() != "true":
        raise MergeRequired("the output does not take deletion vectors (delta.enableDeletionVectors)")
    if (transaction.table_property("delta.enableRowTracking") or "").lower() == "true":
        raise MergeRequired("the output tracks row lineage (delta.enableRowTracking)")
    for name in (
        "delta.coordinatedCommits.commitCoordinator-preview",
        "delta.coordinatedCommits.commitCoordinator",
    ):
        if transaction.table_property(name):
            raise MergeRequired(f"the output's commits are coordinated ({name})")


def _prove(located: DataFrame, wanted: DataFrame, key: list[str]) -> None:
    """Every affected key is in the output as often as the inputs say: once if it had a previous row
    (updated, deleted or unchanged), never if not (inserted). One job."""
    found = located.groupBy(*[quote(c) for c in key]).agg(F.count(F.lit(1)).alias("_fkjoin_n"))
    checked = wanted.join(found, on=key, how="left").select(
        F.sum(F.when(F.coalesce(F.col("_fkjoin_n"), F.lit(0)) != F.col(EXPECTED), 1).otherwise(0)).alias(
            "bad"
        )
    )
    bad = checked.first()["bad"] or 0
    if bad:
        raise MergeRequired(
            f"{bad} affected key(s) are not in the output as the inputs' previous versions say; "
            "the output holds something other than the last refresh's join"
        )


def _rows_to_write(frame: DataFrame, table_columns: list[str]) -> DataFrame:
    """The new rows (``_change_type`` null: data files) and the change-data rows, in one frame."""
    change = F.col(CHANGE)
    post = [F.col(quote(c)) for c in table_columns]
    pre = [
        F.col(quote(PRE_IMAGE + c)).alias(c) if (PRE_IMAGE + c) in frame.columns else F.col(quote(c))
        for c in table_columns
    ]
    frame = frame.where(change.isNotNull())
    new_rows = frame.where(change != "delete")
    return (
        new_rows.select(*post, F.lit(None).cast("string").alias("_change_type"))
        .unionByName(
            new_rows.select(
                *post,
                F.when(change == "update", "update_postimage").otherwise("insert").alias("_change_type"),
            )
        )
        .unionByName(
            frame.where(change != "insert").select(
                *pre, F.when(change == "update", "update_preimage").otherwise("delete").alias("_change_type")
            )
        )
        .coalesce(1)
    )


def compact_output(output: DeltaHandle) -> None:
    """Compact the output with Delta's OPTIMIZE, as its own commit after a refresh's.

    Net-change commits add a small file and deletion vectors each time; left alone, reads of the
    output (and every later refresh's key read) slow down refresh after refresh. OPTIMIZE bin-packs
    the files under ``SMALL_FILE_BYTES`` and rewrites the files whose deletion vectors hide more than
    ``DELETED_ROWS_RATIO`` of their rows; other files are left alone, so a compaction costs what
    accumulated, not the table. OPTIMIZE changes no rows (``dataChange=false``): the change feed and
    the refresh's progress are untouched, and a crash here loses nothing.
    """
    settings = {
        "spark.databricks.delta.optimize.minFileSize": str(SMALL_FILE_BYTES),
        "spark.databricks.delta.optimize.maxDeletedRowsRatio": str(DELETED_ROWS_RATIO),
    }
    with without_commit_metadata(output.spark), session_settings(output.spark, settings):
        output.spark.sql(f"OPTIMIZE {output.sql_identifier}")

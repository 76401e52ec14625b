"""Applying a refresh's net changes to a keyed output without MERGE: the output's values are never read.

Delta's MERGE reads every column of every file that holds a changed key, to build the change feed's
pre-images and to skip unchanged rows; with changes spread over the key range that is the whole
output. But the engine knows each affected output row's previous value without reading it: the
output equals the join at the versions the last refresh consumed (the exactly-once invariant), so
the previous value is the same join over the inputs' pre-images (``before`` in
:func:`..delta.changes.changed_keys`).
A kind computes the previous and the new values of its affected keys, and this module:

1. classifies each key (:func:`net_changes`): ``insert``, ``update`` (pre- and post-image differ),
   ``delete``, or nothing when the value is unchanged; the same action counts each kind and
   fingerprints the keys the output must hold (a count and two key-hash sums, :class:`KeyProof`);
2. reads only the output's key columns, with each row's file and row index, in the one pass that
   finds the rows to delete, and checks on the counts and hash sums observed there that the invariant
   holds for these keys: every updated, deleted or unchanged key is in the output exactly once, and no
   inserted key is in it (before anything is committed);
3. writes, in one Delta ``UPDATE`` commit that also carries the refresh's progress and transaction
   id: deletion vectors for the replaced rows, the new rows, and the change-data rows. Whether the
   output needs compacting is decided on the driver from the file list the transaction holds.

Steps 2 and 3 run in the JVM (the engine's ``net_change`` procedure, :mod:`..runtime.engine_procedure`),
the same code for classic Spark and Spark Connect; this module plans the frames they read.

When the proof fails, or the output moved since the refresh read its log, :class:`MergeRequired`
sends the kind back to MERGE, which does not rely on the invariant.

    >>> changes = net_changes(old_rows, new_rows, ["order_id"], ["status", "city"])
    >>> commit_net_changes(output, changes, ["order_id"], request, expected_version=7).updated
    12
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import reduce
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, Observation
from pyspark.sql import functions as F

from ..core.errors import ConcurrentRefreshError, FkJoinError
from ..core.planning import RebuildRequired
from ..core.progress import with_row_counts
from ..core.spec import quote
from ..core.trace import phase
from ..delta.changes import maybe_broadcast
from ..delta.tables import ROW_POSITION_COLUMNS, DeltaHandle, values_equal
from ..runtime import engine_procedure, internals
from ..runtime import engine_protocol as protocol
from ..runtime.commit_settings import metadata_settings, session_settings, without_commit_metadata
from ..runtime.internals import observation_metrics
from ..runtime.session import is_connect

log = logging.getLogger(__name__)

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

CHANGE = protocol.CHANGE_COLUMN
#: How many rows the output must hold for the key before the commit (1 when it had a previous row).
EXPECTED = protocol.EXPECTED_COLUMN
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
    proof: KeyProof | None = None
    #: Keys compare null-safe (a declared ``pkey`` may hold nulls); input keys never do.
    null_safe: bool = False
    #: For an output that does not store its key: computes the key columns on the output's rows (which
    #: carry ``_fkjoin_file`` and ``_fkjoin_row``), e.g. a keyless output's row hash and copy number.
    derive_key: Callable[[DataFrame], DataFrame] | None = None
    #: With ``count_repeats``: how many rows of ``new`` repeated a key (None: not counted).
    repeats: int | None = None

    @property
    def total(self) -> int:
        return self.inserted + self.updated + self.deleted

    def release(self) -> None:
        self.frame.unpersist()


def net_changes(
    old: DataFrame,
    new: DataFrame,
    key: list[str],
    value_columns: list[str],
    *,
    keep_unchanged: bool = True,
    null_safe: bool = False,
    count_repeats: bool = False,
) -> NetChanges:
    """Classify each key of ``old`` (previous output rows) and ``new`` (its rows after this refresh).

    Both hold the key and value columns; a key missing from ``old`` is an insert, missing from ``new``
    a delete, and in both an update only when a value differs (``values_equal``, so maps and variants
    compare by value). Unchanged keys stay in the frame (no change) so the commit can check that the
    output holds them as the inputs say. One job materialises the frame and counts the changes.
    ``null_safe`` keys (a declared ``pkey`` column may be null) compare with ``<=>``.

    When ``old`` is the output itself read with its rows' positions (:data:`ROW_POSITION_COLUMNS`, a
    recompute's comparison), the frame keeps them: :func:`changed_positions` then hands the commit the
    rows to replace, and the output is read once.

    ``count_repeats``: ``new`` was not grouped by key (:func:`..delta.changes.observed_rows`), so the
    same action counts its repeated keys (:attr:`NetChanges.repeats`): the output rows the join
    repeats (observed) and the inserted keys that repeat (counted with the changes).
    """
    types = {f.name: f.dataType for f in new.schema.fields}
    positions = [c for c in ROW_POSITION_COLUMNS if c in old.columns]
    o = old.select(*[quote(c) for c in key + value_columns + positions]).withColumn(_OLD, F.lit(True))
    n = new.select(*[quote(c) for c in key + value_columns]).withColumn(_NEW, F.lit(True)).alias("n")
    observations = None
    if count_repeats and not is_connect(new.sparkSession):
        observations = (Observation(), Observation())
        o = o.observe(observations[0], F.count(F.lit(1)).alias("rows"))
    o = o.alias("o")
    on = _key_condition("o", "n", key, null_safe)
    # hashed, not sorted: a recompute compares whole tables, and sorting both sides is most of the cost
    joined = o.join(n.hint("shuffle_hash"), on, "full_outer")
    same = F.expr(values_equal("o", "n", [(c, types[c]) for c in value_columns]))
    had, has = F.col(f"o.{_OLD}").isNotNull(), F.col(f"n.{_NEW}").isNotNull()
    if observations is not None:
        joined = joined.observe(observations[1], F.count_if(had).alias("rows"))
    change = F.when(had & has & ~same, "update").when(had & ~has, "delete").when(~had & has, "insert")
    classified = joined.select(
        *[F.coalesce(F.col(f"n.{quote(c)}"), F.col(f"o.{quote(c)}")).alias(c) for c in key],
        *[F.col(f"n.{quote(c)}").alias(c) for c in value_columns],
        *[F.col(f"o.{quote(c)}").alias(PRE_IMAGE + c) for c in value_columns],
        change.alias(CHANGE),
        had.cast("int").alias(EXPECTED),
        *[F.col(f"o.{c}").alias(c) for c in positions],
    )
    if not keep_unchanged:
        classified = classified.where(F.col(CHANGE).isNotNull())
    changes = counted_changes(classified, key, null_safe=null_safe, count_repeats=count_repeats)
    if count_repeats:
        counted = [None if o is None else observation_metrics(o) for o in observations or (None, None)]
        if changes.repeats is not None and None not in counted:
            scanned, joined_rows = (int(found["rows"] or 0) for found in counted)  # type: ignore[index]
            changes.repeats += joined_rows - scanned
        else:
            changes.repeats = None
    return changes


def changed_positions(changes: NetChanges, key: list[str]) -> DataFrame:
    """Where the output holds the rows ``changes`` replaces or deletes, from a frame :func:`net_changes`
    built over the output read with its positions: the commit's ``positions``, already in the form the
    commit locates keys in (:func:`_located`), so it neither reads the output's keys again nor joins
    the changes with themselves."""
    file, row = ROW_POSITION_COLUMNS
    return changes.frame.where(F.col(file).isNotNull()).select(*key_hashes(key), file, row, CHANGE, EXPECTED)


def counted_changes(
    classified: DataFrame, key: list[str], *, null_safe: bool = False, count_repeats: bool = False
) -> NetChanges:
    """Net changes from a frame already classified as :func:`net_changes` classifies (key, post-image
    values, ``_fkjoin_pre_`` values, ``_fkjoin_change``, ``_fkjoin_expected``): cached, with one job
    counting each kind of change and taking the key proof (:class:`KeyProof`); with ``count_repeats``,
    also the inserted keys that repeat (:attr:`NetChanges.repeats`)."""
    frame = classified.persist(StorageLevel.MEMORY_AND_DISK)
    with_hashes = frame.select(*key_hashes(key), F.col(CHANGE), F.col(EXPECTED))
    expected = F.col(EXPECTED) == 1
    inserted = F.col(CHANGE) == "insert"
    distinct_inserts = [
        F.count_distinct(F.when(inserted, F.struct(*[quote(c) for c in key]))).alias("distinct_inserts")
    ]
    try:
        totals = with_hashes.agg(
            *[F.count_if(F.col(CHANGE) == kind).alias(kind) for kind in ("insert", "update", "delete")],
            F.count(F.lit(1)).alias("keys"),
            F.count_if(expected).alias("expected"),
            *[F.sum(F.when(expected, F.col(h))).alias(h) for h in HASHES],
            *(distinct_inserts if count_repeats else []),
        ).first()
    except BaseException:
        frame.unpersist()
        raise
    return NetChanges(
        frame,
        int(totals["insert"]),
        int(totals["update"]),
        int(totals["delete"]),
        int(totals["keys"]),
        KeyProof(int(totals["expected"]), *[totals[h] or 0 for h in HASHES]),
        null_safe=null_safe,
        repeats=int(totals["insert"]) - int(totals["distinct_inserts"]) if count_repeats else None,
    )


def _key_condition(left: str, right: str, key: list[str], null_safe: bool) -> Column:
    """``left.k = right.k`` for every key column (``<=>`` when ``null_safe``)."""
    terms = [
        F.col(f"{left}.{quote(c)}").eqNullSafe(F.col(f"{right}.{quote(c)}"))
        if null_safe
        else F.col(f"{left}.{quote(c)}") == F.col(f"{right}.{quote(c)}")
        for c in key
    ]
    return reduce(lambda a, b: a & b, terms)


#: Two independent 64-bit hashes of a key, summed as decimals: the fingerprint of a set of keys.
HASHES = protocol.HASH_COLUMNS


def key_hashes(key: list[str]) -> list[Column]:
    """The key's two hashes (:data:`HASHES`), as ``DECIMAL(38,0)`` so that sums of millions cannot
    overflow."""
    columns = [F.col(quote(c)) for c in key]
    return [
        *columns,
        F.xxhash64(*columns).cast("decimal(38,0)").alias(HASHES[0]),
        F.xxhash64(F.lit("fkjoin"), *columns).cast("decimal(38,0)").alias(HASHES[1]),
    ]


@dataclass(frozen=True)
class KeyProof:
    """What the output must hold for the affected keys if it holds the last refresh's join: exactly
    ``rows`` of them (those with a previous row), whose key hashes sum to ``h1`` and ``h2``."""

    rows: int
    h1: Any
    h2: Any

    def as_request(self) -> dict[str, Any]:
        """The proof as the JVM side's request carries it (sums as decimal strings: they exceed 64 bits)."""
        return {"rows": self.rows, "h1": str(self.h1), "h2": str(self.h2)}


@dataclass(frozen=True)
class NetCommit:
    """A net-change commit's version, and whether the output was compacted after it."""

    version: int
    compact: bool
    #: The data files the commit added (absolute paths): where its new rows are.
    added: tuple[str, ...] = ()


def commit_net_changes(
    output: DeltaHandle,
    changes: NetChanges,
    key: list[str],
    *,
    user_metadata: str,
    app_id: str,
    seq: int,
    expected_version: int,
    positions: DataFrame | None = None,
) -> NetCommit:
    """Apply ``changes`` to the output in one commit (see the module docstring); returns its version
    and whether the output's files now need compacting (:func:`compact_output`).

    The Spark work is planned here; the transaction is the engine's JVM side
    (:mod:`..runtime.engine_procedure`): ``prepare`` locates and proves the keys, writes the deletion
    vectors, new rows and change data, and ``commit`` commits them. Raises :class:`MergeRequired` when
    the session has no engine jar, the output is not at ``expected_version`` (the version the refresh
    planned against) or does not hold the keys the changes assume; nothing is committed then.

    ``positions`` (key, ``_fkjoin_file``, ``_fkjoin_row``), when a warm state knows where the affected
    keys are (:mod:`..delta.warm_state`), replaces the read of the output's keys; the proof is checked on
    it all the same.
    """
    spark = output.spark
    unavailable = engine_procedure.unavailable_reason(spark)
    if unavailable is not None:
        raise MergeRequired(unavailable)
    live = output.read_with_positions(expected_version)
    table_columns = [c for c in live.columns if c not in ROW_POSITION_COLUMNS]
    derived = key if changes.derive_key is not None else []
    _require_columns(output, live, changes.frame.drop(*derived), table_columns)
    if positions is not None:
        live = positions
    elif changes.derive_key is not None:
        live = changes.derive_key(live)
    views = engine_procedure.RequestViews(spark)
    token = None
    try:
        prepared = engine_procedure.call(
            spark,
            protocol.Prepare(
                output=output.storage_path(),
                expected_version=expected_version,
                app_id=app_id,
                seq=seq,
                located=views.add("located", _located(live, changes, key)) if changes.keys else None,
                replaced=bool(changes.updated or changes.deleted),
                rows=views.add("rows", _rows_to_write(changes.frame, table_columns))
                if changes.total
                else None,
                proof=changes.proof.as_request() if changes.proof is not None else None,
            ),
        )
        if prepared.status == protocol.Status.MERGE_REQUIRED or prepared.token is None:
            raise MergeRequired(prepared.reason or f"the engine jar answered {prepared.status}")
        token = prepared.token
        layout = file_layout(prepared.files)
        compact = layout["small_files"] >= COMPACT_SMALL_FILES or layout["files_over_ratio"] > 0
        phase("committing")
        counts = {"inserted": changes.inserted, "updated": changes.updated, "deleted": changes.deleted}
        with metadata_settings(spark, with_row_counts(user_metadata, counts)):
            committed = engine_procedure.call(spark, protocol.Commit(token=token))
        token = None
        return NetCommit(committed.version, compact, tuple(committed.added))
    except Exception as error:
        if internals.is_concurrent_modification(error):
            raise ConcurrentRefreshError(
                f"output {output.location}: another refresh committed first; nothing of this refresh was "
                "written. Retry: the retry continues from the versions the other refresh consumed."
            ) from None
        if not isinstance(error, MergeRequired | RebuildRequired | FkJoinError):
            error.add_note(f"while committing the net changes of output {output.location}")
        raise
    finally:
        try:
            if token is not None:
                engine_procedure.call(spark, protocol.Abort(token=token))
        except Exception as error:  # the refresh's own error matters; the JVM side drops it in time
            log.warning("output %s: aborting the prepared commit failed: %s", output.location, error)
        finally:
            views.drop()


def _located(live: DataFrame, changes: NetChanges, key: list[str]) -> DataFrame:
    """The affected keys located in the output's key columns (key hashes, ``_fkjoin_file``,
    ``_fkjoin_row``, change, expected rows): the JVM side writes deletion vectors from it and checks
    the proof (:class:`KeyProof`) on the same pass."""
    if CHANGE in live.columns:  # already located (changed_positions)
        return live
    wanted = changes.frame.select(*key_hashes(key), CHANGE, EXPECTED)
    rows = live.select(*[quote(c) for c in key], *ROW_POSITION_COLUMNS)
    if not changes.null_safe:
        return rows.join(maybe_broadcast(wanted, changes.keys), on=key, how="inner")
    found, sought = rows.alias("l"), maybe_broadcast(wanted, changes.keys).alias("w")
    return found.join(sought, _key_condition("l", "w", key, True), "inner").select(
        *[F.col(f"l.{quote(c)}").alias(c) for c in key],
        *[f"l.{c}" for c in ROW_POSITION_COLUMNS],
        *[F.col(f"w.{h}").alias(h) for h in HASHES],
        F.col(f"w.{CHANGE}").alias(CHANGE),
        F.col(f"w.{EXPECTED}").alias(EXPECTED),
    )


def _require_columns(
    output: DeltaHandle, live: DataFrame, frame: DataFrame, table_columns: list[str]
) -> None:
    """The output must have exactly the join's columns and types (else the refresh rebuilds it)."""
    have = {f.name: f.dataType.simpleString() for f in live.schema.fields if f.name in table_columns}
    want = {
        f.name: f.dataType.simpleString()
        for f in frame.schema.fields
        if f.name not in (CHANGE, EXPECTED, *ROW_POSITION_COLUMNS) and not f.name.startswith(PRE_IMAGE)
    }
    if have != want:
        raise RebuildRequired(
            f"the output {output.location}'s columns {have} differ from the join's columns {want}"
        )


def file_layout(
    files: list[list[int | None]], *, small_file_share: float | None = None, dv_min_rows: int | None = None
) -> dict[str, int]:
    """How an output's files stand, from the transaction's file list (``[size, rows or None, rows hidden
    by deletion vectors]`` per file; no Spark job): ``files``; ``small_files``, under
    :data:`SMALL_FILE_BYTES` and under :data:`SMALL_FILE_SHARE` of the mean file size;
    ``files_over_ratio``, files of at least :data:`DV_MIN_ROWS` rows whose deletion vectors hide more
    than :data:`DELETED_ROWS_RATIO` of them. The keywords override those two thresholds.

    >>> file_layout([[10, 5, 0], [990, None, 0]])
    {'files': 2, 'small_files': 1, 'files_over_ratio': 0}
    """
    share = SMALL_FILE_SHARE if small_file_share is None else small_file_share
    min_rows = DV_MIN_ROWS if dv_min_rows is None else dv_min_rows
    if not files:
        return {"files": 0, "small_files": 0, "files_over_ratio": 0}
    mean = sum(int(size) for size, _, _ in files) / len(files)
    small = sum(1 for size, _, _ in files if size < SMALL_FILE_BYTES and size < share * mean)
    over = sum(
        1
        for _, records, deleted in files
        if records is not None and records >= min_rows and deleted > DELETED_ROWS_RATIO * records
    )
    return {"files": len(files), "small_files": small, "files_over_ratio": over}


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

"""Change feeds reduced to what a refresh needs: the set of keys that changed, and data checks.

Shared by every join kind: a key "changed" if any commit in the range inserted, updated or deleted it.
The rows themselves are re-read from the pinned snapshot, so several commits to one key collapse into
one net change and the result matches a from-scratch join at exactly the pinned versions.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import NamedTuple

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, Observation, Row
from pyspark.sql import functions as F

from ..core.errors import FkJoinError, InputDataError
from ..core.planning import RebuildRequired, cdf_unavailable_reason
from ..core.spec import quote
from ..runtime.engine_protocol import NET_COLUMN
from ..runtime.internals import observation_metrics
from ..runtime.session import (
    WHOLE_TABLES_PARTITION_BYTES,
    broadcast_limit_bytes,
    in_small_refresh,
    is_connect,
)
from .tables import LIVE_CHANGE_TYPES, DeltaHandle, key_is_null

BROADCAST_LIMIT_ROWS = 2_000_000

#: What Delta and Spark say when a change feed cannot serve a version range: the change data or data
#: files were vacuumed, the log was cleaned, CDF was off, or the range crosses a non-additive schema
#: change. Delta reports these through several exception types (wrapped by py4j or a failed job), so
#: they are recognised by their error class or Java exception name in the message.
FEED_UNAVAILABLE_MARKERS = (
    "DELTA_MISSING_CHANGE_DATA",
    "DELTA_CHANGE_TABLE_FEED_DISABLED",
    "DELTA_LOG_FILE_NOT_FOUND",
    "DELTA_FILE_NOT_FOUND",
    "DELTA_CHANGE_DATA_FILE_NOT_FOUND",
    "DELTA_VERSIONS_NOT_CONTIGUOUS",
    "DELTA_CANNOT_TIME_TRAVEL",
    "DELTA_INVALID_CDC_RANGE",
    "DELTA_CHANGE_DATA_FEED_INCOMPATIBLE_SCHEMA_CHANGE",
    "DELTA_STREAMING_INCOMPATIBLE_SCHEMA_CHANGE",
    "DELTA_BLOCK_COLUMN_MAPPING_AND_CDC_OPERATION",
    "DeltaFileNotFoundException",
    "FAILED_READ_FILE.FILE_NOT_EXIST",
    "java.io.FileNotFoundException",
)


class FeedUnavailable(RebuildRequired):
    """A change feed cannot serve an incremental refresh; the message is the full-rebuild reason."""


def is_feed_unavailable(error: BaseException) -> bool:
    """Whether ``error`` says a change feed cannot serve a range (see FEED_UNAVAILABLE_MARKERS)."""
    text = str(error)
    return any(marker in text for marker in FEED_UNAVAILABLE_MARKERS)


@contextmanager
def feed_errors(table: DeltaHandle, after: int, to: int) -> Iterator[None]:
    """Turn a genuine failure to read ``table``'s change feed (vacuumed history, a cleaned log, CDF off
    for a while) into :class:`FeedUnavailable`, the reason for a full rebuild. Every other error
    (a bad cast, a lost executor, a throttled object store, the engine's own errors) passes through
    unchanged: rebuilding would hide it, and for an append-only output would replace its rows.
    """
    try:
        yield
    except FkJoinError:
        raise
    except Exception as exc:
        if not is_feed_unavailable(exc):
            raise
        raise FeedUnavailable(cdf_unavailable_reason(table.role, table.location, after, to, exc)) from exc


def read_feed(table: DeltaHandle, after: int, to: int) -> DataFrame:
    """The change feed of versions ``after+1..to``, analysed now so vacuumed history fails here."""
    with feed_errors(table, after, to):
        feed = table.changes(after, to)
        feed.schema  # noqa: B018 - forces analysis: missing versions surface before any job
    return feed


@dataclass
class ChangedKeys:
    """The distinct non-null keys an input changed between two versions (cached), with counts."""

    keys: DataFrame
    count: int
    change_rows: int
    null_keys: int
    cached: DataFrame
    #: With ``image_columns``: each changed key's row as it stood before the range (see
    #: :func:`changed_keys`); keys that did not exist then are absent.
    before: DataFrame | None = None
    #: With ``image_columns``: each changed key's row at the end of the range; deleted keys are absent.
    after: DataFrame | None = None

    def release(self) -> None:
        self.cached.unpersist()


#: The change types whose row is a key's value before the commit that made them.
PRE_IMAGE_TYPES = ("update_preimage", "delete")


@dataclass(frozen=True)
class FeedRequest:
    """One input's change feed to reduce to changed keys: ``table``'s versions ``after+1..to`` by
    ``key``, with each key's first and last images of ``image_columns`` when given."""

    table: DeltaHandle
    key: list[str]
    after: int
    to: int
    image_columns: list[str] | None = None


def changed_keys(
    table: DeltaHandle,
    key: list[str],
    after_version: int,
    to_version: int,
    image_columns: list[str] | None = None,
) -> ChangedKeys:
    """Read the change feed once and keep only the keys (cached): a job proportional to the change.

    With ``image_columns``, the same pass also keeps each key's row as it stood at ``after_version``
    (``before``): the pre-image in the first commit of the range that touched the key; a key whose
    first change inserted it did not exist then. And its row at ``to_version`` (``after``): the
    post-image of the last commit that touched it, absent when that commit deleted it. A refresh uses
    these to know the output's previous rows without reading them. Raises :class:`FeedUnavailable`
    when the feed cannot serve the range.

    >>> changed_keys(orders, ["order_id"], 4, 6, orders_columns).before.collect()  # order 7 updated at v5
    [Row(order_id=7, customer_id=3, status='placed')]
    """
    return changed_keys_of([FeedRequest(table, key, after_version, to_version, image_columns)])[0]


def changed_keys_of(requests: list[FeedRequest]) -> list[ChangedKeys]:
    """:func:`changed_keys` for several feeds, read, cached and counted by one Spark action.

    >>> left, right = changed_keys_of([FeedRequest(orders, ["order_id"], 4, 6),
    ...                                FeedRequest(customers, ["customer_id"], 2, 3)])
    """
    grouped: list[DataFrame] = []
    try:
        for request in requests:
            with feed_errors(request.table, request.after, request.to):
                grouped.append(_grouped_feed(request))
        stats = _feed_stats(requests, grouped)
    except BaseException:
        # a vacuumed feed fails here, after the caches were registered: a long-lived session must not
        # keep them
        for frame in grouped:
            frame.unpersist()
        raise
    return [
        _changed(request, frame, stats.get(index, []))
        for index, (request, frame) in enumerate(zip(requests, grouped, strict=True))
    ]


def _grouped_feed(request: FeedRequest) -> DataFrame:
    """The feed grouped by key (cached when first computed): rows, live rows, inserts less deletes
    (``_fkjoin_net``), first and last images."""
    key, image_columns = request.key, request.image_columns
    feed = request.table.changes(request.after, request.to)
    live = F.col("_change_type").isin(*LIVE_CHANGE_TYPES).cast("long")
    net = F.when(F.col("_change_type") == "insert", 1).when(F.col("_change_type") == "delete", -1)
    aggregates = [
        F.count(F.lit(1)).alias("_fkjoin_rows"),
        F.sum("_fkjoin_live").alias("_fkjoin_live"),
        F.sum(F.coalesce(net, F.lit(0))).alias(NET_COLUMN),
    ]
    if image_columns is not None:
        before = F.when(F.col("_change_type").isin(*PRE_IMAGE_TYPES), 0).otherwise(1)
        packed = F.struct(
            *[F.col(quote(c)) for c in image_columns], F.col("_change_type").alias("_fkjoin_type")
        )
        order = F.struct(F.col("_commit_version"), before)
        aggregates.append(F.min_by(packed, order).alias("_fkjoin_first"))
        aggregates.append(F.max_by(packed, order).alias("_fkjoin_last"))
    return (
        feed.withColumn("_fkjoin_live", live)
        .withColumn("_fkjoin_null", key_is_null(key))
        .groupBy(*[quote(c) for c in key], "_fkjoin_null")
        .agg(*aggregates)
        .persist(StorageLevel.MEMORY_AND_DISK)
    )


def _feed_stats(requests: list[FeedRequest], grouped: list[DataFrame]) -> dict[int, list[Row]]:
    """Each grouped feed's keys, rows and live rows, by null-key flag: one action fills every cache.
    When it fails for a feed that cannot serve its range, each feed is read alone to name the table."""
    parts = [
        frame.groupBy("_fkjoin_null")
        .agg(
            F.count(F.lit(1)).alias("keys"),
            F.sum("_fkjoin_rows").alias("rows"),
            F.sum("_fkjoin_live").alias("live"),
        )
        .withColumn("_fkjoin_feed", F.lit(index))
        for index, frame in enumerate(grouped)
    ]
    if not parts:
        return {}
    try:
        union = parts[0]
        for part in parts[1:]:
            union = union.unionByName(part)
        rows = union.collect()
    except FkJoinError:
        raise
    except Exception as exc:
        if not is_feed_unavailable(exc) or len(parts) == 1:
            with feed_errors(requests[0].table, requests[0].after, requests[0].to):
                raise
        for request, part in zip(requests, parts, strict=True):
            with feed_errors(request.table, request.after, request.to):
                part.collect()
        raise
    stats: dict[int, list[Row]] = {}
    for row in rows:
        stats.setdefault(int(row["_fkjoin_feed"]), []).append(row)
    return stats


def _changed(request: FeedRequest, grouped: DataFrame, stats: list[Row]) -> ChangedKeys:
    count = change_rows = null_keys = 0
    for row in stats:
        change_rows += int(row["rows"] or 0)
        if row["_fkjoin_null"]:
            null_keys += int(row["live"] or 0)
        else:
            count += int(row["keys"])
    key, image_columns = request.key, request.image_columns
    keys = grouped.where(~F.col("_fkjoin_null")).select(*[quote(c) for c in key])
    images = last_images = None
    if image_columns is not None:
        first, last = F.col("_fkjoin_first"), F.col("_fkjoin_last")
        images = grouped.where(~F.col("_fkjoin_null") & first.getField("_fkjoin_type").isin(*PRE_IMAGE_TYPES))
        images = images.select(*[first.getField(c).alias(c) for c in image_columns])
        last_images = grouped.where(
            ~F.col("_fkjoin_null") & last.getField("_fkjoin_type").isin(*LIVE_CHANGE_TYPES)
        ).select(*[last.getField(c).alias(c) for c in image_columns])
    return ChangedKeys(keys, count, change_rows, null_keys, grouped, images, last_images)


def cut_lineage(frame: DataFrame, *, eager: bool = True) -> DataFrame:
    """``frame`` computed now and kept (memory, spilling to disk) behind a plan of one scan.

    A refresh that builds frames on cached frames nests their plans, and Spark renders every nested
    plan each time it describes a query: in a four-input ``multiway_join`` refresh each input's change
    feed appears in every telescoping term, and the description of the write reached 132 MB of text and
    ran the driver out of heap. A local checkpoint keeps the rows as ``persist`` does but ends the
    lineage, so later plans stay small. Its blocks go when the frame is garbage-collected (Spark's
    ContextCleaner; Spark Connect releases the relation likewise); a lost executor fails the refresh,
    which then commits nothing and is retried. With ``eager=False`` the rows are computed and kept by the
    first job that reads the frame (a count or a check), saving a job.

    >>> keys = cut_lineage(changes.select("k").distinct())  # doctest: +SKIP
    """
    return frame.localCheckpoint(eager=eager, storageLevel=StorageLevel.MEMORY_AND_DISK)


def maybe_broadcast(frame: DataFrame, rows: int) -> DataFrame:
    """Broadcast a small side so the big table is scanned once, without a shuffle; not in a small refresh
    (:func:`..runtime.session.in_small_refresh`), where a broadcast costs a Spark job of its own."""
    if rows > BROADCAST_LIMIT_ROWS or in_small_refresh(frame.sparkSession):
        return frame
    return F.broadcast(frame)


def broadcast_whole_table(frame: DataFrame, size_bytes: int | None, other_bytes: int | None) -> DataFrame:
    """Broadcast the rows of a whole table (a recompute's or full rebuild's smaller side) when its data
    files are within the session's own broadcast bound (:func:`..runtime.session.broadcast_limit_bytes`)
    and smaller than the other side's, and the other side spans more than one shuffle partition
    (:data:`..runtime.session.WHOLE_TABLES_PARTITION_BYTES`): Spark's planner would, but a small refresh
    turns its choice off, and shuffling the big side whole costs far more than the broadcast's job (a 1M
    x 100K recompute shuffled and sorted its 1M rows twice); a big side of one partition costs less to
    shuffle than that job.

    >>> customers = broadcast_whole_table(customers, 2_000_000, 40_000_000)  # doctest: +SKIP
    """
    limit = broadcast_limit_bytes(frame.sparkSession)
    if size_bytes is None or other_bytes is None or limit < 0:
        return frame
    if size_bytes > limit or size_bytes > other_bytes or other_bytes <= WHOLE_TABLES_PARTITION_BYTES:
        return frame
    return F.broadcast(frame)


class KeyCounts(NamedTuple):
    """What :func:`check_keys` counted: every row, and the rows with a null key (0 unless asked)."""

    rows: int
    null_keys: int


@dataclass(frozen=True)
class KeyCheck:
    """One frame whose keys :func:`check_keys_of` checks: ``table``'s rows at ``version`` (for messages)."""

    frame: DataFrame
    key: list[str]
    table: DeltaHandle
    version: int
    count_nulls: bool = False


def check_keys(
    frame: DataFrame, key: list[str], table: DeltaHandle, version: int, *, count_nulls: bool
) -> KeyCounts:
    """Fail on duplicate keys (naming up to 10); count the rows and those with a null key (if asked).

    One aggregation job when the keys are clean: every row, every duplicate group and every null-key
    row is counted, however many partially-null composite keys there are. Only when it finds
    duplicates does a second job fetch ten of them for the message. Raises :class:`InputDataError`
    before anything is written.
    """
    return check_keys_of([KeyCheck(frame, key, table, version, count_nulls)])[0]


def check_keys_of(checks: list[KeyCheck]) -> list[KeyCounts]:
    """:func:`check_keys` for several frames in one aggregation job; the first with a repeated key fails.

    >>> check_keys_of([KeyCheck(orders, ["order_id"], orders_table, 7),
    ...                KeyCheck(customers, ["customer_id"], customers_table, 3)])
    [KeyCounts(rows=1000, null_keys=0), KeyCounts(rows=100, null_keys=0)]
    """
    if not checks:
        return []
    grouped = [_key_groups(check) for check in checks]
    null, rows = F.col("_fkjoin_null"), F.col("_fkjoin_n")
    summaries = [
        frame.agg(
            F.sum(F.when(null, rows)).alias("nulls"),
            F.count(F.when(~null & (rows > 1), 1)).alias("duplicates"),
            F.sum(rows).alias("rows"),
        ).withColumn("_fkjoin_check", F.lit(index))
        for index, frame in enumerate(grouped)
    ]
    union = summaries[0]
    for summary in summaries[1:]:
        union = union.unionByName(summary)
    found = {int(row["_fkjoin_check"]): row for row in union.collect()}
    counts = []
    for index, check in enumerate(checks):
        summary = found[index]
        if summary["duplicates"]:
            _raise_repeated(check, grouped[index], int(summary["duplicates"]))
        nulls = int(summary["nulls"] or 0) if check.count_nulls else 0
        counts.append(KeyCounts(int(summary["rows"] or 0), nulls))
    return counts


def _key_groups(check: KeyCheck) -> DataFrame:
    key = check.key
    return (
        check.frame.select(*[F.col(quote(c)) for c in key], key_is_null(key).alias("_fkjoin_null"))
        .groupBy(*[quote(c) for c in key], "_fkjoin_null")
        .agg(F.count(F.lit(1)).alias("_fkjoin_n"))
    )


def _raise_repeated(check: KeyCheck, grouped: DataFrame, found: int) -> None:
    key, table = check.key, check.table
    examples = (
        grouped.where(~F.col("_fkjoin_null") & (F.col("_fkjoin_n") > 1))
        .orderBy(*[quote(c) for c in key])
        .limit(10)
        .collect()
    )
    shown = ", ".join(
        "(" + ", ".join(f"{c}={row[c]!r}" for c in key) + f") x{row['_fkjoin_n']}" for row in examples
    )
    more = f" and {found - len(examples)} more" if found > len(examples) else ""
    raise InputDataError(
        f"{table.role} table {table.location} has duplicate keys at version {check.version} "
        f"(key {key}; {found} keys repeat): {shown}{more}. A table must hold one row per key: "
        "deduplicate it (e.g. MERGE the latest row per key) and rerun; nothing was written."
    )


@dataclass(frozen=True)
class KeyedRows:
    """Rows reduced to one per key (cached when first read), whose duplicate-key check is taken on the
    way of a later action (``DataFrame.observe``) instead of an action of its own.

    ``rows`` has ``source``'s columns, one row per key. Once an action has read it, :meth:`verify`
    raises the :class:`InputDataError` that :func:`check_keys` raises for ``source`` (with examples)
    when a key repeated, and returns the number of rows. When nothing was observed (a Spark Connect
    session, or a query that carried the plan without running it), :meth:`verify` counts on the cached
    rows instead, and reads ``source`` again only to name the repeated keys.

    >>> affected = one_row_per_key(orders_hit, ["order_id"], orders, 7)
    >>> commit(affected.rows); affected.verify()  # doctest: +SKIP
    12
    """

    rows: DataFrame
    counted: DataFrame
    source: DataFrame
    key: list[str]
    table: DeltaHandle
    version: int
    observation: Observation | None

    def verify(self) -> int:
        found = None if self.observation is None else observation_metrics(self.observation)
        if found is None:
            found = self.counted.agg(*_repeat_counts(self.key)).first().asDict()
        if found["duplicates"]:
            return check_keys(self.source, self.key, self.table, self.version, count_nulls=False).rows
        return int(found["rows"] or 0)


def _repeat_counts(key: list[str]) -> list[Column]:
    per_key, null = F.col("_fkjoin_n"), key_is_null(key)
    return [
        F.count_if((per_key > 1) & ~null).alias("duplicates"),
        F.sum(F.when(null, per_key)).alias("nulls"),
        F.sum(per_key).alias("rows"),
    ]


def _grouped_by_key(frame: DataFrame, key: list[str]) -> tuple[DataFrame, Observation | None]:
    """``frame`` as one row per key (any of a repeated key's rows, with ``_fkjoin_n``), its repeated keys,
    null-key rows and rows observed on the way of the action that reads it (none over Spark Connect)."""
    values = [c for c in frame.columns if c not in key]
    grouped = frame.groupBy(*[quote(c) for c in key]).agg(
        F.count(F.lit(1)).alias("_fkjoin_n"), *[F.first(quote(c)).alias(c) for c in values]
    )
    if is_connect(frame.sparkSession):
        return grouped, None
    observation = Observation()
    return grouped.observe(observation, *_repeat_counts(key)), observation


def one_row_per_key(frame: DataFrame, key: list[str], table: DeltaHandle, version: int) -> KeyedRows:
    """``frame`` grouped by ``key`` (one row per key, any of a repeated key's rows), cached (the caller
    unpersists ``counted``), with the count of repeated keys and of rows observed; see :class:`KeyedRows`."""
    grouped, observation = _grouped_by_key(frame, key)
    counted = grouped.persist(StorageLevel.MEMORY_AND_DISK)
    rows = counted.select(*[quote(c) for c in frame.columns])
    return KeyedRows(rows, counted, frame, key, table, version, observation)


@dataclass
class ObservedKeys:
    """A whole table's rows with a non-null key, one per key, whose duplicate-key check and null-key count
    are taken on the way of the action that reads them (``DataFrame.observe``): a recompute's inputs,
    checked as a full rebuild checks them (:func:`check_keys`) without a job of its own.

    After that action, :func:`verify_observed` raises :func:`check_keys`'s :class:`InputDataError` when a
    key repeated, and gives the counts; where nothing was observed (Spark Connect) it runs
    :func:`check_keys_of` on the sources, all in one job.

    >>> orders = observed_keys(orders_rows, ["order_id"], orders_table, 7)
    >>> commit(orders.rows); verify_observed([orders])  # doctest: +SKIP
    [KeyCounts(rows=1000, null_keys=2)]
    """

    rows: DataFrame
    source: DataFrame
    key: list[str]
    table: DeltaHandle
    version: int
    observation: Observation | None
    counts: KeyCounts | None = None
    #: False for :func:`observed_rows` (rows not grouped by key): the action that reads them counts the
    #: keys that repeat and sets :attr:`ObservedKeys.repeated` (None: it could not, as over Spark Connect).
    grouped: bool = True
    repeated: int | None = None


def verify_observed(checks: list[ObservedKeys]) -> list[KeyCounts]:
    """Each check's counts (kept on it), raising on a repeated key; see :class:`ObservedKeys`."""
    unobserved = []
    for check in checks:
        if check.counts is not None:
            continue
        found = None if check.observation is None else observation_metrics(check.observation)
        if found is not None and not check.grouped:
            found = None if check.repeated is None else {**found, "duplicates": check.repeated}
        if found is None or found["duplicates"]:
            unobserved.append(check)
        else:
            check.counts = KeyCounts(int(found["rows"] or 0), int(found["nulls"] or 0))
    if unobserved:
        counted = check_keys_of(
            [KeyCheck(c.source, c.key, c.table, c.version, count_nulls=True) for c in unobserved]
        )
        for check, counts in zip(unobserved, counted, strict=True):
            check.counts = counts
    return [check.counts for check in checks if check.counts is not None]


def observed_keys(frame: DataFrame, key: list[str], table: DeltaHandle, version: int) -> ObservedKeys:
    """``frame`` (``table``'s rows at ``version``) as one row per non-null key, checked on the way of the
    action that reads it; see :class:`ObservedKeys`."""
    grouped, observation = _grouped_by_key(frame, key)
    rows = grouped.where(~key_is_null(key)).select(*[quote(c) for c in frame.columns])
    return ObservedKeys(rows, frame, key, table, version, observation)


def observed_rows(frame: DataFrame, key: list[str], table: DeltaHandle, version: int) -> ObservedKeys:
    """``frame`` (``table``'s rows at ``version``) with a non-null key, not grouped: its rows and null keys
    observed on the way of the action that reads it, and whether a key repeats left to that action,
    which sets :attr:`ObservedKeys.repeated` (a recompute's comparison counts the output rows its join
    repeats, :func:`..write.net_changes.net_changes`). Grouping a million rows by key to find a repeat
    sorts them all; the comparison shuffles them by key anyway.

    >>> orders = observed_rows(orders_rows, ["order_id"], orders_table, 7)  # doctest: +SKIP
    """
    null = key_is_null(key)
    if is_connect(frame.sparkSession):
        return ObservedKeys(frame.where(~null), frame, key, table, version, None, grouped=False)
    observation = Observation()
    observed = frame.observe(observation, F.count(F.lit(1)).alias("rows"), F.count_if(null).alias("nulls"))
    return ObservedKeys(observed.where(~null), frame, key, table, version, observation, grouped=False)

"""Delta tables by path or catalog name: snapshots at a version, change feeds, and what a table is.

One class serves inputs and outputs so every join reads and checks tables the same way. A table on the
local file system is described by ``deltalake`` (milliseconds, no Spark job); any other through Delta's SQL
commands (``DESCRIBE DETAIL``, ``DESCRIBE HISTORY``), which work the same on classic Spark and over Spark
Connect, where delta-spark's ``DeltaTable`` API would need Delta's Connect server plugin.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import deltalake
from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..core.errors import SpecError
from ..core.locations import local_path, location_identity
from ..core.owners import OWNER_PROPERTY
from ..core.planning import InputState, schema_columns
from ..core.spec import RESERVED_PREFIX, TableRef, quote
from ..deltalog.watermarks import history_of
from ..runtime import engine_procedure, internals
from ..runtime.engine_protocol import FILE_COLUMN, ROW_COLUMN, FeedSize, Files
from ..runtime.session import is_connect

_log = logging.getLogger(__name__)

#: The columns :meth:`DeltaHandle.read_with_positions` adds: each row's data file and row index in it.
ROW_POSITION_COLUMNS = (FILE_COLUMN, ROW_COLUMN)

CDF_COLUMNS = ("_change_type", "_commit_version", "_commit_timestamp")

#: A data file Spark's writers name (``part-00000-<uuid>-c000.snappy.parquet``) or its checksum.
_DATA_FILE = re.compile(r"\.?part-.*")

LIVE_CHANGE_TYPES = ("insert", "update_postimage")

#: The Delta logs opened by the refresh running in this context, by local path (see :func:`opened_once`).
_OPENED: ContextVar[dict[str, deltalake.DeltaTable] | None] = ContextVar("fkjoin_opened_logs", default=None)


@contextmanager
def opened_once() -> Iterator[dict[str, deltalake.DeltaTable]]:
    """Within this block, each local table's Delta log is loaded once: every later read of it (state,
    history, transaction versions, by any handle) brings that load up to date by listing only the
    commits since, instead of loading the log again from its checkpoint. The refresh runner wraps each
    refresh in it; reads outside one load the log each time.

    >>> with opened_once() as logs:
    ...     DeltaHandle(spark, TableRef(path="/w/orders"), "left").state().version
    ...     DeltaHandle(spark, TableRef(path="/w/orders"), "left").history(1)[0]["version"]
    ...     len(logs)
    7
    7
    1
    """
    opened: dict[str, deltalake.DeltaTable] = {}
    token = _OPENED.set(opened)
    try:
        yield opened
    finally:
        _OPENED.reset(token)


class WarmFileReads:
    """A refresh's table reads over the data files the engine's JVM side keeps warm between refreshes.

    Delta reads a table version by rebuilding its state and listing its files for each query: about
    three Spark jobs of its own before the one that scans, every time a refresh reads a table. The
    engine's JVM side (``TableFiles`` in the engine jar) keeps the file list of the last version each
    table was read at and advances it from the commits since, without a job; a read of a version is then
    a temporary view over exactly those files, made once per table and version in a refresh and reused by
    every step that reads it. The views go when the refresh ends. A session without the engine jar, or
    a table named in a catalog, is read by Delta as before.

    >>> with warm_file_reads(spark, enabled=True):
    ...     DeltaHandle(spark, TableRef(path="/w/orders"), "left").read(7).count()
    1000
    """

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark
        self.views: dict[tuple[str, int, bool], str] = {}
        self.sources: list[str] = []

    def frame(self, path: str, version: int, *, positions: bool = False) -> DataFrame | None:
        """The table at ``path`` as of ``version`` over its warm file list (None: the JVM side cannot);
        with ``positions``, each row's file and row index as :data:`ROW_POSITION_COLUMNS`."""
        view = self.views.get((path, version, positions))
        if view is None:
            if not engine_procedure.supports(self.spark, "files"):
                return None
            view = f"fkjoin_files_{len(self.views)}_{engine_procedure.request_suffix()}"
            answer = engine_procedure.call(
                self.spark, Files(path=path, version=version, view=view, positions=positions)
            )
            self.sources.append(answer.source)
            self.views[(path, version, positions)] = view
        return self.spark.table(view)

    def drop(self) -> None:
        for view in self.views.values():
            try:
                self.spark.catalog.dropTempView(view)
            except Exception as error:  # a lost connection: the session's end drops it
                _log.warning("could not drop the temporary view %s: %s", view, error)
        self.views.clear()


_WARM_READS: ContextVar[WarmFileReads | None] = ContextVar("fkjoin_warm_reads", default=None)


def feed_bytes(tables: list[tuple[DeltaHandle, int, int]]) -> list[int | None]:
    """The bytes each table's change feed reads over versions ``after + 1 .. to`` (``(table, after, to)``
    each): its change-data files, or the data files a version added and removed, from the commits alone,
    in one request to the engine's JVM side (no Spark job). None for a table it cannot tell: no engine jar,
    a table named in a catalog, a commit gone.

    >>> feed_bytes([(orders, 6, 7), (customers, 3, 3)])
    [2114, 0]
    """
    found: list[int | None] = [0 if to <= after else None for _, after, to in tables]
    asked = [i for i, (table, after, to) in enumerate(tables) if to > after and table.ref.path is not None]
    if not asked or not engine_procedure.supports(tables[asked[0]][0].spark, "feed_size"):
        return found
    answer = engine_procedure.call(
        tables[asked[0]][0].spark,
        FeedSize(
            tables=[{"path": tables[i][0].ref.path, "after": tables[i][1], "to": tables[i][2]} for i in asked]
        ),
    )
    for index, size in zip(asked, answer.sizes, strict=True):
        found[index] = size if size >= 0 else None
    return found


@contextmanager
def warm_file_reads(spark: SparkSession, *, enabled: bool) -> Iterator[WarmFileReads | None]:
    """Within this block (when ``enabled``), reads of a table at a version by path go over the warm file
    list of :class:`WarmFileReads`. The refresh skeleton enables it for a small refresh."""
    if not enabled:
        yield None
        return
    reads = WarmFileReads(spark)
    token = _WARM_READS.set(reads)
    try:
        yield reads
    finally:
        _WARM_READS.reset(token)
        reads.drop()


@dataclass(frozen=True)
class TableState:
    """What a Delta table is at one moment: its latest version, identity and properties."""

    version: int
    table_id: str
    properties: dict[str, str]
    #: The bytes of the version's data files (None: unknown); what a refresh may have to read.
    size_bytes: int | None = None

    @property
    def cdf_enabled(self) -> bool:
        return self.properties.get("delta.enableChangeDataFeed", "false").lower() == "true"


@dataclass(frozen=True)
class TableMetadata:
    """A Delta table's id and properties: what stays the same from version to version."""

    table_id: str
    properties: dict[str, str]


class DeltaHandle:
    """A Delta table named in a spec, with the reads a refresh needs.

    >>> orders = DeltaHandle(spark, TableRef(path="/warehouse/orders"), role="left")
    >>> orders.state().version
    7
    """

    def __init__(self, spark: SparkSession, ref: TableRef, role: str) -> None:
        self.spark = spark
        self.ref = ref
        self.role = role

    @property
    def location(self) -> str:
        return self.ref.location

    @property
    def local_path(self) -> Path | None:
        """The table's folder when it is on the local file system: read its log without the JVM."""
        if self.ref.path is None:
            return None
        folder = local_path(self.ref.path)
        return Path(folder) if folder is not None else None

    @property
    def sql_identifier(self) -> str:
        """The table in SQL: ``delta.`/w/orders``` for a path, ```db`.`orders``` for a catalog name."""
        if self.ref.path is not None:
            return f"delta.{quote(self.ref.path)}"
        return ".".join(quote(part) for part in (self.ref.name or "").split("."))

    def resolved_identity(self) -> str:
        """What this table is compared by: its location's identity; a catalog table's resolved location
        when it exists (``DESCRIBE DETAIL``), else its lower-cased name."""
        if self.ref.path is not None or not self.exists():
            return self.ref.identity
        location = self.detail().get("location")
        return location_identity(str(location)) if location else self.ref.identity

    def holds_other_files(self) -> bool:
        """True when the location is not a Delta table but holds files: someone else's data.

        What a create killed before its first commit left (:meth:`left_by_failed_create`) is not."""
        if self.ref.path is None or self.exists():
            return False
        local = self.local_path
        if local is not None:
            holds_files = local.is_file() or (local.is_dir() and any(local.iterdir()))
        else:
            holds_files = path_has_files(self.spark, self.ref.path)
        return holds_files and not self._left_by_failed_create()

    def left_by_failed_create(self) -> bool:
        """True when the location holds only what a create killed before its first commit leaves: a
        ``_delta_log`` with no file in it but hidden temporary ones, and data files named ``part-*``
        beside it. No table version references those files, so no reader sees them; the next create goes
        over them (Delta's CREATE OR REPLACE) and leaves them unreferenced, for ``VACUUM`` to remove.
        Anything else there (a commit, a checkpoint, a ``report.csv``) is not a killed create's.

        >>> DeltaHandle(spark, TableRef(path="/w/killed_mid_create"), "output").left_by_failed_create()
        True
        """
        return self.ref.path is not None and not self.exists() and self._left_by_failed_create()

    def _left_by_failed_create(self) -> bool:
        """:meth:`left_by_failed_create` for a path known to hold no table."""
        assert self.ref.path is not None
        local = self.local_path
        if local is not None:
            log = local / "_delta_log"
            if not log.is_dir() or any(not f.name.startswith(".") for f in log.rglob("*") if f.is_file()):
                return False
            files = (f for f in local.rglob("*") if f.is_file() and log not in f.parents)
            return all(_DATA_FILE.match(f.name) for f in files)
        log = file_listing(self.spark, self.ref.path.rstrip("/") + "/_delta_log")
        if log is None or log.limit(1).count() > 0:
            return False
        listing = file_listing(self.spark, self.ref.path)
        others = listing.where(~F.col("path").rlike(r"/\.?part-[^/]*$")) if listing is not None else None
        return others is None or others.limit(1).count() == 0

    def exists(self) -> bool:
        local = self.local_path
        if local is not None:
            return (local / "_delta_log").is_dir() and any((local / "_delta_log").glob("*.json"))
        if self.ref.path is not None:
            return self._detail_if_table() is not None
        return self.spark.catalog.tableExists(self.ref.name)

    def _detail_if_table(self) -> dict[str, Any] | None:
        """:meth:`detail` of a path, or None when no Delta table is there."""
        try:
            return self.detail()
        except AnalysisException as error:
            if _condition(error) in _NOT_A_TABLE:
                return None
            raise

    def metadata(self) -> TableMetadata | None:
        """The table's id and properties, or None when there is no table: what the ownership check
        compares, read without the version (which costs a read of the newest commit on an object store).

        >>> DeltaHandle(spark, TableRef(path="s3a://lake/orders"), "left").metadata().table_id
        'f3b0c2d6-...'
        """
        local = self.local_path
        if local is not None:
            if not self.exists():
                return None
            metadata = self._opened_log(local).metadata()
            return TableMetadata(str(metadata.id), dict(metadata.configuration))
        if self.ref.path is not None:
            detail = self._detail_if_table()
        else:
            detail = self.detail() if self.exists() else None
        if detail is None:
            return None
        return TableMetadata(str(detail["id"]), dict(detail["properties"] or {}))

    def detail(self) -> dict[str, Any]:
        """Delta's ``DESCRIBE DETAIL`` of the table: id, location, properties, sizeInBytes, numFiles..."""
        return self.spark.sql(f"DESCRIBE DETAIL {self.sql_identifier}").first().asDict()

    def require(self) -> None:
        """Fail with a SpecError that says what to do when the table is not there."""
        if not self.exists():
            raise SpecError(
                f"{self.role}: no Delta table at {self.location}; create it (with "
                "delta.enableChangeDataFeed=true) or fix the path/name"
            )

    def _opened_log(self, local: Path) -> deltalake.DeltaTable:
        """The local table's Delta log at its latest version: loaded once per refresh (:func:`opened_once`)
        and brought up to date on each later use, or loaded now outside a refresh."""
        opened = _OPENED.get()
        if opened is None:
            return deltalake.DeltaTable(str(local))
        key = str(local)
        table = opened.get(key)
        if table is None:
            table = opened[key] = deltalake.DeltaTable(key)
        else:
            table.update_incremental()
        return table

    def state(self, *, with_size: bool = False, version: int | None = None) -> TableState:
        """The latest version, table id and properties, read from the Delta log (no data scan); with
        ``with_size``, the bytes of its data files too (a table read through Spark always has them).

        Local tables are read with ``deltalake`` (milliseconds, no Spark job); others through Spark.
        ``version``, when the caller has just read the newest commit's (from :meth:`history`), spares a
        table not on local disk that read.
        """
        local = self.local_path
        if local is not None:
            table = self._opened_log(local)
            metadata = table.metadata()
            return TableState(
                version=int(table.version()),
                table_id=str(metadata.id),
                properties=dict(metadata.configuration),
                size_bytes=data_file_bytes(table) if with_size else None,
            )
        detail = self.detail()
        if version is None:
            version = self.history(1)[0]["version"]
        size = detail.get("sizeInBytes")
        return TableState(
            version=int(version),
            table_id=str(detail["id"]),
            properties=dict(detail["properties"] or {}),
            size_bytes=int(size) if size is not None else None,
        )

    def transaction_version(self, app_id: str) -> int | None:
        """The last ``txnVersion`` Delta recorded for ``app_id`` in this table (None: never), read from
        the snapshot, so log cleanup and any number of other commits do not hide it."""
        local = self.local_path
        if local is not None:
            return self._opened_log(local).transaction_version(app_id)
        if is_connect(self.spark):
            return internals.transaction_version_from_log(self.spark, self.storage_path(), app_id)
        return internals.delta_transaction_version(self.spark, self.storage_path(), app_id)

    def storage_path(self) -> str:
        """Where the table's files are: its path, or a catalog table's resolved location."""
        if self.ref.path is not None:
            return self.ref.path
        return str(self.detail()["location"])

    def history(self, limit: int) -> list[dict[str, Any]]:
        """The newest ``limit`` commits, newest first: version, timestamp, operation, isBlindAppend,
        userMetadata and operationMetrics."""
        local = self.local_path
        if local is not None:
            return history_of(self._opened_log(local), limit)
        rows = self.spark.sql(f"DESCRIBE HISTORY {self.sql_identifier} LIMIT {int(limit)}").select(
            "version", "timestamp", "operation", "isBlindAppend", "userMetadata", "operationMetrics"
        )
        return [
            {
                **row.asDict(),
                "isBlindAppend": bool(row["isBlindAppend"]),
                "operationMetrics": dict(row["operationMetrics"] or {}),
            }
            for row in rows.orderBy("version", ascending=False).collect()
        ]

    def appended_rows(self, after_version: int, to_version: int) -> int | None:
        """Rows added by versions ``after_version+1 .. to_version`` when every one of them is a blind
        append that recorded its row count; None when any is not (an update, a delete, a compaction)
        or the history no longer covers the range.

        Read from the Delta log, so a stream refresh knows its batch size without a Spark job. The
        change feed of a blind append is exactly its new rows, all ``insert``.

        >>> orders.appended_rows(4, 6)  # two appends of 10,000 rows each
        20000
        """
        wanted = range(after_version + 1, to_version + 1)
        if not wanted:
            return 0
        entries = {entry["version"]: entry for entry in self.history(len(wanted) + 16)}
        if any(version not in entries for version in wanted):
            return None
        total = 0
        for version in wanted:
            entry = entries[version]
            rows = entry["operationMetrics"].get("numOutputRows")
            if not entry["isBlindAppend"] or rows is None:
                return None
            total += int(rows)
        return total

    def read_with_positions(self, version: int) -> DataFrame:
        """The table as of ``version`` with each row's data file and row index (:data:`ROW_POSITION_COLUMNS`):
        what deletion vectors are written from."""
        frame = self._warm_read(version, positions=True)
        if frame is not None:
            return frame
        file, row = ROW_POSITION_COLUMNS
        return self._delta_read(version).selectExpr(
            "*", f"_metadata.file_path AS {file}", f"_metadata.row_index AS {row}"
        )

    def read(self, version: int | None = None) -> DataFrame:
        """The table as of ``version`` (latest when None); inside :func:`warm_file_reads`, a pinned
        version of a table by path is read over the engine's warm file list."""
        frame = self._warm_read(version, positions=False) if version is not None else None
        return frame if frame is not None else self._delta_read(version)

    def _warm_read(self, version: int, *, positions: bool) -> DataFrame | None:
        """The read over the warm file list of the :func:`warm_file_reads` block around it (None: no
        block, a table named in a catalog, or a session whose JVM side cannot)."""
        warm = _WARM_READS.get()
        if warm is None or self.ref.path is None or warm.spark is not self.spark:
            return None
        return warm.frame(self.ref.path, version, positions=positions)

    def _delta_read(self, version: int | None) -> DataFrame:
        reader = self.spark.read.format("delta")
        if version is not None:
            reader = reader.option("versionAsOf", version)
        if self.ref.path is not None:
            return reader.load(self.ref.path)
        return reader.table(self.ref.name)

    def changes(self, after_version: int, to_version: int) -> DataFrame:
        """The change feed of versions ``after_version + 1 .. to_version`` (CDF rows with _change_type)."""
        reader = (
            self.spark.read.format("delta")
            .option("readChangeFeed", "true")
            .option("startingVersion", after_version + 1)
            .option("endingVersion", to_version)
        )
        if self.ref.path is not None:
            return reader.load(self.ref.path)
        return reader.table(self.ref.name)


def input_frame(table: DeltaHandle, state: TableState, *, engine_owned: bool = False) -> DataFrame:
    """An input table at its pinned version, with the engine's reserved columns handled.

    Columns named ``_fkjoin_*`` belong to the engine: a table this engine wrote (``fkjoin.owner``, or
    ``engine_owned``) has them dropped (a global table's ``_fkjoin_order``); any other input holding one
    is refused, since it would clash with the engine's own working columns.

    >>> input_frame(DeltaHandle(spark, TableRef(path="/w/products_global"), "right"), state).columns
    ['product_id', 'name']
    """
    frame = table.read(state.version)
    reserved = [c for c in frame.columns if c.startswith(RESERVED_PREFIX)]
    if not reserved:
        return frame
    if engine_owned or OWNER_PROPERTY in state.properties:
        return frame.drop(*reserved)
    raise SpecError(
        f"{table.role}: column {reserved[0]!r} of {table.role} table {table.location} starts with "
        f"{RESERVED_PREFIX!r}, which is reserved for the engine's own columns; rename it in the table "
        "(or select it under another name in a view you write to a Delta table)"
    )


def null_of(data_type: T.DataType) -> Column:
    """A typed null, cast through the type's SQL name: over Spark Connect a type object travels with an
    explicit default collation (``string collate UTF8_BINARY``), which Delta then writes into the table's
    schema, where ``deltalake`` cannot read it.

    >>> null_of(T.StructType([T.StructField("a b", T.StringType())]))
    Column<'CAST(NULL AS STRUCT<`a b`: STRING>)'>
    """
    return F.lit(None).cast(sql_type(data_type))


def sql_type(data_type: T.DataType) -> str:
    """A type's SQL name, field names quoted: ``struct<`a b`:string,n:array<bigint>>``."""
    if isinstance(data_type, T.StructType):
        return "struct<" + ",".join(f"{quote(f.name)}:{sql_type(f.dataType)}" for f in data_type.fields) + ">"
    if isinstance(data_type, T.ArrayType):
        return f"array<{sql_type(data_type.elementType)}>"
    if isinstance(data_type, T.MapType):
        return f"map<{sql_type(data_type.keyType)},{sql_type(data_type.valueType)}>"
    if isinstance(data_type, T.StringType):
        collation = getattr(data_type, "collation", "UTF8_BINARY")
        return "string" if collation == "UTF8_BINARY" else f"string collate {collation}"
    return data_type.simpleString()


def key_is_null(columns: list[str]) -> Column:
    """True where any key column is null: such rows are dropped (Kafka drops null-key records)."""
    condition = F.lit(False)
    for column in columns:
        condition = condition | F.col(quote(column)).isNull()
    return condition


def _comparable(expression: str, data_type: T.DataType) -> str:
    """SQL that compares ``expression`` by value whatever its type.

    ``<=>`` is invalid on maps and variants (SPARK-18519), and on structs or arrays that hold one, so
    those compare as JSON; a map's entries are sorted by key first, so equal maps built in another
    order compare equal (no rewrite of an unchanged row).
    """
    if not _has_unorderable(data_type):
        return expression
    if isinstance(data_type, T.MapType) and not _has_unorderable(data_type.keyType):
        entries = (
            f"array_sort(map_entries({expression}), (a, b) -> "
            "CASE WHEN a.key < b.key THEN -1 WHEN a.key > b.key THEN 1 ELSE 0 END)"
        )
        return f"to_json({entries})"
    return f"to_json({expression})"


def _has_unorderable(data_type: T.DataType) -> bool:
    if isinstance(data_type, T.MapType | T.VariantType):
        return True
    if isinstance(data_type, T.ArrayType):
        return _has_unorderable(data_type.elementType)
    if isinstance(data_type, T.StructType):
        return any(_has_unorderable(field.dataType) for field in data_type.fields)
    return False


def values_equal(left_alias: str, right_alias: str, columns: list[tuple[str, T.DataType]]) -> str:
    """SQL that is true when every column is equal or both null: ``t.a <=> s.a AND t.b <=> s.b``.

    Columns come with their types, so maps, variants and structs holding them compare too.

    >>> values_equal("t", "s", [("a", T.LongType()), ("m", T.MapType(T.StringType(), T.LongType()))])
    "t.`a` <=> s.`a` AND to_json(array_sort(map_entries(t.`m`), ...)) <=> to_json(array_sort(...))"
    """
    terms = [
        f"{_comparable(f'{left_alias}.{quote(c)}', t)} <=> {_comparable(f'{right_alias}.{quote(c)}', t)}"
        for c, t in columns
    ]
    return " AND ".join(terms) or "TRUE"


def data_file_bytes(log: deltalake.DeltaTable) -> int:
    """The bytes of the data files of a loaded Delta log's version (from its add actions; no scan)."""
    sizes = log.get_add_actions(flatten=False).column("size_bytes").to_pylist()
    return int(sum(size for size in sizes if size is not None))


def table_size_bytes(table: DeltaHandle, version: int | None = None) -> int:
    """The table's size on disk (sum of its data files) at ``version``: what a broadcast would carry.

    Read from the Delta log (deltalake for local tables; Delta's snapshot through Spark otherwise);
    no data scan. These are compressed Parquet bytes: a broadcast takes a few times more memory.

    >>> table_size_bytes(DeltaHandle(spark, TableRef(path="/w/products"), "table"))
    48213
    """
    local = table.local_path
    if local is not None:
        return data_file_bytes(deltalake.DeltaTable(str(local), version=version))
    if version is None:
        return int(table.detail()["sizeInBytes"] or 0)
    files = table.read(version).inputFiles()
    if not files:
        return 0
    sizes = table.spark.read.format("binaryFile").load(files).selectExpr("coalesce(sum(length), 0)")
    return int(sizes.first()[0])


def path_has_files(spark: SparkSession, path: str) -> bool:
    """Whether a (non-local) location exists and holds any file, by listing it through Spark.

    The listing skips names starting with ``_`` or ``.`` (Spark's own rule for data files), so a folder
    holding only such files counts as empty: Delta's ``_delta_log`` of a table that failed midway, say.
    """
    listing = file_listing(spark, path)
    return listing is not None and listing.select("path").limit(1).count() > 0


def file_listing(spark: SparkSession, path: str) -> DataFrame | None:
    """The files under a (non-local) location, recursively, as Spark lists them (a ``path`` column, names
    starting with ``_`` or ``.`` skipped); None when the location does not exist. Building it lists the
    location once; each query over it is a job."""
    try:
        listing = spark.read.format("binaryFile").option("recursiveFileLookup", "true").load(path)
        _ = listing.schema  # over Spark Connect, resolving the read is what lists the location
    except AnalysisException as error:
        if _condition(error) == "PATH_NOT_FOUND":
            return None
        raise
    return listing.select("path")


#: Error conditions of ``DESCRIBE DETAIL`` on a location that holds no Delta table.
_NOT_A_TABLE = frozenset({"DELTA_MISSING_DELTA_TABLE", "DELTA_PATH_DOES_NOT_EXIST", "PATH_NOT_FOUND"})


def _condition(error: AnalysisException) -> str:
    """An analysis error's condition without its sub-class: ``DELTA_MISSING_DELTA_TABLE``."""
    return str(error.getCondition() or "").split(".", 1)[0]


def require_columns(names: list[str], columns: list[str], field_path: str, table: DeltaHandle) -> None:
    """SpecError naming the first of ``columns`` missing from ``names`` (a table's columns)."""
    for index, column in enumerate(columns):
        if column not in names:
            raise SpecError(
                f"{field_path}[{index}]: column {column!r} is not in {table.role} table {table.location} "
                f"(columns: {', '.join(names)})"
            )


def pinned_input(
    handle: DeltaHandle, state: TableState, schema: Any, version: int | None = None
) -> InputState:
    """What a refresh records of an input it pinned: the handle's location, the snapshot's identity and
    CDF flag, the read's columns, at ``version`` (default: the snapshot's own).

    >>> pinned_input(orders, orders.state(), frame.schema).version
    7
    """
    return InputState(
        handle.location,
        state.table_id,
        state.version if version is None else version,
        state.cdf_enabled,
        schema_columns(schema),
    )


def cdf_off_warnings(inputs: dict[str, tuple[DeltaHandle, TableState]]) -> list[str]:
    """The warning for each input whose change data feed is off: every refresh of the join rebuilds.

    >>> cdf_off_warnings({"right": (customers, customers.state())})
    ['change data feed is off on input right (/w/customers): every refresh will be a full rebuild; ...']
    """
    return [
        f"change data feed is off on input {name} ({handle.location}): every refresh will be a full rebuild; "
        "enable it with ALTER TABLE ... SET TBLPROPERTIES (delta.enableChangeDataFeed = true)"
        for name, (handle, state) in inputs.items()
        if not state.cdf_enabled
    ]

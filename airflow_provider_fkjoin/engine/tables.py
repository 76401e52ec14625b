"""Delta tables by path or catalog name: snapshots at a version, change feeds, and what a table is.

One class serves inputs and outputs so every join reads and checks tables the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path
from typing import Any

import deltalake
from delta.tables import DeltaTable
from pyspark.errors import AnalysisException, ParseException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from .errors import SpecError
from .spec import TableRef, quote

CDF_COLUMNS = ("_change_type", "_commit_version", "_commit_timestamp")
LIVE_CHANGE_TYPES = ("insert", "update_postimage")


@dataclass(frozen=True)
class TableState:
    """What a Delta table is at one moment: its latest version, identity and properties."""

    version: int
    table_id: str
    properties: dict[str, str]

    @property
    def cdf_enabled(self) -> bool:
        return self.properties.get("delta.enableChangeDataFeed", "false").lower() == "true"


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
        path = self.ref.path
        if path is None:
            return None
        if path.startswith("file:"):
            path = path.removeprefix("file://").removeprefix("file:")
        elif "://" in path:
            return None
        return Path(path)

    def exists(self) -> bool:
        local = self.local_path
        if local is not None:
            return (local / "_delta_log").is_dir() and any((local / "_delta_log").glob("*.json"))
        if self.ref.path is not None:
            return DeltaTable.isDeltaTable(self.spark, self.ref.path)
        return self.spark.catalog.tableExists(self.ref.name)

    @cached_property
    def delta_table(self) -> DeltaTable:
        if self.ref.path is not None:
            return DeltaTable.forPath(self.spark, self.ref.path)
        return DeltaTable.forName(self.spark, self.ref.name)

    def require(self) -> None:
        """Fail with a SpecError that says what to do when the table is not there."""
        if not self.exists():
            raise SpecError(
                f"{self.role}: no Delta table at {self.location}; create it (with "
                "delta.enableChangeDataFeed=true) or fix the path/name"
            )

    def state(self) -> TableState:
        """The latest version, table id and properties, read from the Delta log (no data scan).

        Local tables are read with ``deltalake`` (milliseconds, no Spark job); others through Spark.
        """
        local = self.local_path
        if local is not None:
            table = deltalake.DeltaTable(str(local))
            metadata = table.metadata()
            return TableState(
                version=int(table.version()),
                table_id=str(metadata.id),
                properties=dict(metadata.configuration),
            )
        detail = self.delta_table.detail().select("id", "properties").first()
        version = self.delta_table.history(1).select("version").first()[0]
        return TableState(
            version=int(version), table_id=str(detail["id"]), properties=dict(detail["properties"])
        )

    def history(self, limit: int) -> list[dict[str, Any]]:
        """The newest ``limit`` commits, newest first: version, timestamp, isBlindAppend, userMetadata
        and operationMetrics."""
        local = self.local_path
        if local is not None:
            return [
                {
                    "version": int(entry["version"]),
                    "timestamp": datetime.fromtimestamp(entry["timestamp"] / 1000, tz=UTC),
                    "isBlindAppend": bool(entry.get("isBlindAppend")),
                    "userMetadata": entry.get("userMetadata"),
                    "operationMetrics": {k: str(v) for k, v in (entry.get("operationMetrics") or {}).items()},
                }
                for entry in deltalake.DeltaTable(str(local)).history(limit)
            ]
        rows = self.delta_table.history(limit).select(
            "version", "timestamp", "isBlindAppend", "userMetadata", "operationMetrics"
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

    def read(self, version: int | None = None) -> DataFrame:
        """The table as of ``version`` (latest when None)."""
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


def key_is_null(columns: list[str]) -> Column:
    """True where any key column is null: such rows are dropped (Kafka drops null-key records)."""
    condition = F.lit(False)
    for column in columns:
        condition = condition | F.col(quote(column)).isNull()
    return condition


def null_safe_equal(left_alias: str, right_alias: str, columns: list[str]) -> str:
    """SQL that is true when every column is equal or both null: ``t.a <=> s.a AND t.b <=> s.b``."""
    return " AND ".join(f"{left_alias}.{quote(c)} <=> {right_alias}.{quote(c)}" for c in columns) or "TRUE"


def table_size_bytes(table: DeltaHandle, version: int | None = None) -> int:
    """The table's size on disk (sum of its data files) at ``version``: what a broadcast would carry.

    Read from the Delta log (deltalake for local tables; Delta's snapshot through Spark otherwise);
    no data scan. These are compressed Parquet bytes: a broadcast takes a few times more memory.

    >>> table_size_bytes(DeltaHandle(spark, TableRef(path="/w/products"), "table"))
    48213
    """
    local = table.local_path
    if local is not None:
        actions = deltalake.DeltaTable(str(local), version=version).get_add_actions(flatten=True)
        return int(sum(value for value in actions.column("size_bytes").to_pylist() if value is not None))
    if version is None:
        return int(table.delta_table.detail().select("sizeInBytes").first()[0] or 0)
    jvm = table.spark.sparkContext._jvm
    conf = table.spark.sparkContext._jsc.hadoopConfiguration()
    total = 0
    for name in table.read(version).inputFiles():
        path = jvm.org.apache.hadoop.fs.Path(name)
        total += int(path.getFileSystem(conf).getFileStatus(path).getLen())
    return total


def require_columns(names: list[str], columns: list[str], field_path: str, table: DeltaHandle) -> None:
    """SpecError naming the first of ``columns`` missing from ``names`` (a table's columns)."""
    for index, column in enumerate(columns):
        if column not in names:
            raise SpecError(
                f"{field_path}[{index}]: column {column!r} is not in {table.role} table {table.location} "
                f"(columns: {', '.join(names)})"
            )


def analysed(what: str, build: Any) -> Any:
    """Run Spark analysis of user SQL and turn its failure into a SpecError naming the field."""
    try:
        return build()
    except (AnalysisException, ParseException) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SpecError(f"{what}: {first[:300]}") from None

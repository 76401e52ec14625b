"""The few Spark and Delta internals the engine needs, in one place, checked against the pinned versions.

Public APIs cannot do three things the engine needs (the net-change commit, a fourth, is the engine's
JVM side, :mod:`.engine_procedure`):

* tell which Catalyst nodes an analysed spec expression contains (a subquery, a window, ``reflect``...),
  to refuse expressions that are not pure row-level SQL (:mod:`.expressions`; over Spark Connect, which
  has no py4j, :mod:`.expressions` reads the analysed plan's text and the function registry instead);
* read the version of the Delta transaction (``txnAppId``) an output last committed, for a table that
  is not on the local file system (local tables are read with ``deltalake``, which has a public API):
  from the table's snapshot through py4j, or over Spark Connect from the log's files
  (:func:`transaction_version_from_log`, the Delta protocol's checkpoint and commit format);
* append a stream refresh's rows guarded by its app id without rebuilding the output's state
  (:class:`AppendTransaction`).

All depend on shapes a Spark or Delta upgrade may change (classes through py4j, the log's layout), so
:func:`check_versions` runs before any is used and fails loudly on versions nobody has tested.
The test suite calls every function here, so an upgrade that breaks one fails there first.

    >>> analysed_node_classes(spark.range(1).selectExpr("rand() AS x"))
    {'Project', 'Range', 'Rand', 'Alias', ...}
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

from delta import exceptions as delta_errors
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

#: (Spark major.minor, Delta major.minor) pairs these internals were written and tested against.
TESTED_SPARK = ("4.2",)
TESTED_DELTA = ("4.4",)


#: PySpark's Python classes for Delta's conflicts between concurrent commits (they do not share a base).
DELTA_CONFLICTS: tuple[type[Exception], ...] = (
    delta_errors.DeltaConcurrentModificationException,
    delta_errors.ConcurrentWriteException,
    delta_errors.MetadataChangedException,
    delta_errors.ProtocolChangedException,
    delta_errors.ConcurrentAppendException,
    delta_errors.ConcurrentDeleteReadException,
    delta_errors.ConcurrentDeleteDeleteException,
    delta_errors.ConcurrentTransactionException,
)


class UnsupportedRuntimeError(RuntimeError):
    """Spark or Delta is a version the engine's internal calls were not tested with."""


_checked: set[int] = set()


def check_versions(spark: SparkSession) -> None:
    """Fail clearly when the session's Spark or Delta version is not one these internals support."""
    if id(spark) in _checked:
        return
    spark_version = ".".join(spark.version.split(".")[:2])
    if spark_version not in TESTED_SPARK:
        raise UnsupportedRuntimeError(
            f"Spark {spark.version} is not supported by airflow_provider_fkjoin.engine.runtime.internals "
            f"(tested: {', '.join(TESTED_SPARK)}); pin pyspark to a tested version"
        )
    delta_version = _delta_version(spark)
    if delta_version is not None and ".".join(delta_version.split(".")[:2]) not in TESTED_DELTA:
        raise UnsupportedRuntimeError(
            f"Delta {delta_version} is not supported by airflow_provider_fkjoin.engine.runtime.internals "
            f"(tested: {', '.join(TESTED_DELTA)}); use Delta's jars of a tested version"
        )
    _checked.add(id(spark))


def _delta_version(spark: SparkSession) -> str | None:
    """Delta's version from its jar's manifest (Implementation-Version), or None when it has none; over
    Spark Connect, from Delta's own version constant on the server."""
    from .session import is_connect

    if is_connect(spark):
        row = spark.sql("SELECT reflect('io.delta.package', 'VERSION')").first()
        return str(row[0]) if row and row[0] else None
    jvm = spark._jvm  # type: ignore[attr-defined]
    loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
    version = loader.loadClass("org.apache.spark.sql.delta.DeltaLog").getPackage().getImplementationVersion()
    return str(version) if version else None


def analysed_node_classes(frame: DataFrame) -> set[str]:
    """The simple class names of every node (plans and expressions) in ``frame``'s analysed plan.

    Analysis only: no job runs and nothing in the plan is evaluated.
    """
    check_versions(frame.sparkSession)
    plan = frame._jdf.queryExecution().analyzed()  # type: ignore[attr-defined]
    names: set[str] = set()
    _walk(json.loads(plan.toJSON()), names)
    for subquery in _scala_seq(plan.subqueriesAll()):
        names.add("Subquery")
        _walk(json.loads(subquery.toJSON()), names)
    return names


def _walk(node: Any, names: set[str]) -> None:
    if isinstance(node, dict):
        cls = node.get("class")
        if isinstance(cls, str):
            names.add(cls.rsplit(".", 1)[-1].rstrip("$"))
        for value in node.values():
            _walk(value, names)
    elif isinstance(node, list):
        for value in node:
            _walk(value, names)


def _scala_seq(seq: Any) -> list[Any]:
    return [seq.apply(i) for i in range(seq.size())]


def delta_transaction_version(spark: SparkSession, path: str, app_id: str) -> int | None:
    """The latest ``txnVersion`` Delta recorded for ``app_id`` in the table at ``path`` (None if never).

    Read from the table's snapshot (SetTransaction actions survive checkpoints and log cleanup), so it
    holds even when the commits that wrote it are gone from the log.
    """
    check_versions(spark)
    jvm = spark._jvm  # type: ignore[attr-defined]
    log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path)  # type: ignore[attr-defined]
    snapshot = log.update(False, jvm.scala.Option.empty(), jvm.scala.Option.empty())
    found = snapshot.transactions().get(app_id)
    return int(found.get()) if found.isDefined() else None


_CHECKPOINT_FILE = re.compile(r"^(\d{20})\.checkpoint(?:\.(\d{10})\.(\d{10}))?\.parquet$")


def _last_checkpoint(spark: SparkSession, log: str, path: str) -> tuple[int, list[str]]:
    """The newest complete classic checkpoint in ``log``: its version and files (``-1, []`` for none).

    Found by listing the log (Spark's readers skip ``_last_checkpoint``, a name starting with ``_``).
    """
    listing = spark.read.format("binaryFile").option("pathGlobFilter", "*.checkpoint*.parquet").load(log)
    parts: dict[int, dict[str, tuple[int, int]]] = {}
    for row in listing.select("path").collect():
        name = str(row[0]).rsplit("/", 1)[-1]
        match = _CHECKPOINT_FILE.match(name)
        if match is None:
            raise UnsupportedRuntimeError(
                f"{path}: checkpoint {name} is a V2 checkpoint, not read without py4j"
            )
        version, part, total = int(match.group(1)), int(match.group(2) or 1), int(match.group(3) or 1)
        parts.setdefault(version, {})[str(row[0])] = (part, total)
    for version in sorted(parts, reverse=True):
        files = parts[version]
        if len(files) == next(iter(files.values()))[1]:  # every part of a multi-part checkpoint is there
            return version, sorted(files)
    return -1, []


def transaction_version_from_log(spark: SparkSession, path: str, app_id: str) -> int | None:
    """:func:`delta_transaction_version` without py4j (a Spark Connect session): the newest
    ``SetTransaction`` of ``app_id`` in the table's log, read through Spark's readers.

    The log is the newest checkpoint (one file or several parts) plus the JSON commits after it; a
    ``SetTransaction`` is kept in checkpoints, so log cleanup never hides it. V2
    checkpoints (sidecar files) are refused: the engine's outputs never enable them.
    """
    check_versions(spark)
    log = f"{path.rstrip('/')}/_delta_log"
    checkpoint, files = _last_checkpoint(spark, log, path)
    found: list[int] = []
    if files:
        rows = spark.read.parquet(*files).where(F.col("txn.appId") == app_id).select("txn.version")
        found += [int(row[0]) for row in rows.collect()]
    try:
        commits = (
            spark.read.json(f"{log}/*.json")
            .where(F.col("txn").isNotNull())
            .select(
                "txn.appId",
                "txn.version",
                F.regexp_extract(F.col("_metadata.file_name"), r"^(\d+)\.json$", 1).cast("bigint").alias("v"),
            )
            .where((F.col("appId") == app_id) & (F.col("v") > checkpoint))
        )
        found += [int(row["version"]) for row in commits.collect()]
    except AnalysisException as error:  # no commit since the checkpoint holds a transaction at all
        if "txn" not in str(error):
            raise
    return max(found) if found else None


class AppendTransaction:
    """A blind append to a Delta table in one commit, guarded against a second run of the same refresh
    without Delta's ``txnVersion`` lookup (py4j).

    Delta's writer option ``txnVersion`` skips an append its app id already committed; to know, Delta
    rebuilds the snapshot's whole state (a Spark job over the log, about a second a refresh). A refresh
    already knows its progress from the output's log, so here the transaction only records that it
    depends on ``app_id``: Delta then fails the commit if a commit carrying that app id (another run of
    the refresh) lands after the snapshot. The caller checks :attr:`version` against the version it
    planned on. The commit is still a blind ``WRITE`` with its row count in the log, as a stream input
    reading this table expects.

    >>> transaction = AppendTransaction(spark, "/w/clicks_enriched", "fkjoin-3f2a")
    >>> transaction.version, transaction.commit(transaction.write_files(batch), seq=12)
    (11, 12)
    """

    def __init__(self, spark: SparkSession, path: str, app_id: str) -> None:
        check_versions(spark)
        self.spark = spark
        self.app_id = app_id
        jvm = spark._jvm  # type: ignore[attr-defined]
        self._jvm = jvm
        self._delta = jvm.org.apache.spark.sql.delta
        log = self._delta.DeltaLog.forTable(spark._jsparkSession, path)  # type: ignore[attr-defined]
        self._txn = log.startTransaction()
        self._txn.readTxn().addOne(app_id)

    @property
    def version(self) -> int:
        """The snapshot version the transaction read (its commit becomes ``version + 1``)."""
        return int(self._txn.snapshot().version())

    def accepts(self, columns: list[tuple[str, str]]) -> bool:
        """Whether rows of these (name, type) columns fit the table as they are: same columns and types,
        no partition columns. Anything else goes through Delta's writer, which checks and reports it."""
        metadata = self._txn.metadata()
        schema = T.StructType.fromJson(json.loads(metadata.schemaString()))
        have = [(field.name, field.dataType.simpleString()) for field in schema.fields]
        return have == columns and metadata.partitionColumns().isEmpty()

    def write_files(self, rows: DataFrame) -> Any:
        """Write ``rows`` as new data files; their ``AddFile`` actions, for :meth:`commit`."""
        return self._txn.writeFiles(rows._jdf)

    def commit(self, files: Any, seq: int) -> int:
        """Commit ``files`` with the refresh's ``SetTransaction`` as one blind ``WRITE``; returns the
        commit's version. User metadata comes from the session
        (:func:`.commit_settings.metadata_settings`)."""
        jvm = self._jvm
        actions = jvm.java.util.ArrayList()
        actions.addAll(jvm.scala.jdk.javaapi.CollectionConverters.asJava(files))
        now = jvm.scala.Option.apply(jvm.java.lang.Long.valueOf(int(time.time() * 1000)))
        actions.add(self._delta.actions.SetTransaction(self.app_id, seq, now))
        none = jvm.scala.Option.apply(None)
        append = jvm.org.apache.spark.sql.SaveMode.Append
        operation = getattr(self._delta, "DeltaOperations$Write")(append, *[none] * 8)
        seq_actions = jvm.org.apache.spark.api.python.PythonUtils.toSeq(actions)
        return int(self._txn.commit(seq_actions, operation))


def observation_metrics(observation: Observation) -> dict[str, Any] | None:
    """An observation's metrics once an action has filled them, else None; never waits.

    ``Observation.get`` blocks until an action reports the metrics, which never happens when the
    optimiser pruned the observed branch (a join with a side it knows to be empty); and a query that
    carried the observed plan without running it completes the observation with an empty row. The JVM
    object says which. Spark Connect observations have no JVM object: None.

    >>> observation_metrics(observation)  # after the action that ran the observed frame
    {'duplicates': 0, 'rows': 12}
    """
    jvm_observation = getattr(observation, "_jo", None)
    if jvm_observation is None or not jvm_observation.future().isCompleted():
        return None
    if jvm_observation.getRow().schema() is None:
        # Spark completes an observation with an empty row when a query that carried the observed plan
        # ended without running it (its metrics then never come): treat it as not observed
        return None
    return observation.get


#: The SQLSTATE of every Delta conflict between concurrent commits ("transaction rollback").
CONFLICT_SQLSTATE = "2D521"


def is_concurrent_modification(error: BaseException) -> bool:
    """Whether an error is Delta's conflict between concurrent commits: PySpark's converted
    exception, a Spark Connect error carrying a conflict's SQLSTATE, or a raw py4j error whose Java
    exception is a ``ConcurrentModificationException`` (every Delta conflict exception is one)."""
    if isinstance(error, DELTA_CONFLICTS):
        return True
    sqlstate = getattr(error, "getSqlState", None)
    if callable(sqlstate) and sqlstate() == CONFLICT_SQLSTATE:
        return True
    java = getattr(error, "java_exception", None)
    if java is None:
        return False
    cls = java.getClass()
    while cls is not None:
        if cls.getName() == "java.util.ConcurrentModificationException":
            return True
        cls = cls.getSuperclass()
    return False

"""The few Spark and Delta internals the engine needs, in one place, checked against the pinned versions.

Public APIs cannot answer two questions the engine must ask:

* which Catalyst nodes an analysed spec expression contains (a subquery, a window, ``reflect``...), to
  refuse expressions that are not pure row-level SQL (:mod:`.expressions`);
* the version of the Delta transaction (``txnAppId``) an output last committed, for a table that is not
  on the local file system (local tables are read with ``deltalake``, which has a public API for it).

Both go through py4j to classes whose shape a Spark or Delta upgrade may change, so
:func:`check_versions` runs before either is used and fails loudly on versions nobody has tested.
The test suite calls every function here, so an upgrade that breaks one fails there first.

    >>> analysed_node_classes(spark.range(1).selectExpr("rand() AS x"))
    {'Project', 'Range', 'Rand', 'Alias', ...}
"""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql import DataFrame, SparkSession

#: (Spark major.minor, Delta major.minor) pairs these internals were written and tested against.
TESTED_SPARK = ("4.2",)
TESTED_DELTA = ("4.4",)


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
            f"Spark {spark.version} is not supported by airflow_provider_fkjoin.engine.internals "
            f"(tested: {', '.join(TESTED_SPARK)}); pin pyspark to a tested version"
        )
    delta_version = _delta_version(spark)
    if delta_version is not None and ".".join(delta_version.split(".")[:2]) not in TESTED_DELTA:
        raise UnsupportedRuntimeError(
            f"Delta {delta_version} is not supported by airflow_provider_fkjoin.engine.internals "
            f"(tested: {', '.join(TESTED_DELTA)}); use Delta's jars of a tested version"
        )
    _checked.add(id(spark))


def _delta_version(spark: SparkSession) -> str | None:
    """Delta's version from its jar's manifest (Implementation-Version), or None when it has none."""
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


def path_has_files(spark: SparkSession, path: str) -> bool:
    """Whether a (non-local) location exists and holds anything, through Hadoop's FileSystem API."""
    jvm = spark._jvm  # type: ignore[attr-defined]
    hadoop_path = jvm.org.apache.hadoop.fs.Path(path)
    fs = hadoop_path.getFileSystem(spark._jsc.hadoopConfiguration())  # type: ignore[attr-defined]
    if not fs.exists(hadoop_path):
        return False
    if not fs.getFileStatus(hadoop_path).isDirectory():
        return True
    return len(fs.listStatus(hadoop_path)) > 0

"""A Delta-enabled SparkSession sized for the machine it runs on.

Example::

    spark = get_spark()                       # local[*], Delta's jars from .jars/ or Maven Central
    spark = get_spark("spark://127.0.0.1:7077", conf={"spark.executor.memory": "2g"})
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from pyspark.sql import SparkSession

DELTA_MAVEN_COORDINATE = "io.delta:delta-spark_4.2_2.13:4.4.0"
_ENGINE_DIR = Path(__file__).resolve().parent
_REPO_JARS = _ENGINE_DIR.parents[1] / ".jars"

DEFAULT_CONF: dict[str, str] = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    "spark.sql.shuffle.partitions": "8",
    "spark.default.parallelism": "4",
    "spark.sql.adaptive.enabled": "true",
    "spark.databricks.delta.snapshotPartitions": "4",
    "spark.databricks.delta.properties.defaults.enableChangeDataFeed": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.ui.enabled": "false",
    "spark.driver.memory": "4g",
    "spark.sql.session.timeZone": "UTC",
    "spark.driver.extraJavaOptions": f"-Dlog4j.configurationFile=file:{_ENGINE_DIR / 'log4j2.properties'}",
}


def delta_jars() -> list[str]:
    """Local Delta jars: ``FKJOIN_DELTA_JARS`` (a folder or comma list), else the repo's ``.jars/``."""
    configured = os.environ.get("FKJOIN_DELTA_JARS", "")
    if configured:
        candidate = Path(configured)
        if candidate.is_dir():
            return sorted(str(p) for p in candidate.glob("*.jar"))
        return [part for part in configured.split(",") if part]
    if _REPO_JARS.is_dir():
        return sorted(str(p) for p in _REPO_JARS.glob("*.jar"))
    return []


def parse_conf(text: str) -> dict[str, str]:
    """Parse ``FKJOIN_SPARK_CONF``: a JSON object, or ``key=value`` pairs separated by commas or newlines.

    >>> parse_conf("spark.sql.shuffle.partitions=4, spark.driver.memory=2g")
    {'spark.sql.shuffle.partitions': '4', 'spark.driver.memory': '2g'}
    """
    text = text.strip()
    if not text:
        return {}
    if text.startswith("{"):
        return {str(k): str(v) for k, v in json.loads(text).items()}
    pairs: dict[str, str] = {}
    for item in text.replace("\n", ",").split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"FKJOIN_SPARK_CONF: {item.strip()!r} is not key=value")
        pairs[key.strip()] = value.strip()
    return pairs


def session_conf(
    master: str | None = None, conf: Mapping[str, str] | None = None
) -> tuple[str, dict[str, str]]:
    """The master and conf ``get_spark`` would use; pure, so tests can check it without a JVM."""
    chosen_master = master or os.environ.get("FKJOIN_SPARK_MASTER") or "local[*]"
    merged = dict(DEFAULT_CONF)
    jars = delta_jars()
    if jars:
        merged["spark.jars"] = ",".join(jars)
    else:
        merged["spark.jars.packages"] = DELTA_MAVEN_COORDINATE
    merged.update(parse_conf(os.environ.get("FKJOIN_SPARK_CONF", "")))
    merged.update({str(k): str(v) for k, v in (conf or {}).items()})
    return chosen_master, merged


def get_spark(
    master: str | None = None, conf: Mapping[str, str] | None = None, app_name: str = "fkjoin"
) -> SparkSession:
    """Return the active Delta-enabled session, or start one.

    An already running session (spark-submit, a notebook, the test suite's shared one) is reused as is:
    its jars and master were chosen by whoever started it.
    """
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    chosen_master, merged = session_conf(master, conf)
    builder = SparkSession.builder.master(chosen_master).appName(app_name)
    for key, value in merged.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark

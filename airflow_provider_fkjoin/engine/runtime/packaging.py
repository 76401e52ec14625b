"""What a Spark driver needs beside pyspark: Delta's jars and the engine's log settings, without pyspark.

The Airflow hook builds a spark-submit command from these in the scheduler's worker, where importing
pyspark would cost seconds, so this module imports nothing heavy.

>>> from airflow_provider_fkjoin.engine.runtime.packaging import DELTA_MAVEN_COORDINATE
>>> DELTA_MAVEN_COORDINATE
'io.delta:delta-spark_4.2_2.13:4.4.0'
"""

from __future__ import annotations

import os
from pathlib import Path

#: Delta's jar version. The pinned Python package is delta-spark 4.4.1, whose jar is 4.4.0: 4.4.1 was
#: released for Python only and is not on Maven Central. ``scripts/delta-jars.pom.xml`` fetches this
#: version, and a test keeps the two equal.
DELTA_JAR_VERSION = "4.4.0"
DELTA_MAVEN_COORDINATE = f"io.delta:delta-spark_4.2_2.13:{DELTA_JAR_VERSION}"
_ENGINE_DIR = Path(__file__).resolve().parent
_REPO_JARS = _ENGINE_DIR.parents[2] / ".jars"
#: The engine's quiet logging for Spark's JVM (warnings and errors only).
ENGINE_LOG4J = _ENGINE_DIR / "log4j2.properties"
#: The engine's JVM side (``jvm/``, built by ``scripts/build-engine-jar.sh`` during set-up): the
#: net-change commit as a stored procedure, reached the same way from classic Spark and Spark Connect.
ENGINE_JAR = _ENGINE_DIR / "jars" / "fkjoin-engine.jar"


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


def engine_jar() -> str | None:
    """``FKJOIN_ENGINE_JAR`` as given, else the engine's jar (:data:`ENGINE_JAR`) when it was built; None
    when neither (then every refresh writes through Delta's MERGE)."""
    configured = os.environ.get("FKJOIN_ENGINE_JAR", "")
    if configured:
        return configured
    return str(ENGINE_JAR) if ENGINE_JAR.is_file() else None


def local_jars(*, with_engine: bool = True) -> list[str]:
    """The local jars a driver of the engine loads: Delta's (:func:`delta_jars`), then the engine's
    (:func:`engine_jar`) unless ``with_engine`` is false or it was not built.

    >>> local_jars(with_engine=False) == delta_jars()
    True
    >>> [Path(jar).name for jar in local_jars()][-1]  # once the engine's jar is built  # doctest: +SKIP
    'fkjoin-engine.jar'
    """
    engine = engine_jar() if with_engine else None
    return [*delta_jars(), *([engine] if engine else [])]

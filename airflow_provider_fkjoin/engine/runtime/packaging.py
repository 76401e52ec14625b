"""What a Spark driver needs beside pyspark: Delta's jars and the engine's log settings, without pyspark.

The Airflow hook builds a spark-submit command from these in the scheduler's worker, where importing
pyspark would cost seconds, so this module imports nothing heavy.

>>> from airflow_provider_fkjoin.engine.runtime.packaging import DELTA_MAVEN_COORDINATE
>>> DELTA_MAVEN_COORDINATE
'io.delta:delta-spark_4.2_2.13:4.4.0'
"""

from __future__ import annotations

import os
from collections.abc import Mapping
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
#: Where :func:`s3a_jars` are, when not beside Delta's jars (a folder or a comma list); setting it also
#: makes every driver load them (:func:`wants_s3a`).
S3A_JARS_ENV = "FKJOIN_S3A_JARS"
#: Spark conf keys that configure Hadoop's S3A file system.
S3A_CONF_PREFIX = "spark.hadoop.fs.s3a."


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


def s3a_jars() -> list[str]:
    """Hadoop's S3A connector and the AWS SDK modules it needs (``scripts/setup.sh`` fetches them):
    ``FKJOIN_S3A_JARS`` (a folder or comma list), else the ``s3a/`` folder beside Delta's local jars.

    >>> [Path(jar).name for jar in s3a_jars()][:1]  # after scripts/setup.sh  # doctest: +SKIP
    ['analyticsaccelerator-s3-1.3.1.jar']
    """
    configured = os.environ.get(S3A_JARS_ENV, "")
    if configured:
        candidate = Path(configured)
        if candidate.is_dir():
            return sorted(str(p) for p in candidate.glob("*.jar"))
        return [part for part in configured.split(",") if part]
    delta = os.environ.get("FKJOIN_DELTA_JARS", "")
    folder = (Path(delta) if delta and Path(delta).is_dir() else _REPO_JARS) / "s3a"
    return sorted(str(p) for p in folder.glob("*.jar")) if folder.is_dir() else []


def wants_s3a(conf: Mapping[str, str] | None) -> bool:
    """Whether a driver with Spark ``conf`` loads :func:`s3a_jars`: when ``FKJOIN_S3A_JARS`` is set, or
    the conf configures S3A (``spark.hadoop.fs.s3a.*``: an endpoint, credentials from a ``storage_conn_id``
    connection). Other drivers start without them: 37 more jars cost every driver's start a little.

    >>> wants_s3a({"spark.hadoop.fs.s3a.endpoint": "http://127.0.0.1:9000"}), wants_s3a({})
    (True, False)
    """
    if os.environ.get(S3A_JARS_ENV):
        return True
    return any(str(key).startswith(S3A_CONF_PREFIX) for key in (conf or {}))


def engine_jar() -> str | None:
    """``FKJOIN_ENGINE_JAR`` as given, else the engine's jar (:data:`ENGINE_JAR`) when it was built; None
    when neither (then every refresh writes through Delta's MERGE)."""
    configured = os.environ.get("FKJOIN_ENGINE_JAR", "")
    if configured:
        return configured
    return str(ENGINE_JAR) if ENGINE_JAR.is_file() else None


def local_jars(*, with_engine: bool = True, conf: Mapping[str, str] | None = None) -> list[str]:
    """The local jars a driver of the engine loads: Delta's (:func:`delta_jars`), the S3A connector's when
    ``conf`` asks for it (:func:`wants_s3a`), then the engine's (:func:`engine_jar`) unless
    ``with_engine`` is false or it was not built.

    >>> local_jars(with_engine=False) == delta_jars()
    True
    >>> [Path(jar).name for jar in local_jars()][-1]  # once the engine's jar is built  # doctest: +SKIP
    'fkjoin-engine.jar'
    """
    engine = engine_jar() if with_engine else None
    s3a = s3a_jars() if wants_s3a(conf) else []
    return [*delta_jars(), *s3a, *([engine] if engine else [])]

"""The fkjoin engine: incremental Kafka-Streams-grade joins on Spark and Delta Lake.

Public API (stable; see docs/concepts/result.md and the spec reference)::

    from airflow_provider_fkjoin.engine import get_spark, run_spec, load_spec, SpecError
    result = run_spec("spec.yaml", spark=get_spark())

Importing this package is light: the Spark-side names (``get_spark``, ``run_spec``, ...) load pyspark
on first use, so the Airflow scheduler and triggerer can use the no-JVM helpers in :mod:`.deltalog.watermarks`
(``high_watermark``, ``progress``) without importing pyspark, and ``validate_spec`` and
``refresh_status_from_logs`` (:mod:`.deltalog.validation`) check a spec and read an output's status the
same way.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from .core.errors import (
    ConcurrentRefreshError,
    FkJoinError,
    InputDataError,
    SpecError,
    TableNotBootstrappedError,
)
from .core.locations import TABLE_SCHEMES, location_identity, normalise_location
from .core.planning import RefreshResult
from .core.protocol import (
    APP_INFO_PREFIX,
    ERROR_PREFIX,
    EXIT_AUDIT_DIFFERS,
    EXIT_BAD_INPUT,
    EXIT_ERROR,
    EXIT_JOB_BAD_INPUT,
    EXIT_OK,
    EXIT_RETRY,
    PHASE_MARKER,
)
from .deltalog.freshness import output_freshness
from .deltalog.watermarks import (
    TableMissingError,
    consumed_input,
    consumed_version,
    high_watermark,
    noop_result,
    progress,
    refresh_by_origin,
    refresh_result_from_commit,
    table_snapshot,
)
from .runtime.packaging import (
    DELTA_JAR_VERSION,
    DELTA_MAVEN_COORDINATE,
    ENGINE_LOG4J,
    delta_jars,
    local_jars,
)

if TYPE_CHECKING:
    from .core.spec import WRITE_PATHS, as_self_join, load_spec, read_spec_file
    from .deltalog.validation import refresh_status_from_logs, uses_catalog_tables, validate_spec
    from .runner import refresh_status, run_spec
    from .runtime.session import DEFAULT_CONF, connect_server_argv, get_spark, is_connect

_LAZY = {
    "DEFAULT_CONF": ".runtime.session",
    "WRITE_PATHS": ".core.spec",
    "as_self_join": ".core.spec",
    "connect_server_argv": ".runtime.session",
    "get_spark": ".runtime.session",
    "is_connect": ".runtime.session",
    "load_spec": ".core.spec",
    "read_spec_file": ".core.spec",
    "refresh_status": ".runner",
    "refresh_status_from_logs": ".deltalog.validation",
    "uses_catalog_tables": ".deltalog.validation",
    "validate_spec": ".deltalog.validation",
    "run_spec": ".runner",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "APP_INFO_PREFIX",
    "DEFAULT_CONF",
    "DELTA_JAR_VERSION",
    "DELTA_MAVEN_COORDINATE",
    "ENGINE_LOG4J",
    "ERROR_PREFIX",
    "EXIT_AUDIT_DIFFERS",
    "EXIT_BAD_INPUT",
    "EXIT_ERROR",
    "EXIT_JOB_BAD_INPUT",
    "EXIT_OK",
    "EXIT_RETRY",
    "PHASE_MARKER",
    "TABLE_SCHEMES",
    "WRITE_PATHS",
    "ConcurrentRefreshError",
    "FkJoinError",
    "InputDataError",
    "RefreshResult",
    "SpecError",
    "TableMissingError",
    "TableNotBootstrappedError",
    "as_self_join",
    "connect_server_argv",
    "consumed_input",
    "consumed_version",
    "delta_jars",
    "get_spark",
    "high_watermark",
    "is_connect",
    "load_spec",
    "local_jars",
    "location_identity",
    "noop_result",
    "normalise_location",
    "output_freshness",
    "progress",
    "read_spec_file",
    "refresh_by_origin",
    "refresh_result_from_commit",
    "refresh_status",
    "refresh_status_from_logs",
    "run_spec",
    "table_snapshot",
    "uses_catalog_tables",
    "validate_spec",
]

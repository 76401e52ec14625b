"""The fkjoin engine: incremental Kafka-Streams-grade joins on Spark and Delta Lake.

Public API (stable; see DESIGN.md)::

    from airflow_provider_fkjoin.engine import get_spark, run_spec, load_spec, SpecError
    result = run_spec("spec.yaml", spark=get_spark())
"""

from .errors import ConcurrentRefreshError, FkJoinError, InputDataError, SpecError
from .runner import refresh_status, run_spec
from .session import get_spark
from .spec import load_spec
from .stream_join import TableNotBootstrappedError
from .watermarks import (
    TableMissingError,
    consumed_version,
    high_watermark,
    progress,
    refresh_result_from_commit,
)

__all__ = [
    "ConcurrentRefreshError",
    "FkJoinError",
    "InputDataError",
    "SpecError",
    "TableMissingError",
    "TableNotBootstrappedError",
    "consumed_version",
    "get_spark",
    "high_watermark",
    "load_spec",
    "progress",
    "refresh_result_from_commit",
    "refresh_status",
    "run_spec",
]

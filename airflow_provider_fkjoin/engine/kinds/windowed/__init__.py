"""Windowed joins: stream mode, the self-join (a stream-mode join of a table with itself) and table mode.

:func:`run_windowed_join` picks the module that runs a ``windowed_join`` spec: ``mode: table`` runs
:mod:`.table`; ``mode: stream`` runs :mod:`.stream`, or :mod:`.self_join`'s one-store computation when both
sides are the same table (unless ``optimize: false``).

>>> run_windowed_join(load_spec("clicks_x_views.yaml"), spark, RunOptions())["optimized"]
'self_join'
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import SparkSession

from ...core.spec import WindowedJoinSpec
from ...write.refresh import RunOptions
from .self_join import run_windowed_join_as_self_join
from .stream import run_windowed_stream_join
from .table import run_windowed_table_join


def run_windowed_join(spec: WindowedJoinSpec, spark: SparkSession, options: RunOptions) -> dict[str, Any]:
    """Refresh a ``windowed_join`` once, in the module its mode (and its inputs) call for."""
    if spec.mode == "table":
        return run_windowed_table_join(spec, spark, options)
    if spec.runs_as_self_join:
        return run_windowed_join_as_self_join(spec, spark, options)
    return run_windowed_stream_join(spec, spark, options)

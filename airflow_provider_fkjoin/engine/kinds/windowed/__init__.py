"""Windowed joins: stream mode, the self-join (a stream-mode join of a table with itself) and table mode.

:func:`windowed_join_refresh` picks the module that refreshes a ``windowed_join`` spec: ``mode: table``
runs :mod:`.table`; ``mode: stream`` runs :mod:`.stream`, or :mod:`.self_join`'s one-store computation when
both sides are the same table (unless ``optimize: false``).

>>> refresh_once(windowed_join_refresh(load_spec("clicks_x_views.yaml"), spark), options)["optimized"]
'self_join'
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from ...core.spec import WindowedJoinSpec
from ...refresh.skeleton import KindRefresh
from .self_join import windowed_join_as_self_join
from .stream import EventJoinRefresh
from .table import windowed_table_join_refresh


def windowed_join_refresh(spec: WindowedJoinSpec, spark: SparkSession) -> KindRefresh:
    """The refresh of a ``windowed_join``, in the module its mode (and its inputs) call for."""
    if spec.mode == "table":
        return windowed_table_join_refresh(spec, spark)
    if spec.runs_as_self_join:
        return windowed_join_as_self_join(spec, spark)
    return EventJoinRefresh(spec, spec, spark)

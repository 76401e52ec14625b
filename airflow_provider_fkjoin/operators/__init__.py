"""Operators: one refresh of a join's output table per task run."""

from airflow_provider_fkjoin.operators.joins import (
    ForeignKeyJoinOperator,
    GlobalTableBootstrapOperator,
    MultiWayJoinOperator,
    SelfJoinOptimizeOperator,
    StreamTableJoinOperator,
    WindowedJoinOperator,
)

__all__ = [
    "ForeignKeyJoinOperator",
    "GlobalTableBootstrapOperator",
    "MultiWayJoinOperator",
    "SelfJoinOptimizeOperator",
    "StreamTableJoinOperator",
    "WindowedJoinOperator",
]

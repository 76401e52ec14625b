"""Operators: one refresh of a join's output table per task run."""

from airflow_provider_fkjoin.operators.joins import (
    ForeignKeyJoinOperator,
    GlobalTableBootstrapOperator,
    SelfJoinOptimizeOperator,
    StreamTableJoinOperator,
    WindowedJoinOperator,
)

__all__ = [
    "ForeignKeyJoinOperator",
    "GlobalTableBootstrapOperator",
    "SelfJoinOptimizeOperator",
    "StreamTableJoinOperator",
    "WindowedJoinOperator",
]

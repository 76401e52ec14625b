"""Hooks: FkJoinHook submits the engine's job through the Spark provider's SparkSubmitHook."""

from airflow_provider_fkjoin.hooks.fkjoin import FkJoinHook

__all__ = ["FkJoinHook"]

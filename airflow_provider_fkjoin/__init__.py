"""airflow-provider-fkjoin: incremental Kafka-Streams-grade joins on Spark and Delta Lake for Airflow."""

from airflow_provider_fkjoin.version import __version__

__all__ = ["__version__", "get_provider_info"]


def get_provider_info() -> dict:
    """Airflow's provider metadata (the ``apache_airflow_provider`` entry point)."""
    from airflow_provider_fkjoin.provider_info import get_provider_info as _info

    return _info()

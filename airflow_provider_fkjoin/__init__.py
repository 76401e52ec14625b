"""airflow-provider-fkjoin: incremental Kafka-Streams-grade joins on Spark and Delta Lake for Airflow."""

__version__ = "0.1.0"

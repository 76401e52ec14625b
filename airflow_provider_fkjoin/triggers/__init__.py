"""Triggers: HighWatermarkTrigger, the deferrable half of HighWatermarkSensor (no JVM: deltalake)."""

from airflow_provider_fkjoin.triggers.high_watermark import HighWatermarkTrigger

__all__ = ["HighWatermarkTrigger"]

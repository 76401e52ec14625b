"""Sensors: HighWatermarkSensor waits until a table has consumed a source up to its high watermark."""

from airflow_provider_fkjoin.sensors.high_watermark import HighWatermarkSensor

__all__ = ["HighWatermarkSensor"]

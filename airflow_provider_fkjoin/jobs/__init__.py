"""Spark applications that FkJoinHook submits with spark-submit."""

from pathlib import Path

#: The engine's job file; spark-submit runs it as the application.
FKJOIN_JOB_FILE = str(Path(__file__).resolve().parent / "fkjoin_job.py")

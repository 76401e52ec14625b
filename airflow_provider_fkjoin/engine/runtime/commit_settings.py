"""Session settings held for the length of a block: what makes the next Delta commit carry a refresh's
progress (user metadata) and transaction id, and other settings a write needs, restored afterwards.
Commits sharing a session take turns (one lock for the process)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from pyspark.sql import SparkSession

_COMMIT_LOCK = threading.RLock()
#: The session settings through which a Delta DML commit carries our progress and transaction id.
_USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"
_TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
_TXN_VERSION = "spark.databricks.delta.write.txnVersion"


@contextmanager
def commit_settings(spark: SparkSession, *, user_metadata: str, app_id: str, seq: int) -> Iterator[None]:
    """Session settings that make the next Delta DML commit carry our progress and transaction id.

    The settings are session-wide, so commits from threads sharing a session take turns.
    """
    with _COMMIT_LOCK:
        yield from _with_commit_settings(
            spark,
            {_USER_METADATA: user_metadata, _TXN_APP_ID: app_id, _TXN_VERSION: str(seq)},
        )


@contextmanager
def metadata_settings(spark: SparkSession, user_metadata: str) -> Iterator[None]:
    """Session settings that make the next Delta commit carry our progress as its user metadata
    (a commit built by hand adds its own ``SetTransaction``). Commits sharing a session take turns."""
    with _COMMIT_LOCK:
        yield from _with_commit_settings(spark, {_USER_METADATA: user_metadata})


@contextmanager
def without_commit_metadata(spark: SparkSession) -> Iterator[None]:
    """No progress or transaction id in the session for the next commit (a compaction's OPTIMIZE),
    whatever another thread sharing the session is about to commit: commits take turns."""
    with _COMMIT_LOCK:
        yield from _with_commit_settings(spark, dict.fromkeys((_USER_METADATA, _TXN_APP_ID, _TXN_VERSION)))


@contextmanager
def session_settings(spark: SparkSession, settings: dict[str, str]) -> Iterator[None]:
    """Set Spark session conf for the duration of a block, then restore what was there."""
    yield from _with_commit_settings(spark, settings)


def _with_commit_settings(spark: SparkSession, settings: dict[str, str | None]) -> Iterator[None]:
    """Set (or, for None, unset) each setting for the block, then restore what was there."""
    previous = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        if value is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in previous.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)

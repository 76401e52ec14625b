"""Progress: which input versions an output holds, stored in the output's own Delta commits.

Each refresh writes its progress as the commit's ``userMetadata`` in the same commit as its data, so
the output and the versions it reflects can never disagree (exactly once). The Delta transaction id
(``txnAppId``/``txnVersion``) makes a second writer of the same refresh fail instead of doubling it.

Example of what a commit carries::

    {"fkjoin": {"format": 1, "seq": 3, "kind": "foreign_key_join", "fingerprint": "9f2c...",
                "inputs": {"left": {"location": "/w/orders", "table_id": "...", "version": 12}, ...},
                "mode": "incremental", "token": "..."}}
"""

from __future__ import annotations

import hashlib
import json
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pyspark.sql import SparkSession

from .tables import DeltaHandle

METADATA_KEY = "fkjoin"
FORMAT_VERSION = 1
_HISTORY_SCAN = 200


@dataclass(frozen=True)
class InputProgress:
    """How far one input has been consumed."""

    location: str
    table_id: str
    version: int


@dataclass(frozen=True)
class Progress:
    """The progress recorded by the latest refresh that committed to an output."""

    seq: int
    kind: str
    fingerprint: str
    mode: str
    inputs: dict[str, InputProgress]
    output_version: int
    committed_at: datetime | None = None
    token: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def parse_progress(
    user_metadata: str | None, output_version: int, committed_at: datetime | None
) -> Progress | None:
    """Read our progress from one commit's userMetadata; None when the commit is not ours."""
    if not user_metadata:
        return None
    try:
        payload = json.loads(user_metadata)[METADATA_KEY]
        return Progress(
            seq=int(payload["seq"]),
            kind=str(payload["kind"]),
            fingerprint=str(payload["fingerprint"]),
            mode=str(payload["mode"]),
            inputs={side: InputProgress(**info) for side, info in payload["inputs"].items()},
            output_version=output_version,
            committed_at=committed_at,
            token=str(payload.get("token", "")),
            extra=dict(payload.get("extra", {})),
        )
    except (ValueError, KeyError, TypeError):
        return None


def read_progress(output: DeltaHandle) -> Progress | None:
    """The newest progress in the output's history (later OPTIMIZE or VACUUM commits are skipped)."""
    if not output.exists():
        return None
    for entry in output.history(_HISTORY_SCAN):
        found = parse_progress(entry["userMetadata"], entry["version"], entry["timestamp"])
        if found is not None:
            return found
    return None


def new_progress_metadata(
    *,
    seq: int,
    kind: str,
    fingerprint: str,
    mode: str,
    inputs: dict[str, InputProgress],
    reason: str = "",
    extra: dict[str, Any] | None = None,
) -> tuple[str, str]:
    """The userMetadata JSON for a commit and the token that identifies this refresh's commit."""
    token = uuid.uuid4().hex
    payload = {
        "format": FORMAT_VERSION,
        "seq": seq,
        "kind": kind,
        "fingerprint": fingerprint,
        "mode": mode,
        "reason": reason,
        "inputs": {side: vars(info) for side, info in inputs.items()},
        "token": token,
        "extra": extra or {},
    }
    return json.dumps({METADATA_KEY: payload}, sort_keys=True), token


def transaction_app_id(output_location: str) -> str:
    """The Delta transaction id of every refresh of one output: concurrent refreshes share it."""
    return "fkjoin-" + hashlib.sha256(output_location.encode()).hexdigest()[:24]


_COMMIT_LOCK = threading.RLock()


@contextmanager
def commit_settings(spark: SparkSession, *, user_metadata: str, app_id: str, seq: int) -> Iterator[None]:
    """Session settings that make the next Delta DML commit carry our progress and transaction id.

    The settings are session-wide, so commits from threads sharing a session take turns.
    """
    with _COMMIT_LOCK:
        yield from _with_commit_settings(
            spark,
            {
                "spark.databricks.delta.commitInfo.userMetadata": user_metadata,
                "spark.databricks.delta.write.txnAppId": app_id,
                "spark.databricks.delta.write.txnVersion": str(seq),
            },
        )


@contextmanager
def session_settings(spark: SparkSession, settings: dict[str, str]) -> Iterator[None]:
    """Set Spark session conf for the duration of a block, then restore what was there."""
    yield from _with_commit_settings(spark, settings)


def _with_commit_settings(spark: SparkSession, settings: dict[str, str]) -> Iterator[None]:
    previous = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in previous.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)

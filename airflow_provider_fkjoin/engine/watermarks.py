"""No-JVM progress helpers: read Delta versions and our commit metadata with the ``deltalake`` package.

The Airflow scheduler and triggerer must not start a JVM, yet a sensor has to know how far a
table or a join's output has got. These helpers read only the Delta log, through ``deltalake``
(delta-rs), so they work on local paths and on every object store delta-rs supports (``s3://``,
``abfss://``, ``gs://``; credentials in ``storage_options``).

    >>> high_watermark("/warehouse/customers")
    12
    >>> progress("/warehouse/orders_enriched")["inputs"]["right"]["version"]
    12
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import deltalake
from deltalake.exceptions import TableNotFoundError

from .errors import FkJoinError
from .locations import location_identity

METADATA_KEY = "fkjoin"
HISTORY_SCAN = 200


class TableMissingError(FkJoinError):
    """No Delta table at a location. Permanent: waiting will not make a mistyped path appear."""


def _open(path: str | Path, storage_options: dict[str, str] | None) -> deltalake.DeltaTable:
    location = str(path)
    if location.startswith("file:"):
        location = location.removeprefix("file://").removeprefix("file:")
    try:
        return deltalake.DeltaTable(location, storage_options=storage_options)
    except TableNotFoundError as error:
        raise TableMissingError(
            f"no Delta table at {location}: create it first or fix the path ({error})"
        ) from error


def high_watermark(path: str | Path, storage_options: dict[str, str] | None = None) -> int:
    """The table's latest Delta version: what a refresh starting now would pin.

    Raises ``TableMissingError`` when there is no Delta table at ``path``.
    """
    return int(_open(path, storage_options).version())


def parse_commit_metadata(user_metadata: str | None) -> dict[str, Any] | None:
    """Our progress payload from one commit's userMetadata; None when the commit is not ours."""
    if not user_metadata:
        return None
    try:
        payload = json.loads(user_metadata)[METADATA_KEY]
    except (ValueError, KeyError, TypeError):
        return None
    if not isinstance(payload, dict) or not isinstance(payload.get("inputs"), dict):
        return None
    return payload


def progress(path: str | Path, storage_options: dict[str, str] | None = None) -> dict[str, Any] | None:
    """The latest refresh recorded in an output table's commits, or None when no refresh committed.

    Returns ``{"kind", "mode", "seq", "output_version", "committed_at", "inputs": {side: {"location",
    "table_id", "version"}}, "extra"}``; later commits that are not ours (OPTIMIZE, VACUUM) are skipped.
    Raises ``TableMissingError`` when there is no Delta table at ``path``.
    """
    table = _open(path, storage_options)
    for entry in table.history(HISTORY_SCAN):
        payload = parse_commit_metadata(entry.get("userMetadata"))
        if payload is None:
            continue
        timestamp = entry.get("timestamp")
        return {
            "kind": payload.get("kind"),
            "mode": payload.get("mode"),
            "seq": payload.get("seq"),
            "output_version": int(entry["version"]),
            "committed_at": (
                datetime.fromtimestamp(timestamp / 1000, tz=UTC).isoformat() if timestamp else None
            ),
            "inputs": {
                side: {
                    "location": info.get("location"),
                    "table_id": info.get("table_id"),
                    "version": int(info["version"]),
                }
                for side, info in payload["inputs"].items()
            },
            "extra": dict(payload.get("extra") or {}),
            "reason": payload.get("reason", ""),
            "operation_metrics": dict(entry.get("operationMetrics") or {}),
        }
    return None


def refresh_result_from_commit(
    output_path: str | Path, after_version: int | None, storage_options: dict[str, str] | None = None
) -> dict[str, Any]:
    """A refresh's result dict rebuilt from the output's Delta log, for when the driver's stdout is gone.

    ``after_version`` is the output's version before the refresh started (None: no output yet). The
    newest refresh commit after it is this refresh; when there is none, the refresh was a ``noop``.
    Row counts come from the commit's operation metrics; the fields only the driver knew
    (``duration_s``, ``warnings``, per-side change counts) are absent.

    >>> refresh_result_from_commit("/warehouse/orders_enriched", after_version=4)["mode"]
    'incremental'
    """
    latest = progress(output_path, storage_options)
    location = str(output_path)
    if latest is None:
        raise TableMissingError(f"output {location} holds no fkjoin refresh commit: the refresh did not run")
    committed = after_version is None or latest["output_version"] > after_version
    metrics = latest["operation_metrics"] if committed else {}

    def metric(*names: str) -> int:
        for name in names:
            if name in metrics:
                return int(metrics[name])
        return 0

    return {
        "kind": latest["kind"],
        "mode": latest["mode"] if committed else "noop",
        "reason": latest["reason"] if committed else "no new input versions",
        "output": {"path": location, "version": latest["output_version"]},
        "inputs": {
            side: {"path": info["location"], "to_version": info["version"]}
            for side, info in latest["inputs"].items()
        },
        "rows": {
            "inserted": metric("numTargetRowsInserted", "numOutputRows"),
            "updated": metric("numTargetRowsUpdated"),
            "deleted": metric("numTargetRowsDeleted"),
        },
        "extra": latest["extra"],
        "source": "delta_log",
    }


def consumed_version(
    output_path: str | Path, source_location: str, storage_options: dict[str, str] | None = None
) -> int | None:
    """The version of ``source_location`` that ``output_path`` has consumed, or None if it has not.

    A sensor's question "has this join caught up with that source?" is
    ``consumed_version(out, src) >= high_watermark(src)``.
    """
    latest = progress(output_path, storage_options)
    if latest is None:
        return None
    wanted = _normalise(source_location)
    for info in latest["inputs"].values():
        if _normalise(str(info["location"])) == wanted:
            return int(info["version"])
    return None


def _normalise(location: str) -> str:
    """Compare locations as the engine does (``s3://b/t`` is ``s3a://b/t/``); a name stays as it is."""
    try:
        return location_identity(location)
    except ValueError:
        return location

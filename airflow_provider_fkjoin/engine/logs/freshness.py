"""How fresh an output is, read from Delta logs alone (no JVM): its last refreshes and its lag per input.

The Airflow UI's Joins view calls this from the api-server, which must never start a JVM. Everything
comes from the output's refresh commits (:mod:`.watermarks`) and each input's own log:

* **refreshes**: the output's newest refresh commits, each with when it started and committed (so its
  duration), its mode and reason, the rows it changed, how it was written, and who ran it (``origin``);
* **lag**, per input of the last refresh: the version it consumed against the input's latest version,
  when the consumed version was written, and ``lag_s``: how long the input has held commits the output
  has not consumed (0 when it is caught up). The output's ``lag_s`` is its stalest input's.

>>> fresh = output_freshness("/w/orders_enriched", now=datetime(2026, 1, 5, 12, tzinfo=UTC))
>>> fresh["inputs"]["right"]["lag_versions"], fresh["lag_s"]
(2, 340.0)
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import deltalake

from .watermarks import TableMissingError, open_table, parse_commit_metadata, refresh_commits

#: Delta operations of a refresh commit, by the write path that makes them.
_WRITE_PATHS = {
    "MERGE": "merge",
    "UPDATE": "net_changes",
    "CREATE TABLE AS SELECT": "create",
    "CREATE OR REPLACE TABLE AS SELECT": "create",
    "CREATE TABLE": "create",
}
#: Commits of an input read back to find when its consumed version was written.
MAX_LAG_SCAN = 1000


def _write_path(operation: str | None, parameters: dict[str, Any]) -> str | None:
    if operation == "WRITE":
        return "overwrite" if str(parameters.get("mode", "")).lower() == "overwrite" else "append"
    return _WRITE_PATHS.get(operation or "")


def _iso(timestamp_ms: int | None) -> str | None:
    return datetime.fromtimestamp(timestamp_ms / 1000, tz=UTC).isoformat() if timestamp_ms else None


def _seconds_between(start: str | None, end: str | None) -> float | None:
    if not start or not end:
        return None
    return round((datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds(), 3)


def refresh_history(table: deltalake.DeltaTable, limit: int) -> list[dict[str, Any]]:
    """The newest ``limit`` refresh commits of an opened output, newest first (see the module docstring).

    >>> refresh_history(deltalake.DeltaTable("/w/orders_enriched"), 1)[0]["mode"]
    'incremental'
    """
    by_version = {int(entry["version"]): entry for entry in table.history(limit * 2 + 20)}
    refreshes = []
    for refresh in refresh_commits(table, limit * 2 + 20):
        entry = by_version.get(refresh["output_version"], {})
        metrics = refresh["operation_metrics"]
        rows = refresh["rows"] or {
            "inserted": int(metrics.get("numTargetRowsInserted", metrics.get("numOutputRows", 0))),
            "updated": int(metrics.get("numTargetRowsUpdated", 0)),
            "deleted": int(metrics.get("numTargetRowsDeleted", 0)),
        }
        started_at = _started_at(entry)
        refreshes.append(
            {
                "version": refresh["output_version"],
                "kind": refresh["kind"],
                "mode": refresh["mode"],
                "reason": refresh["reason"],
                "started_at": started_at,
                "committed_at": refresh["committed_at"],
                "duration_s": _seconds_between(started_at, refresh["committed_at"]),
                "rows": {name: int(rows.get(name, 0)) for name in ("inserted", "updated", "deleted")},
                "write_path": _write_path(
                    entry.get("operation"), dict(entry.get("operationParameters") or {})
                ),
                "origin": refresh["origin"],
                "inputs": {side: info["version"] for side, info in refresh["inputs"].items()},
            }
        )
        if len(refreshes) == limit:
            break
    return refreshes


def _started_at(entry: dict[str, Any]) -> str | None:
    """The ``started_at`` a refresh commit's progress records (None for commits written before it did)."""
    payload = parse_commit_metadata(entry.get("userMetadata")) or {}
    started = payload.get("started_at")
    return started if isinstance(started, str) else None


def input_lag(
    location: str, consumed: int, storage_options: dict[str, str] | None, now: datetime
) -> dict[str, Any]:
    """One input's lag behind an output that consumed its version ``consumed``."""
    table = open_table(location, storage_options)
    latest = int(table.version())
    behind = max(latest - consumed, 0)
    written: dict[int, str | None] = {}
    if behind < MAX_LAG_SCAN:
        for entry in table.history(behind + 1):
            written[int(entry["version"])] = _iso(entry.get("timestamp"))
    behind_since = written.get(consumed + 1) if behind else None
    return {
        "location": location,
        "consumed_version": consumed,
        "latest_version": latest,
        "lag_versions": behind,
        "consumed_written_at": written.get(consumed),
        "behind_since": behind_since,
        "lag_s": _seconds_between(behind_since, now.isoformat()) if behind_since else 0.0,
    }


def output_freshness(
    location: str | Path,
    storage_options: dict[str, str] | None = None,
    *,
    history: int = 20,
    now: datetime | None = None,
) -> dict[str, Any]:
    """An output's last ``history`` refreshes and its lag behind each input (module docstring).

    An input that cannot be read gets ``{"location", "error"}`` and no lag; a missing output raises
    :class:`.watermarks.TableMissingError`.
    """
    now = now or datetime.now(UTC)
    table = open_table(location, storage_options)
    refreshes = refresh_history(table, history)
    last = next(refresh_commits(table), None)
    inputs: dict[str, dict[str, Any]] = {}
    for side, info in (last or {}).get("inputs", {}).items():
        try:
            inputs[side] = input_lag(info["location"], info["version"], storage_options, now)
        except (TableMissingError, OSError, deltalake.exceptions.DeltaError) as error:
            inputs[side] = {
                "location": info["location"],
                "consumed_version": info["version"],
                "error": str(error),
            }
    lags = [entry["lag_s"] for entry in inputs.values() if entry.get("lag_s") is not None]
    return {
        "output": str(location),
        "kind": last["kind"] if last else None,
        "version": int(table.version()),
        "last_refresh": refreshes[0] if refreshes else None,
        "refreshes": refreshes,
        "inputs": inputs,
        "lag_s": max(lags) if lags else None,
    }

"""How fresh an output is, read from Delta logs alone (no JVM): its last refreshes and its lag per input.

The Airflow UI's Joins view calls this from the api-server, which must never start a JVM. Everything
comes from the output's refresh commits (:mod:`.watermarks`) and each input's own log:

* **refreshes**: the output's newest refresh commits, each with when it started and committed (so its
  duration), its mode and reason, the rows it changed, how it was written, who ran it (``origin``), and
  the plan it ran (``strategy``: the plan, what chose it, both plans' estimates and the plan's actual
  seconds; None for a commit that recorded none);
* **lag**, per input of the last refresh: the version it consumed against the input's latest version,
  when the consumed version was written, and ``lag_s``: how long the input has held commits the output
  has not consumed (0 when it is caught up). The output's ``lag_s`` is its stalest input's.

>>> fresh = output_freshness("/w/orders_enriched", now=datetime(2026, 1, 5, 12, tzinfo=UTC))
>>> fresh["inputs"]["right"]["lag_versions"], fresh["lag_s"]
(2, 340.0)
"""

from __future__ import annotations

from datetime import UTC, datetime
from itertools import islice
from pathlib import Path
from typing import Any

import deltalake

from .watermarks import TableMissingError, commit_time, open_table, refresh_commits

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
#: Inputs a kind looks up rather than consumes: their new versions do not make its output stale.
LOOKED_UP = {"stream_table_join": ("table",)}


def _write_path(operation: str | None, parameters: dict[str, Any]) -> str | None:
    if operation == "WRITE":
        return "overwrite" if str(parameters.get("mode", "")).lower() == "overwrite" else "append"
    return _WRITE_PATHS.get(operation or "")


def _seconds_between(start: str | None, end: str | None) -> float | None:
    if not start or not end:
        return None
    return round((datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds(), 3)


def _described(refresh: dict[str, Any]) -> dict[str, Any]:
    """One refresh commit (:func:`.watermarks.refresh_commits`) as the view shows it; ``strategy`` as the
    commit recorded it, so the view can set the plan's actual seconds against both estimates:

    >>> _described(refresh)["strategy"]  # doctest: +SKIP
    {'chosen': 'recompute', 'basis': 'history', 'estimate': {'incremental_s': 6.0, 'recompute_s': 3.5},
     'actual_s': 3.0}
    """
    metrics = refresh["operation_metrics"]
    rows = refresh["rows"] or {
        "inserted": int(metrics.get("numTargetRowsInserted", metrics.get("numOutputRows", 0))),
        "updated": int(metrics.get("numTargetRowsUpdated", 0)),
        "deleted": int(metrics.get("numTargetRowsDeleted", 0)),
    }
    return {
        "version": refresh["output_version"],
        "kind": refresh["kind"],
        "mode": refresh["mode"],
        "reason": refresh["reason"],
        "started_at": refresh["started_at"],
        "committed_at": refresh["committed_at"],
        "duration_s": _seconds_between(refresh["started_at"], refresh["committed_at"]),
        "rows": {name: int(rows.get(name, 0)) for name in ("inserted", "updated", "deleted")},
        "write_path": _write_path(refresh["operation"], refresh["operation_parameters"]),
        "origin": refresh["origin"],
        "inputs": {side: info["version"] for side, info in refresh["inputs"].items()},
        "strategy": refresh["strategy"],
    }


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
            written[int(entry["version"])] = commit_time(entry.get("timestamp"))
    behind_since = written.get(consumed + 1) if behind else None
    if not behind:
        lag_s: float | None = 0.0
    elif behind_since is not None:
        lag_s = _seconds_between(behind_since, now.isoformat())
    else:  # too far behind to scan, or that commit is gone from the log: behind, for an unknown time
        lag_s = None
    return {
        "location": location,
        "consumed_version": consumed,
        "latest_version": latest,
        "lag_versions": behind,
        "consumed_written_at": written.get(consumed),
        "behind_since": behind_since,
        "lag_s": lag_s,
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
    now = (now or datetime.now(UTC)).astimezone(UTC)
    table = open_table(location, storage_options)
    recent = list(islice(refresh_commits(table, history * 2 + 20), history))
    refreshes = [_described(refresh) for refresh in recent]
    # the newest refresh is usually in that window; others' commits since can push it further back
    last = recent[0] if recent else next(refresh_commits(table), None)
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
    looked_up = LOOKED_UP.get(last["kind"] if last else "", ())
    lags = [entry.get("lag_s") for side, entry in inputs.items() if side not in looked_up]
    known = [lag for lag in lags if lag is not None]
    return {
        "output": str(location),
        "kind": last["kind"] if last else None,
        "version": int(table.version()),
        "last_refresh": refreshes[0] if refreshes else None,
        "refreshes": refreshes,
        "inputs": inputs,
        # an input behind for an unknown time makes the output's lag unknown, never 0
        "lag_s": max(known) if known and len(known) == len(lags) else None,
    }

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
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .cost_history import CostObservation

METADATA_KEY = "fkjoin"
FORMAT_VERSION = 1
#: How many commits back a refresh looks for its progress; past that it rebuilds (it never fails).
HISTORY_SCAN = 1000
#: Operations that do not change an output's rows: others may run them between refreshes.
NON_CHANGING_OPERATIONS = frozenset(
    {
        "OPTIMIZE",
        "VACUUM START",
        "VACUUM END",
        "SET TBLPROPERTIES",
        "UNSET TBLPROPERTIES",
        "ADD CONSTRAINT",
        "DROP CONSTRAINT",
        "UPGRADE PROTOCOL",
        "REORG",
        "CLUSTER BY",
        "ANALYZE",
        "COMPUTE STATS",
        "CHANGE COLUMN",
        "SET COLUMN COMMENT",
        "ADD FEATURE",
        "DROP FEATURE",
        "CREATE CHECKPOINT",
    }
)


@dataclass(frozen=True)
class InputProgress:
    """How far one input has been consumed, and its columns then (name -> type), to notice schema changes."""

    location: str
    table_id: str
    version: int
    columns: dict[str, str] | None = None


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
    #: Who ran the refresh, as its caller said (an Airflow task instance: dag, run, task, map index, try).
    origin: dict[str, Any] = field(default_factory=dict)
    #: A short hash of each fingerprinted spec field by path (:func:`.spec.spec_field_hashes`); empty in
    #: commits written before they were recorded.
    spec_fields: dict[str, str] = field(default_factory=dict)
    #: When the refresh started (ISO 8601, UTC), and the plan it ran as its commit recorded it
    #: (:func:`.cost_history.strategy_record`); None in commits that recorded none. ``fkjoin status`` shows
    #: the plan with its actual seconds (:func:`.status.status_report`).
    started_at: str | None = None
    strategy: dict[str, Any] | None = None


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
            origin=dict(payload.get("origin") or {}),
            spec_fields={str(k): str(v) for k, v in (payload.get("spec_fields") or {}).items()},
            started_at=payload["started_at"] if isinstance(payload.get("started_at"), str) else None,
            strategy=dict(payload["strategy"]) if isinstance(payload.get("strategy"), dict) else None,
        )
    except (ValueError, KeyError, TypeError):
        return None


@dataclass(frozen=True)
class OutputLog:
    """What an output's Delta log says before a refresh: the last progress, whether others changed the
    rows since, and the transaction id and sequence number the next refresh commit continues from.

    ``last_seq`` is the larger of the progress's seq and Delta's own transaction record for ``app_id``
    (kept in the table's snapshot, so log cleanup or hundreds of OPTIMIZE commits never lose it).
    """

    progress: Progress | None
    changed_by_others: str | None
    app_id: str
    last_seq: int
    table_id: str | None
    latest_version: int | None = None
    #: The bytes of the output's data files (None: no output yet, or unknown).
    size_bytes: int | None = None
    #: What the plans of the output's recent refreshes cost (:func:`.cost_history.observations`), newest
    #: first.
    costs: tuple[CostObservation, ...] = ()


@dataclass(frozen=True)
class HistoryScan:
    """What an output's newest commits say: the latest refresh progress, why the rows changed since
    (None: they did not), and the newest version seen (None: no commit listed)."""

    progress: Progress | None
    changed_by_others: str | None
    latest_version: int | None


def scan_history(entries: list[dict[str, Any]], location: str = "the output") -> HistoryScan:
    """Walk an output's history (newest first: ``version``, ``timestamp``, ``operation``,
    ``userMetadata``) to its latest refresh commit, noting any commit since that changed rows.

    Pure, so the engine (reading through Spark or ``deltalake``) and the no-JVM noop check
    (:func:`..deltalog.watermarks.noop_result`) decide the same way.

    >>> scan_history([{"version": 8, "operation": "OPTIMIZE", "userMetadata": None},
    ...               {"version": 7, "operation": "MERGE", "userMetadata": '{"fkjoin": {...}}'}]).progress.seq
    3
    """
    changed: str | None = None
    latest: int | None = None
    for entry in entries:
        if latest is None:
            latest = int(entry["version"])
        found = parse_progress(entry.get("userMetadata"), int(entry["version"]), entry.get("timestamp"))
        if found is not None:
            return HistoryScan(found, changed, latest)
        operation = str(entry.get("operation") or "")
        if operation.upper() not in NON_CHANGING_OPERATIONS:
            changed = (
                f"the output {location} was changed outside this engine at version "
                f"{entry['version']} ({operation or 'unknown operation'})"
            )
    return HistoryScan(None, None, latest)


def new_progress_metadata(
    *,
    seq: int,
    kind: str,
    fingerprint: str,
    mode: str,
    inputs: dict[str, InputProgress],
    reason: str = "",
    extra: dict[str, Any] | None = None,
    origin: dict[str, Any] | None = None,
    spec_fields: dict[str, str] | None = None,
    started_at: str | None = None,
    strategy: dict[str, Any] | None = None,
) -> tuple[str, str]:
    """The userMetadata JSON for a commit and the token that identifies this refresh's commit.

    ``origin`` says who ran the refresh (``{"dag_id": ..., "run_id": ..., "task_id": ..., "map_index": ...,
    "try_number": ...}`` from the Airflow hook), so a retry can find the commit an earlier try made.
    ``started_at`` (ISO 8601, UTC) is when the refresh started: with the commit's own timestamp it gives
    the refresh's duration to anyone reading the log (the Airflow UI's Joins view). ``strategy`` is the plan
    that ran and what it read (:func:`.cost_history.strategy_record`): the next refresh learns its costs
    from it."""
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
        **({"origin": origin} if origin else {}),
        **({"spec_fields": spec_fields} if spec_fields else {}),
        **({"started_at": started_at} if started_at else {}),
        **({"strategy": strategy} if strategy else {}),
    }
    return json.dumps({METADATA_KEY: payload}, sort_keys=True), token


def with_row_counts(user_metadata: str, rows: dict[str, int]) -> str:
    """A commit's progress metadata with the rows the commit changes, for a commit whose row counts Delta
    does not record (one built without MERGE records no operation metrics): a result rebuilt from the log
    (:func:`..deltalog.watermarks.refresh_result_from_commit`) then reports them.

    >>> json.loads(with_row_counts('{"fkjoin": {"seq": 3}}', {"inserted": 2}))["fkjoin"]["rows"]
    {'inserted': 2}
    """
    payload = json.loads(user_metadata)
    payload[METADATA_KEY]["rows"] = dict(rows)
    return json.dumps(payload, sort_keys=True)


def transaction_app_id(output_identity: str) -> str:
    """The Delta transaction id of every refresh of one output: concurrent refreshes share it.

    Derived from the output's Delta table id once it exists (every spelling of its location, and a
    catalog name, give the same id), and from its normalised location for the commit that creates it.
    """
    return "fkjoin-" + hashlib.sha256(output_identity.encode()).hexdigest()[:24]

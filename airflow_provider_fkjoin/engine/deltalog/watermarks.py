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
import time
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import deltalake
from deltalake.exceptions import TableNotFoundError

from ..core.cost_history import recorded_strategy
from ..core.errors import FkJoinError
from ..core.locations import location_identity, normalise_location

if TYPE_CHECKING:
    from ..core.progress import HistoryScan

METADATA_KEY = "fkjoin"
HISTORY_SCAN = 200
#: Commits a no-JVM noop check reads first: the newest is the last refresh's unless others wrote since.
NOOP_CHECK_WINDOW = 20


class TableMissingError(FkJoinError):
    """No Delta table at a location. Permanent: waiting will not make a mistyped path appear."""


def open_table(path: str | Path, storage_options: dict[str, str] | None) -> deltalake.DeltaTable:
    """The Delta table at ``path`` (a local path, ``file:`` URI or object-store URI), through ``deltalake``;
    :class:`TableMissingError` when there is none."""
    location = str(path)
    if location.startswith("file:"):
        location = location.removeprefix("file://").removeprefix("file:")
    try:
        return deltalake.DeltaTable(location, storage_options=storage_options)
    except TableNotFoundError as error:
        raise TableMissingError(
            f"no Delta table at {location}: create it first or fix the path ({error})"
        ) from error


def commit_time(timestamp_ms: int | None) -> str | None:
    """A Delta commit's timestamp (milliseconds since the epoch, as the log records it) in ISO 8601, UTC."""
    return datetime.fromtimestamp(timestamp_ms / 1000, tz=UTC).isoformat() if timestamp_ms else None


def high_watermark(path: str | Path, storage_options: dict[str, str] | None = None) -> int:
    """The table's latest Delta version: what a refresh starting now would pin.

    Raises ``TableMissingError`` when there is no Delta table at ``path``.
    """
    return int(open_table(path, storage_options).version())


def read_history(
    path: str | Path, limit: int, storage_options: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """The newest ``limit`` commits of a table, newest first, as the engine reads a history:
    ``version``, ``timestamp`` (aware datetime), ``operation``, ``isBlindAppend``, ``userMetadata`` and
    ``operationMetrics`` (values as strings).

    >>> read_history("/warehouse/orders_enriched", 1)[0]["operation"]
    'MERGE'
    """
    return history_of(open_table(path, storage_options), limit)


def history_of(table: deltalake.DeltaTable, limit: int) -> list[dict[str, Any]]:
    """:func:`read_history` of a table already opened."""
    return [_history_entry(entry) for entry in table.history(limit)]


def _history_entry(entry: Mapping[str, Any]) -> dict[str, Any]:
    timestamp = entry.get("timestamp")
    return {
        "version": int(entry["version"]),
        "timestamp": datetime.fromtimestamp(timestamp / 1000, tz=UTC) if timestamp is not None else None,
        "operation": str(entry.get("operation") or ""),
        "isBlindAppend": bool(entry.get("isBlindAppend")),
        "userMetadata": entry.get("userMetadata"),
        "operationMetrics": {k: str(v) for k, v in (entry.get("operationMetrics") or {}).items()},
    }


def scan_output_log(table: deltalake.DeltaTable, location: str) -> HistoryScan:
    """The engine's :func:`..core.progress.scan_history` over an output's log read with ``deltalake``: the
    newest :data:`NOOP_CHECK_WINDOW` commits first, the engine's whole scan window only when those hold
    no refresh (so a busy output costs one small read, as the newest commit is usually the refresh's)."""
    from ..core.progress import HISTORY_SCAN as ENGINE_SCAN
    from ..core.progress import scan_history

    entries = [_history_entry(entry) for entry in table.history(NOOP_CHECK_WINDOW)]
    scan = scan_history(entries, location)
    if scan.progress is None and len(entries) == NOOP_CHECK_WINDOW:
        scan = scan_history([_history_entry(entry) for entry in table.history(ENGINE_SCAN)], location)
    return scan


def noop_result(spec: Any, storage_options: dict[str, str] | None = None) -> dict[str, Any] | None:
    """The result a refresh of ``spec`` would return when none of its inputs moved since the output's last
    refresh, read from Delta logs alone (no JVM, no Spark job); None when a refresh may have work to do.

    The decision is the engine's own (:func:`..core.planning.plan_refresh` on the progress the output's last
    refresh commit recorded), made stricter: *every* input the commit recorded must be at the same
    version and table id (a stream-table join whose table moved is submitted, though the engine will
    find nothing to do), the spec's fingerprint must match, and nobody may have changed the output's
    rows since. Anything that cannot be read this way (a catalog table, a missing output, an object
    store without credentials) gives None, so the caller runs the refresh as usual: this is a shortcut,
    never a second opinion. The result has ``"source": "precheck"``.

    >>> noop_result("specs/orders_enriched.yaml")["mode"]  # reads the tables' logs  # doctest: +SKIP
    'noop'
    """
    from ..core.owners import OWNER_PROPERTY, owner_verdict, spec_owner
    from ..core.planning import InputState, plan_refresh, refresh_result
    from ..core.spec import load_spec, spec_field_hashes, spec_fingerprint

    started = time.monotonic()
    loaded = load_spec(spec)
    location = loaded.output.location
    if loaded.output.path is None:
        return None
    try:
        output = open_table(loaded.output.path, storage_options)
    except TableMissingError:
        return None
    recorded = output.metadata().configuration.get(OWNER_PROPERTY)
    if recorded is not None and not owner_verdict(recorded, spec_owner(loaded)).allowed:
        return None  # another owner's output: the engine refuses it, with the reason
    scan = scan_output_log(output, location)
    if scan.progress is None or scan.changed_by_others is not None:
        return None
    current: dict[str, InputState] = {}
    for side, consumed in scan.progress.inputs.items():
        try:
            table = open_table(normalise_location(consumed.location), storage_options)
        except (ValueError, TableMissingError):
            return None  # a catalog table, or an input gone: the engine says what to do
        metadata = table.metadata()
        enabled = str(metadata.configuration.get("delta.enableChangeDataFeed", "false")).lower() == "true"
        current[side] = InputState(consumed.location, str(metadata.id), int(table.version()), enabled)
    plan = plan_refresh(
        previous=scan.progress,
        fingerprint=spec_fingerprint(loaded),
        kind=loaded.kind,
        current=current,
        output_exists=True,
        spec_fields=spec_field_hashes(loaded),
    )
    if plan.mode != "noop":
        return None
    return refresh_result(
        kind=loaded.kind,
        plan=plan,
        output_location=location,
        output_version=scan.progress.output_version,
        inputs={
            side: {"path": state.location, "from_version": state.version, "to_version": state.version}
            for side, state in current.items()
        },
        rows={"inserted": 0, "updated": 0, "deleted": 0},
        warnings=[],
        started=started,
        write_path=None,
        compacted=False,
        source="precheck",
    )


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


#: What names one Airflow task instance in a commit's ``origin``: every try of it shares these.
TASK_INSTANCE_KEYS = ("dag_id", "run_id", "task_id", "map_index")


def refresh_commits(table: deltalake.DeltaTable, limit: int = HISTORY_SCAN) -> Iterator[dict[str, Any]]:
    """The refresh commits among a table's newest ``limit`` commits, newest first, as :func:`progress`
    describes them; commits that are not ours (OPTIMIZE, VACUUM) are skipped.

    ``strategy`` is the plan the refresh recorded, as ``fkjoin status`` and the Joins view show it
    (:func:`..core.cost_history.recorded_strategy`: ``chosen``, ``basis``, ``estimate``, ``actual_s``, the
    last from the commit's own timestamp); None for a commit that recorded none (an older version's, an
    append-only kind's).

    >>> next(refresh_commits(open_table("/w/orders_enriched")))["strategy"]  # doctest: +SKIP
    {'chosen': 'recompute', 'basis': 'history', 'estimate': {'incremental_s': 6.0, 'recompute_s': 3.5},
     'actual_s': 3.0}
    """
    for entry in table.history(limit):
        payload = parse_commit_metadata(entry.get("userMetadata"))
        if payload is None:
            continue
        timestamp = entry.get("timestamp")
        yield {
            "kind": payload.get("kind"),
            "mode": payload.get("mode"),
            "seq": payload.get("seq"),
            "output_version": int(entry["version"]),
            "committed_at": commit_time(timestamp),
            "inputs": {
                side: {
                    "location": info.get("location"),
                    "table_id": info.get("table_id"),
                    "version": int(info["version"]),
                }
                for side, info in payload["inputs"].items()
            },
            "extra": dict(payload.get("extra") or {}),
            "origin": dict(payload.get("origin") or {}),
            "rows": payload.get("rows") if isinstance(payload.get("rows"), dict) else None,
            "reason": payload.get("reason", ""),
            "operation_metrics": dict(entry.get("operationMetrics") or {}),
            "operation": entry.get("operation"),
            "operation_parameters": dict(entry.get("operationParameters") or {}),
            "started_at": payload.get("started_at") if isinstance(payload.get("started_at"), str) else None,
            "strategy": recorded_strategy(payload, timestamp),
        }


def progress(path: str | Path, storage_options: dict[str, str] | None = None) -> dict[str, Any] | None:
    """The latest refresh recorded in an output table's commits, or None when no refresh committed.

    Returns ``{"kind", "mode", "seq", "output_version", "committed_at", "inputs": {side: {"location",
    "table_id", "version"}}, "extra", "origin", "reason", "operation_metrics", "strategy", ...}``
    (:func:`refresh_commits`); later commits that are not ours (OPTIMIZE, VACUUM) are skipped. Raises
    ``TableMissingError`` when there is no Delta table at ``path``.
    """
    return next(refresh_commits(open_table(path, storage_options)), None)


def _result(refresh: Mapping[str, Any], location: str, *, committed: bool) -> dict[str, Any]:
    """A result dict rebuilt from one refresh commit (``committed``), or the noop that followed it."""
    metrics = refresh["operation_metrics"] if committed else {}

    def metric(*names: str) -> int:
        for name in names:
            if name in metrics:
                return int(metrics[name])
        return 0

    result = {
        "kind": refresh["kind"],
        "mode": refresh["mode"] if committed else "noop",
        "reason": refresh["reason"] if committed else "no new input versions",
        "output": {"path": location, "version": refresh["output_version"]},
        "inputs": {
            side: {"path": info["location"], "to_version": info["version"]}
            for side, info in refresh["inputs"].items()
        },
        "rows": {
            "inserted": metric("numTargetRowsInserted", "numOutputRows"),
            "updated": metric("numTargetRowsUpdated"),
            "deleted": metric("numTargetRowsDeleted"),
        }
        if not (committed and refresh["rows"])
        else {name: int(refresh["rows"].get(name, 0)) for name in ("inserted", "updated", "deleted")},
        "extra": refresh["extra"],
        "source": "delta_log",
    }
    if committed and refresh["origin"]:
        result["origin"] = refresh["origin"]
    return result


def refresh_result_from_commit(
    output_path: str | Path,
    after_version: int | None,
    storage_options: dict[str, str] | None = None,
    *,
    origin: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A refresh's result dict rebuilt from the output's Delta log, for when the driver's stdout is gone.

    ``after_version`` is the output's version before the refresh started (None: no output yet). The
    newest refresh commit after it is this refresh; when there is none, the refresh was a ``noop``.
    With ``origin`` (what the caller passed to ``run_spec``), only a commit recording that same origin
    counts: another writer's commit (a concurrent refresh, a zombie driver) is never taken for this one.
    Row counts come from the commit's progress (a net-change commit records them) or its operation
    metrics (MERGE, writes); the fields only the driver knew
    (``duration_s``, ``warnings``, per-side change counts) are absent.

    >>> refresh_result_from_commit("/warehouse/orders_enriched", after_version=4)["mode"]  # doctest: +SKIP
    'incremental'
    """
    location = str(output_path)
    latest: dict[str, Any] | None = None
    for refresh in refresh_commits(open_table(output_path, storage_options)):
        latest = latest or refresh
        if after_version is not None and refresh["output_version"] <= after_version:
            break
        if origin is None or refresh["origin"] == dict(origin):
            return _result(refresh, location, committed=True)
    if latest is None:
        raise TableMissingError(f"output {location} holds no fkjoin refresh commit: the refresh did not run")
    return _result(latest, location, committed=False)


def refresh_by_origin(
    output_path: str | Path, origin: Mapping[str, Any], storage_options: dict[str, str] | None = None
) -> dict[str, Any] | None:
    """The result of the refresh that an earlier try of the same task instance committed, or None.

    A task instance is ``origin``'s :data:`TASK_INSTANCE_KEYS` (dag, run, task, map index; any try). A
    retry calls this before running: when a try committed and then died before reporting (a lost worker,
    a killed spark-submit), the retry reports that refresh, rows and versions, instead of a ``noop``.
    Only the newest :data:`HISTORY_SCAN` commits are searched; a missing output gives None.

    >>> origin = {"dag_id": "d", "run_id": "r", "task_id": "t", "map_index": -1}
    >>> refresh_by_origin("/w/out", origin)["origin"]  # reads the output's log  # doctest: +SKIP
    {'dag_id': 'd', 'run_id': 'r', 'task_id': 't', 'map_index': -1, 'try_number': 1}
    """
    wanted = {key: origin.get(key) for key in TASK_INSTANCE_KEYS}
    try:
        table = open_table(output_path, storage_options)
    except TableMissingError:
        return None
    for refresh in refresh_commits(table):
        if refresh["origin"] and {key: refresh["origin"].get(key) for key in TASK_INSTANCE_KEYS} == wanted:
            return _result(refresh, str(output_path), committed=True)
    return None


class TableSnapshot(NamedTuple):
    """A table's latest version and its Delta table id (what tells a table dropped and recreated at the
    same path, whose versions start again at 0, from the one before)."""

    version: int
    table_id: str


def table_snapshot(path: str | Path, storage_options: dict[str, str] | None = None) -> TableSnapshot:
    """The latest version and table id at ``path``, read from one load of its log.

    >>> table_snapshot("/warehouse/customers")  # doctest: +SKIP
    TableSnapshot(version=12, table_id='5f0c...')
    """
    table = open_table(path, storage_options)
    return TableSnapshot(int(table.version()), str(table.metadata().id))


def consumed_input(
    output_path: str | Path, source_location: str, storage_options: dict[str, str] | None = None
) -> dict[str, Any] | None:
    """What ``output_path``'s latest refresh recorded of ``source_location``: ``{"location", "table_id",
    "version"}``, or None when it has not consumed it (no refresh yet, or another input)."""
    latest = progress(output_path, storage_options)
    if latest is None:
        return None
    wanted = _normalise(source_location)
    for info in latest["inputs"].values():
        if _normalise(str(info["location"])) == wanted:
            return info
    return None


def consumed_version(
    output_path: str | Path, source_location: str, storage_options: dict[str, str] | None = None
) -> int | None:
    """The version of ``source_location`` that ``output_path`` has consumed, or None if it has not.

    A sensor's question "has this join caught up with that source?" is
    ``consumed_version(out, src) >= high_watermark(src)`` (of the same table: see :func:`consumed_input`).
    """
    found = consumed_input(output_path, source_location, storage_options)
    return None if found is None else int(found["version"])


def _normalise(location: str) -> str:
    """Compare locations as the engine does (``s3://b/t`` is ``s3a://b/t/``); a name stays as it is."""
    try:
        return location_identity(location)
    except ValueError:
        return location

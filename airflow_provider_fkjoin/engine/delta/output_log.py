"""An output's log read through Spark: its refresh progress, others' changes since it and the refresh
sequence (what :mod:`..core.progress` parses), for the ownership check and the refresh's plan."""

from __future__ import annotations

from ..core import progress
from ..core.cost_history import observations
from ..core.progress import OutputLog, Progress, scan_history, transaction_app_id
from .tables import DeltaHandle


def read_progress(output: DeltaHandle) -> Progress | None:
    """The newest progress in the output's history (later commits by others are skipped)."""
    return read_output_log(output).progress


def read_output_log(output: DeltaHandle) -> OutputLog:
    """Read the output's progress, others' changes since it, and the refresh sequence (see OutputLog)."""
    if not output.exists():
        return OutputLog(None, None, transaction_app_id(output.ref.identity), 0, None)
    # read when called, not imported: a test lowers it to reach the path past the scanned history
    history = output.history(progress.HISTORY_SCAN)
    state = output.state(with_size=True, version=history[0]["version"] if history else None)
    app_id = transaction_app_id(state.table_id)
    scan = scan_history(history, output.location)
    recorded = output.transaction_version(app_id) or 0
    last_seq = max(recorded, scan.progress.seq if scan.progress else 0)
    return OutputLog(
        scan.progress,
        scan.changed_by_others,
        app_id,
        last_seq,
        state.table_id,
        scan.latest_version,
        state.size_bytes,
        tuple(observations(history)),
    )

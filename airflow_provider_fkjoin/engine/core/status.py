"""What ``fkjoin status`` reports of an output: pure, shared by the Spark route
(:func:`..runner.refresh_status`) and the no-JVM one (:func:`..deltalog.validation.refresh_status_from_logs`),
so both show the same last refresh from the same commit.

Not in :mod:`.progress`: the plan the last refresh ran is shown through :mod:`.cost_history`, which
imports :mod:`.planning`, which imports :mod:`.progress`.
"""

from __future__ import annotations

from typing import Any

from .cost_history import recorded_strategy
from .progress import Progress


def status_report(
    kind: str,
    output_location: str,
    inputs: dict[str, tuple[str, int | None]],
    previous: Progress | None,
    fingerprint: str,
) -> dict[str, Any]:
    """Where an output stands (``fkjoin status``): per input (``{side: (location, latest version or None)}``)
    the version the last refresh consumed and the lag behind its latest, and that refresh itself, with the
    plan it ran (``strategy``, :func:`.cost_history.recorded_strategy`: ``chosen``, ``basis``,
    ``estimate``, ``actual_s``; None when its commit recorded none), so that a plan slower than its
    estimates is seen after the fact, not only in the run's log.

    >>> status_report("foreign_key_join", "/w/x", {"left": ("/w/o", 3)}, None, "f")["inputs"]["left"]
    {'path': '/w/o', 'consumed_version': None, 'high_watermark': 3, 'lag_versions': None}
    >>> from datetime import datetime
    >>> from airflow_provider_fkjoin.engine.core.progress import parse_progress
    >>> metadata = '''{"fkjoin": {"seq": 2, "kind": "foreign_key_join", "fingerprint": "f",
    ...     "mode": "incremental", "inputs": {}, "started_at": "2026-01-05T12:00:00+00:00",
    ...     "strategy": {"chosen": "recompute", "basis": "history", "plan_start_s": 1.0,
    ...                  "estimate": {"incremental_s": 6.0, "recompute_s": 3.5}}}}'''
    >>> last = parse_progress(metadata, 7, datetime.fromisoformat("2026-01-05T12:00:04+00:00"))
    >>> shown = status_report("foreign_key_join", "/w/x", {}, last, "f")["last_refresh"]["strategy"]
    >>> shown["chosen"], shown["basis"], shown["estimate"]["incremental_s"], shown["actual_s"]
    ('recompute', 'history', 6.0, 3.0)
    """
    sides: dict[str, Any] = {}
    for side, (location, latest) in inputs.items():
        consumed = previous.inputs[side].version if previous and side in previous.inputs else None
        sides[side] = {
            "path": location,
            "consumed_version": consumed,
            "high_watermark": latest,
            "lag_versions": None if latest is None or consumed is None else latest - consumed,
        }
    last = None
    if previous is not None:
        recorded = {"started_at": previous.started_at, "strategy": previous.strategy}
        last = {
            "mode": previous.mode,
            "output_version": previous.output_version,
            "committed_at": previous.committed_at.isoformat() if previous.committed_at else None,
            "spec_matches": previous.fingerprint == fingerprint,
            "strategy": recorded_strategy(recorded, previous.committed_at),
        }
    return {"kind": kind, "output": {"path": output_location}, "inputs": sides, "last_refresh": last}

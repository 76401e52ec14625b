"""``run_spec`` and ``refresh_status``: the engine's entry points, dispatching on a spec's ``kind``."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from .audit import audit_output
from .core.errors import SpecError
from .core.planning import RefreshResult
from .core.spec import WRITE_PATHS, AnySpec, load_spec, spec_expressions, spec_fingerprint
from .core.status import status_report
from .delta.output_log import read_progress
from .delta.ownership import check_ownership
from .delta.tables import DeltaHandle, opened_once
from .kinds import KINDS
from .refresh.skeleton import RunOptions, refresh_once
from .runtime.expressions import row_errors
from .runtime.session import get_spark


def run_spec(
    spec: AnySpec | dict[str, Any] | str | Path,
    spark: SparkSession | None = None,
    *,
    full_refresh: bool = False,
    write_path: str = "auto",
    audit: bool = False,
    audit_examples: int = 0,
    origin: Mapping[str, Any] | None = None,
) -> RefreshResult | dict[str, Any]:
    """Refresh a spec's output once and return the JSON-serialisable result dict (:class:`RefreshResult`,
    ``docs/concepts/result.md``; with ``audit`` the audit's report instead).

    The output's ownership is checked first (:mod:`.delta.ownership`): nothing is read or written for a spec
    that must not write its output. ``full_refresh`` rebuilds the output from the inputs whatever its
    progress says (``reason``: "full refresh requested"). ``write_path="merge"`` writes every refresh
    with Delta's MERGE instead of committing net changes directly (for comparison or as an escape hatch).

    >>> run_spec("specs/orders_enriched.yaml")["mode"]  # starts Spark  # doctest: +SKIP
    'incremental'
    >>> run_spec("specs/orders_enriched.yaml", full_refresh=True)["mode"]  # doctest: +SKIP
    'full'

    ``audit=True`` writes nothing: it recomputes the output from scratch at the versions it consumed and
    reports rows missing, extra and different (:mod:`.audit`; ``audit_examples`` keys of each).

    ``origin`` names who runs the refresh (plain JSON values; the Airflow hook gives the task instance's
    ``dag_id``, ``run_id``, ``task_id``, ``map_index`` and ``try_number``). It is recorded in the refresh's
    commit, so a retry finds what an earlier try committed (:func:`.deltalog.watermarks.refresh_by_origin`).
    """
    if write_path not in WRITE_PATHS:
        raise SpecError(f"write_path must be one of {', '.join(WRITE_PATHS)}, not {write_path!r}")
    loaded = load_spec(spec)
    session = spark or get_spark()
    with opened_once():
        if audit:
            with row_errors(spec_expressions(loaded)):
                return audit_output(loaded, session, examples=audit_examples)
        options = RunOptions(
            ownership=check_ownership(session, loaded),
            full_refresh=full_refresh,
            write_path=write_path,
            origin=dict(origin) if origin else None,
        )
        with row_errors(spec_expressions(loaded)):
            return refresh_once(KINDS[loaded.kind].refresh_for(loaded, session), options)


def refresh_status(
    spec: AnySpec | dict[str, Any] | str | Path, spark: SparkSession | None = None
) -> dict[str, Any]:
    """Where an output stands: versions consumed per input, lag behind each high watermark, last refresh."""
    loaded = load_spec(spec)
    session = spark or get_spark()
    output = DeltaHandle(session, loaded.output, "output")
    latest: dict[str, tuple[str, int | None]] = {}
    for side, ref in loaded.inputs().items():
        handle = DeltaHandle(session, ref, side)
        latest[side] = (handle.location, handle.state().version if handle.exists() else None)
    return status_report(
        loaded.kind, output.location, latest, read_progress(output), spec_fingerprint(loaded)
    )

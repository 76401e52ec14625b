"""Deciding how a refresh runs (full, incremental or noop): pure functions, no Spark.

Example::

    plan = plan_refresh(previous=None, fingerprint="ab12", kind="foreign_key_join",
                        current={"left": InputState("/w/orders", "id1", 3, True), ...})
    plan.mode, plan.reason        # ("full", "first run: the output has no refresh yet")
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Literal, NotRequired, TypedDict

from .progress import InputProgress, Progress


class RebuildRequired(Exception):
    """An incremental refresh cannot go on (a change feed is gone, the output's columns differ from the
    join's); the message is the full-rebuild reason. The refresh skeleton
    (:func:`..refresh.skeleton.refresh_once`) catches it and rebuilds."""


@dataclass(frozen=True)
class InputState:
    """An input as the refresh pinned it: location, Delta table id, high watermark, CDF flag, columns."""

    location: str
    table_id: str
    version: int
    cdf_enabled: bool
    columns: dict[str, str] | None = None

    def consumed(self) -> InputProgress:
        """What a refresh that reads this input up to its pinned version records in its commit."""
        return InputProgress(self.location, self.table_id, self.version, self.columns)


def schema_columns(schema: Any) -> dict[str, str]:
    """A schema as ``{column: type}`` (Spark's simple type strings), what progress records per input.

    >>> schema_columns(spark.range(1).schema)
    {'id': 'bigint'}
    """
    return {field.name: field.dataType.simpleString() for field in schema.fields}


def schema_change(before: dict[str, str], after: dict[str, str]) -> str | None:
    """The columns that were added, dropped or changed type between two schemas, or None.

    >>> schema_change({"a": "int"}, {"a": "bigint", "tier": "string"})
    "column 'tier' added; column 'a' changed type int -> bigint"
    """
    parts = [f"column {name!r} added" for name in after if name not in before]
    parts += [f"column {name!r} dropped" for name in before if name not in after]
    parts += [
        f"column {name!r} changed type {before[name]} -> {after[name]}"
        for name in after
        if name in before and before[name] != after[name]
    ]
    return "; ".join(parts) or None


def spec_change_reason(previous: Progress, fingerprint: str, spec_fields: dict[str, str] | None) -> str:
    """Why a changed spec rebuilds, naming the fields that changed (their paths, never their values).

    >>> spec_change_reason(previous, "ab12", {"how": "5e4f", "columns.name": "77aa"})
    'spec changed since the last refresh: how, columns.name'
    """
    if previous.spec_fields and spec_fields:
        paths = set(previous.spec_fields) | set(spec_fields)
        differ = {p for p in paths if previous.spec_fields.get(p) != spec_fields.get(p)}
        # a field that became or stopped being a mapping (columns: default -> listed) is named once
        changed = sorted(p for p in differ if not any(p.startswith(q + ".") for q in differ))
        if changed:
            return "spec changed since the last refresh: " + ", ".join(changed)
    return f"spec changed since the last refresh (fingerprint {previous.fingerprint} -> {fingerprint})"


@dataclass(frozen=True)
class RefreshPlan:
    """How a refresh runs, why, and from which versions (``from_versions`` is empty for a full run)."""

    mode: str
    reason: str
    from_versions: dict[str, int | None]


def plan_refresh(
    *,
    previous: Progress | None,
    fingerprint: str,
    kind: str,
    current: dict[str, InputState],
    full_refresh: bool = False,
    output_exists: bool = False,
    changed_by_others: str | None = None,
    spec_fields: dict[str, str] | None = None,
) -> RefreshPlan:
    """Choose full, incremental or noop from the last progress and the inputs' current state.

    ``full_refresh`` is the caller's explicit request; ``output_exists`` tells a first run from an
    output whose progress is gone; ``changed_by_others`` is why the output's rows no longer match its
    progress (:func:`..delta.output_log.read_output_log`).
    """
    no_from: dict[str, int | None] = dict.fromkeys(current)
    if full_refresh:
        return RefreshPlan("full", "full refresh requested", no_from)
    if previous is None:
        if output_exists:
            return RefreshPlan(
                "full",
                "the output holds no refresh progress in its recent log (adopted, or its refresh commits "
                "were cleaned up): rebuilding in full",
                no_from,
            )
        return RefreshPlan("full", "first run: the output has no refresh yet", no_from)
    if changed_by_others:
        return RefreshPlan("full", f"{changed_by_others}: rebuilding in full", no_from)
    if previous.kind != kind:
        return RefreshPlan(
            "full", f"spec changed since the last refresh: kind {previous.kind} -> {kind}", no_from
        )
    if previous.fingerprint != fingerprint:
        return RefreshPlan("full", spec_change_reason(previous, fingerprint, spec_fields), no_from)
    for side, state in current.items():
        consumed = previous.inputs.get(side)
        if consumed is None or consumed.location != state.location:
            return RefreshPlan("full", f"input {side} is a different table than last time", no_from)
        if consumed.table_id != state.table_id:
            return RefreshPlan(
                "full", f"input {side} ({state.location}) was recreated (new Delta table id)", no_from
            )
        if state.version < consumed.version:
            return RefreshPlan(
                "full",
                f"input {side} ({state.location}) is at version {state.version}, behind the consumed "
                f"version {consumed.version} (restored?)",
                no_from,
            )
        if consumed.columns is not None and state.columns is not None:
            change = schema_change(consumed.columns, state.columns)
            if change:
                return RefreshPlan(
                    "full",
                    f"input {side} ({state.location}) schema changed since the last refresh: {change}",
                    no_from,
                )
    from_versions: dict[str, int | None] = {side: previous.inputs[side].version for side in current}
    if all(current[side].version == from_versions[side] for side in current):
        return RefreshPlan("noop", "no new input versions since the last refresh", from_versions)
    for side, state in current.items():
        if not state.cdf_enabled and state.version != from_versions[side]:
            return RefreshPlan(
                "full",
                f"change data feed is off on input {side} ({state.location}); "
                "every refresh is a full rebuild",
                no_from,
            )
    return RefreshPlan("incremental", "changes since the last refresh", from_versions)


@dataclass(frozen=True)
class CostModel:
    """What the refresh-strategy estimate weighs (:func:`estimate_costs`): a Spark job's fixed cost, and
    how fast the cluster reads table bytes. Measured on 2 cores; the prior of each output's learned
    estimate (:mod:`.cost_history`), which a session tunes with ``spark.fkjoin.cost.*``
    (:func:`..runtime.session.cost_model`)."""

    #: Seconds per Spark job of the plan (scheduling, planning, the driver between jobs).
    job_s: float = 0.45
    #: Compressed Parquet bytes a plan reads, joins and writes per second.
    scan_bytes_per_s: float = 10e6
    #: What a change-feed byte costs against a table byte: its rows are read as pre- and post-images,
    #: grouped per key, and joined to the other side.
    feed_weight: float = 6.0
    #: What a recomputed output byte costs against a table byte: the join is shuffled, and compared with
    #: the output's rows key by key.
    recompute_weight: float = 1.5


@dataclass(frozen=True)
class StrategyEstimate:
    """The estimated seconds of each strategy, and what they were estimated from (bytes, from the logs)."""

    incremental_s: float
    recompute_s: float
    feed_bytes: int
    input_bytes: int
    output_bytes: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "incremental_s": round(self.incremental_s, 3),
            "recompute_s": round(self.recompute_s, 3),
            "feed_bytes": self.feed_bytes,
            "input_bytes": self.input_bytes,
            "output_bytes": self.output_bytes,
        }


def estimate_costs(
    *,
    feed_bytes: int,
    input_bytes: int,
    output_bytes: int,
    incremental_jobs: int,
    recompute_jobs: int,
    model: CostModel = CostModel(),
) -> StrategyEstimate:
    """Estimate both strategies of an incremental refresh from byte counts the Delta logs give.

    Both read the inputs at their pinned versions (a foreign-key join scans the left table for the rows a
    changed right key touches); the incremental plan adds its change feeds (weighted by ``feed_weight``)
    and the output's key columns, the recompute the whole output and the join's shuffle (weighted by
    ``recompute_weight``). Each plan's Spark jobs add ``job_s`` each.

    >>> e = estimate_costs(feed_bytes=2_000, input_bytes=60_000, output_bytes=50_000,
    ...                    incremental_jobs=6, recompute_jobs=4)
    >>> e.incremental_s > e.recompute_s
    True
    """
    rate = model.scan_bytes_per_s
    incremental = (
        incremental_jobs * model.job_s
        + (input_bytes + output_bytes / 4 + feed_bytes * model.feed_weight) / rate
    )
    recompute = recompute_jobs * model.job_s + (input_bytes + output_bytes) * model.recompute_weight / rate
    return StrategyEstimate(incremental, recompute, feed_bytes, input_bytes, output_bytes)


def cdf_unavailable_reason(side: str, location: str, after: int, to: int, error: Exception) -> str:
    """The full-rebuild reason when a change feed could not be read (vacuumed history, CDF gaps)."""
    text = str(error).splitlines()[0] if str(error) else type(error).__name__
    return (
        f"change feed of input {side} ({location}) for versions {after + 1}..{to} is unavailable "
        f"(history vacuumed or CDF was off): {text[:200]}"
    )


class OutputVersion(TypedDict):
    """The result's ``output``: the output's location and the Delta version that holds the refresh."""

    path: str
    version: int | None


class InputRange(TypedDict):
    """The result's ``inputs[side]``: the input's location and the versions this refresh consumed."""

    path: str
    from_version: int | None
    to_version: int | None


class RefreshResult(TypedDict):
    """The result dict of a refresh: the one type behind ``run_spec``'s return value, the XCom of every
    join operator and ``fkjoin run``'s last line, documented field by field in ``docs/concepts/result.md``.
    JSON-serialisable. Every kind returns the fields without ``NotRequired``; ``rows`` holds the kind's
    counts (``inserted``, ``updated``, ``deleted`` and its own), and a kind may add top-level fields.

    >>> plan = RefreshPlan("noop", "no new input versions since the last refresh", {})
    >>> result = refresh_result(kind="foreign_key_join", plan=plan, output_location="/w/out",
    ...     output_version=3, inputs={}, rows={}, warnings=[], started=time.monotonic())
    >>> result["mode"], result["output"]
    ('noop', {'path': '/w/out', 'version': 3})
    """

    kind: str
    mode: Literal["full", "incremental", "noop"]
    reason: str
    output: OutputVersion
    inputs: dict[str, InputRange]
    rows: dict[str, Any]
    warnings: list[str]
    duration_s: float
    #: How the commit was written (``net_changes``, ``merge``, ``create``, ``overwrite``; None for a noop);
    #: keyed outputs only.
    write_path: NotRequired[str | None]
    #: Whether the refresh compacted the output after its commit; keyed outputs only.
    compacted: NotRequired[bool]
    #: Seconds after the start at which the refresh reached each phase, in order.
    phases: NotRequired[dict[str, float]]
    #: Where the Airflow hook got the result when not from a refresh run just now: ``"precheck"`` (the
    #: no-JVM noop check) or ``"delta_log"`` (read back from the output's commit); the hook adds
    #: ``"driver_stdout"`` for a result the driver printed.
    source: NotRequired[str]
    #: ``global_table_bootstrap``: the source version pinned, the one the output holds, and whether they
    #: are still equal when the refresh ends.
    high_watermark: NotRequired[int]
    checkpoint: NotRequired[int | None]
    caught_up: NotRequired[bool]
    #: ``windowed_join`` in stream mode and ``self_join``: ``"self_join"`` when it ran as one, else None.
    optimized: NotRequired[str | None]
    #: A keyed output's incremental refresh: how it computed its net changes (``incremental`` or
    #: ``recompute``), why, and the estimate it weighed (``refresh_strategy`` in the spec).
    strategy: NotRequired[dict[str, Any]]


def refresh_result(
    *,
    kind: str,
    plan: RefreshPlan,
    output_location: str,
    output_version: int | None,
    inputs: dict[str, dict[str, Any]],
    rows: dict[str, Any],
    warnings: list[str],
    started: float,
    **extra: Any,
) -> RefreshResult:
    """The result dict every kind returns (:class:`RefreshResult`, the contract in
    ``docs/concepts/result.md``), plus the kind's own ``extra`` fields.

    ``inputs`` maps a side to ``{"path", "from_version", "to_version"}``; ``started`` is the
    ``time.monotonic()`` of the refresh's start.
    """
    return {  # type: ignore[typeddict-item]  # the kind's extra fields are NotRequired keys
        "kind": kind,
        "mode": plan.mode,
        "reason": plan.reason,
        "output": {"path": output_location, "version": output_version},
        "inputs": inputs,
        "rows": rows,
        **extra,
        "warnings": warnings,
        "duration_s": round(time.monotonic() - started, 3),
    }

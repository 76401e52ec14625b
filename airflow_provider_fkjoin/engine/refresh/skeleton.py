"""One refresh of one output: the skeleton every kind runs, around the kind's own algorithm.

:func:`refresh_once` is the skeleton: pin the inputs, let the kind read them (:meth:`KindRefresh.prepare`),
plan the refresh from the output's log (:func:`begin_refresh`: full, incremental or noop), run the kind's
incremental path and fall back to its full rebuild when it raises :class:`RebuildRequired`, and return the
result dict. :class:`RefreshContext` carries the plan to the commit: the progress the commit records, the
write path, the warnings, and the result dict. A kind module subclasses :class:`KindRefresh` and holds only
its join.

>>> refresh_once(ForeignKeyJoinRefresh(spec, spark), options)["mode"]
'incremental'
>>> refresh, plan = begin_refresh(spec, output, {"left": left_state}, options, time.monotonic(), [])
>>> plan.mode, refresh.request("incremental", plan.reason).seq
('incremental', 4)
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

from pyspark.sql import DataFrame, SparkSession

from ..core.cost_history import (
    FULL,
    WARN_RATIO,
    LearnedEstimate,
    PlanChoice,
    PlanFeatures,
    choose_plan,
    learned_estimate,
    slower_than_expected,
    strategy_record,
)
from ..core.errors import FullRebuildRefusedError, SpecError, run_option
from ..core.planning import (
    InputState,
    RebuildRequired,
    RefreshPlan,
    RefreshResult,
    plan_refresh,
    refresh_result,
)
from ..core.progress import (
    InputProgress,
    OutputLog,
    Progress,
    new_progress_metadata,
)
from ..core.spec import spec_field_hashes, spec_fingerprint
from ..core.trace import phase, phase_timeline
from ..delta.changes import ObservedKeys, verify_observed
from ..delta.output_log import read_output_log
from ..delta.ownership import Ownership
from ..delta.tables import ROW_POSITION_COLUMNS, DeltaHandle, TableState, feed_bytes, warm_file_reads
from ..delta.warm_state import StateLookup
from ..runtime.session import (
    SMALL_REFRESH_BYTES_CONF,
    cluster_name,
    cost_model,
    is_small,
    recompute_change_ratio,
    small_refresh,
)
from ..write.merge import Commit, CommitRequest, merge_output
from ..write.net_changes import (
    MergeRequired,
    NetChanges,
    changed_positions,
    commit_net_changes,
    compact_output,
    net_changes,
)
from .store import JoinStateStore, StateInputs

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunOptions:
    """How ``run_spec`` asks a kind to refresh: ``full_refresh`` on request, and the output's checked
    ownership (:func:`..delta.ownership.check_ownership`, run before anything was read)."""

    ownership: Ownership
    full_refresh: bool = False
    write_path: str = "auto"
    #: Who runs the refresh (recorded in its commit; see :func:`..core.progress.new_progress_metadata`).
    origin: dict[str, Any] | None = None


@dataclass
class RefreshContext:
    """One refresh of one output, from its pinned inputs to its result: what every kind shares.

    ``consumed`` is what the refresh's commit records per input; ``warnings`` collects what the
    result reports and logs (a list the caller may keep appending to until then). :func:`begin_refresh`
    builds it, from the output's log and the run's options:

    >>> refresh = RefreshContext("foreign_key_join", out, read_output_log(out), "9f2c",
    ...                          {"left": state.consumed()}, time.monotonic(), [], ownership)
    >>> refresh.request("full", "first run").seq
    1
    """

    kind: str
    output: DeltaHandle
    log: OutputLog
    fingerprint: str
    consumed: dict[str, InputProgress]
    started: float
    warnings: list[str]
    ownership: Ownership
    write_path: str = "auto"
    origin: dict[str, Any] | None = None
    spec_fields: dict[str, str] | None = None
    #: The plan this refresh runs and what it reads (:func:`..core.cost_history.strategy_record`),
    #: recorded in its commit for the next refresh's estimate; None for a kind with one plan.
    strategy_record: dict[str, Any] | None = None
    #: The output's join state, when its kind keeps one (:meth:`KindRefresh.state_inputs`).
    store: JoinStateStore | None = None

    @property
    def started_at(self) -> str:
        """When the refresh started, as wall-clock UTC (ISO 8601, seconds)."""
        started = datetime.now(UTC) - timedelta(seconds=time.monotonic() - self.started)
        return started.isoformat(timespec="milliseconds")

    @property
    def previous(self) -> Progress | None:
        """The last refresh's progress, if the output's log holds one."""
        return self.log.progress

    @property
    def previous_output_version(self) -> int:
        """The output version the last refresh committed (a noop reports it)."""
        assert self.log.progress is not None
        return self.log.progress.output_version

    def request(self, mode: str, reason: str, extra: dict[str, Any] | None = None) -> CommitRequest:
        """The identity of the refresh commit that follows the last one: next seq, progress, txn id.
        ``extra`` is kind-specific progress the next refresh reads back (``Progress.extra``)."""
        seq = self.log.last_seq + 1
        metadata, token = new_progress_metadata(
            seq=seq,
            kind=self.kind,
            fingerprint=self.fingerprint,
            mode=mode,
            inputs=self.consumed,
            reason=reason,
            extra=extra,
            origin=self.origin,
            spec_fields=self.spec_fields,
            started_at=self.started_at,
            strategy=self.strategy_record,
        )
        return CommitRequest(
            metadata,
            token,
            self.log.app_id,
            seq,
            self.ownership.owner,
            self.ownership.claim,
            self.log.latest_version,
        )

    def direct_write_possible(self, *conditions: bool) -> bool:
        """Whether this refresh may commit its net changes without MERGE: the kind's ``conditions``
        hold, MERGE was not asked for, the output has a known latest version and the owner need not be
        claimed first. (A session without the engine's jar is found out by the commit, which then
        falls back to MERGE with a warning.)"""
        return (
            all(conditions)
            and self.write_path != "merge"
            and self.log.latest_version is not None
            and not self.ownership.claim
        )

    def write(
        self,
        net: NetChanges | None,
        key: list[str],
        value_columns: list[str],
        request: CommitRequest,
        merge_source: Callable[[], DataFrame],
        *,
        found: StateLookup | None = None,
    ) -> Commit:
        """The incremental commit, by the one route every kind takes: ``net`` (the net changes, when the
        kind computed them because :meth:`direct_write_possible`) committed without MERGE, else, or when
        that path cannot prove itself right, one MERGE of ``merge_source()`` (built only then). With
        ``found`` (the join state's lookup), the affected keys' positions come from it, and the state is
        brought up to the commit.

        >>> commit = refresh.write(net, ["order_id"], ["name"], request, lambda: merge_rows)  # doctest: +SKIP
        >>> commit.write_path  # doctest: +SKIP
        'net_changes'
        """
        positions = found.positions if found is not None else None
        commit = self.commit_net_changes(net, key, request, positions=positions) if net is not None else None
        if commit is None:
            commit = merge_output(self.output, merge_source(), key, value_columns, request)
        if found is not None and self.store is not None:
            self.store.advance(found, commit, net, key)
        return commit

    def commit_net_changes(
        self,
        changes: NetChanges,
        key: list[str],
        request: CommitRequest,
        *,
        merge_fallback: bool = True,
        positions: DataFrame | None = None,
    ) -> Commit | None:
        """Commit ``changes`` without MERGE (:func:`..write.net_changes.commit_net_changes`); None, with a
        warning, when that path cannot prove itself right and the kind must MERGE instead (without
        ``merge_fallback``, :class:`MergeRequired` reaches the caller, which falls back its own way)."""
        assert self.log.latest_version is not None
        try:
            committed = commit_net_changes(
                self.output,
                changes,
                key,
                user_metadata=request.user_metadata,
                app_id=request.app_id,
                seq=request.seq,
                expected_version=self.log.latest_version,
                positions=positions,
            )
        except MergeRequired as reason:
            if not merge_fallback:
                raise
            self.warnings.append(f"output {self.output.location}: the refresh was written by MERGE: {reason}")
            return None
        compacted = False
        if committed.compact:
            phase("compacting")
            try:
                compact_output(self.output)
                compacted = True
            except Exception as error:  # the refresh is committed; compaction is retried next time
                self.warnings.append(f"compacting the output failed, the next refresh retries: {error}")
        return Commit(
            committed.version,
            changes.inserted,
            changes.updated,
            changes.deleted,
            "net_changes",
            compacted=compacted,
            added_files=committed.added,
        )

    def result(
        self,
        plan: RefreshPlan,
        output_version: int | None,
        rows: dict[str, Any],
        *,
        inputs: dict[str, dict[str, Any]] | None = None,
        **extra: Any,
    ) -> RefreshResult:
        """The result dict (its warnings logged once); ``inputs`` defaults to each consumed input's path
        and version range."""
        for warning in self.warnings:
            log.warning(warning)
        if inputs is None:
            inputs = {
                side: {
                    "path": progress.location,
                    "from_version": plan.from_versions.get(side),
                    "to_version": progress.version,
                }
                for side, progress in self.consumed.items()
            }
        return refresh_result(
            kind=self.kind,
            plan=plan,
            output_location=self.output.location,
            output_version=output_version,
            inputs=inputs,
            rows=rows,
            warnings=self.warnings,
            started=self.started,
            **extra,
        )


def begin_refresh(
    spec: Any,
    output: DeltaHandle,
    current: dict[str, InputState],
    options: RunOptions,
    started: float,
    warnings: list[str],
    consumed: dict[str, InputProgress] | None = None,
    *,
    append_only: bool = False,
) -> tuple[RefreshContext, RefreshPlan]:
    """Read the output's log and plan the refresh: what every kind does once its inputs are pinned.

    ``current`` holds the inputs whose changes the refresh consumes; ``consumed`` (default: each of
    ``current`` at its pinned version) is what the commit records. An ``append_only`` output (a stream
    join's) never re-reads its rows, so others' changes to it are a warning, not a rebuild.

    >>> refresh, plan = begin_refresh(spec, output, {"left": left_state}, options, time.monotonic(), [])
    >>> plan.mode
    'incremental'
    """
    fingerprint = spec_fingerprint(spec)
    spec_fields = spec_field_hashes(spec)
    log = read_output_log(output)
    changed_by_others = log.changed_by_others
    if append_only and changed_by_others:
        warnings.append(f"{changed_by_others}; the output is append-only, so refreshes go on appending")
        changed_by_others = None
    plan = plan_refresh(
        previous=log.progress,
        fingerprint=fingerprint,
        kind=spec.kind,
        current=current,
        spec_fields=spec_fields,
        full_refresh=options.full_refresh,
        output_exists=log.table_id is not None,
        changed_by_others=changed_by_others,
    )
    refresh = RefreshContext(
        spec.kind,
        output,
        log,
        fingerprint,
        consumed if consumed is not None else {side: state.consumed() for side, state in current.items()},
        started,
        warnings,
        options.ownership,
        options.write_path,
        options.origin,
        spec_fields,
    )
    return refresh, plan


def refuse_replacing_append_only(kind: str, output: DeltaHandle, reason: str, consequence: str) -> None:
    """Refuse, before anything is written, a full rebuild that would replace an append-only output.

    ``consequence`` says what replacing would change for the rows earlier refreshes appended.
    """
    raise FullRebuildRefusedError(
        f"{kind} output {output.location} is append-only, and this refresh would have to replace it "
        f"({reason}); nothing was written. {consequence} To do it, either run once with a full refresh "
        f"({run_option('full_refresh')}), or set allow_full_replace: true in the spec"
    )


@dataclass(frozen=True)
class Written:
    """What one path of a kind's refresh wrote: its commit and the result's ``rows``. ``reason`` replaces
    the plan's when the path learned more on the way (a multiway refresh that had to recompute)."""

    commit: Commit
    rows: dict[str, Any]
    reason: str | None = None


@dataclass(frozen=True)
class Recomputed:
    """A keyed kind's output recomputed from its pinned inputs (:meth:`KindRefresh.recompute`), for the
    recompute strategy: the rows (not yet computed), their key and value columns, the result's ``rows``
    once the net changes against the output are committed, and the inputs' key checks taken by the action
    that computes the net changes (:func:`..delta.changes.verify_observed`)."""

    rows: DataFrame
    key: list[str]
    value_columns: list[str]
    result_rows: Callable[[Commit], dict[str, Any]]
    checks: tuple[ObservedKeys, ...] = ()
    #: The key may hold nulls (a declared ``pkey``): compared null-safe.
    null_safe: bool = False


class KindRefresh(ABC):
    """One kind's refresh of one output: the join's own algorithm, which :func:`refresh_once` runs.

    A kind subclasses it with three steps: :meth:`prepare` reads the pinned inputs (the join's shape,
    its warnings) and says what the refresh consumes; :meth:`incremental` writes what changed, or raises
    :class:`RebuildRequired` (with the reason) to have the skeleton rebuild; :meth:`full` rebuilds. The
    skeleton does the rest: pinning, planning, the noop, the fallback, refusing to replace an append-only
    output, phases and the result dict.

    >>> class Copy(KindRefresh):
    ...     def prepare(self, states): ...
    ...     def incremental(self, refresh, plan): ...
    ...     def full(self, refresh, plan): ...
    >>> refresh_once(Copy(spec, spark), options)["mode"]
    'full'
    """

    #: An append-only output (a stream join's) is never re-read, and never replaced without opt-in.
    append_only: ClassVar[bool] = False
    #: What replacing an append-only output would change for the rows earlier refreshes appended.
    replace_consequence: ClassVar[str] = ""
    #: The Spark jobs of a small incremental refresh and of a recompute (what the strategy estimate
    #: charges each plan per job; counted in ``tests/engine/test_action_counts.py``). A kind with a
    #: :meth:`KindRefresh.recompute` sets both.
    incremental_jobs: ClassVar[int] = 0
    recompute_jobs: ClassVar[int] = 0

    def __init__(self, spec: Any, spark: SparkSession, identity: Any = None) -> None:
        #: What to compute; ``identity`` is the spec the output's progress is recorded under (default:
        #: ``spec``), when one kind runs as another (a table-mode windowed join as a foreign-key join).
        self.spec = spec
        self.identity = identity if identity is not None else spec
        self.spark = spark
        self.output = DeltaHandle(spark, spec.output, "output")
        self.handles = {name: DeltaHandle(spark, ref, name) for name, ref in self.inputs().items()}
        self.warnings: list[str] = []

    @classmethod
    def serves(cls, spec: Any) -> bool:
        """Whether this class refreshes ``spec``: a kind with several classes (a windowed join's modes)
        picks the first that does (:meth:`..kinds.JoinKind.refresh_for`)."""
        return True

    def inputs(self) -> dict[str, Any]:
        """The input tables by name (default: the spec's own, in result order)."""
        return dict(self.spec.inputs())

    def before_pin(self) -> None:
        """Checks that must read the inputs before their versions are pinned, so that the pinned versions
        are at least as new as what was checked (a stream join's global-table bootstrap latch)."""
        return None

    @abstractmethod
    def prepare(self, states: dict[str, TableState]) -> dict[str, InputState]:
        """Read the inputs at their pinned ``states``; return those whose changes the refresh consumes."""

    def consumed(self, current: dict[str, InputState]) -> dict[str, InputProgress] | None:
        """What the commit records per input (None: each of ``current`` at its pinned version)."""
        return None

    def noop_rows(self) -> dict[str, Any]:
        """The result's ``rows`` when nothing changed."""
        return {"inserted": 0, "updated": 0, "deleted": 0}

    @abstractmethod
    def incremental(self, refresh: RefreshContext, plan: RefreshPlan) -> Written:
        """Write what changed since the progress; raise :class:`RebuildRequired` to rebuild instead."""

    @abstractmethod
    def full(self, refresh: RefreshContext, plan: RefreshPlan) -> Written:
        """Rebuild the output from the pinned inputs."""

    def recompute(self) -> Recomputed | None:
        """The join recomputed from the pinned inputs, for the recompute strategy, after checking the
        inputs as a full rebuild does (None: this kind or this spec cannot; the incremental plan runs).
        Only keyed kinds, whose output is the join's rows by key, override it."""
        return None

    def preferred_strategy(self) -> PlanChoice | None:
        """The plan this refresh takes under ``refresh_strategy: auto`` whatever the cost estimate says,
        why, and its ``basis`` (``kind``: the kind's own reason; a join state prefers its own,
        :meth:`.store.JoinStateStore.preferred_plan`); None: the estimate decides."""
        return None

    def state_inputs(self) -> StateInputs | None:
        """What this output's join state holds, when its spec keeps one (``warm_state: true``), read
        after :meth:`prepare`: the skeleton opens the store (:class:`.store.JoinStateStore`), the kind's
        incremental path asks it (``refresh.store.lookup``) and the commit advances it. None: no state."""
        return None

    def allows_replace(self, options: RunOptions) -> bool:
        """Whether a full rebuild may replace an existing append-only output."""
        return options.full_refresh or bool(getattr(self.spec, "allow_full_replace", False))

    def result_fields(
        self, refresh: RefreshContext, plan: RefreshPlan, output_version: int
    ) -> dict[str, Any]:
        """The kind's own top-level fields of the result dict (``docs/concepts/result.md``)."""
        return {}

    def result_inputs(self, refresh: RefreshContext, plan: RefreshPlan) -> dict[str, dict[str, Any]] | None:
        """The result's ``inputs`` (None: each consumed input's path and version range)."""
        return None

    def result(
        self, refresh: RefreshContext, plan: RefreshPlan, commit: Commit | None, rows: dict[str, Any]
    ) -> RefreshResult:
        """The result dict; ``commit`` is None for a noop. A keyed output's reports its write path."""
        version = commit.version if commit is not None else refresh.previous_output_version
        fields = self.result_fields(refresh, plan, version)
        if refresh.store is not None:
            fields["warm_state"] = refresh.store.result()
        if not self.append_only:
            fields["write_path"] = commit.write_path if commit is not None else None
            fields["compacted"] = commit.compacted if commit is not None else False
        return refresh.result(plan, version, rows, inputs=self.result_inputs(refresh, plan), **fields)


def pin_inputs(
    handles: dict[str, DeltaHandle], before_pin: Callable[[], None] | None = None
) -> dict[str, TableState]:
    """Each input's state, pinned for the whole refresh after checking every input exists (then calling
    ``before_pin``); a table named twice (a self-join's two sides) is pinned once, so both read one version.

    >>> pin_inputs({"left": orders, "right": customers})["left"].version
    7
    """
    for handle in handles.values():
        handle.require()
    if before_pin is not None:
        before_pin()
    pinned: dict[str, TableState] = {}
    for name, handle in handles.items():
        twin = next((n for n in pinned if handles[n].ref.identity == handle.ref.identity), None)
        pinned[name] = pinned[twin] if twin is not None else handle.state(with_size=True)
    return pinned


def refresh_once(kind: KindRefresh, options: RunOptions) -> RefreshResult:
    """Refresh one output once with ``kind``'s algorithm: the skeleton every kind shares.

    Pin the inputs, let the kind read them, plan from the output's log; a noop returns at once; an
    incremental refresh that raises :class:`RebuildRequired` becomes a full rebuild with its reason; an
    append-only output is not replaced unless the spec or the run allows it. The result's ``phases`` say
    when (seconds after the start) the refresh reached each phase.

    >>> refresh_once(ForeignKeyJoinRefresh(spec, spark), options)["phases"]
    {'pinned': 0.31, 'changes_read': 1.2, 'merge_started': 2.9, 'committing': 3.8, 'committed': 4.0}
    """
    started = time.monotonic()
    with phase_timeline() as reached:
        result = _refresh(kind, options, started)
    result["phases"] = {name: round(at - started, 3) for name, at in reached.items()}
    return result


def _refresh(kind: KindRefresh, options: RunOptions, started: float) -> RefreshResult:
    requested = getattr(kind.identity, "refresh_strategy", "auto")
    if requested == "recompute" and not kind.recompute_jobs:
        raise SpecError(
            f"refresh_strategy: recompute is not available for this {kind.identity.kind} output "
            f"({kind.output.location}): it is append-only, and a refresh only appends the new records' "
            "results. Leave refresh_strategy out (or set it to incremental); nothing was written"
        )
    states = pin_inputs(kind.handles, kind.before_pin)
    phase("pinned")
    input_bytes = _table_bytes(kind, states, None)
    with warm_file_reads(kind.spark, enabled=is_small(kind.spark, input_bytes)):
        return _refresh_pinned(kind, options, started, states)


def _refresh_pinned(
    kind: KindRefresh, options: RunOptions, started: float, states: dict[str, TableState]
) -> RefreshResult:
    current = kind.prepare(states)
    refresh, plan = begin_refresh(
        kind.identity,
        kind.output,
        current,
        options,
        started,
        kind.warnings,
        kind.consumed(current),
        append_only=kind.append_only,
    )
    inputs = kind.state_inputs()
    if inputs is not None:
        refresh = replace(refresh, store=JoinStateStore(kind.spark, kind.output, inputs))
    if plan.mode == "noop":
        phase("committed")
        return kind.result(refresh, plan, None, kind.noop_rows())
    try:
        return _refresh_planned(kind, options, refresh, plan, current, states)
    finally:
        if refresh.store is not None:
            refresh.store.release()


def _refresh_planned(
    kind: KindRefresh,
    options: RunOptions,
    refresh: RefreshContext,
    plan: RefreshPlan,
    current: dict[str, InputState],
    states: dict[str, TableState],
) -> RefreshResult:
    store = refresh.store
    serves, served_bytes = (
        store.serving(refresh, plan) if store is not None and plan.mode == "incremental" else (False, None)
    )
    read_bytes = served_bytes if served_bytes is not None else _table_bytes(kind, states, refresh)
    strategy, learned = (
        _strategy(kind, refresh, plan, states, state_serves=serves)
        if plan.mode == "incremental"
        else (None, None)
    )
    whole_tables = plan.mode == "full" or (strategy is not None and strategy["chosen"] == "recompute")
    with small_refresh(kind.spark, read_bytes, whole_tables=whole_tables) as settings:
        if settings:
            log.info(
                "output %s: a small refresh, run without adaptive execution on %s shuffle partitions (%s)",
                kind.output.location,
                settings["spark.sql.shuffle.partitions"],
                SMALL_REFRESH_BYTES_CONF,
            )
        return _write(kind, options, refresh, plan, current, states, strategy, learned)


def _table_bytes(
    kind: KindRefresh, states: dict[str, TableState], refresh: RefreshContext | None
) -> int | None:
    """The bytes of the data files of the tables the refresh may read, each table once (None: unknown):
    its pinned inputs and, unless it only appends to it or ``refresh`` is None, its output. A kind's own
    state tables (a windowed join's pending rows) are bounded by its inputs and not counted."""
    sizes = {kind.handles[name].ref.identity: state.size_bytes for name, state in states.items()}
    if refresh is not None and not kind.append_only and refresh.log.table_id is not None:
        sizes[kind.output.ref.identity] = refresh.log.size_bytes
    if None in sizes.values():
        return None
    return sum(size for size in sizes.values() if size is not None)


def _write(
    kind: KindRefresh,
    options: RunOptions,
    refresh: RefreshContext,
    plan: RefreshPlan,
    current: dict[str, InputState],
    states: dict[str, TableState],
    strategy: dict[str, Any] | None,
    learned: LearnedEstimate | None,
) -> RefreshResult:
    """Run the kind's incremental path (or, when ``strategy`` says so, its recompute; either falls back
    to a full rebuild) or its full rebuild."""
    if plan.mode == "incremental":
        plan_started = time.monotonic()
        try:
            written = None
            if strategy is not None and strategy["chosen"] == "recompute":
                written = _recompute(kind, refresh, plan, strategy)
            if written is None:
                if strategy is not None and strategy["chosen"] == "recompute":
                    cluster = str(refresh.strategy_record["cluster"]) if refresh.strategy_record else ""
                    _record_plan(refresh, "incremental", learned, time.monotonic(), "fallback", cluster)
                written = kind.incremental(refresh, plan)
        except RebuildRequired as unavailable:
            plan = RefreshPlan("full", str(unavailable), dict.fromkeys(current))
        else:
            phase("committed")
            _after_commit(refresh, plan)
            if written.reason is not None:
                plan = RefreshPlan(plan.mode, written.reason, plan.from_versions)
            result = kind.result(refresh, plan, written.commit, written.rows)
            if strategy is not None:
                _checked(kind, refresh, strategy, learned, time.monotonic() - plan_started)
                result["strategy"] = strategy
            return result
    if kind.append_only and kind.output.exists() and not kind.allows_replace(options):
        refuse_replacing_append_only(kind.identity.kind, kind.output, plan.reason, kind.replace_consequence)
    if kind.recompute_jobs:
        features = _features(kind, refresh, plan, states, feeds=False)
        refresh.strategy_record = strategy_record(
            FULL, time.monotonic() - refresh.started, features, cluster_name(kind.spark), basis="full"
        )
    written = kind.full(refresh, plan)
    phase("committed")
    _after_commit(refresh, plan)
    return kind.result(refresh, plan, written.commit, written.rows)


def _after_commit(refresh: RefreshContext, plan: RefreshPlan) -> None:
    """Once the refresh committed (any path, before the result is built): the join state builds itself
    when the refresh did not advance it, and settles in a process about to end."""
    if refresh.store is not None:
        refresh.store.after_commit(plan)


def _strategy(
    kind: KindRefresh,
    refresh: RefreshContext,
    plan: RefreshPlan,
    states: dict[str, TableState],
    *,
    state_serves: bool = False,
) -> tuple[dict[str, Any] | None, LearnedEstimate | None]:
    """How a keyed kind's incremental refresh computes its net changes (the result's ``strategy``), and
    the estimate it weighed: what the spec's ``refresh_strategy`` asks, or for ``auto`` the plan
    :func:`..core.cost_history.choose_plan` takes from the estimates learned from the output's log
    (:func:`..core.cost_history.learned_estimate`). Both plans are estimated whatever the spec asks, so
    that the result and the log can compare the plan that ran with the other. None for a kind without
    a recompute plan. The plan is recorded in the refresh's commit (``refresh.strategy_record``). When
    the output's join state holds this refresh's versions (``state_serves``: in the JVM or in a durable
    copy it loaded), ``auto`` takes the incremental plan it serves; when it does not, the estimates
    choose between scanning and recomputing as they would without a state."""
    if not kind.recompute_jobs:
        return None, None
    requested = getattr(kind.identity, "refresh_strategy", "auto")
    features = _features(kind, refresh, plan, states, feeds=True)
    cluster = cluster_name(kind.spark)
    learned = None
    unknown = None
    if features is None:
        unknown = "a change feed's or a table's size is unknown"
    else:
        learned = learned_estimate(features, cost_model(kind.spark), list(refresh.log.costs), cluster)
    preferred = None
    if requested == "auto":
        preferred = (
            refresh.store.preferred_plan() if state_serves and refresh.store else kind.preferred_strategy()
        )
    if preferred is not None:
        choice = preferred
    else:
        choice = choose_plan(
            requested, learned, unknown=unknown, change_ratio_limit=recompute_change_ratio(kind.spark)
        )
    _record_plan(refresh, choice.chosen, learned, time.monotonic(), choice.basis, cluster)
    strategy: dict[str, Any] = {
        "requested": requested,
        "chosen": choice.chosen,
        "reason": choice.reason,
        "basis": choice.basis,
        "estimate": learned.as_dict() if learned is not None else None,
    }
    return strategy, learned


def _record_plan(
    refresh: RefreshContext,
    chosen: str,
    learned: LearnedEstimate | None,
    at: float,
    basis: str,
    cluster: str,
) -> None:
    """Have the refresh's commit record the plan that runs from ``at`` (a ``time.monotonic()``), what
    chose it, both estimates and what it reads, for the next refresh's estimate
    (:func:`..core.cost_history.observations`) and for ``fkjoin status`` and the Joins view."""
    refresh.strategy_record = strategy_record(
        chosen,
        at - refresh.started,
        learned.features if learned is not None else None,
        cluster,
        estimate=learned.estimate if learned is not None else None,
        basis=basis,
    )


def _checked(
    kind: KindRefresh,
    refresh: RefreshContext,
    strategy: dict[str, Any],
    learned: LearnedEstimate | None,
    actual_s: float,
) -> None:
    """Add the plan's actual seconds to ``strategy``, and a warning (logged with the result) when the plan
    that ran took more than :data:`..core.cost_history.WARN_RATIO` times the other plan's estimate."""
    ran = strategy["chosen"] if "fallback" not in strategy else "incremental"
    strategy["actual_s"] = round(actual_s, 3)
    if learned is None:
        return
    faster = slower_than_expected(ran, actual_s, learned.estimate)
    if faster is None:
        return
    other_s = learned.estimate.recompute_s if faster == "recompute" else learned.estimate.incremental_s
    if strategy["basis"] == "spec":
        setting = f"refresh_strategy: {strategy['requested']} in the spec (try {faster}, or leave it out)"
    else:
        setting = (
            f"refresh_strategy (set {faster} to force it), spark.fkjoin.recomputeChangeRatio and "
            "spark.fkjoin.cost.* (the estimate's prior)"
        )
    refresh.warnings.append(
        f"output {kind.output.location}: the {ran} plan took {actual_s:.1f} s, more than "
        f"{WARN_RATIO:g}x the {faster} plan's estimate ({other_s:.1f} s); if this repeats, look at {setting}"
    )


def _features(
    kind: KindRefresh,
    refresh: RefreshContext,
    plan: RefreshPlan,
    states: dict[str, TableState],
    *,
    feeds: bool,
) -> PlanFeatures | None:
    """What the refresh reads, as the cost model weighs it (None: a size is unknown): the change feeds'
    bytes from their commits (none for a full rebuild, ``feeds=False``), the tables' bytes pinned, the
    output's from its log."""
    feed_total = 0
    if feeds:
        sides = [side for side, after in plan.from_versions.items() if after is not None]
        sizes = feed_bytes(
            [(kind.handles[side], plan.from_versions[side] or 0, states[side].version) for side in sides]
        )
        if any(size is None for size in sizes):
            return None
        feed_total = sum(size or 0 for size in sizes)
    input_bytes = _table_bytes(kind, states, None)
    output_bytes = refresh.log.size_bytes if refresh.log.table_id is not None else 0
    if input_bytes is None or output_bytes is None:
        return None
    return PlanFeatures(
        feed_bytes=feed_total,
        input_bytes=input_bytes,
        output_bytes=output_bytes,
        incremental_jobs=kind.incremental_jobs,
        recompute_jobs=kind.recompute_jobs,
    )


def _recompute(
    kind: KindRefresh, refresh: RefreshContext, plan: RefreshPlan, strategy: dict[str, Any]
) -> Written | None:
    """The recompute strategy: the join from the pinned inputs, compared key by key with the output's
    rows, and only the rows that differ committed (the net-change commit), so the output's change feed
    holds what an incremental refresh's would. None (the incremental plan runs instead, the reason added
    to ``strategy``) when the kind cannot recompute this spec or the output cannot take a net-change
    commit now."""
    if not refresh.direct_write_possible():
        strategy["fallback"] = "the output cannot take a net-change commit now: the incremental plan ran"
        return None
    recomputed = kind.recompute()
    if recomputed is None:
        strategy["fallback"] = (
            f"this {kind.identity.kind} spec has no recompute plan (its kind's page says which forms "
            "have one): the incremental plan ran"
        )
        return None
    assert refresh.log.latest_version is not None
    previous = kind.output.read_with_positions(refresh.log.latest_version)
    columns = [c for c in previous.columns if c not in ROW_POSITION_COLUMNS]
    if set(columns) != set(recomputed.rows.columns):
        raise RebuildRequired(
            f"the output {kind.output.location}'s columns {sorted(columns)} differ from the "
            f"join's columns {sorted(recomputed.rows.columns)}"
        )
    phase("changes_read")
    request = refresh.request("incremental", plan.reason)
    net = net_changes(
        previous,
        recomputed.rows,
        recomputed.key,
        recomputed.value_columns,
        keep_unchanged=False,
        null_safe=recomputed.null_safe,
        count_repeats=any(not c.grouped and c.repeated is None for c in recomputed.checks),
    )
    try:
        for check in recomputed.checks:
            if not check.grouped and check.repeated is None:
                check.repeated = net.repeats
        verify_observed(list(recomputed.checks))
        phase("merge_started")
        commit = refresh.commit_net_changes(
            net,
            recomputed.key,
            request,
            merge_fallback=False,
            positions=changed_positions(net, recomputed.key),
        )
    except MergeRequired as reason:
        strategy["fallback"] = (
            f"the recompute's net changes could not be committed ({reason}): the incremental plan ran"
        )
        return None
    finally:
        net.release()
    assert commit is not None
    return Written(commit, recomputed.result_rows(commit))

"""One refresh of one output: what every kind does once its inputs are pinned.

:func:`begin_refresh` reads the output's log and plans the refresh (full, incremental or noop);
:class:`RefreshContext` carries it to the commit: the progress the commit records, the write path, the
warnings, and the result dict.

>>> refresh, plan = begin_refresh(spec, output, {"left": left_state}, options, time.monotonic(), [])
>>> plan.mode, refresh.request("incremental", plan.reason).seq
('incremental', 4)
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from ..core.errors import FullRebuildRefusedError
from ..core.planning import InputState, RefreshPlan, plan_refresh, refresh_result
from ..core.progress import (
    InputProgress,
    OutputLog,
    Progress,
    new_progress_metadata,
    read_output_log,
)
from ..core.spec import spec_field_hashes, spec_fingerprint
from ..core.trace import phase
from ..delta.ownership import Ownership
from ..delta.tables import DeltaHandle
from .merge import Commit, CommitRequest
from .net_changes import MergeRequired, NetChanges, commit_net_changes, compact_output

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunOptions:
    """How ``run_spec`` asks a kind to refresh: ``full_refresh`` on request, and the output's checked
    ownership (:func:`.ownership.check_ownership`, run before anything was read)."""

    ownership: Ownership
    full_refresh: bool = False
    write_path: str = "auto"
    #: Who runs the refresh (recorded in its commit; see :func:`.progress.new_progress_metadata`).
    origin: dict[str, Any] | None = None


@dataclass
class RefreshContext:
    """One refresh of one output, from its pinned inputs to its result: what every kind shares.

    ``consumed`` is what the refresh's commit records per input; ``warnings`` collects what the
    result reports and logs (a list the caller may keep appending to until then).

    >>> refresh = RefreshContext("foreign_key_join", out, read_progress(out), "9f2c",
    ...                          {"left": state.consumed()}, time.monotonic(), [])
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

    @property
    def previous(self) -> Progress | None:
        """The last refresh's progress, if the output's log holds one."""
        return self.log.progress

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
        hold, MERGE was not asked for, the output has a known latest version, the owner need not be
        claimed first, and the session is classic Spark (the commit is built through py4j)."""
        return (
            all(conditions)
            and self.write_path != "merge"
            and self.log.latest_version is not None
            and not self.ownership.claim
            and getattr(self.output.spark, "_jvm", None) is not None
        )

    def commit_net_changes(
        self, changes: NetChanges, key: list[str], request: CommitRequest
    ) -> Commit | None:
        """Commit ``changes`` without MERGE (:func:`.net_changes.commit_net_changes`); None, with a
        warning, when that path cannot prove itself right and the kind must MERGE instead."""
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
            )
        except MergeRequired as reason:
            self.warnings.append(f"the refresh was written by MERGE: {reason}")
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
        )

    def result(
        self,
        plan: RefreshPlan,
        output_version: int | None,
        rows: dict[str, Any],
        *,
        inputs: dict[str, dict[str, Any]] | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
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
        f"({reason}); nothing was written. {consequence} To do it, run once with full_refresh "
        "(fkjoin run --full-refresh), or set allow_full_replace: true"
    )

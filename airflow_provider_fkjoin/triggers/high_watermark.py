"""HighWatermarkTrigger: wait, in the triggerer, until a table has consumed a source up to a version.

Imports of the engine are deferred to the functions that read, so parsing a DAG stays light. The split
follows the Databricks provider: the only I/O is :func:`observe` (and :func:`source_goal`), which read
Delta logs with ``deltalake`` (no JVM in the scheduler or the triggerer); every decision is a pure
function (:func:`decide`, :func:`classify_error`, :func:`check_source`) that the sensor shares.

A goal is a version *of one table*: the source's Delta table id travels with it, so a source dropped
and recreated at the same path (its versions start again at 0) never looks caught up by what the
target consumed of the old table.

    trigger = HighWatermarkTrigger(
        target="/w/products_global", source="/w/products_cdc", wanted_version=12,
        wanted_table_id="5f0c...", poll_interval=30, deadline=time.time() + 3600,
    )
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any, Literal, NamedTuple

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider_fkjoin.credentials import resolve_storage_options

Status = Literal["done", "wait", "timeout"]


class Decision(NamedTuple):
    """What to do after one observation."""

    status: Status
    message: str


class Goal(NamedTuple):
    """The version to reach, and the Delta table id of the source it is a version of (None: the
    target's own version, or a goal given without a source)."""

    version: int
    table_id: str | None = None


class Observation(NamedTuple):
    """How far the target has got: the source version it consumed (or its own version without a
    source), the source table id it consumed it from, and the source's table id now."""

    reached: int | None
    reached_table_id: str | None = None
    source_table_id: str | None = None


class SourceRecreatedError(ValueError):
    """The source was dropped and recreated after the goal was taken: permanent, the goal is gone."""


# -- pure decisions ------------------------------------------------------------------------------
def decide(
    reached: int | None,
    wanted: int,
    *,
    now: float,
    deadline: float | None,
    reached_table_id: str | None = None,
    wanted_table_id: str | None = None,
) -> Decision:
    """Done when ``reached >= wanted`` of the same table; a timeout once ``now`` is past ``deadline``;
    else wait. A version consumed from another table than the goal's (the source before it was
    recreated) counts as nothing consumed yet.

    >>> decide(5, 5, now=0.0, deadline=None).status
    'done'
    >>> decide(9, 5, now=0.0, deadline=None, reached_table_id="old", wanted_table_id="new").status
    'wait'
    >>> decide(None, 0, now=10.0, deadline=5.0).status
    'timeout'
    """
    other_table = (
        reached_table_id is not None and wanted_table_id is not None and reached_table_id != wanted_table_id
    )
    if other_table:
        shown = f"version {reached} of an earlier table at the source's path"
        reached = None
    else:
        shown = "nothing yet" if reached is None else f"version {reached}"
    if reached is not None and reached >= wanted:
        return Decision("done", f"reached {shown} >= wanted {wanted}")
    if deadline is not None and now >= deadline:
        return Decision("timeout", f"deadline passed at {shown}, wanted {wanted}")
    return Decision("wait", f"at {shown}, waiting for {wanted}")


def check_source(source: str, goal: Goal, current_table_id: str | None) -> None:
    """Raise :class:`SourceRecreatedError` when the source is no longer the table the goal was taken of.

    >>> check_source("/w/s", Goal(7, "a"), "b")
    Traceback (most recent call last):
    airflow_provider_fkjoin.triggers.high_watermark.SourceRecreatedError: source /w/s was recreated
    (table id a -> b) after the goal version 7 was taken; ...
    """
    if goal.table_id is not None and current_table_id is not None and current_table_id != goal.table_id:
        raise SourceRecreatedError(
            f"source {source} was recreated (table id {goal.table_id} -> {current_table_id}) after the goal "
            f"version {goal.version} was taken; that version no longer exists: clear the task to wait for "
            "the new table"
        )


def classify_error(error: BaseException) -> Literal["permanent", "transient"]:
    """A missing table or a bad argument is permanent (fail fast); anything else may pass (retry)."""
    from airflow_provider_fkjoin.engine import SpecError, TableMissingError

    if isinstance(error, TableMissingError | SpecError | ValueError | TypeError):
        return "permanent"
    return "transient"


# -- I/O ----------------------------------------------------------------------------------------
def observe(target: str, source: str | None, storage_options: Mapping[str, str] | None = None) -> Observation:
    """How far ``target`` has got: the version of ``source`` it consumed, or its own version without one.

    A join's output or a global table that does not exist yet has consumed nothing (keep waiting, its
    first refresh may be running). Raises ``TableMissingError`` when the source, or a target watched
    without a source, does not exist.
    """
    from airflow_provider_fkjoin.engine import (
        TableMissingError,
        consumed_input,
        high_watermark,
        table_snapshot,
    )

    options = dict(storage_options) if storage_options else None
    if not source:
        return Observation(high_watermark(target, options))
    current = table_snapshot(source, options).table_id  # a mistyped source fails fast: no endless wait
    try:
        consumed = consumed_input(target, source, options)
    except TableMissingError:
        return Observation(None, None, current)
    if consumed is None:
        return Observation(None, None, current)
    return Observation(int(consumed["version"]), consumed.get("table_id"), current)


def source_goal(source: str, storage_options: Mapping[str, str] | None = None) -> Goal:
    """The source's high watermark now, with its table id: the goal of a sensor starting now."""
    from airflow_provider_fkjoin.engine import table_snapshot

    snapshot = table_snapshot(source, dict(storage_options) if storage_options else None)
    return Goal(snapshot.version, snapshot.table_id)


# -- trigger ------------------------------------------------------------------------------------
class HighWatermarkTrigger(BaseTrigger):
    """Fire when ``target`` has consumed ``source`` up to ``wanted_version`` (or reached it, no source).

    :param target: the table to watch: a join's output or a bootstrapped global table (path or URL).
    :param wanted_version: the version to reach (the source's high watermark when the sensor started).
    :param source: the input whose consumed version counts; None to compare the target's own version.
    :param wanted_table_id: the source's Delta table id when the goal was taken (None: not checked).
    :param storage_options: ``deltalake`` storage options (object stores); prefer ``storage_conn_id``,
        which keeps credentials out of the trigger's serialised arguments.
    :param storage_conn_id: an AWS, Google Cloud or Azure connection whose credentials are read in the
        triggerer (:mod:`airflow_provider_fkjoin.credentials`).
    :param poll_interval: seconds between observations.
    :param deadline: absolute epoch seconds after which the trigger reports a timeout (None: never).
    :param max_transient_errors: consecutive transient read errors tolerated before reporting them.

    Events: ``{"status": "success" | "timeout" | "error" | "transient_error", "message", "target",
    "source", "wanted_version", "reached_version"}``. ``error`` is permanent (a missing table, a
    recreated source); ``transient_error`` (reads kept failing) is worth a task retry.
    """

    def __init__(
        self,
        *,
        target: str,
        wanted_version: int,
        source: str | None = None,
        wanted_table_id: str | None = None,
        storage_options: Mapping[str, str] | None = None,
        storage_conn_id: str | None = None,
        poll_interval: float = 30.0,
        deadline: float | None = None,
        max_transient_errors: int = 5,
    ) -> None:
        super().__init__()
        self.target = target
        self.wanted_version = int(wanted_version)
        self.source = source
        self.wanted_table_id = wanted_table_id
        self.storage_options = dict(storage_options) if storage_options else None
        self.storage_conn_id = storage_conn_id
        self.poll_interval = float(poll_interval)
        self.deadline = None if deadline is None else float(deadline)
        self.max_transient_errors = int(max_transient_errors)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "target": self.target,
                "wanted_version": self.wanted_version,
                "source": self.source,
                "wanted_table_id": self.wanted_table_id,
                "storage_options": self.storage_options,
                "storage_conn_id": self.storage_conn_id,
                "poll_interval": self.poll_interval,
                "deadline": self.deadline,
                "max_transient_errors": self.max_transient_errors,
            },
        )

    def observe(self) -> Observation:
        """The one I/O step (blocking; run in a thread by :meth:`run`): read, then check the source."""
        options = resolve_storage_options(self.storage_options, self.storage_conn_id)
        seen = observe(self.target, self.source, options)
        if self.source:
            check_source(self.source, Goal(self.wanted_version, self.wanted_table_id), seen.source_table_id)
        return seen

    def _event(self, status: str, message: str, reached: int | None) -> TriggerEvent:
        return TriggerEvent(
            {
                "status": status,
                "message": message,
                "target": self.target,
                "source": self.source,
                "wanted_version": self.wanted_version,
                "reached_version": reached,
            }
        )

    def _decide(self, seen: Observation, now: float) -> Decision:
        return decide(
            seen.reached,
            self.wanted_version,
            now=now,
            deadline=self.deadline,
            reached_table_id=seen.reached_table_id,
            wanted_table_id=self.wanted_table_id,
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        transient = 0
        seen = Observation(None)
        while True:
            try:
                seen = await asyncio.to_thread(self.observe)
                transient = 0
            except Exception as error:
                if classify_error(error) == "permanent":
                    yield self._event("error", f"{type(error).__name__}: {error}", seen.reached)
                    return
                transient += 1
                self.log.warning("transient error %d/%d: %s", transient, self.max_transient_errors, error)
                if transient > self.max_transient_errors:
                    message = f"gave up after {transient} errors in a row: {type(error).__name__}: {error}"
                    yield self._event("transient_error", message, seen.reached)
                    return
            else:
                decision = self._decide(seen, time.time())
                self.log.info("%s: %s", self.target, decision.message)
                if decision.status == "done":
                    yield self._event("success", decision.message, seen.reached)
                    return
            now = time.time()
            if self.deadline is not None and now >= self.deadline:
                yield self._event("timeout", self._decide(seen, now).message, seen.reached)
                return
            wait = self.poll_interval
            if self.deadline is not None:
                wait = max(0.0, min(wait, self.deadline - now))
            await asyncio.sleep(wait)

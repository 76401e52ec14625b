"""HighWatermarkTrigger: wait, in the triggerer, until a table has consumed a source up to a version.

Imports of the engine are deferred to the functions that read, so parsing a DAG stays light. The split
follows the Databricks provider: the only I/O is :func:`observe` (and
:func:`source_version_at`), which read Delta logs with ``deltalake`` (no JVM in the scheduler or the
triggerer); every decision is a pure function (:func:`decide`, :func:`classify_error`) that the sensor
shares.

    trigger = HighWatermarkTrigger(
        target="/w/products_global", source="/w/products_cdc", wanted_version=12,
        poll_interval=30, deadline=time.time() + 3600,
    )
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping
from datetime import datetime
from typing import Any, Literal, NamedTuple

from airflow.triggers.base import BaseTrigger, TriggerEvent

Status = Literal["done", "wait", "timeout"]


class Decision(NamedTuple):
    """What to do after one observation."""

    status: Status
    message: str


# -- pure decisions ------------------------------------------------------------------------------
def decide(reached: int | None, wanted: int, *, now: float, deadline: float | None) -> Decision:
    """Done when ``reached >= wanted``; a timeout once ``now`` is past ``deadline``; else wait.

    >>> decide(5, 5, now=0.0, deadline=None).status
    'done'
    >>> decide(None, 0, now=10.0, deadline=5.0).status
    'timeout'
    """
    shown = "nothing yet" if reached is None else f"version {reached}"
    if reached is not None and reached >= wanted:
        return Decision("done", f"reached {shown} >= wanted {wanted}")
    if deadline is not None and now >= deadline:
        return Decision("timeout", f"deadline passed at {shown}, wanted {wanted}")
    return Decision("wait", f"at {shown}, waiting for {wanted}")


def classify_error(error: BaseException) -> Literal["permanent", "transient"]:
    """A missing table or a bad argument is permanent (fail fast); anything else may pass (retry)."""
    from airflow_provider_fkjoin.engine.errors import SpecError
    from airflow_provider_fkjoin.engine.watermarks import TableMissingError

    if isinstance(error, TableMissingError | SpecError | ValueError | TypeError):
        return "permanent"
    return "transient"


def pick_version_at(history: list[Mapping[str, Any]], at_ms: int) -> int | None:
    """The newest version committed at or before ``at_ms`` (epoch milliseconds), from a Delta history.

    >>> pick_version_at([{"version": 2, "timestamp": 300}, {"version": 1, "timestamp": 100}], 200)
    1
    """
    eligible = [
        int(entry["version"])
        for entry in history
        if entry.get("timestamp") is not None and int(entry["timestamp"]) <= at_ms
    ]
    return max(eligible) if eligible else None


# -- I/O ----------------------------------------------------------------------------------------
def observe(target: str, source: str | None, storage_options: Mapping[str, str] | None = None) -> int | None:
    """How far ``target`` has got: the version of ``source`` it consumed, or its own version without one.

    A join's output or a global table that does not exist yet has consumed nothing (None: keep
    waiting, its first refresh may be running). Raises ``TableMissingError`` when the source, or a
    target watched without a source, does not exist.
    """
    from airflow_provider_fkjoin.engine.watermarks import TableMissingError, consumed_version, high_watermark

    options = dict(storage_options) if storage_options else None
    if source:
        high_watermark(source, options)  # a mistyped source is permanent: fail fast, do not wait forever
        try:
            return consumed_version(target, source, options)
        except TableMissingError:
            return None
    return high_watermark(target, options)


def source_version_at(
    source: str, when: datetime | None, storage_options: Mapping[str, str] | None = None
) -> int:
    """The source's high watermark as it was at ``when`` (now when None), from its Delta history."""
    from airflow_provider_fkjoin.engine.watermarks import high_watermark

    options = dict(storage_options) if storage_options else None
    current = high_watermark(source, options)
    if when is None:
        return current
    import deltalake

    location = source.removeprefix("file://") if source.startswith("file://") else source
    history = deltalake.DeltaTable(location, storage_options=options).history(200)
    picked = pick_version_at(history, int(when.timestamp() * 1000))
    return current if picked is None else min(picked, current)


# -- trigger ------------------------------------------------------------------------------------
class HighWatermarkTrigger(BaseTrigger):
    """Fire when ``target`` has consumed ``source`` up to ``wanted_version`` (or reached it, no source).

    :param target: the table to watch: a join's output or a bootstrapped global table (path or URL).
    :param wanted_version: the version to reach (the source's high watermark when the sensor started).
    :param source: the input whose consumed version counts; None to compare the target's own version.
    :param storage_options: ``deltalake`` storage options (object stores).
    :param poll_interval: seconds between observations.
    :param deadline: absolute epoch seconds after which the trigger reports a timeout (None: never).
    :param max_transient_errors: consecutive transient read errors tolerated before reporting an error.

    Events: ``{"status": "success" | "timeout" | "error", "message", "target", "source",
    "wanted_version", "reached_version"}``.
    """

    def __init__(
        self,
        *,
        target: str,
        wanted_version: int,
        source: str | None = None,
        storage_options: Mapping[str, str] | None = None,
        poll_interval: float = 30.0,
        deadline: float | None = None,
        max_transient_errors: int = 5,
    ) -> None:
        super().__init__()
        self.target = target
        self.wanted_version = int(wanted_version)
        self.source = source
        self.storage_options = dict(storage_options) if storage_options else None
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
                "storage_options": self.storage_options,
                "poll_interval": self.poll_interval,
                "deadline": self.deadline,
                "max_transient_errors": self.max_transient_errors,
            },
        )

    def observe(self) -> int | None:
        """The one I/O step (blocking; run in a thread by :meth:`run`)."""
        return observe(self.target, self.source, self.storage_options)

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

    async def run(self) -> AsyncIterator[TriggerEvent]:
        transient = 0
        reached: int | None = None
        while True:
            try:
                reached = await asyncio.to_thread(self.observe)
                transient = 0
            except Exception as error:
                if classify_error(error) == "permanent":
                    yield self._event("error", f"{type(error).__name__}: {error}", reached)
                    return
                transient += 1
                self.log.warning("transient error %d/%d: %s", transient, self.max_transient_errors, error)
                if transient > self.max_transient_errors:
                    yield self._event("error", f"gave up after {transient} errors: {error}", reached)
                    return
            else:
                decision = decide(reached, self.wanted_version, now=time.time(), deadline=self.deadline)
                self.log.info("%s: %s", self.target, decision.message)
                if decision.status == "done":
                    yield self._event("success", decision.message, reached)
                    return
            now = time.time()
            if self.deadline is not None and now >= self.deadline:
                yield self._event(
                    "timeout",
                    decide(reached, self.wanted_version, now=now, deadline=self.deadline).message,
                    reached,
                )
                return
            wait = self.poll_interval
            if self.deadline is not None:
                wait = max(0.0, min(wait, self.deadline - now))
            await asyncio.sleep(wait)

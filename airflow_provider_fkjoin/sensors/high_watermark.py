"""HighWatermarkSensor: wait until a table has consumed a source up to the source's high watermark.

"Up to the high watermark" means the source's latest Delta version when the sensor started (or an
explicit ``version``, e.g. pulled from XCom), so downstream joins start on complete data. Versions are
read with ``deltalake`` (no JVM): poke, reschedule and deferrable modes all use the same pure decision
functions as :class:`~airflow_provider_fkjoin.triggers.high_watermark.HighWatermarkTrigger`.

The goal is taken once per try and kept in the task instance's state store, so it never drifts while a
sensor in reschedule mode comes back poke after poke, however busy the source is; and it is a version
of one table: a source dropped and recreated at its path is not "caught up" by what was consumed of the
table before.

Example::

    HighWatermarkSensor(
        task_id="products_caught_up",
        target="/w/products_global",     # the bootstrapped global table (or a join's output)
        source="/w/products_cdc",        # the input whose high watermark it must reach
        storage_conn_id="aws_lake",      # for object stores: credentials from a connection
        deferrable=True,
    )
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue, conf
from airflow.sdk.exceptions import (
    AirflowException,
    AirflowFailException,
    AirflowSensorTimeout,
    AirflowSkipException,
)

from airflow_provider_fkjoin.credentials import resolve_storage_options
from airflow_provider_fkjoin.links import check_location
from airflow_provider_fkjoin.triggers.high_watermark import (
    Goal,
    HighWatermarkTrigger,
    Observation,
    check_source,
    classify_error,
    decide,
    observe,
    source_goal,
)

if TYPE_CHECKING:
    from airflow.sdk import Context

#: The task state store key of the goal taken by a try: ``{"try_number", "version", "table_id"}``.
GOAL_KEY = "fkjoin_high_watermark_goal"


class HighWatermarkSensor(BaseSensorOperator):
    """Succeed when ``target`` has consumed ``source`` up to its high watermark (or up to ``version``).

    :param target: the table to watch: a join's output, a bootstrapped global table, or any Delta table.
    :param source: the input table; its high watermark when the sensor started is the goal unless
        ``version`` is given. Without ``source``, ``target``'s own version must reach ``version``.
    :param version: explicit version to reach (templated; may come from XCom).
    :param storage_conn_id: an AWS, Google Cloud or Azure connection for object stores (templated; read at
        run time, so no credential is in the DAG or in the trigger's arguments).
    :param storage_options: ``deltalake`` storage options; win over the connection's.
    :param deferrable: wait in the triggerer (default: ``[operators] default_deferrable``).
    :param max_transient_errors: consecutive read errors tolerated before failing (a retryable failure).

    A missing table, or a source recreated after the goal was taken, fails at once (no retry will bring
    the table back); other read errors are retried, then fail the try so Airflow's retries take over.
    The XCom return value is ``{"target", "source", "wanted_version", "reached_version"}``.
    """

    template_fields: Sequence[str] = ("target", "source", "version", "storage_conn_id")
    ui_color = "#fdf3e1"

    def __init__(
        self,
        *,
        target: str,
        source: str | None = None,
        version: int | str | None = None,
        storage_conn_id: str | None = None,
        storage_options: Mapping[str, str] | None = None,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        max_transient_errors: int = 5,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if source is None and version is None:
            raise ValueError(
                "HighWatermarkSensor needs a source (to capture its high watermark) or a version"
            )
        self.target = target
        self.source = source
        self.version = version
        self.storage_conn_id = storage_conn_id
        self.storage_options = dict(storage_options) if storage_options else None
        self.deferrable = deferrable
        self.max_transient_errors = max_transient_errors
        self._goal: Goal | None = None
        self._transient_errors = 0

    def _locations(self) -> tuple[str, str | None]:
        try:
            return check_location(self.target), (check_location(self.source) if self.source else None)
        except ValueError as error:
            raise AirflowFailException(str(error)) from error

    def _options(self) -> dict[str, str] | None:
        try:
            return resolve_storage_options(self.storage_options, self.storage_conn_id)
        except ValueError as error:
            raise AirflowFailException(str(error)) from error

    def _read(self, read: Any) -> Any:
        """Run one read; a permanent error fails the task without retries."""
        try:
            return read()
        except Exception as error:
            if classify_error(error) == "permanent":
                raise AirflowFailException(f"{type(error).__name__}: {error}") from error
            raise

    def goal(self, context: Context) -> Goal:
        """The version to reach: ``version``, else the source's high watermark when this try started,
        with the source's table id either way.

        Taken once per try and kept in the task state store: a sensor in reschedule mode (a new process
        per poke) reads it back instead of asking the source again, so a busy source cannot move it. A
        new try (a retry, or a cleared task) takes a new one.
        """
        if self._goal is not None:
            return self._goal
        _, source = self._locations()
        options = self._options()
        current = self._read(lambda: source_goal(source, options)) if source else None
        if self.version not in (None, ""):
            try:
                wanted = int(self.version)  # type: ignore[arg-type]
            except (TypeError, ValueError) as error:
                raise AirflowFailException(f"version {self.version!r} is not an integer") from error
            self._goal = Goal(wanted, current.table_id if current else None)
            return self._goal
        assert current is not None
        store = context.get("task_state_store")
        try_number = getattr(context.get("ti"), "try_number", None)
        stored = store.get(GOAL_KEY) if store is not None else None
        if isinstance(stored, dict) and stored.get("try_number") == try_number:
            self._goal = Goal(int(stored["version"]), stored.get("table_id"))
        else:
            self._goal = current
            if store is not None:
                store.set(
                    GOAL_KEY,
                    {"try_number": try_number, "version": current.version, "table_id": current.table_id},
                )
        return self._goal

    def execute(self, context: Context) -> Any:
        goal = self.goal(context)
        self.log.info(
            "waiting until %s has consumed %s up to version %s", self.target, self.source, goal.version
        )
        if not self.deferrable:
            return super().execute(context)
        # Deferrable: hand over to the triggerer at once, without a first poke here. A table that has
        # already caught up costs one trigger round trip; the worker slot is free from the start.
        timeout = (
            self.timeout if isinstance(self.timeout, int | float) else float(self.timeout.total_seconds())
        )
        target, source = self._locations()
        self.defer(
            trigger=HighWatermarkTrigger(
                target=target,
                source=source,
                wanted_version=goal.version,
                wanted_table_id=goal.table_id,
                storage_options=self.storage_options,
                storage_conn_id=self.storage_conn_id,
                poll_interval=self.poke_interval
                if isinstance(self.poke_interval, int | float)
                else self.poke_interval.total_seconds(),
                deadline=time.time() + timeout,
                max_transient_errors=self.max_transient_errors,
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=timeout),
        )

    def poke(self, context: Context) -> PokeReturnValue:
        goal = self.goal(context)
        target, source = self._locations()
        try:
            seen: Observation = self._read(lambda: observe(target, source, self._options()))
            if source:
                self._read(lambda: check_source(source, goal, seen.source_table_id))
        except AirflowFailException:
            raise
        except Exception as error:
            self._transient_errors += 1
            if self._transient_errors > self.max_transient_errors:
                raise
            self.log.warning("transient error %d: %s", self._transient_errors, error)
            return PokeReturnValue(False)
        self._transient_errors = 0
        decision = decide(
            seen.reached,
            goal.version,
            now=time.time(),
            deadline=None,
            reached_table_id=seen.reached_table_id,
            wanted_table_id=goal.table_id,
        )
        self.log.info("%s: %s", target, decision.message)
        return PokeReturnValue(
            decision.status == "done",
            xcom_value={
                "target": target,
                "source": source,
                "wanted_version": goal.version,
                "reached_version": seen.reached,
            },
        )

    def execute_complete(self, context: Context, event: Mapping[str, Any]) -> dict[str, Any]:
        """Resume after the trigger fired: return its observation, or fail/skip as it says.

        A permanent error (a missing table, a recreated source) fails without retries; reads that kept
        failing (``transient_error``) fail this try only, so Airflow's retries go on, as in poke mode.
        """
        status = event.get("status")
        message = str(event.get("message", ""))
        if status == "success":
            return {k: event.get(k) for k in ("target", "source", "wanted_version", "reached_version")}
        if status == "timeout":
            if self.soft_fail:
                raise AirflowSkipException(f"high watermark not reached: {message}")
            raise AirflowSensorTimeout(f"high watermark not reached: {message}")
        if status == "transient_error":
            raise AirflowException(f"high watermark sensor could not read the tables: {message}")
        raise AirflowFailException(f"high watermark sensor failed: {message}")

"""HighWatermarkSensor: wait until a table has consumed a source up to the source's high watermark.

"Up to the high watermark" means the source's latest Delta version when the sensor started (or an
explicit ``version``, e.g. pulled from XCom), so downstream joins start on complete data. Versions are
read with ``deltalake`` (no JVM): poke, reschedule and deferrable modes all use the same pure decision
functions as :class:`~airflow_provider_fkjoin.triggers.high_watermark.HighWatermarkTrigger`.

Example::

    HighWatermarkSensor(
        task_id="products_caught_up",
        target="/w/products_global",     # the bootstrapped global table (or a join's output)
        source="/w/products_cdc",        # the input whose high watermark it must reach
        deferrable=True,
    )
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue, conf
from airflow.sdk.exceptions import AirflowFailException, AirflowSensorTimeout, AirflowSkipException

from airflow_provider_fkjoin.links import check_location
from airflow_provider_fkjoin.triggers.high_watermark import (
    HighWatermarkTrigger,
    classify_error,
    decide,
    observe,
    source_version_at,
)

if TYPE_CHECKING:
    from airflow.sdk import Context


class HighWatermarkSensor(BaseSensorOperator):
    """Succeed when ``target`` has consumed ``source`` up to its high watermark (or up to ``version``).

    :param target: the table to watch: a join's output, a bootstrapped global table, or any Delta table.
    :param source: the input table; its high watermark when the sensor started is the goal unless
        ``version`` is given. Without ``source``, ``target``'s own version must reach ``version``.
    :param version: explicit version to reach (templated; may come from XCom).
    :param storage_options: ``deltalake`` storage options for object stores.
    :param deferrable: wait in the triggerer (default: ``[operators] default_deferrable``).
    :param max_transient_errors: consecutive read errors tolerated before failing.

    A missing table fails at once (no retry will make a mistyped path appear); other read errors
    are retried. The XCom return value is ``{"target", "source", "wanted_version", "reached_version"}``.
    """

    template_fields: Sequence[str] = ("target", "source", "version")
    ui_color = "#fdf3e1"

    def __init__(
        self,
        *,
        target: str,
        source: str | None = None,
        version: int | str | None = None,
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
        self.storage_options = dict(storage_options) if storage_options else None
        self.deferrable = deferrable
        self.max_transient_errors = max_transient_errors
        self._wanted: int | None = None
        self._transient_errors = 0

    def _locations(self) -> tuple[str, str | None]:
        try:
            return check_location(self.target), (check_location(self.source) if self.source else None)
        except ValueError as error:
            raise AirflowFailException(str(error)) from error

    def wanted_version(self, context: Context) -> int:
        """The version to reach: ``version``, else the source's high watermark when the sensor started.

        In reschedule mode every poke is a new process, so "when the sensor started" is the first
        reschedule's date, and the source's version at that time is read back from its Delta history.
        """
        if self.version not in (None, ""):
            try:
                return int(self.version)  # type: ignore[arg-type]
            except (TypeError, ValueError) as error:
                raise AirflowFailException(f"version {self.version!r} is not an integer") from error
        _, source = self._locations()
        assert source is not None
        started = None
        if self.reschedule:
            started = context["ti"].get_first_reschedule_date(context)
        try:
            return source_version_at(source, started, self.storage_options)
        except Exception as error:
            if classify_error(error) == "permanent":
                raise AirflowFailException(f"{type(error).__name__}: {error}") from error
            raise

    def execute(self, context: Context) -> Any:
        self._wanted = self.wanted_version(context)
        self.log.info(
            "waiting until %s has consumed %s up to version %s", self.target, self.source, self._wanted
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
                wanted_version=self._wanted,
                storage_options=self.storage_options,
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
        if self._wanted is None:
            self._wanted = self.wanted_version(context)
        target, source = self._locations()
        try:
            reached = observe(target, source, self.storage_options)
        except Exception as error:
            if classify_error(error) == "permanent":
                raise AirflowFailException(f"{type(error).__name__}: {error}") from error
            self._transient_errors += 1
            if self._transient_errors > self.max_transient_errors:
                raise
            self.log.warning("transient error %d: %s", self._transient_errors, error)
            return PokeReturnValue(False)
        self._transient_errors = 0
        decision = decide(reached, self._wanted, now=time.time(), deadline=None)
        self.log.info("%s: %s", target, decision.message)
        return PokeReturnValue(
            decision.status == "done",
            xcom_value={
                "target": target,
                "source": source,
                "wanted_version": self._wanted,
                "reached_version": reached,
            },
        )

    def execute_complete(self, context: Context, event: Mapping[str, Any]) -> dict[str, Any]:
        """Resume after the trigger fired: return its observation, or fail/skip as it says."""
        status = event.get("status")
        message = str(event.get("message", ""))
        if status == "success":
            return {k: event.get(k) for k in ("target", "source", "wanted_version", "reached_version")}
        if status == "timeout":
            if self.soft_fail:
                raise AirflowSkipException(f"high watermark not reached: {message}")
            raise AirflowSensorTimeout(f"high watermark not reached: {message}")
        raise AirflowFailException(f"high watermark sensor failed: {message}")

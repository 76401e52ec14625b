"""How stale a join's output may get: a freshness policy per output, its state, and an alert on it.

A join operator takes ``freshness={"warn_after": ..., "error_after": ...}``; each duration is a
:class:`~datetime.timedelta` (a pendulum ``Duration`` is one), a number of seconds, ``"90s"``, ``"30m"``,
``"2h"``, ``"1d"`` or an ISO 8601 duration (``"PT2H"``). What is measured is the output's lag: how long
its inputs have held changes the output has not consumed (0 while it is caught up). The Joins view
shows the state (``ok``, ``warn``, ``error``, or ``unknown`` when the lag cannot be read) and returns it
from ``/fkjoin/api/outputs``; :func:`freshness_deadline` turns the policy into an Airflow Deadline Alert.

Example::

    import pendulum

    ForeignKeyJoinOperator(
        task_id="orders_customers",
        ...,
        freshness={"warn_after": pendulum.duration(hours=1), "error_after": "3h"},
    )
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator
    from airflow.sdk.definitions.callback import Callback
    from airflow.sdk.definitions.deadline import DeadlineAlert

#: The policy's fields, in order of severity.
LEVELS = ("warn_after", "error_after")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_SHORT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd])\s*$")


def _seconds(value: Any, field: str) -> float:
    """A duration in seconds, or a ValueError naming ``field`` and the forms accepted.

    >>> _seconds("90m", "freshness.warn_after"), _seconds(timedelta(hours=2), "x"), _seconds("PT1H", "x")
    (5400.0, 7200.0, 3600.0)
    """
    seconds: float | None = None
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str):
        short = _SHORT.match(value)
        if short:
            seconds = float(short.group(1)) * _UNITS[short.group(2)]
        elif value.strip().upper().startswith("P"):
            import pendulum

            try:
                parsed = pendulum.parse(value.strip())
            except Exception:  # pendulum raises its own ParserError and ValueError
                parsed = None
            if isinstance(parsed, timedelta):
                seconds = parsed.total_seconds()
    if seconds is None or seconds <= 0:
        raise ValueError(
            f"{field}: {value!r} is not a duration; give a timedelta (or pendulum.duration), seconds, "
            '"30m", "2h", "1d" or an ISO 8601 duration such as "PT2H", greater than zero'
        )
    return seconds


def freshness_policy(value: Mapping[str, Any] | None) -> dict[str, float] | None:
    """The operator's ``freshness`` argument as seconds, checked: ``{"warn_after": s, "error_after": s}``
    with the levels given (at least one); ``warn_after`` must come before ``error_after``.

    >>> freshness_policy({"warn_after": "1h", "error_after": timedelta(hours=3)})
    {'warn_after': 3600.0, 'error_after': 10800.0}
    >>> freshness_policy({"error_after": "2h", "warn": "1h"})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ValueError: freshness: unknown field 'warn'; ...
    """
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ValueError(f'freshness: expected {{"warn_after": ..., "error_after": ...}}, got {value!r}')
    unknown = sorted(set(value) - set(LEVELS))
    if unknown:
        raise ValueError(
            f"freshness: unknown field {unknown[0]!r}; the fields are warn_after and error_after"
        )
    policy = {level: _seconds(value[level], f"freshness.{level}") for level in LEVELS if value.get(level)}
    if not policy:
        raise ValueError("freshness: give warn_after, error_after or both")
    if len(policy) == 2 and policy["warn_after"] >= policy["error_after"]:
        raise ValueError("freshness: warn_after must be shorter than error_after")
    return policy


def freshness_state(lag_s: float | None, policy: Mapping[str, float] | None) -> str | None:
    """``ok``, ``warn`` or ``error`` for an output ``lag_s`` seconds behind its inputs under ``policy``;
    ``unknown`` when the lag could not be read; None without a policy.

    >>> [freshness_state(lag, {"warn_after": 60, "error_after": 600}) for lag in (0, 59, 60, 600, None)]
    ['ok', 'ok', 'warn', 'error', 'unknown']
    """
    if not policy:
        return None
    if lag_s is None:
        return "unknown"
    if "error_after" in policy and lag_s >= policy["error_after"]:
        return "error"
    if "warn_after" in policy and lag_s >= policy["warn_after"]:
        return "warn"
    return "ok"


def freshness_deadline(
    operator: BaseOperator | Mapping[str, Any], callback: Callback, *, level: str = "error_after"
) -> DeadlineAlert:
    """An Airflow Deadline Alert from a join's freshness policy: a run of the DAG must finish within the
    policy's ``error_after`` (or ``level``) of being queued, or ``callback`` runs.

    A run consumes every change its inputs hold when it starts; one not finished ``error_after`` after it
    was queued leaves the output that far behind, so this is the freshness breach Airflow can see by
    itself. A failed run is ``on_failure_callback``'s to report; a DAG that does not run at all shows as
    ``error`` in the Joins view and its API. ``operator`` is a join operator (its ``freshness``) or a
    policy as the operator takes it.

    Example::

        from airflow.sdk import AsyncCallback, DAG
        from airflow.providers.slack.notifications.slack_webhook import SlackWebhookNotifier

        with DAG("orders", schedule="@hourly", ...) as dag:
            join = ForeignKeyJoinOperator(task_id="orders_customers", ..., freshness={"error_after": "3h"})
        dag.deadline = freshness_deadline(join, AsyncCallback(SlackWebhookNotifier, kwargs={"text": "late"}))
    """
    from airflow.sdk.definitions.deadline import DeadlineAlert, DeadlineReference

    raw = operator if isinstance(operator, Mapping) else getattr(operator, "freshness", None)
    policy = freshness_policy(raw)
    if not policy or level not in policy:
        name = getattr(operator, "task_id", "the policy")
        raise ValueError(f"freshness_deadline: {name} has no freshness {level}; give one to alert on it")
    name = f"fkjoin freshness of {operator.task_id}" if not isinstance(operator, Mapping) else None
    return DeadlineAlert(
        reference=DeadlineReference.DAGRUN_QUEUED_AT,
        interval=timedelta(seconds=policy[level]),
        callback=callback,
        name=name,
    )

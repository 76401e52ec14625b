"""The engine's JVM side, reached as a stored procedure: the same call from classic Spark and Spark Connect.

The net-change commit builds a Delta transaction by hand (deletion vectors, new rows, change data and a
``SetTransaction`` in one commit), which needs Delta's internal classes. They run in the JVM, in
``jvm/src/main/java`` (built into :data:`.packaging.ENGINE_JAR` by the set-up script), registered in a
session as a Spark catalog with one procedure, :data:`PROCEDURE`. A SQL ``CALL`` reaches it from a
classic session and from a Spark Connect client alike, so both run one implementation; the request and
the answer are small JSON objects, typed on this side by :mod:`.engine_protocol`.

A session whose JVM lacks the jar (a Connect server someone else started, a session built without it)
has no procedure: :func:`unavailable_reason` says so, and the refresh is written by MERGE instead.

    >>> unavailable_reason(spark) is None
    True
    >>> call(spark, Describe()).status
    <Status.READY: 'ready'>
"""

from __future__ import annotations

import json
import logging
import uuid
import weakref
from typing import Any

from pydantic import ValidationError
from pyspark.sql import DataFrame, SparkSession

from .engine_protocol import PROTOCOL, AnswerT, Describe, Request, Status

log = logging.getLogger(__name__)

#: The catalog name the engine registers its procedures under, in each session that uses them.
CATALOG = "fkjoin_engine"
#: The catalog class in the engine's jar.
CATALOG_CLASS = "io.github.fkjoin.engine.EngineCatalog"
#: The procedure's name in the catalog; ``net_change``, its first name, still answers.
PROCEDURE = "engine"

_checked: weakref.WeakKeyDictionary[SparkSession, str | None] = weakref.WeakKeyDictionary()
_actions: weakref.WeakKeyDictionary[SparkSession, frozenset[str]] = weakref.WeakKeyDictionary()
_registered: weakref.WeakSet[SparkSession] = weakref.WeakSet()


#: Failures that say nothing about the session's JVM: the client could not reach it this time (Spark
#: Connect's gRPC status, py4j's gateway).
_TRANSIENT = (
    "StatusCode.UNAVAILABLE",
    "StatusCode.DEADLINE_EXCEEDED",
    "Py4JNetworkError",
    "Connection refused",
)


def unavailable_reason(spark: SparkSession) -> str | None:
    """Why ``spark`` cannot run the engine's procedure (its JVM has no engine jar), or None when it can.

    Asked by asking the procedure to describe itself, once per session: the answer holds for the
    session's life (the jar is in its JVM or not), unless the question did not reach the JVM (a dropped
    connection, a server restarting): then this refresh MERGEs and the next one asks again.

    >>> unavailable_reason(spark_without_the_jar)
    "the Spark session has no engine jar ([CATALOG_PLUGIN_CLASS_NOT_FOUND] Cannot find catalog ...)"
    """
    if spark in _checked:
        return _checked[spark]
    reason: str | None = None
    try:
        answer = call(spark, Describe())
        if answer.status != Status.READY:
            reason = f"the engine jar answered {answer!r}"
        _actions[spark] = frozenset(answer.actions.split(","))
    except EngineProcedureError as error:  # a jar of another protocol
        reason = f"the Spark session's engine jar does not fit ({error})"
    except Exception as error:
        text = str(error).strip()
        first_line = text.splitlines()[0] if text else type(error).__name__
        named = f"{type(error).__name__}: {text}"
        if isinstance(error, ConnectionError) or any(sign in named for sign in _TRANSIENT):
            return f"the engine procedure could not be reached this time ({first_line[:300]})"
        if "has one procedure, net_change" in text:  # a jar built before the procedure's rename
            reason = (
                f"the Spark session's engine jar predates this version (it has no {PROCEDURE} procedure); "
                "install the jar of the same airflow-provider-fkjoin version"
            )
        else:
            reason = f"the Spark session has no engine jar ({first_line[:300]})"
    _checked[spark] = reason
    return reason


def supports(spark: SparkSession, action: str) -> bool:
    """Whether ``spark``'s engine jar serves ``action`` (a jar built before the action was added does not).

    >>> supports(spark, "files")
    True
    """
    return unavailable_reason(spark) is None and action in _actions.get(spark, frozenset())


def request_suffix() -> str:
    """A fresh suffix for the names of the temporary views one request hands over."""
    return uuid.uuid4().hex[:12]


def _register(spark: SparkSession) -> None:
    """Name the engine's catalog in the session (a runtime setting; Spark loads the class on first use),
    unless the session already names one under :data:`CATALOG` (the server's or the user's setting)."""
    if spark not in _registered:
        key = f"spark.sql.catalog.{CATALOG}"
        if spark.conf.get(key, None) is None:
            spark.conf.set(key, CATALOG_CLASS)
        _registered.add(spark)


class EngineProcedureError(RuntimeError):
    """The JVM side answered something this side does not understand."""


def call(spark: SparkSession, request: Request[AnswerT]) -> AnswerT:
    """Run one request (:mod:`.engine_protocol`) and return the JVM side's typed answer.

    The request travels in the SQL text as a hex literal decoded on the server (``decode(unhex('7b22...'),
    'UTF-8')``): a string literal would be altered by a session that sets
    ``spark.sql.parser.escapedStringLiterals`` or substitutes ``${...}`` variables, and Spark 4.2 does not
    bind parameter markers inside ``CALL``. It never holds row values, only table locations, view names,
    versions and counts.

    >>> call(spark, Abort(token="0b6d..."))
    Answer(protocol=1, status=<Status.ABORTED: 'aborted'>, reason=None)
    """
    _register(spark)
    action = request.action
    encoded = json.dumps(request.wire(), separators=(",", ":")).encode("utf-8").hex()
    rows = spark.sql(
        f"CALL {CATALOG}.system.{PROCEDURE}(request => decode(unhex('{encoded}'), 'UTF-8'))"
    ).collect()
    if len(rows) != 1:
        raise EngineProcedureError(f"{PROCEDURE} {action}: expected one answer row, got {len(rows)}")
    answer = json.loads(rows[0][0])
    if answer.get("protocol") != PROTOCOL:
        raise EngineProcedureError(
            f"{PROCEDURE} {action}: the engine jar speaks protocol {answer.get('protocol')}, not {PROTOCOL}; "
            "use the jar built from the same airflow-provider-fkjoin version"
        )
    try:
        return request.answer(answer)
    except ValidationError as error:
        raise EngineProcedureError(
            f"{PROCEDURE} {action}: the engine jar's answer does not fit this side ({error}); use the jar "
            "built from the same airflow-provider-fkjoin version"
        ) from None


class RequestViews:
    """Temporary views that hand this refresh's frames to the JVM side, dropped when it is done."""

    def __init__(self, spark: Any) -> None:
        self.spark = spark
        self.suffix = uuid.uuid4().hex[:12]
        self.names: list[str] = []

    def name(self, role: str) -> str:
        """A view name for ``role`` that the JVM side creates; dropped with the others."""
        name = f"fkjoin_{role}_{self.suffix}"
        self.names.append(name)
        return name

    def add(self, role: str, frame: DataFrame) -> str:
        """``frame`` as a view named for ``role``; returns the name."""
        name = self.name(role)
        frame.createOrReplaceTempView(name)
        return name

    def drop(self) -> None:
        """Drop every view, each on its own: one that cannot be dropped (a lost connection) leaves the
        others to go, and never hides the refresh's own outcome."""
        for name in self.names:
            try:
                self.spark.catalog.dropTempView(name)
            except Exception as error:
                log.warning("could not drop the temporary view %s: %s", name, error)
        self.names.clear()

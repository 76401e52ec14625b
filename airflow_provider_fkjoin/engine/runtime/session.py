"""A Delta-enabled SparkSession sized for the machine it runs on, or a Spark Connect session.

Example::

    spark = get_spark()                       # local[*], Delta's jars from .jars/ or Maven Central
    spark = get_spark("spark://127.0.0.1:7077", conf={"spark.executor.memory": "2g"})
    spark = get_spark("sc://127.0.0.1:15002")  # a Spark Connect server (``SPARK_REMOTE`` does the same)

A Spark Connect server with Delta is started with :func:`connect_server_argv` (``fkjoin connect-server``):
the server holds the JVM, Delta's jars and the static settings; a client holds only a session, whose
runtime settings (time zone, ...) it sets itself.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import weakref
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import SparkSession

from ..core.cost_history import RECOMPUTE_CHANGE_RATIO, cluster_id
from ..core.errors import SpecError
from ..core.planning import CostModel
from .packaging import DELTA_MAVEN_COORDINATE, ENGINE_LOG4J, delta_jars, local_jars

log = logging.getLogger(__name__)

DEFAULT_CONF: dict[str, str] = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    "spark.sql.shuffle.partitions": "8",
    "spark.default.parallelism": "4",
    "spark.sql.adaptive.enabled": "true",
    # One partition rebuilds the state of a table of up to a few hundred thousand files in a second; each
    # more partition repeats, per refresh and table, a task that generates code for Delta's action rows
    "spark.databricks.delta.snapshotPartitions": "1",
    # Keep the compiled classes of a refresh's plans for the next refresh (Spark keeps 100)
    "spark.sql.codegen.cache.maxEntries": "2000",
    "spark.databricks.delta.properties.defaults.enableChangeDataFeed": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.ui.enabled": "false",
    "spark.driver.memory": "4g",
    "spark.sql.session.timeZone": "UTC",
    "spark.driver.extraJavaOptions": f"-Dlog4j.configurationFile=file:{ENGINE_LOG4J}",
}


#: Settings a Connect client sets on its own session: the engine's runtime SQL settings. The static ones
#: (extensions, catalog, jars, memory, partitions sized for the machine) belong to the server.
CONNECT_SESSION_CONF: dict[str, str] = {
    "spark.sql.session.timeZone": "UTC",
    "spark.databricks.delta.properties.defaults.enableChangeDataFeed": "false",
}
#: A Connect server's own defaults: Spark's status store (kept with the UI off too) holds up to 1,000 jobs,
#: stages and SQL executions, with up to 100,000 tasks per stage, so a server's memory would grow over its
#: first few hundred refreshes (a refresh runs some 30 jobs); the last few refreshes' worth is enough to
#: look into one.
CONNECT_SERVER_CONF: dict[str, str] = {
    "spark.ui.retainedJobs": "200",
    "spark.ui.retainedStages": "200",
    "spark.ui.retainedTasks": "1000",
    "spark.sql.ui.retainedExecutions": "200",
    "spark.sql.connect.ui.retainedSessions": "50",
    "spark.sql.connect.ui.retainedStatements": "200",
}
#: The Spark Connect server's entry point (in pyspark's own ``spark-connect_2.13`` jar).
CONNECT_SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
#: Spark Connect as a plugin of a plain driver (:data:`CONNECT_DRIVER`), for a server whose sessions share
#: compiled code: Spark's code-generation cache is keyed by the class loader, and the Connect server's own
#: entry point gives every session a class loader of its own on the driver and on the executors (it forces
#: both settings below on), so each new session, a task through the hook, compiled its code again.
CONNECT_PLUGIN = "org.apache.spark.sql.connect.SparkConnectPlugin"
CONNECT_DRIVER = str(Path(__file__).with_name("connect_driver.py"))
SHARED_CODE_CONF: dict[str, str] = {
    "spark.sql.artifact.isolation.enabled": "false",
    "spark.sql.artifact.isolation.alwaysApplyClassloader": "false",
}
CONNECT_DEFAULT_PORT = 15002


#: The session setting that bounds a small refresh (bytes of the data files of the tables it reads); 0
#: turns the small-refresh settings off.
SMALL_REFRESH_BYTES_CONF = "spark.fkjoin.smallRefreshBytes"
SMALL_REFRESH_BYTES = 128 * 1024 * 1024
#: A small refresh's shuffle partitions: one per this many bytes of its tables (at least one, at most the
#: session's own number).
SMALL_REFRESH_PARTITION_BYTES = 32 * 1024 * 1024
#: The same for a small refresh that shuffles its tables whole (a full rebuild, a recompute): one
#: partition per this many bytes, so that its join runs on every core (one partition per 32 MiB ran a 1M
#: x 100K recompute on one core).
WHOLE_TABLES_PARTITION_BYTES = 4 * 1024 * 1024
#: The settings under which Spark caches a plan (``persist``) in the session itself rather than in a clone
#: of it: Spark clones the session to cache a plan with these two on (their defaults). Over Spark Connect a
#: clone is a new session to the executors, with class loaders of its own, so each cached frame compiled
#: its generated code again and kept it. Neither changes a result: no Delta table is bucketed, and
#: without adaptive execution there is no final stage to coalesce.
UNCLONED_CACHE_SETTINGS = {
    "spark.sql.sources.bucketing.autoBucketedScan.enabled": "false",
    "spark.sql.optimizer.canChangeCachedPlanOutputPartitioning": "true",
}
#: The session settings :func:`small_refresh_settings` decides on.
SMALL_REFRESH_KEYS = (
    SMALL_REFRESH_BYTES_CONF,
    "spark.sql.adaptive.enabled",
    "spark.sql.autoBroadcastJoinThreshold",
    "spark.sql.shuffle.partitions",
    *UNCLONED_CACHE_SETTINGS,
)


def small_refresh_limit(limit_text: str | None) -> int:
    """The bytes bound of a small refresh, from the session's :data:`SMALL_REFRESH_BYTES_CONF` (unset: the
    default; 0: no refresh is small).

    >>> small_refresh_limit(None), small_refresh_limit("0")
    (134217728, 0)
    """
    try:
        return int(limit_text) if limit_text not in (None, "") else SMALL_REFRESH_BYTES
    except ValueError:
        raise SpecError(
            f"conf {SMALL_REFRESH_BYTES_CONF}={limit_text!r}: give a number of bytes (0 turns it off)"
        ) from None


def is_small(spark: SparkSession, table_bytes: int | None) -> bool:
    """Whether tables of ``table_bytes`` (None: unknown) are within the session's small-refresh bound."""
    limit = small_refresh_limit(spark.conf.get(SMALL_REFRESH_BYTES_CONF, None))
    return limit > 0 and table_bytes is not None and table_bytes <= limit


#: The session settings that tune the refresh-strategy estimate, by :class:`..core.planning.CostModel` field.
COST_CONF = {
    "job_s": "spark.fkjoin.cost.jobSeconds",
    "scan_bytes_per_s": "spark.fkjoin.cost.scanBytesPerSecond",
    "feed_weight": "spark.fkjoin.cost.feedWeight",
    "recompute_weight": "spark.fkjoin.cost.recomputeWeight",
}


def cost_model(spark: SparkSession) -> CostModel:
    """The refresh-strategy cost model, with the session's :data:`COST_CONF` settings over its defaults.

    >>> spark.conf.set("spark.fkjoin.cost.jobSeconds", "0.5")
    >>> cost_model(spark).job_s
    0.5
    """
    tuned: dict[str, float] = {}
    for field, key in COST_CONF.items():
        text = spark.conf.get(key, None)
        if text in (None, ""):
            continue
        try:
            tuned[field] = float(text)
        except ValueError:
            raise SpecError(f"conf {key}={text!r}: give a number") from None
        if tuned[field] <= 0:
            raise SpecError(f"conf {key}={text!r}: give a positive number")
    return CostModel(**tuned)


#: The share of the inputs' bytes in their change feeds at or above which ``refresh_strategy: auto``
#: recomputes without estimating (:func:`..core.cost_history.choose_plan`; 0 turns it off).
RECOMPUTE_CHANGE_RATIO_CONF = "spark.fkjoin.recomputeChangeRatio"


def recompute_change_ratio(spark: SparkSession) -> float:
    """The session's :data:`RECOMPUTE_CHANGE_RATIO_CONF`, or its default.

    >>> spark.conf.set("spark.fkjoin.recomputeChangeRatio", "0.5")
    >>> recompute_change_ratio(spark)
    0.5
    """
    text = spark.conf.get(RECOMPUTE_CHANGE_RATIO_CONF, None)
    if text in (None, ""):
        return RECOMPUTE_CHANGE_RATIO
    try:
        ratio = float(text)
    except ValueError:
        raise SpecError(
            f"conf {RECOMPUTE_CHANGE_RATIO_CONF}={text!r}: give a number (0 turns it off)"
        ) from None
    if ratio < 0:
        raise SpecError(f"conf {RECOMPUTE_CHANGE_RATIO_CONF}={text!r}: give a number >= 0 (0 turns it off)")
    return ratio


def cluster_name(spark: SparkSession) -> str:
    """The cluster a refresh runs on, as the cost history tells clusters apart
    (:func:`..core.cost_history.cluster_id`: a hash of the master and the executors' shape)."""
    conf = spark.conf
    return cluster_id(
        conf.get("spark.master", None),
        conf.get("spark.executor.instances", None),
        conf.get("spark.executor.cores", None),
    )


def in_small_refresh(spark: SparkSession) -> bool:
    """Whether ``spark`` runs a small refresh now (:func:`small_refresh` applied its settings): its joins
    then shuffle rather than broadcast, since without adaptive execution each broadcast is a Spark job of
    its own, while every stage of a shuffled join runs in the one job of its action."""
    shared = _small_refreshes.get(spark)
    return shared is not None and bool(shared.settings)


def broadcast_limit_bytes(spark: SparkSession) -> int:
    """The session's own ``spark.sql.autoBroadcastJoinThreshold`` in bytes (-1: never), the value a small
    refresh (:func:`small_refresh`) replaced when one runs now: the bound under which Spark's planner
    broadcasts a table, for a join the engine plans over whole tables.

    >>> broadcast_limit_bytes(spark)  # Spark's default  # doctest: +SKIP
    10485760
    """
    shared = _small_refreshes.get(spark)
    key = "spark.sql.autoBroadcastJoinThreshold"
    if shared is not None and key in shared.replaced:
        text = shared.replaced[key]
    else:
        text = spark.conf.get(key, None)
    if not text:
        return 10 * 1024 * 1024
    try:
        return size_bytes(text)
    except ValueError:
        return -1


def size_bytes(text: str) -> int:
    """Bytes from a Spark size setting: ``10485760``, ``10m``, ``10MB``, ``-1`` (binary units).

    >>> size_bytes("512m")
    536870912
    """
    text = text.strip().lower().removesuffix("b")
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def small_refresh_settings(
    table_bytes: int | None, current: Mapping[str, str | None], *, whole_tables: bool = False
) -> dict[str, str]:
    """The session settings for a refresh whose tables hold ``table_bytes`` of data files (None: unknown),
    given the session's ``current`` values of :data:`SMALL_REFRESH_KEYS`; empty when the refresh is not
    small. ``whole_tables``: the refresh shuffles its tables whole (:data:`WHOLE_TABLES_PARTITION_BYTES`).

    A refresh runs a fixed number of Spark executions whatever it reads. Adaptive execution splits each
    into one job per query stage; on tables this small every stage is a few tasks, and scheduling it as
    a job of its own costs more than any plan it could improve (a refresh of a 1,000-row join ran 66
    jobs with it and 31 without, in 15% less time). Over :data:`SMALL_REFRESH_BYTES`, adaptive
    execution stays as the session has it: its run-time join and partition choices are what large
    refreshes need. A session that already turned it off is left alone. A small refresh also caches its
    frames in the session itself (:data:`UNCLONED_CACHE_SETTINGS`).

    >>> small = small_refresh_settings(3_000_000, {"spark.sql.adaptive.enabled": "true",
    ...                                            "spark.sql.shuffle.partitions": "200"})
    >>> small["spark.sql.adaptive.enabled"], small["spark.sql.shuffle.partitions"]
    ('false', '1')
    >>> small_refresh_settings(10 * 2**30, {})
    {}
    """
    limit = small_refresh_limit(current.get(SMALL_REFRESH_BYTES_CONF))
    adaptive = str(current.get("spark.sql.adaptive.enabled") or "true").lower() == "true"
    if limit <= 0 or table_bytes is None or table_bytes > limit or not adaptive:
        return {}
    partitions = current.get("spark.sql.shuffle.partitions")
    have = int(partitions) if partitions and partitions.isdigit() else 200
    per_partition = WHOLE_TABLES_PARTITION_BYTES if whole_tables else SMALL_REFRESH_PARTITION_BYTES
    wanted = -(-table_bytes // per_partition)
    return {
        "spark.sql.adaptive.enabled": "false",
        "spark.sql.autoBroadcastJoinThreshold": "-1",
        "spark.sql.shuffle.partitions": str(max(1, min(have, wanted))),
        **{key: value for key, value in UNCLONED_CACHE_SETTINGS.items() if current.get(key) != value},
    }


@dataclass
class _SmallRefresh:
    """The small-refresh settings in force in one session, the values they replaced, and how many
    refreshes of the session run under them."""

    settings: dict[str, str]
    replaced: dict[str, str | None]
    refreshes: int = 0


_small_lock = threading.Lock()
_small_refreshes: weakref.WeakKeyDictionary[SparkSession, _SmallRefresh] = weakref.WeakKeyDictionary()


@contextmanager
def small_refresh(
    spark: SparkSession, table_bytes: int | None, *, whole_tables: bool = False
) -> Iterator[dict[str, str]]:
    """Run a block (one refresh) with :func:`small_refresh_settings` for ``table_bytes`` (and
    ``whole_tables``), and give the session back as it was; yields the settings applied (empty: none).

    Session settings are the whole session's: refreshes that share one session from several threads run
    under the settings the first of them chose, until the last of them ends and the session's own values
    come back. A failure to put a value back while the block's own error propagates is logged, not raised
    over that error.

    >>> with small_refresh(spark, 2_000_000) as settings:
    ...     settings["spark.sql.adaptive.enabled"]
    'false'
    """
    with _small_lock:
        shared = _small_refreshes.get(spark)
        if shared is None:
            current = {key: spark.conf.get(key, None) for key in SMALL_REFRESH_KEYS}
            settings = small_refresh_settings(table_bytes, current, whole_tables=whole_tables)
            shared = _SmallRefresh(settings, {key: current[key] for key in settings})
            try:
                for key, value in settings.items():
                    spark.conf.set(key, value)
            except BaseException:
                _put_back(spark, shared.replaced, quiet=True)
                raise
            _small_refreshes[spark] = shared
        shared.refreshes += 1
    try:
        yield shared.settings
    except BaseException:
        _leave_small_refresh(spark, shared, quiet=True)
        raise
    _leave_small_refresh(spark, shared, quiet=False)


def _leave_small_refresh(spark: SparkSession, shared: _SmallRefresh, *, quiet: bool) -> None:
    with _small_lock:
        shared.refreshes -= 1
        if shared.refreshes == 0:
            del _small_refreshes[spark]
            _put_back(spark, shared.replaced, quiet=quiet)


def _put_back(spark: SparkSession, values: Mapping[str, str | None], *, quiet: bool) -> None:
    """Set each of ``values`` back (None: unset); with ``quiet``, log a failure instead of raising it."""
    for key, value in values.items():
        try:
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)
        except Exception as error:
            if not quiet:
                raise
            log.warning("could not set %s back to %r in the Spark session: %s", key, value, error)


def is_connect(spark: SparkSession) -> bool:
    """Whether ``spark`` is a Spark Connect session: no JVM in this process, no py4j.

    >>> is_connect(get_spark("sc://127.0.0.1:15002")), is_connect(get_spark("local[2]"))  # doctest: +SKIP
    (True, False)
    """
    return type(spark).__module__.startswith("pyspark.sql.connect")


def parse_conf(text: str) -> dict[str, str]:
    """Parse ``FKJOIN_SPARK_CONF``: a JSON object, or ``key=value`` pairs separated by commas or newlines.

    >>> parse_conf("spark.sql.shuffle.partitions=4, spark.driver.memory=2g")
    {'spark.sql.shuffle.partitions': '4', 'spark.driver.memory': '2g'}
    """
    text = text.strip()
    if not text:
        return {}
    if text.startswith("{"):
        return {str(k): str(v) for k, v in json.loads(text).items()}
    pairs: dict[str, str] = {}
    for item in text.replace("\n", ",").split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"FKJOIN_SPARK_CONF: {item.strip()!r} is not key=value")
        pairs[key.strip()] = value.strip()
    return pairs


def session_conf(
    master: str | None = None, conf: Mapping[str, str] | None = None
) -> tuple[str, dict[str, str]]:
    """The master and conf ``get_spark`` would use; pure, so tests can check it without a JVM."""
    chosen_master = master or os.environ.get("FKJOIN_SPARK_MASTER") or "local[*]"
    merged = dict(DEFAULT_CONF)
    if not delta_jars():
        merged["spark.jars.packages"] = DELTA_MAVEN_COORDINATE
    merged.update(parse_conf(os.environ.get("FKJOIN_SPARK_CONF", "")))
    merged.update({str(k): str(v) for k, v in (conf or {}).items()})
    jars = local_jars(conf=merged)
    if jars and "spark.jars" not in merged:
        merged["spark.jars"] = ",".join(jars)
    return chosen_master, merged


def get_spark(
    master: str | None = None, conf: Mapping[str, str] | None = None, app_name: str = "fkjoin"
) -> SparkSession:
    """Return the active Delta-enabled session, or start one.

    An already running session (spark-submit, a notebook, the test suite's shared one) is reused as is:
    its jars and master were chosen by whoever started it. A ``sc://`` master (or ``SPARK_REMOTE``, when
    no master is given) connects to a Spark Connect server instead (:func:`connect_session`).
    """
    remote = master if master and master.startswith("sc://") else None
    if master is None and os.environ.get("SPARK_REMOTE", "").startswith("sc://"):
        remote = os.environ["SPARK_REMOTE"]
    if remote is not None:
        return connect_session(remote, conf)
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    chosen_master, merged = session_conf(master, conf)
    builder = SparkSession.builder.master(chosen_master).appName(app_name)
    for key, value in merged.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def connect_session(url: str, conf: Mapping[str, str] | None = None) -> SparkSession:
    """A session on the Spark Connect server at ``url`` (``sc://host:port/;session_id=...;token=...``).

    Sets :data:`CONNECT_SESSION_CONF`, then ``FKJOIN_SPARK_CONF`` and ``conf``, as session settings (a
    static setting is the server's business: refused with the server's own error). Delta's Python client
    for Connect is imported so that its errors arrive as Delta's exception classes (a conflict between
    two commits is then ``delta.exceptions.ConcurrentAppendException``, whatever carries it); Delta's
    Connect *server* plugin is not needed, since the engine uses Delta through SQL and the
    DataFrame reader and writer.
    """
    import delta.connect  # noqa: F401  # registers Delta's error classes with the Connect client

    spark = SparkSession.builder.remote(url).getOrCreate()
    settings = {**CONNECT_SESSION_CONF, **parse_conf(os.environ.get("FKJOIN_SPARK_CONF", ""))}
    settings.update({str(k): str(v) for k, v in (conf or {}).items()})
    for key, value in settings.items():
        try:
            spark.conf.set(key, value)
        except Exception as error:
            if "CANNOT_MODIFY" not in str(error):
                raise
            raise SpecError(
                f"conf {key}: a Spark Connect session cannot set it (it is the server's); set it where the "
                "server starts (fkjoin connect-server --conf ...), or drop it"
            ) from None
    return spark


def connect_server_argv(
    *,
    host: str = "127.0.0.1",
    port: int = CONNECT_DEFAULT_PORT,
    master: str = "local[*]",
    conf: Mapping[str, str] | None = None,
    spark_submit: str = "spark-submit",
    share_compiled_code: bool = False,
) -> list[str]:
    """The argv that starts a Spark Connect server with Delta: what ``fkjoin connect-server`` execs.

    pyspark's own ``spark-submit`` runs :data:`CONNECT_SERVER_CLASS` from pyspark's jars with Delta's jars
    (or ``--packages``), Delta's SQL extension and catalog, the engine's session defaults, quiet
    logging and a status store of bounded size (:data:`CONNECT_SERVER_CONF`); ``conf`` wins over all of
    them. The server listens on ``host:port`` only.

    ``share_compiled_code`` runs Spark Connect as a plugin of a plain driver instead, whose sessions
    all use the driver's class loaders (:data:`SHARED_CODE_CONF`): a new session, as every task through
    the hook opens, then reuses the code earlier sessions compiled. The price: a jar or file a client
    adds to its session (``addArtifact``) is visible to every session; the engine adds none.

    >>> connect_server_argv(port=15002)[:4]
    ['spark-submit', '--class', 'org.apache.spark.sql.connect.service.SparkConnectServer', '--master']
    >>> connect_server_argv(port=15002, share_compiled_code=True)[-1] == CONNECT_DRIVER
    True
    """
    _, session = session_conf(master)
    settings = {
        key: value for key, value in session.items() if key not in ("spark.jars", "spark.jars.packages")
    }
    settings |= CONNECT_SERVER_CONF | {
        "spark.connect.grpc.binding.address": host,
        "spark.connect.grpc.binding.port": str(port),
    }
    if share_compiled_code:
        settings |= SHARED_CODE_CONF | {"spark.plugins": CONNECT_PLUGIN}
    settings |= {str(k): str(v) for k, v in (conf or {}).items()}
    if share_compiled_code and CONNECT_PLUGIN not in settings["spark.plugins"].split(","):
        settings["spark.plugins"] += f",{CONNECT_PLUGIN}"
    entry = [] if share_compiled_code else ["--class", CONNECT_SERVER_CLASS]
    argv = [spark_submit, *entry, "--master", master, "--name", "fkjoin-connect"]
    jars = local_jars(conf=settings)
    if jars:
        argv += ["--jars", ",".join(jars)]
    if not delta_jars():
        argv += ["--packages", DELTA_MAVEN_COORDINATE]
    for key, value in settings.items():
        argv += ["--conf", f"{key}={value}"]
    return [*argv, CONNECT_DRIVER if share_compiled_code else "spark-internal"]

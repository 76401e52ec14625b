"""FkJoinHook: one refresh of a join spec, by the cheapest way that works, and its result.

Example (inside an operator's ``execute``; hooks are never built at DAG parse time)::

    hook = FkJoinHook(conn_id="spark_default", conf={"spark.executor.memory": "2g"})
    result = hook.run({"kind": "foreign_key_join", ...})
    result["mode"], result["output"]["version"]      # ('incremental', 7)

First the no-JVM noop check: when no input moved since the output's last refresh, the ``noop`` result
comes from the Delta logs (``deltalake``) and Spark never starts. Otherwise the connection says where
the refresh runs. A ``spark`` connection submits the engine's job with spark-submit (through the Spark
provider): host ``local[2]`` (the embedded default), ``spark://host:7077`` (standalone), ``yarn`` (extra
``{"deploy-mode": "cluster"}``) or ``k8s://https://host:443`` (extra ``namespace``); the result comes
from the driver's last JSON stdout line when spark-submit shows it (client mode), else from the output
table's Delta commit that records this refresh's origin (cluster mode). A ``spark_connect`` connection
(``sc://host:15002``) runs the engine as a client of a long-lived Spark Connect server
(:mod:`.connect`): no JVM per task.

Credentials given as Spark conf (``fs.s3a.secret.key``, ``fs.azure.account.key.*``, SAS tokens, session
tokens...) or by a storage connection (``storage_conn_id``) reach the job but not the logs: the logged
command and failure messages show ``******`` for them, Airflow's task-log masker is told their values,
Spark's own redaction covers its UI and event log, and the driver UI is off unless ``spark_ui=True``::

    hook = FkJoinHook(conf={"spark.hadoop.fs.s3a.secret.key": "wJalr..."})
    hook.masked_command(spec)     # '... --conf spark.hadoop.fs.s3a.secret.key=****** ...'
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseHook
from airflow.sdk import conf as airflow_conf
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowNotFoundException
from airflow.sdk.log import mask_secret

from airflow_provider_fkjoin.credentials import CredentialsError, StorageCredentials, storage_credentials
from airflow_provider_fkjoin.engine import (
    APP_INFO_PREFIX,
    DELTA_MAVEN_COORDINATE,
    ENGINE_LOG4J,
    ERROR_PREFIX,
    EXIT_BAD_INPUT,
    EXIT_JOB_BAD_INPUT,
    EXIT_RETRY,
    PHASE_MARKER,
    WRITE_PATHS,
    delta_jars,
    local_jars,
)
from airflow_provider_fkjoin.hooks.masking import (
    mask_text,
    secret_values,
)
from airflow_provider_fkjoin.jobs import FKJOIN_JOB_FILE
from airflow_provider_fkjoin.jobs.fkjoin_job import REDACTION_CONF, REDACTION_REGEX
from airflow_provider_fkjoin.jvm_start import archive_dir, driver_java_options, merge_java_options
from airflow_provider_fkjoin.links import check_location, spark_ui_url

if TYPE_CHECKING:
    # Imported where used: the Spark provider (with requests) only for spark-submit, Spark Connect's
    # runner only for Connect. A noop run (the no-JVM check) and a DAG parse load neither.
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    from airflow_provider_fkjoin.hooks.connect import SparkConnectRun

DELTA_PACKAGE = DELTA_MAVEN_COORDINATE
#: Spark-side settings and SparkSubmitHook arguments that make spark-submit return while the application
#: still runs: the task would then report a refresh that has not happened (see :meth:`FkJoinHook.run`).
NON_BLOCKING_KWARGS = ("yarn_track_via_rm_api", "track_driver_via_k8s_api")
NON_BLOCKING_CONF = (
    "spark.yarn.submit.waitAppCompletion",
    "spark.kubernetes.submission.waitAppCompletion",
    "spark.standalone.submit.waitAppCompletion",
)
#: The YARN ApplicationMaster's diagnostics for a driver that exited non-zero (spark-submit itself exits 1).
_YARN_USER_EXIT = re.compile(r"User application exited with status (\d+)")
_LOCAL_MASTERS = ("local",)
DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"


class FkJoinConnectionError(AirflowNotFoundException):
    """The Spark connection does not exist (SparkSubmitHook would silently fall back to YARN)."""


class FkJoinBadInputError(AirflowFailException):
    """The engine refused the spec or the input data (exit 2): retrying cannot help."""


def parse_write_path(value: object) -> str:
    """A rendered ``write_path`` argument, normalised: ``auto`` or ``merge`` (any case, spaces trimmed);
    anything else is a bad input that names the argument.

    >>> parse_write_path(" MERGE ")
    'merge'
    """
    text = str(value).strip().lower()
    if text not in WRITE_PATHS:
        raise FkJoinBadInputError(f"write_path: expected one of {', '.join(WRITE_PATHS)}, got {value!r}")
    return text


class FkJoinRetryableError(AirflowException):
    """Another refresh of the same output committed first (exit 75): nothing was written; retry."""


class FkJoinJobError(AirflowException):
    """The Spark job failed for another reason (exit 1, JVM crash, cluster error)."""


_CAUSE_PREFIXES = ("cause: ", "error class: ", "note: ")


class DriverOutput:
    """What the driver told us on stdout: app info, the result JSON, the ``error:`` line, a tail.

    After an ``error:`` line the CLI prints the root cause (``cause: java.io.IOException: ...``,
    ``error class: ...``) and what the engine was doing (``note: while committing ... of output ...``);
    those lines are kept in ``cause`` so the task's error message shows them even when Spark's shutdown
    logging pushes them out of the tail.
    """

    def __init__(self, on_app_info: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.app_info: dict[str, Any] | None = None
        self.result: dict[str, Any] | None = None
        self.error: str | None = None
        self.cause: list[str] = []
        self.tail: deque[str] = deque(maxlen=30)
        #: A YARN cluster-mode driver's exit code, from the application's final diagnostics.
        self.yarn_exit_code: int | None = None
        #: The last phase the refresh reported (``FKJOIN_TRACE=1``: ``pinned``, ``merge_started``...).
        self.phase: str | None = None
        #: Every phase reported, with its ``time.monotonic()`` stamp on the driver's host.
        self.phases: dict[str, float] = {}
        #: When this process saw the session come up (``session_ready``: the job's app info line) and the
        #: result line (``result``), as ``time.monotonic()``: the task's phases (:func:`submit_phases`).
        self.seen_at: dict[str, float] = {}
        self._on_app_info = on_app_info

    def feed(self, line: str) -> None:
        """Look at one output line (already stripped)."""
        self.tail.append(line)
        if (found := _YARN_USER_EXIT.search(line)) is not None:
            self.yarn_exit_code = int(found.group(1))
        if line.startswith(PHASE_MARKER):
            parts = line.split()
            self.phase = parts[1] if len(parts) > 1 else None
            if len(parts) == 3 and self.phase is not None:
                with contextlib.suppress(ValueError):
                    self.phases.setdefault(self.phase, float(parts[2]))
        if line.startswith(APP_INFO_PREFIX):
            try:
                info = json.loads(line.removeprefix(APP_INFO_PREFIX))
            except ValueError:
                return
            if isinstance(info, dict):
                self.app_info = info
                self.seen_at.setdefault("session_ready", time.monotonic())
                if self._on_app_info is not None:
                    self._on_app_info(info)
        elif line.startswith("{") and line.endswith("}"):
            try:
                parsed = json.loads(line)
            except ValueError:
                return
            if isinstance(parsed, dict) and "kind" in parsed and "mode" in parsed:
                self.result = parsed
                self.seen_at["result"] = time.monotonic()
        elif line.startswith(ERROR_PREFIX):
            self.error = line.removeprefix(ERROR_PREFIX)
        elif self.error is not None and line.startswith(_CAUSE_PREFIXES) and len(self.cause) < 5:
            self.cause.append(line)


def submit_phases(started: float, seen_at: Mapping[str, float], ended: float) -> dict[str, float]:
    """A spark-submit task's phases in seconds, from its ``time.monotonic()`` stamps: ``start_s`` (the
    driver JVM's and Python's start and the Spark session's, until the job's app info line),
    ``refresh_s`` (until the result line), ``exit_s`` (the session's stop and the JVM's exit, until
    spark-submit returned) and ``total_s``; a phase whose line never showed (cluster mode) is left out.

    >>> submit_phases(100.0, {"session_ready": 103.5, "result": 112.0}, 112.75)
    {'start_s': 3.5, 'refresh_s': 8.5, 'exit_s': 0.75, 'total_s': 12.75}
    """
    ready, result = seen_at.get("session_ready"), seen_at.get("result")
    phases: dict[str, float] = {}
    if ready is not None:
        phases["start_s"] = round(ready - started, 3)
    if ready is not None and result is not None:
        phases["refresh_s"] = round(result - ready, 3)
    if result is not None:
        phases["exit_s"] = round(ended - result, 3)
    phases["total_s"] = round(ended - started, 3)
    return phases


def failure(
    code: int | None, output: DriverOutput, fallback: str, mask: Callable[[str], str]
) -> AirflowException:
    """The task's error for a refresh that exited ``code``: bad input (no retry) for the job's 65, or the
    CLI's 2 beside its ``error:`` line; retryable for 75 (a concurrent refresh committed first); else a
    job failure with the driver's root cause and output tail. ``mask`` hides credentials."""
    detail = mask(output.error or fallback)
    if code == EXIT_JOB_BAD_INPUT or (code == EXIT_BAD_INPUT and output.error is not None):
        return FkJoinBadInputError(f"fkjoin refused the spec or input data: {detail}")
    if code == EXIT_RETRY:
        return FkJoinRetryableError(f"fkjoin refresh conflicted, nothing written (retry): {detail}")
    cause = "".join(f"\n{mask(line)}" for line in output.cause)
    tail = "\n".join(mask(line) for line in list(output.tail)[-15:])
    return FkJoinJobError(f"fkjoin Spark job failed (exit {code}): {detail}{cause}\n{tail}")


def output_location(spec: Mapping[str, Any]) -> str | None:
    """The output table's path from a spec, or None for a catalog table (``name:``)."""
    output = spec.get("output")
    if isinstance(output, str):
        return output
    if isinstance(output, Mapping) and output.get("path"):
        return str(output["path"])
    return None


def fkjoin_cli_args(
    spec: Mapping[str, Any],
    *,
    full_refresh: bool = False,
    write_path: str = "auto",
    origin: Mapping[str, Any] | None = None,
) -> list[str]:
    """The ``fkjoin run`` arguments of one refresh, whether spark-submit or a Spark Connect client runs it.

    >>> fkjoin_cli_args({"kind": "foreign_key_join"}, full_refresh=True)
    ['run', '--full-refresh', '--spec-json', '{"kind": "foreign_key_join"}']
    """
    return [
        "run",
        *(["--full-refresh"] if full_refresh else []),
        *(["--write-path", write_path] if write_path != "auto" else []),
        *(["--origin", json.dumps(dict(origin), sort_keys=True)] if origin else []),
        "--spec-json",
        json.dumps(dict(spec), sort_keys=True),
    ]


def _joined(ours: Sequence[str], theirs: str | Sequence[str] | None) -> str | None:
    """A comma list of ``ours`` then ``theirs`` (a comma list or a list), each once, blanks dropped.

    >>> _joined(["/d/delta.jar"], "/x/aws.jar, /d/delta.jar,"), _joined([], None)
    ('/d/delta.jar,/x/aws.jar', None)
    """
    extra = theirs.split(",") if isinstance(theirs, str) else list(theirs or [])
    items = [item.strip() for item in [*ours, *extra] if item and item.strip()]
    return ",".join(dict.fromkeys(items)) or None


class FkJoinHook(BaseHook):
    """Run one refresh of a join spec on Spark, via the Spark provider's SparkSubmitHook.

    :param conn_id: the ``spark`` connection (must exist: there is no silent fallback).
    :param conf: extra Spark conf; wins over the defaults this hook adds.
    :param env_vars: environment of the driver (spark-submit's process in client mode; the driver pod or
        application master on Kubernetes and YARN).
    :param jars: comma-separated jars the job needs besides the engine's own, e.g. ``"/opt/hadoop-aws.jar"``:
        added after Delta's jars (``FKJOIN_DELTA_JARS`` or the repo's ``.jars/``) and the engine's jar,
        never instead of them (set ``FKJOIN_DELTA_JARS`` to change Delta's).
    :param packages: comma-separated Maven coordinates the job needs, added to Delta's coordinate when
        there are no local Delta jars, e.g. ``"org.apache.hadoop:hadoop-aws:3.4.1"``.
    :param application: the job file to submit (default: the one in this package; on Kubernetes give
        the path inside the image, e.g. ``local:///opt/fkjoin/fkjoin_job.py``).
    :param deploy_mode: ``client`` or ``cluster``; overrides the connection's ``deploy-mode`` extra.
    :param storage_options: ``deltalake`` storage options to read Delta logs on object stores (win over
        the connection's).
    :param storage_conn_id: an AWS, Google Cloud or Azure connection: ``deltalake`` storage options for
        the logs this hook reads, and ``spark.hadoop.*`` settings for the job (under ``conf``, which wins);
        see :mod:`airflow_provider_fkjoin.credentials`.
    :param spark_submit_kwargs: more SparkSubmitHook arguments (``executor_memory``, ``num_executors``...).
    :param spark_ui: start the driver's web UI (default off: it shows the job's conf and data to anyone
        who can reach the driver). A ``spark.ui.enabled`` in ``conf`` wins. With the UI off, the
        "Spark UI" link still points at a standalone master's or YARN's application page.
    :param noop_check: before starting Spark, read the inputs' and the output's Delta logs (``deltalake``,
        no JVM) and return the ``noop`` result at once when no input moved since the last refresh
        (:func:`~airflow_provider_fkjoin.engine.noop_result`); default on.
    :param finish_conf: applied to ``conf`` when the conf is first read, which is only once Spark is to run
        (the noop check does not read it): for settings a noop does not need and that are costly to
        compute, such as OpenLineage's parent job information (importing OpenLineage takes most of a
        second). Reading ``hook.conf`` applies it.
    :param fast_driver_start: start a client-mode driver with the class archive ``fkjoin jvm-archive``
        built for this JVM and Spark and the client compiler only (:mod:`airflow_provider_fkjoin.jvm_start`),
        after the user's ``spark.driver.extraJavaOptions``; default ``[fkjoin] fast_driver_start`` (on).
        Without an archive nothing is added and the task log says how to build one.
    """

    conn_name_attr = "conn_id"
    default_conn_name = "spark_default"
    hook_name = "FkJoin"

    def __init__(
        self,
        conn_id: str = default_conn_name,
        *,
        conf: Mapping[str, Any] | None = None,
        env_vars: Mapping[str, str] | None = None,
        jars: str | None = None,
        packages: str | None = None,
        application: str | None = None,
        deploy_mode: str | None = None,
        storage_options: Mapping[str, str] | None = None,
        spark_submit_kwargs: Mapping[str, Any] | None = None,
        spark_ui: bool = False,
        noop_check: bool = True,
        storage_conn_id: str | None = None,
        finish_conf: Callable[[dict[str, Any]], Mapping[str, Any]] | None = None,
        fast_driver_start: bool | None = None,
    ) -> None:
        super().__init__()
        self.fast_driver_start = fast_driver_start
        self.conn_id = conn_id
        self._conf: dict[str, Any] = dict(conf or {})
        self._finish_conf = finish_conf
        self.env_vars = {str(k): str(v) for k, v in (env_vars or {}).items()}
        self.jars = jars
        self.packages = packages
        self.application = application or FKJOIN_JOB_FILE
        self.deploy_mode = deploy_mode
        self._explicit_storage_options = dict(storage_options) if storage_options else None
        self.storage_conn_id = storage_conn_id
        self.spark_submit_kwargs = dict(spark_submit_kwargs or {})
        self.spark_ui = spark_ui
        self.noop_check = noop_check
        self._submit_hook: SparkSubmitHook | None = None
        self._connect_run: SparkConnectRun | None = None
        #: What the last refresh's driver printed (its result, error, phases), once it started.
        self.driver_output: DriverOutput | None = None
        #: The last spark-submit's phases (:func:`submit_phases`), once it returned.
        self.submit_phases: dict[str, float] | None = None
        #: The Spark Connect operations ``on_kill`` interrupted (their ids).
        self.interrupted: list[str] = []
        self._killed = False

    @property
    def conf(self) -> dict[str, Any]:
        """The extra Spark conf, with ``finish_conf`` applied (the first time it is read)."""
        if self._finish_conf is not None:
            finish, self._finish_conf = self._finish_conf, None
            self._conf = dict(finish(self._conf))
        return self._conf

    @conf.setter
    def conf(self, value: Mapping[str, Any]) -> None:
        self._conf = dict(value)

    @cached_property
    def storage_credentials(self) -> StorageCredentials:
        """The ``storage_conn_id`` connection's credentials (read once, when first needed)."""
        if not self.storage_conn_id:
            return StorageCredentials()
        try:
            return storage_credentials(self.storage_conn_id)
        except CredentialsError as error:
            raise FkJoinBadInputError(f"storage_conn_id: {error}") from error

    @property
    def storage_options(self) -> dict[str, str] | None:
        """``deltalake`` storage options: the connection's, with explicit ``storage_options`` winning."""
        merged = {**self.storage_credentials.storage_options, **(self._explicit_storage_options or {})}
        return merged or None

    @property
    def spark_ui_enabled(self) -> bool:
        """Whether the driver UI will run: ``conf["spark.ui.enabled"]`` if given, else ``spark_ui``."""
        return str(self.conf.get("spark.ui.enabled", self.spark_ui)).strip().lower() == "true"

    def get_conn(self) -> Any:
        """The Spark connection, checked to exist."""
        try:
            return self.get_connection(self.conn_id)
        except AirflowNotFoundException as error:
            raise FkJoinConnectionError(
                f"Spark connection {self.conn_id!r} does not exist. Create it (Admin > Connections, or "
                f'AIRFLOW_CONN_{self.conn_id.upper()}=\'{{"conn_type": "spark", "host": "local[2]"}}\' '
                "for local Spark; host spark://HOST:7077, yarn or k8s://https://HOST for a cluster)."
            ) from error

    def _delta_jars(
        self, deploy_mode: str, conf: Mapping[str, str] | None = None
    ) -> tuple[str | None, str | None]:
        """``--jars`` and ``--packages``: Delta's local jars (or its Maven coordinate), the S3A connector's
        when ``conf`` configures S3A and, when the driver runs here (client mode), the engine's jar, without
        which the refresh writes through MERGE; then the operator's own ``jars`` and ``packages``, added and
        never instead (a SparkSubmitOperator habit such as ``jars="/opt/hadoop-aws.jar"`` must not lose
        Delta). A cluster-mode driver runs elsewhere: a local path means nothing there, so it gets no
        engine jar from here.

        With ``FKJOIN_DELTA_JARS=/opt/delta/delta-spark.jar`` and the engine's jar built::

            FkJoinHook(jars="/opt/hadoop-aws.jar")._delta_jars("client")
            # ('/opt/delta/delta-spark.jar,/opt/fkjoin/fkjoin-engine.jar,/opt/hadoop-aws.jar', None)
        """
        jars = _joined(local_jars(with_engine=deploy_mode != "cluster", conf=conf), self.jars)
        packages = _joined([] if delta_jars() else [DELTA_PACKAGE], self.packages)
        return jars, packages

    def _deploy_mode(self, connection: Any) -> str:
        return str(self.deploy_mode or connection.extra_dejson.get("deploy-mode") or "client")

    def _spark_conf(self, master: str, deploy_mode: str) -> dict[str, str]:
        conf: dict[str, str] = {
            "spark.ui.enabled": "true" if self.spark_ui else "false",
            REDACTION_CONF: REDACTION_REGEX,
        }
        if deploy_mode != "cluster":
            conf["spark.pyspark.driver.python"] = sys.executable
            if ENGINE_LOG4J.is_file():
                conf["spark.driver.extraJavaOptions"] = f"-Dlog4j.configurationFile=file:{ENGINE_LOG4J}"
        if master.startswith(_LOCAL_MASTERS):
            conf["spark.pyspark.python"] = sys.executable
        if master.startswith("yarn") and deploy_mode == "cluster":
            # YARN would rerun a failed driver as a second attempt: a bad spec twice, a conflict retried
            # behind Airflow's back. Airflow's retries decide, knowing which failures are worth one.
            conf["spark.yarn.maxAppAttempts"] = "1"
        conf.update(self.storage_credentials.spark_conf())
        conf.update({str(k): str(v) for k, v in self.conf.items()})
        if deploy_mode != "cluster" and self._fast_driver_start():
            self._add_driver_start_options(conf, master)
        return conf

    def _fast_driver_start(self) -> bool:
        if self.fast_driver_start is not None:
            return self.fast_driver_start
        return airflow_conf.getboolean("fkjoin", "fast_driver_start", fallback=True)

    def _add_driver_start_options(self, conf: dict[str, str], master: str) -> None:
        """Append the class archive and the short-lived driver's flags to the driver's JVM options
        (after the user's, leaving out a kind of option they set), or log how to get them."""
        env = self.submit_env(master) or dict(os.environ)
        options = driver_java_options(env)
        if options is None:
            self.log.info(
                "The Spark driver starts without a class archive (none for this JVM and Spark in %s): "
                "run `fkjoin jvm-archive` once on this machine (about a minute) for a faster start",
                archive_dir(env),
            )
            return
        merged = merge_java_options(conf.get(DRIVER_JAVA_OPTIONS), options, env.get("SPARK_SUBMIT_OPTS", ""))
        if merged:
            conf[DRIVER_JAVA_OPTIONS] = merged

    def check_blocking(self, master: str, deploy_mode: str) -> None:
        """Refuse settings that make spark-submit return while the refresh still runs.

        The task would then read the output's log before the refresh committed and report a ``noop``
        while the job goes on writing: downstream tasks and asset consumers would run on stale data.
        Spark also refuses cluster deploy mode for Python applications on a standalone master.
        """
        for name in NON_BLOCKING_KWARGS:
            if self.spark_submit_kwargs.get(name):
                raise FkJoinBadInputError(
                    f"spark_submit_kwargs.{name}: makes spark-submit return as soon as the application is "
                    "submitted, so the task would report the refresh before it ran; remove it (the hook "
                    "waits for the application and reads its result and exit code)"
                )
        for key in NON_BLOCKING_CONF:
            if str(self.conf.get(key, "true")).strip().lower() == "false":
                raise FkJoinBadInputError(
                    f"conf {key}=false: spark-submit would return before the refresh finished and the task "
                    "would report it unfinished; remove the setting"
                )
        if master.startswith("spark://") and deploy_mode == "cluster":
            raise FkJoinBadInputError(
                f"deploy mode cluster on the standalone master {master}: Spark does not run Python "
                "applications in cluster mode there; use client mode (the default)"
            )

    def build_submit_hook(
        self,
        spec: Mapping[str, Any],
        on_line: Callable[[str], None] | None = None,
        *,
        full_refresh: bool = False,
        write_path: str = "auto",
        origin: Mapping[str, Any] | None = None,
    ) -> SparkSubmitHook:
        """The SparkSubmitHook for one refresh of ``spec`` (checks the connection first).

        Every credential in the conf or ``env_vars`` is handed to Airflow's secrets masker here, so the
        task log hides it wherever it shows up (spark-submit echoing its conf, a JVM error message).
        """
        write_path = parse_write_path(write_path)
        connection = self.get_conn()
        master = _master_of(connection)
        deploy_mode = self._deploy_mode(connection)
        self.check_blocking(master, deploy_mode)
        is_cluster_manager = master.startswith(("yarn", "k8s://"))
        conf = self._spark_conf(master, deploy_mode)
        jars, packages = self._delta_jars(deploy_mode, conf)
        kind = str(spec.get("kind", "join"))
        name = f"fkjoin-{kind}"
        location = output_location(spec)
        if location:
            name += "-" + (location.rstrip("/").rsplit("/", 1)[-1] or "output")
        for key, value in [*conf.items(), *self.env_vars.items()]:
            if secret_values([(key, value)]):
                mask_secret(value, key)
        kwargs: dict[str, Any] = {
            "conf": conf,
            "conn_id": self.conn_id,
            "jars": jars,
            "packages": packages,
            "name": name,
            "application_args": fkjoin_cli_args(
                spec, full_refresh=full_refresh, write_path=write_path, origin=origin
            ),
            # env vars reach a YARN/K8s driver as conf; elsewhere they go to spark-submit's environment.
            "env_vars": self.env_vars if (self.env_vars and is_cluster_manager) else None,
            "deploy_mode": self.deploy_mode,
        }
        kwargs.update(self.spark_submit_kwargs)
        from airflow_provider_fkjoin.hooks.submit import CapturingSparkSubmitHook

        return CapturingSparkSubmitHook(on_line=on_line or (lambda _line: None), **kwargs)

    def spark_submit_command(self, spec: Mapping[str, Any], **options: Any) -> list[str]:
        """The exact spark-submit argv ``run(spec, **options)`` runs (credentials included); ``options``
        are ``full_refresh``, ``write_path`` and ``origin``."""
        hook = self.build_submit_hook(spec, **options)
        return hook._build_spark_submit_command(self.application)

    def masked_command(self, spec: Mapping[str, Any], **options: Any) -> str:
        """The spark-submit command as the task log shows it: credentials replaced by ``******``.

        >>> FkJoinHook(conf={"fs.s3a.session.token": "IQoJb3JpZ2lu"}).masked_command(spec)  # doctest: +SKIP
        'spark-submit --master local[2] ... --conf fs.s3a.session.token=****** ...'
        """
        hook = self.build_submit_hook(spec, **options)
        return hook._mask_cmd(hook._build_spark_submit_command(self.application))

    def submit_env(self, master: str) -> dict[str, str] | None:
        """spark-submit's environment in client/local mode: ours plus ``env_vars``, spark-submit on PATH."""
        if master.startswith(("yarn", "k8s://")):
            return None
        env = dict(os.environ)
        env.update(self.env_vars)
        venv_bin = str(Path(sys.executable).parent)
        if (
            shutil.which("spark-submit", path=env.get("PATH")) is None
            and (Path(venv_bin) / "spark-submit").exists()
        ):
            env["PATH"] = os.pathsep.join([venv_bin, env.get("PATH", "")])
        return env

    def run(
        self,
        spec: Mapping[str, Any],
        *,
        on_spark_ui: Callable[[str], None] | None = None,
        full_refresh: bool = False,
        write_path: str = "auto",
        origin: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Run one refresh of ``spec`` and return the engine's result dict.

        :param on_spark_ui: called with the Spark UI URL as soon as it is known (for the extra link);
            with the driver UI off, only a standalone master's or YARN's application page is reported.
        :param full_refresh: rebuild the output from the inputs instead of applying their changes
            (``fkjoin run --full-refresh``): the escape when an output must be recomputed on purpose.
        :param write_path: ``auto`` (net-change commits where the engine can prove them, else MERGE) or
            ``merge`` (always Delta's MERGE: ``fkjoin run --write-path merge``).
        :param origin: who runs the refresh (the operator gives the task instance: ``dag_id``, ``run_id``,
            ``task_id``, ``map_index``, ``try_number``), recorded in the refresh's commit; in cluster mode
            only a commit carrying it is taken for this refresh's result.
        :raises FkJoinConnectionError: the Spark connection does not exist.
        :raises FkJoinBadInputError: the output path is not a usable table location, or the engine refused
            the spec or the data (exit 2; no retry).
        :raises FkJoinRetryableError: a concurrent refresh committed first (exit 75).
        :raises FkJoinJobError: any other failure.
        """
        location = output_location(spec)
        if location:
            try:
                location = check_location(location)
            except ValueError as error:
                raise FkJoinBadInputError(f"output.path: {error}") from error
        if self.noop_check and not full_refresh:
            unchanged = self.unchanged_result(spec)
            if unchanged is not None:
                return unchanged
        connection = self.get_conn()
        from airflow_provider_fkjoin.hooks.connect import connect_url

        url = connect_url(connection, self.conn_id)
        if url is not None:
            write_path = parse_write_path(write_path)
            args = fkjoin_cli_args(spec, full_refresh=full_refresh, write_path=write_path, origin=origin)
            return self.run_connect(url, args)
        before = self._output_version(location)
        master = _master_of(connection)
        extra = connection.extra_dejson
        ui_enabled = self.spark_ui_enabled

        def app_info(info: dict[str, Any]) -> None:
            driver_ui = info.get("ui_url") if ui_enabled else None
            url = spark_ui_url(master, app_id=info.get("app_id"), driver_ui=driver_ui, conn_extra=extra)
            if url and on_spark_ui is not None:
                on_spark_ui(url)

        output = self.driver_output = DriverOutput(on_app_info=app_info)
        hook = self.build_submit_hook(
            spec, on_line=output.feed, full_refresh=full_refresh, write_path=write_path, origin=origin
        )
        if self._killed:
            raise FkJoinJobError("the task was killed before its Spark application started")
        self._submit_hook = hook
        early = spark_ui_url(master, conn_extra=extra)
        if early and on_spark_ui is not None:
            on_spark_ui(early)
        env = self.submit_env(master)
        started = time.monotonic()
        try:
            hook.submit(self.application, **({"env": env} if env is not None else {}))
        except AirflowException as error:
            raise self._failure(hook, output, error) from error
        phases = self.submit_phases = submit_phases(started, output.seen_at, time.monotonic())
        self.log.info(
            "spark-submit phases: %s",
            ", ".join(f"{name.removesuffix('_s')} {seconds:.2f} s" for name, seconds in phases.items()),
        )
        yarn_app = getattr(hook, "_yarn_application_id", None)
        if yarn_app:
            app_info({"app_id": yarn_app})
        if output.result is not None:
            return {**output.result, "source": "driver_stdout"}
        if not location:
            raise FkJoinJobError(
                "the Spark job succeeded but its result is not in spark-submit's output and the output "
                "is a catalog table (no path to read the Delta log from)"
            )
        from airflow_provider_fkjoin.engine import refresh_result_from_commit

        self.log.info("Result not in spark-submit's output; reading it from %s's Delta log", location)
        return refresh_result_from_commit(location, before, self.storage_options, origin=origin)

    def unchanged_result(self, spec: Mapping[str, Any]) -> dict[str, Any] | None:
        """The ``noop`` result when no input moved since the output's last refresh, read from Delta logs
        without a JVM; None when Spark must run. A log that cannot be read here (an object store without
        ``storage_options``, say) is not an error: the refresh runs and the engine decides."""
        from airflow_provider_fkjoin.engine import SpecError, noop_result

        try:
            result = noop_result(dict(spec), self.storage_options)
        except SpecError as error:
            raise FkJoinBadInputError(str(error)) from error
        except Exception as error:
            self.log.warning("noop check skipped, the refresh runs: %s: %s", type(error).__name__, error)
            return None
        if result is not None:
            self.log.info(
                "no input moved since the refresh at output version %s (inputs %s): noop, Spark not started",
                result["output"]["version"],
                {side: info["to_version"] for side, info in result["inputs"].items()},
            )
        return result

    def _output_version(self, location: str | None) -> int | None:
        if not location:
            return None
        from airflow_provider_fkjoin.engine import TableMissingError, high_watermark

        try:
            return high_watermark(location, self.storage_options)
        except TableMissingError:
            return None

    @staticmethod
    def driver_exit_code(hook: SparkSubmitHook, output: DriverOutput) -> int | None:
        """The driver's own exit code: spark-submit's, except in cluster mode on YARN (spark-submit exits
        1 for any failed application; the code is in its diagnostics) and Kubernetes (spark-submit exits
        0; the driver container's ``exit code: N`` is in the pod status it prints)."""
        if output.yarn_exit_code is not None:
            return output.yarn_exit_code
        k8s_code = getattr(hook, "_spark_exit_code", None)
        if getattr(hook, "_is_kubernetes", False) and k8s_code:
            return int(k8s_code)
        return getattr(getattr(hook, "_submit_sp", None), "returncode", None)

    @classmethod
    def _failure(
        cls, hook: SparkSubmitHook, output: DriverOutput, error: AirflowException
    ) -> AirflowException:
        detail = (str(error).splitlines() or [""])[0][:500]
        return failure(cls.driver_exit_code(hook, output), output, detail, hook._mask_cmd)

    def connect_conf(self) -> dict[str, str]:
        """The Spark Connect session's settings: the storage connection's Hadoop settings (a session takes
        them without the ``spark.hadoop.`` prefix), then ``conf``. The server owns the static ones."""
        return {**self.storage_credentials.hadoop_conf, **{str(k): str(v) for k, v in self.conf.items()}}

    def run_connect(self, url: str, cli_args: list[str]) -> dict[str, Any]:
        """One refresh as a Spark Connect client (:class:`~.connect.SparkConnectRun`); its result."""
        from airflow_provider_fkjoin.hooks.connect import SparkConnectRun

        run = SparkConnectRun(url, conf=self.connect_conf(), env_vars=self.env_vars)
        self._connect_run = run
        if self._killed:
            raise FkJoinJobError("the task was killed before its Spark Connect session started")
        known = secret_values(
            [("token", part.split("=", 1)[1]) for part in url.split(";") if part.startswith("token=")]
            + [*run.conf.items(), *self.env_vars.items()]
        )
        for value in known:
            mask_secret(value)
        output = self.driver_output = DriverOutput()

        def line(text: str) -> None:
            output.feed(text)
            self.log.info("%s", mask_text(text, known))

        self.log.info("Spark Connect session %s on %s", run.session_id, mask_text(url.split("/;")[0], known))
        code = run.run(cli_args, line)
        if code == 0 and output.result is not None:
            return {**output.result, "source": "driver_stdout"}
        if code == 0:
            raise FkJoinJobError("the fkjoin Spark Connect client exited 0 without printing its result")
        raise failure(
            code, output, f"the Spark Connect client exited {code}", lambda text: mask_text(text, known)
        )

    def on_kill(self) -> None:
        """Stop the Spark application, whether or not spark-submit is still running.

        The Spark provider's ``on_kill`` kills spark-submit and, while it lives, the YARN application (the
        ``yarn`` CLI) and the Kubernetes driver pod. But Airflow signals the task's whole process group, so
        spark-submit is often gone first, and a cluster-mode application would go on writing. So, after
        it: a YARN application is killed through the ResourceManager's REST API when the connection has
        ``yarn_resourcemanager_webapp_address`` (else with ``yarn application -kill``, bounded in time),
        and a Kubernetes driver pod is deleted. A kill before spark-submit started stops it from starting.
        """
        self._killed = True
        if self._connect_run is not None:
            self.interrupted = self._connect_run.on_kill()
            self.log.info("Spark Connect operations interrupted: %s; session released", self.interrupted)
        hook = self._submit_hook
        if hook is None:
            return
        process = getattr(hook, "_submit_sp", None)
        was_running = process is not None and process.poll() is None
        hook.on_kill()
        app_id = getattr(hook, "_yarn_application_id", None)
        if app_id and getattr(hook, "_is_yarn_cluster_mode", False):
            if self.get_conn().extra_dejson.get("yarn_resourcemanager_webapp_address"):
                hook._kill_yarn_application(app_id)
            elif not was_running:  # the provider ran the yarn CLI only while spark-submit lived
                self._yarn_cli_kill(hook, app_id)
        if getattr(hook, "_kubernetes_driver_pod", None) and not was_running:
            hook._delete_driver_pod()

    def _yarn_cli_kill(self, hook: SparkSubmitHook, app_id: str, timeout: float = 4.0) -> None:
        """``yarn application -kill``: a JVM that must finish inside Airflow's grace period."""
        env = {**os.environ, **(getattr(hook, "_env", None) or {})}
        try:
            done = subprocess.run(
                ["yarn", "application", "-kill", app_id], env=env, capture_output=True, timeout=timeout
            )
            self.log.info("yarn application -kill %s: exit %s", app_id, done.returncode)
        except (OSError, subprocess.TimeoutExpired) as error:
            self.log.warning("could not kill YARN application %s: %s", app_id, error)


def _master_of(connection: Any) -> str:
    """The master URL SparkSubmitHook derives from a connection (same rules as the Spark provider)."""
    if (
        connection.conn_type == "spark"
        and connection.host
        and ("://" in connection.host or not connection.port)
    ):
        master = connection.host
    else:
        master = f"{connection.conn_type}://{connection.host or ''}"
    return f"{master}:{connection.port}" if connection.port else master


def __getattr__(name: str) -> Any:
    """``_CapturingSparkSubmitHook``, loaded on first use (:mod:`.submit`: it imports the Spark provider)."""
    if name == "_CapturingSparkSubmitHook":
        from airflow_provider_fkjoin.hooks.submit import CapturingSparkSubmitHook

        return CapturingSparkSubmitHook
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

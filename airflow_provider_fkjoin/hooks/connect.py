"""Running a refresh through a long-lived Spark Connect server: no JVM per task.

The engine runs as the ``fkjoin`` CLI in a child process of the task, as a Spark Connect client of the
server the ``spark_connect`` connection names (``sc://host:15002``): the same exit codes and result line
as under spark-submit, and the task's own process stays free of Spark. The child gets the server's URL
(with the connection's token, and a session id of its own) and the session settings in its environment,
never on its command line, so ``ps`` shows no credential.

The session is this refresh's alone, so stopping the refresh is exact: :meth:`SparkConnectRun.on_kill`
attaches to the same session id, interrupts whatever runs in it (Spark Connect keeps running a lost
client's operations until they time out), ends the child and releases the session on the server.

    run = SparkConnectRun("sc://spark-connect:15002/;token=...", conf={"spark.sql.shuffle.partitions": "8"})
    code, output = run.run(["run", "--spec-json", spec_json], on_line=log)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

#: How long ``on_kill`` waits for the server to interrupt and release the session: Airflow kills the
#: task's process group 5 seconds after it asked it to stop.
KILL_TIMEOUT_S = 3.0
#: How long the child gets to exit after SIGTERM before SIGKILL.
CHILD_GRACE_S = 1.0


def connect_url(connection: Any, conn_id: str) -> str | None:
    """The Spark Connect URL of a connection, or None when it is not one.

    A ``spark_connect`` connection (the Spark provider's type: host, port, ``login`` as user id,
    ``password`` as token, extra ``use_ssl``) gives the provider's own URL; a ``spark`` connection whose
    host is an ``sc://`` URL gives that URL (with its port).

    >>> from airflow.sdk import Connection
    >>> connect_url(Connection(conn_id="c", conn_type="spark", host="sc://spark-connect", port=15002), "c")
    'sc://spark-connect:15002'
    >>> connect = Connection(conn_id="c", conn_type="spark_connect", host="spark-connect", port=15002)
    >>> connect_url(connect, "c")  # looks the connection up by id  # doctest: +SKIP
    'sc://spark-connect:15002/'
    """
    if connection.conn_type == "spark_connect":
        from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook

        return SparkConnectHook(conn_id).get_connection_url()
    host = str(connection.host or "")
    if connection.conn_type == "spark" and host.startswith("sc://"):
        netloc_has_port = ":" in host.removeprefix("sc://").split("/", 1)[0]
        return f"{host}:{connection.port}" if connection.port and not netloc_has_port else host
    return None


def with_session_id(url: str, session_id: str) -> str:
    """``url`` with ``;session_id=...`` among its parameters.

    >>> with_session_id("sc://h:15002/;token=t", "s1"), with_session_id("sc://h:15002", "s1")
    ('sc://h:15002/;token=t;session_id=s1', 'sc://h:15002/;session_id=s1')
    """
    base, _, params = url.partition("/;")
    kept = [p for p in params.split(";") if p and not p.startswith("session_id=")] if params else []
    return f"{base.rstrip('/')}/;{';'.join([*kept, f'session_id={session_id}'])}"


class SparkConnectRun:
    """One refresh as a Spark Connect client in a child process (see the module docstring).

    :param url: the server's URL (:func:`connect_url`); a fresh session id is added to it.
    :param conf: session settings for the engine's session (``spark.conf.set``; static settings belong
        to the server).
    :param env_vars: more environment for the child.
    """

    def __init__(
        self, url: str, *, conf: Mapping[str, str] | None = None, env_vars: Mapping[str, str] | None = None
    ) -> None:
        self.session_id = str(uuid.uuid4())
        self.url = with_session_id(url, self.session_id)
        self.conf = {str(k): str(v) for k, v in (conf or {}).items()}
        self.env_vars = {str(k): str(v) for k, v in (env_vars or {}).items()}
        self._process: subprocess.Popen[str] | None = None
        self._killed = False

    def command(self, cli_args: Sequence[str]) -> list[str]:
        """The child's exact argv: this Python running the ``fkjoin`` CLI."""
        return [sys.executable, "-m", "airflow_provider_fkjoin.cli", *cli_args]

    def environment(self) -> dict[str, str]:
        """The child's environment: ours, ``env_vars``, the session's URL and settings."""
        return {
            **os.environ,
            **self.env_vars,
            "SPARK_REMOTE": self.url,
            "FKJOIN_SPARK_CONF": json.dumps(self.conf, sort_keys=True),
        }

    def run(self, cli_args: Sequence[str], on_line: Callable[[str], None]) -> int:
        """Run the CLI with ``cli_args`` and hand every output line (stdout and stderr) to ``on_line``;
        returns its exit code. A kill before the start starts nothing (exit code -15)."""
        if self._killed:
            return -15
        self._process = subprocess.Popen(
            self.command(cli_args),
            env=self.environment(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
        )
        assert self._process.stdout is not None
        for line in self._process.stdout:
            on_line(line.rstrip("\n"))
        return self._process.wait()

    def on_kill(self) -> list[str]:
        """Interrupt the session's operations, end the child, release the session; the ids of the
        operations interrupted (empty when nothing ran). Bounded by :data:`KILL_TIMEOUT_S`."""
        self._killed = True
        interrupted: list[str] = []
        if self._process is None:
            return interrupted

        def interrupt() -> None:
            # Spark Connect's own session class: unlike pyspark.sql.SparkSession's builder, it leaves this
            # process's PySpark in classic mode (no SPARK_CONNECT_MODE_ENABLED).
            from pyspark.sql.connect.session import SparkSession

            session = SparkSession.builder.remote(self.url).create()
            interrupted.extend(session.interruptAll())
            session.stop()  # releases the session on the server, for every client attached to it

        worker = threading.Thread(target=interrupt, name="fkjoin-connect-interrupt", daemon=True)
        worker.start()
        worker.join(KILL_TIMEOUT_S)  # the client's operation is interrupted while it waits for it
        if self._process.poll() is None:
            self._process.terminate()
        try:
            self._process.wait(CHILD_GRACE_S)
        except subprocess.TimeoutExpired:
            self._process.kill()
        return interrupted

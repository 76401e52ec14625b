"""A real Airflow 3.3 on 127.0.0.1 for end-to-end tests: api-server, scheduler, dag-processor and
triggerer from argv lists, an isolated AIRFLOW_HOME whose SQLite DB is a copy of a migrated template, the
LocalExecutor, SimpleAuthManager in all-admins mode unless the caller logs in (the REST calls carry a JWT
from ``/auth/token`` either way), a small REST client, and a component restarted with other settings.

    with running_airflow(home, dags_folder, db_template) as stack:
        run_id = run_to_end(stack, "fkjoin_kip213_fk_join", {"seed": False})
        stack.restart("scheduler", {"AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "True"})
"""

from __future__ import annotations

import datetime as dt
import json
import os
import secrets
import shutil
import sys
import urllib.error
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from driver_jvm import driver_jvm_env
from e2e_support import VENV_BIN, Service, free_port, http_error_body, http_json, wait_for

AIRFLOW = str(VENV_BIN / "airflow")


@dataclass
class AirflowStack:
    """The running servers and a small REST client for them."""

    base_url: str
    home: Path
    services: list[Service]
    token: str = field(default="", repr=False)

    def api(self, method: str, path: str, body: Any = None) -> Any:
        """Call ``/api/v2{path}`` with the JWT; an HTTP error fails with the response body."""
        try:
            return http_json(
                f"{self.base_url}/api/v2{path}",
                method=method,
                body=body,
                headers={"Authorization": f"Bearer {self.token}"} if self.token else None,
            )
        except urllib.error.HTTPError as error:
            raise AssertionError(f"{method} {path}: HTTP {error.code}: {http_error_body(error)}") from error

    def service(self, name: str) -> Service:
        return next(s for s in self.services if s.name == name)

    def restart(self, name: str, env: Mapping[str, str]) -> None:
        """Stop the component ``name`` (``scheduler``, ``dag-processor`` or ``triggerer``), start it again
        with ``env`` over its environment, and wait until the health check reports a heartbeat of the new
        process."""
        service = self.service(name)
        service.stop()
        service.env = {**(service.env or {}), **env}
        started = dt.datetime.now(dt.UTC)
        service.start()
        part = name.replace("-", "_")

        def beating() -> bool:
            health = http_json(f"{self.base_url}/api/v2/monitor/health")[part]
            beat = health.get(f"latest_{part}_heartbeat")
            if health.get("status") != "healthy" or not beat:
                return False
            at = dt.datetime.fromisoformat(beat)
            return (at if at.tzinfo else at.replace(tzinfo=dt.UTC)) > started

        wait_for(beating, timeout_s=180, what=f"the restarted {name}'s heartbeat", services=self.services)


def airflow_env(home: Path, port: int, dags_folder: Path) -> dict[str, str]:
    """Environment of every Airflow process: isolated home, SQLite, LocalExecutor, fixed ports; the
    scheduler creates only the runs a test triggers (``USE_JOB_SCHEDULE`` off) unless told otherwise."""
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "_AIRFLOW"))}
    base_url = f"http://127.0.0.1:{port}"
    return {
        **inherited,
        "PATH": os.pathsep.join([str(VENV_BIN), inherited.get("PATH", "")]),
        "PYSPARK_PYTHON": sys.executable,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__PARALLELISM": "4",
        "AIRFLOW__CORE__AUTH_MANAGER": (
            "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
        ),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{base_url}/execution/",
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__BASE_URL": base_url,
        "AIRFLOW__API__WORKERS": "1",
        # one secret shared by the api-server (which signs task tokens) and the scheduler; never logged
        "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(32),
        "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
        "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
        "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "1",
        # only the run the test triggers: unpausing must not also start the schedule's latest interval
        "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False",
        # the example DAG's sensor takes its deferrable default from here: it waits in the triggerer
        "AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE": "True",
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
        "FKJOIN_WAREHOUSE": str(home / "warehouse"),
        **driver_jvm_env(),
    }


def healthy(stack: AirflowStack) -> bool:
    health = http_json(f"{stack.base_url}/api/v2/monitor/health")
    parts = ("metadatabase", "scheduler", "triggerer", "dag_processor")
    return all((health.get(part) or {}).get("status") == "healthy" for part in parts)


@contextmanager
def running_airflow(
    home: Path,
    dags_folder: Path,
    db_template: Path,
    env: Mapping[str, str] | None = None,
    login: tuple[str, str] | None = None,
) -> Iterator[AirflowStack]:
    """api-server, scheduler, dag-processor and triggerer on 127.0.0.1 (``env`` overrides the defaults of
    :func:`airflow_env`) over a copy of ``db_template`` (an ``airflow.db`` that ``airflow db migrate``
    made), stopped by PID at the end. The REST client's token is the all-admins one, or with ``login``
    (user name, password; real authentication) that user's."""
    port = free_port()
    environment = {**airflow_env(home, port, dags_folder), **(env or {})}
    logs = home / "process-logs"
    logs.mkdir()
    shutil.copyfile(db_template, home / "airflow.db")
    commands = {
        "api-server": [AIRFLOW, "api-server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
        "scheduler": [AIRFLOW, "scheduler"],
        "dag-processor": [AIRFLOW, "dag-processor"],
        "triggerer": [AIRFLOW, "triggerer"],
    }
    services = [
        Service(name, argv, logs / f"{name}.log", env=environment, cwd=home)
        for name, argv in commands.items()
    ]
    stack = AirflowStack(f"http://127.0.0.1:{port}", home, services)
    try:
        for service in services:
            service.start()
        wait_for(
            lambda: healthy(stack), timeout_s=180, what="all Airflow components healthy", services=services
        )
        token = (
            user_token(stack, *login) if login else http_json(f"{stack.base_url}/auth/token")["access_token"]
        )
        assert token.count(".") == 2, "the token is not a JWT"
        stack.token = token
        yield stack
    finally:
        for service in reversed(services):
            service.stop()


def user_token(stack: AirflowStack, username: str, password: str) -> str:
    """A JWT for ``username`` from the simple auth manager's ``POST /auth/token``."""
    body = {"username": username, "password": password}
    return str(http_json(f"{stack.base_url}/auth/token", method="POST", body=body)["access_token"])


def parsed(stack: AirflowStack, dag_id: str) -> Any:
    """Wait until the dag-processor has parsed ``dag_id`` without import errors; its REST record."""

    def found() -> Any:
        try:
            return stack.api("GET", f"/dags/{dag_id}")
        except AssertionError:
            return None

    what = f"the dag-processor to parse {dag_id}"
    dag = wait_for(found, timeout_s=180, what=what, services=stack.services)
    assert not dag.get("has_import_errors"), stack.api("GET", "/importErrors")
    return dag


def trigger_run(stack: AirflowStack, dag_id: str, conf: dict[str, Any]) -> str:
    """Trigger ``dag_id`` with ``conf`` over the REST API; its run id. SQLite refuses a write with "Database
    error" while the scheduler holds its lock; the write was rolled back, so it is asked again."""
    created = wait_for(
        lambda: stack.api("POST", f"/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf}),
        timeout_s=120,
        what=f"a run of {dag_id}",
        services=stack.services,
    )
    return str(created["dag_run_id"])


def wait_run(stack: AirflowStack, dag_id: str, run_id: str, timeout_s: float = 600) -> None:
    """Wait for a run to end; fail unless it succeeded."""
    path = f"/dags/{dag_id}/dagRuns/{quote(run_id, safe='')}"

    def finished() -> str | None:
        state = stack.api("GET", path)["state"]
        return state if state in ("success", "failed") else None

    final = wait_for(finished, timeout_s=timeout_s, what=f"{dag_id} run {run_id}", services=stack.services)
    assert final == "success", f"{dag_id} {run_id}: {stack.api('GET', f'{path}/taskInstances')}"


def run_to_end(stack: AirflowStack, dag_id: str, conf: dict[str, Any]) -> str:
    """Trigger ``dag_id`` with ``conf`` over the REST API; its run id once it succeeded."""
    run_id = trigger_run(stack, dag_id, conf)
    wait_run(stack, dag_id, run_id)
    return run_id

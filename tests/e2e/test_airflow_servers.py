"""A real Airflow 3.3 (api-server, scheduler, dag-processor, triggerer) running the KIP-99 example DAG.

The servers run on 127.0.0.1 with an isolated AIRFLOW_HOME, SQLite and the LocalExecutor (Airflow 3 runs
the LocalExecutor on SQLite; ``airflow standalone`` does the same), the repo's ``dags/`` as the DAGs
folder, SimpleAuthManager in all-admins mode (no login; the REST calls still carry a JWT from
``/auth/token``) and the ``spark`` connection on local Spark. The test drives everything over the REST
API: unpause, trigger, wait for success; then it checks that the high-watermark sensor waited in the
triggerer, reads the output asset's event extra and the join task's extra links back, and saves a
screenshot of the DAG's grid view (headless Chromium) to ``test-artifacts/``.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import urllib.error
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from e2e_support import ARTIFACTS, REPO, VENV_BIN, Service, free_port, http_error_body, http_json, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

DAG_ID = "fkjoin_kip99_global_table"
SENSOR_TASK = "products_caught_up"
JOIN_TASK = "enrich_orders"
TRIGGER_CLASS = "airflow_provider_fkjoin.triggers.high_watermark.HighWatermarkTrigger"
CHROMIUM = Path("/usr/bin/chromium")
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


def _airflow_env(home: Path, port: int) -> dict[str, str]:
    """Environment of every Airflow process: isolated home, SQLite, LocalExecutor, fixed ports."""
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "_AIRFLOW"))}
    base_url = f"http://127.0.0.1:{port}"
    return {
        **inherited,
        "PATH": os.pathsep.join([str(VENV_BIN), inherited.get("PATH", "")]),
        "PYSPARK_PYTHON": sys.executable,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
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
    }


def _healthy(stack: AirflowStack) -> bool:
    health = http_json(f"{stack.base_url}/api/v2/monitor/health")
    parts = ("metadatabase", "scheduler", "triggerer", "dag_processor")
    return all((health.get(part) or {}).get("status") == "healthy" for part in parts)


@pytest.fixture(scope="module")
def airflow_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowStack]:
    """api-server, scheduler, dag-processor and triggerer on 127.0.0.1, stopped by PID at the end."""
    home = tmp_path_factory.mktemp("airflow-home")
    port = free_port()
    env = _airflow_env(home, port)
    logs = home / "process-logs"
    logs.mkdir()
    with (logs / "db-migrate.log").open("wb") as out:
        migrated = subprocess.run(
            [AIRFLOW, "db", "migrate"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=300,
            check=False,
        )
    assert migrated.returncode == 0, (logs / "db-migrate.log").read_text()[-3000:]
    commands = {
        "api-server": [AIRFLOW, "api-server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
        "scheduler": [AIRFLOW, "scheduler"],
        "dag-processor": [AIRFLOW, "dag-processor"],
        "triggerer": [AIRFLOW, "triggerer"],
    }
    services = [
        Service(name, argv, logs / f"{name}.log", env=env, cwd=home) for name, argv in commands.items()
    ]
    stack = AirflowStack(f"http://127.0.0.1:{port}", home, services)
    try:
        for service in services:
            service.start()
        wait_for(
            lambda: _healthy(stack), timeout_s=180, what="all Airflow components healthy", services=services
        )
        token = http_json(f"{stack.base_url}/auth/token")["access_token"]
        assert token.count(".") == 2, "the token is not a JWT"
        stack.token = token
        yield stack
    finally:
        for service in reversed(services):
            service.stop()


def _screenshot(url: str, target: Path, profile: Path) -> None:
    """A PNG of ``url`` from headless Chromium (flags for a machine without outside network)."""
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: run scripts/setup-e2e.sh (installs Debian's chromium)")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.unlink(missing_ok=True)
    argv = [
        str(CHROMIUM),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        "--window-size=1600,1000",
        # let the single-page app log in (all-admins redirect), fetch the grid and render before the shot
        "--virtual-time-budget=20000",
        f"--screenshot={target}",
        url,
    ]
    done = subprocess.run(argv, capture_output=True, timeout=180, check=False)
    assert done.returncode == 0 and target.is_file(), done.stderr.decode(errors="replace")[-2000:]
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


JOIN_DAG = "fkjoin_kip213_fk_join"
REPORT_DAG = "fkjoin_orders_report"


def _parsed(stack: AirflowStack, dag_id: str) -> Any:
    def parsed() -> Any:
        try:
            return stack.api("GET", f"/dags/{dag_id}")
        except AssertionError:
            return None

    dag = wait_for(
        parsed, timeout_s=180, what=f"the dag-processor to parse {dag_id}", services=stack.services
    )
    assert not dag.get("has_import_errors"), stack.api("GET", "/importErrors")
    return dag


def _run_to_end(stack: AirflowStack, dag_id: str, conf: dict[str, Any]) -> str:
    """Trigger ``dag_id`` with ``conf`` over the REST API; its run id once it succeeded."""
    run_id = stack.api("POST", f"/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf})["dag_run_id"]
    path = f"/dags/{dag_id}/dagRuns/{quote(run_id, safe='')}"

    def finished() -> str | None:
        state = stack.api("GET", path)["state"]
        return state if state in ("success", "failed") else None

    final = wait_for(finished, timeout_s=600, what=f"{dag_id} run {run_id}", services=stack.services)
    assert final == "success", f"{dag_id} {run_id}: {stack.api('GET', f'{path}/taskInstances')}"
    return run_id


def _report_runs(stack: AirflowStack) -> list[dict[str, Any]]:
    return stack.api("GET", f"/dags/{REPORT_DAG}/dagRuns?order_by=run_after")["dag_runs"]


def _finished_report_runs(stack: AirflowStack, count: int) -> list[dict[str, Any]]:
    def done() -> list[dict[str, Any]] | None:
        runs = _report_runs(stack)
        return runs if len(runs) >= count and all(r["state"] in ("success", "failed") for r in runs) else None

    return wait_for(done, timeout_s=600, what=f"{count} run(s) of {REPORT_DAG}", services=stack.services)


def test_kip99_example_dag_on_real_airflow(airflow_stack: AirflowStack, tmp_path: Path) -> None:
    stack = airflow_stack
    services = stack.services
    _parsed(stack, DAG_ID)
    stack.api("PATCH", f"/dags/{DAG_ID}", {"is_paused": False})
    run = stack.api("POST", f"/dags/{DAG_ID}/dagRuns", {"logical_date": None, "conf": {}})
    run_id = run["dag_run_id"]
    run_path = f"/dags/{DAG_ID}/dagRuns/{quote(run_id, safe='')}"

    sensor_seen: dict[str, Any] = {"states": [], "trigger": None, "triggerer_job": None}

    def run_finished() -> str | None:
        sensor = stack.api("GET", f"{run_path}/taskInstances/{SENSOR_TASK}")
        if not sensor_seen["states"] or sensor_seen["states"][-1] != sensor.get("state"):
            sensor_seen["states"].append(sensor.get("state"))
        if sensor.get("trigger"):
            sensor_seen["trigger"] = sensor["trigger"]
        if sensor.get("triggerer_job"):
            sensor_seen["triggerer_job"] = sensor["triggerer_job"]
        state = stack.api("GET", run_path)["state"]
        return state if state in ("success", "failed") else None

    final = wait_for(
        run_finished, timeout_s=600, what=f"run {run_id} to finish", services=services, interval_s=1.0
    )
    tis = stack.api("GET", f"{run_path}/taskInstances")["task_instances"]
    summary = {ti["task_id"]: ti["state"] for ti in tis}
    assert final == "success", f"run {run_id} {final}: {summary}\n{stack.service('scheduler').tail()}"
    assert set(summary.values()) == {"success"}, summary

    # The join's result: XCom, the output asset's event extra, the extra links.
    result = stack.api("GET", f"{run_path}/taskInstances/{JOIN_TASK}/xcomEntries/return_value")["value"]
    result = json.loads(result) if isinstance(result, str) else result
    events = stack.api(
        "GET",
        f"/assets/events?source_dag_id={DAG_ID}&source_run_id={quote(run_id, safe='')}"
        f"&source_task_id={JOIN_TASK}",
    )["asset_events"]
    assert len(events) == 1, events
    extra = events[0]["extra"]
    assert events[0]["uri"].endswith("/orders_enriched"), events[0]
    assert extra["mode"] == result["mode"] == "full"
    assert extra["version"] == result["output"]["version"]
    assert extra["rows"]["inserted"] == result["rows"]["inserted"] > 0

    links = stack.api("GET", f"{run_path}/taskInstances/{JOIN_TASK}/links")["extra_links"]
    assert set(links) >= {"Spark UI", "Output table"}, links
    assert links["Output table"] and "orders_enriched" in links["Output table"], links
    assert links["Spark UI"], links

    # What a person sees: the DAG's grid with the finished run.
    shot = ARTIFACTS / "airflow-grid-kip99.png"
    _screenshot(f"{stack.base_url}/dags/{DAG_ID}", shot, tmp_path / "chromium-profile")
    assert shot.stat().st_size > 20_000, "the screenshot looks empty"

    # The sensor deferred and its trigger ran in the triggerer: seen live over the API (the TI's state,
    # its trigger's class, the triggerer job holding it) and in the trigger's log, which the triggerer
    # writes beside the task's log.
    assert "deferred" in sensor_seen["states"], (
        f"{SENSOR_TASK} never deferred (states seen: {sensor_seen['states']}); the example DAG's sensor "
        "must be deferrable and start before the bootstrap has caught up"
    )
    assert (sensor_seen["trigger"] or {}).get("classpath") == TRIGGER_CLASS, sensor_seen
    picked_up = (sensor_seen["triggerer_job"] or {}).get("job_type") == "TriggererJob"
    trigger_logs = list(
        (stack.home / "logs" / f"dag_id={DAG_ID}" / f"run_id={run_id}" / f"task_id={SENSOR_TASK}").glob(
            "attempt=*.log.trigger.*.log"
        )
    )
    ran = any(" starting" in log.read_text(errors="replace") for log in trigger_logs)
    assert picked_up or ran, (sensor_seen, trigger_logs)


def test_an_asset_scheduled_dag_runs_only_when_the_join_changed_its_output(
    airflow_stack: AirflowStack,
) -> None:
    """The KIP-213 join emits its output's asset event only when the refresh changed the output. A run
    with nothing new (seed off) is a noop decided from the Delta logs without Spark, and emits nothing:
    the report DAG scheduled on the output runs after the first and the third join runs, never the
    second. Its second run's triggering events prove it: they come from the third run alone."""
    stack = airflow_stack
    for dag_id in (JOIN_DAG, REPORT_DAG):
        _parsed(stack, dag_id)
        stack.api("PATCH", f"/dags/{dag_id}", {"is_paused": False})

    first = _run_to_end(stack, JOIN_DAG, {})
    [report] = _finished_report_runs(stack, 1)
    assert report["state"] == "success" and report["run_type"] == "asset_triggered", report

    quiet = _run_to_end(stack, JOIN_DAG, {"seed": False})
    path = f"/dags/{JOIN_DAG}/dagRuns/{quote(quiet, safe='')}/taskInstances/orders_customers"
    result = stack.api("GET", f"{path}/xcomEntries/return_value")["value"]
    result = json.loads(result) if isinstance(result, str) else result
    assert (result["mode"], result["source"]) == ("noop", "precheck"), result
    quiet_events = stack.api(
        "GET", f"/assets/events?source_dag_id={JOIN_DAG}&source_run_id={quote(quiet, safe='')}"
    )
    assert quiet_events["asset_events"] == [], quiet_events

    third = _run_to_end(stack, JOIN_DAG, {})
    runs = _finished_report_runs(stack, 2)
    assert len(runs) == 2 and all(r["state"] == "success" for r in runs), runs
    upstream = stack.api(
        "GET", f"/dags/{REPORT_DAG}/dagRuns/{quote(runs[1]['dag_run_id'], safe='')}/upstreamAssetEvents"
    )["asset_events"]
    assert {event["source_run_id"] for event in upstream} == {third}, (first, quiet, third, upstream)
    assert all(event["uri"].endswith("/orders_customers") for event in upstream), upstream

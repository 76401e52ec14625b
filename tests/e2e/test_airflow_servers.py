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
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from airflow_stack import AirflowStack, parsed, running_airflow
from e2e_support import ARTIFACTS, REPO, wait_for

pytestmark = pytest.mark.timeout(1800)  # the module fixture (db migrate, start-up) counts too

DAG_ID = "fkjoin_kip99_global_table"
SENSOR_TASK = "products_caught_up"
JOIN_TASK = "enrich_orders"
TRIGGER_CLASS = "airflow_provider_fkjoin.triggers.high_watermark.HighWatermarkTrigger"
CHROMIUM = Path("/usr/bin/chromium")


@pytest.fixture(scope="module")
def airflow_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowStack]:
    """The four Airflow components with the repo's ``dags/``, on 127.0.0.1, for this module's tests."""
    with running_airflow(tmp_path_factory.mktemp("airflow-home"), REPO / "dags") as stack:
        yield stack


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


def test_kip99_example_dag_on_real_airflow(airflow_stack: AirflowStack, tmp_path: Path) -> None:
    stack = airflow_stack
    services = stack.services
    parsed(stack, DAG_ID)
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

    # The sensor deferred and its trigger ran in the triggerer. A short deferral (the bootstrap has often
    # caught up by the trigger's first look) can fall between two polls of the API, so the durable
    # evidence decides: the triggerer writes a trigger log beside the task's log only for a deferred task,
    # and this trigger logs each decision about its target. The live observations, when a poll caught
    # them, must agree.
    trigger_dir = stack.home / "logs" / f"dag_id={DAG_ID}" / f"run_id={run_id}" / f"task_id={SENSOR_TASK}"

    def trigger_log() -> str | None:
        text = "".join(p.read_text(errors="replace") for p in trigger_dir.glob("attempt=*.log.trigger.*.log"))
        return text if " starting" in text and "products_global" in text else None

    wait_for(trigger_log, timeout_s=120, what=f"{SENSOR_TASK}'s trigger log", services=services)
    if sensor_seen["trigger"]:
        assert sensor_seen["trigger"].get("classpath") == TRIGGER_CLASS, sensor_seen
    if sensor_seen["triggerer_job"]:
        assert sensor_seen["triggerer_job"].get("job_type") == "TriggererJob", sensor_seen
    assert "success" in sensor_seen["states"] or summary[SENSOR_TASK] == "success", sensor_seen

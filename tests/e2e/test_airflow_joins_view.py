"""The Joins view on a real Airflow: the api-server with the provider's plugin, real logins (the simple auth
manager, one DAG hidden from the viewer), the example foreign-key DAG run twice, then an input moved
without a refresh. The view must list the output with the lag ``fkjoin status`` reports (a Spark session
reading the same tables: an independent path), its history must be the two runs' results as their XComs
hold them, the endpoints must refuse an anonymous request (401) and a DAG the user may not read (403),
and headless Chromium must show all of it; a screenshot goes to ``test-artifacts/``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from airflow_stack import (
    AirflowStack,
    parsed,
    run_to_end,
    running_airflow,
    trigger_run,
    user_token,
    wait_run,
)
from driver_jvm import driver_jvm_env
from e2e_support import ARTIFACTS, REPO, VENV_BIN, http_error_body, http_json, wait_for

pytestmark = pytest.mark.timeout(1800)

DAG_ID = "fkjoin_kip213_fk_join"
JOIN_TASK = "orders_customers"
HIDDEN_DAG = "fkjoin_kip99_global_table"
#: Every example DAG that writes a join output, and its join tasks (read from dags/ by hand).
EXAMPLE_JOINS = {
    DAG_ID: [JOIN_TASK],
    HIDDEN_DAG: ["bootstrap_products", "enrich_orders"],
    "fkjoin_multiway_business_reviews": ["business_reviews"],
    "fkjoin_self_join_card_txns": ["card_txn_pairs"],
    "fkjoin_windowed_ad_clicks": ["clicks_per_impression"],
    "fkjoin_windowed_errors_vs_last_week": ["errors_vs_last_week"],
}
PASSWORDS = {"admin": "admin-secret", "viewer": "viewer-secret"}
CHROMIUM = Path("/usr/bin/chromium")
E2E = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def view_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowStack]:
    home = tmp_path_factory.mktemp("airflow-home")
    passwords = home / "passwords.json"
    passwords.write_text(json.dumps(PASSWORDS))
    env = {
        "AIRFLOW__CORE__AUTH_MANAGER": "view_auth.OneDagHiddenAuthManager",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin,viewer:viewer",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
        "FKJOIN_TEST_HIDDEN_DAG": HIDDEN_DAG,
        "PYTHONPATH": os.pathsep.join(p for p in (str(E2E), os.environ.get("PYTHONPATH", "")) if p),
    }
    with running_airflow(home, REPO / "dags", env, login=("admin", PASSWORDS["admin"])) as stack:
        yield stack


def _run_all(stack: AirflowStack, dag_ids: list[str]) -> dict[str, str]:
    """Trigger ``dag_ids`` at once (the stack runs four tasks at a time); their run ids once all succeeded."""
    runs = {}
    for dag_id in dag_ids:
        parsed(stack, dag_id)
        # SQLite refuses a write while the scheduler holds its lock (rolled back): asked again
        wait_for(
            lambda dag_id=dag_id: stack.api("PATCH", f"/dags/{dag_id}", {"is_paused": False}),
            timeout_s=120,
            what=f"{dag_id} unpaused",
            services=stack.services,
        )
        runs[dag_id] = trigger_run(stack, dag_id, {})
    for dag_id, run_id in runs.items():
        wait_run(stack, dag_id, run_id, timeout_s=900)
    return runs


def _get(stack: AirflowStack, path: str, token: str | None) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else None
    try:
        return 200, http_json(f"{stack.base_url}{path}", headers=headers, timeout_s=60)
    except urllib.error.HTTPError as error:
        return error.code, http_error_body(error)
    except json.JSONDecodeError:  # an HTML page
        return 200, None


def _xcom_result(stack: AirflowStack, run_id: str) -> dict[str, Any]:
    path = (
        f"/dags/{DAG_ID}/dagRuns/{quote(run_id, safe='')}/taskInstances/{JOIN_TASK}/xcomEntries/return_value"
    )
    value = stack.api("GET", path)["value"]
    return json.loads(value) if isinstance(value, str) else value


def _status(stack: AirflowStack, tmp_path: Path) -> dict[str, Any]:
    """``fkjoin status`` of the example's output (a Spark session of its own)."""
    warehouse = stack.home / "warehouse"
    spec = {
        "kind": "foreign_key_join",
        "left": {"path": str(warehouse / "orders"), "key": ["order_id"]},
        "right": {"path": str(warehouse / "customers"), "key": ["customer_id"]},
        "foreign_key": ["customer_id"],
        "how": "left",
        "output": {"path": str(warehouse / "orders_customers")},
    }
    spec_file = tmp_path / "status.json"
    spec_file.write_text(json.dumps(spec))
    done = subprocess.run(
        [str(VENV_BIN / "fkjoin"), "status", str(spec_file)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, **driver_jvm_env(), "FKJOIN_SPARK_MASTER": "local[1]"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _move_inputs(stack: AirflowStack) -> float:
    """One more batch of the example's changes, with no refresh after it; returns when it was written."""
    sys.path.insert(0, str(REPO / "dags"))
    try:
        os.environ["FKJOIN_WAREHOUSE"] = str(stack.home / "warehouse")
        from fkjoin_example_data import write_batch

        before = time.time()
        warehouse = stack.home / "warehouse"
        write_batch({"customers": warehouse / "customers", "orders": warehouse / "orders"}, "kip213")
        return before
    finally:
        sys.path.remove(str(REPO / "dags"))
        os.environ.pop("FKJOIN_WAREHOUSE", None)


def test_an_anonymous_request_is_refused(view_stack: AirflowStack) -> None:
    for path in ("/fkjoin/joins", "/fkjoin/api/outputs", f"/fkjoin/api/outputs/{DAG_ID}/{JOIN_TASK}"):
        code, body = _get(view_stack, path, None)
        assert code == 401, (path, code, body)


def test_the_view_shows_each_output_with_its_lag_and_history(
    view_stack: AirflowStack, tmp_path: Path
) -> None:
    stack = view_stack
    first_runs = _run_all(stack, list(EXAMPLE_JOINS))
    runs = [first_runs[DAG_ID], run_to_end(stack, DAG_ID, {"seed": True})]
    results = [_xcom_result(stack, run) for run in runs]
    assert [r["mode"] for r in results] == ["full", "incremental"], results
    moved_at = _move_inputs(stack)
    status = _status(stack, tmp_path)
    admin = user_token(stack, "admin", PASSWORDS["admin"])
    viewer = user_token(stack, "viewer", PASSWORDS["viewer"])

    # The list: the output, its last refresh, and the lag fkjoin status reports.
    code, listing = _get(stack, "/fkjoin/api/outputs", admin)
    assert code == 200, listing
    rows = {(r["dag_id"], r["task_id"]): r for r in listing["outputs"]}
    row = rows[(DAG_ID, JOIN_TASK)]
    assert row["error"] is None, row
    assert row["kind"] == "foreign_key_join"
    assert row["output"] == status["output"]["path"]
    assert row["last_refresh"]["version"] == results[1]["output"]["version"]
    for side, info in status["inputs"].items():
        assert row["inputs"][side]["consumed_version"] == info["consumed_version"], (side, row, status)
        assert row["inputs"][side]["latest_version"] == info["high_watermark"], (side, row, status)
        assert row["inputs"][side]["lag_versions"] == info["lag_versions"], (side, row, status)
    assert max(info["lag_versions"] for info in status["inputs"].values()) > 0, status
    assert 0 < row["lag_s"] <= time.time() - moved_at + 5, row
    lags = [r["lag_s"] for r in listing["outputs"] if r["lag_s"] is not None]
    assert lags == sorted(lags, reverse=True), "the stalest output comes first"
    expected = {(dag_id, task) for dag_id, tasks in EXAMPLE_JOINS.items() for task in tasks}
    assert expected <= set(rows), "every example output is listed for the admin"
    for key in expected:
        assert rows[key]["error"] is None and rows[key]["last_refresh"] is not None, rows[key]
        assert rows[key]["last_refresh"]["origin"]["dag_id"] == key[0], rows[key]
        assert all(info["lag_versions"] >= 0 for info in rows[key]["inputs"].values()), rows[key]

    # The history: both runs, newest first, as their XComs report them, each naming its run.
    code, history = _get(stack, f"/fkjoin/api/outputs/{DAG_ID}/{JOIN_TASK}", admin)
    assert code == 200, history
    refreshes = history["refreshes"]
    assert [r["mode"] for r in refreshes] == ["incremental", "full"], refreshes
    for refresh, result, run_id in zip(refreshes, reversed(results), reversed(runs), strict=True):
        assert refresh["version"] == result["output"]["version"]
        assert refresh["rows"] == {k: result["rows"][k] for k in ("inserted", "updated", "deleted")}
        assert refresh["origin"]["run_id"] == run_id
        assert refresh["write_path"] == result["write_path"]
        assert 0 < refresh["duration_s"] <= result["duration_s"] + 1, (refresh, result["duration_s"])

    # The task instance's refresh: its result, with the phases the engine traced.
    query = f"dag_id={DAG_ID}&run_id={quote(runs[1], safe='')}&task_id={JOIN_TASK}"
    code, refresh = _get(stack, f"/fkjoin/api/refresh?{query}", admin)
    assert code == 200, refresh
    assert refresh["result"]["output"] == results[1]["output"]
    assert list(refresh["result"]["phases"])[:2] == ["pinned", "changes_read"], refresh

    # A viewer may not read the hidden DAG: its outputs are not listed, and asking for one is refused.
    code, listing = _get(stack, "/fkjoin/api/outputs", viewer)
    assert code == 200, listing
    dags = {r["dag_id"] for r in listing["outputs"]}
    assert DAG_ID in dags and HIDDEN_DAG not in dags, dags
    code, body = _get(stack, f"/fkjoin/api/outputs/{HIDDEN_DAG}/enrich_orders", viewer)
    assert code == 403, body

    _in_the_browser(stack, row, refreshes, tmp_path)


def _in_the_browser(stack: AirflowStack, row: dict[str, Any], refreshes: list[Any], tmp_path: Path) -> None:
    """Log in through Airflow's login page, open the view and an output's history; screenshot both."""
    from playwright.sync_api import sync_playwright

    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: run scripts/setup-e2e.sh (installs Debian's chromium)")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    stale = max(row["inputs"].values(), key=lambda info: info["lag_versions"])
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]
        )
        try:
            page = browser.new_page(viewport={"width": 1500, "height": 900})
            page.goto(f"{stack.base_url}/auth/login")
            page.fill("input[name=username]", "admin")
            page.fill("input[name=password]", PASSWORDS["admin"])
            page.click("button[type=submit]")
            page.wait_for_function("document.cookie.includes('_token=')", timeout=60_000)

            page.goto(f"{stack.base_url}/fkjoin/joins")
            cells = page.locator(f'tr[data-dag="{DAG_ID}"][data-task="{JOIN_TASK}"]')
            cells.wait_for(timeout=60_000)
            text = cells.inner_text()
            assert row["output"] in text, text
            assert f"{stale['consumed_version']} of {stale['latest_version']}" in text, text
            assert f"({stale['lag_versions']} behind" in text, text
            listed = page.locator("tbody tr").count()
            assert listed >= sum(len(tasks) for tasks in EXAMPLE_JOINS.values()), listed
            assert page.locator("td.unreadable").count() == 0, page.locator("td.unreadable").all_inner_texts()

            page.click(f'tr[data-dag="{DAG_ID}"][data-task="{JOIN_TASK}"] a')
            page.locator("#content table tbody tr").nth(len(refreshes) - 1).wait_for(timeout=60_000)
            assert page.locator("#content h2").nth(1).inner_text() == f"Last {len(refreshes)} refreshes"
            assert page.locator("#chart .uplot canvas").count() >= 1, "the history chart is drawn"
            page.screenshot(path=str(ARTIFACTS / "joins-view-output.png"), full_page=True)

            page.goto(f"{stack.base_url}/plugin/fkjoin-joins")
            frame = page.frame_locator("iframe").first
            frame.locator(f'tr[data-dag="{DAG_ID}"]').wait_for(timeout=60_000)
            page.screenshot(path=str(ARTIFACTS / "joins-view.png"))
        finally:
            browser.close()
    assert (ARTIFACTS / "joins-view.png").stat().st_size > 20_000, "the screenshot looks empty"

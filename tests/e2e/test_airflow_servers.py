"""Every example DAG, the Joins view and an asset-scheduled DAG on one real Airflow 3.3 (api-server,
scheduler, dag-processor, triggerer), started once for this module.

The servers run on 127.0.0.1 with an isolated AIRFLOW_HOME (its SQLite DB a copy of the run's migrated
template), the LocalExecutor and real logins (the simple auth manager with one DAG hidden from ``viewer``,
``view_auth.py``; the REST calls log in as ``admin``). ``spark_default`` is a Spark Connect connection to
one warm ``fkjoin connect-server``, so each join task is a Connect client rather than a JVM of its own. The
DAGs folder links the repo's ``dags/``; the asset test adds two DAGs written here. In order:

1. every example DAG runs, then runs again (KIP-99 once); after each round its output must equal the
   expectation recomputed in pure Python from its inputs (``support/example_dags.py``). The KIP-99 run's
   sensor must have waited in the triggerer, and its asset event and extra links are read back;
2. the Joins view, after an input moved without a refresh: the lag ``fkjoin status`` reports (a Spark
   session of its own), the KIP-213 history as the two runs' XComs hold it, the task's last instance, its
   freshness state and asset, the lineage graph, the refresh tab on a task that is not a join, 401 for an
   anonymous request and 403 for a hidden DAG, and what headless Chromium shows (screenshots go to
   ``test-artifacts/``; the tables live under a short path, ``/tmp/fkjoin-demo/warehouse``, when no other
   run holds it, so the screenshots in the docs are taken from here);
3. with the example DAGs paused, the scheduler restarts with ``USE_JOB_SCHEDULE`` on (off until then, so
   that unpausing an @hourly DAG starts no run of its own; runs from asset events need it too). A producer
   refreshes a join three times (changes, none, changes), and its first run goes through spark-submit with
   the driver UI on, for the "Spark UI" link. A consumer scheduled on the join's asset must then run
   exactly twice, triggered by the first and the third producer runs only.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
import urllib.error
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import pytest
from airflow_stack import AirflowStack, parsed, run_to_end, running_airflow, trigger_run, user_token
from e2e_support import ARTIFACTS, REPO, VENV_BIN, http_error_body, http_json, wait_for
from support.example_dags import (
    airflow_db_template,
    check_ad_clicks,
    check_business_reviews_events,
    check_business_reviews_run,
    check_card_txn_pairs,
    check_errors_vs_last_week,
    check_kip99,
    check_kip213_events,
    check_kip213_run,
)

from airflow_provider_fkjoin.engine.deltalog.watermarks import progress
from airflow_provider_fkjoin.links import table_uri

if TYPE_CHECKING:
    from conftest import SparkConnectServer  # tests/e2e/conftest.py (not imported: two conftests collide)

pytestmark = pytest.mark.timeout(1800)  # the module fixtures (servers, a round of DAG runs) count too

KIP213, KIP213_JOIN = "fkjoin_kip213_fk_join", "orders_customers"
KIP99, KIP99_JOIN, SENSOR_TASK = "fkjoin_kip99_global_table", "enrich_orders", "products_caught_up"
TRIGGER_CLASS = "airflow_provider_fkjoin.triggers.high_watermark.HighWatermarkTrigger"
MULTIWAY = "fkjoin_multiway_business_reviews"
#: Every example DAG that writes a join output, and its join tasks (read from dags/ by hand).
EXAMPLE_JOINS = {
    KIP213: [KIP213_JOIN],
    KIP99: ["bootstrap_products", KIP99_JOIN],
    MULTIWAY: ["business_reviews"],
    "fkjoin_self_join_card_txns": ["card_txn_pairs"],
    "fkjoin_windowed_ad_clicks": ["clicks_per_impression"],
    "fkjoin_windowed_errors_vs_last_week": ["errors_vs_last_week"],
}
#: The checks of each DAG run twice, after its n-th run (KIP-99 runs once: each run is two Spark jobs and
#: a deferral; the engine's own tests cover its incremental refreshes).
RUN_CHECKS: dict[str, Callable[[Path, Any, int], Any]] = {
    KIP213: check_kip213_run,
    MULTIWAY: check_business_reviews_run,
    "fkjoin_self_join_card_txns": check_card_txn_pairs,
    "fkjoin_windowed_ad_clicks": check_ad_clicks,
    "fkjoin_windowed_errors_vs_last_week": check_errors_vs_last_week,
}
HIDDEN_DAG = KIP99  # from the viewer
PASSWORDS = {"admin": "admin-secret", "viewer": "viewer-secret"}
CHROMIUM = Path("/usr/bin/chromium")
E2E = Path(__file__).resolve().parent

PRODUCER, CONSUMER = "fkjoin_e2e_asset_producer", "fkjoin_e2e_asset_consumer"
#: A spark-submit connection (local Spark) for the producer's first run.
SPARK_SUBMIT_CONN = "spark_submit_local"
ASSET_DAGS = {
    "asset_producer.py": """
        import datetime as dt
        import os

        from airflow.sdk import DAG, Param, task

        from airflow_provider_fkjoin.operators import ForeignKeyJoinOperator

        WAREHOUSE = os.environ["FKJOIN_WAREHOUSE"] + "/asset_e2e"

        with DAG(
            dag_id="fkjoin_e2e_asset_producer",
            schedule=None,
            start_date=dt.datetime(2025, 1, 1, tzinfo=dt.UTC),
            max_active_runs=1,
            params={"seed": Param(True, type="boolean"), "conn_id": Param("spark_default", type="string")},
        ):

            @task
            def seed(params=None):
                import pyarrow as pa
                from deltalake import DeltaTable, write_deltalake

                if not params["seed"]:
                    return "nothing changed"
                orders, customers = f"{WAREHOUSE}/orders", f"{WAREHOUSE}/customers"
                cdf = {"delta.enableChangeDataFeed": "true"}
                if not os.path.isdir(customers):
                    ids = pa.array(range(6), pa.int64())
                    rows = {"order_id": ids, "customer_id": ids, "amount": [1.0] * 6}
                    write_deltalake(orders, pa.table(rows), configuration=cdf)
                    names = {"customer_id": ids, "name": [f"c{i}" for i in range(6)]}
                    write_deltalake(customers, pa.table(names), configuration=cdf)
                    return "created"
                table = DeltaTable(customers)
                table.update(predicate="customer_id = 1", updates={"name": f"'renamed {table.version()}'"})
                return "renamed"

            seed() >> ForeignKeyJoinOperator(
                task_id="join",
                conn_id="{{ params.conn_id }}",
                spark_ui=True,
                left={"path": f"{WAREHOUSE}/orders", "key": ["order_id"]},
                right={"path": f"{WAREHOUSE}/customers", "key": ["customer_id"]},
                foreign_key=["customer_id"],
                how="left",
                output=f"{WAREHOUSE}/orders_customers",
            )
    """,
    "asset_consumer.py": """
        import datetime as dt
        import os

        from airflow.sdk import DAG, Asset, task

        from airflow_provider_fkjoin.links import table_uri

        OUTPUT = os.environ["FKJOIN_WAREHOUSE"] + "/asset_e2e/orders_customers"

        with DAG(
            dag_id="fkjoin_e2e_asset_consumer",
            schedule=[Asset(uri=table_uri(OUTPUT))],
            start_date=dt.datetime(2025, 1, 1, tzinfo=dt.UTC),
        ):

            @task
            def report(triggering_asset_events=None):
                return [e.extra for events in (triggering_asset_events or {}).values() for e in events]

            report()
    """,
}


#: The tables' folder when this module can have it: a short path, for readable screenshots.
READABLE_WAREHOUSE = Path("/tmp/fkjoin-demo/warehouse")


@pytest.fixture(scope="module")
def warehouse_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """:data:`READABLE_WAREHOUSE`, emptied, while no other run of this module holds it (a lock beside it);
    else a folder in this run's tmp."""
    READABLE_WAREHOUSE.parent.mkdir(parents=True, exist_ok=True)
    with (READABLE_WAREHOUSE.parent / "lock").open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield tmp_path_factory.mktemp("warehouse")
            return
        shutil.rmtree(READABLE_WAREHOUSE, ignore_errors=True)
        READABLE_WAREHOUSE.mkdir()
        yield READABLE_WAREHOUSE


@pytest.fixture(scope="module")
def stack(
    tmp_path_factory: pytest.TempPathFactory, spark_connect_server: SparkConnectServer, warehouse_dir: Path
) -> Iterator[AirflowStack]:
    """The four Airflow components on 127.0.0.1 with the example DAGs, logins, and ``spark_default`` on
    the warm Spark Connect server; the REST client logged in as ``admin``."""
    home = tmp_path_factory.mktemp("airflow-home")
    dags = tmp_path_factory.mktemp("dags")
    for source in sorted((REPO / "dags").glob("*.py")):
        (dags / source.name).symlink_to(source)
    passwords = home / "passwords.json"
    passwords.write_text(json.dumps(PASSWORDS))
    connect = {"conn_type": "spark_connect", "host": "127.0.0.1", "port": spark_connect_server.port}
    env = {
        "AIRFLOW__CORE__AUTH_MANAGER": "view_auth.OneDagHiddenAuthManager",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin,viewer:viewer",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
        "FKJOIN_TEST_HIDDEN_DAG": HIDDEN_DAG,
        "FKJOIN_WAREHOUSE": str(warehouse_dir),
        "PYTHONPATH": os.pathsep.join(p for p in (str(E2E), os.environ.get("PYTHONPATH", "")) if p),
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps(connect),
        f"AIRFLOW_CONN_{SPARK_SUBMIT_CONN.upper()}": json.dumps({"conn_type": "spark", "host": "local[1]"}),
        # the asset test adds its DAG files late (the Joins view must not list its output before it
        # exists): the dag-processor looks for new files every few seconds, not every five minutes
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
    }
    template = airflow_db_template(tmp_path_factory)
    with running_airflow(home, dags, template, env, login=("admin", PASSWORDS["admin"])) as running:
        yield running


def warehouse(stack: AirflowStack) -> Path:
    return Path((stack.service("scheduler").env or {})["FKJOIN_WAREHOUSE"])


def run_path(dag_id: str, run_id: str) -> str:
    return f"/dags/{dag_id}/dagRuns/{quote(run_id, safe='')}"


def set_paused(stack: AirflowStack, dag_id: str, paused: bool) -> None:
    """Pause or unpause ``dag_id``; SQLite refuses a write while the scheduler holds its lock (rolled
    back), so it is asked again."""
    wait_for(
        lambda: stack.api("PATCH", f"/dags/{dag_id}", {"is_paused": paused}),
        timeout_s=120,
        what=f"{dag_id} is_paused={paused}",
        services=stack.services,
    )


def run_all(
    stack: AirflowStack, dag_ids: list[str], watch: Callable[[], None] | None = None
) -> dict[str, str]:
    """Trigger ``dag_ids`` at once (the stack runs four tasks at a time); their run ids once all of them
    succeeded, every task included. ``watch`` is called at each poll meanwhile."""
    runs: dict[str, str] = {}
    for dag_id in dag_ids:
        parsed(stack, dag_id)
        set_paused(stack, dag_id, False)
        runs[dag_id] = trigger_run(stack, dag_id, {})

    states: dict[str, str] = {}

    def finished() -> dict[str, str] | None:
        if watch is not None:
            watch()
        for dag_id in runs.keys() - states.keys():
            state = stack.api("GET", run_path(dag_id, runs[dag_id]))["state"]
            if state in ("success", "failed"):
                states[dag_id] = state
        return states if len(states) == len(runs) else None

    what = f"runs of {sorted(runs)}"
    wait_for(finished, timeout_s=900, what=what, services=stack.services, interval_s=1.0)
    for dag_id, run_id in runs.items():
        tis = stack.api("GET", f"{run_path(dag_id, run_id)}/taskInstances")["task_instances"]
        summary = {ti["task_id"]: ti["state"] for ti in tis}
        assert states[dag_id] == "success" and set(summary.values()) == {"success"}, (
            f"{dag_id} {run_id} {states[dag_id]}: {summary}\n{stack.service('scheduler').tail()}"
        )
    return runs


def xcom_result(stack: AirflowStack, dag_id: str, run_id: str, task_id: str) -> dict[str, Any]:
    value = stack.api("GET", f"{run_path(dag_id, run_id)}/taskInstances/{task_id}/xcomEntries/return_value")
    return json.loads(value["value"]) if isinstance(value["value"], str) else value["value"]


def asset_event_extras(stack: AirflowStack, dag_id: str, task_id: str) -> list[dict[str, Any]]:
    """The extras of the asset events ``task_id`` of ``dag_id`` emitted, oldest first; each on the asset
    of the table named like the task."""
    query = f"source_dag_id={dag_id}&source_task_id={task_id}&order_by=timestamp"
    events = stack.api("GET", f"/assets/events?{query}")["asset_events"]
    uri = table_uri(str((warehouse(stack) / task_id).resolve()))
    assert all(event["uri"] == uri for event in events), (uri, events)
    return [event["extra"] for event in events]


@dataclass
class FirstRound:
    """The first round's run ids, and what the polls saw of the KIP-99 sensor while it ran."""

    runs: dict[str, str]
    sensor: dict[str, Any] = field(
        default_factory=lambda: {"states": [], "trigger": None, "triggerer_job": None}
    )


@pytest.fixture(scope="module")
def first_round(stack: AirflowStack) -> FirstRound:
    """Every example DAG's first run (all at once), watching the KIP-99 sensor."""
    first = FirstRound({})

    def watch_sensor() -> None:
        seen = first.sensor
        if seen["states"] and seen["states"][-1] in ("success", "failed"):
            return
        runs = stack.api("GET", f"/dags/{KIP99}/dagRuns")["dag_runs"]
        if not runs:
            return
        sensor = stack.api("GET", f"{run_path(KIP99, runs[0]['dag_run_id'])}/taskInstances/{SENSOR_TASK}")
        if not seen["states"] or seen["states"][-1] != sensor.get("state"):
            seen["states"].append(sensor.get("state"))
        if sensor.get("trigger"):
            seen["trigger"] = sensor["trigger"]
        if sensor.get("triggerer_job"):
            seen["triggerer_job"] = sensor["triggerer_job"]

    first.runs = run_all(stack, list(EXAMPLE_JOINS), watch=watch_sensor)
    return first


@pytest.fixture(scope="module")
def second_round(stack: AirflowStack, first_round: FirstRound) -> dict[str, str]:
    """The second run of every example DAG but KIP-99 (all at once); run ids."""
    return run_all(stack, list(RUN_CHECKS))


# -- 1. the example DAGs -------------------------------------------------------------------------------
def test_an_anonymous_request_is_refused(stack: AirflowStack) -> None:
    for path in ("/fkjoin/joins", "/fkjoin/api/outputs", f"/fkjoin/api/outputs/{KIP213}/{KIP213_JOIN}"):
        code, body = _get(stack, path, None)
        assert code == 401, (path, code, body)


def test_kip99_bootstrap_gate_and_enrich(stack: AirflowStack, first_round: FirstRound, spark: Any) -> None:
    """The global table and the enriched stream equal their recomputation; the join's XCom, asset event
    and extra links agree; the high-watermark sensor deferred to the triggerer."""
    w = warehouse(stack)
    check_kip99(w, spark, runs=1)
    assert progress(w / "products_global")["mode"] == "full"

    run_id = first_round.runs[KIP99]
    result = xcom_result(stack, KIP99, run_id, KIP99_JOIN)
    events = stack.api(
        "GET",
        f"/assets/events?source_dag_id={KIP99}&source_run_id={quote(run_id, safe='')}"
        f"&source_task_id={KIP99_JOIN}",
    )["asset_events"]
    assert len(events) == 1, events
    extra = events[0]["extra"]
    assert events[0]["uri"].endswith("/orders_enriched"), events[0]
    assert extra["mode"] == result["mode"] == "full"
    assert extra["version"] == result["output"]["version"]
    assert extra["rows"]["inserted"] == result["rows"]["inserted"] > 0

    links = stack.api("GET", f"{run_path(KIP99, run_id)}/taskInstances/{KIP99_JOIN}/links")["extra_links"]
    assert set(links) >= {"Spark UI", "Output table", "Join refresh"}, links
    assert links["Output table"] == f"/fkjoin/output?dag_id={KIP99}&task_id={KIP99_JOIN}", links
    assert links["Join refresh"] == (
        f"/fkjoin/refresh?dag_id={KIP99}&run_id={quote(run_id, safe='')}&task_id={KIP99_JOIN}"
    ), links
    # a Spark Connect client has no driver UI of its own: the link is there, empty (spark-submit's live
    # link is checked on the asset producer's first run below)
    assert not links["Spark UI"], links

    # The sensor deferred and its trigger ran in the triggerer. A short deferral (the bootstrap has often
    # caught up by the trigger's first look) can fall between two polls of the API, so the durable
    # evidence decides: the triggerer writes a trigger log beside the task's log only for a deferred task,
    # and this trigger logs each decision about its target. The live observations, when a poll caught
    # them, must agree.
    trigger_dir = stack.home / "logs" / f"dag_id={KIP99}" / f"run_id={run_id}" / f"task_id={SENSOR_TASK}"

    def trigger_log() -> str | None:
        text = "".join(p.read_text(errors="replace") for p in trigger_dir.glob("attempt=*.log.trigger.*.log"))
        return text if " starting" in text and "products_global" in text else None

    wait_for(trigger_log, timeout_s=120, what=f"{SENSOR_TASK}'s trigger log", services=stack.services)
    seen = first_round.sensor
    if seen["trigger"]:
        assert seen["trigger"].get("classpath") == TRIGGER_CLASS, seen
    if seen["triggerer_job"]:
        assert seen["triggerer_job"].get("job_type") == "TriggererJob", seen
    assert "success" in seen["states"] or _task_state(stack, KIP99, run_id, SENSOR_TASK) == "success", seen


@pytest.mark.parametrize("dag_id", list(RUN_CHECKS))
def test_first_run_matches_the_expectation(
    stack: AirflowStack, first_round: FirstRound, spark: Any, dag_id: str
) -> None:
    RUN_CHECKS[dag_id](warehouse(stack), spark, 1)


@pytest.mark.parametrize("dag_id", list(RUN_CHECKS))
def test_second_run_is_incremental_and_matches_the_expectation(
    stack: AirflowStack, second_round: dict[str, str], spark: Any, dag_id: str
) -> None:
    w = warehouse(stack)
    RUN_CHECKS[dag_id](w, spark, 2)
    if dag_id == KIP213:
        check_kip213_events(w, asset_event_extras(stack, KIP213, KIP213_JOIN))
    if dag_id == MULTIWAY:
        check_business_reviews_events(asset_event_extras(stack, MULTIWAY, "business_reviews"))


def _task_state(stack: AirflowStack, dag_id: str, run_id: str, task_id: str) -> str | None:
    return stack.api("GET", f"{run_path(dag_id, run_id)}/taskInstances/{task_id}").get("state")


# -- 2. the Joins view ---------------------------------------------------------------------------------
def _get(stack: AirflowStack, path: str, token: str | None) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else None
    try:
        return 200, http_json(f"{stack.base_url}{path}", headers=headers, timeout_s=60)
    except urllib.error.HTTPError as error:
        return error.code, http_error_body(error)
    except json.JSONDecodeError:  # an HTML page
        return 200, None


def _status(stack: AirflowStack, server: SparkConnectServer, tmp_path: Path) -> dict[str, Any]:
    """``fkjoin status`` of the KIP-213 output, a Spark Connect client of its own."""
    w = warehouse(stack)
    spec = {
        "kind": "foreign_key_join",
        "left": {"path": str(w / "orders"), "key": ["order_id"]},
        "right": {"path": str(w / "customers"), "key": ["customer_id"]},
        "foreign_key": ["customer_id"],
        "how": "left",
        "output": {"path": str(w / "orders_customers")},
    }
    spec_file = tmp_path / "status.json"
    spec_file.write_text(json.dumps(spec))
    done = subprocess.run(
        [str(VENV_BIN / "fkjoin"), "--master", server.url, "status", str(spec_file)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _move_inputs(stack: AirflowStack) -> float:
    """One more batch of the KIP-213 example's changes, with no refresh after it; when it was written."""
    sys.path.insert(0, str(REPO / "dags"))
    try:
        os.environ["FKJOIN_WAREHOUSE"] = str(warehouse(stack))
        from fkjoin_example_data import write_batch

        before = time.time()
        w = warehouse(stack)
        write_batch({"customers": w / "customers", "orders": w / "orders"}, "kip213")
        return before
    finally:
        sys.path.remove(str(REPO / "dags"))
        os.environ.pop("FKJOIN_WAREHOUSE", None)


def test_the_view_shows_each_output_with_its_lag_and_history(
    stack: AirflowStack,
    first_round: FirstRound,
    second_round: dict[str, str],
    spark_connect_server: SparkConnectServer,
    tmp_path: Path,
) -> None:
    runs = [first_round.runs[KIP213], second_round[KIP213]]
    results = [xcom_result(stack, KIP213, run, KIP213_JOIN) for run in runs]
    assert [r["mode"] for r in results] == ["full", "incremental"], results
    moved_at = _move_inputs(stack)
    status = _status(stack, spark_connect_server, tmp_path)
    admin = user_token(stack, "admin", PASSWORDS["admin"])
    viewer = user_token(stack, "viewer", PASSWORDS["viewer"])

    # The list: the output, its last refresh, and the lag fkjoin status reports.
    code, listing = _get(stack, "/fkjoin/api/outputs", admin)
    assert code == 200, listing
    rows = {(r["dag_id"], r["task_id"]): r for r in listing["outputs"]}
    row = rows[(KIP213, KIP213_JOIN)]
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
        assert rows[key]["last_task"]["state"] == "success", rows[key]
    # the task's last instance is the second run's; the policy the example DAG declares (2 h / 6 h) and the
    # state it gives a lag of seconds; the asset its events went to
    assert row["last_task"]["run_id"] == runs[1], row
    assert row["freshness_policy"] == {"warn_after": 7200.0, "error_after": 21600.0}, row
    assert row["freshness_state"] == "ok" and row["lag_versions"] > 0, row
    assert row["asset_uri"] == table_uri(row["output"]) and isinstance(row["asset_id"], int), row
    assets = stack.api("GET", f"/assets?uri_pattern={quote(row['output'], safe='')}")["assets"]
    assert row["asset_id"] in {a["id"] for a in assets if a["uri"] == row["asset_uri"]}, assets
    assert rows[(MULTIWAY, "business_reviews")]["freshness_state"] is None, "no policy: no state"
    assert listing["timezone"] == "UTC"

    # The lineage: the KIP-99 bootstrap feeds its enrichment; the KIP-213 join reads two tables.
    code, graph = _get(stack, "/fkjoin/api/lineage", admin)
    assert code == 200, graph
    edges = {(e["source"], e["target"]) for e in graph["edges"]}
    assert (f"{KIP99}.bootstrap_products", f"{KIP99}.{KIP99_JOIN}") in edges, edges
    into_kip213 = {source for source, target in edges if target == f"{KIP213}.{KIP213_JOIN}"}
    assert into_kip213 == {table_uri(str(warehouse(stack) / t)) for t in ("orders", "customers")}

    # The refresh tab on a task that is not a join says so, as a 200 the page shows.
    query = f"dag_id={KIP213}&run_id={quote(runs[1], safe='')}&task_id=seed"
    code, seed = _get(stack, f"/fkjoin/api/refresh?{query}", admin)
    assert code == 200 and seed["join"] is False and "not a join task" in seed["message"], seed

    # The history: both runs, newest first, as their XComs report them, each naming its run.
    code, history = _get(stack, f"/fkjoin/api/outputs/{KIP213}/{KIP213_JOIN}", admin)
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
    query = f"dag_id={KIP213}&run_id={quote(runs[1], safe='')}&task_id={KIP213_JOIN}"
    code, refresh = _get(stack, f"/fkjoin/api/refresh?{query}", admin)
    assert code == 200, refresh
    assert refresh["result"]["output"] == results[1]["output"]
    assert list(refresh["result"]["phases"])[:2] == ["pinned", "changes_read"], refresh

    # A viewer may not read the hidden DAG: its outputs are not listed, and asking for one is refused.
    code, listing = _get(stack, "/fkjoin/api/outputs", viewer)
    assert code == 200, listing
    dags = {r["dag_id"] for r in listing["outputs"]}
    assert KIP213 in dags and HIDDEN_DAG not in dags, dags
    code, body = _get(stack, f"/fkjoin/api/outputs/{HIDDEN_DAG}/{KIP99_JOIN}", viewer)
    assert code == 403, body

    _in_the_browser(stack, row, refreshes, runs[1])


def _in_the_browser(stack: AirflowStack, row: dict[str, Any], refreshes: list[Any], last_run: str) -> None:
    """Log in through Airflow's login page; screenshot the KIP-99 DAG's grid, then open the Joins view (in
    the timezone chosen in Airflow's UI), sort it, follow an output to its history, open the refresh tab of
    a task that is not a join, and screenshot the list, the lineage graph and the history."""
    from playwright.sync_api import sync_playwright

    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: run scripts/setup-e2e.sh (installs Debian's chromium)")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    grid = ARTIFACTS / "airflow-grid-kip99.png"
    grid.unlink(missing_ok=True)
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

            # What a person sees: the KIP-99 DAG's grid with the finished run.
            page.goto(f"{stack.base_url}/dags/{KIP99}")
            page.wait_for_function(f"document.body.innerText.includes('{KIP99}')", timeout=60_000)
            page.wait_for_load_state("networkidle", timeout=60_000)
            page.screenshot(path=str(grid))

            # the timezone a user picks in Airflow's UI (its local storage, this origin's)
            page.evaluate("window.localStorage.setItem('timezone', JSON.stringify('Asia/Tokyo'))")
            page.goto(f"{stack.base_url}/fkjoin/joins")
            cells = page.locator(f'tr[data-dag="{KIP213}"][data-task="{KIP213_JOIN}"]')
            cells.wait_for(timeout=60_000)
            text = cells.inner_text()
            assert row["output"] in text and "orders_customers" in text, text
            assert f"{stale['consumed_version']} of {stale['latest_version']}" in text, text
            assert f"({stale['lag_versions']} behind" in text, text
            assert re.search(r"\d+(\.\d+)? (s|min|h|d) behind", text), text  # the lag in time
            assert cells.locator(".badge.state-ok").count() == 1, text  # the state its policy gives it
            assert "success" in text and "latest run" in text, text
            assert "GMT+9" in text, text  # the last refresh, in Asia/Tokyo
            assert "times in Asia/Tokyo" in page.locator("#summary").inner_text()
            hrefs = cells.locator("a").evaluate_all("links => links.map(a => a.getAttribute('href'))")
            ti_href = f"/dags/{KIP213}/runs/{quote(last_run, safe='')}/tasks/{KIP213_JOIN}"
            assert {f"/dags/{KIP213}", f"/dags/{KIP213}/tasks/{KIP213_JOIN}", ti_href} <= set(hrefs), hrefs
            assert f"/assets/{row['asset_id']}" in hrefs, hrefs
            listed = page.locator("#outputs tbody tr").count()
            assert listed >= sum(len(tasks) for tasks in EXAMPLE_JOINS.values()), listed
            assert page.locator("td.unreadable").count() == 0, page.locator("td.unreadable").all_inner_texts()

            # sorting by output: descending, then ascending, by table name
            def names() -> list[str]:
                return page.locator("#outputs tbody tr a.output").all_inner_texts()

            page.click('th[data-column="output"]')
            assert names() == sorted(names(), key=str.lower, reverse=True), names()
            page.click('th[data-column="output"]')
            assert names() == sorted(names(), key=str.lower), names()

            # the lineage graph: a box per join, an arrow from the bootstrap to the enrichment
            graph = page.locator("#lineage-graph")
            assert graph.locator("g.node.join").count() == listed
            edge = f'path.edge[data-source="{KIP99}.bootstrap_products"][data-target="{KIP99}.{KIP99_JOIN}"]'
            assert graph.locator(edge).count() == 1
            graph.screenshot(path=str(ARTIFACTS / "joins-view-lineage.png"))

            page.click(f'tr[data-dag="{KIP213}"][data-task="{KIP213_JOIN}"] a.output')
            page.locator("#content table tbody tr").nth(len(refreshes) - 1).wait_for(timeout=60_000)
            assert page.locator("#content h2").nth(1).inner_text() == f"Last {len(refreshes)} refreshes"
            assert page.locator("#chart .uplot canvas").count() >= 1, "the history chart is drawn"
            page.screenshot(path=str(ARTIFACTS / "joins-view-output.png"), full_page=True)

            # the refresh tab on a task that is not a join: a sentence, not an error
            query = f"dag_id={KIP213}&run_id={quote(last_run, safe='')}&task_id=seed"
            page.goto(f"{stack.base_url}/fkjoin/refresh?{query}")
            page.wait_for_function("document.body.innerText.includes('not a join task')", timeout=60_000)
            assert page.locator(".unreadable").count() == 0

            page.goto(f"{stack.base_url}/plugin/fkjoin-joins")
            frame = page.frame_locator("iframe").first
            frame.locator(f'tr[data-dag="{KIP213}"]').wait_for(timeout=60_000)
            page.screenshot(path=str(ARTIFACTS / "joins-view.png"))
        finally:
            browser.close()
    assert grid.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert grid.stat().st_size > 20_000, "the grid screenshot looks empty"
    for name in ("joins-view.png", "joins-view-output.png", "joins-view-lineage.png"):
        assert (ARTIFACTS / name).stat().st_size > 10_000, f"the screenshot {name} looks empty"


# -- 3. an asset-scheduled DAG -------------------------------------------------------------------------
def consumer_runs(stack: AirflowStack, count: int) -> list[dict[str, Any]]:
    """The consumer's runs once there are ``count`` of them, all finished."""

    def done() -> list[dict[str, Any]] | None:
        runs = stack.api("GET", f"/dags/{CONSUMER}/dagRuns?order_by=run_after")["dag_runs"]
        return runs if len(runs) >= count and all(r["state"] in ("success", "failed") for r in runs) else None

    return wait_for(done, timeout_s=600, what=f"{count} run(s) of {CONSUMER}", services=stack.services)


def test_an_asset_scheduled_dag_runs_only_when_the_join_changed_its_output(stack: AirflowStack) -> None:
    dags = Path((stack.service("dag-processor").env or {})["AIRFLOW__CORE__DAGS_FOLDER"])
    for name, text in ASSET_DAGS.items():  # whole files only: the dag-processor may look at any moment
        (dags / f"{name}.part").write_text(textwrap.dedent(text))
        (dags / f"{name}.part").rename(dags / name)
    # The scheduler creates runs from schedules and asset events from now on: the example DAGs pause first.
    for dag in stack.api("GET", "/dags?limit=100")["dags"]:
        if dag["dag_id"] not in (PRODUCER, CONSUMER) and not dag["is_paused"]:
            set_paused(stack, dag["dag_id"], True)
    stack.restart("scheduler", {"AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "True"})
    for dag_id in (PRODUCER, CONSUMER):
        parsed(stack, dag_id)
        set_paused(stack, dag_id, False)

    first = run_to_end(stack, PRODUCER, {"seed": True, "conn_id": SPARK_SUBMIT_CONN})
    # spark-submit with the driver UI on: the join shows its Spark UI (and the output table) as extra links
    links = stack.api("GET", f"{run_path(PRODUCER, first)}/taskInstances/join/links")["extra_links"]
    assert set(links) >= {"Spark UI", "Output table"}, links
    assert links["Output table"] == f"/fkjoin/output?dag_id={PRODUCER}&task_id=join", links
    assert links["Spark UI"], links
    [run] = consumer_runs(stack, 1)
    assert (run["state"], run["run_type"]) == ("success", "asset_triggered"), run

    quiet = run_to_end(stack, PRODUCER, {"seed": False})
    result = xcom_result(stack, PRODUCER, quiet, "join")
    assert (result["mode"], result["source"]) == ("noop", "precheck"), result
    by_quiet = f"source_dag_id={PRODUCER}&source_run_id={quote(quiet, safe='')}"
    assert stack.api("GET", f"/assets/events?{by_quiet}")["asset_events"] == []

    third = run_to_end(stack, PRODUCER, {"seed": True})
    runs = consumer_runs(stack, 2)
    assert len(runs) == 2 and all(r["state"] == "success" for r in runs), runs
    triggered_by = [
        {
            event["source_run_id"]
            for event in stack.api(
                "GET", f"/dags/{CONSUMER}/dagRuns/{quote(r['dag_run_id'], safe='')}/upstreamAssetEvents"
            )["asset_events"]
        }
        for r in runs
    ]
    assert triggered_by == [{first}, {third}], (first, quiet, third, triggered_by)

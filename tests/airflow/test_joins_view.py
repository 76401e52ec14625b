"""The Joins view's decisions, without servers: which tasks of the example DAGs write which outputs (read
from the DAGs as the api-server holds them: serialized, then deserialized), the order and shape of the
view's rows, and the plan each refresh ran (its rule run by node against the engine's own, its pages
rendered by headless Chromium from JSON read off a Delta log, every request answered in the browser). The
view on a real api-server, with logins: ``tests/e2e/test_airflow_servers.py``."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from airflow_support import write_table
from support.delta_log import plans_in_log

REPO = Path(__file__).resolve().parents[2]
STATIC = REPO / "airflow_provider_fkjoin" / "plugins" / "static"

#: Read from the example DAG files by hand: (dag_id, task_id) -> (kind, output under the warehouse).
EXAMPLE_OUTPUTS = {
    ("fkjoin_kip213_fk_join", "orders_customers"): ("foreign_key_join", "orders_customers"),
    ("fkjoin_kip99_global_table", "bootstrap_products"): ("global_table_bootstrap", "products_global"),
    ("fkjoin_kip99_global_table", "enrich_orders"): ("stream_table_join", "orders_enriched"),
    ("fkjoin_multiway_business_reviews", "business_reviews"): ("multiway_join", "business_reviews"),
    ("fkjoin_self_join_card_txns", "card_txn_pairs"): ("self_join", "card_txn_pairs"),
    ("fkjoin_windowed_ad_clicks", "clicks_per_impression"): ("windowed_join", "ad_clicks"),
    ("fkjoin_windowed_errors_vs_last_week", "errors_vs_last_week"): ("windowed_join", "errors_vs_last_week"),
}


def test_every_example_output_is_found_in_the_serialized_dags(tmp_path: Path, monkeypatch) -> None:
    from airflow.dag_processing.dagbag import DagBag
    from airflow.serialization.serialized_objects import DagSerialization

    from airflow_provider_fkjoin.plugins.joins_view import join_tasks

    monkeypatch.setenv("FKJOIN_WAREHOUSE", str(tmp_path / "warehouse"))
    monkeypatch.syspath_prepend(str(REPO / "dags"))  # as Airflow does for its DAGs folder
    bag = DagBag(dag_folder=str(REPO / "dags"))
    assert not bag.import_errors, bag.import_errors
    served = [DagSerialization.from_dict(DagSerialization.to_dict(dag)) for dag in bag.dags.values()]

    found = {(t.dag_id, t.task_id): t for t in join_tasks(served)}

    assert set(found) == set(EXAMPLE_OUTPUTS)
    for key, (kind, table) in EXAMPLE_OUTPUTS.items():
        assert (found[key].kind, found[key].output) == (kind, str(tmp_path / "warehouse" / table)), key
        assert found[key].problem is None


def test_a_templated_or_catalog_output_is_named_not_read() -> None:
    from airflow.sdk import DAG

    from airflow_provider_fkjoin.operators import ForeignKeyJoinOperator
    from airflow_provider_fkjoin.plugins.joins_view import join_tasks

    sides = {"left": {"path": "/w/a", "key": ["id"]}, "right": {"path": "/w/b", "key": ["k"]}}
    with DAG("odd_outputs", schedule=None) as dag:
        ForeignKeyJoinOperator(task_id="templated", foreign_key=["k"], output="/w/{{ ds }}/out", **sides)
        ForeignKeyJoinOperator(task_id="catalog", foreign_key=["k"], output={"name": "db.out"}, **sides)
    found = {t.task_id: t for t in join_tasks([dag])}
    assert found["templated"].output is None and "templated" in (found["templated"].problem or "")
    assert found["catalog"].output is None and "catalog" in (found["catalog"].problem or "")


def test_rows_put_the_stalest_output_first_and_unreadable_ones_last() -> None:
    from airflow_provider_fkjoin.plugins.joins_view import JoinTask, by_lag, output_row

    def row(task: str, lag: float | None) -> dict:
        freshness = None if lag is None else {"kind": "foreign_key_join", "lag_s": lag, "inputs": {}}
        return output_row(JoinTask("d", task, "foreign_key_join", f"/w/{task}"), freshness, None)

    ordered = by_lag([row("fresh", 0.0), row("gone", None), row("stale", 3600.0), row("late", 60.0)])
    assert [r["task_id"] for r in ordered] == ["stale", "late", "fresh", "gone"]


def test_an_output_that_cannot_be_read_in_time_is_reported_unreadable(tmp_path: Path) -> None:
    from airflow_provider_fkjoin.plugins.joins_view import JoinTask, read_freshness

    tasks = [JoinTask("d", "missing", "foreign_key_join", str(tmp_path / "nothing"))]
    [(freshness, error)] = read_freshness(tasks, timeout_s=30)
    assert freshness is None and error is not None and error.startswith("unreadable: ")
    [(freshness, error)] = read_freshness([JoinTask("d", "t", "foreign_key_join", None, None, "x")])
    assert (freshness, error) == (None, None), "a task whose output is not known is not read"


def test_the_plugin_is_registered_by_the_package() -> None:
    from importlib.metadata import entry_points

    from airflow_provider_fkjoin.plugins.joins_view import FkJoinViewsPlugin

    [entry] = [e for e in entry_points(group="airflow.plugins") if e.name == "fkjoin_joins_view"]
    assert entry.load() is FkJoinViewsPlugin
    assert {view["destination"] for view in FkJoinViewsPlugin.external_views} == {"nav", "task_instance"}


@pytest.mark.parametrize("name", ["joins.js", "plan.js", "uPlot.iife.min.js", "uPlot.min.css", "page.html"])
def test_the_view_ships_its_assets(name: str) -> None:
    from importlib import resources

    asset = resources.files("airflow_provider_fkjoin.plugins").joinpath("static", name)
    assert asset.is_file() and len(asset.read_bytes()) > 500


def _served_example_dags(tmp_path: Path, monkeypatch) -> list:
    from airflow.dag_processing.dagbag import DagBag
    from airflow.serialization.serialized_objects import DagSerialization

    monkeypatch.setenv("FKJOIN_WAREHOUSE", str(tmp_path / "warehouse"))
    monkeypatch.syspath_prepend(str(REPO / "dags"))
    bag = DagBag(dag_folder=str(REPO / "dags"))
    assert not bag.import_errors, bag.import_errors
    return [DagSerialization.from_dict(DagSerialization.to_dict(dag)) for dag in bag.dags.values()]


def test_the_lineage_graph_of_the_example_dags(tmp_path: Path, monkeypatch) -> None:
    """Read from the example DAG files by hand: the KIP-99 bootstrap's global table feeds its enrichment,
    and no other join reads another join's output; every other input is a table no join writes."""
    from airflow_provider_fkjoin.plugins.joins_view import join_tasks, lineage_graph

    graph = lineage_graph(join_tasks(_served_example_dags(tmp_path, monkeypatch)))
    joins = {n["id"] for n in graph["nodes"] if n["type"] == "join"}
    assert joins == {f"{dag}.{task}" for dag, task in EXAMPLE_OUTPUTS}
    feeding = {(e["source"], e["target"]) for e in graph["edges"] if e["source"] in joins}
    kip99 = "fkjoin_kip99_global_table"
    assert feeding == {(f"{kip99}.bootstrap_products", f"{kip99}.enrich_orders")}
    warehouse = f"file://{tmp_path / 'warehouse'}"
    tables = {n["id"] for n in graph["nodes"] if n["type"] == "table"}
    assert {f"{warehouse}/orders", f"{warehouse}/customers", f"{warehouse}/products_cdc"} <= tables
    assert f"{warehouse}/products_global" not in tables, "a table a join writes is that join's node"
    into = {e["source"] for e in graph["edges"] if e["target"] == f"{kip99}.enrich_orders"}
    assert into == {f"{warehouse}/orders_stream", f"{kip99}.bootstrap_products"}
    depth = {n["id"]: n["depth"] for n in graph["nodes"]}
    assert (depth[f"{warehouse}/products_cdc"], depth[f"{kip99}.bootstrap_products"]) == (0, 1)
    assert depth[f"{kip99}.enrich_orders"] == 2


def test_joins_feeding_joins_across_dags_and_a_cycle_terminates() -> None:
    from airflow_provider_fkjoin.plugins.joins_view import JoinTask, lineage_graph

    a = JoinTask("one", "a", "foreign_key_join", "/w/a", inputs=("file:///w/x", "file:///w/c"))
    b = JoinTask("two", "b", "foreign_key_join", "/w/b", inputs=("file:///w/a",))
    c = JoinTask("two", "c", "foreign_key_join", "/w/c", inputs=("file:///w/b",))
    graph = lineage_graph([a, b, c])
    assert {(e["source"], e["target"], e["table"]) for e in graph["edges"]} == {
        ("file:///w/x", "one.a", "file:///w/x"),
        ("two.c", "one.a", "file:///w/c"),
        ("one.a", "two.b", "file:///w/a"),
        ("two.b", "two.c", "file:///w/b"),
    }
    assert {n["id"]: n["label"] for n in graph["nodes"]}["two.b"] == "b"


def test_a_row_carries_its_freshness_state_last_task_and_asset() -> None:
    from airflow_provider_fkjoin.plugins.joins_view import JoinTask, output_row

    policy = {"warn_after": 600.0, "error_after": 3600.0}
    task = JoinTask("d", "t", "foreign_key_join", "/w/out", freshness=policy)
    inputs = {
        "left": {"consumed_version": 3, "latest_version": 6, "lag_versions": 3, "lag_s": 900.0},
        "right": {"consumed_version": 2, "latest_version": 2, "lag_versions": 0, "lag_s": 0.0},
    }
    last = {"run_id": "r1", "map_index": -1, "state": "failed", "try_number": 2}
    row = output_row(task, {"lag_s": 900.0, "inputs": inputs}, None, last_task=last, asset_id=7)
    assert (row["freshness_state"], row["lag_s"], row["lag_versions"]) == ("warn", 900.0, 3)
    assert row["freshness_policy"] == policy and row["last_task"] == last
    assert (row["asset_id"], row["asset_uri"]) == (7, "file:///w/out")
    unread = output_row(task, None, "unreadable: gone")
    assert (unread["freshness_state"], unread["error"]) == ("unknown", "unreadable: gone")
    assert output_row(JoinTask("d", "t", "foreign_key_join", "/w/out"), None, None)["freshness_state"] is None
    s3 = output_row(JoinTask("d", "t", "foreign_key_join", "s3://lake/t/out"), None, None)
    assert s3["browser_url"] == "https://s3.console.aws.amazon.com/s3/buckets/lake?prefix=t/out/"


def test_the_example_join_declares_a_freshness_policy_the_view_reads(tmp_path: Path, monkeypatch) -> None:
    from airflow_provider_fkjoin.plugins.joins_view import join_tasks

    found = {(t.dag_id, t.task_id): t for t in join_tasks(_served_example_dags(tmp_path, monkeypatch))}
    assert found[("fkjoin_kip213_fk_join", "orders_customers")].freshness == {
        "warn_after": 2 * 3600.0,
        "error_after": 6 * 3600.0,
    }


def test_the_page_script_parses() -> None:
    """The view's script is valid JavaScript (node checks it, when installed; the browser test runs it)."""
    import shutil
    import subprocess

    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    for script in (STATIC / "joins.js", STATIC / "plan.js"):
        done = subprocess.run([node, "--check", str(script)], capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr


# -- the plan each refresh ran ---------------------------------------------------------------------------


def _node(script: str) -> Any:
    """What a node script prints (one JSON value) with ``plan.js`` loaded as ``plan``."""
    import shutil
    import subprocess

    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    source = f"const plan = require({json.dumps(str(STATIC / 'plan.js'))});\n{script}"
    done = subprocess.run([node, "-e", source], capture_output=True, text=True, check=False, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_page_marks_a_slow_plan_by_the_engines_own_rule() -> None:
    """``plan.js``'s rule, run by node, against :func:`cost_history.slower_than_expected` (the rule the
    engine warns by) on plans either side of the threshold: the same threshold, the same verdicts."""
    from airflow_provider_fkjoin.engine.core.cost_history import WARN_RATIO, slower_than_expected
    from airflow_provider_fkjoin.engine.core.planning import StrategyEstimate

    cases: list[dict[str, Any]] = []
    for chosen in ("incremental", "recompute"):
        for actual in (0.5, 5.9, 6.0, 6.1, 7.4, 7.5, 7.6, 30.0):
            for estimate in ((4.0, 5.0), (5.0, 4.0), (4.0, 0.0), (0.0, 4.0)):
                cases.append(
                    {
                        "chosen": chosen,
                        "actual_s": actual,
                        "estimate": {"incremental_s": estimate[0], "recompute_s": estimate[1]},
                    }
                )
    cases.append({**cases[-1], "chosen": "recompute", "fallback": "no net-change commit now"})
    cases.append({"chosen": "full", "basis": "full", "actual_s": 60.0, "estimate": None})
    cases.append(
        {"chosen": "incremental", "actual_s": None, "estimate": {"incremental_s": 1, "recompute_s": 1}}
    )

    verdicts = _node(
        f"const cases = {json.dumps(cases)};\n"
        "console.log(JSON.stringify({ratio: plan.WARN_RATIO, slower: cases.map(plan.slowerPlan)}));"
    )

    def engine(case: dict[str, Any]) -> str | None:
        ran = "incremental" if case.get("fallback") else case["chosen"]
        if case["estimate"] is None or case["actual_s"] is None or ran not in ("incremental", "recompute"):
            return None
        estimate = case["estimate"]
        return slower_than_expected(
            ran,
            case["actual_s"],
            StrategyEstimate(estimate["incremental_s"], estimate["recompute_s"], 0, 0, 0),
        )

    assert verdicts["ratio"] == WARN_RATIO
    assert verdicts["slower"] == [engine(case) for case in cases]
    assert (
        "recompute" in verdicts["slower"]
        and "incremental" in verdicts["slower"]
        and None in verdicts["slower"]
    )


def test_the_plan_reads_as_the_plan_its_basis_its_seconds_and_both_estimates() -> None:
    shown = _node(
        "const seconds = (s) => `${s.toFixed(1)} s`;\n"
        "console.log(JSON.stringify([\n"
        "  plan.planSummary({chosen: 'recompute', basis: 'history', actual_s: 3.0,\n"
        "                    estimate: {incremental_s: 6.0, recompute_s: 3.5}}, seconds),\n"
        "  plan.planSummary({chosen: 'recompute', basis: 'change_ratio', actual_s: 7.0, reason: 'r',\n"
        "                    fallback: 'f', estimate: {incremental_s: 2.0, recompute_s: 4.0}}, seconds),\n"
        "  plan.planSummary({chosen: 'full', basis: 'full', actual_s: 12.5, estimate: null}, seconds),\n"
        "  plan.planSummary(null, seconds),\n"
        "]));"
    )
    assert shown == [
        {
            "text": "recompute (history) 3.0 s; estimated 6.0 s incremental / 3.5 s recompute",
            "slower": None,
            "warning": None,
        },
        {
            "text": "incremental (fallback) 7.0 s; estimated 2.0 s incremental / 4.0 s recompute",
            "slower": "recompute",
            "warning": "the incremental plan took more than 1.5x the recompute plan's estimate (4.0 s)",
        },
        {"text": "full 12.5 s", "slower": None, "warning": None},
        None,
    ]


def test_the_page_loads_the_plan_script_first_and_the_app_serves_it() -> None:
    from airflow_provider_fkjoin.plugins.joins_view import _page, static_asset

    html = _page("output", "Join output").body.decode()
    assert html.index("/fkjoin/static/plan.js") < html.index("/fkjoin/static/joins.js")
    served = static_asset("plan.js", user=None)
    assert served.media_type == "text/javascript" and served.body == (STATIC / "plan.js").read_bytes()


def _plan_commits(output: Path) -> None:
    """Three refresh commits on ``output``: an older one that recorded no plan, a plan that took far more
    than 1.5x the other plan's estimate, and one within its estimates (newest)."""
    now = datetime.now(UTC)
    base = {
        "kind": "foreign_key_join",
        "mode": "incremental",
        "reason": "changes since the last refresh",
        "inputs": {"left": {"location": "/w/a", "table_id": "t", "version": 1}},
    }
    write_table(output, [1], {**base, "mode": "full", "reason": "first run"})
    write_table(
        output,
        [2],
        {
            **base,
            "started_at": (now - timedelta(seconds=20)).isoformat(),
            "strategy": {
                "chosen": "incremental",
                "basis": "prior",
                "plan_start_s": 1.0,
                "cluster": "c1",
                "estimate": {"incremental_s": 4.0, "recompute_s": 5.0},
            },
        },
    )
    write_table(
        output,
        [3],
        {
            **base,
            "started_at": (now - timedelta(seconds=1)).isoformat(),
            "strategy": {
                "chosen": "recompute",
                "basis": "history",
                "plan_start_s": 0.5,
                "cluster": "c1",
                "estimate": {"incremental_s": 6.0, "recompute_s": 3.5},
            },
        },
    )


def test_each_refresh_of_the_view_carries_the_plan_its_commit_recorded(tmp_path: Path) -> None:
    from airflow_provider_fkjoin.plugins.joins_view import JoinTask, output_row, read_freshness

    _plan_commits(tmp_path / "out")
    task = JoinTask("d", "t", "foreign_key_join", str(tmp_path / "out"))
    [(freshness, error)] = read_freshness([task], history=50)
    assert error is None and freshness is not None
    row = output_row(task, freshness, None)

    plans = plans_in_log(tmp_path / "out")
    assert [r["version"] for r in freshness["refreshes"]] == [2, 1, 0]
    assert row["last_refresh"]["strategy"] is not None
    for refresh in freshness["refreshes"]:
        expected, shown = plans[refresh["version"]], refresh["strategy"]
        if expected is None:
            assert shown is None, refresh
            continue
        assert {k: shown[k] for k in ("chosen", "basis", "estimate")} == {
            k: expected[k] for k in ("chosen", "basis", "estimate")
        }
        assert shown["actual_s"] == pytest.approx(expected["actual_s"], abs=2e-3)


def _in_a_browser(routes: dict[str, tuple[str, bytes]], url: str, ready: str) -> dict[str, Any]:
    """Open ``url`` in headless Chromium with every request answered from ``routes`` (path -> (content
    type, body); no server), wait for the selector ``ready`` and return what the test reads off the page."""
    from urllib.parse import urlsplit

    chromium = Path("/usr/bin/chromium")
    if not chromium.exists():
        pytest.skip(f"{chromium} is missing: scripts/setup-e2e.sh installs it")
    from playwright.sync_api import sync_playwright

    def answer(route: Any) -> None:
        found = routes.get(urlsplit(route.request.url).path)
        if found is None:
            route.fulfill(status=404, body="not here")
        else:
            route.fulfill(status=200, content_type=found[0], body=found[1])

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(chromium), args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]
        )
        try:
            page = browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.route("**/*", answer)
            page.goto(url)
            page.wait_for_selector(ready, timeout=30_000)
            return {"errors": errors, **page.evaluate(_READ_PAGE)}
        finally:
            browser.close()


#: What the browser test reads: the history table's plan cells by version, and the refresh tab's plan.
_READ_PAGE = """() => {
  const cells = {};
  for (const row of document.querySelectorAll("tr[data-version]")) {
    const cell = row.querySelector("td.plan");
    cells[row.dataset.version] = {text: cell.innerText, slower: cell.dataset.slower ?? null,
                                  marked: cell.classList.contains("slow-plan")};
  }
  const plan = document.getElementById("plan");
  return {cells, plan: plan ? {text: plan.innerText, slower: plan.dataset.slower ?? null,
                               marked: plan.classList.contains("slow-plan")} : null};
}"""


def _static_routes() -> dict[str, tuple[str, bytes]]:
    from airflow_provider_fkjoin.plugins.joins_view import URL_PREFIX, _asset

    types = {".js": "text/javascript", ".css": "text/css"}
    return {
        f"{URL_PREFIX}/static/{name}": (types[Path(name).suffix], _asset(name))
        for name in ("joins.js", "plan.js", "uPlot.iife.min.js", "uPlot.min.css")
    }


def test_the_history_page_shows_each_plan_and_marks_the_slow_one(tmp_path: Path) -> None:
    from airflow_provider_fkjoin.plugins.joins_view import (
        URL_PREFIX,
        JoinTask,
        _page,
        output_row,
        read_freshness,
    )

    _plan_commits(tmp_path / "out")
    task = JoinTask("d", "t", "foreign_key_join", str(tmp_path / "out"))
    [(freshness, _)] = read_freshness([task], history=50)
    assert freshness is not None
    served = {**output_row(task, freshness, None), "refreshes": freshness["refreshes"], "timezone": "UTC"}
    routes = {
        **_static_routes(),
        f"{URL_PREFIX}/output": ("text/html", _page("output", "Join output").body),
        f"{URL_PREFIX}/api/outputs/d/t": ("application/json", json.dumps(served).encode()),
    }

    seen = _in_a_browser(routes, f"http://view.test{URL_PREFIX}/output?dag_id=d&task_id=t", "td.plan")

    assert seen["errors"] == []
    plans = plans_in_log(tmp_path / "out")
    cells = seen["cells"]
    assert cells["0"] == {"text": "", "slower": None, "marked": False}, "no plan recorded: nothing shown"
    slow, fine = plans[1], plans[2]
    assert slow is not None and fine is not None
    assert slow["actual_s"] > 1.5 * slow["estimate"]["recompute_s"]
    assert fine["actual_s"] <= 1.5 * fine["estimate"]["incremental_s"], "not slow: the test needs it so"
    assert re.fullmatch(
        r"incremental \(prior\) (\d+) s; estimated 4\.0 s incremental / 5\.0 s recompute\s+"
        r"⚠ the incremental plan took more than 1\.5x the recompute plan's estimate \(5\.0 s\)",
        cells["1"]["text"],
    ), cells["1"]
    assert abs(int(cells["1"]["text"].split()[2]) - slow["actual_s"]) <= 0.5 + 1e-3
    assert (cells["1"]["slower"], cells["1"]["marked"]) == ("recompute", True)
    match = re.fullmatch(
        r"recompute \(history\) (\d+\.\d) s; estimated 6\.0 s incremental / 3\.5 s recompute",
        cells["2"]["text"],
    )
    assert match, cells["2"]
    assert abs(float(match[1]) - fine["actual_s"]) <= 0.05 + 1e-3
    assert (cells["2"]["slower"], cells["2"]["marked"]) == (None, False)


def test_the_refresh_tab_shows_the_plan_of_the_tasks_result() -> None:
    from airflow_provider_fkjoin.plugins.joins_view import URL_PREFIX, _page

    strategy = {
        "requested": "auto",
        "chosen": "recompute",
        "reason": "the change feeds hold 40.0% of the inputs' bytes",
        "basis": "change_ratio",
        "estimate": {"incremental_s": 2.0, "recompute_s": 4.0, "prior_incremental_s": 1.0},
        "actual_s": 7.0,
        "fallback": "the output cannot take a net-change commit now: the incremental plan ran",
    }
    result = {
        "kind": "foreign_key_join",
        "mode": "incremental",
        "reason": "changes since the last refresh",
        "output": {"path": "/w/out", "version": 4},
        "inputs": {"left": {"path": "/w/a", "from_version": 1, "to_version": 2}},
        "rows": {"inserted": 1, "updated": 0, "deleted": 0},
        "duration_s": 9.0,
        "strategy": strategy,
    }
    answer = {"dag_id": "d", "run_id": "r", "task_id": "t", "map_index": -1, "join": True, "result": result}
    routes = {
        **_static_routes(),
        f"{URL_PREFIX}/refresh": ("text/html", _page("refresh", "Join refresh").body),
        f"{URL_PREFIX}/api/refresh": ("application/json", json.dumps(answer).encode()),
    }

    seen = _in_a_browser(routes, f"http://view.test{URL_PREFIX}/refresh?dag_id=d&run_id=r&task_id=t", "#plan")

    assert seen["errors"] == []
    assert seen["plan"]["text"].splitlines() == [
        "incremental (fallback) 7.0 s; estimated 2.0 s incremental / 4.0 s recompute",
        "⚠ the incremental plan took more than 1.5x the recompute plan's estimate (4.0 s)",
        strategy["reason"],
        strategy["fallback"],
    ]
    assert (seen["plan"]["slower"], seen["plan"]["marked"]) == ("recompute", True)

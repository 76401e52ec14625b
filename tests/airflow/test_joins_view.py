"""The Joins view's decisions, without servers: which tasks of the example DAGs write which outputs (read
from the DAGs as the api-server holds them: serialized, then deserialized), and the order and shape of the
view's rows. The view on a real api-server, with logins and a browser:
``tests/e2e/test_airflow_servers.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

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


@pytest.mark.parametrize("name", ["joins.js", "uPlot.iife.min.js", "uPlot.min.css", "page.html"])
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
    script = REPO / "airflow_provider_fkjoin" / "plugins" / "static" / "joins.js"
    done = subprocess.run([node, "--check", str(script)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr

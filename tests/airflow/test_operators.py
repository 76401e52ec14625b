"""Operators: spec from arguments and YAML files, templating, XCom, outlet asset extra, links, lineage.

The hook is replaced at its boundary (``FkJoinHook.run``): these tests need no Spark."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from airflow.sdk import DAG, Asset, AssetAlias
from airflow.sdk.execution_time.context import OutletEventAccessors
from airflow_support import FakeStateStore, record_refresh, write_table

from airflow_provider_fkjoin import operators
from airflow_provider_fkjoin.hooks.fkjoin import FkJoinBadInputError, FkJoinHook
from airflow_provider_fkjoin.links import JOIN_REFRESH_XCOM_KEY, OUTPUT_TABLE_XCOM_KEY, SPARK_UI_XCOM_KEY
from airflow_provider_fkjoin.operators import (
    ForeignKeyJoinOperator,
    GlobalTableBootstrapOperator,
    MultiWayJoinOperator,
    SelfJoinOptimizeOperator,
    StreamTableJoinOperator,
    WindowedJoinOperator,
)
from airflow_provider_fkjoin.operators.joins import (
    REPORTED_VERSION_KEY,
    _FkJoinOperator,
    asset_event_extra,
    output_changed,
    parse_flag,
)

START = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)


class FakeTI:
    """Records XCom pushes (the task-instance boundary); names the task instance like the real one."""

    def __init__(self, try_number: int = 1) -> None:
        self.pushed: dict[str, Any] = {}
        self.dag_id, self.run_id, self.task_id = "orders", "manual__2025-01-01", "join"
        self.map_index, self.try_number = -1, try_number

    def xcom_push(self, key: str, value: Any) -> None:
        self.pushed[key] = value


def context(**extra: Any) -> dict[str, Any]:
    return {
        "ti": FakeTI(),
        "outlet_events": OutletEventAccessors(),
        "task_state_store": FakeStateStore(),
        "ds": "2025-01-01",
        "params": {},
        **extra,
    }


def events(ctx: dict[str, Any], op: _FkJoinOperator) -> list[tuple[Asset, dict[str, Any]]]:
    """The asset events a run emitted through the operator's alias: ``(asset, extra)``."""
    return [
        (Asset(name=e.dest_asset_key.name, uri=e.dest_asset_key.uri), e.extra)
        for e in ctx["outlet_events"][op.output_alias].asset_alias_events
    ]


class Submitted(list):
    """The specs the operator submitted, and the ``origin`` it passed with each."""

    def __init__(self) -> None:
        super().__init__()
        self.origins: list[dict[str, Any] | None] = []


@pytest.fixture
def submitted(monkeypatch) -> Submitted:
    """Replace FkJoinHook.run: record the spec (with ``full_refresh`` and ``write_path`` as
    ``spec["_full_refresh"]``, ``spec["_write_path"]``), report a Spark UI, return a result for the output."""
    specs = Submitted()

    def fake_run(
        self: FkJoinHook,
        spec: dict[str, Any],
        *,
        on_spark_ui=None,
        full_refresh: bool = False,
        write_path: str = "auto",
        origin: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        specs.append({**spec, "_full_refresh": full_refresh, "_write_path": write_path})
        specs.origins.append(origin)
        if on_spark_ui:
            on_spark_ui("http://driver:4040")
        sides = {
            side: {"path": spec[side]["path"], "to_version": 4}
            for side in spec
            if side in ("left", "right", "source", "stream", "table", "input")
        }
        for item in spec.get("inputs") or []:  # a multiway_join reports its inputs by name
            sides[item["name"]] = {"path": item["path"], "to_version": 4}
        return {
            "kind": spec["kind"],
            "mode": "incremental",
            "reason": "changes",
            "output": {"path": spec["output"]["path"], "version": 7},
            "inputs": sides,
            "rows": {"inserted": 2, "updated": 1, "deleted": 0, "changes_read": {"left": 3}},
        }

    monkeypatch.setattr(FkJoinHook, "run", fake_run)
    return specs


def fk_operator(**kwargs: Any) -> ForeignKeyJoinOperator:
    args = {
        "task_id": "join",
        "left": {"path": "/w/orders", "key": ["order_id"]},
        "right": {"path": "/w/customers", "key": ["customer_id"]},
        "foreign_key": ["customer_id"],
        "how": "left",
        "output": "/w/orders_customers",
    }
    return ForeignKeyJoinOperator(**{**args, **kwargs})


def test_foreign_key_join_spec_from_arguments():
    assert fk_operator().build_spec() == {
        "kind": "foreign_key_join",
        "left": {"path": "/w/orders", "key": ["order_id"]},
        "right": {"path": "/w/customers", "key": ["customer_id"]},
        "foreign_key": ["customer_id"],
        "how": "left",
        "output": {"path": "/w/orders_customers"},
    }


def test_inputs_are_inlets_and_the_outlet_an_alias_named_after_the_task():
    with DAG("orders", schedule=None, start_date=START):
        op = fk_operator()
    assert op.outlets == [AssetAlias(name="fkjoin:orders.join")]
    assert op.inlets == [Asset(uri="file:///w/orders"), Asset(uri="file:///w/customers")]


def test_execute_returns_the_result_records_the_asset_event_and_pushes_links(submitted):
    op = fk_operator()
    ctx = context()
    result = op.execute(ctx)
    assert result["output"]["version"] == 7
    assert submitted[0]["output"] == {"path": "/w/orders_customers"}
    assert submitted[0]["_full_refresh"] is False
    assert submitted.origins[0] == {
        "dag_id": "orders",
        "run_id": "manual__2025-01-01",
        "task_id": "join",
        "map_index": -1,
        "try_number": 1,
    }
    assert events(ctx, op) == [
        (
            Asset(uri="file:///w/orders_customers"),
            {
                "kind": "foreign_key_join",
                "version": 7,
                "mode": "incremental",
                "rows": {"inserted": 2, "updated": 1, "deleted": 0},
                "inputs": {"left": 4, "right": 4},
            },
        )
    ]
    assert ctx["task_state_store"].values == {REPORTED_VERSION_KEY: 7}
    assert ctx["ti"].pushed == {
        OUTPUT_TABLE_XCOM_KEY: "/fkjoin/output?dag_id=orders&task_id=join",
        JOIN_REFRESH_XCOM_KEY: "/fkjoin/refresh?dag_id=orders&run_id=manual__2025-01-01&task_id=join",
        SPARK_UI_XCOM_KEY: "http://driver:4040",
    }


def test_spec_from_a_yaml_file_rendered_with_jinja_arguments_win(tmp_path: Path, submitted):
    spec_file = tmp_path / "orders.yaml"
    spec_file.write_text(
        "kind: foreign_key_join\n"
        "left: {path: '/w/{{ ds }}/orders', key: [order_id]}\n"
        "right: {path: /w/customers, key: [customer_id]}\n"
        "foreign_key: [customer_id]\n"
        "how: inner\n"
        "output: {path: /w/enriched}\n"
    )
    op = ForeignKeyJoinOperator(task_id="from_file", spec_file=str(spec_file), how="left")
    assert op.inlets == [Asset(uri="file:///w/customers")]  # the left path is templated
    ctx = context()
    op.execute(ctx)
    assert events(ctx, op)[0][0] == Asset(uri="file:///w/enriched")
    assert submitted[0]["left"]["path"] == "/w/2025-01-01/orders"
    assert submitted[0]["how"] == "left"


def test_relative_spec_file_is_found_next_to_the_dag_file(tmp_path: Path):
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "g.yaml").write_text("source: {path: /w/products_cdc, key: [id]}\noutput: /w/g\n")
    with DAG("relative", schedule=None, start_date=START) as dag:
        op = GlobalTableBootstrapOperator(task_id="boot", spec_file="specs/g.yaml")
    dag.fileloc = str(tmp_path / "dag.py")
    assert op.build_spec()["output"] == {"path": "/w/g", "owner": "relative.boot"}


def test_the_task_owns_its_output_unless_the_spec_names_an_owner() -> None:
    """The output's owner is the task (dag_id.task_id): a second DAG writing it is refused."""
    with DAG("sales", schedule=None, start_date=START):
        named = GlobalTableBootstrapOperator(
            task_id="boot", source={"path": "/w/p", "key": ["id"]}, output={"path": "/w/g", "owner": "team.p"}
        )
        default = GlobalTableBootstrapOperator(
            task_id="boot2", source={"path": "/w/p", "key": ["id"]}, output="/w/h"
        )
    assert named.build_spec()["output"] == {"path": "/w/g", "owner": "team.p"}
    assert default.build_spec()["output"] == {"path": "/w/h", "owner": "sales.boot2"}


def test_templated_arguments_are_rendered(submitted):
    with DAG("templated", schedule=None, start_date=START, params={"wh": "/lake"}):
        op = StreamTableJoinOperator(
            task_id="enrich",
            stream={"path": "{{ params.wh }}/orders_stream"},
            table={"path": "{{ params.wh }}/products_global", "key": ["product_id"]},
            key_mapper=["product_id"],
            output="{{ params.wh }}/orders_enriched",
        )
    assert op.outlets == [AssetAlias(name="fkjoin:templated.enrich")]  # the output is known at run time
    ctx = context(params={"wh": "/lake"})
    op.render_template_fields(ctx)
    spec = op.build_spec(ctx)
    assert spec["stream"] == {"path": "/lake/orders_stream"}
    assert spec["table"] == {"path": "/lake/products_global", "key": ["product_id"]}
    assert spec["output"] == {"path": "/lake/orders_enriched", "owner": "templated.enrich"}
    assert spec["kind"] == "stream_table_join"
    op.execute(ctx)  # the rendered output gets its asset event through the alias
    assert [asset for asset, _ in events(ctx, op)] == [Asset(uri="file:///lake/orders_enriched")]


def test_global_table_bootstrap_spec():
    op = GlobalTableBootstrapOperator(
        task_id="boot",
        source={
            "path": "/w/products_cdc",
            "key": ["product_id"],
            "changelog": {"op_column": "op", "order_by": ["lsn"]},
        },
        output="/w/products_global",
    )
    spec = op.build_spec()
    assert spec["kind"] == "global_table_bootstrap"
    assert spec["source"]["changelog"] == {"op_column": "op", "order_by": ["lsn"]}
    assert op.inlets == [Asset(uri="file:///w/products_cdc")]


def test_a_spec_file_of_another_kind_is_refused(tmp_path: Path):
    spec_file = tmp_path / "fk.yaml"
    spec_file.write_text("kind: foreign_key_join\noutput: /w/x\n")
    with pytest.raises(FkJoinBadInputError, match="does not match GlobalTableBootstrapOperator"):
        GlobalTableBootstrapOperator(task_id="boot", spec_file=str(spec_file)).build_spec()


def test_unsafe_paths_are_refused_naming_the_field():
    with pytest.raises(FkJoinBadInputError, match=r"^output\.path: table location 'out' is relative; "):
        fk_operator(output="out").build_spec()
    with pytest.raises(FkJoinBadInputError, match=r"^right\.path: table location 'w/customers' is relative"):
        fk_operator(right={"path": "w/customers", "key": ["customer_id"]}).build_spec()
    with pytest.raises(FkJoinBadInputError, match=r"^output\.path: .*'\.\.' climbs above the root"):
        fk_operator(output="/w/../../etc").build_spec()
    with pytest.raises(FkJoinBadInputError, match=r"^left\.path: .*scheme 'http'"):
        fk_operator(left={"path": "http://example.com/t", "key": ["k"]}).build_spec()
    with pytest.raises(FkJoinBadInputError, match=r"^output\.path: .*credentials in a URL"):
        fk_operator(output="s3a://AKIA:secret@bucket/out").build_spec()


def test_a_relative_output_fails_the_task_before_any_spark_job(submitted):
    op = fk_operator(output="out")
    with pytest.raises(FkJoinBadInputError, match=r"output\.path: table location 'out' is relative"):
        op.execute(context())
    assert submitted == []


def test_paths_are_normalised_as_the_engine_does(submitted):
    spec = fk_operator(
        left={"path": "file:///w/./orders/", "key": ["order_id"]},
        output="/w/x/../orders_customers//",
    ).build_spec()
    assert spec["left"] == {"path": "/w/orders", "key": ["order_id"]}
    assert spec["output"] == {"path": "/w/orders_customers"}
    op, ctx = fk_operator(output="/w/x/../orders_customers/"), context()
    op.execute(ctx)
    assert [asset for asset, _ in events(ctx, op)] == [Asset(uri="file:///w/orders_customers")]


# -- full refresh ------------------------------------------------------------------------------------
def test_full_refresh_is_passed_to_the_hook(submitted):
    fk_operator(full_refresh=True).execute(context())
    assert submitted[0]["_full_refresh"] is True


@pytest.mark.parametrize(
    ("value", "expected"),
    [("True", True), ("true", True), ("1", True), ("False", False), ("false", False), ("0", False)],
)
def test_full_refresh_is_templated(submitted, value, expected):
    with DAG("full", schedule=None, start_date=START):
        op = GlobalTableBootstrapOperator(
            task_id="boot",
            source={"path": "/w/products_cdc", "key": ["product_id"]},
            output="/w/products_global",
            full_refresh="{{ params.full }}",
        )
    ctx = context(params={"full": value})
    op.render_template_fields(ctx)
    op.execute(ctx)
    assert submitted[0]["_full_refresh"] is expected


def test_a_full_refresh_that_is_not_a_boolean_fails_naming_the_argument(submitted):
    with pytest.raises(FkJoinBadInputError, match=r"full_refresh: expected true or false, got 'maybe'"):
        fk_operator(full_refresh="maybe").execute(context())
    assert submitted == []


def test_every_operator_templates_full_refresh():
    operators = _FkJoinOperator.__subclasses__()
    assert {op.__name__ for op in operators} >= {
        "ForeignKeyJoinOperator",
        "GlobalTableBootstrapOperator",
        "StreamTableJoinOperator",
        "WindowedJoinOperator",
        "SelfJoinOptimizeOperator",
        "MultiWayJoinOperator",
    }
    for operator in operators:
        assert "full_refresh" in operator.template_fields, operator.__name__


def test_parse_flag():
    assert [parse_flag(v, "f") for v in (True, False, None, 0, 1, " TRUE ", "no", "")] == [
        True, False, False, False, True, True, False, False,
    ]  # fmt: skip
    with pytest.raises(FkJoinBadInputError, match="f: expected true or false, got 2"):
        parse_flag(2, "f")


def test_spark_ui_is_off_unless_asked_for():
    assert fk_operator().make_hook().spark_ui is False
    assert fk_operator(spark_ui=True).make_hook().spark_ui is True


def test_an_invalid_spec_fails_before_any_spark_job(submitted):
    op = fk_operator(foreign_key=["a", "b"])  # two parts for a one-column right key
    with pytest.raises(FkJoinBadInputError, match="foreign_key has 2 part"):
        op.execute(context())
    assert submitted == []


def test_object_store_output_asset_and_link(submitted):
    op = fk_operator(output="s3://lake/tables/orders_customers")
    assert op.outlets == [op.output_alias]
    ctx = context()
    op.execute(ctx)
    assert ctx["ti"].pushed[OUTPUT_TABLE_XCOM_KEY] == "/fkjoin/output?dag_id=orders&task_id=join"
    assert events(ctx, op)[0][0] == Asset(uri="s3://lake/tables/orders_customers")


def test_lineage_tables():
    op = fk_operator(output="s3a://lake/tables/out")  # Spark's s3a is OpenLineage's s3
    assert op.lineage_tables() == (
        [("file", "/w/orders"), ("file", "/w/customers")],
        [("s3://lake", "tables/out")],
    )


def test_openlineage_facets_when_the_extra_is_installed():
    pytest.importorskip("airflow.providers.openlineage")
    lineage = fk_operator().get_openlineage_facets_on_complete(None)
    assert [d.name for d in lineage.inputs] == ["/w/orders", "/w/customers"]
    assert [d.name for d in lineage.outputs] == ["/w/orders_customers"]
    assert lineage.outputs[0].facets == {}  # not run: no versions, no columns


def test_openlineage_carries_the_versions_consumed_and_produced_and_column_lineage(submitted):
    """After a run: each input's Delta version consumed, the output's version produced, and which input
    columns each output column is computed from (string literals read nothing)."""
    pytest.importorskip("airflow.providers.openlineage")
    from openlineage.client.serde import Serde

    op = fk_operator(
        columns={"amount": "l.amount", "label": "concat(r.`first name`, ' l.x ', l.amount)", "one": "1"}
    )
    op.execute(context())
    lineage = op.get_openlineage_facets_on_complete(None)
    assert [d.facets["version"].datasetVersion for d in lineage.inputs] == ["4", "4"]
    output = json.loads(Serde.to_json(lineage.outputs[0]))
    assert output["facets"]["version"]["datasetVersion"] == "7"
    fields = output["facets"]["columnLineage"]["fields"]
    assert set(fields) == {"amount", "label"}
    assert fields["amount"]["inputFields"] == [
        {"namespace": "file", "name": "/w/orders", "field": "amount", "transformations": []}
    ]
    assert fields["amount"]["transformationType"] == "IDENTITY"
    assert [(f["name"], f["field"]) for f in fields["label"]["inputFields"]] == [
        ("/w/customers", "first name"),
        ("/w/orders", "amount"),
    ]
    assert fields["label"]["transformationType"] == "TRANSFORMATION"


def test_parent_job_information_reaches_the_spark_conf_when_asked():
    """As SparkSubmitOperator does: the Spark application's own OpenLineage events name this task."""
    pytest.importorskip("airflow.providers.openlineage")

    class DagRun:
        conf: dict[str, Any] = {}
        clear_number = 0
        logical_date = run_after = START

    class LineageTI(FakeTI):
        logical_date, dag_run = START, DagRun()

        def get_template_context(self) -> dict[str, Any]:
            return {"dag_run": self.dag_run, "ti": self, "logical_date": self.logical_date}

    ctx = context(ti=LineageTI(), dag_run=DagRun())
    conf = fk_operator(openlineage_inject_parent_job_info=True, conf={"spark.x": "1"}).make_hook(ctx).conf
    assert conf["spark.openlineage.parentJobName"] == "orders.join" and conf["spark.x"] == "1"
    assert "spark.openlineage.parentRunId" in conf
    assert not any(key.startswith("spark.openlineage") for key in fk_operator().make_hook(ctx).conf)


def test_stream_table_join_lineage_reads_its_s_and_t_aliases(submitted):
    pytest.importorskip("airflow.providers.openlineage")
    op = StreamTableJoinOperator(
        task_id="enrich",
        stream={"path": "/w/orders_stream"},
        table={"path": "s3a://lake/products", "key": ["product_id"]},
        key_mapper=["product_id"],
        columns={"name": "t.name", "qty": "s.qty"},
        output="/w/enriched",
    )
    op.execute(context())
    fields = op.get_openlineage_facets_on_complete(None).outputs[0].facets["columnLineage"].fields
    assert [(f.namespace, f.name, f.field) for f in fields["name"].inputFields] == [
        ("s3://lake", "products", "name")
    ]
    assert [(f.name, f.field) for f in fields["qty"].inputFields] == [("/w/orders_stream", "qty")]


def test_asset_event_extra_keeps_only_scalars():
    extra = asset_event_extra(
        {"kind": "k", "mode": "noop", "output": {"version": 2}, "rows": {"a": 1, "b": {"x": 1}}}
    )
    assert extra == {"kind": "k", "version": 2, "mode": "noop", "rows": {"a": 1}, "inputs": {}}


def test_on_kill_stops_the_spark_application(monkeypatch):
    stopped: list[bool] = []
    monkeypatch.setattr(FkJoinHook, "on_kill", lambda self: stopped.append(True))
    op = fk_operator()
    op.on_kill()  # nothing running yet: no hook, nothing to stop
    op._hook = op.make_hook()
    op.on_kill()
    assert stopped == [True]


def test_write_path_is_passed_to_the_hook_and_templated(submitted):
    fk_operator().execute(context())
    assert submitted[0]["_write_path"] == "auto"
    with DAG("paths", schedule=None, start_date=START):
        operator = fk_operator(write_path="{{ params.write_path }}")
    ctx = context(params={"write_path": "MERGE"})
    operator.render_template_fields(ctx)
    operator.execute(ctx)
    assert submitted[1]["_write_path"] == "merge"


def test_an_unknown_write_path_fails_naming_the_argument(submitted):
    with pytest.raises(FkJoinBadInputError, match=r"write_path: expected one of auto, merge, got 'fast'"):
        fk_operator(write_path="fast").execute(context())
    assert submitted == []


def windowed_operator(**kwargs: Any) -> WindowedJoinOperator:
    args = {
        "task_id": "clicks",
        "mode": "stream",
        "left": {"path": "/w/impressions", "key": ["ad_id"], "time": "shown_at", "order_by": ["offset"]},
        "right": {"path": "/w/clicks", "key": ["ad_id"], "time": "clicked_at"},
        "window": {"before": "1h", "after": "1h", "grace": "{{ params.grace }}"},
        "how": "left",
        "output": "/w/ad_clicks",
    }
    return WindowedJoinOperator(**{**args, **kwargs})


def test_windowed_join_spec_templates_inlets_and_outlet(submitted):
    op = windowed_operator(late_unmatched="emit_immediately")
    assert op.inlets == [Asset(uri="file:///w/impressions"), Asset(uri="file:///w/clicks")]
    assert op.outlets == [op.output_alias]
    assert "window" in op.template_fields
    op.render_template_fields(context(params={"grace": "10m"}))
    op.execute(context())
    assert submitted[0] == {
        "kind": "windowed_join",
        "mode": "stream",
        "left": {"path": "/w/impressions", "key": ["ad_id"], "time": "shown_at", "order_by": ["offset"]},
        "right": {"path": "/w/clicks", "key": ["ad_id"], "time": "clicked_at"},
        "window": {"before": "1h", "after": "1h", "grace": "10m"},
        "how": "left",
        "late_unmatched": "emit_immediately",
        "output": {"path": "/w/ad_clicks"},
        "_full_refresh": False,
        "_write_path": "auto",
    }


TXNS = {"path": "/w/card_txns", "key": ["card_id"], "time": "txn_at", "order_by": ["offset"]}


def test_self_join_spec_inlet_and_outlet(submitted):
    op = SelfJoinOptimizeOperator(
        task_id="pairs",
        input=TXNS,
        window={"before": "10m", "after": "{{ params.after }}"},
        columns={"card_id": "l.card_id", "txn_id": "l.txn_id", "paired_txn_id": "r.txn_id"},
        output="/w/pairs",
    )
    assert op.inlets == [Asset(uri="file:///w/card_txns")]
    assert op.outlets == [op.output_alias]
    op.render_template_fields(context(params={"after": "10m"}))
    op.execute(context())
    assert submitted == [
        {
            "kind": "self_join",
            "input": TXNS,
            "window": {"before": "10m", "after": "10m"},
            "columns": {"card_id": "l.card_id", "txn_id": "l.txn_id", "paired_txn_id": "r.txn_id"},
            "output": {"path": "/w/pairs"},
            "_full_refresh": False,
            "_write_path": "auto",
        }
    ]


def test_self_join_takes_a_windowed_join_spec_file_and_submits_it_as_it_is(submitted, tmp_path: Path):
    """Checked after the arguments apply (the file lacks the output), submitted unchanged so the output
    keeps its identity; the engine runs it as a self-join. Its table is the inlet."""
    spec_file = tmp_path / "pairs.yaml"
    windowed = {
        "kind": "windowed_join",
        "mode": "stream",
        "left": TXNS,
        "right": TXNS,
        "window": {"before": "10m", "after": "10m"},
        "columns": {"txn_id": "l.txn_id", "paired_txn_id": "r.txn_id"},
    }
    spec_file.write_text(yaml.safe_dump(windowed))
    op = SelfJoinOptimizeOperator(task_id="pairs", spec_file=str(spec_file), output="/w/pairs")
    assert op.inlets == [Asset(uri="file:///w/card_txns")]
    assert op.lineage_tables() == (
        [("file", "/w/card_txns"), ("file", "/w/card_txns")],
        [("file", "/w/pairs")],
    )
    op.execute(context())
    assert submitted == [
        {**windowed, "output": {"path": "/w/pairs"}, "_full_refresh": False, "_write_path": "auto"}
    ]
    with pytest.raises(FkJoinBadInputError, match=r"input: the spec file holds a windowed_join"):
        SelfJoinOptimizeOperator(task_id="both", spec_file=str(spec_file), input=TXNS, output="/w/p").execute(
            context()
        )


def test_self_join_refuses_a_windowed_join_it_cannot_rewrite(submitted, tmp_path: Path):
    spec_file = tmp_path / "pairs.yaml"
    spec_file.write_text(
        yaml.safe_dump(
            {
                "kind": "windowed_join",
                "mode": "stream",
                "left": TXNS,
                "right": {**TXNS, "path": "/w/other_txns"},
                "window": {"before": "10m", "after": "10m"},
                "how": "left",
                "output": {"path": "/w/pairs"},
            }
        )
    )
    op = SelfJoinOptimizeOperator(task_id="pairs", spec_file=str(spec_file))
    with pytest.raises(FkJoinBadInputError, match=r"different tables; how is 'left'"):
        op.execute(context())
    assert submitted == []


def test_windowed_join_inverted_window_fails_before_any_spark_job(submitted):
    op = windowed_operator(window={"before": "1h", "after": "-2h"})
    with pytest.raises(FkJoinBadInputError, match="window: before"):
        op.execute(context())
    assert submitted == []


# -- multiway_join (Joinery) ---------------------------------------------------------------------------
REVIEW = {"name": "review", "path": "/w/review", "key": ["review_id"], "join_keys": ["biz_id"]}
BUSINESS = {
    "name": "business",
    "path": "/w/business",
    "key": ["business_id"],
    "join_keys": ["business_id"],
    "aliases": [{"from": "business_id", "to": "biz_id"}],
}
OWNER = {
    "name": "owner",
    "path": "/w/owner",
    "key": ["owner_id", "business_id"],
    "join_keys": ["business_id"],
    "aliases": [{"from": "business_id", "to": "biz_id"}],
}
#: Joinery's published example (business, then its reviews), with the schemas map resolving its ids.
JOINERY = {
    "format": "joinery",
    "schemas": {
        56789: {"name": "business", "path": "/w/business", "key": ["business_id"]},
        12345: {"name": "review", "path": "/w/review", "key": ["review_id"]},
    },
    "join": [
        {
            "schema_id": 56789,
            "join_keys": ["business_id"],
            "aliases": [{"from": "business_id", "to": "biz_id"}],
        },
        {"schema_id": 12345, "join_keys": ["biz_id"], "exclude_fields": ["text"]},
    ],
    "output": {
        "namespace": "joinery",
        "source": "business_reviews",
        "doc": "Yelp businesses and their reviews",
        "pkey": "business_id",
        "path": "/w/business_reviews",
    },
}


def multiway_operator(**kwargs: Any) -> MultiWayJoinOperator:
    args = {
        "task_id": "business_reviews",
        "inputs": [{**REVIEW, "exclude_fields": ["{{ params.hidden }}"]}, BUSINESS, OWNER],
        "output": {"path": "/w/business_reviews", "pkey": ["review_id", "owner_id"]},
        "enforce_pkey": "{{ params.enforce }}",
        "max_rows_per_join_key": "{{ params.limit }}",
    }
    return MultiWayJoinOperator(**{**args, **kwargs})


def test_multiway_join_spec_templates_inlets_outlet_and_result(submitted):
    """Every input is an inlet, in join order; rendered flags and limits reach the hook as a bool and an
    int; the result is the XCom value and the asset event names the versions consumed per input."""
    op = multiway_operator()
    assert op.inlets == [
        Asset(uri="file:///w/review"),
        Asset(uri="file:///w/business"),
        Asset(uri="file:///w/owner"),
    ]
    assert op.outlets == [op.output_alias]
    assert {"inputs", "join", "schemas", "output_table", "enforce_pkey", "max_rows_per_join_key"} <= set(
        op.template_fields
    )
    ctx = context(params={"hidden": "text", "enforce": "False", "limit": "5000"})
    op.render_template_fields(ctx)
    result = op.execute(ctx)
    assert submitted == [
        {
            "kind": "multiway_join",
            "inputs": [{**REVIEW, "exclude_fields": ["text"]}, BUSINESS, OWNER],
            "output": {"path": "/w/business_reviews", "pkey": ["review_id", "owner_id"]},
            "enforce_pkey": False,
            "max_rows_per_join_key": 5000,
            "_full_refresh": False,
            "_write_path": "auto",
        }
    ]
    assert result["kind"] == "multiway_join" and result["output"]["version"] == 7
    [(asset, extra)] = events(ctx, op)
    assert asset == Asset(uri="file:///w/business_reviews")
    assert extra["inputs"] == {"review": 4, "business": 4, "owner": 4}
    assert op.lineage_tables() == (
        [("file", "/w/review"), ("file", "/w/business"), ("file", "/w/owner")],
        [("file", "/w/business_reviews")],
    )


def test_multiway_join_templated_paths_are_rendered_and_normalised(submitted):
    with DAG("multiway_templated", schedule=None, start_date=START):
        op = MultiWayJoinOperator(
            task_id="business_reviews",
            inputs=[
                {**REVIEW, "path": "{{ params.wh }}/review/"},
                {**BUSINESS, "path": "file://{{ params.wh }}/./business"},
            ],
            output="{{ params.wh }}/x/../business_reviews",
        )
    assert op.inlets == [] and op.outlets == [op.output_alias]  # templated: known at run time
    ctx = context(params={"wh": "/lake"})
    op.render_template_fields(ctx)
    op.execute(ctx)
    assert submitted[0]["inputs"] == [
        {**REVIEW, "path": "/lake/review"},
        {**BUSINESS, "path": "/lake/business"},
    ]
    assert submitted[0]["output"] == {
        "path": "/lake/business_reviews",
        "owner": "multiway_templated.business_reviews",
    }


def test_multiway_join_takes_joinery_arguments_and_submits_them_as_they_are(submitted):
    """Joinery's own format (Yelp's example, plus the schemas map) goes to the engine unconverted: the
    engine resolves the schema ids, the pkey renamed by an alias and the pkey that repeats. The inlets are
    the tables the join entries name, in join order."""
    op = MultiWayJoinOperator(task_id="business_reviews", **JOINERY)
    assert op.inlets == [Asset(uri="file:///w/business"), Asset(uri="file:///w/review")]
    assert op.outlets == [op.output_alias]
    op.execute(context())
    assert submitted == [{**JOINERY, "kind": "multiway_join", "_full_refresh": False, "_write_path": "auto"}]
    assert op.lineage_tables() == (
        [("file", "/w/business"), ("file", "/w/review")],
        [("file", "/w/business_reviews")],
    )


def test_multiway_join_takes_a_joinery_spec_file_rendered_with_jinja(submitted, tmp_path: Path):
    """A Joinery YAML file (int schema ids, no ``format``: its ``join:`` says it) with a templated path;
    the output argument replaces the file's output. Its tables are inlets at parse time."""
    document = {key: value for key, value in JOINERY.items() if key != "format"}
    document["schemas"] = {
        **JOINERY["schemas"],
        12345: {"name": "review", "path": "/w/{{ ds }}/review", "key": ["review_id"]},
    }
    spec_file = tmp_path / "business_reviews.yaml"
    spec_file.write_text(yaml.safe_dump(document))
    op = MultiWayJoinOperator(
        task_id="business_reviews",
        spec_file=str(spec_file),
        output={"path": "/w/reviews_by_business", "pkey": ["review_id"]},
    )
    assert op.inlets == [Asset(uri="file:///w/business")]  # the review path is templated
    assert op.outlets == [op.output_alias]
    op.execute(context())
    (spec,) = submitted
    assert spec["format"] == "joinery" and spec["kind"] == "multiway_join"
    assert spec["schemas"][12345]["path"] == "/w/2025-01-01/review"
    assert spec["output"] == {"path": "/w/reviews_by_business", "pkey": ["review_id"]}
    assert spec["join"] == JOINERY["join"]


def test_multiway_join_takes_a_native_spec_file(submitted, tmp_path: Path):
    spec_file = tmp_path / "business_reviews.yaml"
    spec_file.write_text(
        yaml.safe_dump({"kind": "multiway_join", "inputs": [REVIEW, BUSINESS], "max_rows_per_join_key": 10})
    )
    op = MultiWayJoinOperator(task_id="br", spec_file=str(spec_file), output="/w/br")
    assert op.inlets == [Asset(uri="file:///w/review"), Asset(uri="file:///w/business")]
    op.execute(context())
    assert submitted[0] == {
        "kind": "multiway_join",
        "inputs": [REVIEW, BUSINESS],
        "max_rows_per_join_key": 10,
        "output": {"path": "/w/br"},
        "_full_refresh": False,
        "_write_path": "auto",
    }


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (  # join keys match by position: one input joins on two columns, the other on one
            {"inputs": [{**REVIEW, "join_keys": ["biz_id", "user_id"]}, BUSINESS]},
            r"inputs\[1\]\.join_keys: 'business' joins on 1 column\(s\) but 'review' on 2",
        ),
        ({"inputs": [REVIEW]}, r"inputs: expected a list of mappings \(at least 2 items"),  # one is no join
        (
            {"inputs": [REVIEW, {**BUSINESS, "path": "/w/review/"}]},
            r"'business' and 'review' are the same table \(/w/review\)",
        ),
        (
            {"inputs": [REVIEW, {**BUSINESS, "name": "review"}]},
            r"names \['review'\] are used twice",
        ),
        (
            {"inputs": [REVIEW, BUSINESS], "join": JOINERY["join"]},
            r"^inputs: the spec has both native inputs and Joinery's join",
        ),
        (
            {**JOINERY, "join": [*JOINERY["join"], {"schema_id": 999, "join_keys": ["biz_id"]}]},
            r"join\[2\]\.schema_id: 999 is not in schemas",
        ),
        (
            {"inputs": [REVIEW, BUSINESS], "max_rows_per_join_key": "lots"},
            r"^max_rows_per_join_key: expected",
        ),
        ({"inputs": [REVIEW, BUSINESS], "enforce_pkey": "maybe"}, r"^enforce_pkey: expected true or false"),
        ({"inputs": [{**REVIEW, "path": "w/review"}, BUSINESS]}, r"^inputs\[0\]\.path: table location 'w/r"),
        ({**JOINERY, "schemas": {12345: {"path": "w/review"}}}, r"^schemas\.12345\.path: table location"),
    ],
)
def test_multiway_join_bad_spec_fails_before_any_spark_job(submitted, arguments, message):
    op = MultiWayJoinOperator(**{"task_id": "br", "output": "/w/business_reviews", **arguments})
    with pytest.raises(FkJoinBadInputError, match=message):
        op.execute(context())
    assert submitted == []


def test_multiway_join_refuses_a_spec_file_of_another_kind(tmp_path: Path):
    spec_file = tmp_path / "fk.yaml"
    spec_file.write_text("kind: foreign_key_join\noutput: /w/x\n")
    with pytest.raises(FkJoinBadInputError, match=r"does not match MultiWayJoinOperator \(multiway_join\)"):
        MultiWayJoinOperator(task_id="br", spec_file=str(spec_file)).build_spec()


# -- asset events only when the output changed; retries report what an earlier try committed --------------
def test_output_changed():
    assert not output_changed({"mode": "noop", "rows": {"inserted": 0}})
    assert not output_changed({"mode": "incremental", "rows": {"inserted": 0, "updated": 0, "deleted": 0}})
    assert output_changed({"mode": "incremental", "rows": {"inserted": 0, "updated": 0, "deleted": 1}})
    assert output_changed({"mode": "full", "rows": {"inserted": 0}})  # a new or rebuilt table


@pytest.mark.parametrize(
    ("mode", "rows", "emitted"),
    [
        ("noop", {"inserted": 0, "updated": 0, "deleted": 0}, False),
        ("incremental", {"inserted": 0, "updated": 0, "deleted": 0}, False),
        ("incremental", {"inserted": 0, "updated": 3, "deleted": 0}, True),
        ("full", {"inserted": 0, "updated": 0, "deleted": 0}, True),
    ],
)
def test_an_event_only_when_the_output_changed(monkeypatch, mode, rows, emitted):
    def fake_run(self, spec, **options):
        return {"kind": spec["kind"], "mode": mode, "reason": "r", "rows": rows, "inputs": {},
                "output": {"path": spec["output"]["path"], "version": 3}}  # fmt: skip

    monkeypatch.setattr(FkJoinHook, "run", fake_run)
    op, ctx = fk_operator(), context()
    op.execute(ctx)
    assert bool(events(ctx, op)) is emitted
    assert (REPORTED_VERSION_KEY in ctx["task_state_store"].values) is (mode != "noop")
    # no Spark UI reported: an empty link, which Airflow's link lookup after the task reads without error
    assert ctx["ti"].pushed[SPARK_UI_XCOM_KEY] == ""


def test_a_retry_reports_the_refresh_an_earlier_try_committed(tmp_path: Path, submitted):
    """Try 1 committed output version 1 and died before reporting: try 2 reports that refresh (and emits
    its event) without running another; a later re-run of the same task instance, after try 2 reported
    it, runs a refresh again."""
    orders, output = tmp_path / "orders", tmp_path / "out"
    write_table(orders, [1])
    write_table(output, [0])
    origin = {"dag_id": "orders", "run_id": "manual__2025-01-01", "task_id": "join", "map_index": -1}
    counts = {"inserted": 0, "updated": 2, "deleted": 1}
    record_refresh(output, {"left": (str(orders), 0)}, origin={**origin, "try_number": 1}, rows=counts)
    record_refresh(output, {"left": (str(orders), 0)}, origin={**origin, "task_id": "other", "try_number": 1})
    op = fk_operator(output=str(output))
    ctx = context(ti=FakeTI(try_number=2))
    result = op.execute(ctx)
    assert submitted == []
    assert (result["mode"], result["output"]["version"], result["source"]) == ("incremental", 1, "delta_log")
    assert result["origin"] == {**origin, "try_number": 1} and result["rows"] == counts
    assert "committed by try 1" in result["reason"]
    assert [asset for asset, _ in events(ctx, op)] == [Asset(uri=f"file://{output}")]

    rerun = context(ti=FakeTI(try_number=3), task_state_store=ctx["task_state_store"])
    op.execute(rerun)
    assert len(submitted) == 1 and submitted.origins[0] == {**origin, "try_number": 3}


def test_a_first_try_never_looks_for_an_earlier_commit(tmp_path: Path, submitted):
    output = tmp_path / "out"
    record_refresh(output, {}, origin={"dag_id": "orders", "run_id": "manual__2025-01-01", "task_id": "join",
                                       "map_index": -1, "try_number": 1})  # fmt: skip
    fk_operator(output=str(output)).execute(context())
    assert len(submitted) == 1


# -- the interface a DAG author reads and relies on -------------------------------------------------------
PUBLIC_OPERATORS = [getattr(operators, name) for name in operators.__all__]


@pytest.mark.parametrize("operator", PUBLIC_OPERATORS, ids=lambda op: op.__name__)
def test_every_argument_is_documented_with_a_param_line(operator: type[_FkJoinOperator]) -> None:
    """``help(Operator)`` and IDE hovers show each argument: the operator's own and the shared ones."""
    import inspect

    def arguments(cls: type) -> set[str]:
        parameters = inspect.signature(cls.__init__).parameters.values()
        return {p.name for p in parameters if p.kind is p.KEYWORD_ONLY and p.name != "spec_args"}

    names = arguments(operator) | arguments(_FkJoinOperator)
    assert {"jars", "conf", "spec_file", "freshness", "full_refresh"} <= names  # the walk finds them
    doc = inspect.getdoc(operator) or ""
    missing = sorted(name for name in names if f":param {name}:" not in doc)
    assert missing == [], f"{operator.__name__} has no :param: for {missing}"
    assert ":param max_active_tis_per_dag:" in doc, "the changed BaseOperator default is documented"


def test_join_operators_default_to_one_active_task_per_join() -> None:
    """A second run's refresh waits for the first (the engine would refuse it), unless the DAG says
    otherwise: by the argument or ``default_args``; the default survives serialization."""
    from airflow.serialization.serialized_objects import DagSerialization

    with DAG("orders", schedule="@hourly", start_date=START) as dag:
        default = fk_operator(task_id="default")
        given = fk_operator(task_id="given", max_active_tis_per_dag=3)
    with DAG("mapped", schedule=None, start_date=START, default_args={"max_active_tis_per_dag": 4}):
        from_default_args = fk_operator(task_id="from_default_args")
    assert (default.max_active_tis_per_dag, given.max_active_tis_per_dag) == (1, 3)
    assert from_default_args.max_active_tis_per_dag == 4
    served = DagSerialization.from_dict(DagSerialization.to_dict(dag))
    assert served.get_task("default").max_active_tis_per_dag == 1
    assert served.get_task("given").max_active_tis_per_dag == 3


def test_a_yaml_output_string_is_taken_as_the_operator_takes_it(tmp_path: Path, submitted) -> None:
    """``output: /w/x`` in a spec file is ``{path: /w/x}``, for the operator and for the engine alone."""
    from airflow_provider_fkjoin.engine import load_spec

    spec_file = tmp_path / "orders_customers.yaml"
    spec_file.write_text(
        "kind: foreign_key_join\n"
        "left: {path: /w/orders, key: [order_id]}\n"
        "right: {path: /w/customers, key: [customer_id]}\n"
        "foreign_key: [customer_id]\n"
        "how: left\n"
        "output: /w/x/../orders_customers/\n"
    )
    assert load_spec(spec_file).output.path == "/w/orders_customers"
    op = ForeignKeyJoinOperator(task_id="join", spec_file=str(spec_file))
    op.execute(context())
    assert submitted[0]["output"] == {"path": "/w/orders_customers"}
    from_arguments = fk_operator(output="/w/orders_customers").build_spec()
    assert load_spec(from_arguments) == load_spec(spec_file)


def test_freshness_policy_is_read_from_durations_and_kept_through_serialization() -> None:
    import pendulum
    from airflow.serialization.serialized_objects import DagSerialization

    with DAG("orders", schedule="@hourly", start_date=START) as dag:
        op = fk_operator(freshness={"warn_after": pendulum.duration(minutes=30), "error_after": "2h"})
        fk_operator(task_id="plain")
    assert op.freshness == {"warn_after": 1800.0, "error_after": 7200.0}
    served = DagSerialization.from_dict(DagSerialization.to_dict(dag))
    assert served.get_task("join").freshness == {"warn_after": 1800.0, "error_after": 7200.0}
    assert served.get_task("plain").freshness is None


@pytest.mark.parametrize(
    ("freshness", "message"),
    [
        ({"warn_after": "soon"}, "freshness.warn_after: 'soon' is not a duration"),
        ({"warn_after": "2h", "error_after": "1h"}, "warn_after must be shorter than error_after"),
        ({"error": "1h"}, "unknown field 'error'"),
        ({}, "give warn_after, error_after or both"),
    ],
)
def test_a_bad_freshness_policy_fails_naming_the_field(freshness: dict[str, Any], message: str) -> None:
    with pytest.raises(FkJoinBadInputError, match=message):
        fk_operator(freshness=freshness)


def test_freshness_states() -> None:
    from airflow_provider_fkjoin.operators.freshness import freshness_state

    policy = {"warn_after": 600.0, "error_after": 3600.0}
    assert [freshness_state(lag, policy) for lag in (0.0, 599.0, 600.0, 3599.0, 3600.0, None)] == [
        "ok", "ok", "warn", "warn", "error", "unknown",
    ]  # fmt: skip
    assert freshness_state(10_000.0, {"warn_after": 600.0}) == "warn"
    assert freshness_state(10_000.0, None) is None


async def alert(**kwargs: Any) -> None:
    """A deadline callback (importable by path, as Airflow requires)."""


def test_freshness_deadline_alerts_when_a_run_outlives_error_after() -> None:
    """The DAG's Deadline Alert: a run must finish within ``error_after`` of being queued; it survives the
    DAG's serialization (what the scheduler evaluates)."""
    from airflow.sdk import AsyncCallback, DeadlineReference
    from airflow.serialization.serialized_objects import DagSerialization

    from airflow_provider_fkjoin.operators.freshness import freshness_deadline

    with DAG("orders", schedule="@hourly", start_date=START) as dag:
        op = fk_operator(freshness={"warn_after": "30m", "error_after": "2h"})
    dag.deadline = freshness_deadline(op, AsyncCallback(alert))
    [deadline] = dag.deadline if isinstance(dag.deadline, list) else [dag.deadline]
    assert deadline.interval == dt.timedelta(hours=2)
    assert deadline.reference == DeadlineReference.DAGRUN_QUEUED_AT
    warn = freshness_deadline(op, AsyncCallback(alert), level="warn_after")
    assert warn.interval == dt.timedelta(minutes=30)
    encoded = json.dumps(DagSerialization.to_dict(dag))
    assert "deadline" in encoded and f"{__name__}.alert" in encoded
    with pytest.raises(ValueError, match="has no freshness error_after"):
        freshness_deadline(fk_operator(task_id="plain"), AsyncCallback(alert))

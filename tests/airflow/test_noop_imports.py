"""A noop task loads nothing it does not need: no pyspark, no Spark provider (nor the ``requests`` it brings),
no OpenLineage, no pandas. Checked in a fresh interpreter (``sys.modules`` of a subprocess), as a worker
parses the DAG file and runs the task: importing the operator module, then ``execute`` finding the noop
with the no-JVM check."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import deltalake
from airflow_support import write_table

#: Modules a noop must not import (pandas: ``deltalake`` and ``pyarrow`` import it only when asked).
HEAVY = ("pyspark", "airflow.providers.apache.spark.hooks.spark_submit", "openlineage", "pandas")

TASK = """
import json, sys
sys.path.insert(0, {support!r})
from airflow.sdk.execution_time.context import OutletEventAccessors
from airflow_support import FakeStateStore
from airflow_provider_fkjoin.operators import ForeignKeyJoinOperator

import_loaded = sorted(name for name in {heavy!r} if name in sys.modules)


class TI:
    dag_id, run_id, task_id, map_index, try_number = "orders", "manual__2025-01-01", "join", -1, 1
    pushed = {{}}

    def xcom_push(self, key, value):
        self.pushed[key] = value


op = ForeignKeyJoinOperator(task_id="join", **json.loads({spec!r}), openlineage_inject_parent_job_info=True)
ctx = {{"ti": TI(), "outlet_events": OutletEventAccessors(), "task_state_store": FakeStateStore()}}
result = op.execute(ctx)
print(json.dumps({{
    "import_loaded": import_loaded,
    "loaded": sorted(name for name in {heavy!r} if name in sys.modules),
    "mode": result["mode"],
    "source": result.get("source"),
    "pushed": ctx["ti"].pushed,
    "events": len(ctx["outlet_events"][op.output_alias].asset_alias_events),
}}))
"""


def _refreshed(tmp_path: Path) -> dict:
    """Operator arguments for a join whose output recorded a refresh at the inputs' current versions."""
    from airflow_provider_fkjoin.engine.core.spec import load_spec, spec_fingerprint

    orders, customers, output = tmp_path / "orders", tmp_path / "customers", tmp_path / "out"
    write_table(orders, [1])
    write_table(customers, [1])
    args = {
        "left": {"path": str(orders), "key": ["k"]},
        "right": {"path": str(customers), "key": ["k"]},
        "foreign_key": ["k"],
        "how": "left",
        "output": {"path": str(output)},
    }
    consumed = {
        side: {
            "location": args[side]["path"],
            "table_id": str(deltalake.DeltaTable(args[side]["path"]).metadata().id),
            "version": 0,
        }
        for side in ("left", "right")
    }
    spec = {"kind": "foreign_key_join", **args}
    progress = {"format": 1, "seq": 1, "kind": "foreign_key_join", "mode": "full", "inputs": consumed,
                "fingerprint": spec_fingerprint(load_spec(spec))}  # fmt: skip
    write_table(output, [1], progress)
    return args


def test_a_noop_task_imports_no_spark_provider_openlineage_or_pyspark(tmp_path: Path):
    args = _refreshed(tmp_path)
    code = TASK.format(support=str(Path(__file__).parent), heavy=HEAVY, spec=json.dumps(args))
    env = {
        **os.environ,
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
    }
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert (report["mode"], report["source"]) == ("noop", "precheck")
    assert report["pushed"]["fkjoin_spark_ui"] == ""  # the empty Spark UI link is still pushed
    assert report["events"] == 0  # no asset event for a noop
    assert report["import_loaded"] == [], "imported by the operator module (a DAG parse)"
    assert report["loaded"] == [], "imported by a noop run"


def test_finish_conf_is_applied_when_spark_runs_not_for_a_noop(tmp_path: Path, spark_conn):
    """The hook's ``finish_conf`` (the operator's OpenLineage parent job information) reaches the
    spark-submit command, once; a noop never computes it."""
    from airflow_provider_fkjoin.hooks.fkjoin import FkJoinHook

    spark_conn({"conn_type": "spark", "host": "local[2]"})
    calls: list[dict] = []

    def finish(conf: dict) -> dict:
        calls.append(dict(conf))
        return {**conf, "spark.openlineage.parentJobName": "orders.join"}

    spec = {"kind": "foreign_key_join", **_refreshed(tmp_path)}
    assert FkJoinHook(finish_conf=finish).run(spec)["mode"] == "noop"
    assert calls == []
    hook = FkJoinHook(conf={"spark.x": "1"}, finish_conf=finish)
    argv = hook.spark_submit_command(spec)
    assert "spark.openlineage.parentJobName=orders.join" in argv and "spark.x=1" in argv
    assert hook.conf["spark.openlineage.parentJobName"] == "orders.join"
    assert calls == [{"spark.x": "1"}]

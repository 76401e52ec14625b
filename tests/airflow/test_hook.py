"""FkJoinHook: the exact spark-submit argv per connection shape, connection errors, and ``run`` against a
fake ``spark-submit`` binary (the real SparkSubmitHook runs it as a subprocess)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from airflow.providers.apache.spark.hooks import spark_submit
from airflow_support import record_refresh, write_table

from airflow_provider_fkjoin.hooks.fkjoin import (
    DELTA_PACKAGE,
    FkJoinBadInputError,
    FkJoinConnectionError,
    FkJoinHook,
    FkJoinJobError,
    FkJoinRetryableError,
)
from airflow_provider_fkjoin.jobs import FKJOIN_JOB_FILE

ENGINE = Path(__file__).resolve().parents[2] / "airflow_provider_fkjoin" / "engine"
LOG4J = f"-Dlog4j.configurationFile=file:{ENGINE / 'log4j2.properties'}"
SPEC = {
    "kind": "foreign_key_join",
    "left": {"path": "/w/orders", "key": ["order_id"]},
    "right": {"path": "/w/customers", "key": ["customer_id"]},
    "foreign_key": ["customer_id"],
    "output": {"path": "/w/orders_customers"},
}
SPEC_JSON = json.dumps(SPEC, sort_keys=True)


@pytest.fixture(autouse=True)
def delta_jars(monkeypatch):
    monkeypatch.setenv("FKJOIN_DELTA_JARS", "/opt/delta/delta-spark.jar,/opt/delta/delta-storage.jar")


def test_local_connection_argv(spark_conn):
    spark_conn({"conn_type": "spark", "host": "local[2]"})
    assert FkJoinHook().spark_submit_command(SPEC) == [
        "spark-submit",
        "--master", "local[2]",
        "--conf", "spark.ui.enabled=true",
        "--conf", f"spark.pyspark.driver.python={sys.executable}",
        "--conf", f"spark.driver.extraJavaOptions={LOG4J}",
        "--conf", f"spark.pyspark.python={sys.executable}",
        "--jars", "/opt/delta/delta-spark.jar,/opt/delta/delta-storage.jar",
        "--name", "fkjoin-foreign_key_join-orders_customers",
        FKJOIN_JOB_FILE,
        "run", "--spec-json", SPEC_JSON,
    ]  # fmt: skip


def test_standalone_connection_argv_user_conf_wins(spark_conn):
    spark_conn({"conn_type": "spark", "host": "spark://master.example", "port": 7077})
    hook = FkJoinHook(conf={"spark.ui.enabled": "false", "spark.executor.memory": "2g"})
    assert hook.spark_submit_command(SPEC) == [
        "spark-submit",
        "--master", "spark://master.example:7077",
        "--conf", "spark.ui.enabled=false",
        "--conf", f"spark.pyspark.driver.python={sys.executable}",
        "--conf", f"spark.driver.extraJavaOptions={LOG4J}",
        "--conf", "spark.executor.memory=2g",
        "--jars", "/opt/delta/delta-spark.jar,/opt/delta/delta-storage.jar",
        "--name", "fkjoin-foreign_key_join-orders_customers",
        FKJOIN_JOB_FILE,
        "run", "--spec-json", SPEC_JSON,
    ]  # fmt: skip


def test_yarn_cluster_connection_argv_env_vars_go_to_the_application_master(spark_conn):
    spark_conn({"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "cluster", "queue": "etl"}})
    hook = FkJoinHook(env_vars={"FKJOIN_TRACE": "1"}, spark_submit_kwargs={"num_executors": 4})
    assert hook.spark_submit_command(SPEC) == [
        "spark-submit",
        "--master", "yarn",
        "--conf", "spark.ui.enabled=true",
        "--conf", "spark.yarn.appMasterEnv.FKJOIN_TRACE=1",
        "--jars", "/opt/delta/delta-spark.jar,/opt/delta/delta-storage.jar",
        "--num-executors", "4",
        "--name", "fkjoin-foreign_key_join-orders_customers",
        "--queue", "etl",
        "--deploy-mode", "cluster",
        FKJOIN_JOB_FILE,
        "run", "--spec-json", SPEC_JSON,
    ]  # fmt: skip


def test_kubernetes_connection_argv_with_maven_packages(spark_conn, monkeypatch, tmp_path):
    monkeypatch.setattr(spark_submit, "kube_client", object(), raising=False)  # cncf provider not needed
    monkeypatch.setenv("FKJOIN_DELTA_JARS", str(tmp_path))  # a folder without jars: fall back to Maven
    spark_conn(
        {
            "conn_type": "spark",
            "host": "k8s://https://k8s.example:443",
            "extra": {"deploy-mode": "cluster", "namespace": "jobs"},
        }
    )
    hook = FkJoinHook(
        application="local:///opt/fkjoin/fkjoin_job.py", conf={"spark.kubernetes.container.image": "fkjoin:1"}
    )
    assert hook.spark_submit_command(SPEC) == [
        "spark-submit",
        "--master", "k8s://https://k8s.example:443",
        "--conf", "spark.ui.enabled=true",
        "--conf", "spark.kubernetes.container.image=fkjoin:1",
        "--conf", "spark.kubernetes.namespace=jobs",
        "--packages", DELTA_PACKAGE,
        "--name", "fkjoin-foreign_key_join-orders_customers",
        "--deploy-mode", "cluster",
        "local:///opt/fkjoin/fkjoin_job.py",
        "run", "--spec-json", SPEC_JSON,
    ]  # fmt: skip


def test_missing_connection_fails_clearly_instead_of_falling_back_to_yarn(monkeypatch):
    monkeypatch.delenv("AIRFLOW_CONN_NO_SUCH_SPARK", raising=False)
    with pytest.raises(
        FkJoinConnectionError, match=r"'no_such_spark' does not exist.*AIRFLOW_CONN_NO_SUCH_SPARK"
    ):
        FkJoinHook("no_such_spark").spark_submit_command(SPEC)


def test_hook_is_cheap_to_build_without_a_connection():
    hook = FkJoinHook("not_looked_up_yet")  # building it does no lookup: only run/build_submit_hook do
    assert hook.conn_id == "not_looked_up_yet"


# -- run() against a fake spark-submit -------------------------------------------------------------
RESULT = {
    "kind": "foreign_key_join",
    "mode": "incremental",
    "reason": "changes since the last refresh",
    "output": {"path": "/w/orders_customers", "version": 3},
    "inputs": {"left": {"from_version": 1, "to_version": 2}},
    "rows": {"inserted": 1, "updated": 2, "deleted": 0},
}


def test_run_returns_the_drivers_last_json_line_and_reports_the_spark_ui(spark_conn, fake_spark_submit):
    spark_conn({"conn_type": "spark", "host": "local[2]"})
    fake_spark_submit.scenario(
        lines=[
            "WARNING: Using incubator modules",
            'FKJOIN_APP {"app_id": "local-1", "ui_url": "http://worker:4040", "master": "local[2]"}',
            '{"not": "the result"}',
            json.dumps(RESULT),
            "some shutdown log line",
        ]
    )
    urls: list[str] = []
    result = FkJoinHook().run(SPEC, on_spark_ui=urls.append)
    assert result == {**RESULT, "source": "driver_stdout"}
    assert urls == ["http://worker:4040"]
    assert fake_spark_submit.argv[-3:] == ["run", "--spec-json", SPEC_JSON]


def test_run_in_cluster_mode_reads_the_result_from_the_output_commit(spark_conn, fake_spark_submit, tmp_path):
    """YARN cluster mode: the driver's stdout never reaches spark-submit; the Delta commit tells."""
    output, left = tmp_path / "out", tmp_path / "left"
    write_table(left, [1])
    record_refresh(output, {"left": (str(left), 0)})  # an earlier refresh: version 0
    spark_conn({"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "cluster"}})
    spec = {**SPEC, "output": {"path": str(output)}}
    fake_spark_submit.scenario(
        lines=["INFO Client: Submitted application application_1700000000000_0042"],
        commit={"left": [str(left), 5]},
    )
    result = FkJoinHook().run(spec)
    assert result["source"] == "delta_log"
    assert result["mode"] == "incremental"
    assert result["output"] == {"path": str(output), "version": 1}
    assert result["inputs"] == {"left": {"path": str(left), "to_version": 5}}


def test_run_in_cluster_mode_without_a_new_commit_is_a_noop(spark_conn, fake_spark_submit, tmp_path):
    output, left = tmp_path / "out", tmp_path / "left"
    record_refresh(output, {"left": (str(left), 4)})
    spark_conn({"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "cluster"}})
    result = FkJoinHook().run({**SPEC, "output": {"path": str(output)}})
    assert (result["mode"], result["output"]["version"]) == ("noop", 0)


@pytest.mark.parametrize(
    ("code", "error"),
    [(2, FkJoinBadInputError), (75, FkJoinRetryableError), (1, FkJoinJobError)],
)
def test_run_maps_the_cli_exit_code(spark_conn, fake_spark_submit, code, error):
    spark_conn({"conn_type": "spark", "host": "local[2]"})
    fake_spark_submit.scenario(lines=["error: SpecError: left.key: is required"], exit=code)
    with pytest.raises(error, match=r"SpecError: left\.key: is required"):
        FkJoinHook().run(SPEC)


def test_failure_message_masks_secrets(spark_conn, fake_spark_submit):
    spark_conn({"conn_type": "spark", "host": "local[2]"})
    fake_spark_submit.scenario(lines=["spark.hadoop.fs.s3a.secret.key=hunter2", "boom"], exit=1)
    with pytest.raises(FkJoinJobError) as raised:
        FkJoinHook().run(SPEC)
    assert "hunter2" not in str(raised.value)
    assert "secret.key=******" in str(raised.value)


def test_run_refuses_an_unsafe_output_path(spark_conn, fake_spark_submit):
    spark_conn({"conn_type": "spark", "host": "local[2]"})
    with pytest.raises(ValueError, match=r"'\.\.' segments"):
        FkJoinHook().run({**SPEC, "output": {"path": "/w/../etc/out"}})

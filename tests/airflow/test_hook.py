"""FkJoinHook: the exact spark-submit argv per connection shape, connection errors, credentials kept out
of logs, and ``run`` against a fake ``spark-submit`` binary (the real SparkSubmitHook runs it as a
subprocess)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from airflow.providers.apache.spark.hooks import spark_submit
from airflow_support import record_refresh, write_table

from airflow_provider_fkjoin.hooks import fkjoin as fkjoin_hook
from airflow_provider_fkjoin.hooks.fkjoin import (
    DELTA_PACKAGE,
    FkJoinBadInputError,
    FkJoinConnectionError,
    FkJoinHook,
    FkJoinJobError,
    FkJoinRetryableError,
    mask_text,
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
UI_OFF = "spark.ui.enabled=false"
REDACTION = (
    "spark.redaction.regex="
    "(?i)secret|password|passwd|token|access.?key|account.?key|sas|credential|private.?key|session"
)


@pytest.fixture(autouse=True)
def delta_jars(monkeypatch):
    monkeypatch.setenv("FKJOIN_DELTA_JARS", "/opt/delta/delta-spark.jar,/opt/delta/delta-storage.jar")


def test_local_connection_argv(spark_conn):
    spark_conn({"conn_type": "spark", "host": "local[2]"})
    assert FkJoinHook().spark_submit_command(SPEC) == [
        "spark-submit",
        "--master", "local[2]",
        "--conf", UI_OFF,
        "--conf", REDACTION,
        "--conf", f"spark.pyspark.driver.python={sys.executable}",
        "--conf", f"spark.driver.extraJavaOptions={LOG4J}",
        "--conf", f"spark.pyspark.python={sys.executable}",
        "--jars", "/opt/delta/delta-spark.jar,/opt/delta/delta-storage.jar",
        "--name", "fkjoin-foreign_key_join-orders_customers",
        FKJOIN_JOB_FILE,
        "run", "--spec-json", SPEC_JSON,
    ]  # fmt: skip


def test_full_refresh_argv(spark_conn):
    """``run(spec, full_refresh=True)`` submits ``fkjoin run --full-refresh``: the job rebuilds the output."""
    spark_conn({"conn_type": "spark", "host": "local[2]"})
    assert FkJoinHook().spark_submit_command(SPEC, full_refresh=True) == [
        "spark-submit",
        "--master", "local[2]",
        "--conf", UI_OFF,
        "--conf", REDACTION,
        "--conf", f"spark.pyspark.driver.python={sys.executable}",
        "--conf", f"spark.driver.extraJavaOptions={LOG4J}",
        "--conf", f"spark.pyspark.python={sys.executable}",
        "--jars", "/opt/delta/delta-spark.jar,/opt/delta/delta-storage.jar",
        "--name", "fkjoin-foreign_key_join-orders_customers",
        FKJOIN_JOB_FILE,
        "run", "--full-refresh", "--spec-json", SPEC_JSON,
    ]  # fmt: skip


def test_spark_ui_on_request_and_user_redaction_wins(spark_conn):
    spark_conn({"conn_type": "spark", "host": "local[2]"})
    hook = FkJoinHook(spark_ui=True, conf={"spark.redaction.regex": "(?i)mine"})
    assert hook.spark_ui_enabled
    assert hook.spark_submit_command(SPEC) == [
        "spark-submit",
        "--master", "local[2]",
        "--conf", "spark.ui.enabled=true",
        "--conf", "spark.redaction.regex=(?i)mine",
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
    hook = FkJoinHook(spark_ui=True, conf={"spark.ui.enabled": "false", "spark.executor.memory": "2g"})
    assert not hook.spark_ui_enabled
    assert hook.spark_submit_command(SPEC) == [
        "spark-submit",
        "--master", "spark://master.example:7077",
        "--conf", UI_OFF,
        "--conf", REDACTION,
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
        "--conf", UI_OFF,
        "--conf", REDACTION,
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
        "--conf", UI_OFF,
        "--conf", REDACTION,
        "--conf", "spark.kubernetes.container.image=fkjoin:1",
        "--conf", "spark.kubernetes.namespace=jobs",
        "--packages", DELTA_PACKAGE,
        "--name", "fkjoin-foreign_key_join-orders_customers",
        "--deploy-mode", "cluster",
        "local:///opt/fkjoin/fkjoin_job.py",
        "run", "--spec-json", SPEC_JSON,
    ]  # fmt: skip


# -- credentials stay out of logs ------------------------------------------------------------------
CREDENTIALS = {
    "spark.hadoop.fs.azure.account.key.x.dfs.core.windows.net": "K3Y",
    "fs.s3a.session.token": "T0K",
}


def test_logged_command_masks_credentials_the_real_argv_keeps_them(spark_conn, capsys):
    spark_conn({"conn_type": "spark", "host": "local[2]"})
    hook = FkJoinHook(conf=CREDENTIALS)
    argv = hook.spark_submit_command(SPEC)
    assert "spark.hadoop.fs.azure.account.key.x.dfs.core.windows.net=K3Y" in argv  # the job needs them
    assert "fs.s3a.session.token=T0K" in argv
    logged = capsys.readouterr().out  # what SparkSubmitHook logged: "Spark-Submit cmd: ..."
    masked = hook.masked_command(SPEC)
    for text in (logged, masked):
        assert "Spark-Submit cmd" in logged
        assert "K3Y" not in text
        assert "T0K" not in text
    assert "--conf spark.hadoop.fs.azure.account.key.x.dfs.core.windows.net=****** " in masked
    assert "--conf fs.s3a.session.token=****** " in masked
    assert f"--conf {REDACTION} " in masked  # the redaction pattern itself is shown, not taken for a secret
    assert f"run --spec-json {SPEC_JSON}" in masked  # the rest of the command stays readable


@pytest.mark.parametrize(
    "key",
    [
        "spark.hadoop.fs.azure.account.key.acct.dfs.core.windows.net",
        "spark.hadoop.fs.azure.sas.container.acct.blob.core.windows.net",
        "spark.hadoop.fs.s3a.session.token",
        "spark.hadoop.fs.s3a.secret.key",
        "spark.hadoop.fs.s3a.access.key",
        "spark.hadoop.fs.gs.auth.service.account.private.key",
        "spark.hadoop.fs.azure.account.oauth2.client.secret",
        "spark.hadoop.google.cloud.auth.service.account.json.keyfile",
        "spark.hadoop.javax.jdo.option.ConnectionPassword",
        "spark.hadoop.hive.metastore.passwd",
        "spark.hadoop.fs.gs.credentials",
        "spark.kubernetes.driverEnv.AWS_SESSION_TOKEN",
        "spark.yarn.appMasterEnv.AZURE_STORAGE_KEY",
    ],
)
def test_every_kind_of_credential_is_masked(spark_conn, key):
    spark_conn({"conn_type": "spark", "host": "local[2]"})
    value = "-----BEGIN PRIVATE KEY-----\nMIIEvQ s3cr3t\n-----END PRIVATE KEY-----\n"
    hook = FkJoinHook(conf={key: value})
    assert f"{key}={value}" in hook.spark_submit_command(SPEC)
    masked = hook.masked_command(SPEC)
    assert f"--conf {key}=****** --jars" in masked
    assert "s3cr3t" not in masked
    assert "MIIEvQ" not in masked


def test_credentials_are_given_to_airflows_secrets_masker(spark_conn, monkeypatch):
    """Airflow's masker then redacts them anywhere in the task log, e.g. where spark-submit echoes them."""
    registered: list[tuple[str, str | None]] = []
    monkeypatch.setattr(fkjoin_hook, "mask_secret", lambda value, name=None: registered.append((value, name)))
    spark_conn({"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "cluster"}})
    hook = FkJoinHook(
        conf={"spark.hadoop.fs.s3a.secret.key": "wJalrXUtnFEMI", "spark.authenticate": "true"},
        env_vars={"AZURE_STORAGE_KEY": "c2VjcmV0a2V5", "FKJOIN_TRACE": "verbose"},
    )
    hook.spark_submit_command(SPEC)
    assert registered == [
        ("wJalrXUtnFEMI", "spark.hadoop.fs.s3a.secret.key"),
        ("c2VjcmV0a2V5", "AZURE_STORAGE_KEY"),
    ]  # not "true" (a boolean masked everywhere would hide every "true" in the log), not FKJOIN_TRACE
    masked = hook.masked_command(SPEC)
    assert "c2VjcmV0a2V5" not in masked  # spark.yarn.appMasterEnv.AZURE_STORAGE_KEY=******
    assert "spark.yarn.appMasterEnv.FKJOIN_TRACE=verbose" in masked


def test_mask_text_in_log_lines():
    assert mask_text("INFO url https://acct.blob.core.windows.net/c?sv=2024-01-01&sig=AbC%2Bd== done") == (
        "INFO url https://acct.blob.core.windows.net/c?sv=2024-01-01&sig=****** done"
    )
    assert mask_text("spark.executor.memory=2g spark.sql.shuffle.partitions=8") == (
        "spark.executor.memory=2g spark.sql.shuffle.partitions=8"
    )
    assert mask_text('conf fs.s3a.access.key="AKIA EXAMPLE" next') == 'conf fs.s3a.access.key="******" next'
    # a whole `key=value` argument is masked to its end: its value may be a multi-line PEM key
    assert mask_text("fs.gs.auth.service.account.private.key=-----BEGIN KEY\nMIIE\n") == (
        "fs.gs.auth.service.account.private.key=******"
    )
    assert mask_text("export X=1; spark.hadoop.fs.s3a.secret.key=abc", ["zzzzz"]) == (
        "export X=1; spark.hadoop.fs.s3a.secret.key=******"
    )
    assert mask_text("token value in prose: wJalrXUtnFEMI", ["wJalrXUtnFEMI"]) == (
        "token value in prose: ******"
    )


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
    result = FkJoinHook(spark_ui=True).run(SPEC, on_spark_ui=urls.append)
    assert result == {**RESULT, "source": "driver_stdout"}
    assert urls == ["http://worker:4040"]
    assert fake_spark_submit.argv[-3:] == ["run", "--spec-json", SPEC_JSON]


APP_LINE = 'FKJOIN_APP {"app_id": "app-1", "ui_url": "http://worker:4040", "master": "m"}'


def test_with_the_driver_ui_off_no_driver_link_is_reported(spark_conn, fake_spark_submit):
    spark_conn({"conn_type": "spark", "host": "local[2]"})
    fake_spark_submit.scenario(lines=[APP_LINE, json.dumps(RESULT)])
    urls: list[str] = []
    FkJoinHook().run(SPEC, on_spark_ui=urls.append)
    assert urls == []  # local master, UI off: no page to link to


def test_with_the_driver_ui_off_a_standalone_master_page_is_still_linked(spark_conn, fake_spark_submit):
    spark_conn({"conn_type": "spark", "host": "spark://master.example", "port": 7077})
    fake_spark_submit.scenario(lines=[APP_LINE, json.dumps(RESULT)])
    urls: list[str] = []
    FkJoinHook().run(SPEC, on_spark_ui=urls.append)
    assert urls == ["http://master.example:8080/", "http://master.example:8080/app/?appId=app-1"]


def test_run_with_write_path_merge_submits_the_option(spark_conn, fake_spark_submit):
    """``write_path="merge"`` submits ``fkjoin run --write-path merge``; the default adds nothing."""
    spark_conn({"conn_type": "spark", "host": "local[2]"})
    fake_spark_submit.scenario(lines=[json.dumps(RESULT)])
    FkJoinHook().run(SPEC, write_path="merge")
    assert fake_spark_submit.argv[-5:] == ["run", "--write-path", "merge", "--spec-json", SPEC_JSON]
    assert FkJoinHook().spark_submit_command(SPEC)[-3:] == ["run", "--spec-json", SPEC_JSON]
    assert FkJoinHook().spark_submit_command(SPEC, write_path=" MERGE ")[-5:-2] == [
        "run",
        "--write-path",
        "merge",
    ]
    with pytest.raises(FkJoinBadInputError, match=r"write_path: expected one of auto, merge, got 'fast'"):
        FkJoinHook().spark_submit_command(SPEC, write_path="fast")


def test_run_with_full_refresh_submits_the_flag(spark_conn, fake_spark_submit):
    spark_conn({"conn_type": "spark", "host": "local[2]"})
    fake_spark_submit.scenario(lines=[json.dumps(RESULT)])
    FkJoinHook().run(SPEC, full_refresh=True)
    assert fake_spark_submit.argv[-4:] == ["run", "--full-refresh", "--spec-json", SPEC_JSON]


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


def test_failure_message_masks_secrets(spark_conn, fake_spark_submit, capsys):
    spark_conn({"conn_type": "spark", "host": "local[2]"})
    fake_spark_submit.scenario(
        lines=[
            "spark.hadoop.fs.s3a.secret.key=hunter2",
            "spark.hadoop.fs.s3a.session.token=FwoGZXIvYXdzE",
            "error: Py4JJavaError: An error occurred, fs.azure.account.key.a.dfs.core.windows.net=AccKey0==",
            "cause: java.nio.file.AccessDeniedException: /w/orders_customers/_delta_log",
            "boom",
        ],
        exit=1,
    )
    with pytest.raises(FkJoinJobError) as raised:
        FkJoinHook().run(SPEC)
    message = str(raised.value)
    logged = capsys.readouterr().out  # the spark-submit output lines the hook logged
    assert "cause: java.nio.file.AccessDeniedException" in logged
    for secret in ("hunter2", "FwoGZXIvYXdzE", "AccKey0"):
        assert secret not in message
        assert secret not in logged
    assert "secret.key=******" in message
    assert "session.token=******" in message
    assert message.startswith(
        "fkjoin Spark job failed (exit 1): Py4JJavaError: An error occurred, "
        "fs.azure.account.key.a.dfs.core.windows.net=******\n"
        "cause: java.nio.file.AccessDeniedException: /w/orders_customers/_delta_log\n"
    )


def test_run_refuses_a_relative_output_path_naming_the_field(spark_conn, fake_spark_submit):
    spark_conn({"conn_type": "spark", "host": "local[2]"})
    with pytest.raises(FkJoinBadInputError, match=r"^output\.path: table location 'out' is relative; "):
        FkJoinHook().run({**SPEC, "output": {"path": "out"}})
    with pytest.raises(FkJoinBadInputError, match=r"output\.path: .*scheme 'http'"):
        FkJoinHook().run({**SPEC, "output": {"path": "http://example.com/t"}})

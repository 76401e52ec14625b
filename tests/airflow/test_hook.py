"""FkJoinHook: the exact spark-submit argv per connection shape, connection errors, credentials kept out
of logs, and ``run`` against a fake ``spark-submit`` binary (the real SparkSubmitHook runs it as a
subprocess)."""

from __future__ import annotations

import http.server
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, ClassVar

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
from airflow_provider_fkjoin.jvm_start import SHORT_LIVED_FLAGS, archive_path

ENGINE = Path(__file__).resolve().parents[2] / "airflow_provider_fkjoin" / "engine"
LOG4J = f"-Dlog4j.configurationFile=file:{ENGINE / 'runtime' / 'log4j2.properties'}"
SPEC = {
    "kind": "foreign_key_join",
    "left": {"path": "/w/orders", "key": ["order_id"]},
    "right": {"path": "/w/customers", "key": ["customer_id"]},
    "foreign_key": ["customer_id"],
    "output": {"path": "/w/orders_customers"},
}
SPEC_JSON = json.dumps(SPEC, sort_keys=True)
UI_OFF = "spark.ui.enabled=false"
SHORT_LIVED = " ".join(SHORT_LIVED_FLAGS)
REDACTION = (
    "spark.redaction.regex="
    "(?i)secret|password|passwd|token|access.?key|account.?key|sas|credential|private.?key|session"
)


@pytest.fixture(autouse=True)
def delta_jars(monkeypatch, tmp_path):
    monkeypatch.setenv("FKJOIN_DELTA_JARS", "/opt/delta/delta-spark.jar,/opt/delta/delta-storage.jar")
    monkeypatch.setenv("FKJOIN_ENGINE_JAR", "/opt/fkjoin/fkjoin-engine.jar")
    # No class archive unless a test makes one (one built on this machine would change every argv).
    monkeypatch.setenv("FKJOIN_JVM_ARCHIVE_DIR", str(tmp_path / "jvm-archives"))
    monkeypatch.delenv("SPARK_SUBMIT_OPTS", raising=False)


def made_archive() -> Path:
    """An archive file where the hook looks for this JVM and Spark's (its content is the JVM's business:
    the real one is built and used in ``test_fast_driver_start.py``)."""
    archive = archive_path()
    archive.parent.mkdir(parents=True, exist_ok=True)
    archive.write_bytes(b"")
    return archive


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
        "--jars", "/opt/delta/delta-spark.jar,/opt/delta/delta-storage.jar,/opt/fkjoin/fkjoin-engine.jar",
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
        "--jars", "/opt/delta/delta-spark.jar,/opt/delta/delta-storage.jar,/opt/fkjoin/fkjoin-engine.jar",
        "--name", "fkjoin-foreign_key_join-orders_customers",
        FKJOIN_JOB_FILE,
        "run", "--full-refresh", "--spec-json", SPEC_JSON,
    ]  # fmt: skip


def test_jars_and_packages_are_added_to_what_the_engine_needs(spark_conn):
    """A SparkSubmitOperator habit (``jars="hadoop-aws.jar"``) keeps Delta's jars and the engine's jar:
    the user's come after them, each jar once."""
    spark_conn({"conn_type": "spark", "host": "local[2]"})
    hook = FkJoinHook(
        jars="/opt/hadoop/hadoop-aws.jar, /opt/delta/delta-spark.jar",
        packages="com.example:extra:1.0",
    )
    assert hook.spark_submit_command(SPEC) == [
        "spark-submit",
        "--master", "local[2]",
        "--conf", UI_OFF,
        "--conf", REDACTION,
        "--conf", f"spark.pyspark.driver.python={sys.executable}",
        "--conf", f"spark.driver.extraJavaOptions={LOG4J}",
        "--conf", f"spark.pyspark.python={sys.executable}",
        "--jars", "/opt/delta/delta-spark.jar,/opt/delta/delta-storage.jar,/opt/fkjoin/fkjoin-engine.jar"
                  ",/opt/hadoop/hadoop-aws.jar",
        "--packages", "com.example:extra:1.0",
        "--name", "fkjoin-foreign_key_join-orders_customers",
        FKJOIN_JOB_FILE,
        "run", "--spec-json", SPEC_JSON,
    ]  # fmt: skip


def test_packages_are_added_to_deltas_coordinate_without_local_jars(spark_conn, monkeypatch, tmp_path):
    spark_conn({"conn_type": "spark", "host": "local[2]"})
    monkeypatch.setenv("FKJOIN_DELTA_JARS", str(tmp_path))  # a folder without jars: Delta from Maven
    hook = FkJoinHook(packages="org.apache.hadoop:hadoop-aws:3.4.1", jars="/x/a.jar")
    argv = hook.spark_submit_command(SPEC)
    assert argv[argv.index("--packages") + 1] == f"{DELTA_PACKAGE},org.apache.hadoop:hadoop-aws:3.4.1"
    assert argv[argv.index("--jars") + 1] == "/opt/fkjoin/fkjoin-engine.jar,/x/a.jar"


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
        "--jars", "/opt/delta/delta-spark.jar,/opt/delta/delta-storage.jar,/opt/fkjoin/fkjoin-engine.jar",
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
        "--jars", "/opt/delta/delta-spark.jar,/opt/delta/delta-storage.jar,/opt/fkjoin/fkjoin-engine.jar",
        "--name", "fkjoin-foreign_key_join-orders_customers",
        FKJOIN_JOB_FILE,
        "run", "--spec-json", SPEC_JSON,
    ]  # fmt: skip


def test_with_a_class_archive_the_driver_starts_with_it_and_the_short_lived_flags(spark_conn):
    spark_conn({"conn_type": "spark", "host": "local[2]"})
    archive = made_archive()
    assert FkJoinHook().spark_submit_command(SPEC) == [
        "spark-submit",
        "--master", "local[2]",
        "--conf", UI_OFF,
        "--conf", REDACTION,
        "--conf", f"spark.pyspark.driver.python={sys.executable}",
        "--conf", f"spark.driver.extraJavaOptions={LOG4J} -XX:SharedArchiveFile={archive} {SHORT_LIVED}",
        "--conf", f"spark.pyspark.python={sys.executable}",
        "--jars", "/opt/delta/delta-spark.jar,/opt/delta/delta-storage.jar,/opt/fkjoin/fkjoin-engine.jar",
        "--name", "fkjoin-foreign_key_join-orders_customers",
        FKJOIN_JOB_FILE,
        "run", "--spec-json", SPEC_JSON,
    ]  # fmt: skip


def test_the_users_driver_java_options_are_kept_and_theirs_win(spark_conn):
    """Ours come after the user's options, less any kind they chose (a collector, a compiler tier)."""
    spark_conn({"conn_type": "spark", "host": "spark://master.example", "port": 7077})
    archive = made_archive()
    mine = "-Dmine=1 -XX:+UseG1GC -XX:TieredStopAtLevel=4"
    argv = FkJoinHook(conf={"spark.driver.extraJavaOptions": mine}).spark_submit_command(SPEC)
    assert argv[argv.index(f"spark.driver.extraJavaOptions={mine} -XX:SharedArchiveFile={archive}") - 1] == (
        "--conf"
    )
    assert sum(arg.startswith("spark.driver.extraJavaOptions=") for arg in argv) == 1


def test_flags_already_in_spark_submit_opts_are_not_repeated(spark_conn, monkeypatch):
    spark_conn({"conn_type": "spark", "host": "local[2]"})
    archive = made_archive()
    monkeypatch.setenv("SPARK_SUBMIT_OPTS", f"-XX:SharedArchiveFile={archive} {SHORT_LIVED}")
    argv = FkJoinHook().spark_submit_command(SPEC)
    assert f"spark.driver.extraJavaOptions={LOG4J}" in argv


def test_without_an_archive_nothing_is_added_and_the_log_says_how_to_build_one(spark_conn, capsys):
    spark_conn({"conn_type": "spark", "host": "local[2]"})
    argv = FkJoinHook().spark_submit_command(SPEC)
    assert f"spark.driver.extraJavaOptions={LOG4J}" in argv
    assert "fkjoin jvm-archive" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("hook_options", "config"),
    [({"fast_driver_start": False}, None), ({}, "False"), ({"fast_driver_start": False}, "True")],
)
def test_the_fast_start_can_be_turned_off(spark_conn, monkeypatch, capsys, hook_options, config):
    """By the hook's (the operator's) ``fast_driver_start``, else ``[fkjoin] fast_driver_start``."""
    spark_conn({"conn_type": "spark", "host": "local[2]"})
    made_archive()
    if config is not None:
        monkeypatch.setenv("AIRFLOW__FKJOIN__FAST_DRIVER_START", config)
    argv = FkJoinHook(**hook_options).spark_submit_command(SPEC)
    assert f"spark.driver.extraJavaOptions={LOG4J}" in argv
    assert "fkjoin jvm-archive" not in capsys.readouterr().out


def test_a_cluster_mode_driver_gets_no_local_archive(spark_conn):
    """Its JVM starts on another machine: an archive path from here would mean nothing there."""
    spark_conn({"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "cluster"}})
    made_archive()
    assert not any("SharedArchiveFile" in arg for arg in FkJoinHook().spark_submit_command(SPEC))


def test_yarn_cluster_connection_argv_env_vars_go_to_the_application_master(spark_conn):
    spark_conn({"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "cluster", "queue": "etl"}})
    hook = FkJoinHook(env_vars={"FKJOIN_TRACE": "1"}, spark_submit_kwargs={"num_executors": 4})
    assert hook.spark_submit_command(SPEC) == [
        "spark-submit",
        "--master", "yarn",
        "--conf", UI_OFF,
        "--conf", REDACTION,
        "--conf", "spark.yarn.maxAppAttempts=1",
        "--conf", "spark.yarn.appMasterEnv.FKJOIN_TRACE=1",
        # cluster mode: the driver runs elsewhere, so no engine jar from this host
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


def test_run_returns_the_drivers_last_json_line_and_reports_the_spark_ui(
    spark_conn, fake_spark_submit, capsys
):
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
    hook = FkJoinHook(spark_ui=True)
    result = hook.run(SPEC, on_spark_ui=urls.append)
    assert result == {**RESULT, "source": "driver_stdout"}
    assert urls == ["http://worker:4040"]
    assert fake_spark_submit.argv[-3:] == ["run", "--spec-json", SPEC_JSON]
    # the task's phases, from when this process saw the session's line and the result's
    assert hook.submit_phases is not None
    assert list(hook.submit_phases) == ["start_s", "refresh_s", "exit_s", "total_s"]
    assert all(seconds >= 0 for seconds in hook.submit_phases.values())
    assert "spark-submit phases: start " in capsys.readouterr().out


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
            "note: while committing the net changes of output /w/orders_customers",
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
        "note: while committing the net changes of output /w/orders_customers\n"
    )


def test_run_refuses_a_relative_output_path_naming_the_field(spark_conn, fake_spark_submit):
    spark_conn({"conn_type": "spark", "host": "local[2]"})
    with pytest.raises(FkJoinBadInputError, match=r"^output\.path: table location 'out' is relative; "):
        FkJoinHook().run({**SPEC, "output": {"path": "out"}})
    with pytest.raises(FkJoinBadInputError, match=r"output\.path: .*scheme 'http'"):
        FkJoinHook().run({**SPEC, "output": {"path": "http://example.com/t"}})


# -- cluster runs: no early return, the driver's exit code, kills that reach the application --------------
@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"spark_submit_kwargs": {"yarn_track_via_rm_api": True}},
            r"spark_submit_kwargs\.yarn_track_via_rm_api",
        ),
        ({"spark_submit_kwargs": {"track_driver_via_k8s_api": True}}, r"track_driver_via_k8s_api"),
        ({"conf": {"spark.yarn.submit.waitAppCompletion": "false"}}, r"waitAppCompletion=false"),
        ({"conf": {"spark.kubernetes.submission.waitAppCompletion": "False"}}, r"waitAppCompletion=false"),
    ],
)
def test_settings_that_return_before_the_refresh_ends_are_refused(spark_conn, options, message):
    spark_conn({"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "cluster"}})
    with pytest.raises(FkJoinBadInputError, match=message):
        FkJoinHook(**options).spark_submit_command(SPEC)


def test_cluster_mode_on_a_standalone_master_is_refused(spark_conn):
    spark_conn({"conn_type": "spark", "host": "spark://m", "port": 7077, "extra": {"deploy-mode": "cluster"}})
    with pytest.raises(FkJoinBadInputError, match="does not run Python applications in cluster mode"):
        FkJoinHook().spark_submit_command(SPEC)


def test_the_task_instance_is_submitted_as_the_refresh_origin(spark_conn):
    spark_conn({"conn_type": "spark", "host": "local[2]"})
    origin = {"dag_id": "d", "run_id": "r", "task_id": "t", "map_index": -1, "try_number": 2}
    assert FkJoinHook().spark_submit_command(SPEC, origin=origin)[-5:] == [
        "run", "--origin", json.dumps(origin, sort_keys=True), "--spec-json", SPEC_JSON,
    ]  # fmt: skip


YARN_FAILED = [
    "INFO Client: Submitted application application_1700000000000_0042",
    "INFO Client: Application report for application_1700000000000_0042 (state: FINISHED)",
    "\t diagnostics: User application exited with status {code}",
    "\t final status: FAILED",
    "ERROR Client: Application diagnostics message: User application exited with status {code}",
    'Exception in thread "main" org.apache.spark.SparkException: Application '
    "application_1700000000000_0042 finished with failed status",
]


@pytest.mark.parametrize(
    ("code", "error"), [(65, FkJoinBadInputError), (75, FkJoinRetryableError), (1, FkJoinJobError)]
)
def test_yarn_cluster_mode_reads_the_drivers_exit_code_from_the_diagnostics(
    spark_conn, fake_spark_submit, code, error
):
    """spark-submit exits 1 for any failed YARN application: the driver's code is in the diagnostics."""
    spark_conn({"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "cluster"}})
    fake_spark_submit.scenario(lines=[line.format(code=code) for line in YARN_FAILED], exit=1)
    with pytest.raises(error):
        FkJoinHook().run(SPEC)


@pytest.mark.parametrize(
    ("code", "error"), [(65, FkJoinBadInputError), (75, FkJoinRetryableError), (2, FkJoinJobError)]
)
def test_kubernetes_cluster_mode_reads_the_driver_containers_exit_code(
    spark_conn, fake_spark_submit, monkeypatch, code, error
):
    """spark-submit exits 0 on Kubernetes whatever the driver did; its container's exit code tells."""
    monkeypatch.setattr(spark_submit, "kube_client", object(), raising=False)
    spark_conn({"conn_type": "spark", "host": "k8s://https://k8s:443", "extra": {"deploy-mode": "cluster"}})
    lines = ["\t pod name: fkjoin-0a1b-driver", "Container final statuses:", f"\t exit code: {code}"]
    fake_spark_submit.scenario(lines=lines, exit=0)
    with pytest.raises(error):
        FkJoinHook(application="local:///opt/fkjoin/fkjoin_job.py").run(SPEC)


def test_exit_2_is_bad_input_only_with_the_clis_error_line(spark_conn, fake_spark_submit):
    """Python exits 2 when it cannot open the job file: a plain (retryable) failure, not bad input."""
    spark_conn({"conn_type": "spark", "host": "local[2]"})
    fake_spark_submit.scenario(lines=["python3: can't open file '/opt/x.py': [Errno 2]"], exit=2)
    with pytest.raises(FkJoinJobError):
        FkJoinHook().run(SPEC)


def test_cluster_mode_takes_only_a_commit_of_its_own_origin(spark_conn, fake_spark_submit, tmp_path):
    """A zombie driver's commit after the refresh started is not this refresh's result."""
    output, left = tmp_path / "out", tmp_path / "left"
    write_table(left, [1])
    record_refresh(output, {"left": (str(left), 0)})
    spark_conn({"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "cluster"}})
    ours = {"dag_id": "d", "run_id": "r", "task_id": "t", "map_index": -1, "try_number": 2}
    zombie = {**ours, "try_number": 1}
    fake_spark_submit.scenario(commit={"left": [str(left), 3]}, commit_origin=zombie)
    result = FkJoinHook().run({**SPEC, "output": {"path": str(output)}}, origin=ours)
    assert (result["mode"], result["output"]["version"]) == ("noop", 1)


def _running(hook: FkJoinHook, spec: dict, seen: str) -> threading.Thread:
    """Start ``hook.run(spec)`` in a thread; return once the Spark provider's hook has parsed attribute
    ``seen`` (the YARN application id, the driver pod) from spark-submit's output."""
    failures: list[BaseException] = []

    def run() -> None:
        try:
            hook.run(spec)
        except BaseException as error:  # the killed job fails the run
            failures.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.failures = failures  # type: ignore[attr-defined]
    thread.start()
    deadline = time.monotonic() + 60
    while getattr(hook._submit_hook, seen, None) is None:
        assert time.monotonic() < deadline, "spark-submit never printed " + seen
        time.sleep(0.05)
    return thread


class _RecordingResourceManager(http.server.BaseHTTPRequestHandler):
    requests: ClassVar[list[tuple[str, str, dict]]] = []

    def do_PUT(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.requests.append(("PUT", self.path, body))
        self.send_response(202)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def test_on_kill_kills_a_yarn_application_after_spark_submit_is_gone(spark_conn, fake_spark_submit):
    """Airflow signals the task's process group: spark-submit dies first, the application would go on.
    The hook then kills it through the ResourceManager's REST API (a real HTTP server here)."""
    server = http.server.HTTPServer(("127.0.0.1", 0), _RecordingResourceManager)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _RecordingResourceManager.requests.clear()
    try:
        address = f"http://127.0.0.1:{server.server_address[1]}"
        spark_conn(
            {
                "conn_type": "spark",
                "host": "yarn",
                "extra": {"deploy-mode": "cluster", "yarn_resourcemanager_webapp_address": address},
            }
        )
        fake_spark_submit.scenario(lines=[YARN_FAILED[0]], hang=True)
        hook = FkJoinHook()
        thread = _running(hook, SPEC, "_yarn_application_id")
        os.kill(fake_spark_submit.pid, signal.SIGKILL)  # the process group's SIGTERM got there first
        thread.join(60)
        hook.on_kill()
        assert _RecordingResourceManager.requests == [
            ("PUT", "/ws/v1/cluster/apps/application_1700000000000_0042/state", {"state": "KILLED"})
        ]
        assert thread.failures and isinstance(thread.failures[0], FkJoinJobError)
    finally:
        server.shutdown()


def test_on_kill_deletes_the_kubernetes_driver_pod_after_spark_submit_is_gone(
    spark_conn, fake_spark_submit, monkeypatch
):
    monkeypatch.setattr(spark_submit, "kube_client", object(), raising=False)
    deleted: list[str] = []
    monkeypatch.setattr(  # the Kubernetes API is the boundary: record the call
        fkjoin_hook._CapturingSparkSubmitHook,
        "_delete_driver_pod",
        lambda self: deleted.append(self._kubernetes_driver_pod),
    )
    spark_conn({"conn_type": "spark", "host": "k8s://https://k8s:443", "extra": {"deploy-mode": "cluster"}})
    fake_spark_submit.scenario(lines=["\t pod name: fkjoin-0a1b-driver"], hang=True)
    hook = FkJoinHook(application="local:///opt/fkjoin/fkjoin_job.py")
    thread = _running(hook, SPEC, "_kubernetes_driver_pod")
    os.kill(fake_spark_submit.pid, signal.SIGKILL)
    thread.join(60)
    hook.on_kill()
    assert deleted == ["fkjoin-0a1b-driver"]


def test_a_kill_before_spark_submit_starts_stops_it_from_starting(spark_conn, fake_spark_submit):
    spark_conn({"conn_type": "spark", "host": "local[2]"})
    hook = FkJoinHook()
    hook.on_kill()
    with pytest.raises(FkJoinJobError, match="killed before its Spark application started"):
        hook.run(SPEC)
    assert not fake_spark_submit.ran


# -- no JVM when nothing changed -------------------------------------------------------------------
def _refreshed_output(tmp_path: Path) -> dict:
    """Inputs written with deltalake and an output whose last refresh commit consumed them as they are
    now, recorded as the engine records it (fingerprint, table ids, versions)."""
    import deltalake

    from airflow_provider_fkjoin.engine.core.spec import load_spec, spec_fingerprint

    orders, customers, output = tmp_path / "orders", tmp_path / "customers", tmp_path / "out"
    write_table(orders, [1])
    write_table(customers, [1])
    spec = {
        **SPEC,
        "left": {**SPEC["left"], "path": str(orders)},
        "right": {**SPEC["right"], "path": str(customers)},
        "output": {"path": str(output)},
    }
    consumed = {
        side: {
            "location": spec[side]["path"],
            "table_id": str(deltalake.DeltaTable(spec[side]["path"]).metadata().id),
            "version": 0,
        }
        for side in ("left", "right")
    }
    progress = {"format": 1, "seq": 1, "kind": "foreign_key_join", "mode": "full", "inputs": consumed,
                "fingerprint": spec_fingerprint(load_spec(spec))}  # fmt: skip
    write_table(output, [1], progress)
    return spec


def test_nothing_moved_returns_the_noop_without_spark_submit(spark_conn, fake_spark_submit, tmp_path):
    spark_conn({"conn_type": "spark", "host": "local[2]"})
    spec = _refreshed_output(tmp_path)
    result = FkJoinHook().run(spec)
    assert not fake_spark_submit.ran
    assert (result["mode"], result["source"], result["output"]["version"]) == ("noop", "precheck", 0)
    assert result["inputs"]["left"] == {"path": spec["left"]["path"], "from_version": 0, "to_version": 0}

    fake_spark_submit.scenario(lines=[json.dumps(RESULT)])
    assert FkJoinHook(noop_check=False).run(spec)["source"] == "driver_stdout"  # turned off: it runs
    assert FkJoinHook().run(spec, full_refresh=True)["source"] == "driver_stdout"  # asked for: it runs
    write_table(Path(spec["left"]["path"]), [2])
    assert FkJoinHook().run(spec)["source"] == "driver_stdout"  # an input moved: it runs


# -- Spark Connect --------------------------------------------------------------------------------------
FAKE_CONNECT_CLIENT = """\
import json, os, sys
scenario = json.loads(os.environ["FAKE_CONNECT_SCENARIO"])
with open(os.environ["FAKE_CONNECT_RECORD"], "w") as f:
    json.dump({"argv": sys.argv[1:], "SPARK_REMOTE": os.environ["SPARK_REMOTE"],
               "FKJOIN_SPARK_CONF": os.environ["FKJOIN_SPARK_CONF"]}, f)
for line in scenario.get("lines", []):
    print(line, flush=True)
sys.exit(scenario.get("exit", 0))
"""


@pytest.fixture
def fake_connect_client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The engine's Connect client (the ``fkjoin`` CLI child) replaced by a script that records its argv
    and environment and plays a scenario: the boundary is the child process, as for spark-submit."""
    from airflow_provider_fkjoin.hooks.connect import SparkConnectRun

    script, record = tmp_path / "fake_client.py", tmp_path / "client.json"
    script.write_text(FAKE_CONNECT_CLIENT)
    real = SparkConnectRun.command
    monkeypatch.setattr(
        SparkConnectRun, "command", lambda self, args: [sys.executable, str(script), *real(self, args)[3:]]
    )
    monkeypatch.setenv("FAKE_CONNECT_RECORD", str(record))

    def scenario(**values: Any) -> None:
        monkeypatch.setenv("FAKE_CONNECT_SCENARIO", json.dumps(values))

    scenario()
    return scenario, lambda: json.loads(record.read_text())


def test_the_connect_clients_exact_argv_and_url():
    from airflow_provider_fkjoin.hooks.connect import SparkConnectRun, with_session_id

    run = SparkConnectRun("sc://h:15002/;token=abc")
    assert run.command(["run", "--spec-json", "{}"]) == [
        sys.executable, "-m", "airflow_provider_fkjoin.cli", "run", "--spec-json", "{}",
    ]  # fmt: skip
    assert run.url == f"sc://h:15002/;token=abc;session_id={run.session_id}"
    assert (
        with_session_id("sc://h:1/;session_id=old;user_id=u", "new") == "sc://h:1/;user_id=u;session_id=new"
    )


def test_a_spark_connect_connection_runs_the_engine_as_a_connect_client(
    spark_conn, fake_connect_client, capsys
):
    scenario, recorded = fake_connect_client
    spark_conn(
        {"conn_type": "spark_connect", "host": "connect.example", "port": 15002, "login": "etl",
         "password": "s3cr3tT0kenValue", "extra": {"use_ssl": True}},
        conn_id="lake_connect",
    )  # fmt: skip
    scenario(lines=["FKJOIN_PHASE pinned 1.0", json.dumps(RESULT)])
    hook = FkJoinHook("lake_connect", conf={"spark.sql.shuffle.partitions": "16"})
    origin = {"dag_id": "d", "run_id": "r", "task_id": "t", "map_index": -1, "try_number": 1}
    result = hook.run(SPEC, write_path="merge", origin=origin)
    assert result == {**RESULT, "source": "driver_stdout"}
    seen = recorded()
    assert seen["argv"] == ["run", "--write-path", "merge", "--origin", json.dumps(origin, sort_keys=True),
                            "--spec-json", SPEC_JSON]  # fmt: skip
    session = hook._connect_run.session_id
    assert seen["SPARK_REMOTE"] == (
        f"sc://connect.example:15002/;user_id=etl;token=s3cr3tT0kenValue;use_ssl=True;session_id={session}"
    )
    assert json.loads(seen["FKJOIN_SPARK_CONF"]) == {"spark.sql.shuffle.partitions": "16"}
    assert "s3cr3tT0kenValue" not in capsys.readouterr().out  # the URL is logged without its token


@pytest.mark.parametrize(
    ("code", "lines", "error"),
    [
        (2, ["error: SpecError: left.key: is required"], FkJoinBadInputError),
        (75, ["error: ConcurrentRefreshError: another refresh committed first"], FkJoinRetryableError),
        (1, ["error: UnknownException: boom"], FkJoinJobError),
        (2, ["usage: fkjoin ..."], FkJoinJobError),
    ],
)
def test_spark_connect_exit_codes(spark_conn, fake_connect_client, code, lines, error):
    scenario, _ = fake_connect_client
    spark_conn({"conn_type": "spark", "host": "sc://connect.example:15002"}, conn_id="sc_in_spark_conn")
    scenario(lines=lines, exit=code)
    with pytest.raises(error):
        FkJoinHook("sc_in_spark_conn").run(SPEC)


def test_driver_output_keeps_the_result_error_and_each_phase_stamp():
    output = fkjoin_hook.DriverOutput()
    for line in [
        "FKJOIN_PHASE pinned 10.500",
        "some Spark log line",
        "FKJOIN_PHASE committed 12.250",
        "FKJOIN_PHASE committed 13.000",  # a second marker of a phase keeps the first stamp
        "FKJOIN_PHASE odd",
        '{"kind": "foreign_key_join", "mode": "noop"}',
    ]:
        output.feed(line)
    assert output.phases == {"pinned": 10.5, "committed": 12.25}
    assert output.phase == "odd"
    assert output.result == {"kind": "foreign_key_join", "mode": "noop"}

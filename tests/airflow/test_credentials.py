"""Storage credentials from Airflow connections: exact ``deltalake`` options and Hadoop settings per
connection type, read through real ``AIRFLOW_CONN_*`` connections, and kept out of logs and triggers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from airflow_support import record_refresh, write_table

from airflow_provider_fkjoin.credentials import (
    CredentialsError,
    resolve_storage_options,
    storage_credentials,
)
from airflow_provider_fkjoin.hooks.fkjoin import FkJoinBadInputError, FkJoinHook
from airflow_provider_fkjoin.triggers import HighWatermarkTrigger

SPEC = {
    "kind": "foreign_key_join",
    "left": {"path": "s3a://lake/orders", "key": ["order_id"]},
    "right": {"path": "s3a://lake/customers", "key": ["customer_id"]},
    "foreign_key": ["customer_id"],
    "output": {"path": "s3a://lake/orders_customers"},
}


TEMPORARY_CREDENTIALS = "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"


@pytest.fixture
def connection(monkeypatch):
    def set_conn(conn_id: str, conn: dict) -> str:
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(conn))
        return conn_id

    return set_conn


def test_aws_keys_region_and_endpoint(connection):
    conn_id = connection(
        "lake",
        {
            "conn_type": "aws",
            "login": "AKIAEXAMPLE",
            "password": "wJalrXUtnFEMIK7MDENG",
            "extra": {
                "region_name": "eu-west-1",
                "aws_session_token": "IQoJb3JpZ2luX2Vj",
                "service_config": {"s3": {"endpoint_url": "http://minio:9000"}},
            },
        },
    )
    creds = storage_credentials(conn_id)
    assert creds.storage_options == {
        "AWS_ACCESS_KEY_ID": "AKIAEXAMPLE",
        "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMIK7MDENG",
        "AWS_SESSION_TOKEN": "IQoJb3JpZ2luX2Vj",
        "AWS_REGION": "eu-west-1",
        "AWS_ENDPOINT_URL": "http://minio:9000",
        "AWS_ALLOW_HTTP": "true",
    }
    assert creds.spark_conf() == {
        "spark.hadoop.fs.s3a.access.key": "AKIAEXAMPLE",
        "spark.hadoop.fs.s3a.secret.key": "wJalrXUtnFEMIK7MDENG",
        "spark.hadoop.fs.s3a.session.token": "IQoJb3JpZ2luX2Vj",
        "spark.hadoop.fs.s3a.aws.credentials.provider": TEMPORARY_CREDENTIALS,
        "spark.hadoop.fs.s3a.endpoint.region": "eu-west-1",
        "spark.hadoop.fs.s3a.endpoint": "http://minio:9000",
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
    }


def test_aws_without_keys_needs_the_amazon_provider(connection):
    conn_id = connection("role", {"conn_type": "aws", "extra": {"role_arn": "arn:aws:iam::1:role/etl"}})
    with pytest.raises(CredentialsError, match="install apache-airflow-providers-amazon"):
        storage_credentials(conn_id)


def test_google_key_file_and_inline_key(connection):
    by_path = storage_credentials(
        connection("gcs", {"conn_type": "google_cloud_platform", "extra": {"key_path": "/keys/sa.json"}})
    )
    assert by_path.storage_options == {"google_service_account_path": "/keys/sa.json"}
    assert by_path.hadoop_conf["fs.gs.auth.service.account.json.keyfile"] == "/keys/sa.json"
    key = {
        "client_email": "etl@p.iam.gserviceaccount.com",
        "private_key_id": "k1",
        "private_key": "-----BEGIN",
    }
    inline = storage_credentials(
        connection(
            "gcs_inline",
            {
                "conn_type": "google_cloud_platform",
                "extra": {"extra__google_cloud_platform__keyfile_dict": json.dumps(key), "project": "p"},
            },
        )
    )
    assert json.loads(inline.storage_options["google_service_account_key"]) == key
    assert inline.hadoop_conf == {
        "fs.gs.project.id": "p",
        "google.cloud.auth.service.account.enable": "true",
        "fs.gs.auth.service.account.email": "etl@p.iam.gserviceaccount.com",
        "fs.gs.auth.service.account.private.key.id": "k1",
        "fs.gs.auth.service.account.private.key": "-----BEGIN",
    }


def test_azure_account_key_sas_connection_string_and_service_principal(connection):
    host = "acct.dfs.core.windows.net"
    key = storage_credentials(
        connection("adls_key", {"conn_type": "adls", "host": "acct", "password": "S2V5"})
    )
    assert key.storage_options == {"azure_storage_account_name": "acct", "azure_storage_account_key": "S2V5"}
    assert key.hadoop_conf == {f"fs.azure.account.key.{host}": "S2V5"}

    sas = storage_credentials(
        connection(
            "wasb_sas",
            {"conn_type": "wasb", "login": "acct", "extra": {"sas_token": "?sv=2024&sig=abc"}},
        )
    )
    assert sas.storage_options == {
        "azure_storage_account_name": "acct",
        "azure_storage_sas_token": "sv=2024&sig=abc",
    }
    assert sas.hadoop_conf[f"fs.azure.sas.fixed.token.{host}"] == "sv=2024&sig=abc"
    assert sas.hadoop_conf[f"fs.azure.account.auth.type.{host}"] == "SAS"

    string = storage_credentials(
        connection(
            "wasb_string",
            {"conn_type": "wasb", "extra": {"connection_string": "AccountName=acct;AccountKey=S2V5;Foo=1"}},
        )
    )
    assert string.storage_options == {
        "azure_storage_account_name": "acct",
        "azure_storage_account_key": "S2V5",
    }

    principal = storage_credentials(
        connection(
            "adls_sp",
            {"conn_type": "adls", "host": "acct", "login": "app-id", "password": "c2VjcmV0",
             "extra": {"tenant_id": "t-1"}},
        )
    )  # fmt: skip
    assert principal.storage_options == {
        "azure_storage_account_name": "acct",
        "azure_client_id": "app-id",
        "azure_client_secret": "c2VjcmV0",
        "azure_tenant_id": "t-1",
    }
    assert principal.hadoop_conf[f"fs.azure.account.oauth2.client.endpoint.{host}"] == (
        "https://login.microsoftonline.com/t-1/oauth2/token"
    )


def test_other_connection_types_are_refused_naming_the_connection(connection):
    with pytest.raises(CredentialsError, match=r"connection 'pg' is of type 'postgres'; .* aws, "):
        storage_credentials(connection("pg", {"conn_type": "postgres", "host": "db"}))
    with pytest.raises(CredentialsError, match="no credentials"):
        storage_credentials(
            connection("bare", {"conn_type": "adls", "host": "acct", "extra": {"tenant_id": "t"}})
        )


def test_explicit_storage_options_win_over_the_connection(connection):
    conn_id = connection("lake", {"conn_type": "aws", "login": "AKIA1", "password": "wJalrXUtnFEMI"})
    merged = resolve_storage_options({"AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "AKIA2"}, conn_id)
    assert merged == {
        "AWS_ACCESS_KEY_ID": "AKIA2",
        "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI",
        "AWS_REGION": "us-east-1",
    }
    assert resolve_storage_options(None, None) is None


def test_the_job_gets_hadoop_settings_the_log_shows_none(connection, spark_conn, monkeypatch):
    monkeypatch.setenv("FKJOIN_DELTA_JARS", "/opt/delta/delta-spark.jar")
    spark_conn({"conn_type": "spark", "host": "local[2]"})
    conn_id = connection("lake", {"conn_type": "aws", "login": "AKIAEXAMPLE1", "password": "wJalrXUtnFEMI"})
    hook = FkJoinHook(storage_conn_id=conn_id, conf={"spark.hadoop.fs.s3a.endpoint.region": "us-east-2"})
    argv = hook.spark_submit_command(SPEC)
    assert "spark.hadoop.fs.s3a.secret.key=wJalrXUtnFEMI" in argv
    assert "spark.hadoop.fs.s3a.access.key=AKIAEXAMPLE1" in argv
    masked = hook.masked_command(SPEC)
    assert "wJalrXUtnFEMI" not in masked and "AKIAEXAMPLE1" not in masked
    assert hook.storage_options == {
        "AWS_ACCESS_KEY_ID": "AKIAEXAMPLE1",
        "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI",
    }
    with pytest.raises(FkJoinBadInputError, match=r"storage_conn_id: connection 'pg' is of type 'postgres'"):
        FkJoinHook(storage_conn_id=connection("pg", {"conn_type": "postgres"})).spark_submit_command(SPEC)


def test_the_trigger_reads_the_connection_in_the_triggerer(connection, tmp_path: Path, monkeypatch):
    """The trigger's serialised arguments hold the connection id, never a credential; it resolves the
    connection when it reads (here, local tables: the options reach deltalake, which ignores them)."""
    source, target = tmp_path / "src", tmp_path / "dst"
    write_table(source, [1])
    record_refresh(target, {"source": (str(source), 0)})
    conn_id = connection("lake", {"conn_type": "aws", "login": "AKIAEXAMPLE1", "password": "wJalrXUtnFEMI"})
    trigger = HighWatermarkTrigger(
        target=str(target), source=str(source), wanted_version=0, storage_conn_id=conn_id
    )
    _, kwargs = trigger.serialize()
    assert "wJalrXUtnFEMI" not in json.dumps(kwargs) and kwargs["storage_conn_id"] == "lake"
    seen: list[dict | None] = []
    from airflow_provider_fkjoin.triggers import high_watermark as module

    real = module.observe
    monkeypatch.setattr(module, "observe", lambda t, s, options: seen.append(options) or real(t, s, None))
    assert trigger.observe().reached == 0
    assert seen == [{"AWS_ACCESS_KEY_ID": "AKIAEXAMPLE1", "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI"}]

"""The no-JVM readers (the high-watermark sensor and trigger, the Joins view, the hook's noop check) read an
object store with the credentials of the Airflow connection named by ``storage_conn_id``, never with the
process environment's by accident.

The S3-protocol server here checks every request's signature against the access keys of its own IAM users
(moto's IAM authentication, switched on once the table is written). The process environment holds a key
the server does not know, and points at the same server, so a reader that fell back on it would be refused:
reads succeed only with the connection's key, and fail with a connection whose secret is wrong.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from support.s3 import REGION, S3Server, start_server

LOCKED_BUCKET = "fkjoin-locked"


@pytest.fixture(scope="module")
def locked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[S3Server, str]]:
    """A server that authenticates every request, holding one Delta table written at versions 0 and 1."""
    import boto3
    from deltalake import write_deltalake

    server = start_server(tmp_path_factory.mktemp("s3-locked"))
    try:
        iam = boto3.client(
            "iam", endpoint_url=server.endpoint, region_name=REGION, aws_access_key_id="setup",
            aws_secret_access_key="setup",
        )  # fmt: skip
        iam.create_user(UserName="lake-reader")
        iam.put_user_policy(
            UserName="lake-reader",
            PolicyName="everything",
            PolicyDocument=json.dumps(
                {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
            ),
        )
        key = iam.create_access_key(UserName="lake-reader")["AccessKey"]
        server.access_key, server.secret_key = key["AccessKeyId"], key["SecretAccessKey"]
        server.create_bucket(LOCKED_BUCKET)
        table = f"s3a://{LOCKED_BUCKET}/orders"
        options = {**server.storage_options, "AWS_S3_ALLOW_UNSAFE_RENAME": "true"}
        for ids in ([1, 2], [3]):
            write_deltalake(table, pa.table({"order_id": ids}), mode="append", storage_options=options)
        request = urllib.request.Request(
            f"{server.endpoint}/moto-api/reset-auth",
            data=b"0",
            method="POST",
            headers={"Content-Type": "text/plain"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.status == 200  # from now on, every request must carry a known key
        yield server, table
    finally:
        server.stop()


@pytest.fixture
def connections(locked: tuple[S3Server, str], monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Connection ``lake`` holds the server's key, ``lake_wrong`` a wrong secret; the environment a key the
    server does not know, for the same endpoint."""
    server, _ = locked
    extra = {"endpoint_url": server.endpoint, "region_name": REGION}
    for conn_id, secret in (("lake", server.secret_key), ("lake_wrong", "not-the-secret")):
        monkeypatch.setenv(
            f"AIRFLOW_CONN_{conn_id.upper()}",
            json.dumps({"conn_type": "aws", "login": server.access_key, "password": secret, "extra": extra}),
        )
    for name, value in {
        "AWS_ACCESS_KEY_ID": "AKIAENVIRONMENT0000",
        "AWS_SECRET_ACCESS_KEY": "environment-secret",
        "AWS_ENDPOINT_URL": server.endpoint,
        "AWS_ALLOW_HTTP": "true",
        "AWS_REGION": REGION,
    }.items():
        monkeypatch.setenv(name, value)
    return {"server": server}


def test_the_environment_alone_is_refused(locked, connections) -> None:
    """The check below can fail: the server refuses the environment's key."""
    from airflow_provider_fkjoin.engine import high_watermark

    _, table = locked
    with pytest.raises(Exception, match=r"(?i)(403|forbidden|access|denied|InvalidAccessKeyId|credential)"):
        high_watermark(table, None)


def test_sensor_trigger_and_view_read_with_the_connections_key(locked, connections) -> None:
    from airflow_provider_fkjoin.credentials import resolve_storage_options
    from airflow_provider_fkjoin.plugins.joins_view import JoinTask, read_freshness
    from airflow_provider_fkjoin.sensors.high_watermark import HighWatermarkSensor
    from airflow_provider_fkjoin.triggers.high_watermark import HighWatermarkTrigger

    _, table = locked
    assert resolve_storage_options(None, "lake")["AWS_ACCESS_KEY_ID"] == connections["server"].access_key

    sensor = HighWatermarkSensor(
        task_id="wait", target=table, version=1, storage_conn_id="lake", poke_interval=1, timeout=60,
        max_transient_errors=0,
    )  # fmt: skip
    done = sensor.poke({"ti": None, "task_state_store": None})
    assert done and done.xcom_value["reached_version"] == 1

    trigger = HighWatermarkTrigger(target=table, source=None, wanted_version=1, storage_conn_id="lake")
    assert trigger.observe().reached == 1
    assert "not-the-secret" not in json.dumps(trigger.serialize()[1])

    view = read_freshness([JoinTask("dag", "join", "foreign_key_join", table, "lake")])
    assert view[0][1] is None, view

    wrong = read_freshness([JoinTask("dag", "join", "foreign_key_join", table, "lake_wrong")])
    assert wrong[0][0] is None and "unreadable" in str(wrong[0][1]), wrong
    wrong_trigger = HighWatermarkTrigger(
        target=table, source=None, wanted_version=1, storage_conn_id="lake_wrong"
    )
    with pytest.raises(Exception, match=r"(?i)(403|forbidden|signature|denied|credential)"):
        wrong_trigger.observe()

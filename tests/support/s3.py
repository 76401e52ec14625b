"""An S3-protocol server for the object-store tests (``tests/objectstore``): moto in server mode on
127.0.0.1, one bucket, and the settings that point Spark's S3A and ``deltalake`` at it; and a DynamoDB
endpoint (moto again) for Delta's DynamoDB-backed log store (:func:`start_dynamodb`).

The server is a real HTTP server speaking S3 (and DynamoDB and IAM): Spark's S3A connector and the
``deltalake`` readers talk to it over the network exactly as they would to S3. Its access log (one line
per request, the method and the path with its query) is what the cost tests count.

    def test_x(s3, s3_spark):
        s3.url("t/orders")            # 's3a://fkjoin-<id>/t/orders'
        s3.storage_options            # for deltalake: endpoint, keys, plain HTTP
"""

from __future__ import annotations

import os
import re
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ACCESS_KEY, SECRET_KEY, REGION = "fkjoin-test-key", "fkjoin-test-secret", "us-east-1"
_REQUEST = re.compile(r'"(?P<method>[A-Z]+) (?P<target>\S+) HTTP/[0-9.]+" (?P<status>\d{3})')


class Url(str):
    """An object-store location that joins like a ``Path`` (``root / "orders"``), so the suite's world
    builders that take a folder work on a bucket unchanged."""

    def __truediv__(self, other: str) -> Url:
        return Url(f"{self.rstrip('/')}/{other}")


@dataclass(frozen=True)
class Request:
    """One request the server answered: method, bucket-relative key path, query string, status."""

    method: str
    path: str
    query: str
    status: int


@dataclass
class S3Server:
    """A moto server process, its endpoint, its bucket, and its access log."""

    process: subprocess.Popen
    endpoint: str
    log: Path
    bucket: str = field(default_factory=lambda: f"fkjoin-{uuid.uuid4().hex[:12]}")
    access_key: str = ACCESS_KEY
    secret_key: str = SECRET_KEY

    def url(self, key: str) -> Url:
        return Url(f"s3a://{self.bucket}/{key.strip('/')}")

    @property
    def storage_options(self) -> dict[str, str]:
        """``deltalake`` storage options for this server (the Airflow connection's would give the same)."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": REGION,
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ALLOW_HTTP": "true",
        }

    def hadoop_conf(self, bucket: str | None = None) -> dict[str, str]:
        """S3A settings for one bucket of this server (``fs.s3a.bucket.<name>.*``)."""
        prefix = f"fs.s3a.bucket.{bucket or self.bucket}."
        return {
            prefix + "endpoint": self.endpoint,
            prefix + "endpoint.region": REGION,
            prefix + "path.style.access": "true",
            prefix + "connection.ssl.enabled": "false",
            prefix + "access.key": self.access_key,
            prefix + "secret.key": self.secret_key,
        }

    def spark_conf(self) -> dict[str, str]:
        """The same settings as Spark conf, for a driver in another process (``FKJOIN_SPARK_CONF``)."""
        return {f"spark.hadoop.{key}": value for key, value in self.hadoop_conf().items()}

    def create_bucket(self, name: str | None = None) -> None:
        request = urllib.request.Request(f"{self.endpoint}/{name or self.bucket}", method="PUT")
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.status == 200

    def mark(self) -> int:
        """Where the access log ends now: :meth:`requests` from here on."""
        return self.log.stat().st_size

    def requests(self, since: int = 0) -> list[Request]:
        """The requests to this server's bucket logged after ``since`` (a :meth:`mark`)."""
        with self.log.open("rb") as handle:
            handle.seek(since)
            text = handle.read().decode("utf-8", "replace")
        found = []
        for match in _REQUEST.finditer(text):
            target = match["target"]
            path, _, query = target.partition("?")
            if not path.startswith(f"/{self.bucket}"):
                continue
            found.append(Request(match["method"], path[len(self.bucket) + 1 :], query, int(match["status"])))
        return found

    def stop(self) -> None:
        stop_process(self.process)


def stop_process(process: subprocess.Popen) -> None:
    """Stop a server process: terminate, then kill if it has not ended in 30 s."""
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _start_moto(
    folder: Path, env: dict[str, str] | None = None, *, tls: bool = False, timeout_s: float = 120.0
) -> tuple[subprocess.Popen, str, Path]:
    """Start ``python -m moto.server`` on a free port of 127.0.0.1 (``tls``: HTTPS with a certificate
    made on the fly) and wait until it answers (polling its ``/moto-api/`` page; the process ending first
    is an error with its log). Returns the process, its endpoint and its log."""
    port = free_port()
    log = folder / f"moto-{port}.log"
    handle = log.open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port), *(["-s"] if tls else [])],
        stdout=handle,
        stderr=subprocess.STDOUT,
        env={**os.environ, **(env or {})},
    )
    handle.close()
    endpoint = f"{'https' if tls else 'http'}://127.0.0.1:{port}"
    context = ssl._create_unverified_context() if tls else None  # the server's own throwaway certificate
    deadline = time.monotonic() + timeout_s
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"moto server exited ({process.returncode}):\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=5, context=context) as response:
                if response.status == 200:
                    break
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        if time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"moto server did not answer on {endpoint} in {timeout_s:.0f} s")
        time.sleep(0.05)  # polling interval of a readiness check, not a synchronisation
    return process, endpoint, log


def start_server(folder: Path, env: dict[str, str] | None = None, timeout_s: float = 120.0) -> S3Server:
    """Start an S3-protocol server (moto) on a free port of 127.0.0.1; see :func:`_start_moto`."""
    return S3Server(*_start_moto(folder, env, timeout_s=timeout_s))


#: The DynamoDB table Delta's log store keeps its commit entries in (it creates it on first use).
LOG_STORE_TABLE = "delta_log"
LOG_STORE_CLASS = "io.delta.storage.S3DynamoDBLogStore"


@dataclass
class DynamoDBServer:
    """A DynamoDB endpoint (moto over HTTPS) for Delta's DynamoDB-backed log store, and what points a
    Spark driver's log store at it.

    The log store talks to DynamoDB with the AWS SDK for Java v1 and has no endpoint setting: it asks the
    SDK for the region's DynamoDB endpoint, always over HTTPS. So the driver gets a region file naming
    this server as ``us-east-1``'s DynamoDB endpoint (the SDK's ``RegionUtils.fileOverride``), and trusts
    the server's throwaway certificate (``disableCertChecking``): only the log store's DynamoDB calls are
    affected (S3A speaks to S3 with the SDK v2).

        env = {**dynamodb.driver_env(s3), ...}   # a child driver whose commits go through DynamoDB
    """

    process: subprocess.Popen
    endpoint: str
    log: Path
    regions_file: Path

    @property
    def jvm_options(self) -> str:
        return (
            f"-Dcom.amazonaws.regions.RegionUtils.fileOverride={self.regions_file} "
            "-Dcom.amazonaws.sdk.disableCertChecking=true"
        )

    def spark_conf(self) -> dict[str, str]:
        """The log store's Spark conf, as docs/storage/s3.md gives it."""
        prefix = f"spark.{LOG_STORE_CLASS}."
        return {
            "spark.delta.logStore.s3a.impl": LOG_STORE_CLASS,
            "spark.delta.logStore.s3.impl": LOG_STORE_CLASS,
            prefix + "ddb.tableName": LOG_STORE_TABLE,
            prefix + "ddb.region": REGION,
        }

    def driver_env(self, s3: S3Server, base: dict[str, str]) -> dict[str, str]:
        """``base`` (a driver's environment, e.g. ``support.crash.with_env``) plus S3A on ``s3``'s bucket,
        the log store on this server, and the keys the log store's credential chain reads."""
        conf = ",".join(f"{key}={value}" for key, value in {**s3.spark_conf(), **self.spark_conf()}.items())
        return {
            **base,
            "FKJOIN_SPARK_CONF": ",".join(part for part in (base.get("FKJOIN_SPARK_CONF", ""), conf) if part),
            "SPARK_SUBMIT_OPTS": " ".join(
                p for p in (base.get("SPARK_SUBMIT_OPTS", ""), self.jvm_options) if p
            ),
            "AWS_ACCESS_KEY_ID": s3.access_key,
            "AWS_SECRET_ACCESS_KEY": s3.secret_key,
            "AWS_REGION": REGION,
        }

    def entries(self, table_path: str) -> list[dict[str, str]]:
        """The log store's entries for the Delta table at ``table_path``: ``fileName``, ``complete``..."""
        import boto3
        import urllib3

        client = boto3.client(
            "dynamodb",
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            verify=False,  # the server's throwaway certificate
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", urllib3.exceptions.InsecureRequestWarning)
            found = client.query(
                TableName=LOG_STORE_TABLE,
                KeyConditionExpression="tablePath = :p",
                ExpressionAttributeValues={":p": {"S": table_path}},
                ConsistentRead=True,
            )["Items"]
        return [{name: next(iter(value.values())) for name, value in item.items()} for item in found]

    def stop(self) -> None:
        stop_process(self.process)


def start_dynamodb(folder: Path) -> DynamoDBServer:
    """Start a DynamoDB endpoint (moto over HTTPS) on 127.0.0.1 and write the SDK region file naming it."""
    process, endpoint, log = _start_moto(folder, tls=True)
    host = endpoint.removeprefix("https://")
    regions = folder / f"regions-{host.replace(':', '-')}.xml"
    regions.write_text(
        '<?xml version="1.0" encoding="UTF-8"?>\n<XmlResponse><Regions><Region>'
        f"<Name>{REGION}</Name><Endpoint><ServiceName>dynamodb</ServiceName><Http>false</Http>"
        f"<Https>true</Https><Hostname>{host}</Hostname></Endpoint></Region></Regions></XmlResponse>\n"
    )
    return DynamoDBServer(process, endpoint, log, regions)


def driver_env(server: S3Server) -> dict[str, str]:
    """What a child ``fkjoin run`` needs beside the suite's driver settings: this server's S3A settings."""
    return {"FKJOIN_SPARK_CONF": ",".join(f"{key}={value}" for key, value in server.spark_conf().items())}


def orders_join(root: Url) -> dict[str, Any]:
    """The left FK join of ``root``'s orders and customers (``helpers.ORDERS``, ``helpers.CUSTOMERS``) into
    ``root/out``: what ``helpers.oracle`` recomputes."""
    return {
        "kind": "foreign_key_join",
        "left": {"path": root / "orders", "key": ["order_id"]},
        "right": {"path": root / "customers", "key": ["customer_id"]},
        "foreign_key": ["customer_id"],
        "how": "left",
        "output": {"path": root / "out"},
    }

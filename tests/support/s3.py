"""An S3-protocol server for the object-store tests (``tests/objectstore``): moto in server mode on
127.0.0.1, one bucket, and the settings that point Spark's S3A and ``deltalake`` at it.

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
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
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
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(folder: Path, env: dict[str, str] | None = None, timeout_s: float = 120.0) -> S3Server:
    """Start ``python -m moto.server`` on a free port of 127.0.0.1 and wait until it answers (polling its
    ``/moto-api/`` page; the process ending first is an error with its log)."""
    port = free_port()
    log = folder / f"moto-{port}.log"
    handle = log.open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=handle,
        stderr=subprocess.STDOUT,
        env={**os.environ, **(env or {})},
    )
    handle.close()
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"moto server exited ({process.returncode}):\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=5) as response:
                if response.status == 200:
                    break
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        if time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"moto server did not answer on {endpoint} in {timeout_s:.0f} s")
        time.sleep(0.05)  # polling interval of a readiness check, not a synchronisation
    return S3Server(process, endpoint, log)


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

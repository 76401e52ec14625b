"""What the end-to-end DAG tests share: an isolated Airflow installation and readers of the tables.

Each output is checked against a join recomputed from scratch in pure Python from the input tables (read
with ``deltalake`` at the versions the refresh consumed), never against the engine's own output. The outputs
have deletion vectors, which ``deltalake`` cannot read, so they are read with Spark.
"""

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable
from driver_jvm import driver_jvm_env

REPO = Path(__file__).resolve().parents[2]
AIRFLOW = str(Path(sys.executable).parent / "airflow")


class Airflow:
    """An isolated Airflow installation (AIRFLOW_HOME in tmp, SQLite) pointed at the repo's dags/."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.warehouse = home / "warehouse"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW_", "AIRFLOW__"))}
        env.update(
            {
                "AIRFLOW_HOME": str(home),
                "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "FKJOIN_WAREHOUSE": str(self.warehouse),
                "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
                "PATH": os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
                **driver_jvm_env(),
            }
        )
        self.env = env

    def run(self, *args: str) -> str:
        done = subprocess.run(
            [AIRFLOW, *args], env=self.env, cwd=self.home, capture_output=True, text=True, timeout=900
        )
        output = done.stdout + done.stderr
        assert done.returncode == 0, f"airflow {' '.join(args)} failed:\n{output[-6000:]}"
        return output

    def dags_test(self, dag_id: str) -> str:
        output = self.run("dags", "test", dag_id)
        assert "state=success" in output or "successful" in output, output[-6000:]
        assert "new_state=failed" not in output, output[-6000:]
        return output

    def asset_event_extras(self, uri: str) -> list[dict[str, Any]]:
        with sqlite3.connect(self.home / "airflow.db") as db:
            rows = db.execute(
                "SELECT e.extra FROM asset_event e JOIN asset a ON a.id = e.asset_id WHERE a.uri = ? "
                "ORDER BY e.id",
                (uri,),
            ).fetchall()
        return [json.loads(extra) if isinstance(extra, str) else extra for (extra,) in rows]


def rows_at(path: Path, version: int) -> list[dict[str, Any]]:
    """An input table's rows at a version (inputs are written by deltalake: no deletion vectors)."""
    return pa.table(DeltaTable(str(path), version=version).to_pyarrow_table()).to_pylist()


def output_rows(spark: Any, path: Path, columns: list[str]) -> list[tuple[Any, ...]]:
    frame = spark.read.format("delta").load(str(path)).select(*columns)
    return sorted(tuple(row) for row in frame.collect())


def epoch_millis(value: Any) -> int:
    """A timestamp read back from Spark as epoch milliseconds (what the models compare)."""
    return int(value.timestamp() * 1000)

"""The ``airflow dags test`` path's Airflow installation: an isolated AIRFLOW_HOME (SQLite) pointed at the
repo's ``dags/``, the embedded local Spark as the ``spark`` connection, and a reader of its asset events.
The expectations it is checked against: ``support/example_dags.py``."""

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

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

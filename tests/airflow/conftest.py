"""Fixtures for the Airflow layer's tests: an isolated AIRFLOW_HOME, Delta tables written with deltalake
(no JVM), Spark connections as environment variables, a fake ``spark-submit`` on PATH, and an Airflow
installation with a fresh metadata DB for ``airflow dags test``."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

# Airflow reads AIRFLOW_HOME when first imported: keep the unit tests away from a real installation.
os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="fkjoin-airflow-home-"))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")


from airflow_support import record_refresh, write_table  # noqa: F401

if TYPE_CHECKING:
    from dags_support import Airflow


@pytest.fixture
def spark_conn(monkeypatch: pytest.MonkeyPatch):
    """Set the ``spark_default`` connection (or another id) from a dict, as AIRFLOW_CONN_* does."""

    def set_conn(conn: dict[str, Any], conn_id: str = "spark_default") -> None:
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(conn))

    return set_conn


FAKE_SPARK_SUBMIT = """\
#!{python}
# A stand-in for spark-submit: records its argv, runs the scenario named by FAKE_SUBMIT_SCENARIO.
import json, os, sys
with open(os.environ["FAKE_SUBMIT_RECORD"], "w") as f:
    json.dump(sys.argv[1:], f)
with open(os.environ["FAKE_SUBMIT_RECORD"] + ".pid", "w") as f:
    f.write(str(os.getpid()))
scenario = json.loads(os.environ["FAKE_SUBMIT_SCENARIO"])
for line in scenario.get("lines", []):
    print(line, flush=True)
if scenario.get("commit"):
    sys.path.insert(0, {tests!r})
    from pathlib import Path
    from airflow_support import record_refresh
    spec = json.loads(sys.argv[sys.argv.index("--spec-json") + 1])
    consumed = {{k: tuple(v) for k, v in scenario["commit"].items()}}
    record_refresh(Path(spec["output"]["path"]), consumed, origin=scenario.get("commit_origin"))
if scenario.get("hang"):  # a long job: the test kills it, as Airflow kills a task's process group
    import signal
    signal.pause()
sys.exit(scenario.get("exit", 0))
"""


@pytest.fixture
def fake_spark_submit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A fake ``spark-submit`` first on PATH; call it with a scenario, read back the argv it got."""
    bin_dir = tmp_path / "fake-bin"
    bin_dir.mkdir()
    script = bin_dir / "spark-submit"
    script.write_text(
        textwrap.dedent(FAKE_SPARK_SUBMIT).format(python=sys.executable, tests=str(Path(__file__).parent))
    )
    script.chmod(0o755)
    record = tmp_path / "argv.json"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("FAKE_SUBMIT_RECORD", str(record))

    class Fake:
        def scenario(self, **scenario: Any) -> None:
            monkeypatch.setenv("FAKE_SUBMIT_SCENARIO", json.dumps(scenario))

        @property
        def argv(self) -> list[str]:
            return json.loads(record.read_text())

        @property
        def ran(self) -> bool:
            return record.exists()

        @property
        def pid(self) -> int | None:
            pid_file = Path(f"{record}.pid")
            return int(pid_file.read_text()) if pid_file.exists() and pid_file.read_text() else None

    fake = Fake()
    fake.scenario()
    yield fake


@pytest.fixture(scope="module")
def airflow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Airflow]:
    """An isolated Airflow installation for one end-to-end DAG test module: its SQLite DB a copy of the
    run's migrated template (``support.example_dags.airflow_db_template``)."""
    from dags_support import Airflow
    from support.example_dags import airflow_db_template

    installation = Airflow(tmp_path_factory.mktemp("airflow-home"))
    shutil.copyfile(airflow_db_template(tmp_path_factory), installation.home / "airflow.db")
    yield installation

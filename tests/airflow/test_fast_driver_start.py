"""The driver's quick start for real: ``fkjoin jvm-archive`` builds a class archive into a folder of its own,
and a refresh through the hook's spark-submit starts its driver JVM with it, which maps it.

Slow (a minute to build the archive, half a minute for the refresh); the exact argv is checked without a
JVM in ``test_hook.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from airflow_provider_fkjoin.hooks.fkjoin import FkJoinHook
from airflow_provider_fkjoin.jvm_start import ARCHIVE_DIR_ENV, archive_path

pytestmark = pytest.mark.slow


def test_a_built_archive_is_mapped_by_the_driver_of_a_refresh(tmp_path: Path, spark_conn, monkeypatch):
    archives = tmp_path / "archives"
    command = [sys.executable, "-m", "airflow_provider_fkjoin.cli", "jvm-archive", "--dir", str(archives)]
    built = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    assert built.returncode == 0, built.stderr[-3000:]
    report = json.loads(built.stdout.strip().splitlines()[-1])
    monkeypatch.setenv(ARCHIVE_DIR_ENV, str(archives))
    monkeypatch.delenv("SPARK_SUBMIT_OPTS", raising=False)
    assert report["built"] is True
    assert report["archive"] == str(archive_path()) and archive_path().stat().st_size > 0
    again = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    assert json.loads(again.stdout.strip().splitlines()[-1])["built"] is False  # once per machine

    warehouse = tmp_path / "warehouse"
    write_deltalake(str(warehouse / "orders"), pa.table({"order_id": [1, 2, 3], "customer_id": [7, 8, 7]}))
    write_deltalake(str(warehouse / "customers"), pa.table({"customer_id": [7, 8], "name": ["a", "b"]}))
    spec = {
        "kind": "foreign_key_join",
        "left": {"path": str(warehouse / "orders"), "key": ["order_id"]},
        "right": {"path": str(warehouse / "customers"), "key": ["customer_id"]},
        "foreign_key": ["customer_id"],
        "output": {"path": str(warehouse / "out")},
    }
    spark_conn({"conn_type": "spark", "host": "local[1]"})
    classes = tmp_path / "classes.log"
    mine = f"-Xlog:class+load=info:file={classes}"  # the user's own option: kept, ours follow it
    hook = FkJoinHook(conf={"spark.driver.extraJavaOptions": mine, "spark.sql.shuffle.partitions": "1"})
    options = f"spark.driver.extraJavaOptions={mine} {report['driver_java_options']}"
    assert options in hook.spark_submit_command(spec)

    assert hook.run(spec)["mode"] == "full"
    loaded = classes.read_text().splitlines()
    from_archive = [line for line in loaded if "source: shared objects file (top)" in line]
    # most of the driver's classes came from the archive this test built (its top layer), not from jars
    assert len(from_archive) > len(loaded) / 2, (
        f"{len(from_archive)} of {len(loaded)} classes from the archive"
    )

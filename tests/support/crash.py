"""The crash tests' shared machinery: ``fkjoin run`` in a subprocess, killed at a traced phase; worlds of
tables prepared once and put back at the same paths before each phase; and the foreign-key crash world.

The refresh runs as a subprocess (its own cold driver JVM, sped up by ``driver_jvm``) with
``FKJOIN_TRACE=1``. :func:`run_fkjoin` reads its stderr line by line and kills its whole process group the
moment it sees ``FKJOIN_PHASE <phase>``: synchronisation is on those lines only, never on sleeps.

A crash test's world is prepared once per module in-process and saved (:class:`SavedFolder`); each phase
starts from a copy of it put back at the *same* path, byte for byte. The path must not change: an output's
progress records its inputs' locations, and a refresh whose inputs moved is a different refresh (a full
rebuild). The whole folder is saved, so whatever the engine keeps beside the tables (a windowed join's
``<output>_fkjoin_state`` tables, change-feed files) comes back too; ``shutil.copytree`` copies with
``copy2``, which keeps the files' modification times, which Delta reads as commit timestamps.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from driver_jvm import driver_jvm_env
from helpers import (
    Row,
    assert_same_rows,
    create_table,
    delete_keys,
    expected_fk_join,
    read_rows,
    table_columns,
    table_version,
    upsert,
)
from pyspark.sql import SparkSession

from airflow_provider_fkjoin.engine import run_spec

REPO = Path(__file__).resolve().parents[2]
#: The phases an incremental foreign-key refresh traces, in order.
PHASE_ORDER = ["pinned", "changes_read", "merge_started", "committing", "committed"]
LEFT = "order_id INT, customer_id STRING, amount INT"
RIGHT = "customer_id STRING, name STRING, tier STRING"
KEY = ["order_id"]


# -- the subprocess --------------------------------------------------------------------------------------
def fkjoin_command(*args: str) -> list[str]:
    """The ``fkjoin`` console script of this interpreter's environment (or the module, if not installed)."""
    script = Path(sys.executable).with_name("fkjoin")
    if script.exists():
        return [str(script), *args]
    return [sys.executable, "-m", "airflow_provider_fkjoin.cli", *args]


def subprocess_env() -> dict[str, str]:
    """The environment of a traced ``fkjoin run``: one local core, small Spark settings, the test JVM
    options (``driver_jvm``)."""
    env = dict(os.environ)
    env.update(
        {
            "FKJOIN_TRACE": "1",
            "FKJOIN_SPARK_MASTER": "local[1]",
            "FKJOIN_SPARK_CONF": "spark.sql.shuffle.partitions=1,spark.default.parallelism=1,"
            "spark.databricks.delta.snapshotPartitions=1,spark.driver.memory=1g",
            "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p),
            "PYTHONUNBUFFERED": "1",
            **driver_jvm_env(),
        }
    )
    return env


def with_env(extra: Mapping[str, str] | None) -> dict[str, str]:
    """:func:`subprocess_env` plus ``extra``; its ``FKJOIN_SPARK_CONF`` (``key=value`` pairs) is appended."""
    env = subprocess_env()
    for key, value in (extra or {}).items():
        env[key] = f"{env[key]},{value}" if key == "FKJOIN_SPARK_CONF" and env.get(key) else value
    return env


@dataclass
class Run:
    """What one ``fkjoin run`` subprocess did."""

    returncode: int
    phases: list[str]
    killed_at: str | None
    stdout: str
    stderr_tail: list[str]
    #: Phases the child traced after the one it was killed at, before the kill landed (a stalled test
    #: process): then it may have gone on to commit.
    after_kill: list[str] = field(default_factory=list)

    def went_on_to_write(self) -> bool:
        """Whether the child reached its write before the kill landed."""
        return "merge_started" in self.after_kill


def run_fkjoin(
    spec_path: Path, workdir: Path, kill_at: str | None = None, env: Mapping[str, str] | None = None
) -> Run:
    """Run ``fkjoin run spec_path``; with ``kill_at``, SIGKILL its process group on that phase line.
    ``env`` adds to :func:`subprocess_env` (its ``FKJOIN_SPARK_CONF`` is appended to the default one)."""
    stdout_path = workdir / f"stdout-{kill_at or 'full'}.txt"
    phases: list[str] = []
    tail: list[str] = []
    after_kill: list[str] = []
    killed_at = None
    with stdout_path.open("w") as stdout:
        proc = subprocess.Popen(
            fkjoin_command("run", str(spec_path)),
            stdout=stdout,
            stderr=subprocess.PIPE,
            env=with_env(env),
            cwd=str(workdir),
            start_new_session=True,
            text=True,
        )
        assert proc.stderr is not None
        try:
            for line in proc.stderr:
                tail = [*tail[-40:], line.rstrip("\n")]
                if not line.startswith("FKJOIN_PHASE "):
                    continue
                phase = line.split()[1]
                phases.append(phase)
                if phase == kill_at:
                    os.killpg(proc.pid, signal.SIGKILL)
                    killed_at = phase
                    break
            # EOF on stderr: every process of the group that held it (the JVM included) has exited
            rest = proc.stderr.read()
            tail = [*tail, *rest.splitlines()[-10:]]
            after_kill = [line.split()[1] for line in rest.splitlines() if line.startswith("FKJOIN_PHASE ")]
            returncode = proc.wait()
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            proc.stderr.close()
    return Run(returncode, phases, killed_at, stdout_path.read_text(), tail, after_kill)


# -- worlds prepared once, put back before each phase ------------------------------------------------------
def forget_cached_logs(spark: SparkSession) -> None:
    """Drop the session's cached Delta logs: a table put back at its path may be at an older version."""
    spark._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()  # type: ignore[union-attr]


class SavedFolder:
    """A folder of tables saved in named states, each put back byte for byte at the same path."""

    def __init__(self, spark: SparkSession, root: Path, store: Path) -> None:
        self.spark, self.root, self.store = spark, root, store

    def save(self, state: str) -> None:
        """Save the folder as it is now as ``state`` (file modification times kept)."""
        shutil.copytree(self.root, self.store / state)

    def restore(self, state: str) -> None:
        """Replace the folder with the saved ``state``, at the same path."""
        if self.root.exists():
            shutil.rmtree(self.root)
        shutil.copytree(self.store / state, self.root)
        forget_cached_logs(self.spark)


# -- the foreign-key crash world --------------------------------------------------------------------------
#: The saved states of :func:`fk_crash_world`: the inputs as first written (no output yet), and the inputs
#: changed on both sides after a first refresh.
FIRST_RUN, CHANGED = "first_run", "changed"


def oracle(spark: SparkSession, spec: dict[str, Any], left_version: int, right_version: int) -> list[Row]:
    """The foreign-key join recomputed in Python from the inputs at the given versions."""
    left, right = spec["left"]["path"], spec["right"]["path"]
    return expected_fk_join(
        read_rows(spark, left, left_version),
        read_rows(spark, right, right_version),
        spec["left"]["key"],
        spec["right"]["key"],
        spec["foreign_key"],
        spec["how"],
        left_columns=table_columns(spark, left, left_version),
        right_columns=table_columns(spark, right, right_version),
    )


def same(rows: list[Row], expected: list[Row]) -> bool:
    """Whether ``rows`` are ``expected`` by :data:`KEY` (as ``assert_same_rows`` compares them)."""
    try:
        assert_same_rows(rows, expected, KEY)
    except AssertionError:
        return False
    return True


def customer(cid: str, name: str, tier: str = "gold") -> Row:
    """A row of the customers (right) table."""
    return {"customer_id": cid, "name": name, "tier": tier}


@dataclass(frozen=True)
class FkCrashWorld:
    """Orders left-joined to customers, prepared once at fixed paths and saved in two states
    (:data:`FIRST_RUN`, :data:`CHANGED`), with what the :data:`CHANGED` state's checks need."""

    spec: dict[str, Any]
    spec_path: Path
    saved: SavedFolder
    #: The output's version after the first refresh (the changes leave the output alone).
    base_version: int
    #: The output after the first refresh: the old state.
    old_rows: list[Row]
    #: The inputs' (left, right) versions after the changes.
    versions: tuple[int, int]
    #: The join recomputed at ``versions``: the new state.
    new_rows: list[Row]

    def restore(self, state: str) -> None:
        """Put the world back as ``state``; for :data:`CHANGED`, check the tables' versions are as saved."""
        self.saved.restore(state)
        if state == CHANGED:
            found = (
                table_version(self.saved.spark, self.spec["output"]["path"]),
                table_version(self.saved.spark, self.spec["left"]["path"]),
                table_version(self.saved.spark, self.spec["right"]["path"]),
            )
            assert found == (self.base_version, *self.versions), found


def fk_crash_world(spark: SparkSession, base: Path) -> FkCrashWorld:
    """Write the inputs and a spec file under ``base`` (saved as :data:`FIRST_RUN`), refresh once in-process,
    then change both sides (saved as :data:`CHANGED`): FK moves (to an existing, a missing and a null key),
    deletes, right updates and a right delete."""
    root = base / "world"
    spec: dict[str, Any] = {
        "kind": "foreign_key_join",
        "left": {"path": str(root / "orders"), "key": KEY},
        "right": {"path": str(root / "customers"), "key": ["customer_id"]},
        "foreign_key": ["customer_id"],
        "how": "left",
        "output": {"path": str(root / "enriched")},
    }
    orders = [
        {"order_id": i, "customer_id": None if i % 7 == 0 else f"c{i % 5}", "amount": i * 10}
        for i in range(1, 31)
    ]
    create_table(spark, spec["left"]["path"], orders, LEFT)
    create_table(spark, spec["right"]["path"], [customer(f"c{i}", f"name{i}") for i in range(4)], RIGHT)
    spec_path = base / "spec.yaml"
    spec_path.write_text(json.dumps(spec, indent=2))  # JSON is YAML
    saved = SavedFolder(spark, root, base / "saved")
    saved.save(FIRST_RUN)

    first = run_spec(spec, spark=spark)
    assert first["mode"] == "full", first
    upsert(
        spark,
        spec["left"]["path"],
        [
            {"order_id": 1, "customer_id": "c2", "amount": 10},
            {"order_id": 2, "customer_id": "c9", "amount": 20},
            {"order_id": 3, "customer_id": None, "amount": 30},
            {"order_id": 7, "customer_id": "c1", "amount": 70},
            {"order_id": 31, "customer_id": "c4", "amount": 310},
        ],
        KEY,
    )
    delete_keys(spark, spec["left"]["path"], [5, 6], KEY)
    upsert(spark, spec["right"]["path"], [customer("c1", "renamed"), customer("c4", "new")], ["customer_id"])
    delete_keys(spark, spec["right"]["path"], ["c3"], ["customer_id"])

    out = spec["output"]["path"]
    versions = table_version(spark, spec["left"]["path"]), table_version(spark, spec["right"]["path"])
    world = FkCrashWorld(
        spec=spec,
        spec_path=spec_path,
        saved=saved,
        base_version=table_version(spark, out),
        old_rows=read_rows(spark, out),
        versions=versions,
        new_rows=oracle(spark, spec, *versions),
    )
    assert not same(world.old_rows, world.new_rows), (
        "the changes must change the output, or the test proves nothing"
    )
    saved.save(CHANGED)
    return world

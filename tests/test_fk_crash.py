"""Exactly once under crashes: ``fkjoin run`` is SIGKILLed at each traced phase of a refresh.

The data is prepared in-process (the ``spark`` fixture); the refresh runs as a subprocess (its own JVM) with
``FKJOIN_TRACE=1``. The test reads the subprocess's stderr line by line and kills its whole process group the
moment it sees ``FKJOIN_PHASE <phase>``: synchronisation is on those lines only, never on sleeps. Afterwards
the output must be exactly the old state or exactly the new one (never a mix), and a rerun must reach the new
state with one clean commit: nothing lost, nothing doubled.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from driver_jvm import driver_jvm_env
from helpers import (
    Row,
    assert_clean_changes,
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

REPO = Path(__file__).resolve().parents[1]
PHASE_ORDER = ["pinned", "changes_read", "merge_started", "committing", "committed"]
LEFT = "order_id INT, customer_id STRING, amount INT"
RIGHT = "customer_id STRING, name STRING, tier STRING"
KEY = ["order_id"]


def fkjoin_command(*args: str) -> list[str]:
    """The ``fkjoin`` console script of this interpreter's environment (or the module, if not installed)."""
    script = Path(sys.executable).with_name("fkjoin")
    if script.exists():
        return [str(script), *args]
    return [sys.executable, "-m", "airflow_provider_fkjoin.cli", *args]


def subprocess_env() -> dict[str, str]:
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


def run_fkjoin(spec_path: Path, workdir: Path, kill_at: str | None = None) -> Run:
    """Run ``fkjoin run spec_path``; with ``kill_at``, SIGKILL its process group on that phase line."""
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
            env=subprocess_env(),
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


def oracle(spark: SparkSession, spec: dict[str, Any], left_version: int, right_version: int) -> list[Row]:
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
    try:
        assert_same_rows(rows, expected, KEY)
    except AssertionError:
        return False
    return True


def customer(cid: str, name: str, tier: str = "gold") -> Row:
    return {"customer_id": cid, "name": name, "tier": tier}


def prepare(spark: SparkSession, root: Path, *, first_run: bool) -> tuple[dict[str, Any], Path]:
    """Inputs, a spec file, and (unless ``first_run``) a first refresh followed by changes on both sides."""
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
    spec_path = root / "spec.yaml"
    spec_path.write_text(json.dumps(spec, indent=2))  # JSON is YAML
    if not first_run:
        first = run_spec(spec, spark=spark)
        assert first["mode"] == "full", first
        # changes on both sides: FK moves (to an existing, a missing and a null key), deletes, right updates
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
        upsert(
            spark, spec["right"]["path"], [customer("c1", "renamed"), customer("c4", "new")], ["customer_id"]
        )
        delete_keys(spark, spec["right"]["path"], ["c3"], ["customer_id"])
    return spec, spec_path


@pytest.mark.parametrize("phase", PHASE_ORDER)
def test_kill_during_incremental_refresh(spark: SparkSession, tmp_path: Path, phase: str) -> None:
    spec, spec_path = prepare(spark, tmp_path, first_run=False)
    out = spec["output"]["path"]
    base_version = table_version(spark, out)
    old_rows = read_rows(spark, out)
    left_hw = table_version(spark, spec["left"]["path"])
    right_hw = table_version(spark, spec["right"]["path"])
    new_rows = oracle(spark, spec, left_hw, right_hw)
    assert not same(old_rows, new_rows), "the changes must change the output, or the test proves nothing"

    run = run_fkjoin(spec_path, tmp_path, kill_at=phase)
    assert run.killed_at == phase, f"phase {phase} never traced (saw {run.phases}); stderr:\n" + "\n".join(
        run.stderr_tail
    )
    assert run.phases == PHASE_ORDER[: PHASE_ORDER.index(phase) + 1], run.phases
    assert run.returncode == -signal.SIGKILL

    # old state or new state, never a mix
    version = table_version(spark, out)
    now = read_rows(spark, out)
    if phase in ("pinned", "changes_read") and not run.went_on_to_write():
        assert version == base_version, "nothing may be committed before merge_started"
        assert_same_rows(now, old_rows, KEY)
    elif phase == "committed":
        assert version == base_version + 1, "the refresh committed before tracing 'committed'"
        assert_same_rows(now, new_rows, KEY)
    else:
        assert version in (base_version, base_version + 1), (base_version, version)
        assert same(now, old_rows if version == base_version else new_rows), "output is a mix of old and new"

    # rerun to completion (in-process; the CLI's success path is exercised by the first-run test): the new
    # state, reached by exactly one clean commit over the old state
    result = run_spec(spec, spark=spark)
    assert result["mode"] == ("noop" if version == base_version + 1 else "incremental"), result
    assert result["output"]["version"] == base_version + 1 == table_version(spark, out), result
    assert (result["inputs"]["left"]["to_version"], result["inputs"]["right"]["to_version"]) == (
        left_hw,
        right_hw,
    )
    assert_same_rows(read_rows(spark, out), new_rows, KEY)
    assert_clean_changes(spark, out, KEY, base_version, base_version + 1, before_rows=old_rows)


def test_kill_during_first_run_then_rerun(spark: SparkSession, tmp_path: Path) -> None:
    """A first (full) run killed just before its commit leaves no output, or a complete one."""
    spec, spec_path = prepare(spark, tmp_path, first_run=True)
    out = Path(spec["output"]["path"])
    expected = oracle(spark, spec, 0, 0)
    run = run_fkjoin(spec_path, tmp_path, kill_at="merge_started")
    assert run.killed_at == "merge_started", f"saw {run.phases}; stderr:\n" + "\n".join(run.stderr_tail)
    committed = (out / "_delta_log").exists() and any((out / "_delta_log").glob("*.json"))
    if committed:
        assert_same_rows(read_rows(spark, str(out)), expected, KEY)

    rerun = run_fkjoin(spec_path, tmp_path)
    assert rerun.returncode == 0, "\n".join(rerun.stderr_tail)
    result = json.loads(rerun.stdout.strip().splitlines()[-1])
    assert result["mode"] == ("noop" if committed else "full"), result
    assert result["output"]["version"] == table_version(spark, str(out))
    assert_same_rows(read_rows(spark, str(out)), expected, KEY)
    assert_clean_changes(spark, str(out), KEY, None, result["output"]["version"])


def test_cli_reports_a_bad_spec_in_one_line(tmp_path: Path) -> None:
    spec_path = tmp_path / "bad.yaml"
    spec_path.write_text("kind: foreign_key_join\nleft: {path: /nowhere/l, key: [id]}\n")
    proc = subprocess.run(
        fkjoin_command("run", str(spec_path)),
        capture_output=True,
        text=True,
        env=subprocess_env(),
        cwd=str(tmp_path),
        timeout=300,
        check=False,
    )
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error")]
    assert len(errors) == 1, proc.stderr
    assert "right" in errors[0] and "output" in errors[0], errors[0]
    assert not proc.stdout.strip(), proc.stdout

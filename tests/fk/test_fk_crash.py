"""Exactly once under crashes: ``fkjoin run`` is SIGKILLed at each traced phase of a refresh.

The data is prepared in-process (the ``spark`` fixture) once per module and put back at the same paths
before each phase (``support.crash``); the refresh runs as a subprocess (its own JVM) with
``FKJOIN_TRACE=1``. The test reads the subprocess's stderr line by line and kills its whole process group the
moment it sees ``FKJOIN_PHASE <phase>``: synchronisation is on those lines only, never on sleeps. Afterwards
the output must be exactly the old state or exactly the new one (never a mix), and a rerun must reach the new
state with one clean commit: nothing lost, nothing doubled.
"""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest
from helpers import assert_clean_changes, assert_same_rows, read_rows, table_version
from pyspark.sql import SparkSession
from support.crash import (
    CHANGED,
    FIRST_RUN,
    KEY,
    PHASE_ORDER,
    FkCrashWorld,
    fk_crash_world,
    fkjoin_command,
    oracle,
    run_fkjoin,
    same,
    subprocess_env,
)

from airflow_provider_fkjoin.engine import run_spec


@pytest.fixture(scope="module")
def world(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> FkCrashWorld:
    """The foreign-key crash world, prepared once for the module; each test restores the state it needs."""
    return fk_crash_world(spark, tmp_path_factory.mktemp("fk_crash"))


@pytest.mark.parametrize("phase", PHASE_ORDER)
def test_kill_during_incremental_refresh(
    spark: SparkSession, world: FkCrashWorld, tmp_path: Path, phase: str
) -> None:
    world.restore(CHANGED)
    spec, spec_path = world.spec, world.spec_path
    out = spec["output"]["path"]
    base_version, old_rows, new_rows = world.base_version, world.old_rows, world.new_rows
    left_hw, right_hw = world.versions

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


def test_kill_during_first_run_then_rerun(spark: SparkSession, world: FkCrashWorld, tmp_path: Path) -> None:
    """A first (full) run killed just before its commit leaves no output, or a complete one."""
    world.restore(FIRST_RUN)
    spec, spec_path = world.spec, world.spec_path
    out = Path(spec["output"]["path"])
    assert not out.exists(), "the first-run state has no output yet"
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

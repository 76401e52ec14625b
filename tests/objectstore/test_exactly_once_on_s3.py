"""Exactly once on an object store: refreshes killed at each phase, a first create killed midway, and two
refreshes of one output racing from two processes, with every table in a bucket of the S3-protocol server.

A refresh runs as ``fkjoin run`` in a child process (its own JVM, S3A pointed at the server) and is
SIGKILLed, or stopped, the moment it traces a phase (``support.crash``: synchronisation on the child's
phase lines only). Afterwards the output is the old state or the new one, and the rerun reaches the new
state, equal to the FK join recomputed in Python (``helpers.oracle``), with one refresh commit.

The race: one refresh is stopped (SIGSTOP) as it starts writing, a second runs to its commit, then the
first goes on. The first must fail with the concurrent-refresh error, writing nothing, and its retry is a
noop. Two drivers committing at the same moment need Delta's DynamoDB log store: that race, looped, is in
``test_concurrent_writers_on_s3.py``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
from delta.tables import DeltaTable
from helpers import CUSTOMERS, ORDERS, delete_keys, oracle, output_state, table_version, upsert, write
from support.crash import PHASE_ORDER, fkjoin_command, run_fkjoin, with_env
from support.s3 import S3Server, Url, driver_env, orders_join
from support.tables import forget_cached_logs

from airflow_provider_fkjoin.engine import run_spec

ORDER_ROWS = [(1, 10, 1.0), (2, 20, 2.0), (3, None, 3.0), (4, 30, 4.0)]
CUSTOMER_ROWS = [(10, "ann"), (20, "bob")]


def make_world(spark, s3: S3Server, name: str, *, refreshed: bool = True) -> tuple[dict, int]:
    """Orders and customers under ``crash/<name>``, the left FK join refreshed once (unless not
    ``refreshed``), then a change on each side; returns the spec and the output's version."""
    root = s3.url(f"crash/{name}")
    write(spark, ORDER_ROWS, ORDERS, root / "orders")
    write(spark, CUSTOMER_ROWS, CUSTOMERS, root / "customers")
    spec = orders_join(root)
    version = run_spec(spec, spark=spark)["output"]["version"] if refreshed else -1
    orders_key, customers_key = ["order_id"], ["customer_id"]
    upsert(spark, root / "orders", [{"order_id": 2, "customer_id": 10, "amount": 2.5}], orders_key)
    upsert(spark, root / "orders", [{"order_id": 5, "customer_id": 20, "amount": 5.0}], orders_key)
    delete_keys(spark, root / "orders", [1], orders_key)
    upsert(spark, root / "customers", [{"customer_id": 30, "name": "cy"}], customers_key)
    return spec, version


def spec_file(spec: dict, folder: Path) -> Path:
    path = folder / "spec.json"
    path.write_text(json.dumps(spec))
    return path


def refresh_commits(spark, out: Url, after: int) -> int:
    """Commits of the output after version ``after`` (each refresh writes one)."""
    history = DeltaTable.forPath(spark, str(out)).history().where(f"version > {after}")
    return history.count()


def assert_exact(spark, spec: dict, result: dict, base_version: int) -> None:
    out = spec["output"]["path"]
    assert output_state(spark, out) == oracle(spark, result, "left")
    assert result["output"]["version"] == base_version + 1 == table_version(spark, out), result
    assert refresh_commits(spark, out, base_version) == 1


@pytest.mark.parametrize("phase", PHASE_ORDER)
def test_kill_at_each_phase_then_rerun(s3: S3Server, s3_spark, tmp_path: Path, phase: str) -> None:
    spark = s3_spark
    spec, base_version = make_world(spark, s3, f"kill-{phase}")
    out = spec["output"]["path"]
    old_state = output_state(spark, out)
    run = run_fkjoin(spec_file(spec, tmp_path), tmp_path, kill_at=phase, env=driver_env(s3))
    assert run.killed_at == phase, f"saw {run.phases}; stderr:\n" + "\n".join(run.stderr_tail)
    assert run.returncode == -signal.SIGKILL
    forget_cached_logs(spark)
    version = table_version(spark, out)
    if phase in ("pinned", "changes_read") and not run.went_on_to_write():
        assert version == base_version and output_state(spark, out) == old_state
    else:
        assert version in (base_version, base_version + 1), (base_version, version)
        if version == base_version:
            assert output_state(spark, out) == old_state, "killed before its commit, yet the output changed"
    result = run_spec(spec, spark=spark)
    assert result["mode"] == ("noop" if version == base_version + 1 else "incremental"), result
    assert_exact(spark, spec, result, base_version)


def test_a_killed_first_create_then_rerun(s3: S3Server, s3_spark, tmp_path: Path) -> None:
    """A first refresh killed as it starts writing leaves no output, or a complete one; the rerun
    builds it (or finds nothing to do)."""
    spark = s3_spark
    spec, _ = make_world(spark, s3, "killed-create", refreshed=False)
    out = spec["output"]["path"]
    run = run_fkjoin(spec_file(spec, tmp_path), tmp_path, kill_at="merge_started", env=driver_env(s3))
    assert run.killed_at == "merge_started", f"saw {run.phases}; stderr:\n" + "\n".join(run.stderr_tail)
    forget_cached_logs(spark)
    result = run_spec(spec, spark=spark)
    assert result["mode"] in ("full", "noop"), result
    assert output_state(spark, out) == oracle(spark, result, "left")
    assert refresh_commits(spark, out, -1) == 1


def _stray_part_file(spark, out: Url) -> None:
    frame = spark.createDataFrame([(7, 10, 1.0, "stray")], ORDERS + ", name string").coalesce(1)
    frame.write.mode("append").option("compression", "snappy").parquet(out)
    jvm = spark.sparkContext._jvm
    success = jvm.org.apache.hadoop.fs.Path(out + "/_SUCCESS")
    success.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()).delete(success, False)


def test_a_killed_creates_files_beside_an_empty_log_do_not_block_the_rerun(s3: S3Server, s3_spark) -> None:
    """What a create killed between writing its data files and its first commit leaves: ``part-*`` files
    and a ``_delta_log/`` with no commit (on an object store, a folder is an empty marker object)."""
    spark = s3_spark
    spec, _ = make_world(spark, s3, "leftovers-with-log", refreshed=False)
    out = spec["output"]["path"]
    _stray_part_file(spark, out)
    log = spark.sparkContext._jvm.org.apache.hadoop.fs.Path(out + "/_delta_log")
    log.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()).mkdirs(log)
    result = run_spec(spec, spark=spark)
    assert result["mode"] == "full" and result["output"]["version"] == 0, result
    assert output_state(spark, out) == oracle(spark, result, "left")
    assert run_spec(spec, spark=spark)["mode"] == "noop"


def test_data_files_without_a_log_are_someone_elses(s3: S3Server, s3_spark) -> None:
    """``part-*`` files and no ``_delta_log`` at all look like a Parquet dataset: refused, as on a local
    disk, and left as they are."""
    from airflow_provider_fkjoin.engine import SpecError

    spark = s3_spark
    spec, _ = make_world(spark, s3, "parquet-dataset", refreshed=False)
    out = spec["output"]["path"]
    _stray_part_file(spark, out)
    with pytest.raises(SpecError, match="holds files"):
        run_spec(spec, spark=spark)
    assert spark.read.parquet(out).count() == 1


def _start(spec_path: Path, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        fkjoin_command("run", str(spec_path)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,
        text=True,
    )


def _wait_for_phase(proc: subprocess.Popen, phase: str) -> list[str]:
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:
        seen.append(line.rstrip("\n"))
        if line.startswith(f"FKJOIN_PHASE {phase}"):
            return seen
    raise AssertionError(f"never traced {phase}:\n" + "\n".join(seen[-30:]))


def test_a_refresh_overtaken_by_another_fails_and_its_retry_is_a_noop(
    s3: S3Server, s3_spark, tmp_path: Path
) -> None:
    spark = s3_spark
    spec, base_version = make_world(spark, s3, "race-stopped")
    env = with_env(driver_env(s3))
    path = spec_file(spec, tmp_path)
    first = _start(path, env)
    try:
        _wait_for_phase(first, "merge_started")
        os.killpg(first.pid, signal.SIGSTOP)
        second = run_fkjoin(path, tmp_path, env=driver_env(s3))
        assert second.returncode == 0, "\n".join(second.stderr_tail)
        won = json.loads(second.stdout.strip().splitlines()[-1])
        assert won["mode"] == "incremental", won
        os.killpg(first.pid, signal.SIGCONT)
        out, err = first.communicate(timeout=600)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait()
    assert first.returncode != 0, f"the overtaken refresh reported success:\n{out}"
    assert "ConcurrentRefreshError" in err, err[-3000:]
    forget_cached_logs(spark)
    retry = run_spec(spec, spark=spark)
    assert retry["mode"] == "noop", retry
    assert_exact(spark, spec, won, base_version)

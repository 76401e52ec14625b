"""Quicker cold starts for the Spark driver JVMs that tests launch in subprocesses.

A crash test's ``fkjoin run``, a task of ``airflow dags test``, a task run by the Airflow servers: each starts
a fresh driver JVM for one small refresh. Most of such a process's time is class loading and JIT warm-up,
not the join: a refresh that takes about 6 s in the test session's warm JVM takes about 35 s cold. Two
standard HotSpot options cut a cold refresh by about a third here:

* a dynamic class-data-sharing archive (``-XX:SharedArchiveFile``) of the classes a refresh loads, built once
  per machine by a small full-then-incremental refresh run with ``-XX:ArchiveClassesAtExit``;
* the client compiler only (``-XX:TieredStopAtLevel=1``): a short process never recoups C2's compile time,
  and here C2's threads compete with the test workers for the 2 cores.

Both reach the driver through ``SPARK_SUBMIT_OPTS``, which ``spark-submit`` (and so pyspark) adds to the
driver's java command. JVM messages go to stderr (``-Xlog``), so the CLI's last stdout line is still its
result. If the archive cannot be built, the options are left out and the tests run as before, only slower.

The long-lived JVMs of a test run (each worker's session, the tests' Spark Connect server) keep the default
JIT: over a whole run C2 pays off. Measured: two workers each running ``tests/windowed/test_self_join.py``
(2 minutes) were faster with the client compiler only (151 s -> 125 s), but a full ``--all`` run with it
had done 15% of its tests after 55 minutes (a default-JIT run finishes in about 51).

>>> sorted(driver_jvm_env())  # doctest: +SKIP
['SPARK_SUBMIT_OPTS']
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ARCHIVES = REPO / ".jars" / "cds"
JVM_MESSAGES_TO_STDERR = "-Xlog:disable -Xlog:all=warning:stderr"
#: HotSpot's client compiler (C1) only: the JIT setting of the short-lived driver JVMs tests start.
CLIENT_COMPILER_ONLY = "-XX:TieredStopAtLevel=1"

#: One process: tiny inputs written without a JVM, a full refresh, a change on each side, an incremental
#: refresh. The classes these load are the ones every cold refresh needs first.
ARCHIVE_WORKLOAD = textwrap.dedent(
    """
    import sys
    import pyarrow as pa
    from deltalake import write_deltalake
    from airflow_provider_fkjoin.engine import get_spark, run_spec

    root = sys.argv[1]
    orders = lambda ids: pa.table({"order_id": ids, "customer_id": [f"c{i % 3}" for i in ids]})
    customers = lambda names: pa.table({"customer_id": ["c0", "c1", "c2"], "name": names})
    cdf = {"delta.enableChangeDataFeed": "true"}
    write_deltalake(f"{root}/orders", orders(list(range(10))), configuration=cdf)
    write_deltalake(f"{root}/customers", customers(["a", "b", "c"]), configuration=cdf)
    spec = {
        "kind": "foreign_key_join",
        "left": {"path": f"{root}/orders", "key": ["order_id"]},
        "right": {"path": f"{root}/customers", "key": ["customer_id"]},
        "foreign_key": ["customer_id"],
        "output": {"path": f"{root}/out"},
    }
    spark = get_spark("local[1]", conf={"spark.sql.shuffle.partitions": "1"})
    assert run_spec(spec, spark=spark)["mode"] == "full"
    write_deltalake(f"{root}/orders", orders([3, 11]), mode="overwrite", predicate="order_id IN (3, 11)")
    write_deltalake(f"{root}/customers", customers(["a", "B", "c"]), mode="overwrite")
    print(run_spec(spec, spark=spark)["mode"])
    spark.stop()
    """
)


def archive_key() -> str:
    """What the archive depends on: the JVM, and the driver's class path (Spark's jars)."""
    import pyspark

    java = subprocess.run(["java", "-version"], capture_output=True, text=True, check=True).stderr
    spark_jars = sorted(p.name for p in (Path(pyspark.__file__).parent / "jars").iterdir())
    return hashlib.sha256("\n".join([java, pyspark.__version__, *spark_jars]).encode()).hexdigest()[:16]


def build_archive(archive: Path, workdir: Path) -> None:
    """Run :data:`ARCHIVE_WORKLOAD` in a driver JVM that writes its loaded classes to ``archive`` on exit."""
    partial = archive.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    env = {
        **os.environ,
        "SPARK_SUBMIT_OPTS": f"-XX:ArchiveClassesAtExit={partial} {JVM_MESSAGES_TO_STDERR}",
        "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p),
    }
    env.pop("FKJOIN_SPARK_CONF", None)
    done = subprocess.run(
        [sys.executable, "-c", ARCHIVE_WORKLOAD, str(workdir)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if (
        done.returncode != 0
        or done.stdout.strip().splitlines()[-1:] != ["incremental"]
        or not partial.exists()
    ):
        raise RuntimeError(f"no class archive (exit {done.returncode}):\n{done.stderr[-3000:]}")
    partial.rename(archive)


@functools.cache
def driver_jvm_env() -> dict[str, str]:
    """``SPARK_SUBMIT_OPTS`` for a short-lived driver JVM; the archive is built on first use (one process
    builds it, others wait on a file lock)."""
    import tempfile

    ARCHIVES.mkdir(parents=True, exist_ok=True)
    archive = ARCHIVES / f"driver-{archive_key()}.jsa"
    with (ARCHIVES / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not archive.exists():
            try:
                with tempfile.TemporaryDirectory(prefix="fkjoin-cds-") as workdir:
                    build_archive(archive, Path(workdir))
            except (RuntimeError, subprocess.SubprocessError, OSError) as error:
                warnings.warn(f"driver JVMs start without a class archive: {error}", stacklevel=2)
                return {"SPARK_SUBMIT_OPTS": f"{CLIENT_COMPILER_ONLY} {JVM_MESSAGES_TO_STDERR}"}
    options = f"-XX:SharedArchiveFile={archive} {CLIENT_COMPILER_ONLY} {JVM_MESSAGES_TO_STDERR}"
    return {"SPARK_SUBMIT_OPTS": options}

"""Quicker cold starts for the Spark driver JVMs that tests launch in subprocesses.

A crash test's ``fkjoin run``, a task of ``airflow dags test``, a task run by the Airflow servers: each starts
a fresh driver JVM for one small refresh. Most of such a process's time is class loading and JIT warm-up,
not the join. The product's own quick start (:mod:`airflow_provider_fkjoin.jvm_start`: a class-data-sharing
archive of the classes a refresh loads, built once per machine by ``fkjoin jvm-archive``, and the client
compiler only) cuts a cold refresh by about a third; here it reaches every driver a test starts, whether
through the hook's spark-submit or pyspark's own launcher, by ``SPARK_SUBMIT_OPTS``, which ``spark-submit``
adds to the driver's java command. The archive is built on first use if ``scripts/setup.sh`` did not.

JVM messages go to stderr (``-Xlog``), so the CLI's last stdout line is still its result. If the archive
cannot be built, the tests run as before, only slower (with a warning).

The long-lived JVMs of a test run (each worker's session, the tests' Spark Connect server) keep the default
JIT: over a whole run C2 pays off. Measured: two workers each running ``tests/windowed/test_self_join.py``
(2 minutes) were faster with the client compiler only (151 s -> 125 s), but a full ``--all`` run with it
had done 15% of its tests after 55 minutes (a default-JIT run finishes in about 51).

>>> sorted(driver_jvm_env())  # doctest: +SKIP
['SPARK_SUBMIT_OPTS']
"""

from __future__ import annotations

import functools
import subprocess
import warnings

from airflow_provider_fkjoin.jvm_start import (
    SHORT_LIVED_FLAGS,
    ArchiveBuildError,
    build_archive,
    driver_java_options,
)

JVM_MESSAGES_TO_STDERR = "-Xlog:disable -Xlog:all=warning:stderr"


@functools.cache
def driver_jvm_env() -> dict[str, str]:
    """``SPARK_SUBMIT_OPTS`` for a short-lived driver JVM; the archive is built on first use (one process
    builds it, others wait on its lock file)."""
    try:
        build_archive()
    except (ArchiveBuildError, subprocess.SubprocessError, OSError) as error:
        warnings.warn(f"driver JVMs start without a class archive: {error}", stacklevel=2)
    options = driver_java_options() or list(SHORT_LIVED_FLAGS)
    return {"SPARK_SUBMIT_OPTS": " ".join([*options, JVM_MESSAGES_TO_STDERR])}

"""A quicker start for short-lived Spark driver JVMs: a class-data-sharing archive and start-up flags.

A task through spark-submit starts a new driver JVM for every refresh, and a small refresh spends most of
its time loading classes and warming up the JIT, not joining. HotSpot can map the classes such a driver
loads from an archive made once (class-data sharing, ``-XX:SharedArchiveFile``) instead of reading,
parsing and verifying them again, and a process this short never recoups the optimising compiler's work.
So, once per machine or image (about a minute)::

    fkjoin jvm-archive          # runs a tiny refresh in a driver that dumps its classes on exit

and the Airflow hook then starts each client-mode driver with::

    >>> driver_java_options({"FKJOIN_JVM_ARCHIVE_DIR": "/opt/fkjoin/cds"})  # doctest: +SKIP
    ['-XX:SharedArchiveFile=/opt/fkjoin/cds/driver-5f0c41a2b7e9d310.jsa', '-XX:TieredStopAtLevel=1',
     '-XX:+UseParallelGC']

The archive belongs to one JVM build and one Spark (its jars, their folder): its file name carries a key
of both (:func:`archive_key`), so after an upgrade no archive matches until it is built again, and the
driver starts as it would without one. It lives in ``FKJOIN_JVM_ARCHIVE_DIR``, else in the checkout's
``.jars/cds/`` beside Delta's jars (``scripts/setup.sh`` builds it there), else in
``$XDG_CACHE_HOME/fkjoin/cds`` (``~/.cache/fkjoin/cds``).

This module imports only the standard library (and, to build, runs the engine in a child process), so
the hook can ask for the options without importing pyspark.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

#: Where the archive goes and is looked for, when set (a folder).
ARCHIVE_DIR_ENV = "FKJOIN_JVM_ARCHIVE_DIR"
_PACKAGE_PARENT = Path(__file__).resolve().parents[1]
#: A checkout's folder of Delta's jars (``scripts/setup.sh``); the archive goes beside them when it exists.
_CHECKOUT_JARS = _PACKAGE_PARENT / ".jars"

#: HotSpot options for a short-lived driver besides the archive, chosen by timing a cold small refresh
#: through spark-submit with each candidate set (bench/README.md, "Airflow execution modes"): the client
#: compiler only (a process of seconds never recoups the optimising compiler's compile time: 4-5 s less;
#: the optimising compiler only was slower than no option at all) and the parallel collector (0.5-2.7 s
#: less than G1, the default on a machine of 2 cores or more, in each of four runs; less than the serial
#: collector too).
SHORT_LIVED_FLAGS: tuple[str, ...] = ("-XX:TieredStopAtLevel=1", "-XX:+UseParallelGC")

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
#: The building driver's JVM messages go to stderr: its stdout's last line is the workload's answer.
_JVM_MESSAGES_TO_STDERR = "-Xlog:disable -Xlog:all=warning:stderr"
#: Option families a user may already have set for the driver; ours is then left out (theirs stands, and
#: two garbage collectors would stop the JVM from starting).
_FAMILIES = {
    "archive": re.compile(r"^-XX:SharedArchiveFile=|^-Xshare:|^-XX:ArchiveClassesAtExit="),
    "compiler": re.compile(r"^-XX:TieredStopAtLevel=|^-XX:[+-]TieredCompilation$"),
    "gc": re.compile(r"^-XX:\+Use\w+GC$"),
    "stack": re.compile(r"^-Xss|^-XX:ThreadStackSize="),
}


class ArchiveBuildError(RuntimeError):
    """The archive could not be made (the tiny refresh failed, or the JVM wrote no archive)."""


def archive_dir(env: Mapping[str, str] | None = None) -> Path:
    """The folder the archive is built into and looked up in (see the module's docstring).

    >>> archive_dir({"FKJOIN_JVM_ARCHIVE_DIR": "/opt/fkjoin/cds"})
    PosixPath('/opt/fkjoin/cds')
    """
    env = os.environ if env is None else env
    if env.get(ARCHIVE_DIR_ENV):
        return Path(env[ARCHIVE_DIR_ENV])
    if _CHECKOUT_JARS.is_dir():
        return _CHECKOUT_JARS / "cds"
    cache = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".cache")
    return Path(cache) / "fkjoin" / "cds"


def java_command(env: Mapping[str, str] | None = None) -> str:
    """The ``java`` spark-submit starts the driver with: ``$JAVA_HOME/bin/java``, else the one on PATH
    (pyspark's ``spark-class`` chooses the same way)."""
    env = os.environ if env is None else env
    if env.get("JAVA_HOME"):
        return str(Path(env["JAVA_HOME"]) / "bin" / "java")
    return shutil.which("java", path=env.get("PATH")) or "java"


def spark_jars_dir(env: Mapping[str, str] | None = None) -> Path:
    """The folder of Spark's own jars, the driver's class path: ``$SPARK_HOME/jars``, else pyspark's
    (found without importing pyspark, which takes seconds)."""
    env = os.environ if env is None else env
    if env.get("SPARK_HOME"):
        return Path(env["SPARK_HOME"]) / "jars"
    found = importlib.util.find_spec("pyspark")
    if found is None or found.origin is None:
        raise ArchiveBuildError("pyspark is not installed: no Spark to start a driver with")
    return Path(found.origin).parent / "jars"


@functools.cache
def _key(java: str, jars_dir: Path) -> str:
    version = subprocess.run(
        [java, "-version"], capture_output=True, text=True, check=True, timeout=60
    ).stderr
    names = sorted(path.name for path in jars_dir.iterdir())
    spark = importlib.metadata.version("pyspark")
    return hashlib.sha256("\n".join([version, spark, str(jars_dir), *names]).encode()).hexdigest()[:16]


def archive_key(env: Mapping[str, str] | None = None) -> str:
    """What an archive is valid for, as 16 hex digits: the JVM's build (``java -version``), pyspark's
    version, and the folder and names of Spark's jars. A JVM maps an archive only on the JVM build and
    class path it was made with, so a new key means build again.

    >>> len(archive_key())  # doctest: +SKIP
    16
    """
    return _key(java_command(env), spark_jars_dir(env))


def archive_path(env: Mapping[str, str] | None = None) -> Path:
    """Where the archive for this JVM and Spark is (or would be): ``<archive_dir>/driver-<key>.jsa``."""
    return archive_dir(env) / f"driver-{archive_key(env)}.jsa"


def merge_java_options(user: str | None, ours: Sequence[str], taken: str = "") -> str:
    """The user's driver JVM options, then ours, leaving out each of ours whose kind (archive, compiler
    tier, garbage collector, stack size) the user's options or ``taken`` (``SPARK_SUBMIT_OPTS``, which
    the launcher puts before them) already set.

    >>> merge_java_options("-Dx=1 -XX:+UseG1GC", ["-XX:SharedArchiveFile=/a.jsa", "-XX:+UseSerialGC"])
    '-Dx=1 -XX:+UseG1GC -XX:SharedArchiveFile=/a.jsa'
    """
    present = f"{user or ''} {taken}".split()
    kept = [
        option
        for option in ours
        if not any(
            pattern.match(option) and any(pattern.match(word) for word in present)
            for pattern in _FAMILIES.values()
        )
    ]
    return " ".join(part for part in [(user or "").strip(), *kept] if part)


def driver_java_options(env: Mapping[str, str] | None = None) -> list[str] | None:
    """The options that start a driver with this JVM and Spark's archive: ``-XX:SharedArchiveFile=...``
    and :data:`SHORT_LIVED_FLAGS`; None when no archive was built for them (or Java is missing)."""
    try:
        archive = archive_path(env)
    except (OSError, subprocess.SubprocessError, ArchiveBuildError):
        return None
    if not archive.is_file():
        return None
    return [f"-XX:SharedArchiveFile={archive}", *SHORT_LIVED_FLAGS]


def build_archive(
    env: Mapping[str, str] | None = None,
    *,
    force: bool = False,
    timeout: float = 900,
    on_build: Callable[[Path], None] | None = None,
) -> tuple[Path, bool]:
    """Build this JVM and Spark's archive unless it exists (or ``force``); returns its path and whether
    it was built now (``on_build`` is called with the path first). One process builds, others wait on a
    lock file in the folder.

    It runs :data:`ARCHIVE_WORKLOAD` (local Spark, tables in a temporary folder) in a child Python whose
    driver JVM writes the classes it loaded to the archive as it exits (``-XX:ArchiveClassesAtExit``),
    then renames it into place, so a reader never sees half an archive.

    :raises ArchiveBuildError: the workload failed or no archive was written (its stderr's tail is in the
        message).
    """
    env = dict(os.environ if env is None else env)
    archive = archive_path(env)
    archive.parent.mkdir(parents=True, exist_ok=True)
    with (archive.parent / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if archive.is_file() and not force:
            return archive, False
        if on_build is not None:
            on_build(archive)
        partial = archive.with_suffix(".partial")
        partial.unlink(missing_ok=True)
        child_env = {
            **env,
            "SPARK_SUBMIT_OPTS": f"-XX:ArchiveClassesAtExit={partial} {_JVM_MESSAGES_TO_STDERR}",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(_PACKAGE_PARENT), env.get("PYTHONPATH")])),
        }
        child_env.pop("FKJOIN_SPARK_CONF", None)  # the tiny refresh on the engine's own settings
        with tempfile.TemporaryDirectory(prefix="fkjoin-cds-") as workdir:
            done = subprocess.run(
                [sys.executable, "-c", ARCHIVE_WORKLOAD, workdir],
                env=child_env,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        answer = done.stdout.strip().splitlines()[-1:]
        if done.returncode != 0 or answer != ["incremental"] or not partial.is_file():
            partial.unlink(missing_ok=True)
            raise ArchiveBuildError(f"no class archive (exit {done.returncode}):\n{done.stderr[-3000:]}")
        partial.replace(archive)
    return archive, True


def build_report(
    env: Mapping[str, str] | None = None,
    *,
    force: bool = False,
    on_build: Callable[[Path], None] | None = None,
) -> dict[str, object]:
    """What ``fkjoin jvm-archive`` prints: the archive, whether it was built now, how long that took, its
    size, and the options the hook gives a driver with it.

    >>> build_report()  # doctest: +SKIP
    {'archive': '/work/.jars/cds/driver-5f0c41a2b7e9d310.jsa', 'built': True, 'seconds': 58.2, ...}
    """
    started = time.monotonic()
    archive, built = build_archive(env, force=force, on_build=on_build)
    return {
        "archive": str(archive),
        "built": built,
        "seconds": round(time.monotonic() - started, 1),
        "megabytes": round(archive.stat().st_size / 1e6, 1),
        "driver_java_options": " ".join(driver_java_options(env) or []),
    }

"""What every benchmark shares: its flags, the Spark session, timing, the engine's phase markers, Spark's
SQL executions, and the JSON report.

    parser = argparse.ArgumentParser(description=...)
    args = parse_with_common(parser, "windowed")     # --repeat, --workdir, --master, --json-out
    spark = bench_spark(args)                         # local[2], 8 shuffle partitions, empty args.workdir
    write_report(report, args.json_out)               # printed, and saved under bench/results/

Nothing here imports pyspark or the engine at import time, so ``python -m bench.<name> --help`` answers
without starting a JVM.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import shutil
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

BENCH_DIR = Path(__file__).resolve().parent
#: Generated tables, per-run copies, Spark scratch space (gitignored).
DATA_DIR = BENCH_DIR / "data"
#: The JSON reports behind the figures in bench/README.md.
RESULTS_DIR = BENCH_DIR / "results"
#: Every benchmark's Spark settings unless it adds its own: sized for the 2-core, 24 GiB machine.
SPARK_CONF = {"spark.sql.shuffle.partitions": "8", "spark.driver.memory": "8g"}

T = TypeVar("T")


# --------------------------------------------------------------------------------------------------------
# flags


def add_common(
    parser: argparse.ArgumentParser,
    workdir: Path,
    repeat: int | None = 3,
    repeat_help: str | None = None,
) -> None:
    """Add ``--repeat``, ``--workdir``, ``--master`` and ``--json-out`` (resolved by :func:`json_out`)."""
    parser.add_argument("--repeat", type=int, default=repeat, help=repeat_help)
    shown = workdir.relative_to(BENCH_DIR.parent) if workdir.is_relative_to(BENCH_DIR.parent) else workdir
    parser.add_argument("--workdir", type=Path, default=workdir, help=f"data folder (default {shown})")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument(
        "--json-out",
        type=Path,
        default=None,
        help="write the report here as JSON (default bench/results/<benchmark>.json; '-' prints it only)",
    )


def parse_with_common(
    parser: argparse.ArgumentParser, workdir: str, argv: list[str] | None = None, repeat: int = 3
) -> argparse.Namespace:
    """Add the common flags (``--workdir`` defaults to ``bench/data/<workdir>``) and parse; ``--json-out``
    defaults to ``bench/results/<workdir>.json``."""
    add_common(parser, DATA_DIR / workdir, repeat)
    args = parser.parse_args(argv)
    args.json_out = json_out(args.json_out, workdir)
    return args


def json_out(given: Path | None, name: str) -> Path | None:
    """Where a report goes: ``given``; ``bench/results/<name>.json`` when not given; nowhere for ``-``."""
    if given is None:
        return RESULTS_DIR / f"{name}.json"
    return None if str(given) == "-" else given


def conf_pairs(items: Iterable[str]) -> dict[str, str]:
    """``--conf KEY=VALUE`` flags as a dict."""
    conf = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--conf {item!r}: expected KEY=VALUE")
        conf[key.strip()] = value.strip()
    return conf


def command_line(module: str) -> str:
    """The command that ran this benchmark, for its report."""
    return " ".join(["python", "-m", module, *sys.argv[1:]])


# --------------------------------------------------------------------------------------------------------
# Spark


def spark_session(master: str, conf: dict[str, str] | None = None):
    """The engine's SparkSession for a benchmark: :data:`SPARK_CONF` plus ``conf``, Spark's log at ERROR.
    ``spark.driver.memory`` applies only to a new JVM: run each benchmark in a fresh process. A ``sc://``
    master is a Spark Connect client session (the server's driver memory is set where it starts)."""
    from airflow_provider_fkjoin.engine import get_spark

    settings = {**SPARK_CONF, **(conf or {})}
    if master.startswith("sc://"):  # a Spark Connect server: its memory and log level are its own
        settings.pop("spark.driver.memory", None)
        return get_spark(master, settings)
    spark = get_spark(master, settings)
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def bench_spark(args: argparse.Namespace, conf: dict[str, str] | None = None):
    """:func:`spark_session` for ``args.master``, and an empty ``args.workdir``."""
    spark = spark_session(args.master, conf)
    shutil.rmtree(args.workdir, ignore_errors=True)
    args.workdir.mkdir(parents=True)
    return spark


# --------------------------------------------------------------------------------------------------------
# Delta through SQL (the same in a classic and a Spark Connect session: no delta-spark Python API, which
# over Connect needs Delta's own Connect plugin on the server)


def delta_path_sql(path: str | Path) -> str:
    """``delta.`<path>``` for a Delta table at ``path`` in SQL, its backticks doubled."""
    return "delta.`" + str(path).replace("`", "``") + "`"


@contextmanager
def temp_view(frame: Any, prefix: str = "bench_source") -> Iterator[str]:
    """``frame`` as a temporary view under a fresh name while the block runs; dropped after it."""
    import uuid

    name = f"{prefix}_{uuid.uuid4().hex}"
    frame.createOrReplaceTempView(name)
    try:
        yield name
    finally:
        frame.sparkSession.catalog.dropTempView(name)


def delta_history(spark, path: str | Path, limit: int | None = None):
    """``DESCRIBE HISTORY`` of the Delta table at ``path`` (newest first; the last ``limit`` commits)."""
    return spark.sql(
        f"DESCRIBE HISTORY {delta_path_sql(path)}" + ("" if limit is None else f" LIMIT {int(limit)}")
    )


# --------------------------------------------------------------------------------------------------------
# timing


def timed(fn: Callable[[], T]) -> tuple[float, T]:
    """``(seconds, fn())``."""
    started = time.perf_counter()
    value = fn()
    return time.perf_counter() - started, value


def timings(fn: Callable[[], Any], repeat: int) -> list[float]:
    """Seconds of ``repeat`` calls of ``fn``, rounded to milliseconds."""
    return [round(timed(fn)[0], 3) for _ in range(repeat)]


def median(values: Iterable[float]) -> float | None:
    """The median, or None for no values."""
    values = list(values)
    return statistics.median(values) if values else None


# --------------------------------------------------------------------------------------------------------
# the engine's phase markers


class PhaseTee(io.TextIOBase):
    """Wraps ``sys.stderr``: forwards everything, and timestamps (``time.perf_counter``) each line the
    engine writes when it reaches a phase (``FKJOIN_TRACE=1``: ``FKJOIN_PHASE <name> ...``)."""

    def __init__(self, inner: Any, marker: str) -> None:
        self.inner = inner
        self.pattern = re.compile(re.escape(marker.strip()) + r"\s+(\S+)(.*)")
        self.lock = threading.Lock()
        self.events: list[tuple[float, str, str]] = []
        self._partial = ""

    def write(self, s: str) -> int:
        now = time.perf_counter()
        with self.lock:
            self._partial += s
            while "\n" in self._partial:
                line, self._partial = self._partial.split("\n", 1)
                found = self.pattern.search(line)
                if found:
                    self.events.append((now, found.group(1), found.group(2).strip()))
        return self.inner.write(s)

    def flush(self) -> None:
        self.inner.flush()

    def fileno(self) -> int:
        return self.inner.fileno()

    def isatty(self) -> bool:
        return False

    def take(self) -> list[tuple[float, str, str]]:
        """The ``(time, phase, rest of the line)`` seen since the last call."""
        with self.lock:
            events, self.events = self.events, []
        return events


def trace_phases() -> PhaseTee:
    """Turn the engine's phase markers on (``FKJOIN_TRACE=1``) and catch them on ``sys.stderr``."""
    from airflow_provider_fkjoin.engine import PHASE_MARKER

    os.environ["FKJOIN_TRACE"] = "1"
    if not isinstance(sys.stderr, PhaseTee):
        sys.stderr = PhaseTee(sys.stderr, PHASE_MARKER)
    return sys.stderr


@contextmanager
def phases_seen(tee: PhaseTee) -> Iterator[list[tuple[str, float]]]:
    """The ``(phase, time)`` the engine reaches while the block runs, in order."""
    tee.take()
    seen: list[tuple[str, float]] = []
    try:
        yield seen
    finally:
        seen.extend((name, at) for at, name, _ in tee.take())


# --------------------------------------------------------------------------------------------------------
# Spark's SQL executions (the status store behind the UI's SQL tab)


def same_table(spark, output: str, recompute: str) -> bool:
    """Whether the engine's ``output`` holds the rows of the ``recompute`` table (in the recompute's columns):
    the row count and an order-free sum of every row's hash, one scan of each. Untimed; printed loudly
    when they differ, so a benchmark that measured a wrong refresh says so in its report."""
    frames = [spark.read.format("delta").load(path) for path in (output, recompute)]
    missing = [name for name in frames[1].columns if name not in frames[0].columns]
    if missing or not frames[1].columns:
        print(f"!!! {output} lacks the recompute's columns {missing}", flush=True)
        return False
    # each value with its null flag: xxhash64 skips nulls, so (NULL, 'x') and ('x', NULL) would agree
    hashed = ", ".join(f"`{name}`, isnull(`{name}`)" for name in frames[1].columns)
    digests = [
        tuple(frame.selectExpr("count(*)", f"sum(CAST(xxhash64({hashed}) AS DECIMAL(38, 0)))").first())
        for frame in frames
    ]
    if digests[0] != digests[1]:
        print(f"!!! {output} differs from the recompute {recompute}: {digests}", flush=True)
    return digests[0] == digests[1]


def settled_executions(spark) -> tuple[int, list]:
    """Jobs submitted so far and the SQL executions recorded, once the listener bus has caught up (the
    status store is filled in the background)."""
    context = spark.sparkContext._jsc.sc()
    context.listenerBus().waitUntilEmpty()
    listed = spark._jsparkSession.sharedState().statusStore().executionsList()
    return int(context.dagScheduler().nextJobId()), [listed.apply(i) for i in range(listed.size())]


def duration_ms(execution) -> int:
    done = execution.completionTime()
    return int(done.get().getTime()) - int(execution.submissionTime()) if done.isDefined() else 0


def is_top_level(execution) -> bool:
    return int(execution.rootExecutionId()) == int(execution.executionId())


def describe_execution(execution, started_ms: float) -> str:
    """``+offset ms, duration ms, description (jobs)``; nested executions are indented."""
    offset = int(execution.submissionTime() - started_ms)
    nested = "" if is_top_level(execution) else "  "
    return (
        f"{nested}+{offset}ms {duration_ms(execution)}ms {execution.description()[:80]} "
        f"({execution.jobs().size()} jobs)"
    )


# --------------------------------------------------------------------------------------------------------
# the JVM's own cost: CPU by thread group, code generation


#: Thread groups of a local-mode driver JVM, by the start of the thread's name as ``/proc`` shows it (15
#: characters); any other thread is the driver's own work (planning, Delta's log, py4j, the scheduler).
JVM_THREAD_GROUPS = {
    "jit": ("C1 CompilerThre", "C2 CompilerThre"),
    "gc": ("GC Thread", "G1 ", "VM Thread", "VM Periodic"),
    "tasks": ("Executor task",),
}


def jvm_pid(spark) -> int | None:
    """The driver JVM's process id (a classic session; None over Spark Connect)."""
    jvm = getattr(spark, "_jvm", None)
    return int(jvm.java.lang.ProcessHandle.current().pid()) if jvm is not None else None


def jvm_cpu_s(pid: int | None) -> dict[str, float]:
    """CPU seconds each thread group of JVM ``pid`` has used so far (threads that ended are not counted:
    take differences over a short span). From ``/proc/<pid>/task/*/stat``: user + system time."""
    if pid is None:
        return {}
    tick = os.sysconf("SC_CLK_TCK")
    used = dict.fromkeys(("driver", *JVM_THREAD_GROUPS), 0.0)
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        seconds = (int(fields[11]) + int(fields[12])) / tick
        group = next((g for g, starts in JVM_THREAD_GROUPS.items() if name.startswith(starts)), "driver")
        used[group] += seconds
    return used


def codegen_compiles(spark) -> int | None:
    """How many classes Spark's code generation has compiled in this JVM so far (its own metric)."""
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:
        return None
    return int(jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME().getCount())


def cost_between(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Per-group CPU seconds between two :func:`jvm_cpu_s` readings."""
    return {group: round(after[group] - before.get(group, 0.0), 3) for group in after}


# --------------------------------------------------------------------------------------------------------
# the report


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` to ``path`` as JSON, replacing it in one step."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str) + "\n")
    tmp.replace(path)


def write_report(report: dict[str, Any], json_out: Path | None) -> None:
    """Print the report as JSON, and write it to ``json_out`` when given."""
    print(json.dumps(report, indent=1, default=str))
    if json_out:
        write_json(json_out, report)
        print(f"[bench] report written to {json_out}", flush=True)

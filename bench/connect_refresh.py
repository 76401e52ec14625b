"""Benchmark: a small foreign-key refresh over a warm Spark Connect server, and the server's memory.

The ``fixed_cost`` workload (1,000 orders x 100 customers, one order and one customer updated per
refresh, 11 output rows change) run as a Spark Connect client of ``fkjoin connect-server``: each refresh
with the engine's net-change commit (its stored procedure in the server's JVM), then the same refreshes
of a second output written with Delta's MERGE (``write_path="merge"``), as a server without the engine's
jar would. Then ``--memory-refreshes`` more refreshes. The server JVM's memory is read after its first
refresh, after the timed ones (warm), after ``--memory-points`` of the memory refreshes and after the last:
its heap in use after full GCs (``jcmd GC.run`` until it stops falling, ``GC.heap_info``), its resident
memory, the entries of Spark's status store (jobs, stages, tasks, SQL executions, Connect statements), the
class loaders alive, and the classes that grew most (``jcmd GC.class_histogram``).

Each refresh's server jobs are counted through the server's UI (its REST API), so by default the server
runs with its UI on. ``--no-ui`` starts it with ``spark.ui.enabled=false``: no UI in the server's memory,
and no job counts (``jobs`` and ``state_jobs`` are null in the report, ``server_ui`` is false). Spark's
status store, which the UI reads, is kept with the UI off too, up to its retention limits (1,000 jobs,
stages and SQL executions by default); ``--status-store-limit N`` lowers those limits to N, so a memory
run can tell the store's growth from the engine's.

    python -m bench.connect_refresh --repeat 5 --memory-refreshes 100 \\
        --json-out bench/results/connect_refresh.json
    python -m bench.connect_refresh --repeat 1 --warmup 1 --memory-refreshes 100 --no-ui \\
        --json-out bench/results/connect_memory.json

``--session-per-refresh`` measures instead what a task through the hook pays: the same net-change
refreshes once in one session, then each in a Spark Connect session of its own (a new session id, released
after the refresh, as ``hooks/connect.py`` runs a task), with the code-generation compiles of the server's
JVM per refresh (Spark's ``CodeGenerator.compilationTime`` histogram, from the metrics servlet of the
server's UI). ``--share-compiled-code`` starts the server so that its sessions share compiled code
(``fkjoin connect-server --share-compiled-code``); ``--server-conf KEY=VALUE`` adds a server setting:

    python -m bench.connect_refresh --session-per-refresh --repeat 3 --warmup 1 \\
        --json-out bench/results/connect_sessions.json
    python -m bench.connect_refresh --session-per-refresh --repeat 3 --warmup 1 --share-compiled-code \\
        --json-out bench/results/connect_sessions_shared.json
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from bench.airflow_modes import start_connect_server
from bench.common import (
    DATA_DIR,
    add_common,
    command_line,
    delta_path_sql,
    json_out,
    median,
    timed,
    write_report,
)

PORT = 15097
UI_PORT = 15098
#: Spark's status store's entries, by the class of the objects that hold them (counted in a heap histogram).
STATUS_STORE_CLASSES = {
    "jobs": "org.apache.spark.status.JobDataWrapper",
    "stages": "org.apache.spark.status.StageDataWrapper",
    "tasks": "org.apache.spark.status.TaskDataWrapper",
    "sql_executions": "org.apache.spark.sql.execution.ui.SQLExecutionUIData",
    "connect_statements": "org.apache.spark.sql.connect.ui.ExecutionInfo",
}
#: The retention limits ``--status-store-limit`` sets (the tasks limit is per stage).
STATUS_STORE_LIMITS = (
    "spark.ui.retainedJobs",
    "spark.ui.retainedStages",
    "spark.ui.retainedTasks",
    "spark.sql.ui.retainedExecutions",
    "spark.sql.connect.ui.retainedStatements",
    "spark.sql.connect.ui.retainedSessions",
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.connect_refresh", description=__doc__.split("\n\n")[0])
    add_common(p, DATA_DIR / "connect_refresh", repeat=5)
    p.add_argument("--warmup", type=int, default=3, help="untimed refreshes of each write path first")
    p.add_argument("--memory-refreshes", type=int, default=100, help="refreshes after the timed ones")
    p.add_argument(
        "--memory-points",
        type=lambda text: [int(n) for n in text.split(",") if n],
        default=[10, 30, 60],
        metavar="N,N",
        help="also read the server's memory after these many of the memory refreshes (default 10,30,60)",
    )
    p.add_argument(
        "--no-ui",
        action="store_true",
        help="run the server with spark.ui.enabled=false (for the memory run): its jobs are then not "
        "counted (null in the report)",
    )
    p.add_argument(
        "--status-store-limit",
        type=int,
        default=None,
        metavar="N",
        help="keep at most N jobs, stages, tasks per stage, SQL executions and Connect sessions and "
        "statements in the server's status store (default: Spark's own limits, e.g. 1,000 jobs)",
    )
    p.add_argument(
        "--session-per-refresh",
        action="store_true",
        help="time the net-change refreshes in one session, then each in a new session of its own, with "
        "the server's code-generation compiles per refresh (instead of the write paths and the memory run)",
    )
    p.add_argument(
        "--server-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="start the server with this setting too (repeatable), e.g. to compare a setting's effect",
    )
    p.add_argument(
        "--share-compiled-code",
        action="store_true",
        help="start the server with fkjoin connect-server --share-compiled-code",
    )
    args = p.parse_args(argv)
    if args.session_per_refresh and args.no_ui:
        p.error("--session-per-refresh reads the compiles from the server's UI: drop --no-ui")
    if any("=" not in text for text in args.server_conf):
        p.error("--server-conf takes KEY=VALUE")
    if args.status_store_limit is not None and args.status_store_limit < 1:
        p.error("--status-store-limit must be >= 1")
    args.json_out = json_out(args.json_out, "connect_refresh")
    return args


def server_jvm(group: int) -> int:
    """The process id of the Connect server's JVM: the ``java`` process in the server's process group."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)
            command, (_state, _parent, process_group) = fields[0].split("(", 1)[1], fields[1].split()[:3]
        except (OSError, IndexError, ValueError):
            continue
        if command == "java" and int(process_group) == group:
            return int(stat.parent.name)
    raise SystemExit(f"no Spark Connect server JVM in process group {group}")


def server_jobs(tag: str) -> list[dict[str, Any]]:
    """The server's Spark jobs of the operations the client ran under ``tag`` (its UI's REST API), once
    the UI's list has caught up: read until two reads agree and none of them is still running."""
    base = f"http://127.0.0.1:{UI_PORT}/api/v1/applications"

    def read() -> list[dict[str, Any]]:
        with urllib.request.urlopen(base, timeout=30) as answer:
            app = json.load(answer)[0]["id"]
        with urllib.request.urlopen(f"{base}/{app}/jobs", timeout=30) as answer:
            jobs = json.load(answer)
        return [job for job in jobs if any(t.endswith(f"_Tag_{tag}") for t in job.get("jobTags", []))]

    previous = read()
    while True:
        time.sleep(0.2)
        current = read()
        settled = all(job["status"] != "RUNNING" for job in current)
        if settled and [j["jobId"] for j in current] == [j["jobId"] for j in previous]:
            return current
        previous = current


def server_compiles() -> int:
    """How many classes the server JVM's code generation has compiled so far: the count of Spark's
    ``CodeGenerator.compilationTime`` histogram (one entry per compile; a cache hit adds none), read from
    the metrics servlet of the server's UI."""
    with urllib.request.urlopen(f"http://127.0.0.1:{UI_PORT}/metrics/json/", timeout=30) as answer:
        histograms = json.load(answer)["histograms"]
    counts = [h["count"] for name, h in histograms.items() if name.endswith(".CodeGenerator.compilationTime")]
    if not counts:
        raise SystemExit("the server's metrics have no CodeGenerator.compilationTime histogram")
    return int(sum(counts))


def job_counts(jobs: list[dict[str, Any]]) -> dict[str, int]:
    """How many jobs, and how many rebuilt a Delta table's state (Delta's "Compute snapshot" jobs)."""
    state = [job for job in jobs if "snapshot" in f"{job.get('name')} {job.get('description')}".lower()]
    return {"jobs": len(jobs), "state_jobs": len(state)}


def class_histogram(pid: int) -> dict[str, tuple[int, int]]:
    """The server JVM's live objects by class: ``{class: (instances, bytes)}`` (``jcmd GC.class_histogram``,
    which runs a full GC first)."""
    histogram = subprocess.run(
        ["jcmd", str(pid), "GC.class_histogram"], capture_output=True, text=True, check=True
    ).stdout
    classes = {}
    for line in histogram.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[0].endswith(":"):
            classes[fields[3]] = (int(fields[1]), int(fields[2]))
    return classes


def heap_used_mb(pid: int) -> float:
    """The heap in use after full GCs, once it stops falling: a full GC only finds a finished refresh's
    broadcast blocks and cached state unreachable; Spark's context cleaner frees them on its own thread
    after it, so one GC and a reading right after it count them still."""
    used = float("inf")
    for _ in range(6):
        subprocess.run(["jcmd", str(pid), "GC.run"], capture_output=True, check=True)
        time.sleep(1)  # the context cleaner's turn; a benchmark's reading, not a test's synchronisation
        info = subprocess.run(
            ["jcmd", str(pid), "GC.heap_info"], capture_output=True, text=True, check=True
        ).stdout
        found = re.search(r"total \d+K, used (\d+)K", info)
        if found is None:
            return -1.0
        now = int(found.group(1)) / 1024
        if now > used * 0.99:
            return round(min(now, used), 1)
        used = now
    return round(used, 1)


def memory(pid: int) -> dict[str, Any]:
    """The JVM's heap in use after full GCs and its resident set, in MB, the status store's entries, the
    class loaders alive, and the histogram itself (kept out of the report; see :func:`top_growth`)."""
    heap = heap_used_mb(pid)
    classes = class_histogram(pid)
    status = Path(f"/proc/{pid}/status").read_text()
    rss = re.search(r"VmRSS:\s+(\d+) kB", status)
    return {
        "heap_used_mb": heap,
        "rss_mb": round(int(rss.group(1)) / 1024, 1) if rss else -1.0,
        "status_store": {name: classes.get(cls, (0, 0))[0] for name, cls in STATUS_STORE_CLASSES.items()},
        "class_loaders": sum(n for name, (n, _) in classes.items() if name.endswith("ClassLoader")),
        "histogram": classes,
    }


def top_growth(first: dict[str, Any], last: dict[str, Any], top: int = 12) -> list[dict[str, Any]]:
    """The classes whose live bytes grew most between two readings."""
    before, after = first["histogram"], last["histogram"]
    grown = sorted(
        ((after.get(c, (0, 0))[1] - before.get(c, (0, 0))[1], c) for c in set(before) | set(after)),
        reverse=True,
    )
    return [
        {
            "class": name,
            "grew_mb": round(delta / 2**20, 2),
            "instances": [before.get(name, (0, 0))[0], after.get(name, (0, 0))[0]],
        }
        for delta, name in grown[:top]
    ]


def verify(spark: Any, orders: str, customers: str, output: str) -> bool:
    """The output equals the join recomputed from the inputs' current versions (both set differences
    empty); raises otherwise."""
    recompute = (
        f"SELECT o.order_id, o.customer_id, o.amount, c.name FROM {delta_path_sql(orders)} o "
        f"LEFT JOIN {delta_path_sql(customers)} c ON o.customer_id = c.customer_id"
    )
    current = f"SELECT order_id, customer_id, amount, name FROM {delta_path_sql(output)}"
    for left, right in ((recompute, current), (current, recompute)):
        extra = spark.sql(f"SELECT count(*) AS n FROM ({left} EXCEPT ALL {right})").first()["n"]
        if extra:
            raise SystemExit(f"{output} differs from the recomputed join ({extra} rows)")
    return True


def new_session() -> Any:
    """A Spark Connect session of its own on the server, as a task through the hook opens: a new session
    id, the engine's session settings (what ``fkjoin run`` does with the hook's ``SPARK_REMOTE``)."""
    from pyspark.sql.connect.session import SparkSession

    from airflow_provider_fkjoin.engine.runtime.session import CONNECT_SESSION_CONF
    from airflow_provider_fkjoin.hooks.connect import with_session_id

    session = SparkSession.builder.remote(
        with_session_id(f"sc://127.0.0.1:{PORT}", str(uuid.uuid4()))
    ).create()
    for key, value in CONNECT_SESSION_CONF.items():
        session.conf.set(key, value)
    return session


def session_runs(
    args: argparse.Namespace, spark: Any, the_spec: dict[str, Any], change: Any
) -> dict[str, Any]:
    """The net-change refreshes of ``the_spec`` in ``spark`` (one session), then each in a new session
    released after it: per refresh the wall time and the server's code-generation compiles."""
    from airflow_provider_fkjoin.engine import run_spec

    report: dict[str, Any] = {}
    for mode in ("one_session", "new_session"):
        runs = []
        for index in range(args.warmup + args.repeat):
            change()
            session = new_session() if mode == "new_session" else spark
            before = server_compiles()
            wall, result = timed(lambda s=session: run_spec(the_spec, spark=s))
            compiles = server_compiles() - before
            if session is not spark:
                session.stop()  # releases it on the server, as the CLI does when a task's refresh ends
            assert (result["mode"], result["write_path"]) == ("incremental", "net_changes"), result
            print(f"[connect_refresh] {mode} #{index + 1}: {wall:.2f}s, {compiles} compiles", flush=True)
            if index >= args.warmup:
                runs.append({"wall_s": round(wall, 3), "compiles": compiles, "rows": result["rows"]})
        report[mode] = {
            "runs": runs,
            "median_s": median([r["wall_s"] for r in runs]),
            "median_compiles": median([r["compiles"] for r in runs]),
        }
    return report


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from airflow_provider_fkjoin.engine import get_spark, run_spec

    args.workdir.mkdir(parents=True, exist_ok=True)
    ui = not args.no_ui
    server_conf = (
        {"spark.ui.enabled": "true", "spark.ui.port": str(UI_PORT)} if ui else {"spark.ui.enabled": "false"}
    )
    if args.status_store_limit is not None:
        server_conf |= dict.fromkeys(STATUS_STORE_LIMITS, str(args.status_store_limit))
    server_conf |= dict(text.split("=", 1) for text in args.server_conf)
    server_options = ["--share-compiled-code"] if args.share_compiled_code else []
    server = start_connect_server(args.workdir, PORT, server_conf, server_options)
    spark = None
    try:
        spark = get_spark(f"sc://127.0.0.1:{PORT}")
        pid = server_jvm(server.pid)
        orders, customers = (str(args.workdir / n) for n in ("orders", "customers"))
        options = "TBLPROPERTIES (delta.enableChangeDataFeed = true, delta.enableDeletionVectors = true)"
        for path, query in (
            (customers, "SELECT id AS customer_id, concat('c', id) AS name FROM range(100)"),
            (orders, "SELECT id AS order_id, id % 100 AS customer_id, id * 1.5 AS amount FROM range(1000)"),
        ):
            spark.sql(f"CREATE OR REPLACE TABLE {delta_path_sql(path)} USING delta {options} AS {query}")

        def spec(output: str) -> dict[str, Any]:
            return {
                "kind": "foreign_key_join",
                "left": {"path": orders, "key": ["order_id"]},
                "right": {"path": customers, "key": ["customer_id"]},
                "foreign_key": ["customer_id"],
                "how": "left",
                "output": {"path": str(args.workdir / output)},
            }

        counter = iter(range(1_000_000))

        def change() -> None:
            index = next(counter)
            spark.sql(
                f"UPDATE {delta_path_sql(orders)} SET amount = amount + 1 WHERE order_id = {index % 1000}"
            )
            spark.sql(
                f"UPDATE {delta_path_sql(customers)} SET name = concat(name, 'x') "
                f"WHERE customer_id = {index % 100}"
            )

        report: dict[str, Any] = {
            "command": command_line("bench.connect_refresh"),
            # without the server's UI its jobs are not counted: jobs and state_jobs are null
            "server_ui": ui,
            "server_conf": server_conf,
            "server_options": server_options,
            "paths": {},
            "verified": {},
        }
        readings: list[dict[str, Any]] = []

        def read_memory(refreshes: int) -> None:
            readings.append({"refreshes": refreshes, **memory(pid)})
            heap = readings[-1]["heap_used_mb"]
            print(f"[connect_refresh] after {refreshes} refreshes: heap {heap} MB after GC", flush=True)

        if args.session_per_refresh:
            the_spec = spec("out_net")
            run_spec(the_spec, spark=spark)
            report["sessions"] = session_runs(args, spark, the_spec, change)
            report["verified"]["out_net"] = verify(spark, orders, customers, str(args.workdir / "out_net"))
            write_report(report, args.json_out)
            return 0

        refreshes = 0
        for write_path, output in (("auto", "out_net"), ("merge", "out_merge")):
            the_spec = spec(output)
            run_spec(the_spec, spark=spark, write_path=write_path)
            refreshes += 1
            if not readings:
                read_memory(refreshes)
            runs = []
            for index in range(args.warmup + args.repeat):
                change()
                tag = f"refresh_{write_path}_{index}"
                spark.addTag(tag)
                wall, result = timed(lambda s=the_spec, w=write_path: run_spec(s, spark=spark, write_path=w))
                spark.removeTag(tag)
                refreshes += 1
                counts = job_counts(server_jobs(tag)) if ui else {"jobs": None, "state_jobs": None}
                expected = "merge" if write_path == "merge" else "net_changes"
                assert (result["mode"], result["write_path"]) == ("incremental", expected), result
                jobs = (
                    f"{counts['jobs']} jobs ({counts['state_jobs']} table-state rebuilds)"
                    if ui
                    else "jobs not counted (the server's UI is off)"
                )
                print(
                    f"[connect_refresh] {write_path} #{index + 1}: {wall:.2f}s {result['write_path']} {jobs}",
                    flush=True,
                )
                if index >= args.warmup:
                    runs.append(
                        {"wall_s": round(wall, 3), "write_path": result["write_path"],
                         "phases": result.get("phases"), "rows": result["rows"], **counts}
                    )  # fmt: skip
            report["paths"][write_path] = {"runs": runs, "median_s": median([r["wall_s"] for r in runs])}
            # checked now: the memory refreshes below move the inputs on and refresh only out_net
            report["verified"][output] = verify(spark, orders, customers, str(args.workdir / output))

        the_spec = spec("out_net")
        read_memory(refreshes)
        warm = readings[-1]
        points = {refreshes + n for n in args.memory_points if 0 < n < args.memory_refreshes}
        started = time.monotonic()
        for _ in range(args.memory_refreshes):
            change()
            run_spec(the_spec, spark=spark)
            refreshes += 1
            if refreshes in points:
                read_memory(refreshes)
        seconds = time.monotonic() - started
        read_memory(refreshes)
        first, last = readings[0], readings[-1]
        report["memory"] = {
            "server_ui": ui,
            "status_store_limit": args.status_store_limit,
            "refreshes": args.memory_refreshes,
            "seconds": round(seconds, 1),
            "readings": [{k: v for k, v in r.items() if k != "histogram"} for r in readings],
            "heap_ratio_to_first": round(last["heap_used_mb"] / first["heap_used_mb"], 3),
            "heap_ratio_to_warm": round(last["heap_used_mb"] / warm["heap_used_mb"], 3),
            "rss_ratio_to_warm": round(last["rss_mb"] / warm["rss_mb"], 3),
            "growth_first_to_last": top_growth(first, last),
            "growth_warm_to_last": top_growth(warm, last),
        }
        if args.memory_refreshes:  # else out_net was last refreshed before the MERGE path moved the inputs
            report["verified"]["out_net after the memory refreshes"] = verify(
                spark, orders, customers, str(args.workdir / "out_net")
            )
        write_report(report, args.json_out)
    finally:
        import contextlib
        import os
        import signal

        # The session first: a Connect client still open when its server is gone retries its release at
        # the interpreter's exit for minutes.
        if spark is not None:
            with contextlib.suppress(Exception):
                spark.stop()
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Wall time of a small refresh and of a noop through each execution mode, side by side in one run.

The issue: a DAG author refreshing a 12-row join every few minutes waited about a minute per task, most
of it a JVM starting for spark-submit, even when nothing changed. This measures one foreign-key join
(12 orders x 4 customers, one customer renamed per refresh) five ways:

* ``refresh via spark-submit`` and ``noop via spark-submit`` (the noop check off, so Spark decides);
* ``refresh via Spark Connect`` and ``noop via Spark Connect`` (a warm ``fkjoin connect-server``);
* ``noop via the no-JVM check`` (the hook reads the Delta logs and never starts Spark).

Each is timed at two levels: the hook's ``run`` in this process (what a task's ``execute`` spends, with
phases from ``FKJOIN_TRACE``: start until the inputs are pinned (the JVM's or the session's start),
pinned until the changes are read, until the write starts, until it commits, until the hook returns),
and a whole ``airflow tasks test`` of the same operator: the process's wall time (Airflow's own start,
DAG parsing, an in-process API server) and the task's run (from Airflow's "Task started" to its end,
what a worker spends). Cases run round-robin so drift hits them alike.

    .venv/bin/python bench/bench_airflow_modes.py --repeat 5 --json-out bench/results_airflow_modes.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
from bench_common import HERE, parse_with_common, write_report
from deltalake import DeltaTable, write_deltalake

REPO = HERE.parent
AIRFLOW = str(Path(sys.executable).parent / "airflow")
CASES = [
    ("refresh via spark-submit", "spark_default", False, True),
    ("noop via spark-submit", "spark_default", False, False),
    ("refresh via Spark Connect", "spark_connect_bench", False, True),
    ("noop via Spark Connect", "spark_connect_bench", False, False),
    ("noop via the no-JVM check", "spark_default", True, False),
]
_LOG_TIME = r"^(\d{4}-\d\d-\d\dT[\d:.]+Z) \[\w+\s*\] "
_TASK_STARTED = re.compile(_LOG_TIME + r"Task started", re.MULTILINE)
_TASK_ENDED = re.compile(_LOG_TIME + r"\[DAG TEST\] end task", re.MULTILINE)


def seed(warehouse: Path) -> None:
    cdf = {"delta.enableChangeDataFeed": "true"}
    orders = pa.table(
        {
            "order_id": pa.array(range(12), pa.int64()),
            "customer_id": pa.array([i % 4 for i in range(12)], pa.int64()),
            "amount": pa.array([i * 2.5 for i in range(12)], pa.float64()),
        }
    )
    customers = pa.table({"customer_id": pa.array(range(4), pa.int64()), "name": [f"c{i}" for i in range(4)]})
    write_deltalake(str(warehouse / "orders"), orders, configuration=cdf)
    write_deltalake(str(warehouse / "customers"), customers, configuration=cdf)


def change(warehouse: Path, round_number: int) -> None:
    DeltaTable(str(warehouse / "customers")).update(
        predicate=f"customer_id = {round_number % 4}", updates={"name": f"'renamed {round_number}'"}
    )


def spec(warehouse: Path) -> dict[str, Any]:
    return {
        "kind": "foreign_key_join",
        "left": {"path": str(warehouse / "orders"), "key": ["order_id"]},
        "right": {"path": str(warehouse / "customers"), "key": ["customer_id"]},
        "foreign_key": ["customer_id"],
        "how": "left",
        "output": {"path": str(warehouse / "orders_customers")},
    }


def start_connect_server(workdir: Path, port: int) -> subprocess.Popen[bytes]:
    log = (workdir / "connect-server.log").open("wb")
    argv = [sys.executable, "-m", "airflow_provider_fkjoin.cli", "--master", "local[2]",
            "--conf", "spark.sql.shuffle.partitions=2", "--conf", "spark.driver.memory=2g",
            "connect-server", "--port", str(port)]  # fmt: skip
    server = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=workdir)
    deadline = time.monotonic() + 120
    while True:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return server
        if server.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the Spark Connect server did not start: {workdir / 'connect-server.log'}")
        time.sleep(0.1)


def time_hook(conn_id: str, noop_check: bool, the_spec: dict[str, Any]) -> dict[str, Any]:
    from airflow_provider_fkjoin.hooks.fkjoin import FkJoinHook

    hook = FkJoinHook(conn_id, noop_check=noop_check, env_vars={"FKJOIN_TRACE": "1"})
    started = time.monotonic()
    result = hook.run(the_spec)
    ended = time.monotonic()
    seen = hook.driver_output.phases if hook.driver_output is not None else {}
    marks = [("start", started), *sorted(seen.items(), key=lambda item: item[1]), ("return", ended)]
    split = {f"{a}_to_{b}_s": round(t_b - t_a, 3) for (a, t_a), (b, t_b) in itertools.pairwise(marks)}
    return {
        "wall_s": round(ended - started, 3),
        "mode": result["mode"],
        "source": result.get("source"),
        **split,
    }


def time_task(env: dict[str, str], conn_id: str, noop_check: bool) -> dict[str, Any]:
    params = json.dumps({"conn_id": conn_id, "noop_check": noop_check})
    started = time.monotonic()
    done = subprocess.run(
        [AIRFLOW, "tasks", "test", "fkjoin_bench_modes", "join", "-t", params],
        env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    wall = time.monotonic() - started
    modes = re.findall(r"foreign_key_join: mode=(\w+)", done.stdout + done.stderr)
    if done.returncode != 0 or not modes:
        raise SystemExit(
            f"airflow tasks test failed ({done.returncode}):\n{(done.stdout + done.stderr)[-3000:]}"
        )
    output = done.stdout + done.stderr
    started_at, ended_at = _TASK_STARTED.search(output), _TASK_ENDED.search(output)
    task = {}
    if started_at and ended_at:
        span = dt.datetime.fromisoformat(ended_at.group(1)) - dt.datetime.fromisoformat(started_at.group(1))
        task = {"task_run_s": round(span.total_seconds(), 3)}
    return {"wall_s": round(wall, 3), **task, "mode": modes[-1]}


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    keys = list(dict.fromkeys(k for r in runs for k in r if k.endswith("_s")))
    return {
        "runs": runs,
        **{
            key: {
                "median": round(statistics.median(r[key] for r in runs if key in r), 3),
                "min": min(r[key] for r in runs if key in r),
                "max": max(r[key] for r in runs if key in r),
            }
            for key in keys
        },
        "modes": sorted({r["mode"] for r in runs}),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    args = parse_with_common(parser, "airflow_modes", argv, repeat=5)

    shutil.rmtree(args.workdir, ignore_errors=True)
    warehouse, home = args.workdir / "warehouse", args.workdir / "airflow-home"
    warehouse.mkdir(parents=True)
    home.mkdir()
    seed(warehouse)
    port = 15000 + os.getpid() % 1000
    conns = {
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": args.master}),
        "AIRFLOW_CONN_SPARK_CONNECT_BENCH": json.dumps(
            {"conn_type": "spark_connect", "host": "127.0.0.1", "port": port}
        ),
    }
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")},
        **conns,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(HERE / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "FKJOIN_BENCH_WAREHOUSE": str(warehouse),
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
    }
    os.environ.update({k: v for k, v in env.items() if k.startswith(("AIRFLOW", "FKJOIN"))})
    subprocess.run([AIRFLOW, "db", "migrate"], env=env,
                   capture_output=True, check=True, timeout=600)  # fmt: skip
    server = start_connect_server(args.workdir, port)
    the_spec = spec(warehouse)
    report: dict[str, Any] = {"repeat": args.repeat, "rows": {"orders": 12, "customers": 4}, "cases": {}}
    try:
        # warm-up: the first (full) refresh, and one refresh through each mode (JIT, caches)
        for conn_id in ("spark_default", "spark_connect_bench"):
            change(warehouse, 0)
            time_hook(conn_id, False, the_spec)
        hook_runs: dict[str, list[dict[str, Any]]] = {name: [] for name, *_ in CASES}
        task_runs: dict[str, list[dict[str, Any]]] = {name: [] for name, *_ in CASES}
        round_number = 0
        for _ in range(args.repeat):
            for name, conn_id, noop_check, changes in CASES:
                for level, runs in (("hook", hook_runs), ("task", task_runs)):
                    if changes:
                        round_number += 1
                        change(warehouse, round_number)
                    if level == "hook":
                        runs[name].append(time_hook(conn_id, noop_check, the_spec))
                    else:
                        runs[name].append(time_task(env, conn_id, noop_check))
                    print(name, level, runs[name][-1], flush=True)
        for name, *_ in CASES:
            report["cases"][name] = {"hook": summary(hook_runs[name]), "task": summary(task_runs[name])}
    finally:
        server.terminate()
        server.wait(30)
    write_report(report, args.json_out)


if __name__ == "__main__":
    main()

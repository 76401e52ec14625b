r"""Benchmark: a small refresh and a noop through each execution mode, side by side in one run.

A DAG that refreshes a 12-row join every few minutes pays, per task, whatever its execution mode costs
beyond the join itself (a JVM start for spark-submit), even when nothing changed. This measures one
foreign-key join (12 orders x 4 customers, one customer renamed per refresh) five ways:

* ``refresh via spark-submit`` and ``noop via spark-submit`` (the noop check off, so Spark decides);
* ``refresh via Spark Connect`` and ``noop via Spark Connect`` (a warm ``fkjoin connect-server``);
* ``noop via the no-JVM check`` (the hook reads the Delta logs and never starts Spark).

Each is timed at two levels: the hook's ``run`` in this process (what a task's ``execute`` spends, with
phases from ``FKJOIN_TRACE``: start until the inputs are pinned (the JVM's or the session's start),
pinned until the changes are read, until the write starts, until it commits, until the hook returns),
and a whole ``airflow tasks test`` of the same operator: the process's wall time (Airflow's own start,
DAG parsing, an in-process API server) and the task's run (from Airflow's "Task started" to its end,
what a worker spends). Cases run round-robin so drift hits them alike.

    python -m bench.airflow_modes --repeat 5 --json-out bench/results/airflow_modes.json

``--noop-dags-test`` measures only the noop through the no-JVM check, as ``airflow dags test`` runs it:
the task's time is Airflow's own, the task instance's ``start_date`` to ``end_date`` read back from the
metadata DB after each run (median of ``--repeat``). Each round runs ``airflow dags test`` twice: as it
is (the figure), and with timestamps around the phases of the task (``--trace-airflow``: the operator
module's import, the DAG parse, the ``start`` call to the Execution API and its first-request set-up,
template rendering, the operator's spec, hook, noop check, XCom pushes and asset event, the return
value's XCom, and what Airflow does after ``end_date``: the success call, extra links, listeners).

    FKJOIN_DELTA_JARS=$PWD/.jars python -m bench.airflow_modes --noop-dags-test --repeat 3 \
        --json-out bench/results/noop_dags_test.json

``--submit-dags-test`` measures a small refresh through spark-submit as ``airflow dags test`` runs it (a
customer renamed before each run; the join second in its DAG, so the first task pays the in-process
Execution API's set-up), before and after the driver's quick start, round-robin: with
``[fkjoin] fast_driver_start`` off (the driver as spark-submit starts it), and on, with the class archive
``fkjoin jvm-archive`` builds (built first if missing). Each run reports the task instance's
``start_date`` to ``end_date`` and the phases the hook logs (``spark-submit phases: ...``): the driver's
start until the Spark session is ready, the refresh, the exit.

    python -m bench.airflow_modes --submit-dags-test --repeat 3 --json-out bench/results/submit_dags_test.json

``--driver-flags`` chooses the driver's JVM options: the same small refresh through the hook's spark-submit
(no Airflow task), each round once per candidate set of options (``name=options``;
``{archive_option}`` stands for ``-XX:SharedArchiveFile=<the class archive>``), the hook's own fast start
off, round-robin; each run's phases as the hook reports them.

    python -m bench.airflow_modes --driver-flags none= 'cds_c1={archive_option} -XX:TieredStopAtLevel=1' \
        --repeat 3 --json-out bench/results/driver_flags.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import itertools
import json
import os
import re
import shutil
import socket
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from airflow_provider_fkjoin.jvm_start import build_report
from bench.common import BENCH_DIR, DATA_DIR, add_common, command_line, json_out, write_report

REPO_ROOT = BENCH_DIR.parent

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
#: The hook's line after spark-submit returns: ``spark-submit phases: start 3.41 s, refresh 9.02 s, ...``.
_SUBMIT_PHASES = re.compile(r"spark-submit phases: ((?:\w+ [\d.]+ s(?:, )?)+)")


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


def start_connect_server(
    workdir: Path, port: int, conf: dict[str, str] | None = None, options: list[str] | None = None
) -> subprocess.Popen[bytes]:
    """``fkjoin connect-server`` on ``port`` (local[2], 2 GB, 2 shuffle partitions; ``conf`` adds to or
    overrides them; ``options`` are more of the command's own), once its port accepts connections."""
    log = (workdir / "connect-server.log").open("wb")
    settings = {"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "2g", **(conf or {})}
    argv = [sys.executable, "-m", "airflow_provider_fkjoin.cli", "--master", "local[2]"]
    for key, value in settings.items():
        argv += ["--conf", f"{key}={value}"]
    argv += ["connect-server", "--port", str(port), *(options or [])]
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
    from airflow_provider_fkjoin.hooks import FkJoinHook

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


_RUNNER, _OPERATOR = "airflow.sdk.execution_time.task_runner", "airflow_provider_fkjoin.operators.joins"
#: Phases ``--trace-airflow`` times, as (name, owner module, attribute path), in the order a task meets them.
TRACED = [
    ("dag_parse", "airflow.dag_processing.dagbag", "DagBag.process_file"),
    ("api_start_call", "airflow.sdk.api.client", "TaskInstanceOperations.start"),
    ("api_first_request_setup", "cadwyn.applications", "Cadwyn._cadwyn_initialize"),
    ("prepare_render_templates_rtif_listeners", _RUNNER, "_prepare"),
    ("execute", _RUNNER, "_run_execute_callable"),
    ("op_build_and_validate_spec", _OPERATOR, "_FkJoinOperator.build_spec"),
    ("op_build_and_validate_spec", _OPERATOR, "_FkJoinOperator.validate_spec"),
    ("op_make_hook", _OPERATOR, "_FkJoinOperator.make_hook"),
    ("hook_run", "airflow_provider_fkjoin.hooks.fkjoin", "FkJoinHook.run"),
    ("noop_check", "airflow_provider_fkjoin.engine", "noop_result"),
    ("op_asset_event", _OPERATOR, "_FkJoinOperator._record_asset_event"),
    ("xcom_push_by_operator", _RUNNER, "RuntimeTaskInstance.xcom_push"),
    ("return_value_xcom_push", _RUNNER, "_push_xcom_if_needed"),
    ("end_date", _RUNNER, "_handle_current_task_success"),
    ("after_end_date_finalize", _RUNNER, "finalize"),
]


def trace_airflow(out: Path, airflow_args: list[str]) -> None:
    """Run the ``airflow`` CLI in this process with a timestamp around each :data:`TRACED` phase; write the
    phases' times (s) relative to the task's ``start_date`` (the ``start`` call) to ``out`` as JSON.

    Every module patched here is one ``airflow dags test`` imports before the task instance starts, except
    the operator module, whose import is timed on its own first (``import_operator_module``)."""
    import importlib

    import airflow.sdk  # noqa: F401  (what every DAG file imports first)

    started = time.monotonic()
    operators = importlib.import_module("airflow_provider_fkjoin.operators")
    imported = time.monotonic() - started
    package = str(Path(operators.__file__).parents[1])
    spans: list[tuple[str, float, float]] = []

    def timed(name: str, function: Any) -> Any:
        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            begun = time.monotonic()
            try:
                return function(*args, **kwargs)
            finally:
                spans.append((name, begun, time.monotonic()))

        return wrapper

    for name, module_name, path in TRACED:
        owner: Any = importlib.import_module(module_name)
        *parents, attr = path.split(".")
        for parent in parents:
            owner = getattr(owner, parent)
        setattr(owner, attr, timed(name, getattr(owner, attr)))
    from airflow.__main__ import main as airflow_main

    sys.argv = ["airflow", *airflow_args]
    try:
        airflow_main()
    finally:
        out.write_text(json.dumps({**trace_phases(spans, imported), "provider_package": package}))


def trace_phases(spans: list[tuple[str, float, float]], imported: float) -> dict[str, float]:
    """Seconds per traced phase of the run's *last* task instance (the join), from the ``start`` call
    (its ``start_date``) on; the DAG parse and the first-request set-up of the Execution API (in an
    earlier task when the join is not the first) are reported whichever task met them."""
    starts = [begun for name, begun, _ in spans if name == "api_start_call"]
    window_start = starts[-1] if starts else 0.0
    phases: dict[str, float] = {"import_operator_module_s": round(imported, 4)}
    for name, begun, ended in spans:
        if begun < window_start and name not in ("dag_parse", "api_first_request_setup"):
            continue
        key = f"{name}_s"
        phases[key] = round(phases.get(key, 0.0) + ended - begun, 4)
    ends = [begun for name, begun, _ in spans if name == "end_date" and begun >= window_start]
    if starts and ends:
        phases["traced_window_s"] = round(ends[0] - window_start, 4)
    return phases


def task_dates(home: Path, dag_id: str, run_id: str, task_id: str) -> dict[str, Any]:
    """A task instance's own start_date and end_date, and the seconds between, from the metadata DB."""
    with sqlite3.connect(home / "airflow.db") as db:
        start, end = db.execute(
            "SELECT start_date, end_date FROM task_instance WHERE dag_id = ? AND run_id = ? AND task_id = ?",
            (dag_id, run_id, task_id),
        ).fetchone()
    span = dt.datetime.fromisoformat(end) - dt.datetime.fromisoformat(start)
    return {"ti_start_date": start, "ti_end_date": end, "ti_duration_s": round(span.total_seconds(), 3)}


#: The ``--noop-dags-test`` cases: (name, DAG, environment). The join as the run's only task; after a
#: task that does nothing (which then pays the in-process Execution API's set-up); the same with
#: ``[openlineage] spark_inject_parent_job_info`` on (the job's conf names the task as the Spark
#: application's parent job, which a noop never submits).
NOOP_CASES = [
    ("join first", "fkjoin_bench_modes", {}),
    ("join second", "fkjoin_bench_noop_second", {}),
    (
        "join second, OpenLineage parent job info on",
        "fkjoin_bench_noop_second",
        {"AIRFLOW__OPENLINEAGE__SPARK_INJECT_PARENT_JOB_INFO": "True"},
    ),
]


def time_dags_test(env: dict[str, str], home: Path, dag_id: str, trace: Path | None) -> dict[str, Any]:
    """One ``airflow dags test`` of ``dag_id`` (the DAG's defaults: ``spark_default``, noop check on): the
    join task instance's start/end dates (and the first task's, if any), the process's wall time and, with
    ``trace``, the join's phases."""
    argv, cwd = [AIRFLOW, "dags", "test", dag_id], None
    if trace is not None:
        # This module in a child process, from a folder that holds no package: ``bench`` is found through
        # PYTHONPATH after whatever PYTHONPATH already names (a copy of the provider, say).
        argv = [sys.executable, "-m", "bench.airflow_modes", "--trace-airflow", str(trace), *argv[1:]]
        env = {**env, "PYTHONPATH": os.pathsep.join(filter(None, [env.get("PYTHONPATH"), str(REPO_ROOT)]))}
        cwd = home
    started = time.monotonic()
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=600, check=False)
    wall = time.monotonic() - started
    output = done.stdout + done.stderr
    run_id = re.search(r"DagRun Finished: .*?run_id=([^,\s]+),.*?state=success", output)
    result = re.search(r"foreign_key_join: mode=(\w+)", output)
    if done.returncode != 0 or run_id is None or result is None:
        raise SystemExit(f"airflow dags test failed ({done.returncode}):\n{output[-3000:]}")
    run = {"wall_s": round(wall, 3), **task_dates(home, dag_id, run_id.group(1), "join")}
    if dag_id == "fkjoin_bench_noop_second":
        first = task_dates(home, dag_id, run_id.group(1), "first_task")
        run["first_task_ti_duration_s"] = first["ti_duration_s"]
    run["mode"] = result.group(1)
    run["precheck"] = "noop, Spark not started" in output
    phases = _SUBMIT_PHASES.search(output)
    if phases is not None:
        for part in phases.group(1).split(", "):
            name, seconds, _ = part.split()
            run[f"submit_{name}_s"] = float(seconds)
        run["class_archive"] = "-XX:SharedArchiveFile=" in output  # in the logged spark-submit command
    if trace is not None:
        run.update(json.loads(trace.read_text()))
    return run


def noop_dags_test(args: argparse.Namespace, env: dict[str, str], warehouse: Path, home: Path) -> None:
    """``--noop-dags-test``: after one real refresh (spark-submit), ``--repeat`` rounds of a noop join in
    ``airflow dags test``, first and second in its DAG, as it is and traced, round-robin."""
    the_spec = spec(warehouse)
    first = time_hook("spark_default", False, the_spec)
    print("first refresh", first, flush=True)
    runs: dict[str, list[dict[str, Any]]] = {}
    for _ in range(args.repeat):
        for case, dag_id, extra_env in NOOP_CASES:
            for trace in (None, args.workdir / "trace.json"):
                name = f"{case}, traced" if trace else case
                runs.setdefault(name, []).append(time_dags_test({**env, **extra_env}, home, dag_id, trace))
                print(name, runs[name][-1], flush=True)
    report = {
        "command": command_line("bench.airflow_modes"),
        "repeat": args.repeat,
        "commands": {case: f"airflow dags test {dag_id}" for case, dag_id, _ in NOOP_CASES},
        "environments": {case: extra_env for case, _, extra_env in NOOP_CASES},
        "load_average_after": os.getloadavg(),
        "cases": {name: summary(case_runs) for name, case_runs in runs.items()},
    }
    write_report(report, args.json_out)


def time_driver_flags(options: str, the_spec: dict[str, Any]) -> dict[str, Any]:
    """One refresh through the hook's spark-submit with ``options`` as the driver's JVM options (after the
    engine's log settings; the hook adds nothing of its own): the hook's phases and the result's mode."""
    from airflow_provider_fkjoin.engine import ENGINE_LOG4J
    from airflow_provider_fkjoin.hooks import FkJoinHook

    java_options = f"-Dlog4j.configurationFile=file:{ENGINE_LOG4J} {options}".strip()
    hook = FkJoinHook(
        "spark_default",
        noop_check=False,
        fast_driver_start=False,
        conf={"spark.driver.extraJavaOptions": java_options},
    )
    result = hook.run(the_spec)
    return {**(hook.submit_phases or {}), "mode": result["mode"]}


def driver_flags(args: argparse.Namespace, env: dict[str, str], warehouse: Path) -> None:
    """``--driver-flags``: the archive built if missing, one full refresh, then ``--repeat`` rounds of a
    small refresh per candidate set of driver JVM options."""
    os.environ.pop("SPARK_SUBMIT_OPTS", None)  # the driver gets only the options under test
    archive = build_report(env)
    print("class archive", archive, flush=True)
    candidates = dict(item.split("=", 1) for item in args.driver_flags)
    candidates = {
        name: options.replace("{archive_option}", f"-XX:SharedArchiveFile={archive['archive']}")
        for name, options in candidates.items()
    }
    the_spec = spec(warehouse)
    print("first refresh", time_driver_flags("", the_spec), flush=True)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in candidates}
    round_number = 0
    for _ in range(args.repeat):
        for name, options in candidates.items():
            round_number += 1
            change(warehouse, round_number)
            runs[name].append(time_driver_flags(options, the_spec))
            print(name, runs[name][-1], flush=True)
    report = {
        "command": command_line("bench.airflow_modes"),
        "repeat": args.repeat,
        "rows": {"orders": 12, "customers": 4},
        "class_archive": archive,
        "candidates": candidates,
        "load_average_after": os.getloadavg(),
        "cases": {name: summary(case_runs) for name, case_runs in runs.items()},
    }
    write_report(report, args.json_out)


#: The ``--submit-dags-test`` cases: (name, environment of ``airflow dags test``).
SUBMIT_CASES = [
    ("fast start off", {"AIRFLOW__FKJOIN__FAST_DRIVER_START": "False"}),
    ("fast start on (class archive, short-lived flags)", {"AIRFLOW__FKJOIN__FAST_DRIVER_START": "True"}),
]


def submit_dags_test(args: argparse.Namespace, env: dict[str, str], warehouse: Path, home: Path) -> None:
    """``--submit-dags-test``: the archive built if missing, one full refresh, then ``--repeat`` rounds of a
    small refresh in ``airflow dags test`` through spark-submit with the fast start off and on."""
    env = {k: v for k, v in env.items() if k != "SPARK_SUBMIT_OPTS"}  # only what the hook adds
    archive = build_report(env)
    print("class archive", archive, flush=True)
    first = time_hook("spark_default", False, spec(warehouse))
    print("first refresh", first, flush=True)
    runs: dict[str, list[dict[str, Any]]] = {}
    round_number = 0
    for _ in range(args.repeat):
        for case, extra_env in SUBMIT_CASES:
            round_number += 1
            change(warehouse, round_number)
            run = time_dags_test({**env, **extra_env}, home, "fkjoin_bench_noop_second", None)
            if run["mode"] != "incremental" or "submit_total_s" not in run:
                raise SystemExit(f"{case}: expected an incremental refresh through spark-submit, got {run}")
            run["outside_spark_submit_s"] = round(run["ti_duration_s"] - run["submit_total_s"], 3)
            runs.setdefault(case, []).append(run)
            print(case, run, flush=True)
    report = {
        "command": command_line("bench.airflow_modes"),
        "repeat": args.repeat,
        "rows": {"orders": 12, "customers": 4},
        "dag": "fkjoin_bench_noop_second (the join second)",
        "class_archive": archive,
        "environments": dict(SUBMIT_CASES),
        "load_average_after": os.getloadavg(),
        "cases": {name: summary(case_runs) for name, case_runs in runs.items()},
    }
    write_report(report, args.json_out)


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
        prog="python -m bench.airflow_modes",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--noop-dags-test",
        action="store_true",
        help="only the noop through the no-JVM check, in `airflow dags test` (task instance start/end dates)",
    )
    parser.add_argument(
        "--driver-flags",
        nargs="+",
        metavar="NAME=OPTIONS",
        help="only a small refresh through the hook's spark-submit, once per round per set of driver JVM "
        "options ({archive_option} is -XX:SharedArchiveFile=<the class archive>)",
    )
    parser.add_argument(
        "--submit-dags-test",
        action="store_true",
        help="only a small refresh through spark-submit in `airflow dags test`, the driver's fast start off "
        "and on (task instance start/end dates, the phases the hook logs)",
    )
    add_common(parser, DATA_DIR / "airflow_modes", repeat=5)
    args = parser.parse_args(argv)
    name = "noop_dags_test" if args.noop_dags_test else "airflow_modes"
    name = "submit_dags_test" if args.submit_dags_test else name
    args.json_out = json_out(args.json_out, "driver_flags" if args.driver_flags else name)

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
        "AIRFLOW__CORE__DAGS_FOLDER": str(BENCH_DIR / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "FKJOIN_BENCH_WAREHOUSE": str(warehouse),
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
    }
    os.environ.update({k: v for k, v in env.items() if k.startswith(("AIRFLOW", "FKJOIN"))})
    subprocess.run([AIRFLOW, "db", "migrate"], env=env,
                   capture_output=True, check=True, timeout=600)  # fmt: skip
    if args.noop_dags_test:
        noop_dags_test(args, env, warehouse, home)
        return
    if args.submit_dags_test:
        submit_dags_test(args, env, warehouse, home)
        return
    if args.driver_flags:
        driver_flags(args, {k: v for k, v in env.items() if k != "SPARK_SUBMIT_OPTS"}, warehouse)
        return
    server = start_connect_server(args.workdir, port)
    the_spec = spec(warehouse)
    report: dict[str, Any] = {
        "command": command_line("bench.airflow_modes"),
        "repeat": args.repeat,
        "rows": {"orders": 12, "customers": 4},
        "cases": {},
    }
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
    if sys.argv[1:2] == ["--trace-airflow"]:
        trace_airflow(Path(sys.argv[2]), sys.argv[3:])
    else:
        main()

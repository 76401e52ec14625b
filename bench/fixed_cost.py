#!/usr/bin/env python
"""Probe: what an incremental refresh costs when there is (almost) nothing to do.

The engine's usual code path, unchanged, on tiny tables (1,000 orders x 100 customers) with one order
and one customer updated per refresh (11 output rows change): every second it takes is fixed cost
(Spark jobs, query planning, Delta log work, the commit), not data. Compared in the same run with the
smallest things Spark does on this machine (a trivial action on a 10K-row local frame, a shuffle
aggregation, a join, a count of a Delta table) and with a full recompute of the same tiny join, so the
floor under the benchmark's ratios is measured rather than guessed. Also lists the Spark jobs and SQL
executions (nested ones included) of each refresh.

    .venv/bin/python bench/fixed_cost_probe.py --repeat 5 --json-out bench/results_fixed_cost.json
"""

from __future__ import annotations

import argparse
import cProfile
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--warmup", type=int, default=3, help="untimed refreshes first (JIT warm-up)")
    p.add_argument("--workdir", type=Path, default=HERE / "data" / "fixed_cost")
    p.add_argument("--master", default="local[2]")
    p.add_argument("--write-path", choices=["auto", "merge"], default="auto")
    p.add_argument("--profile", action="store_true", help="cProfile each refresh to WORKDIR/profile-N.pstats")
    p.add_argument("--json-out", type=Path, default=None)
    p.add_argument("--conf", action="append", default=[], help="extra Spark conf KEY=VALUE (repeatable)")
    return p.parse_args(argv)


def _timings(fn, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        out.append(round(time.perf_counter() - started, 3))
    return out


def _duration_ms(execution) -> int:
    done = execution.completionTime()
    return int(done.get().getTime()) - int(execution.submissionTime()) if done.isDefined() else 0


def _is_top_level(execution) -> bool:
    return int(execution.rootExecutionId()) == int(execution.executionId())


def _describe(execution, started_ms: float) -> str:
    """``+offset ms, duration ms, description (jobs)``; nested executions are indented."""
    offset = int(execution.submissionTime() - started_ms)
    nested = "" if _is_top_level(execution) else "  "
    return (
        f"{nested}+{offset}ms {_duration_ms(execution)}ms {execution.description()[:80]} "
        f"({execution.jobs().size()} jobs)"
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from pyspark.sql import functions as F

    from airflow_provider_fkjoin.engine import get_spark, run_spec

    conf = {"spark.sql.shuffle.partitions": "8", "spark.driver.memory": "8g"}
    conf.update(dict(item.split("=", 1) for item in args.conf))
    spark = get_spark(args.master, conf)
    spark.sparkContext.setLogLevel("ERROR")
    shutil.rmtree(args.workdir, ignore_errors=True)
    args.workdir.mkdir(parents=True)
    orders, customers, out = (str(args.workdir / n) for n in ("orders", "customers", "orders_enriched"))
    cdf = {"delta.enableChangeDataFeed": "true", "delta.enableDeletionVectors": "true"}

    def write(frame, path: str) -> None:
        writer = frame.write.format("delta")
        for key, value in cdf.items():
            writer = writer.option(key, value)
        writer.save(path)

    write(spark.range(100).selectExpr("id AS customer_id", "concat('c', id) AS name"), customers)
    write(
        spark.range(1000).selectExpr("id AS order_id", "id % 100 AS customer_id", "id * 1.5 AS amount"),
        orders,
    )
    spec = {
        "kind": "foreign_key_join",
        "left": {"path": orders, "key": ["order_id"]},
        "right": {"path": customers, "key": ["customer_id"]},
        "foreign_key": ["customer_id"],
        "how": "left",
        "output": {"path": out},
    }
    run_spec(spec, spark=spark, write_path=args.write_path)

    store = spark._jsparkSession.sharedState().statusStore()  # type: ignore[attr-defined]
    context = spark.sparkContext._jsc.sc()  # type: ignore[attr-defined]

    def settled() -> tuple[int, list]:
        """Jobs submitted so far and the SQL executions recorded, once the listener bus has caught up
        (the status store is filled in the background)."""
        context.listenerBus().waitUntilEmpty()
        listed = store.executionsList()
        return int(context.dagScheduler().nextJobId()), [listed.apply(i) for i in range(listed.size())]

    refreshes = []
    for index in range(args.warmup + args.repeat):
        spark.sql(f"UPDATE delta.`{orders}` SET amount = amount + 1 WHERE order_id = {index}")
        spark.sql(f"UPDATE delta.`{customers}` SET name = concat(name, 'x') WHERE customer_id = {50 + index}")
        jobs_before, before = settled()
        last_before = max((int(e.executionId()) for e in before), default=-1)
        started, started_ms = time.perf_counter(), time.time() * 1000
        if args.profile:
            profiler = cProfile.Profile()
            profiler.enable()
        result = run_spec(spec, spark=spark, write_path=args.write_path)
        wall = round(time.perf_counter() - started, 3)
        if args.profile:
            profiler.disable()
            profiler.dump_stats(str(args.workdir / f"profile-{index}.pstats"))
        jobs_after, after = settled()
        executions = [e for e in after if int(e.executionId()) > last_before]
        refreshes.append(
            {
                "executions": [_describe(e, started_ms) for e in executions],
                "top_level_execution_s": round(
                    sum(_duration_ms(e) for e in executions if _is_top_level(e)) / 1000, 3
                ),
                "wall_s": wall,
                "spark_jobs": jobs_after - jobs_before,
                "sql_executions": len(executions),
                "write_path": result.get("write_path"),
                "compacted": result.get("compacted"),
                "rows": {k: result["rows"][k] for k in ("inserted", "updated", "deleted")},
            }
        )
        label = "warm-up" if index < args.warmup else "timed"
        print(
            f"[probe] refresh #{index + 1} ({label}): {wall}s {refreshes[-1]['spark_jobs']} jobs", flush=True
        )
    warmups = [r["wall_s"] for r in refreshes[: args.warmup]]
    refreshes = refreshes[args.warmup :]

    local = spark.range(10_000).selectExpr("id", "id % 7 AS k").toPandas()
    frame = spark.createDataFrame(local)
    floor = {
        "count of a 10K-row local frame": _timings(lambda: frame.count(), args.repeat),
        "group-by collect of it": _timings(lambda: frame.groupBy("k").count().collect(), args.repeat),
        "self-join collect of it": _timings(
            lambda: frame.alias("a").join(frame.alias("b"), "id").agg(F.count("*")).collect(), args.repeat
        ),
    }

    def recompute() -> None:
        joined = (
            spark.read.format("delta")
            .load(orders)
            .join(spark.read.format("delta").load(customers), "customer_id", "left")
        )
        joined.write.format("delta").mode("overwrite").save(str(args.workdir / "recompute"))

    floor["full recompute of the tiny join (read, join, overwrite)"] = _timings(recompute, args.repeat)
    floor["count of the orders Delta table (a Delta read: snapshot, file listing, one job)"] = _timings(
        lambda: spark.read.format("delta").load(orders).count(), args.repeat
    )
    walls = [r["wall_s"] for r in refreshes]
    report = {
        "command": " ".join(sys.argv),
        "warmup_wall_s": warmups,
        "refreshes": refreshes,
        "refresh_median_s": statistics.median(walls),
        "floor_s": {name: {"runs": runs, "median": statistics.median(runs)} for name, runs in floor.items()},
    }
    print(json.dumps(report, indent=1))
    if args.json_out:
        args.json_out.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

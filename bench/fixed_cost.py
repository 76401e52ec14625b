"""Benchmark: what an incremental refresh costs when there is (almost) nothing to do.

The engine's usual code path, unchanged, on tiny tables (1,000 orders x 100 customers) with one order
and one customer updated per refresh (11 output rows change): every second it takes is fixed cost
(Spark jobs, query planning, Delta log work, the commit), not data. Compared in the same run with the
smallest things Spark does on this machine (a trivial action on a 10K-row local frame, a shuffle
aggregation, a join, a count of a Delta table) and with a full recompute of the same tiny join. Also
lists the Spark jobs and SQL executions (nested ones included) of each refresh.

    python -m bench.fixed_cost --repeat 5 --json-out bench/results/fixed_cost.json
"""

from __future__ import annotations

import argparse
import cProfile
import time

from bench.common import (
    DATA_DIR,
    add_common,
    bench_spark,
    codegen_compiles,
    command_line,
    conf_pairs,
    cost_between,
    describe_execution,
    duration_ms,
    is_top_level,
    json_out,
    jvm_cpu_s,
    jvm_pid,
    median,
    same_table,
    settled_executions,
    timed,
    timings,
    write_report,
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.fixed_cost", description=__doc__.split("\n\n")[0])
    add_common(p, DATA_DIR / "fixed_cost", repeat=5)
    p.add_argument("--warmup", type=int, default=3, help="untimed refreshes first (JIT warm-up)")
    p.add_argument("--write-path", choices=["auto", "merge"], default="auto")
    p.add_argument(
        "--strategy",
        choices=["auto", "incremental", "recompute"],
        default="auto",
        help="the spec's refresh_strategy (auto: the engine's estimate chooses)",
    )
    p.add_argument("--profile", action="store_true", help="cProfile each refresh to WORKDIR/profile-N.pstats")
    p.add_argument("--conf", action="append", default=[], help="extra Spark conf KEY=VALUE (repeatable)")
    args = p.parse_args(argv)
    args.json_out = json_out(args.json_out, "fixed_cost")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from pyspark.sql import functions as F

    from airflow_provider_fkjoin.engine import run_spec

    spark = bench_spark(args, conf_pairs(args.conf))
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
        "refresh_strategy": args.strategy,
    }
    run_spec(spec, spark=spark, write_path=args.write_path)

    refreshes = []
    pid = jvm_pid(spark)
    for index in range(args.warmup + args.repeat):
        spark.sql(f"UPDATE delta.`{orders}` SET amount = amount + 1 WHERE order_id = {index}")
        spark.sql(f"UPDATE delta.`{customers}` SET name = concat(name, 'x') WHERE customer_id = {50 + index}")
        jobs_before, before = settled_executions(spark)
        last_before = max((int(e.executionId()) for e in before), default=-1)
        started_ms = time.time() * 1000
        cpu_before, python_before, compiles_before = (
            jvm_cpu_s(pid),
            time.process_time(),
            codegen_compiles(spark),
        )
        if args.profile:
            profiler = cProfile.Profile()
            profiler.enable()
        wall, result = timed(lambda: run_spec(spec, spark=spark, write_path=args.write_path))
        wall = round(wall, 3)
        if args.profile:
            profiler.disable()
            profiler.dump_stats(str(args.workdir / f"profile-{index}.pstats"))
        cpu_after, python_after, compiles_after = jvm_cpu_s(pid), time.process_time(), codegen_compiles(spark)
        jobs_after, after = settled_executions(spark)
        executions = [e for e in after if int(e.executionId()) > last_before]
        refreshes.append(
            {
                "executions": [describe_execution(e, started_ms) for e in executions],
                "top_level_execution_s": round(
                    sum(duration_ms(e) for e in executions if is_top_level(e)) / 1000, 3
                ),
                "wall_s": wall,
                "spark_jobs": jobs_after - jobs_before,
                "jvm_cpu_s": cost_between(cpu_before, cpu_after),
                "python_cpu_s": round(python_after - python_before, 3),
                "codegen_compiles": (
                    compiles_after - compiles_before
                    if compiles_before is not None and compiles_after is not None
                    else None
                ),
                "sql_executions": len(executions),
                "write_path": result.get("write_path"),
                "strategy": result.get("strategy"),
                "compacted": result.get("compacted"),
                "rows": {k: result["rows"][k] for k in ("inserted", "updated", "deleted")},
            }
        )
        label = "warm-up" if index < args.warmup else "timed"
        print(
            f"[fixed_cost] refresh #{index + 1} ({label}): {wall}s {refreshes[-1]['spark_jobs']} jobs, "
            f"JVM CPU {refreshes[-1]['jvm_cpu_s']}, Python {refreshes[-1]['python_cpu_s']}s, "
            f"{refreshes[-1]['codegen_compiles']} compiles, "
            f"strategy {(result.get('strategy') or {}).get('chosen')}",
            flush=True,
        )
    warmups = [r["wall_s"] for r in refreshes[: args.warmup]]
    refreshes = refreshes[args.warmup :]

    local = spark.range(10_000).selectExpr("id", "id % 7 AS k").toPandas()
    frame = spark.createDataFrame(local)
    floor = {
        "count of a 10K-row local frame": timings(lambda: frame.count(), args.repeat),
        "group-by collect of it": timings(lambda: frame.groupBy("k").count().collect(), args.repeat),
        "self-join collect of it": timings(
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

    floor["full recompute of the tiny join (read, join, overwrite)"] = timings(recompute, args.repeat)
    floor["count of the orders Delta table (a Delta read: snapshot, file listing, one job)"] = timings(
        lambda: spark.read.format("delta").load(orders).count(), args.repeat
    )
    walls = [r["wall_s"] for r in refreshes]
    report = {
        "command": command_line("bench.fixed_cost"),
        "verified": same_table(spark, out, str(args.workdir / "recompute")),
        "warmup_wall_s": warmups,
        "refreshes": refreshes,
        "refresh_median_s": median(walls),
        "floor_s": {name: {"runs": runs, "median": median(runs)} for name, runs in floor.items()},
    }
    write_report(report, args.json_out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

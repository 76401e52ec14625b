"""Benchmark: the least any Spark-and-Delta incremental refresh of a foreign-key join costs here, beside the
engine's refresh and a full recompute.

An incremental refresh of this design must, at the least, read both change feeds, scan the left table's
foreign keys for the left rows of changed right keys, read the output's key column to find the rows to
replace, and write the new rows in one Delta commit. The floor does exactly those reads and that write
with Spark's own Delta reader and writer, nothing else (no duplicate checks, no proof, no deletion
vectors, no change data), after each batch of input changes, so every read meets new table versions as
a real refresh does. It runs them two ways:

* ``separate``: one Spark action per read (feeds, left scan, output keys), then the write;
* ``one_action``: the same reads as a single action (their counts cross-joined), then the write;

and, in the same session and on the same kind of batch, the engine's own refresh and a full recompute
(read both tables, join, overwrite). The floor is what the engine's refresh could at best shrink to on
this machine with this stack; a target below it is out of reach of any refresh of this design.

    python -m bench.floor --data bench --left-rows 10000000 --right-rows 1000000 --change-left 10000 \\
        --change-right 1000 --repeat 2 --warmup 1 --left-columns keys \\
        --json-out bench/results/floor_10m_bench.json
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from bench.common import (
    DATA_DIR,
    add_common,
    bench_spark,
    command_line,
    conf_pairs,
    delta_history,
    delta_path_sql,
    json_out,
    jvm_pid,
    median,
    same_table,
    write_report,
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.floor", description=__doc__.split("\n\n")[0])
    p.add_argument("--left-rows", type=int, default=1000)
    p.add_argument("--right-rows", type=int, default=100)
    p.add_argument("--change-left", type=int, default=1, help="left rows updated per batch")
    p.add_argument("--change-right", type=int, default=1, help="right rows updated per batch")
    add_common(p, DATA_DIR / "floor", repeat=3)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument(
        "--left-columns",
        choices=["all", "keys"],
        default="all",
        help="the floor's left scan reads every column, or only the key and foreign key (a lower bound for "
        "any way of finding the affected keys; the rows written then carry nulls for the other columns)",
    )
    p.add_argument(
        "--data",
        choices=["narrow", "bench"],
        default="narrow",
        help="narrow: 4-column tables, a one-commit batch per side; bench: bench.fk_join's own tables and "
        "change batches (bench.datagen, inner join), so the figures compare with its recompute",
    )
    p.add_argument(
        "--strategy",
        choices=["auto", "incremental", "recompute"],
        default="auto",
        help="the engine refresh's refresh_strategy (auto: the engine's estimate chooses)",
    )
    p.add_argument(
        "--warm-state",
        action="store_true",
        help="the engine refresh keeps its warm state in the session's JVM (warm_state: true): the first "
        "refresh builds it, later ones look up what they would scan",
    )
    p.add_argument(
        "--restart",
        action="store_true",
        help="with --warm-state: after the timed rounds, drop the state from the JVM (as a restart does) "
        "and run one more round, whose refresh loads the state's durable copy (reported as 'restart')",
    )
    p.add_argument(
        "--candidates",
        choices=["all", "engine-and-recompute"],
        default="all",
        help="engine-and-recompute: only the engine's refresh and the recompute (no floor candidates, "
        "half the copies of the inputs): for sizes where the floors are already known",
    )
    p.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting for the benchmark's session (repeatable), e.g. spark.driver.memory=18g",
    )
    args = p.parse_args(argv)
    args.json_out = json_out(args.json_out, "floor")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from pyspark.sql import functions as F

    from airflow_provider_fkjoin.engine import run_spec

    spark = bench_spark(args, conf_pairs(args.conf))
    props = {"delta.enableChangeDataFeed": "true", "delta.enableDeletionVectors": "true"}
    floors = ("floor, separate actions", "floor, one action") if args.candidates == "all" else ()
    candidates = ("engine refresh", *floors, "full recompute")

    def write(frame, path: str, mode: str = "error") -> None:  # "error": Connect has no "errorifexists"
        writer = frame.write.format("delta").mode(mode)
        for key, value in props.items():
            writer = writer.option(key, value)
        writer.save(path)

    # Each candidate has its own copy of the inputs, and every batch goes to every copy: each reads only
    # the one batch it is timed on, and meets table versions no other candidate has read (no warm caches).
    copies = {name: args.workdir / f"c{i}" for i, name in enumerate(candidates)}
    if args.data == "bench":
        from bench import datagen, fk_join

        base = datagen.ensure_base_tables(spark, DATA_DIR, args.left_rows, args.right_rows)
    for root in copies.values():
        if args.data == "bench":
            datagen.copy_table(base.left, root / "orders")
            datagen.copy_table(base.right, root / "customers")
            continue
        write(
            spark.range(args.right_rows).selectExpr(
                "id AS customer_id", "concat('c', id) AS name", "concat('r', id % 8) AS region"
            ),
            str(root / "customers"),
        )
        write(
            spark.range(args.left_rows).selectExpr(
                "id AS order_id",
                f"id % {args.right_rows} AS customer_id",
                "id * 1.5 AS amount",
                "concat('s', id % 6) AS status",
            ),
            str(root / "orders"),
        )

    def paths(name: str) -> dict[str, str]:
        root = copies[name]
        return {n: str(root / n) for n in ("orders", "customers", "out")}

    def spec_for(name: str) -> dict:
        p = paths(name)
        spec = {
            "kind": "foreign_key_join",
            "left": {"path": p["orders"], "key": ["order_id"]},
            "right": {"path": p["customers"], "key": ["customer_id"]},
            "foreign_key": ["customer_id"],
            "how": "left",
            "output": {"path": p["out"]},
        }
        if args.data == "bench":
            spec = fk_join.make_spec(Path(p["orders"]), Path(p["customers"]), Path(p["out"]))
        spec["refresh_strategy"] = args.strategy
        if args.warm_state and name == "engine refresh":
            spec["warm_state"] = True
        return spec

    run_spec(spec_for("engine refresh"), spark=spark)
    for name in floors:
        run_spec(spec_for(name), spark=spark)  # the floor appends to an output of the same size
    how = spec_for("engine refresh")["how"]
    output_columns = spark.read.format("delta").load(paths("engine refresh")["out"]).schema
    left_step = max(args.left_rows // max(args.change_left, 1), 1)
    right_step = max(args.right_rows // max(args.change_right, 1), 1)

    def latest(path: str) -> int:
        return delta_history(spark, path, 1).first()["version"]

    def change_inputs(i: int) -> dict[str, tuple[int, int, int, int]]:
        """Batch ``i`` on every copy; returns each copy's versions (orders from, to, customers from, to).

        narrow: ``change_left`` orders and ``change_right`` customers updated, spread over the keys, one
        commit each; bench: ``bench.fk_join``'s batch (datagen: updates, deletes, inserts, FK changes)."""
        versions = {}
        for name in candidates:
            p = paths(name)
            before = (latest(p["orders"]), latest(p["customers"]))
            if args.data == "bench":
                datagen.apply_right_changes(
                    spark, Path(p["customers"]), args.right_rows, args.change_right, i
                )
                datagen.apply_left_changes(
                    spark,
                    Path(p["orders"]),
                    args.left_rows,
                    args.right_rows,
                    args.change_left,
                    args.change_right,
                    i,
                )
            else:
                spark.sql(
                    f"UPDATE {delta_path_sql(p['orders'])} SET amount = amount + 1 "
                    f"WHERE order_id % {left_step} = {i % left_step}"
                )
                spark.sql(
                    f"UPDATE {delta_path_sql(p['customers'])} SET name = concat(name, 'x') "
                    f"WHERE customer_id % {right_step} = {i % right_step}"
                )
            versions[name] = (before[0] + 1, latest(p["orders"]), before[1] + 1, latest(p["customers"]))
        return versions

    def feed(path: str, start: int, end: int):
        return (
            spark.read.format("delta")
            .option("readChangeFeed", "true")
            .option("startingVersion", start)
            .option("endingVersion", end)
            .load(path)
        )

    def reads(p: dict[str, str], lf: int, lv: int, rf: int, rv: int):
        """The reads every incremental refresh needs, as lazy frames (nothing runs here)."""
        left_keys = feed(p["orders"], lf, lv).select("order_id").distinct()
        right_keys = feed(p["customers"], rf, rv).select("customer_id").distinct()
        left = spark.read.format("delta").option("versionAsOf", lv).load(p["orders"])
        if args.left_columns == "keys":
            left = left.select("order_id", "customer_id")
        affected = left.join(F.broadcast(left_keys), "order_id", "left_semi").unionByName(
            left.join(F.broadcast(right_keys), "customer_id", "left_semi")
        )
        keys = (
            spark.read.format("delta")
            .load(p["out"])
            .select("order_id", "_metadata.file_path", "_metadata.row_index")
        )
        return left_keys, right_keys, affected, keys

    def new_rows(p: dict[str, str], affected, rv: int):
        right = spark.read.format("delta").option("versionAsOf", rv).load(p["customers"])
        joined = affected.join(right, "customer_id", how)
        return joined.select(
            *[
                F.col(f.name) if f.name in joined.columns else F.lit(None).cast(f.dataType).alias(f.name)
                for f in output_columns.fields
            ]
        )

    def timed(fn) -> float:
        started = time.perf_counter()
        fn()
        return round(time.perf_counter() - started, 3)

    def floor_separate(p: dict[str, str], lf: int, lv: int, rf: int, rv: int) -> dict:
        steps: dict[str, float] = {}
        started = time.perf_counter()
        left_keys, right_keys, affected, keys = reads(p, lf, lv, rf, rv)
        left_keys, right_keys = left_keys.persist(), right_keys.persist()
        steps["left feed"] = timed(left_keys.count)
        steps["right feed"] = timed(right_keys.count)
        affected = affected.persist()
        steps["left scan (rows of changed keys and FKs)"] = timed(affected.count)
        located = keys.join(F.broadcast(affected.select("order_id")), "order_id", "left_semi")
        steps["output key scan"] = timed(located.count)
        written = new_rows(p, affected, rv)
        steps["write (append, one WRITE commit)"] = timed(
            lambda: written.write.format("delta").mode("append").save(p["out"])
        )
        for frame in (left_keys, right_keys, affected):
            frame.unpersist()
        return {"wall_s": round(time.perf_counter() - started, 3), "steps_s": steps}

    def floor_one_action(p: dict[str, str], lf: int, lv: int, rf: int, rv: int) -> dict:
        steps: dict[str, float] = {}
        started = time.perf_counter()
        left_keys, right_keys, affected, keys = reads(p, lf, lv, rf, rv)
        affected = affected.persist()
        located = keys.join(F.broadcast(affected.select("order_id")), "order_id", "left_semi")
        counts = (
            left_keys.agg(F.count("*").alias("l"))
            .crossJoin(right_keys.agg(F.count("*").alias("r")))
            .crossJoin(located.agg(F.count("*").alias("o")))
        )
        steps["feeds + left scan + output key scan, one action"] = timed(counts.collect)
        written = new_rows(p, affected, rv)
        steps["write (append, one WRITE commit)"] = timed(
            lambda: written.write.format("delta").mode("append").save(p["out"])
        )
        affected.unpersist()
        return {"wall_s": round(time.perf_counter() - started, 3), "steps_s": steps}

    def engine_refresh(p: dict[str, str], lf: int, lv: int, rf: int, rv: int) -> dict:
        started = time.perf_counter()
        result = run_spec(spec_for("engine refresh"), spark=spark)
        return {
            "wall_s": round(time.perf_counter() - started, 3),
            "write_path": result.get("write_path"),
            "strategy": result.get("strategy"),
            "rows": {k: result["rows"][k] for k in ("inserted", "updated", "deleted")},
            "phases": result.get("phases"),
            "warm_state": result.get("warm_state"),
        }

    def recompute(p: dict[str, str], lf: int, lv: int, rf: int, rv: int) -> dict:
        if args.data == "bench":
            seconds = fk_join.full_recompute(
                spark, Path(p["orders"]), Path(p["customers"]), Path(p["out"]), lv, rv
            )
            return {"wall_s": round(seconds, 3)}
        started = time.perf_counter()
        joined = (
            spark.read.format("delta")
            .option("versionAsOf", lv)
            .load(p["orders"])
            .join(
                spark.read.format("delta").option("versionAsOf", rv).load(p["customers"]),
                "customer_id",
                "left",
            )
        )
        joined.write.format("delta").mode("overwrite").save(p["out"])
        return {"wall_s": round(time.perf_counter() - started, 3)}

    runners = {
        "engine refresh": engine_refresh,
        "floor, separate actions": floor_separate,
        "floor, one action": floor_one_action,
        "full recompute": recompute,
    }
    results: dict[str, list[dict]] = {name: [] for name in candidates}
    results_verified: list[bool] = []  # each round: the engine's output equals the recompute's
    for index in range(args.warmup + args.repeat):
        versions = change_inputs(index)
        for name in candidates:
            measured = runners[name](paths(name), *versions[name])
            label = "warm-up" if index < args.warmup else "timed"
            print(f"[floor] #{index + 1} ({label}) {name}: {measured}", flush=True)
            if index >= args.warmup:
                results[name].append(measured)
        results_verified.append(
            same_table(spark, paths("engine refresh")["out"], paths("full recompute")["out"])
        )
    restart = None
    if args.warm_state and args.restart:
        from airflow_provider_fkjoin.engine.core.spec import TableRef
        from airflow_provider_fkjoin.engine.delta.tables import DeltaHandle
        from airflow_provider_fkjoin.engine.delta.warm_state import WarmState

        out = paths("engine refresh")["out"]
        warm = WarmState(spark, DeltaHandle(spark, TableRef(path=out), "output"))
        warm.settle()
        warm.drop()
        versions = change_inputs(args.warmup + args.repeat)
        restart = {name: runners[name](paths(name), *versions[name]) for name in candidates}
        restart["engine_equals_recompute"] = same_table(spark, out, paths("full recompute")["out"])
        print(f"[floor] restart: {restart}", flush=True)
    report_memory = warm_state_memory(spark, paths("engine refresh")["out"], results["engine refresh"])
    report = {
        "command": command_line("bench.floor"),
        "left_rows": args.left_rows,
        "right_rows": args.right_rows,
        "change_left": args.change_left,
        "change_right": args.change_right,
        "left_columns": args.left_columns,
        "data": args.data,
        "warm_state": args.warm_state,
        "conf": conf_pairs(args.conf),
        "median_wall_s": {name: median(r["wall_s"] for r in runs) for name, runs in results.items()},
        "runs": results,
        "engine_equals_recompute": results_verified,
    }
    if args.warm_state and report_memory is not None:
        report["warm_state_memory"] = report_memory
    if restart is not None:
        report["restart"] = restart
    write_report(report, args.json_out)
    return 0


def warm_state_memory(spark, out: str, runs: list[dict]) -> dict | None:
    """What the output's warm state holds and takes: its rows, the native memory of the JVM's state cache
    (RocksDB's, bounded by ``spark.fkjoin.state.memoryBytes``) and the state's local disk, from the last
    refresh it served; and, in a classic session, the driver's heap after a full GC and its process RSS
    (a Connect client cannot reach the server's JVM)."""
    from airflow_provider_fkjoin.engine import is_connect

    served = [r["warm_state"]["lookup"] for r in runs if (r.get("warm_state") or {}).get("used")]
    if not served:
        return None
    lookup = served[-1]
    held = int(lookup["held_rows"])
    report: dict = {
        "held_rows": held,
        "native_bytes": lookup.get("memory_bytes"),
        "budget_bytes": lookup.get("budget_bytes"),
        "disk_bytes": lookup.get("disk_bytes"),
    }
    if lookup.get("memory_bytes") is not None and held:
        report["native_bytes_per_row"] = round(int(lookup["memory_bytes"]) / held, 1)
    if is_connect(spark):
        return report
    jvm = spark.sparkContext._jvm
    runtime = jvm.java.lang.Runtime.getRuntime()
    for _ in range(3):
        jvm.java.lang.System.gc()
    report["heap_used_bytes"] = int(runtime.totalMemory() - runtime.freeMemory())
    report["heap_max_bytes"] = int(runtime.maxMemory())
    pid = jvm_pid(spark)
    if pid is not None:
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
        rss = next((line.split()[1] for line in status if line.startswith("VmRSS:")), None)
        report["jvm_rss_bytes"] = int(rss) * 1024 if rss else None
    gcs = jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()
    report["gc_s"] = round(sum(int(bean.getCollectionTime()) for bean in gcs) / 1000, 1)
    return report


if __name__ == "__main__":
    raise SystemExit(main())

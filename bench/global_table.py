"""Benchmark: global-table catch-up vs full bootstrap, and incremental stream-table join vs full recompute.

Data from ``datagen`` (deterministic): the stream is the ``orders`` table (append-only events), the
table is ``customers`` (key ``customer_id``, CDF on). In one run:

  (a) ``global_table_bootstrap`` full bootstrap of customers into a global table (timed);
  (b) 0.1% of the table's rows changed (80% updates, 10% deletes, 10% inserts; not timed);
  (c) ``global_table_bootstrap`` catch-up, incremental (timed), then a full bootstrap of the same
      source version into a fresh path (timed, another (a) sample). Target: (c) <= 0.2 x median (a);
  (d) full recompute of the stream join: every stream event joined to the global table (broadcast),
      written as a new Delta table (timed); the engine's own first full run is timed too;
  (e) 0.1% new events appended to the stream (not timed);
  (f) ``stream_table_join`` incremental refresh (timed), then (d) again at the same versions (another
      sample). Target: (f) <= 0.1 x median (d).

A warm-up (a tiny bootstrap and join) runs first so no timed step pays for JVM start-up and JIT.

Both incremental results are checked: the global table's row count equals the source's, and the
join output grew by exactly the number of new events (left join).

    python -m bench.global_table --stream-rows 10000000 --table-rows 1000000 --repeat 2 \\
        --json-out bench/results/global_net_changes.json
    python -m bench.global_table --quick     # 1M events, 100K rows; report in bench/data/
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
from pathlib import Path

from bench import datagen
from bench.common import (
    DATA_DIR,
    add_common,
    command_line,
    json_out,
    median,
    spark_session,
    timed,
    write_report,
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.global_table", description=__doc__.split("\n\n")[0])
    p.add_argument("--stream-rows", type=int, default=10_000_000)
    p.add_argument("--table-rows", type=int, default=1_000_000)
    p.add_argument("--fraction", type=float, default=0.001, help="share of rows changed / appended (0.1%%)")
    add_common(p, DATA_DIR, repeat=1, repeat_help="change + refresh cycles")
    p.add_argument("--quick", action="store_true", help="1M events against 100K rows; report in bench/data/")
    p.add_argument("--no-warmup", dest="warmup", action="store_false", help="skip the warm-up pass")
    args = p.parse_args(argv)
    if args.quick:
        args.stream_rows, args.table_rows = 1_000_000, 100_000
        if args.json_out is None:
            args.json_out = DATA_DIR / "global_table_quick.json"
    args.json_out = json_out(args.json_out, "global_table")
    return args


def bootstrap_spec(table: Path, glob: Path) -> dict:
    """The benchmark's global_table_bootstrap: customers (keyed table) into a global table."""
    return {
        "kind": "global_table_bootstrap",
        "source": {"path": str(table), "key": ["customer_id"]},
        "output": {"path": str(glob)},
    }


def join_spec(stream: Path, glob: Path, out: Path) -> dict:
    """The benchmark's stream_table_join: orders events looked up in the global table (left join)."""
    return {
        "kind": "stream_table_join",
        "stream": {"path": str(stream), "key": ["order_id"]},
        "table": {"path": str(glob), "key": ["customer_id"]},
        "key_mapper": ["customer_id"],
        "how": "left",
        "output": {"path": str(out)},
    }


def warmup(spark, run_spec, workdir: Path) -> None:
    """A tiny bootstrap, catch-up and join, so JVM class loading and JIT are paid before any timing."""
    wd = workdir / "gt_warmup"
    if wd.exists():
        shutil.rmtree(wd)
    base = datagen.ensure_base_tables(spark, workdir, 50_000, 20_000)
    stream, table = wd / "orders", wd / "customers"
    datagen.copy_table(base.left, stream)
    datagen.copy_table(base.right, table)
    boot = bootstrap_spec(table, wd / "global")
    run_spec(boot, spark=spark)
    datagen.apply_right_changes(spark, table, 20_000, 20, 0)
    run_spec(boot, spark=spark)
    join = join_spec(stream, wd / "global", wd / "joined")
    run_spec(join, spark=spark)
    datagen.orders_df(spark.range(50_000, 50_050, 1, 1), 20_000).write.format("delta").mode("append").save(
        str(stream)
    )
    run_spec(join, spark=spark)
    shutil.rmtree(wd)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from pyspark.sql import functions as F

    from airflow_provider_fkjoin.engine import run_spec

    spark = spark_session(args.master)
    if args.warmup:
        secs, _ = timed(lambda: warmup(spark, run_spec, args.workdir))
        print(f"warm-up: {secs:.1f}s")
    base = datagen.ensure_base_tables(spark, args.workdir, args.stream_rows, args.table_rows)
    run = args.workdir / "gt_run" / f"S{args.stream_rows}_T{args.table_rows}"
    if run.exists():
        shutil.rmtree(run)
    run.mkdir(parents=True)
    stream, table, glob = run / "orders", run / "customers", run / "customers_global"
    out, baseline = run / "orders_enriched", run / "baseline_join"
    datagen.copy_table(base.left, stream)
    datagen.copy_table(base.right, table)
    boot = bootstrap_spec(table, glob)
    join = join_spec(stream, glob, out)
    results: dict = {
        "command": command_line("bench.global_table"),
        "stream_rows": args.stream_rows,
        "table_rows": args.table_rows,
        "fraction": args.fraction,
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "master": args.master,
            "load_avg_start": os.getloadavg(),
        },
        "cycles": [],
    }
    secs, first_boot = timed(lambda: run_spec(boot, spark=spark))
    assert first_boot["mode"] == "full", first_boot
    bootstrap_samples = [secs]
    print(f"(a) full bootstrap: {secs:.2f}s")

    def full_recompute() -> None:
        events = spark.read.format("delta").load(str(stream))
        lookup = spark.read.format("delta").load(str(glob))
        joined = events.join(F.broadcast(lookup), on="customer_id", how="left")
        joined.write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(str(baseline))

    secs, _ = timed(full_recompute)
    recompute_samples = [secs]
    print(f"(d) full recompute of the join: {secs:.2f}s")
    secs, first_join = timed(lambda: run_spec(join, spark=spark))
    assert first_join["mode"] == "full", first_join
    results["join_engine_full_s"] = round(secs, 2)
    print(f"    engine's first (full) join: {secs:.2f}s")

    next_order = args.stream_rows
    for cycle in range(args.repeat):
        n_table = max(3, int(args.table_rows * args.fraction))
        datagen.apply_right_changes(spark, table, args.table_rows, n_table, cycle)
        secs, caught = timed(lambda: run_spec(boot, spark=spark))
        assert caught["mode"] == "incremental" and caught["caught_up"], caught
        source_rows = spark.read.format("delta").load(str(table)).count()
        assert spark.read.format("delta").load(str(glob)).count() == source_rows
        print(f"(c) catch-up of {n_table} table changes: {secs:.2f}s  {caught['rows']}")
        catch_up = secs
        fresh = {**boot, "output": {"path": str(run / f"customers_global_full{cycle}")}}
        secs, again = timed(lambda spec=fresh: run_spec(spec, spark=spark))
        assert again["mode"] == "full" and again["checkpoint"] == caught["checkpoint"], again
        bootstrap_samples.append(secs)
        print(f"(a) full bootstrap at the same version: {secs:.2f}s")

        n_stream = max(1, int(args.stream_rows * args.fraction))
        before = spark.read.format("delta").load(str(out)).count()
        new = datagen.orders_df(spark.range(next_order, next_order + n_stream, 1, 1), args.table_rows)
        new.write.format("delta").mode("append").save(str(stream))
        next_order += n_stream
        secs, inc = timed(lambda: run_spec(join, spark=spark))
        assert inc["mode"] == "incremental", inc
        assert spark.read.format("delta").load(str(out)).count() == before + n_stream
        print(f"(f) incremental join of {n_stream} new events: {secs:.2f}s  {inc['rows']}")
        join_incremental = secs
        secs, _ = timed(full_recompute)
        recompute_samples.append(secs)
        print(f"(d) full recompute of the join at the same versions: {secs:.2f}s")
        results["cycles"].append(
            {
                "table_changes": n_table,
                "catch_up_s": round(catch_up, 2),
                "new_events": n_stream,
                "join_incremental_s": round(join_incremental, 2),
                "load_avg": os.getloadavg(),
                "catch_up_result": caught,
                "join_result": inc,
            }
        )
    results["bootstrap_full_samples_s"] = [round(x, 2) for x in bootstrap_samples]
    results["join_full_recompute_samples_s"] = [round(x, 2) for x in recompute_samples]
    results["bootstrap_full_s"] = round(median(bootstrap_samples), 2)
    results["join_full_recompute_s"] = round(median(recompute_samples), 2)
    catch_ups = [c["catch_up_s"] for c in results["cycles"]]
    joins = [c["join_incremental_s"] for c in results["cycles"]]
    if catch_ups:
        results["catch_up_s"] = round(median(catch_ups), 2)
        results["join_incremental_s"] = round(median(joins), 2)
        results["catch_up_ratio"] = round(results["catch_up_s"] / results["bootstrap_full_s"], 3)
        results["join_ratio"] = round(results["join_incremental_s"] / results["join_full_recompute_s"], 3)
        print(
            f"medians: full bootstrap {results['bootstrap_full_s']}s, catch-up {results['catch_up_s']}s "
            f"-> ratio {results['catch_up_ratio']} (target 0.2); "
            f"full join {results['join_full_recompute_s']}s, "
            f"incremental {results['join_incremental_s']}s -> ratio {results['join_ratio']} (target 0.1)"
        )
    results["machine"]["load_avg_end"] = os.getloadavg()
    write_report(results, args.json_out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark: a table-mode windowed join (a windowed table vs itself a week earlier), refresh vs recompute.

One windowed table ``errors_per_min`` (one row per service and one-minute window, as a windowed
aggregation writes it; ``--services`` x ``--days`` of minutes, about 1M rows by default), with change
data feed and deletion vectors. The join pairs every window with the same window seven days earlier
(``offset: -7d``, a left join). After the first run, each round corrects ``--changed-share`` of the rows
spread over the whole table (late updates of old windows, the hard case for a layout by time) and times:

* the engine's incremental refresh (``run_spec``), and
* the from-scratch recompute: the same left join of the whole table with its shifted self, written as
  Delta.

Correctness is the test suite's job (a from-scratch oracle at every refresh); figures are in
``bench/README.md``.

    python -m bench.windowed_table --repeat 3 --json-out bench/results/windowed_table_1m.json
"""

from __future__ import annotations

import argparse
import statistics
import time

from bench.common import bench_spark, command_line, parse_with_common, write_report

MINUTE_S = 60
START_S = 1_735_689_600  # 2025-01-01


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.windowed_table", description=__doc__.split("\n\n")[0])
    p.add_argument("--services", type=int, default=50)
    p.add_argument("--days", type=int, default=14, help="minutes of windows per service (x 1,440)")
    p.add_argument("--changed-share", type=float, default=0.001, help="rows corrected per round")
    return parse_with_common(p, "windowed_table", argv, repeat=3)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from pyspark.sql import functions as F

    from airflow_provider_fkjoin.engine import run_spec

    spark = bench_spark(args)
    table, out, baseline = (str(args.workdir / n) for n in ("errors_per_min", "vs_last_week", "baseline"))
    minutes = args.days * 1440
    rows = args.services * minutes

    started = time.perf_counter()
    windows = (
        spark.range(rows)
        .select(
            F.concat(F.lit("svc"), (F.col("id") % args.services).cast("string")).alias("service"),
            F.timestamp_seconds(F.lit(START_S) + F.floor(F.col("id") / args.services) * MINUTE_S).alias("ws"),
            F.pmod(F.xxhash64("id"), F.lit(50)).alias("errors"),
        )
        .withColumn("we", F.col("ws") + F.expr("INTERVAL 1 MINUTE"))
    )
    (
        windows.repartitionByRange(max(rows // 200_000, 1), "ws")
        .sortWithinPartitions("ws")
        .write.format("delta")
        .option("delta.enableChangeDataFeed", "true")
        .option("delta.enableDeletionVectors", "true")
        .save(table)
    )
    generate_s = round(time.perf_counter() - started, 2)
    window = {"start": "ws", "end": "we"}
    spec = {
        "kind": "windowed_join",
        "mode": "table",
        "left": {"path": table, "key": ["service"], "window": window},
        "right": {"path": table, "key": ["service"], "window": {**window, "offset": "-7d"}},
        "how": "left",
        "columns": {"errors": "l.errors", "errors_week_ago": "r.errors"},
        "output": {"path": out},
    }
    started = time.perf_counter()
    first = run_spec(spec, spark=spark)
    first_s = round(time.perf_counter() - started, 2)
    print(f"[windowed-table] {rows} rows generated in {generate_s}s; first run {first_s}s", flush=True)

    def recompute() -> float:
        began = time.perf_counter()
        now = spark.read.format("delta").load(table).alias("l")
        week_ago = spark.read.format("delta").load(table).alias("r")
        on = (
            (F.col("l.service") == F.col("r.service"))
            & (F.col("r.ws") == F.col("l.ws") - F.expr("INTERVAL 7 DAYS"))
            & (F.col("r.we") == F.col("l.we") - F.expr("INTERVAL 7 DAYS"))
        )
        joined = now.join(week_ago, on, "left").select(
            "l.service",
            "l.ws",
            "l.we",
            F.col("l.errors").alias("errors"),
            F.col("r.errors").alias("errors_week_ago"),
        )
        joined.write.format("delta").mode("overwrite").save(baseline)
        return round(time.perf_counter() - began, 2)

    modulus = max(round(1 / args.changed_share), 1)
    rounds = []
    for index in range(args.repeat):
        spark.sql(
            f"UPDATE delta.`{table}` SET errors = errors + 1 "
            f"WHERE pmod(xxhash64(service, ws, {index}), {modulus}) = 0"
        )
        began = time.perf_counter()
        result = run_spec(spec, spark=spark)
        refresh_s = round(time.perf_counter() - began, 2)
        recompute_s = recompute()
        counts = {k: result["rows"][k] for k in ("inserted", "updated", "deleted")}
        rounds.append({"refresh_s": refresh_s, "recompute_s": recompute_s, "rows": counts})
        print(f"[windowed-table] round {index + 1}: refresh {refresh_s}s, recompute {recompute_s}s {counts}")
    ratios = [r["refresh_s"] / r["recompute_s"] for r in rounds]
    report = {
        "command": command_line("bench.windowed_table"),
        "rows": rows,
        "changed_per_round": f"1 in {modulus}",
        "generate_s": generate_s,
        "first_run_s": first_s,
        "first_rows": first["rows"].get("inserted"),
        "rounds": rounds,
        "median_ratio": round(statistics.median(ratios), 3),
    }
    write_report(report, args.json_out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Benchmark: a stream-mode windowed join's incremental refresh vs a from-scratch band join.

Two append-only event tables (``impressions`` left, ``clicks`` right), ``--events`` rows each, spread
evenly over 30 days in arrival order (a minute of jitter) and over ``--keys`` ad ids; a left join with a
1-hour window on both sides and 10 minutes of grace. The engine's first run processes every row; then
each round appends ``--new-share`` of new events to each side (the newest times, as live data arrives)
and times:

* the engine's incremental refresh (``run_spec``), and
* the Spark baseline: the band join of all rows (left outer join on the key and the time band),
  written as a Delta table, as a from-scratch recompute would.

Every refresh's appended row count is printed; correctness is the test suite's job (a record-by-record
model). Figures are in ``bench/README.md``.

    python -m bench.windowed --events 1000000 --repeat 2 --json-out bench/results/windowed_1m.json
    python -m bench.windowed --events 10000000 --keys 1000000 --repeat 2 \\
        --json-out bench/results/windowed_10m.json
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from bench.common import (
    bench_spark,
    command_line,
    describe_execution,
    parse_with_common,
    settled_executions,
    write_report,
)

DAY_MS = 86_400_000
HOUR_MS = 3_600_000
START_MS = 1_735_689_600_000  # 2025-01-01


def event_rows(spark, keys: int, first: int, count: int, seed: int, t_from: int, t_span: int):
    """``count`` events numbered from ``first`` over ``keys`` ad ids, times spread over ``t_span`` ms from
    ``t_from`` in arrival order, with a minute of jitter (as a live stream's are: the files of an event
    table then cover successive time ranges, which Delta's file statistics can skip)."""
    from pyspark.sql import functions as F

    ids = spark.range(first, first + count)
    return ids.select(
        F.col("id").alias("event_id"),
        F.concat(F.lit("ad"), F.pmod(F.xxhash64("id", F.lit(seed)), F.lit(keys)).cast("string")).alias(
            "ad_id"
        ),
        (
            F.lit(t_from)
            + ((F.col("id") - F.lit(first)) * F.lit(t_span) / F.lit(max(count, 1))).cast("long")
            + F.pmod(F.xxhash64("id", F.lit(seed + 1)), F.lit(60_000))
        ).alias("t"),
        F.col("id").alias("offset"),
    )


def band_join(spark, left, right, baseline) -> float:
    """The from-scratch baseline: the left band join of all rows (key equal, times within an hour), written
    as a Delta table; returns its seconds."""
    from pyspark.sql import functions as F

    began = time.perf_counter()
    lrows = spark.read.format("delta").load(str(left)).alias("l")
    rrows = spark.read.format("delta").load(str(right)).alias("r")
    band = (
        (F.col("l.ad_id") == F.col("r.ad_id"))
        & (F.col("r.t") >= F.col("l.t") - F.lit(HOUR_MS))
        & (F.col("r.t") <= F.col("l.t") + F.lit(HOUR_MS))
    )
    joined = lrows.join(rrows, band, "left").select(
        F.col("l.ad_id").alias("ad_id"),
        F.col("l.event_id").alias("impression"),
        F.col("r.event_id").alias("click"),
        F.greatest(F.col("l.t"), F.col("r.t")).alias("event_time"),
    )
    joined.write.format("delta").mode("overwrite").save(str(baseline))
    return round(time.perf_counter() - began, 2)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.windowed", description=__doc__.split("\n\n")[0])
    p.add_argument("--events", type=int, default=1_000_000, help="rows per side")
    p.add_argument("--keys", type=int, default=100_000)
    p.add_argument("--new-share", type=float, default=0.001, help="new events per side per refresh")
    p.add_argument(
        "--executions", action="store_true", help="list each refresh's SQL executions (offset, duration)"
    )
    return parse_with_common(p, "windowed", argv, repeat=2)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from airflow_provider_fkjoin.engine import run_spec

    spark = bench_spark(args)
    left, right = args.workdir / "impressions", args.workdir / "clicks"
    out, baseline = args.workdir / "ad_clicks", args.workdir / "baseline"
    span = 30 * DAY_MS

    def append(frame, path: Path, mode: str = "append") -> None:
        frame.write.format("delta").mode(mode).option("delta.enableChangeDataFeed", "true").save(str(path))

    started = time.perf_counter()
    rows_per_file = 200_000
    for side, seed in ((left, 1), (right, 2)):
        frame = event_rows(spark, args.keys, 0, args.events, seed, START_MS, span)
        frame = frame.repartitionByRange(max(args.events // rows_per_file, 1), "t").sortWithinPartitions("t")
        append(frame, side, "overwrite")
    generate_s = round(time.perf_counter() - started, 2)
    spec = {
        "kind": "windowed_join",
        "mode": "stream",
        "left": {"path": str(left), "key": ["ad_id"], "time": "t", "order_by": ["offset"]},
        "right": {"path": str(right), "key": ["ad_id"], "time": "t", "order_by": ["offset"]},
        "window": {"before": "1h", "after": "1h", "grace": "10m"},
        "how": "left",
        "columns": {"ad_id": "coalesce(l.ad_id, r.ad_id)", "impression": "l.event_id", "click": "r.event_id"},
        "output": {"path": str(out)},
    }
    started = time.perf_counter()
    first = run_spec(spec, spark=spark)
    first_s = round(time.perf_counter() - started, 2)
    print(f"[windowed] generated in {generate_s}s; first run {first_s}s: {first['rows']}", flush=True)

    def recompute() -> float:
        return band_join(spark, left, right, baseline)

    def executions_since(last: int) -> list:
        return [e for e in settled_executions(spark)[1] if int(e.executionId()) > last]

    new = max(int(args.events * args.new_share), 1)
    rounds = []
    for index in range(args.repeat):
        t_from = START_MS + span + index * HOUR_MS
        base = args.events + index * new
        append(event_rows(spark, args.keys, base, new, 1, t_from, HOUR_MS), left)
        append(event_rows(spark, args.keys, base, new, 2, t_from, HOUR_MS), right)
        last = max((int(e.executionId()) for e in executions_since(-1)), default=-1)
        began, began_ms = time.perf_counter(), time.time() * 1000
        result = run_spec(spec, spark=spark)
        refresh_s = round(time.perf_counter() - began, 2)
        listed = [describe_execution(e, began_ms) for e in executions_since(last)] if args.executions else []
        recompute_s = recompute()
        rounds.append(
            {"refresh_s": refresh_s, "recompute_s": recompute_s, "rows": result["rows"], "executions": listed}
        )
        for line in listed:
            print(f"    {line}", flush=True)
        print(f"[windowed] round {index + 1}: refresh {refresh_s}s, recompute {recompute_s}s", flush=True)
    ratios = [r["refresh_s"] / r["recompute_s"] for r in rounds]
    report = {
        "command": command_line("bench.windowed"),
        "events_per_side": args.events,
        "keys": args.keys,
        "new_per_side": new,
        "generate_s": generate_s,
        "first_run_s": first_s,
        "rounds": rounds,
        "median_ratio": round(statistics.median(ratios), 3),
    }
    write_report(report, args.json_out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

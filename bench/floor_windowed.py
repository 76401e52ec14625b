"""Benchmark: the least a stream-mode windowed-join refresh of the engine's design costs here, beside the
from-scratch band join.

The design keeps the join's pending rows in an engine-owned Delta table that is committed before the
output, and reads the inputs themselves as the window stores. So a refresh must, at the least:

* read both inputs' change feeds since their consumed versions (the new events);
* read both inputs at their consumed versions, limited to the retention window (``t >= observed -
  (before + after + grace) + 1``: the rows a new event can still pair with; the tables are laid out by
  time, so Delta skips the other files by their statistics);
* read the pending rows at the state version the last refresh recorded;
* commit the new pending rows (one Delta overwrite of the state table);
* append the new output rows (one Delta commit).

This does exactly that with Spark's own Delta reader and writer, the reads as one action, and nothing
else (no checks, no ordering, no pairs: the rows written are the new left events), on
``bench.windowed``'s own data and batches. In the same session it times the from-scratch band join
(``bench.windowed``'s baseline), so ``floor / recompute`` is the best ratio any refresh of this design
reaches on this machine and stack.

    python -m bench.floor_windowed --events 10000000 --keys 1000000 --repeat 3 \\
        --json-out bench/results/floor_windowed_10m.json
"""

from __future__ import annotations

import argparse
import statistics
import time

from bench.common import bench_spark, command_line, parse_with_common, write_report
from bench.windowed import DAY_MS, HOUR_MS, START_MS, band_join, event_rows

RETENTION_MS = HOUR_MS + HOUR_MS + 10 * 60_000  # before + after + grace, as in bench.windowed


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.floor_windowed", description=__doc__.split("\n\n")[0])
    p.add_argument("--events", type=int, default=1_000_000, help="rows per side")
    p.add_argument("--keys", type=int, default=100_000)
    p.add_argument("--new-share", type=float, default=0.001, help="new events per side per refresh")
    p.add_argument("--pending", type=int, default=15_000, help="rows in the pending-state table")
    return parse_with_common(p, "floor_windowed", argv, repeat=3)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from pyspark.sql import functions as F

    spark = bench_spark(args)
    left, right = str(args.workdir / "impressions"), str(args.workdir / "clicks")
    state, out, baseline = (str(args.workdir / n) for n in ("pending", "ad_clicks", "baseline"))
    span = 30 * DAY_MS

    def append(frame, path: str, mode: str = "append") -> None:
        frame.write.format("delta").mode(mode).option("delta.enableChangeDataFeed", "true").save(path)

    for side, seed in ((left, 1), (right, 2)):
        frame = event_rows(spark, args.keys, 0, args.events, seed, START_MS, span)
        frame = frame.repartitionByRange(max(args.events // 200_000, 1), "t").sortWithinPartitions("t")
        append(frame, side, "overwrite")
    pending = event_rows(spark, args.keys, 0, args.pending, 3, START_MS + span - HOUR_MS, HOUR_MS)
    pending.coalesce(1).write.format("delta").save(state)
    append(event_rows(spark, args.keys, 0, 1, 1, START_MS, 1).limit(0), out)

    def version(path: str) -> int:
        return int(spark.sql(f"DESCRIBE HISTORY delta.`{path}` LIMIT 1").first()["version"])

    def floor(consumed: dict[str, int], observed: int, state_version: int, batch_left) -> dict[str, float]:
        phases: dict[str, float] = {}
        began = time.perf_counter()
        reads = []
        for path in (left, right):
            reads.append(
                spark.read.format("delta")
                .option("readChangeFeed", "true")
                .option("startingVersion", consumed[path] + 1)
                .load(path)
                .select("ad_id", "t")
            )
            reads.append(
                spark.read.format("delta")
                .option("versionAsOf", consumed[path])
                .load(path)
                .where(F.col("t") >= F.lit(observed - RETENTION_MS + 1))
                .select("ad_id", "t")
            )
        held = spark.read.format("delta").option("versionAsOf", state_version).load(state)
        reads.append(held.select("ad_id", "t"))
        counted = reads[0].groupBy().count()
        for frame in reads[1:]:
            counted = counted.crossJoin(frame.groupBy().count())
        counted.collect()
        phases["reads (2 feeds, 2 retained windows, pending) as one action"] = time.perf_counter() - began
        mark = time.perf_counter()
        batch_left.coalesce(1).write.format("delta").mode("overwrite").save(state)
        phases["state table overwrite (one commit)"] = time.perf_counter() - mark
        mark = time.perf_counter()
        batch_left.coalesce(1).write.format("delta").mode("append").save(out)
        phases["output append (one commit)"] = time.perf_counter() - mark
        phases["total"] = time.perf_counter() - began
        return {name: round(seconds, 3) for name, seconds in phases.items()}

    new = max(int(args.events * args.new_share), 1)
    observed = START_MS + span
    rounds = []
    for index in range(args.repeat):
        consumed = {path: version(path) for path in (left, right)}
        state_version = version(state)
        t_from = START_MS + span + index * HOUR_MS
        base = args.events + index * new
        batch = {
            path: event_rows(spark, args.keys, base, new, seed, t_from, HOUR_MS)
            for path, seed in ((left, 1), (right, 2))
        }
        for path, frame in batch.items():
            append(frame, path)
        phases = floor(consumed, observed, state_version, batch[left])
        observed = t_from + HOUR_MS
        recompute_s = band_join(spark, left, right, baseline)
        rounds.append({"floor_s": phases, "recompute_s": recompute_s})
        total = phases["total"]
        print(f"[floor-windowed] round {index + 1}: floor {total}s, recompute {recompute_s}s", flush=True)
    ratios = [r["floor_s"]["total"] / r["recompute_s"] for r in rounds]
    report = {
        "command": command_line("bench.floor_windowed"),
        "events_per_side": args.events,
        "keys": args.keys,
        "new_per_side": new,
        "pending_rows": args.pending,
        "rounds": rounds,
        "floor_over_recompute": [round(r, 3) for r in ratios],
        "median_ratio": round(statistics.median(ratios), 3),
    }
    write_report(report, args.json_out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

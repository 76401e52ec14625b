"""Probe one Delta MERGE like the engine's, with and without the key-pruning predicate, by CPU and shuffle.

Wall-clock seconds on a shared 2-core machine are noise; the MERGE's executor CPU time and shuffle bytes
(summed from Spark's event log over the MERGE's jobs only) are not. Each variant runs in a fresh process:

    .venv/bin/python bench/merge_probe.py --rows 2000000 --variant plain
    .venv/bin/python bench/merge_probe.py --rows 2000000 --variant pruned

The output table (10 columns, 8 files, CDF and deletion vectors on) gets a source of 0.24% of its rows:
two thirds updates, one third deletes, plus 0.04% inserts, spread evenly over the key range.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

from delta.tables import DeltaTable
from pyspark.sql import functions as F

from airflow_provider_fkjoin.engine import get_spark

WORKDIR = Path(__file__).parent / "data" / "merge_probe"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--variant", choices=["plain", "pruned"], required=True)
    args = parser.parse_args()
    events = WORKDIR / f"events_{args.variant}"
    shutil.rmtree(events, ignore_errors=True)
    events.mkdir(parents=True)
    spark = get_spark(
        "local[2]",
        conf={
            "spark.sql.shuffle.partitions": "8",
            "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": str(events),
            "spark.eventLog.compress": "false",
            "spark.eventLog.rolling.enabled": "false",
        },
    )
    base = WORKDIR / f"base_{args.rows}"
    if not base.exists():
        spark.range(args.rows).select(
            F.col("id").alias("k"),
            (F.col("id") % 100000).alias("fk"),
            (F.rand(1) * 100).alias("amount"),
            F.concat(F.lit("s"), (F.col("id") % 7).cast("string")).alias("status"),
            (F.col("id") % 13).alias("qty"),
            F.current_timestamp().alias("ts"),
            F.lit("web").alias("channel"),
            F.concat(F.lit("name"), (F.col("id") % 100000).cast("string")).alias("name"),
            F.lit("eu").alias("region"),
            F.lit(1).alias("tier"),
        ).repartition(8).write.format("delta").option("delta.enableChangeDataFeed", "true").option(
            "delta.enableDeletionVectors", "true"
        ).save(str(base))
    output = WORKDIR / f"out_{args.rows}_{args.variant}"
    shutil.rmtree(output, ignore_errors=True)
    shutil.copytree(base, output)
    table = DeltaTable.forPath(spark, str(output))
    target = spark.read.format("delta").load(str(output))
    columns = target.columns
    values = [c for c in columns if c != "k"]
    changed = args.rows // 500
    step = args.rows // changed
    keys = spark.range(changed).select((F.col("id") * step).alias("k"))
    updates = (
        target.join(keys.where(F.col("k") % (3 * step) != 0), "k")
        .withColumn("amount", F.col("amount") + 1)
        .withColumn("_p", F.lit(True))
    )
    deletes = keys.where(F.col("k") % (3 * step) == 0).withColumn("_p", F.lit(False))
    inserts = (
        spark.range(changed // 5)
        .select((F.col("id") + args.rows).alias("k"))
        .crossJoin(target.limit(1).drop("k"))
        .withColumn("_p", F.lit(True))
    )
    source = updates.unionByName(deletes, allowMissingColumns=True).unionByName(inserts).persist()
    source.count()
    condition = F.expr("t.k = s.k")
    if args.variant == "pruned":
        condition = condition & F.col("t.k").isin([row[0] for row in source.select("k").collect()])
    assignments = {c: f"s.{c}" for c in columns}
    differs = "NOT (" + " AND ".join(f"t.{c} <=> s.{c}" for c in values) + ")"
    spark.sparkContext.setJobGroup("merge", "merge")
    started = time.monotonic()
    (
        table.alias("t")
        .merge(F.broadcast(source).alias("s"), condition)
        .whenMatchedDelete("NOT s._p")
        .whenMatchedUpdate(f"s._p AND {differs}", set=assignments)
        .whenNotMatchedInsert("s._p", values=assignments)
        .execute()
    )
    wall = time.monotonic() - started
    metrics = table.history(1).select("operationMetrics").first()[0]
    spark.stop()
    cpu_ns = shuffle = 0
    stages: set[int] = set()
    for log in events.rglob("*"):
        if log.is_dir():
            continue
        for line in log.open():
            event = json.loads(line)
            kind = event["Event"]
            if kind == "SparkListenerJobStart":
                if (event.get("Properties") or {}).get("spark.jobGroup.id") == "merge":
                    stages.update(event["Stage IDs"])
            elif kind == "SparkListenerTaskEnd" and event["Stage ID"] in stages:
                task = event.get("Task Metrics") or {}
                cpu_ns += task.get("Executor CPU Time", 0)
                shuffle += (task.get("Shuffle Write Metrics") or {}).get("Shuffle Bytes Written", 0)
    print(
        json.dumps(
            {
                "variant": args.variant,
                "rows": args.rows,
                "wall_s": round(wall, 2),
                "merge_cpu_s": round(cpu_ns / 1e9, 2),
                "merge_shuffle_mb": round(shuffle / 1e6, 1),
                "rows_updated": metrics.get("numTargetRowsUpdated"),
                "rows_deleted": metrics.get("numTargetRowsDeleted"),
                "rows_inserted": metrics.get("numTargetRowsInserted"),
            }
        )
    )


if __name__ == "__main__":
    main()

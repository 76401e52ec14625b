"""A driver with a small heap that holds a join state larger than the heap could: run by
``tests/fk/test_fk_state_memory.py`` in a process of its own (the heap size is fixed when the JVM starts).

It writes orders (``--left-rows``) and customers (a tenth as many) as Delta tables, refreshes the
foreign-key join with ``warm_state: true`` (the full rebuild, then refreshes the state serves), checks
each output against the join recomputed from the inputs by Spark in the same process, then runs an
unrelated query. It prints one JSON line after ``PROBE ``: the refreshes' ``warm_state`` reports, the
comparisons, and the JVM's heap and garbage-collection figures.

    python tests/support/state_memory_probe.py /tmp/w --left-rows 1500000 --heap 512m --budget 16m
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

MARKER = "PROBE "


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("root", type=Path)
    parser.add_argument("--left-rows", type=int, default=1_000_000)
    parser.add_argument("--heap", default="512m")
    parser.add_argument("--budget", default="16m")
    parser.add_argument("--refreshes", type=int, default=3)
    args = parser.parse_args()

    from pyspark.sql import functions as F

    from airflow_provider_fkjoin.engine import get_spark, run_spec

    spark = get_spark(
        "local[2]",
        {
            "spark.driver.memory": args.heap,
            "spark.fkjoin.state.memoryBytes": args.budget,
            "spark.sql.shuffle.partitions": "2",
            "spark.ui.enabled": "false",
        },
    )
    left_rows, right_rows = args.left_rows, max(1, args.left_rows // 10)
    orders, customers, out = (str(args.root / name) for name in ("orders", "customers", "out"))
    cdf = {"delta.enableChangeDataFeed": "true"}
    (
        spark.range(left_rows)
        .select(
            F.col("id").alias("order_id"),
            (F.col("id") * 7919 % right_rows).alias("customer_id"),
            (F.col("id") % 1000 / 10).alias("amount"),
        )
        .write.format("delta")
        .options(**cdf)
        .save(orders)
    )
    (
        spark.range(right_rows)
        .select(F.col("id").alias("customer_id"), F.concat(F.lit("c"), F.col("id")).alias("name"))
        .write.format("delta")
        .options(**cdf)
        .save(customers)
    )
    spec = {
        "kind": "foreign_key_join",
        "left": {"path": orders, "key": ["order_id"]},
        "right": {"path": customers, "key": ["customer_id"]},
        "foreign_key": ["customer_id"],
        "how": "left",
        "output": {"path": out},
        "warm_state": True,
    }

    def differs(result: dict[str, Any]) -> int:
        """Rows in one of the output and the join recomputed at the result's versions, not the other."""
        inputs = result["inputs"]
        left = spark.read.format("delta").option("versionAsOf", inputs["left"]["to_version"]).load(orders)
        right = (
            spark.read.format("delta").option("versionAsOf", inputs["right"]["to_version"]).load(customers)
        )
        want = left.join(right, "customer_id", "left").select("order_id", "customer_id", "amount", "name")
        got = spark.read.format("delta").load(out).select(*want.columns)
        return want.exceptAll(got).count() + got.exceptAll(want).count()

    reports, differences = [], []
    result = run_spec(spec, spark)
    reports.append(result["warm_state"])
    differences.append(differs(result))
    for step in range(args.refreshes):
        changed = spark.range(step * 1000, step * 1000 + 1000).select(
            F.col("id").alias("order_id"),
            ((F.col("id") + step + 1) % right_rows).alias("customer_id"),
            F.lit(float(step)).alias("amount"),
        )
        changed.createOrReplaceTempView("probe_changes")
        spark.sql(
            f"MERGE INTO delta.`{orders}` t USING probe_changes s ON t.order_id = s.order_id "
            "WHEN MATCHED THEN UPDATE SET *"
        ).collect()
        spark.sql(f"UPDATE delta.`{customers}` SET name = 'n{step}' WHERE customer_id < 100").collect()
        result = run_spec(spec, spark)
        reports.append(result["warm_state"])
        differences.append(differs(result))

    started = time.perf_counter()
    unrelated = (
        spark.read.format("delta")
        .load(orders)
        .groupBy("customer_id")
        .agg(F.sum("amount").alias("total"))
        .join(spark.read.format("delta").load(customers), "customer_id")
        .count()
    )
    unrelated_s = time.perf_counter() - started

    jvm = spark.sparkContext._jvm
    runtime = jvm.java.lang.Runtime.getRuntime()
    for _ in range(2):
        jvm.java.lang.System.gc()
    beans = jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()
    print(
        MARKER
        + json.dumps(
            {
                "reports": reports,
                "differences": differences,
                "unrelated_rows": unrelated,
                "unrelated_s": round(unrelated_s, 2),
                "heap_used_bytes": int(runtime.totalMemory() - runtime.freeMemory()),
                "heap_max_bytes": int(runtime.maxMemory()),
                "gc_s": round(sum(int(bean.getCollectionTime()) for bean in beans) / 1000, 2),
                "right_rows": right_rows,
            },
            default=str,
        ),
        flush=True,
    )
    spark.stop()


if __name__ == "__main__":
    main()

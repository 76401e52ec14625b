#!/usr/bin/env python
"""Probe: what Delta's idempotent-write options (``txnAppId``/``txnVersion``) add to one small append.

The engine appends to append-only outputs (the stream-mode windowed join, the stream-table join) with a
transaction id, so that a second writer of the same refresh is a no-op. Delta 4.4 answers "has this
application committed this version?" from ``snapshot.transactions``, which computes the read version's
full state ("Compute snapshot for version: N"), although the ``.crc`` file already lists the table's
set-transactions. This probe times 100-row appends to a table of 100K rows and a few commits, with and
without those options, and with the engine's output properties (change data feed, deletion vectors), and
lists the Spark SQL executions of the last append of each kind.

    .venv/bin/python bench/txn_append_probe.py --repeat 4
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))

from bench_common import bench_spark, parse_with_common  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    return parse_with_common(p, "txn_append", argv, repeat=4)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from fixed_cost_probe import _describe as describe

    from airflow_provider_fkjoin.engine.merge import OUTPUT_PROPERTIES

    spark = bench_spark(args)
    store = spark._jsparkSession.sharedState().statusStore()  # type: ignore[attr-defined]
    context = spark.sparkContext._jsc.sc()  # type: ignore[attr-defined]

    def executions() -> list:
        context.listenerBus().waitUntilEmpty()
        listed = store.executionsList()
        return [listed.apply(i) for i in range(listed.size())]

    seq = 0
    for table, properties in (("plain", {}), ("output properties", OUTPUT_PROPERTIES)):
        path = str(args.workdir / table.replace(" ", "_"))
        writer = spark.range(100_000).selectExpr("id", "id * 2 AS v").write.format("delta")
        for name, value in properties.items():
            writer = writer.option(name, value)
        writer.save(path)
        for _ in range(12):
            spark.range(10).selectExpr("id", "id AS v").write.format("delta").mode("append").save(path)
        for variant in ("no transaction id", "txnAppId + txnVersion", "no transaction id (again)"):
            seconds, listed = [], []
            for _ in range(args.repeat):
                seq += 1
                writer = spark.range(100).selectExpr("id", "id AS v").coalesce(1).write.format("delta")
                if variant.startswith("txn"):
                    writer = writer.option("txnAppId", "probe").option("txnVersion", seq)
                last = max(int(e.executionId()) for e in executions())
                started, started_ms = time.perf_counter(), time.time() * 1000
                writer.mode("append").save(path)
                seconds.append(round(time.perf_counter() - started, 3))
                listed = [describe(e, started_ms) for e in executions() if int(e.executionId()) > last]
            print(f"[txn-append] {table}, {variant}: {seconds} (median {statistics.median(seconds)})")
            for line in listed:
                print(f"    {line}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

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


def write_table(spark, path: str, services: int, minutes: int) -> int:
    """Write the windowed table at ``path``: ``services`` x ``minutes`` one-minute windows (``service``,
    ``ws``, ``we``, ``errors``), laid out by window start; returns its rows. Shared with ``bench.sweep``.

    >>> write_table(spark, "/tmp/wt/errors_per_min", services=10, minutes=100)  # doctest: +SKIP
    1000
    """
    from pyspark.sql import functions as F

    rows = services * minutes
    windows = (
        spark.range(rows)
        .select(
            F.concat(F.lit("svc"), (F.col("id") % services).cast("string")).alias("service"),
            F.timestamp_seconds(F.lit(START_S) + F.floor(F.col("id") / services) * MINUTE_S).alias("ws"),
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
        .save(path)
    )
    return rows


def make_spec(table: str, out: str, offset: str = "-7d") -> dict:
    """The benchmark's join: each window of ``table`` with the same service's window ``offset`` earlier (a
    left join), written to ``out``."""
    window = {"start": "ws", "end": "we"}
    return {
        "kind": "windowed_join",
        "mode": "table",
        "left": {"path": table, "key": ["service"], "window": window},
        "right": {"path": table, "key": ["service"], "window": {**window, "offset": offset}},
        "how": "left",
        "columns": {"errors": "l.errors", "errors_week_ago": "r.errors"},
        "output": {"path": out},
    }


def change_table(spark, table: str, modulus: int, index: int, services: int | None = None) -> None:
    """Round ``index``'s change, one UPDATE commit: ``errors + 1`` in 1 in ``modulus`` windows. Picked by a
    hash of the window and ``index`` (about 1 in ``modulus``, spread over the whole table: late updates of
    old windows), or, given the table's ``services``, every ``modulus``-th window (in
    :func:`write_table`'s order) from ``index``: exactly that share, at least one row however small the
    table (``bench.sweep``).

    >>> change_table(spark, "/tmp/wt/errors_per_min", 100, 0, services=10)  # 10 of 1,000  # doctest: +SKIP
    """
    if services is None:
        picked = f"pmod(xxhash64(service, ws, {index}), {modulus}) = 0"
    else:
        ordinal = (
            f"(unix_seconds(ws) - {START_S}) DIV {MINUTE_S} * {services} "
            "+ CAST(substring(service, 4) AS BIGINT)"
        )
        picked = f"pmod({ordinal}, {modulus}) = {index % modulus}"
    spark.sql(f"UPDATE delta.`{table}` SET errors = errors + 1 WHERE {picked}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from pyspark.sql import functions as F

    from airflow_provider_fkjoin.engine import run_spec

    spark = bench_spark(args)
    table, out, baseline = (str(args.workdir / n) for n in ("errors_per_min", "vs_last_week", "baseline"))
    minutes = args.days * 1440
    rows = args.services * minutes

    started = time.perf_counter()
    write_table(spark, table, args.services, minutes)
    generate_s = round(time.perf_counter() - started, 2)
    spec = make_spec(table, out)
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
        change_table(spark, table, modulus, index)
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

"""Benchmark: the self-join (KIP-862, one read) vs the same join two-sided (``optimize: false``).

One append-only event table of card transactions (``--events`` rows over ``--keys`` cards, spread over
``--span-days`` in arrival order with a minute of jitter; written twice, one copy per join, so that each
join pays for loading its input's new version), joined with itself inside a 10-minute window
(1 minute of grace), inner. Two outputs of the same join, side by side in one Spark session:

* ``self_join``: ``kind: self_join`` (what a ``windowed_join`` of the table with itself runs as), and
* ``two_sided``: ``kind: windowed_join`` with ``left = right`` and ``optimize: false``.

Both first runs are timed, then each round appends ``--new-share`` new events (the newest times) and
refreshes both, alternating which goes first. For every run it records the seconds, the time to each
engine phase, and what Spark's stages read and shuffled (input bytes, shuffle read and write bytes,
summed over the stages the run completed), which is where one read instead of two must show. Both
outputs' row counts are printed and must agree (correctness is the test suite's job).

    python -m bench.self_join --events 10000000 --keys 1000000 --repeat 4 \\
        --json-out bench/results/self_join_10m.json
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from bench.common import (
    PhaseTee,
    bench_spark,
    command_line,
    parse_with_common,
    phases_seen,
    trace_phases,
    write_report,
)

DAY_MS = 86_400_000
START_MS = 1_735_689_600_000  # 2025-01-01
STAGE_METRICS = ("inputBytes", "shuffleReadBytes", "shuffleWriteBytes", "outputBytes")


def txn_rows(spark, keys: int, first: int, count: int, t_from: int, t_span: int):
    """``count`` transactions numbered from ``first`` over ``keys`` cards, in arrival order over ``t_span``
    ms from ``t_from``, with a minute of jitter."""
    from pyspark.sql import functions as F

    ids = spark.range(first, first + count)
    return ids.select(
        F.col("id").alias("txn_id"),
        F.concat(F.lit("card"), F.pmod(F.xxhash64("id", F.lit(7)), F.lit(keys)).cast("string")).alias(
            "card_id"
        ),
        (
            F.lit(t_from)
            + ((F.col("id") - F.lit(first)) * F.lit(t_span) / F.lit(max(count, 1))).cast("long")
            + F.pmod(F.xxhash64("id", F.lit(8)), F.lit(60_000))
        ).alias("t"),
        (F.pmod(F.col("id"), F.lit(5000)) / 10).alias("amount"),
        F.col("id").alias("offset"),
    )


class StageTotals:
    """What Spark's completed stages read and shuffled so far, from the application's status store (the
    data behind the UI's Stages tab; kept for every stage: ``spark.ui.retainedStages`` is raised)."""

    def __init__(self, spark) -> None:
        self.spark = spark
        self.context = spark.sparkContext._jsc.sc()  # type: ignore[attr-defined]

    def now(self) -> dict[str, int]:
        self.context.listenerBus().waitUntilEmpty()
        gateway = self.spark.sparkContext._gateway  # type: ignore[attr-defined]
        no_quantiles = gateway.new_array(gateway.jvm.double, 0)
        stages = self.context.statusStore().stageList(
            None, False, False, no_quantiles, gateway.jvm.java.util.ArrayList()
        )
        totals = dict.fromkeys(STAGE_METRICS, 0)
        for index in range(stages.size()):
            stage = stages.apply(index)
            if str(stage.status()) != "COMPLETE":
                continue
            for metric in STAGE_METRICS:
                totals[metric] += int(getattr(stage, metric)())
        return totals


def timed_run(run_spec, spec: dict[str, Any], spark, totals: StageTotals, tee: PhaseTee) -> dict[str, Any]:
    """One refresh: seconds, seconds to each phase, the result's rows, and the stage bytes it added."""
    before = totals.now()
    began = time.perf_counter()
    with phases_seen(tee) as seen:
        result = run_spec(spec, spark=spark)
    seconds = round(time.perf_counter() - began, 2)
    after = totals.now()
    marks: dict[str, float] = {}
    for name, at in seen:
        marks.setdefault(name, round(at - began, 2))
    return {
        "seconds": seconds,
        "phases": marks,
        "mode": result["mode"],
        "optimized": result.get("optimized"),
        "pairs": result["rows"]["pairs"],
        "bytes": {metric: after[metric] - before[metric] for metric in STAGE_METRICS},
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.self_join", description=__doc__.split("\n\n")[0])
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--keys", type=int, default=100_000)
    p.add_argument("--span-days", type=float, default=1.0, help="the days the events cover")
    p.add_argument("--new-share", type=float, default=0.001, help="new events per refresh")
    return parse_with_common(p, "self_join", argv, repeat=3)


def _ratio(optimized: float, unoptimized: float) -> float:
    return round(unoptimized / optimized, 2) if optimized else float("inf")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from airflow_provider_fkjoin.engine import run_spec

    tee = trace_phases()
    spark = bench_spark(args, {"spark.ui.retainedStages": "100000", "spark.ui.retainedJobs": "100000"})
    totals = StageTotals(spark)
    # Each join reads its own copy of the same rows: the first refresh after an append pays for loading
    # the input's new version, so a shared table would favour whichever join runs second.
    tables = {name: args.workdir / f"card_txns_{name}" for name in ("self_join", "two_sided")}
    span = int(args.span_days * DAY_MS)

    def append(frame, mode: str = "append") -> None:
        for table in tables.values():
            frame.write.format("delta").mode(mode).option("delta.enableChangeDataFeed", "true").save(
                str(table)
            )

    started = time.perf_counter()
    rows_per_file = 200_000
    frame = txn_rows(spark, args.keys, 0, args.events, START_MS, span)
    append(
        frame.repartitionByRange(max(args.events // rows_per_file, 1), "t").sortWithinPartitions("t"),
        "overwrite",
    )
    generate_s = round(time.perf_counter() - started, 2)
    txns = {"key": ["card_id"], "time": "t", "order_by": ["offset"]}
    own = {name: {"path": str(table), **txns} for name, table in tables.items()}
    window = {"before": "10m", "after": "10m", "grace": "1m"}
    columns = {"card_id": "l.card_id", "txn_id": "l.txn_id", "paired_txn_id": "r.txn_id"}
    specs = {
        "self_join": {
            "kind": "self_join",
            "input": own["self_join"],
            "window": window,
            "columns": columns,
            "output": {"path": str(args.workdir / "pairs_self_join")},
        },
        "two_sided": {
            "kind": "windowed_join",
            "mode": "stream",
            "left": own["two_sided"],
            "right": own["two_sided"],
            "window": window,
            "how": "inner",
            "optimize": False,
            "columns": columns,
            "output": {"path": str(args.workdir / "pairs_two_sided")},
        },
    }
    print(f"[self_join] generated {args.events} events in {generate_s}s", flush=True)
    # Warm-up, untimed: both joins' first run and refreshes on a small table, so that no timed run pays
    # the JVM's and Spark's code generation warm-up alone.
    warm = args.workdir / "warm_up"
    txn_rows(spark, 100, 0, 10_000, START_MS, DAY_MS).write.format("delta").option(
        "delta.enableChangeDataFeed", "true"
    ).save(str(warm))
    warm_specs = []
    for name, spec in specs.items():
        side = {"input": {**txns, "path": str(warm)}} if name == "self_join" else {}
        if name == "two_sided":
            side = {"left": {**txns, "path": str(warm)}, "right": {**txns, "path": str(warm)}}
        warm_specs.append({**spec, **side, "output": {"path": str(args.workdir / f"warm_{name}")}})
    for step in range(3):  # a first run, then two refreshes: every code path a timed run takes
        if step:
            txn_rows(spark, 100, 10_000 + step * 10, 10, START_MS + DAY_MS, 60_000).write.format(
                "delta"
            ).mode("append").save(str(warm))
        for spec in warm_specs:
            run_spec(spec, spark=spark)
    first = {name: timed_run(run_spec, spec, spark, totals, tee) for name, spec in specs.items()}
    for name, run in first.items():
        print(f"[self_join] first run {name}: {run}", flush=True)
    if first["self_join"]["pairs"] != first["two_sided"]["pairs"]:
        raise SystemExit("the two joins disagree on the first run's pair count")

    new = max(int(args.events * args.new_share), 1)
    rounds = []
    for index in range(args.repeat):
        append(
            txn_rows(
                spark, args.keys, args.events + index * new, new, START_MS + span + index * 60_000, 60_000
            )
        )
        order = list(specs) if index % 2 == 0 else list(reversed(specs))
        runs = {name: timed_run(run_spec, specs[name], spark, totals, tee) for name in order}
        if runs["self_join"]["pairs"] != runs["two_sided"]["pairs"]:
            raise SystemExit(f"round {index + 1}: the two joins disagree on the pair count")
        rounds.append(runs)
        print(
            f"[self_join] round {index + 1}: self_join {runs['self_join']['seconds']}s, two_sided "
            f"{runs['two_sided']['seconds']}s ({runs['self_join']['pairs']} pairs)",
            flush=True,
        )
    speedups = [_ratio(r["self_join"]["seconds"], r["two_sided"]["seconds"]) for r in rounds]
    report = {
        "command": command_line("bench.self_join"),
        "events": args.events,
        "keys": args.keys,
        "span_days": args.span_days,
        "new_per_refresh": new,
        "generate_s": generate_s,
        "first_run": first,
        "first_run_speedup": _ratio(first["self_join"]["seconds"], first["two_sided"]["seconds"]),
        "rounds": rounds,
        "refresh_speedups": speedups,
        "median_refresh_speedup": statistics.median(speedups) if speedups else None,
    }
    write_report(report, args.json_out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Benchmark: a three-input multiway_join (Joinery's business reviews, plus business owners), refresh vs
recompute.

``--reviews`` reviews over ``--reviews / 10`` businesses (1:N), each business with one owner (1:1), all with
change data feed and deletion vectors. After the first run, each round changes ``--changed-share`` of
each input's rows (a review's stars, a business's name: fanning out to its ~10 reviews, an owner's name)
and times:

* the engine's incremental refresh (``run_spec``), with the time between its phases, and
* the from-scratch recompute: the same three-way join of the whole inputs, written as Delta.

The targets: refresh <= 0.3x the recompute, and refresh time growing <= 1.5x from 1M to 10M reviews
(run the benchmark once per scale). Correctness is the test suite's job; figures are in
``bench/README.md``.

    python -m bench.multiway --reviews 1000000 --json-out bench/results/multiway_1m.json
    python -m bench.multiway --reviews 10000000 --json-out bench/results/multiway_10m.json
"""

from __future__ import annotations

import argparse
import statistics
import time

from bench.common import (
    bench_spark,
    command_line,
    parse_with_common,
    phases_seen,
    same_table,
    trace_phases,
    write_report,
)

PROPERTIES = {"delta.enableChangeDataFeed": "true", "delta.enableDeletionVectors": "true"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.multiway", description=__doc__.split("\n\n")[0])
    p.add_argument("--reviews", type=int, default=1_000_000)
    p.add_argument("--changed-share", type=float, default=0.001, help="rows of each input changed per round")
    return parse_with_common(p, "multiway", argv, repeat=3)


def write_inputs(spark, paths: dict[str, str], reviews: int) -> int:
    """Write the three inputs (``paths["review"]``, ``["business"]``, ``["owner"]``): ``reviews`` reviews
    over ``reviews // 10`` businesses, one owner each; returns the number of businesses. Shared with
    ``bench.sweep``.

    >>> paths = {n: f"/tmp/mw/{n}" for n in ("review", "business", "owner")}
    >>> write_inputs(spark, paths, 1_000)  # doctest: +SKIP
    100
    """
    from pyspark.sql import functions as F

    businesses = max(reviews // 10, 1)

    def write(frame, path: str, key: str) -> None:
        writer = frame.repartitionByRange(max(frame.count() // 1_000_000, 1), key).write.format("delta")
        for name, value in PROPERTIES.items():
            writer = writer.option(name, value)
        writer.save(path)

    write(
        spark.range(reviews).select(
            F.col("id").alias("review_id"),
            F.pmod(F.xxhash64("id"), F.lit(businesses)).alias("biz_id"),
            F.pmod(F.xxhash64("id", F.lit(1)), F.lit(5)).cast("int").alias("stars"),
            F.concat(F.lit("review text "), F.col("id").cast("string")).alias("text"),
        ),
        paths["review"],
        "review_id",
    )
    write(
        spark.range(businesses).select(
            F.col("id").alias("business_id"),
            F.concat(F.lit("business "), F.col("id").cast("string")).alias("name"),
            F.concat(F.lit("city "), (F.col("id") % 500).cast("string")).alias("city"),
        ),
        paths["business"],
        "business_id",
    )
    write(
        spark.range(businesses).select(
            (F.col("id") + F.lit(10**12)).alias("owner_id"),
            F.col("id").alias("business_id"),
            F.concat(F.lit("owner "), F.col("id").cast("string")).alias("owner_name"),
        ),
        paths["owner"],
        "owner_id",
    )
    return businesses


def make_spec(paths: dict[str, str]) -> dict:
    """The benchmark's multiway_join over :func:`write_inputs`' tables, written to ``paths["out"]``."""
    return {
        "kind": "multiway_join",
        "inputs": [
            {
                "name": "review",
                "path": paths["review"],
                "key": ["review_id"],
                "join_keys": ["biz_id"],
                "exclude_fields": ["text"],
            },
            {
                "name": "business",
                "path": paths["business"],
                "key": ["business_id"],
                "join_keys": ["business_id"],
                "aliases": [{"from": "business_id", "to": "biz_id"}],
            },
            {
                "name": "owner",
                "path": paths["owner"],
                "key": ["owner_id"],
                "join_keys": ["business_id"],
                "exclude_fields": ["business_id"],
            },
        ],
        "output": {"path": paths["out"], "pkey": ["review_id"]},
    }


def change_inputs(spark, paths: dict[str, str], modulus: int, index: int, exact: bool = False) -> None:
    """Round ``index``'s change, one UPDATE commit per input: 1 in ``modulus`` rows of each (a review's
    stars, a business's name, an owner's name). The rows are picked by a hash of the key and ``index``
    (about 1 in ``modulus``), or with ``exact`` every ``modulus``-th key from ``index``: exactly that
    share, and at least one row however small the table (``bench.sweep``'s 0.01% of 1,000 rows).

    >>> change_inputs(spark, paths, 1000, 0)  # about 0.1% of each input  # doctest: +SKIP
    """

    def picked(key: str) -> str:
        if exact:
            return f"pmod({key}, {modulus}) = {index % modulus}"
        return f"pmod(xxhash64({key}, {index}), {modulus}) = 0"

    spark.sql(f"UPDATE delta.`{paths['review']}` SET stars = (stars + 1) % 5 WHERE {picked('review_id')}")
    spark.sql(
        f"UPDATE delta.`{paths['business']}` SET name = concat(name, '+') WHERE {picked('business_id')}"
    )
    spark.sql(
        f"UPDATE delta.`{paths['owner']}` SET owner_name = concat(owner_name, '+') "
        f"WHERE {picked('business_id' if exact else 'owner_id')}"
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from airflow_provider_fkjoin.engine import run_spec

    tee = trace_phases()
    spark = bench_spark(args)
    paths = {n: str(args.workdir / n) for n in ("review", "business", "owner", "out", "baseline")}
    started = time.perf_counter()
    businesses = write_inputs(spark, paths, args.reviews)
    generate_s = round(time.perf_counter() - started, 2)
    spec = make_spec(paths)
    started = time.perf_counter()
    first = run_spec(spec, spark=spark)
    first_s = round(time.perf_counter() - started, 2)
    print(f"[multiway] {args.reviews} reviews generated in {generate_s}s; first run {first_s}s", flush=True)

    def recompute() -> float:
        began = time.perf_counter()
        review = spark.read.format("delta").load(paths["review"]).drop("text")
        business = (
            spark.read.format("delta").load(paths["business"]).withColumnRenamed("business_id", "biz_id")
        )
        owner = spark.read.format("delta").load(paths["owner"]).withColumnRenamed("business_id", "biz_id")
        joined = review.join(business, "biz_id").join(owner, "biz_id")
        joined.write.format("delta").mode("overwrite").save(paths["baseline"])
        return round(time.perf_counter() - began, 2)

    modulus = max(round(1 / args.changed_share), 1)
    rounds = []
    for index in range(args.repeat):
        change_inputs(spark, paths, modulus, index)
        began = time.perf_counter()
        with phases_seen(tee) as marks:
            result = run_spec(spec, spark=spark)
        ended = time.perf_counter()
        refresh_s = round(ended - began, 2)
        phases, previous = {}, began
        for name, at in marks:
            # a phase traced more than once (a ``compacting`` per attempt) keeps each duration
            label = (
                name if name not in phases else f"{name}#{sum(k.split('#')[0] == name for k in phases) + 1}"
            )
            phases[label] = round(at - previous, 2)
            previous = at
        recompute_s = recompute()
        counts = {k: result["rows"][k] for k in ("inserted", "updated", "deleted", "join_keys_affected")}
        verified = same_table(spark, paths["out"], paths["baseline"])
        rounds.append({"refresh_s": refresh_s, "recompute_s": recompute_s, "phases": phases, "rows": counts,
                       "verified": verified})  # fmt: skip
        print(
            f"[multiway] round {index + 1}: refresh {refresh_s}s {phases}, recompute {recompute_s}s {counts}"
        )
    ratios = [r["refresh_s"] / r["recompute_s"] for r in rounds]
    report = {
        "command": command_line("bench.multiway"),
        "reviews": args.reviews,
        "businesses": businesses,
        "changed_per_round": f"1 in {modulus} of each input",
        "generate_s": generate_s,
        "first_run_s": first_s,
        "first_rows": first["rows"].get("inserted"),
        "rounds": rounds,
        "median_refresh_s": statistics.median(r["refresh_s"] for r in rounds),
        "median_ratio": round(statistics.median(ratios), 3),
    }
    write_report(report, args.json_out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

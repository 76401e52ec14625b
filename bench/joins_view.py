"""Benchmark: the Airflow UI's Joins view over 50 outputs, as the api-server computes it.

Builds one real foreign-key output (a full refresh, an incremental one, then an input moved without a
refresh: a lag to report) and copies it to ``--outputs`` outputs, each a complete Delta table. A DAG with
one join task per output is serialized and deserialized, as the api-server holds it. Then, ``--repeat``
times after one warm-up, times what ``GET /fkjoin/api/outputs`` does besides authentication: find the join
tasks in the DAG, read every output's freshness and each input's lag from the Delta logs (no JVM), order
the rows and encode the JSON. The page itself only renders that JSON.

    python -m bench.joins_view --outputs 50 --repeat 5 --json-out bench/results/joins_view.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile

from bench.common import (
    DATA_DIR,
    add_common,
    bench_spark,
    command_line,
    json_out,
    median,
    timed,
    write_report,
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.joins_view", description=__doc__.split("\n\n")[0])
    add_common(p, DATA_DIR / "joins_view", repeat=5)
    p.add_argument("--outputs", type=int, default=50, help="outputs listed by the view")
    args = p.parse_args(argv)
    args.json_out = json_out(args.json_out, "joins_view")
    return args


def _build_outputs(args: argparse.Namespace) -> list[str]:
    """One real output refreshed twice, an input moved after, copied to ``--outputs`` locations."""
    from airflow_provider_fkjoin.engine import run_spec

    spark = bench_spark(args)
    shutil.rmtree(args.workdir, ignore_errors=True)
    args.workdir.mkdir(parents=True)
    orders, customers, first = (str(args.workdir / n) for n in ("orders", "customers", "out_000"))
    cdf = {"delta.enableChangeDataFeed": "true"}
    spark.range(1000).selectExpr(
        "id AS order_id", "id % 100 AS customer_id", "id * 1.0 AS amount"
    ).write.format("delta").options(**cdf).save(orders)
    spark.range(100).selectExpr("id AS customer_id", "CAST(id AS STRING) AS name").write.format(
        "delta"
    ).options(**cdf).save(customers)
    spec = {
        "kind": "foreign_key_join",
        "left": {"path": orders, "key": ["order_id"]},
        "right": {"path": customers, "key": ["customer_id"]},
        "foreign_key": ["customer_id"],
        "output": {"path": first},
    }
    run_spec(spec, spark=spark)
    spark.sql(f"UPDATE delta.`{orders}` SET amount = amount + 1 WHERE order_id < 10")
    run_spec(spec, spark=spark)
    spark.sql(f"UPDATE delta.`{customers}` SET name = 'renamed' WHERE customer_id = 7")
    spark.stop()
    locations = [first]
    for i in range(1, args.outputs):
        location = str(args.workdir / f"out_{i:03d}")
        shutil.copytree(first, location)
        locations.append(location)
    return locations


def _served_dag(locations: list[str]):
    """A DAG with one join task per output, as the api-server deserializes it."""
    from airflow.sdk import DAG
    from airflow.serialization.serialized_objects import DagSerialization

    from airflow_provider_fkjoin.operators import ForeignKeyJoinOperator

    with DAG("fkjoin_bench_joins_view", schedule=None) as dag:
        for i, location in enumerate(locations):
            ForeignKeyJoinOperator(
                task_id=f"join_{i:03d}",
                left={"path": "/unused/left", "key": ["order_id"]},
                right={"path": "/unused/right", "key": ["customer_id"]},
                foreign_key=["customer_id"],
                output=location,
            )
    return DagSerialization.from_dict(DagSerialization.to_dict(dag))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="fkjoin-bench-airflow-"))
    os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
    locations = _build_outputs(args)
    from airflow_provider_fkjoin.plugins.joins_view import by_lag, join_tasks, output_row, read_freshness

    dag = _served_dag(locations)

    def listing() -> bytes:
        tasks = join_tasks([dag])
        rows = [output_row(task, *read) for task, read in zip(tasks, read_freshness(tasks), strict=True)]
        return json.dumps({"outputs": by_lag(rows)}, default=str).encode()

    warm_s, body = timed(listing)
    runs = [timed(listing)[0] for _ in range(args.repeat)]
    payload = json.loads(body)["outputs"]
    assert len(payload) == args.outputs and all(row["error"] is None for row in payload), payload[:2]
    assert all(row["inputs"]["right"]["lag_versions"] == 1 for row in payload), payload[0]
    report = {
        "benchmark": "joins_view",
        "command": command_line("bench.joins_view"),
        "outputs": args.outputs,
        "first_s": round(warm_s, 3),
        "listing_s": [round(s, 3) for s in runs],
        "median_s": round(median(runs) or 0.0, 3),
        "response_bytes": len(body),
        "target_s": 1.0,
    }
    write_report(report, args.json_out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Benchmark: the same FK refreshes on local disk and on an S3-protocol server, side by side.

Two sizes: ``small`` (1,000 orders x 100 customers, one order and one customer changed per refresh: the
fixed cost of a refresh) and ``1m`` (1,000,000 orders x 100,000 customers, 10,000 orders and 1,000
customers changed per refresh). For each store (``local``: a folder; ``s3``: a bucket of a moto server
started here on 127.0.0.1, through Hadoop's S3A connector) it times the first (full) refresh and
``--repeat`` incremental ones, and on S3 counts the requests of each incremental refresh by kind
(listings, reads, HEADs, writes) from the server's access log.

    python -m bench.object_store --sizes small,1m --repeat 3
    python -m bench.object_store --quick        # smoke: the small size once on each store

A local S3-protocol server is not S3: it answers in microseconds from memory, on the same machine, so the
gap it shows is the S3A connector's and the engine's own request work, not the network's.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench.common import DATA_DIR, add_common, command_line, json_out, median, spark_session, write_report

SIZES = {
    "small": {"orders": 1_000, "customers": 100, "orders_changed": 1, "customers_changed": 1},
    "1m": {"orders": 1_000_000, "customers": 100_000, "orders_changed": 10_000, "customers_changed": 1_000},
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.object_store", description=__doc__.split("\n\n")[0])
    add_common(p, DATA_DIR / "object_store", repeat=3)
    p.add_argument("--sizes", default="small,1m", help="comma list of small, 1m")
    p.add_argument("--stores", default="local,s3", help="comma list of local, s3")
    p.add_argument("--quick", action="store_true", help="the small size, one incremental refresh")
    args = p.parse_args(argv)
    if args.quick:
        args.sizes, args.repeat = "small", 1
    args.json_out = json_out(args.json_out, "object_store")
    return args


def _write_inputs(spark, root: str, size: dict[str, int]) -> dict[str, str]:
    orders, customers = f"{root}/orders", f"{root}/customers"
    cdf = {"delta.enableChangeDataFeed": "true"}
    spark.range(size["orders"]).selectExpr(
        "id AS order_id", f"id % {size['customers']} AS customer_id", "CAST(id AS DOUBLE) AS amount"
    ).write.format("delta").options(**cdf).save(orders)
    spark.range(size["customers"]).selectExpr("id AS customer_id", "concat('c', id) AS name").write.format(
        "delta"
    ).options(**cdf).save(customers)
    return {"orders": orders, "customers": customers}


def _change(spark, paths: dict[str, str], size: dict[str, int], step: int) -> None:
    spark.sql(
        f"UPDATE delta.`{paths['orders']}` SET amount = amount + {step} "
        f"WHERE order_id < {size['orders_changed']}"
    )
    spark.sql(
        f"UPDATE delta.`{paths['customers']}` SET name = concat(name, '{step}') "
        f"WHERE customer_id < {size['customers_changed']}"
    )


def _kind(method: str, query: str) -> str:
    if method == "GET":
        return "list" if "list-type" in query else "read"
    return "head" if method == "HEAD" else "write"


def phase_split(result: dict[str, Any]) -> dict[str, float]:
    """Seconds spent reaching each phase from the one before (the result's ``phases`` are seconds from the
    refresh's start), and ``rest``: after the last phase to the end.

    >>> phase_split({"phases": {"pinned": 0.5, "changes_read": 1.25}, "duration_s": 2.0})
    {'pinned': 0.5, 'changes_read': 0.75, 'rest': 0.75}
    """
    split, before = {}, 0.0
    for name, at in sorted(result.get("phases", {}).items(), key=lambda item: item[1]):
        split[name], before = round(at - before, 3), at
    split["rest"] = round(result["duration_s"] - before, 3)
    return split


def run_one(spark, root: str, size_name: str, repeat: int, server: Any | None) -> dict[str, Any]:
    from airflow_provider_fkjoin.engine import run_spec

    size = SIZES[size_name]
    paths = _write_inputs(spark, root, size)
    spec = {
        "kind": "foreign_key_join",
        "left": {"path": paths["orders"], "key": ["order_id"]},
        "right": {"path": paths["customers"], "key": ["customer_id"]},
        "foreign_key": ["customer_id"],
        "how": "left",
        "output": {"path": f"{root}/out"},
    }
    started = time.perf_counter()
    full = run_spec(spec, spark=spark)
    full_s = time.perf_counter() - started
    assert full["mode"] == "full", full
    incremental, requests, phases, paths_taken = [], [], [], []
    for step in range(1, repeat + 1):
        _change(spark, paths, size, step)
        mark = server.mark() if server else 0
        started = time.perf_counter()
        result = run_spec(spec, spark=spark)
        incremental.append(time.perf_counter() - started)
        assert result["mode"] == "incremental", result
        phases.append(phase_split(result))
        paths_taken.append(f"{result.get('write_path')}/{result.get('strategy', {}).get('chosen')}")
        if server:
            requests.append(dict(Counter(_kind(r.method, r.query) for r in server.requests(mark))))
    return {"full_s": round(full_s, 2), "full_phases": phase_split(full),
            "incremental_s": [round(s, 2) for s in incremental],
            "incremental_median_s": round(median(incremental) or 0, 2), "incremental_phases": phases,
            "write_path/strategy": paths_taken, "requests": requests}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from support.s3 import start_server  # the tests' moto server, started the same way

    stores = [s.strip() for s in args.stores.split(",") if s.strip()]
    sizes = [s.strip() for s in args.sizes.split(",") if s.strip()]
    scratch = Path(tempfile.mkdtemp(prefix="fkjoin-object-store-"))
    server = start_server(scratch) if "s3" in stores else None
    conf = {"spark.hadoop.fs.s3a.path.style.access": "true"}
    if server:
        server.create_bucket()
        conf |= server.spark_conf()
    spark = spark_session(args.master, conf)
    report: dict[str, Any] = {"command": command_line("bench.object_store"), "results": {}}
    try:
        for size in sizes:
            for store in stores:
                root = server.url(f"bench/{size}") if store == "s3" and server else str(scratch / size)
                figures = run_one(spark, root, size, args.repeat, server if store == "s3" else None)
                report["results"][f"{size}/{store}"] = figures
                print(f"{size:>5} {store:>5}: {figures}", flush=True)
    finally:
        spark.stop()
        if server:
            server.stop()
    write_report(report, args.json_out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

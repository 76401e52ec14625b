"""What a refresh costs in requests on an object store: the S3-protocol server's access log counts the
requests of one small incremental FK refresh (listings of ``_delta_log/``, object reads, HEADs, writes),
and each kind of request is bounded, so a change that multiplies the engine's log reads, listings or
``DESCRIBE``s fails here. The bounds are the counts measured when they were set, with some room.
"""

from __future__ import annotations

from collections import Counter

from delta.tables import DeltaTable
from helpers import CUSTOMERS, ORDERS, oracle, output_state, write
from support.s3 import Request, S3Server, orders_join

from airflow_provider_fkjoin.engine import run_spec

#: Requests of one small incremental refresh, by kind, at most: measured 55 listings, 15 reads, 60 HEADs
#: (S3A probing a path: a HEAD, then a listing) and 7 writes, with about a quarter more room (76, 18, 78
#: and 7 while the ownership check and the plan also read each table's newest commit).
BOUNDS = {"list": 70, "read": 20, "head": 75, "write": 10}


def kind_of(request: Request) -> str:
    if request.method == "GET" and "list-type" in request.query:
        return "list"
    if request.method == "GET":
        return "read"
    if request.method == "HEAD":
        return "head"
    return "write"  # PUT, POST (multipart), DELETE


def test_requests_of_an_incremental_refresh_are_bounded(s3: S3Server, s3_spark) -> None:
    spark = s3_spark
    root = s3.url("costs")
    write(spark, [(i, i % 5, float(i)) for i in range(50)], ORDERS, root / "orders")
    write(spark, [(i, f"c{i}") for i in range(5)], CUSTOMERS, root / "customers")
    spec = orders_join(root)
    run_spec(spec, spark=spark)
    DeltaTable.forPath(spark, str(root / "orders")).update("order_id = 7", {"amount": "70.0"})
    mark = s3.mark()
    result = run_spec(spec, spark=spark)
    counts = Counter(kind_of(r) for r in s3.requests(mark))
    assert result["mode"] == "incremental", result
    assert output_state(spark, root / "out") == oracle(spark, result, "left")
    print(f"requests of one incremental refresh: {dict(counts)}")
    over = {kind: (counts[kind], bound) for kind, bound in BOUNDS.items() if counts[kind] > bound}
    assert not over, f"requests over their bounds (count, bound): {over}; all: {dict(counts)}"

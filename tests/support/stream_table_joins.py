"""Stream-table lookup joins (``stream_table_join``): the orders stream and products table schemas, the spec
joining them, and the output's rows."""

from __future__ import annotations

from pathlib import Path

from helpers import read_rows

ORDERS = "order_id long, product_id long, qty int"
PRODUCTS = "product_id long, name string"


def out_rows(spark, path: Path) -> list[tuple]:
    return sorted((tuple(r.values()) for r in read_rows(spark, path)), key=repr)


def join_spec(stream: Path, table: Path, out: Path, **extra) -> dict:
    return {
        "kind": "stream_table_join",
        "stream": {"path": str(stream), "key": ["order_id"]},
        "table": {"path": str(table), "key": ["product_id"]},
        "key_mapper": ["product_id"],
        "output": {"path": str(out)},
        **extra,
    }

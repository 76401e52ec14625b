"""A global table over a keyed source caught up by recomputing (``refresh_strategy: recompute``): the
source at its pinned version compared with the global table key by key, only the rows that differ
committed. Each catch-up is checked against the source's rows at the pinned version read in Python (the
oracle), and against a twin caught up by the incremental plan: the same rows, the same counts and the
same change feed, refresh after refresh."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import append_rows, create_table, delete_keys, read_changes, read_rows, upsert
from pyspark.sql import SparkSession

from airflow_provider_fkjoin.engine import InputDataError, run_spec

SOURCE = "product_id INT, name STRING, price INT"


def _spec(source: str, out: Path, strategy: str) -> dict[str, Any]:
    return {
        "kind": "global_table_bootstrap",
        "source": {"path": source, "key": ["product_id"]},
        "output": {"path": str(out)},
        "refresh_strategy": strategy,
    }


def _feed(spark: SparkSession, path: Path, version: int) -> list[tuple[Any, ...]]:
    return sorted(
        (row["_change_type"], row["product_id"], row["name"], row["price"])
        for row in read_changes(spark, str(path), version, version)
    )


def test_a_recomputed_catch_up_equals_the_incremental_one(spark: SparkSession, tmp_path: Path) -> None:
    source = str(tmp_path / "products")
    create_table(spark, source, [{"product_id": i, "name": f"p{i}", "price": i} for i in range(6)], SOURCE)
    specs = {s: _spec(source, tmp_path / s, s) for s in ("incremental", "recompute")}
    for spec in specs.values():
        assert run_spec(spec, spark=spark)["mode"] == "full"
    batches = [
        lambda: upsert(spark, source, [{"product_id": 1, "name": "renamed", "price": 1}], ["product_id"]),
        lambda: (
            delete_keys(spark, source, [2, 3], ["product_id"]),
            append_rows(spark, source, [{"product_id": None, "name": "no key", "price": 0}]),
        ),
        lambda: upsert(
            spark,
            source,
            [{"product_id": 2, "name": "back", "price": 2}, {"product_id": 9, "name": "new", "price": None},
             {"product_id": 4, "name": "p4", "price": 4}],  # product 4 rewritten unchanged
            ["product_id"],
        ),
    ]  # fmt: skip
    for batch in batches:
        batch()
        results = {name: run_spec(spec, spark=spark) for name, spec in specs.items()}
        for name, result in results.items():
            assert result["mode"] == "incremental" and result["write_path"] == "net_changes", result
            assert result["strategy"]["chosen"] == name, result["strategy"]
            version = result["inputs"]["source"]["to_version"]
            expected = sorted(
                (r["product_id"], r["name"], r["price"])
                for r in read_rows(spark, source, version)
                if r["product_id"] is not None
            )
            actual = sorted(
                (r["product_id"], r["name"], r["price"]) for r in read_rows(spark, str(tmp_path / name))
            )
            assert actual == expected, name
        counts = [{k: r["rows"][k] for k in ("inserted", "updated", "deleted")} for r in results.values()]
        assert counts[0] == counts[1], counts
        feeds = [_feed(spark, tmp_path / name, r["output"]["version"]) for name, r in results.items()]
        assert feeds[0] == feeds[1], feeds
    assert results["recompute"]["rows"]["null_keys_dropped"] == {"source": 1}


def test_a_recomputed_catch_up_refuses_a_duplicate_key(spark: SparkSession, tmp_path: Path) -> None:
    source = str(tmp_path / "products")
    create_table(spark, source, [{"product_id": i, "name": f"p{i}", "price": i} for i in range(3)], SOURCE)
    spec = _spec(source, tmp_path / "out", "recompute")
    first = run_spec(spec, spark=spark)
    append_rows(spark, source, [{"product_id": 1, "name": "again", "price": 0}])
    with pytest.raises(InputDataError, match=r"product_id=1\) x2"):
        run_spec(spec, spark=spark)
    assert read_rows(spark, str(tmp_path / "out"), None) == read_rows(
        spark, str(tmp_path / "out"), first["output"]["version"]
    )

"""``run_spec(spec, audit=True)`` / ``fkjoin audit``: every table-output kind recomputed at its consumed
versions and compared with the output, without writing. The tampering is done by hand (SQL on the
output), so the expected counts are known independently of the engine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import create_table, table_version, upsert
from pyspark.sql import SparkSession
from support.multiway_worlds import yelp_world

from airflow_provider_fkjoin.engine import SpecError, run_spec


def _tamper(spark: SparkSession, out: str, delete: str, update: str, assignment: str) -> None:
    spark.sql(f"DELETE FROM delta.`{out}` WHERE {delete}")
    spark.sql(f"UPDATE delta.`{out}` SET {assignment} WHERE {update}")


def _audit(spark: SparkSession, spec: dict[str, Any], out: str) -> dict[str, Any]:
    before = table_version(spark, out)
    result = run_spec(spec, spark=spark, audit=True, audit_examples=5)
    assert table_version(spark, out) == before, "an audit wrote to the output"
    assert result["mode"] == "audit"
    return result


def test_audit_foreign_key_join(spark: SparkSession, tmp_path: Path) -> None:
    orders, customers, out = (str(tmp_path / n) for n in ("orders", "customers", "out"))
    create_table(
        spark,
        orders,
        [{"order_id": i, "customer_id": i % 3} for i in range(6)],
        "order_id INT, customer_id INT",
    )
    create_table(
        spark,
        customers,
        [{"customer_id": i, "name": f"c{i}"} for i in range(3)],
        "customer_id INT, name STRING",
    )
    spec = {
        "kind": "foreign_key_join",
        "left": {"path": orders, "key": ["order_id"]},
        "right": {"path": customers, "key": ["customer_id"]},
        "foreign_key": ["customer_id"],
        "output": {"path": out},
    }
    run_spec(spec, spark=spark)
    upsert(spark, customers, [{"customer_id": 1, "name": "renamed"}], ["customer_id"])  # not refreshed yet
    clean = _audit(spark, spec, out)
    assert clean["consistent"] and clean["rows"]["expected"] == 6 and clean["rows"]["missing"] == 0
    assert clean["inputs"]["right"]["version"] == 0  # the consumed version, not the latest
    _tamper(spark, out, "order_id = 0", "order_id = 1", "name = 'wrong'")
    spark.sql(f"INSERT INTO delta.`{out}` VALUES (99, 1, 'ghost')")
    found = _audit(spark, spec, out)
    assert not found["consistent"]
    assert {k: found["rows"][k] for k in ("missing", "extra", "different")} == {
        "missing": 1,
        "extra": 1,
        "different": 1,
    }
    assert found["examples"]["missing"] == [{"order_id": 0}]


def test_audit_global_table_and_outer_windowed_table(spark: SparkSession, tmp_path: Path) -> None:
    source, glob = str(tmp_path / "src"), str(tmp_path / "glob")
    create_table(spark, source, [{"k": i, "v": i} for i in range(4)], "k INT, v INT")
    spec = {
        "kind": "global_table_bootstrap",
        "source": {"path": source, "key": ["k"]},
        "output": {"path": glob},
    }
    run_spec(spec, spark=spark)
    assert _audit(spark, spec, glob)["consistent"]
    spark.sql(f"UPDATE delta.`{glob}` SET v = 42 WHERE k = 2")
    assert _audit(spark, spec, glob)["rows"]["different"] == 1

    left, right, out = (str(tmp_path / n) for n in ("l", "r", "out"))
    create_table(spark, left, [{"k": 1, "a": 1}, {"k": 2, "a": 2}], "k INT, a INT")
    create_table(spark, right, [{"k": 2, "b": 2}, {"k": 3, "b": 3}], "k INT, b INT")
    outer = {
        "kind": "windowed_join",
        "mode": "table",
        "left": {"path": left, "key": ["k"]},
        "right": {"path": right, "key": ["k"]},
        "how": "outer",
        "output": {"path": out},
    }
    run_spec(outer, spark=spark)
    assert _audit(spark, outer, out)["rows"]["expected"] == 3
    spark.sql(f"DELETE FROM delta.`{out}` WHERE k = 3")
    assert _audit(spark, outer, out)["rows"]["missing"] == 1


def test_audit_multiway_join_and_refused_kinds(spark: SparkSession, tmp_path: Path) -> None:
    world = yelp_world(spark, tmp_path)
    world.refresh()
    world.upsert("business", [{"business_id": 1, "name": "Cafe Nova", "city": "SF"}])
    world.refresh()
    out = str(tmp_path / "out")
    result = _audit(spark, world.spec, out)
    assert result["consistent"] and result["rows"]["actual"] == 5
    spark.sql(f"UPDATE delta.`{out}` SET stars = 0 WHERE review_id = 10")  # two rows: one per owner
    assert _audit(spark, world.spec, out)["rows"]["different"] == 2

    # a keyless output (no review key shown): compared as a multiset, so a repeated copy is extra
    keyless = yelp_world(spark, tmp_path / "keyless")
    keyless.spec["inputs"][1]["exclude_fields"] = ["text", "review_id"]
    keyless.refresh()
    out = keyless.spec["output"]["path"]
    result = _audit(spark, keyless.spec, out)
    assert result["consistent"] and result["rows"]["actual"] == 5, result
    spark.sql(f"INSERT INTO delta.`{out}` SELECT * FROM delta.`{out}` WHERE owner_name = 'Ann' LIMIT 1")
    rows = _audit(spark, keyless.spec, out)["rows"]
    assert (rows["extra"], rows["missing"], rows["actual"]) == (1, 0, 6), rows

    stream = {
        "kind": "self_join",
        "input": {"path": str(tmp_path / "events"), "key": ["k"], "time": "t"},
        "window": {"before": "1m", "after": "1m"},
        "columns": {"k": "l.k"},
        "output": {"path": str(tmp_path / "pairs")},
    }
    with pytest.raises(SpecError, match="append-only"):
        run_spec(stream, spark=spark, audit=True)

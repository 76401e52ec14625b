"""The refresh strategy: an incremental refresh either joins only what changed or recomputes the join
and commits only the rows that differ, by the spec's ``refresh_strategy`` or, for ``auto``, by the cheaper
estimate from the sizes in the Delta logs. Whichever runs, the output and its change feed are those of the
join (the random change sequences of ``tests/fk/test_fk_property.py`` compare both strategies refresh by
refresh); here: the choice itself, bad input refused before anything is written, and a strategy change
that does not rebuild the output.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from delta.tables import DeltaTable
from helpers import CUSTOMERS, ORDERS, append_rows, oracle, output_state, write
from pyspark.sql import SparkSession

from airflow_provider_fkjoin.engine import InputDataError, SpecError, run_spec
from airflow_provider_fkjoin.engine.core.planning import (
    CostModel,
    choose_strategy,
    estimate_costs,
)
from airflow_provider_fkjoin.engine.core.spec import load_spec, spec_fingerprint


def test_the_estimate_prefers_the_incremental_plan_when_little_changed_in_large_tables() -> None:
    """10M-row tables with a few kilobytes changed: reading the whole output and shuffling the join
    costs more than the incremental plan's few extra jobs."""
    estimate = estimate_costs(
        feed_bytes=200_000,
        input_bytes=2_000_000_000,
        output_bytes=1_500_000_000,
        incremental_jobs=6,
        recompute_jobs=4,
    )
    assert estimate.incremental_s < estimate.recompute_s
    assert choose_strategy("auto", estimate)[0] == "incremental"


def test_the_estimate_prefers_recomputing_tiny_tables_and_large_change_feeds() -> None:
    """Kilobyte tables: jobs are the whole cost, and a recompute runs fewer. A change feed as large as
    the tables: the feed's pre- and post-images cost more than reading the tables once."""
    tiny = estimate_costs(
        feed_bytes=3_000, input_bytes=40_000, output_bytes=30_000, incremental_jobs=6, recompute_jobs=4
    )
    assert choose_strategy("auto", tiny)[0] == "recompute"
    churn = estimate_costs(
        feed_bytes=400_000_000,
        input_bytes=300_000_000,
        output_bytes=250_000_000,
        incremental_jobs=6,
        recompute_jobs=4,
    )
    assert choose_strategy("auto", churn)[0] == "recompute"


def test_the_spec_forces_a_strategy_and_an_unknown_estimate_runs_the_incremental_plan() -> None:
    assert choose_strategy("recompute", None) == ("recompute", "refresh_strategy: recompute in the spec")
    assert choose_strategy("incremental", None)[0] == "incremental"
    chosen, reason = choose_strategy("auto", None, "the change feed size of input left is unknown")
    assert chosen == "incremental" and "input left" in reason


def test_the_cost_model_is_tuned_by_session_settings(spark: SparkSession) -> None:
    from airflow_provider_fkjoin.engine.runtime.session import cost_model

    spark.conf.set("spark.fkjoin.cost.jobSeconds", "0.9")
    try:
        assert cost_model(spark) == CostModel(job_s=0.9)
        spark.conf.set("spark.fkjoin.cost.jobSeconds", "fast")
        with pytest.raises(SpecError, match=r"spark\.fkjoin\.cost\.jobSeconds"):
            cost_model(spark)
    finally:
        spark.conf.unset("spark.fkjoin.cost.jobSeconds")


def _spec(root: Path, strategy: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "kind": "foreign_key_join",
        "left": {"path": str(root / "orders"), "key": ["order_id"]},
        "right": {"path": str(root / "customers"), "key": ["customer_id"]},
        "foreign_key": ["customer_id"],
        "how": "left",
        "output": {"path": str(root / "out")},
    }
    if strategy is not None:
        spec["refresh_strategy"] = strategy
    return spec


def test_the_strategy_is_not_part_of_the_fingerprint(tmp_path: Path) -> None:
    """Changing how the same output is computed must not rebuild it."""
    fingerprints = {spec_fingerprint(load_spec(_spec(tmp_path, s))) for s in (None, "auto", "recompute")}
    assert len(fingerprints) == 1


def test_auto_reports_its_choice_and_a_forced_recompute_refuses_duplicate_keys(
    spark: SparkSession, tmp_path: Path
) -> None:
    """``auto`` on tiny tables recomputes (the estimate is in the result); a forced recompute that finds a
    repeated left key fails naming the table, with nothing written; a switch back to ``incremental`` goes
    on incrementally (no rebuild)."""
    orders, customers, out = tmp_path / "orders", tmp_path / "customers", tmp_path / "out"
    write(spark, [(i, i % 5, float(i)) for i in range(50)], ORDERS, orders)
    write(spark, [(i, f"c{i}") for i in range(5)], CUSTOMERS, customers)
    assert run_spec(_spec(tmp_path), spark=spark)["mode"] == "full"

    DeltaTable.forPath(spark, str(customers)).update("customer_id = 2", {"name": "'renamed'"})
    result = run_spec(_spec(tmp_path), spark=spark)
    assert result["mode"] == "incremental", result
    strategy = result["strategy"]
    assert strategy["chosen"] == "recompute", strategy
    assert strategy["estimate"]["recompute_s"] < strategy["estimate"]["incremental_s"], strategy
    assert strategy["estimate"]["feed_bytes"] > 0, strategy
    assert result["rows"]["updated"] == 10
    assert output_state(spark, out) == oracle(spark, result, "left")

    version = DeltaTable.forPath(spark, str(out)).history(1).first()["version"]
    append_rows(spark, str(orders), [{"order_id": 7, "customer_id": 1, "amount": 1.0}])
    with pytest.raises(InputDataError, match=r"left table .*orders has duplicate keys"):
        run_spec(_spec(tmp_path, "recompute"), spark=spark)
    assert DeltaTable.forPath(spark, str(out)).history(1).first()["version"] == version

    DeltaTable.forPath(spark, str(orders)).delete("order_id = 7 AND amount = 1.0")
    result = run_spec(_spec(tmp_path, "incremental"), spark=spark)
    assert result["mode"] == "incremental", result
    assert result["strategy"]["chosen"] == "incremental"
    assert output_state(spark, out) == oracle(spark, result, "left")


def test_recompute_is_refused_for_an_append_only_output(spark: SparkSession, tmp_path: Path) -> None:
    from support.stream_table_joins import join_spec

    spec = join_spec(
        tmp_path / "orders", tmp_path / "products", tmp_path / "out", refresh_strategy="recompute"
    )
    refused = "refresh_strategy: recompute is not available for this stream_table_join output"
    with pytest.raises(SpecError, match=refused):
        run_spec(spec, spark=spark)

"""The refresh strategy: an incremental refresh either joins only what changed or recomputes the join
and commits only the rows that differ, by the spec's ``refresh_strategy`` or, for ``auto``, by the cheaper
estimate from the sizes in the Delta logs. Whichever runs, the output and its change feed are those of the
join (the random change sequences of ``tests/fk/test_fk_property.py`` compare both strategies refresh by
refresh); here: the choice itself, bad input refused before anything is written, and a strategy change
that does not rebuild the output.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from delta.tables import DeltaTable
from helpers import CUSTOMERS, ORDERS, append_rows, oracle, output_state, write
from pyspark.sql import SparkSession

from airflow_provider_fkjoin.engine import InputDataError, SpecError, run_spec
from airflow_provider_fkjoin.engine.core.cost_history import (
    CostObservation,
    PlanChoice,
    PlanFeatures,
    choose_plan,
    cluster_id,
    learned_estimate,
    observations,
    slower_than_expected,
    strategy_record,
)
from airflow_provider_fkjoin.engine.core.planning import CostModel, StrategyEstimate
from airflow_provider_fkjoin.engine.core.spec import load_spec, spec_fingerprint


def _features(feed: int, tables: int, output: int) -> PlanFeatures:
    return PlanFeatures(
        feed_bytes=feed, input_bytes=tables, output_bytes=output, incremental_jobs=6, recompute_jobs=4
    )


def _auto(features: PlanFeatures, history: list[CostObservation] = (), **kwargs: Any) -> PlanChoice:  # type: ignore[assignment]
    return choose_plan("auto", learned_estimate(features, CostModel(), list(history), "c1"), **kwargs)


def test_the_estimate_prefers_the_incremental_plan_when_little_changed_in_large_tables() -> None:
    """10M-row tables with a few kilobytes changed: reading the whole output and shuffling the join
    costs more than the incremental plan's few extra jobs."""
    features = _features(200_000, 2_000_000_000, 1_500_000_000)
    prior = features.prior(CostModel())
    assert prior.incremental_s < prior.recompute_s
    choice = _auto(features)
    assert (choice.chosen, choice.basis) == ("incremental", "prior")


def test_the_estimate_prefers_recomputing_tiny_tables_and_large_change_feeds() -> None:
    """Kilobyte tables: jobs are the whole cost, and a recompute runs fewer. A change feed as large as
    the tables is past the change ratio: recomputed without estimating, unless the ratio is turned off,
    when the estimate still says recompute (the feed's images cost more than reading the tables once)."""
    assert _auto(_features(3_000, 400_000, 300_000)).chosen == "recompute"
    churn = _features(400_000_000, 300_000_000, 250_000_000)
    assert (_auto(churn).chosen, _auto(churn).basis) == ("recompute", "change_ratio")
    assert "spark.fkjoin.recomputeChangeRatio" in _auto(churn).reason
    unlimited = _auto(churn, change_ratio_limit=0)
    assert (unlimited.chosen, unlimited.basis) == ("recompute", "prior")


def test_the_spec_forces_a_strategy_and_an_unknown_estimate_runs_the_incremental_plan() -> None:
    assert choose_plan("recompute", None) == PlanChoice(
        "recompute", "refresh_strategy: recompute in the spec", "spec"
    )
    assert choose_plan("incremental", None).chosen == "incremental"
    choice = choose_plan("auto", None, unknown="the change feed size of input left is unknown")
    assert choice.chosen == "incremental" and "input left" in choice.reason and choice.basis == "unknown"


def _observed(
    plan: str, factor: float, features: PlanFeatures, version: int, cluster: str = "c1"
) -> CostObservation:
    """An earlier refresh whose plan took ``factor`` times its prior estimate."""
    prior = features.prior(CostModel())
    seconds = (prior.incremental_s if plan == "incremental" else prior.recompute_s) * factor
    return CostObservation(plan, seconds, features, cluster, version)


def test_the_history_overrides_a_prior_that_flatters_the_incremental_plan() -> None:
    """The prior says incremental (as it did at FK 1M x 100K, 1% changed, where the incremental plan took
    twice its estimate); after refreshes that took 2.5x the prior, and a full rebuild that ran at the
    prior's speed, the estimate recomputes. The same history from another cluster is not used."""
    features = _features(2_000_000, 60_000_000, 50_000_000)
    assert _auto(features).chosen == "incremental"
    history = [_observed("incremental", 2.5, features, v) for v in (5, 4, 3)]
    history.append(_observed("full", 1.0, features, 1))
    learned = learned_estimate(features, CostModel(), history, "c1")
    assert learned.basis == "history" and learned.runs == {"incremental": 3, "recompute": 0}
    assert learned.estimate.incremental_s == pytest.approx(2.5 * learned.prior.incremental_s)
    assert learned.estimate.recompute_s == pytest.approx(learned.prior.recompute_s)
    assert choose_plan("auto", learned).chosen == "recompute"
    elsewhere = learned_estimate(features, CostModel(), history, "other-cluster")
    assert elsewhere.basis == "prior" and choose_plan("auto", elsewhere).chosen == "incremental"


def test_a_first_full_rebuild_calibrates_the_recompute_at_the_output_s_size() -> None:
    """The first refresh read no output (0 output bytes) but wrote it: it is weighed at the output's size
    now, so a full rebuild that ran at the prior's speed leaves the recompute's estimate at its prior."""
    features = _features(2_000_000, 60_000_000, 50_000_000)
    first = replace(features, feed_bytes=0, output_bytes=0)
    seconds = features.prior(CostModel()).recompute_s
    learned = learned_estimate(
        features, CostModel(), [CostObservation("full", seconds, first, "c1", 0)], "c1"
    )
    assert learned.factors["recompute"] == pytest.approx(1.0)
    assert learned.estimate.recompute_s == pytest.approx(learned.prior.recompute_s)


def test_a_plan_not_run_lately_is_tried_once_when_its_estimate_is_close() -> None:
    """Eight incremental refreshes at their prior's speed, and a full rebuild that puts the recompute's
    estimate 10% above the incremental plan's: the recompute is tried once, then the estimate decides."""
    features = _features(2_000_000, 60_000_000, 50_000_000)
    prior = features.prior(CostModel())
    history = [_observed("incremental", 1.0, features, v) for v in range(20, 12, -1)]
    history.append(_observed("full", 1.1 * prior.incremental_s / prior.recompute_s, features, 1))
    choice = _auto(features, history)
    assert (choice.chosen, choice.basis) == ("recompute", "explore"), choice
    assert _auto(features, history[:7]).chosen == "incremental"  # fewer than eight refreshes: no trial
    after = [_observed("recompute", 1.2 * prior.incremental_s / prior.recompute_s, features, 21), *history]
    assert (_auto(features, after).chosen, _auto(features, after).basis) == ("incremental", "history")


def test_observations_come_from_the_refresh_commits_in_the_history() -> None:
    """What a refresh records (``strategy_record``) and its commit's timestamp give the plan's seconds;
    commits of others, or without a record, are skipped."""
    features = _features(10, 1_000, 500)
    payload = {
        "started_at": "2026-01-05T12:00:00+00:00",
        "strategy": strategy_record("recompute", 1.5, features, "c1"),
    }
    history = [
        {"version": 9, "timestamp": datetime(2026, 1, 5, 12, 5, tzinfo=UTC), "userMetadata": None},
        {
            "version": 8,
            "timestamp": datetime(2026, 1, 5, 12, 0, 6, tzinfo=UTC),
            "userMetadata": json.dumps({"fkjoin": payload}),
        },
        {"version": 7, "timestamp": 1767614400000, "userMetadata": json.dumps({"fkjoin": {"seq": 1}})},
    ]
    assert observations(history) == [CostObservation("recompute", 4.5, features, "c1", 8)]
    assert cluster_id("sc://h:15002/;token=abc") == cluster_id("sc://h:15002")


def test_a_plan_slower_than_the_other_plans_estimate_is_named() -> None:
    estimate = StrategyEstimate(4.0, 5.0, 0, 0, 0)
    assert slower_than_expected("incremental", 7.4, estimate) is None
    assert slower_than_expected("incremental", 7.6, estimate) == "recompute"
    assert slower_than_expected("recompute", 6.1, estimate) == "incremental"


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
    # the first (full) refresh recorded its cost in its commit: the estimate learned from it
    assert strategy["estimate"]["basis"] == "history", strategy
    assert strategy["requested"] == "auto" and strategy["actual_s"] > 0, strategy
    assert result["rows"]["updated"] == 10
    assert output_state(spark, out) == oracle(spark, result, "left")
    recorded = json.loads(DeltaTable.forPath(spark, str(out)).history(1).first()["userMetadata"])
    assert recorded["fkjoin"]["strategy"]["chosen"] == "recompute"
    assert set(recorded["fkjoin"]["strategy"]["features"]) >= {"feed_bytes", "input_bytes", "output_bytes"}

    DeltaTable.forPath(spark, str(customers)).update("customer_id = 3", {"name": "'again'"})
    result = run_spec(_spec(tmp_path), spark=spark)
    assert result["strategy"]["estimate"]["runs"]["recompute"] == 1, result["strategy"]
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


@pytest.mark.parametrize(
    ("how", "table", "repeated"),
    [
        ("left", "orders", [{"order_id": 100, "customer_id": 1, "amount": 1.0}] * 2),  # a new key, twice
        ("left", "orders", [{"order_id": 100, "customer_id": 9, "amount": 1.0}] * 2),  # new, unmatched
        ("inner", "orders", [{"order_id": 100, "customer_id": 9, "amount": 1.0}] * 2),  # dropped by the join
        ("inner", "orders", [{"order_id": 3, "customer_id": 1, "amount": 2.0}]),  # an output row's key
        ("left", "customers", [{"customer_id": 4, "name": "twin"}]),  # a right key, with left rows
        ("left", "customers", [{"customer_id": 8, "name": "x"}] * 2),  # a right key no left row has
    ],
)
def test_a_forced_recompute_refuses_every_repeated_key(
    spark: SparkSession, tmp_path: Path, how: str, table: str, repeated: list[dict[str, Any]]
) -> None:
    """A recompute finds a repeated key however it repeats (the left rows are joined without grouping
    them when every one of them reaches the output): the error names the table, as a full rebuild's
    does, and nothing is written."""
    orders, customers, out = tmp_path / "orders", tmp_path / "customers", tmp_path / "out"
    write(spark, [(i, i % 5, float(i)) for i in range(50)], ORDERS, orders)
    write(spark, [(i, f"c{i}") for i in range(5)], CUSTOMERS, customers)
    spec = {**_spec(tmp_path, "recompute"), "how": how}
    assert run_spec(spec, spark=spark)["mode"] == "full"
    version = DeltaTable.forPath(spark, str(out)).history(1).first()["version"]
    append_rows(spark, str(tmp_path / table), repeated)
    side = "left" if table == "orders" else "right"
    with pytest.raises(InputDataError, match=rf"{side} table .*{table} has duplicate keys"):
        run_spec(spec, spark=spark)
    assert DeltaTable.forPath(spark, str(out)).history(1).first()["version"] == version


def test_recompute_is_refused_for_an_append_only_output(spark: SparkSession, tmp_path: Path) -> None:
    from support.stream_table_joins import join_spec

    spec = join_spec(
        tmp_path / "orders", tmp_path / "products", tmp_path / "out", refresh_strategy="recompute"
    )
    refused = "refresh_strategy: recompute is not available for this stream_table_join output"
    with pytest.raises(SpecError, match=refused):
        run_spec(spec, spark=spark)

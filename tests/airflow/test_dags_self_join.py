"""End to end: ``airflow dags test`` of the self-join DAG, run twice."""

from __future__ import annotations

import sys
from typing import Any

import pytest
from dags_support import REPO, Airflow, epoch_millis, rows_at
from deltalake import DeltaTable

from airflow_provider_fkjoin.engine.logs.watermarks import progress

# Spark and Airflow start several JVMs and interpreters per DAG run: allow for a busy machine.
pytestmark = pytest.mark.timeout(2400)


def test_self_join_card_txns_two_runs_match_the_model(airflow: Airflow, spark: Any):
    """The self-join DAG, a full run then an incremental one: the output equals what the record-by-record
    model of the two-sided join of the table with itself emits for the rows each run's seed appended."""
    sys.path.insert(0, str(REPO / "tests"))
    from windowed_model import Event, StreamJoinModel

    w = airflow.warehouse
    model = StreamJoinModel(before=600_000, after=600_000, grace=3_600_000, how="inner", same_table=True)
    expected: list[tuple[Any, ...]] = []
    for run in range(2):
        airflow.dags_test("fkjoin_self_join_card_txns")
        version = DeltaTable(str(w / "card_txns")).version()
        before = {r["txn_id"] for r in rows_at(w / "card_txns", version - 1)} if version else set()
        new = sorted(
            (r for r in rows_at(w / "card_txns", version) if r["txn_id"] not in before),
            key=lambda r: r["offset"],
        )
        events = [Event((r["card_id"],), epoch_millis(r["txn_at"]), r) for r in new]
        expected += [
            (left["txn_id"], right["txn_id"], t) for _kind, left, right, t in model.refresh(events, [])
        ]
        rows = spark.read.format("delta").load(str(w / "card_txn_pairs")).collect()
        got = sorted((r["txn_id"], r["paired_txn_id"], epoch_millis(r["event_time"])) for r in rows)
        assert got == sorted(expected), f"after run {run + 1}"
        assert progress(w / "card_txn_pairs")["mode"] == ("full" if run == 0 else "incremental")
    assert any(first != second for first, second, _ in expected)  # c1's two transactions, both ways
    assert any(
        {first, second} == {5, 17} for first, second, _ in expected
    )  # the late c3 found the earlier c3

"""Exactly once under crashes for the stream-mode windowed join: ``fkjoin run`` is SIGKILLed at each
traced phase of a refresh, including between the state commit and the output commit (``state_written``).
Afterwards the output holds either nothing of the refresh or all of it, and a rerun appends exactly what an
uninterrupted refresh appends (checked against the record-by-record model)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from helpers import table_version
from test_fk_crash import run_fkjoin
from test_windowed_stream import Side, appended, ev, expected, spec_for, with_keys
from windowed_model import StreamJoinModel

from airflow_provider_fkjoin.engine import run_spec

PHASES = ["pinned", "changes_read", "state_written", "merge_started", "committing", "committed"]
WINDOW = {"before": 10, "after": 10, "grace": 5}


@pytest.mark.parametrize("phase", PHASES)
def test_kill_during_a_stream_refresh_then_rerun(spark, tmp_path: Path, phase: str) -> None:
    left, right = Side(spark, tmp_path / "left"), Side(spark, tmp_path / "right")
    out = tmp_path / "out"
    model = StreamJoinModel(10, 10, 5, "left")
    spec = spec_for(left.path, right.path, out, WINDOW, "left")
    first = ([ev("a", 100, "l1"), ev("b", 100, "l2"), ev("c", 104, "l3")], [ev("a", 105, "r1")])
    left.append(first[0])
    right.append(first[1])
    assert appended(spark, out, run_spec(spec, spark=spark)) == expected(
        model.refresh(*map(with_keys, first))
    )

    second = ([ev("d", 200, "l4")], [ev("c", 110, "r2"), ev("b", 95, "r3")])
    left.append(second[0])
    right.append(second[1])
    want = expected(model.refresh(*map(with_keys, second)))
    before = table_version(spark, out)
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(json.dumps(spec))

    run = run_fkjoin(spec_path, tmp_path, kill_at=phase)
    assert run.killed_at == phase, run.stderr_tail
    after = table_version(spark, out)
    if after == before:
        rerun = run_spec(spec, spark=spark)
        assert rerun["mode"] == "incremental"
        assert appended(spark, out, rerun) == want
    else:  # killed after the output commit: the refresh is whole, a rerun has nothing to do
        assert after == before + 1
        rows = spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", after)
        got = Counter(tuple(r) for r in rows.load(str(out)).select("k", "lv", "rv", "event_time").collect())
        assert got == want
        assert run_spec(spec, spark=spark)["mode"] == "noop"

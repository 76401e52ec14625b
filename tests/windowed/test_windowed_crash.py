"""Exactly once under crashes for the stream-mode windowed join: ``fkjoin run`` is SIGKILLed at each
traced phase of a refresh, including between the state commit and the output commit (``state_written``).
Afterwards the output holds either nothing of the refresh or all of it, and a rerun appends exactly what an
uninterrupted refresh appends (checked against the record-by-record model).

The inputs, the output and the join's state tables (``<output>_fkjoin_state``) are prepared once per module
and put back at the same paths before each phase (``support.crash.SavedFolder``)."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import table_version
from support.crash import SavedFolder, run_fkjoin
from support.windowed_streams import Side, appended, ev, expected, spec_for, with_keys
from windowed_model import StreamJoinModel

from airflow_provider_fkjoin.engine import run_spec

PHASES = ["pinned", "changes_read", "state_written", "merge_started", "committing", "committed"]
WINDOW = {"before": 10, "after": 10, "grace": 5}
#: The saved state: a first refresh done, the second batch appended to both inputs.
SECOND = "second"


@dataclass(frozen=True)
class Saved:
    """The world saved before its second refresh, and what that refresh must append."""

    spec: dict
    spec_path: Path
    out: Path
    folder: SavedFolder
    #: The output's version before the second refresh.
    before: int
    #: The rows the model appends in the second refresh.
    want: Counter


@pytest.fixture(scope="module")
def saved(spark, tmp_path_factory: pytest.TempPathFactory) -> Saved:
    """Two batches on each side, the first refreshed in-process (and checked against the model)."""
    base = tmp_path_factory.mktemp("windowed_crash")
    root = base / "world"
    left, right = Side(spark, root / "left"), Side(spark, root / "right")
    out = root / "out"
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
    spec_path = base / "spec.json"
    spec_path.write_text(json.dumps(spec))
    folder = SavedFolder(spark, root, base / "saved")
    folder.save(SECOND)
    return Saved(spec, spec_path, out, folder, table_version(spark, out), want)


@pytest.mark.parametrize("phase", PHASES)
def test_kill_during_a_stream_refresh_then_rerun(spark, saved: Saved, tmp_path: Path, phase: str) -> None:
    saved.folder.restore(SECOND)
    spec, out, want = saved.spec, saved.out, saved.want
    before = table_version(spark, out)
    assert before == saved.before, "the output must be back at its saved version"

    run = run_fkjoin(saved.spec_path, tmp_path, kill_at=phase)
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

"""The warm state is bounded in bytes, off the heap: a driver whose heap could not hold the state as Java
objects (about 225 bytes a held row, as it was built before) holds it, keeps serving refreshes exactly,
and still runs an unrelated query; the native memory it reports stays within the budget it was given.

The driver runs ``support/state_memory_probe.py`` in a process of its own (a heap is sized when its JVM
starts); the probe compares each output with the join Spark recomputes from the inputs.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.state_memory_probe import MARKER

pytestmark = pytest.mark.slow

PROBE = Path(__file__).resolve().parents[1] / "support" / "state_memory_probe.py"
LEFT_ROWS = 1_500_000
HEAP_BYTES = 512 << 20
BUDGET_BYTES = 16 << 20


def test_a_state_larger_than_the_heap_serves_within_its_budget(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(PROBE),
            str(tmp_path),
            "--left-rows",
            str(LEFT_ROWS),
            "--heap",
            "512m",
            "--budget",
            "16m",
        ],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith(MARKER)]
    assert done.returncode == 0 and lines, done.stderr[-4000:]
    probe = json.loads(lines[-1][len(MARKER) :])

    assert probe["differences"] == [0] * len(probe["differences"]), probe["differences"]
    first, *served = probe["reports"]
    assert first["built"]["status"] == "building", first
    assert served
    for report in served:
        assert report["used"] and report["advanced"], report
        lookup = report["lookup"]
        held = lookup["held_rows"]
        assert held >= 2 * LEFT_ROWS + LEFT_ROWS // 10, lookup
        assert lookup["budget_bytes"] == BUDGET_BYTES, lookup
        assert lookup["memory_bytes"] <= BUDGET_BYTES * 1.1, lookup
        assert lookup["disk_bytes"] > 0, lookup
        # as Java objects the held rows would take more than the whole heap
        assert held * 225 > probe["heap_max_bytes"], (held, probe["heap_max_bytes"])
    assert probe["heap_max_bytes"] <= HEAP_BYTES
    assert probe["heap_used_bytes"] < probe["heap_max_bytes"] / 2, probe
    assert probe["unrelated_rows"] == probe["right_rows"]

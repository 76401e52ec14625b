"""The engine's JVM side tested on its own (``jvm/src/test/java``, a JUnit test class per Java class): every
action the procedure answers, parsed, routed and run on a local Spark session. ``scripts/test-jvm.sh``
compiles and runs them against the pinned Spark and Delta jars, with no Maven resolution of Spark; this test
runs it in CI, in a JVM of its own (about a minute)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: A JVM and a Spark session of its own, about a minute of both cores: the slow tier's work.
pytestmark = pytest.mark.slow


def test_every_jvm_action_passes_its_junit_tests() -> None:
    run = subprocess.run(
        ["bash", str(ROOT / "scripts" / "test-jvm.sh")],
        cwd=ROOT,
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if run.returncode != 0:
        # the compiler's errors, or JUnit's failures and summary, are at the end of the output
        print(run.stdout[-20_000:])
        print(run.stderr[-10_000:], file=sys.stderr)
    assert run.returncode == 0, f"scripts/test-jvm.sh exited {run.returncode}; its output is printed above"

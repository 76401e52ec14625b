#!/usr/bin/env bash
# Set up (idempotent) and run the whole test suite. Extra arguments go to pytest.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
cd "$root"
# Two pytest workers (one SparkSession each) keep the 2-core machine busy while the other waits on
# Spark's fixed per-job latency; --dist loadfile keeps a module's shared tables on one worker.
# FKJOIN_TEST_WORKERS=0 runs everything in this process.
workers="${FKJOIN_TEST_WORKERS:-2}"
if [ "$workers" = "0" ]; then
  exec .venv/bin/python -m pytest "$@"
fi
exec .venv/bin/python -m pytest -n "$workers" --dist loadfile --durations=25 "$@"

#!/usr/bin/env bash
# Set up (idempotent) and run the tests. Extra arguments go to pytest.
#
#   ./scripts/test.sh            the fast tier: pure tests, Airflow unit tests, in-process Spark tests,
#                                property tests with few examples (HYPOTHESIS_PROFILE=fast)
#   ./scripts/test.sh --all      every tier (what CI runs): crash tests at every phase, property tests at
#                                full depth (HYPOTHESIS_PROFILE=ci), every DAG end to end, real servers
#
# Tiers are markers set in tests/conftest.py (slow, e2e) from the measured table tests/durations.json (see
# tests/tiers.py); `-m ...` after --all picks tiers by hand. Every run writes test-artifacts/junit.xml and
# test-artifacts/durations.json (also kept in ~/.cache/airflow-provider-fkjoin/test-durations/ for later
# runs); --all also prints every test's duration (--durations=0). Files run longest first.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
cd "$root"
tier=(-m "not slow and not e2e")
profile="${HYPOTHESIS_PROFILE:-fast}"
durations=25
if [ "${1:-}" = "--all" ]; then
  shift
  tier=()
  profile="${HYPOTHESIS_PROFILE:-ci}"
  durations=0
fi
mkdir -p test-artifacts
report=(--junitxml=test-artifacts/junit.xml "--durations=$durations")
export HYPOTHESIS_PROFILE="$profile"
# Two pytest workers (one SparkSession each) keep the 2-core machine busy while the other waits on
# Spark's fixed per-job latency; --dist loadfile keeps a module's shared tables on one worker, and
# --no-loadscope-reorder keeps the order tests/conftest.py gives (longest files first, as measured).
# FKJOIN_TEST_WORKERS=0 runs everything in this process.
workers="${FKJOIN_TEST_WORKERS:-2}"
if [ "$workers" = "0" ]; then
  exec .venv/bin/python -m pytest "${report[@]}" ${tier[@]+"${tier[@]}"} "$@"
fi
exec .venv/bin/python -m pytest -n "$workers" --dist loadfile --no-loadscope-reorder "${report[@]}" \
  ${tier[@]+"${tier[@]}"} "$@"

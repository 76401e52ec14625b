#!/usr/bin/env bash
# Set up (idempotent) and run the demo: an incremental foreign-key join on local Spark.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
cd "$root"
exec .venv/bin/fkjoin demo "$@"

#!/usr/bin/env bash
# Build the installable wheel, with the engine's jar inside it: ./scripts/build-wheel.sh [OUT_DIR]
# (default dist/). Then, in any environment with Python 3.11 or 3.12:
#   pip install dist/airflow_provider_fkjoin-*.whl[airflow] -c constraints.txt
#
# Needs what set-up gives (./scripts/setup.sh): .venv with pyspark, Delta's jars in .jars/ and a JDK (javac)
# to compile jvm/ into the engine's jar; PYTHON names another interpreter with pyspark. The wheel is built
# from the repository's files (tracked or new, not ignored ones) plus the jar, in a scratch folder, by pip
# with setuptools from the package index (or pip's cache). The build fails on any setuptools warning about
# the package's own metadata, and when the jar, py.typed or the license is missing from the wheel.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
python="${PYTHON:-$root/.venv/bin/python}"
out="$(mkdir -p "${1:-dist}" && cd "${1:-dist}" && pwd)"
jar="airflow_provider_fkjoin/engine/runtime/jars/fkjoin-engine.jar"

PYTHON="$python" "$root/scripts/build-engine-jar.sh"
[ -f "$jar" ] || { echo "build-wheel: $jar was not built" >&2; exit 1; }

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
if git -C "$root" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  git ls-files -z --cached --others --exclude-standard \
    | tar --null --files-from=- --ignore-failed-read -cf - 2>/dev/null | tar -xf - -C "$stage"
else
  tar --exclude=.venv --exclude=.jars --exclude=.git -cf - . | tar -xf - -C "$stage"
fi
mkdir -p "$stage/$(dirname "$jar")"
cp "$jar" "$stage/$jar"

log="$stage/.build.log"
echo "build-wheel: building the wheel into $out" >&2
if ! "$python" -m pip wheel --no-deps --disable-pip-version-check -v --wheel-dir "$out" "$stage" >"$log" 2>&1; then
  cat "$log" >&2
  exit 1
fi
if grep -E "[A-Za-z]Warning\b" "$log" >&2; then
  echo "build-wheel: setuptools warned about the package's metadata (above); fix pyproject.toml" >&2
  exit 1
fi
version="$("$python" -c 'import re,sys; print(re.search(r"__version__ = \"(.+)\"", open(sys.argv[1]).read())[1])' \
  airflow_provider_fkjoin/version.py)"
wheel="$out/airflow_provider_fkjoin-$version-py3-none-any.whl"
"$python" - "$wheel" <<'EOF'
import sys, zipfile

wheel = sys.argv[1]
names = set(zipfile.ZipFile(wheel).namelist())
wanted = [
    "airflow_provider_fkjoin/engine/runtime/jars/fkjoin-engine.jar",
    "airflow_provider_fkjoin/py.typed",
    "airflow_provider_fkjoin/engine/runtime/log4j2.properties",
    "airflow_provider_fkjoin/plugins/static/joins.js",
]
missing = [name for name in wanted if name not in names]
missing += [] if any(n.endswith(".dist-info/licenses/LICENSE") for n in names) else ["LICENSE"]
if missing:
    sys.exit(f"build-wheel: {wheel} lacks {', '.join(missing)}")
EOF
echo "$wheel"

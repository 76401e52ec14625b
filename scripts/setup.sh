#!/usr/bin/env bash
# Set up a development environment in the repo: .venv with the pinned packages (constraints.txt), the
# package installed editable, Delta's jars fetched from Maven Central into .jars/ (once; later runs are
# offline), Hadoop's S3A connector and Delta's DynamoDB log store into .jars/s3a/, the engine's JVM side
# (jvm/) compiled into its jar, and a class archive that starts Spark drivers faster (fkjoin jvm-archive).
# Re-running is fast: each step is skipped when its inputs have not changed.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
python="${PYTHON:-python3.11}"
command -v "$python" >/dev/null 2>&1 || python=python3

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv" >&2
  "$python" -m venv .venv
fi

stamp=".venv/.fkjoin-setup-stamp"
want="$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup: installing pinned packages (constraints.txt)" >&2
  .venv/bin/python -m pip install --quiet --upgrade "pip>=24"
  .venv/bin/python -m pip install --quiet -c constraints.txt -e ".[dev]"
  echo "$want" > "$stamp"
fi

jars_stamp=".jars/.stamp"
jars_want="$(sha256sum scripts/delta-jars.pom.xml | cut -d' ' -f1)"
if [ "$(cat "$jars_stamp" 2>/dev/null)" != "$jars_want" ]; then
  echo "setup: fetching Delta's jars from Maven Central into .jars/" >&2
  command -v mvn >/dev/null 2>&1 || { echo "setup: Maven (mvn) is needed once to fetch Delta's jars" >&2; exit 1; }
  rm -rf .jars
  mvn -B -q -f scripts/delta-jars.pom.xml dependency:copy-dependencies \
    -DincludeScope=runtime \
    -DincludeGroupIds=io.delta,io.unitycatalog,com.fasterxml.jackson.datatype \
    -DoutputDirectory="$root/.jars" >&2
  echo "$jars_want" > "$jars_stamp"
fi

# Hadoop's S3A connector and the AWS SDK modules it needs, in .jars/s3a/ (drivers load them when there:
# s3a:// tables), and Delta's DynamoDB log store for more than one driver writing a table: the AWS SDK v1
# DynamoDB client it uses from Maven Central, the log store itself built from third_party/ (the Maven
# repository has no delta-storage-s3-dynamodb).
s3a_stamp=".jars/s3a/.stamp"
s3a_want="$( (cat scripts/s3a-jars.pom.xml scripts/s3-dynamodb-logstore.pom.xml scripts/build-dynamodb-logstore.sh;
  find third_party/delta-storage-s3-dynamodb -type f | sort | xargs cat) | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$s3a_stamp" 2>/dev/null)" != "$s3a_want" ]; then
  echo "setup: fetching the S3A connector and its AWS SDK modules from Maven Central into .jars/s3a/" >&2
  rm -rf .jars/s3a
  mvn -B -q -f scripts/s3a-jars.pom.xml dependency:copy-dependencies \
    -DincludeScope=runtime \
    -DincludeGroupIds=org.apache.hadoop,software.amazon.awssdk,software.amazon.s3.analyticsaccelerator,software.amazon.eventstream,org.reactivestreams \
    -DexcludeArtifactIds=netty-nio-client \
    -DoutputDirectory="$root/.jars/s3a" >&2
  mvn -B -q -f scripts/s3-dynamodb-logstore.pom.xml dependency:copy-dependencies \
    -DincludeScope=runtime -DincludeGroupIds=com.amazonaws -DoutputDirectory="$root/.jars/s3a" >&2
  PYTHON="$root/.venv/bin/python" "$root/scripts/build-dynamodb-logstore.sh"
  echo "$s3a_want" > "$s3a_stamp"
fi

PYTHON="$root/.venv/bin/python" "$root/scripts/build-engine-jar.sh"   # the engine's JVM side, compiled against those jars
# A class archive for short-lived Spark drivers (spark-submit tasks, the tests' subprocesses) in .jars/cds/:
# about a minute the first time and after a JVM or Spark upgrade, nothing otherwise. Set-up goes on without it.
.venv/bin/fkjoin jvm-archive >/dev/null \
  || echo "setup: no class archive for the Spark driver (fkjoin jvm-archive failed): drivers start slower" >&2
"$root/scripts/setup-e2e.sh"   # system packages for tests/e2e (chromium); a no-op once installed

#!/usr/bin/env bash
# Build Delta's DynamoDB-backed S3 log store (io.delta:delta-storage-s3-dynamodb, needed only when more
# than one driver or cluster writes the same S3 tables) from its source in third_party/ into
# .jars/s3a/delta-storage-s3-dynamodb-<version>.jar: the Maven repository this project reaches does not
# serve Delta's published jar. Compiled with the JDK's javac against Delta's delta-storage jar (.jars/),
# pyspark's Hadoop and slf4j jars, and the AWS SDK v1 DynamoDB client that scripts/setup.sh copies into
# the same folder first (scripts/s3-dynamodb-logstore.pom.xml). No download. FKJOIN_DELTA_JARS (Delta's
# jars) and FKJOIN_S3_DYNAMODB_JARS (the output folder, holding the SDK) override the repo's defaults.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
version="4.4.0"
python="${PYTHON:-.venv/bin/python}"
src="third_party/delta-storage-s3-dynamodb"
spark_jars="$("$python" -c 'import pyspark, os; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')"
delta_jars="${FKJOIN_DELTA_JARS:-$root/.jars}"
out_dir="${FKJOIN_S3_DYNAMODB_JARS:-$delta_jars/s3a}"
jar_file="$out_dir/delta-storage-s3-dynamodb-$version.jar"
ls "$out_dir"/aws-java-sdk-dynamodb-*.jar >/dev/null 2>&1 \
  || { echo "setup: no AWS SDK DynamoDB client in $out_dir (scripts/s3-dynamodb-logstore.pom.xml)" >&2; exit 1; }
command -v javac >/dev/null 2>&1 || { echo "setup: a JDK (javac, 17+) is needed to build the DynamoDB log store" >&2; exit 1; }
echo "setup: building Delta's DynamoDB log store ($jar_file)" >&2
classes="$(mktemp -d)"
trap 'rm -rf "$classes"' EXIT
find "$src/src/main/java" -type f -name '*.java' -print0 \
  | xargs -0 javac --release 11 -nowarn -XDsuppressNotes -encoding UTF-8 \
      -cp "$spark_jars/*:$delta_jars/delta-storage-$version.jar:$out_dir/*" -d "$classes"
mkdir -p "$classes/META-INF"
cp "$src/LICENSE.txt" "$src/NOTICE.txt" "$classes/META-INF/"
jar --create --file "$jar_file.tmp" -C "$classes" .
mv "$jar_file.tmp" "$jar_file"

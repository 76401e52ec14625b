#!/usr/bin/env bash
# Build the engine's JVM side (jvm/src/main/java) into airflow_provider_fkjoin/engine/runtime/jars/
# fkjoin-engine.jar with the JDK's javac, against the pinned Spark jars (pyspark's) and Delta's jars
# (.jars/): no download. Skipped when neither the sources nor the jars they compile against changed.
# The Docker image builds it the same way: PYTHON (the interpreter with pyspark), FKJOIN_DELTA_JARS (the
# folder of Delta's jars) and FKJOIN_ENGINE_JAR (where the jar goes) override the repo's defaults.
# javac's lint warnings are shown (less path, serial, deprecation: Delta's internals are deprecated API);
# scripts/test-jvm.sh compiles the same sources with -Werror, and runs the tests in jvm/src/test.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
python="${PYTHON:-.venv/bin/python}"
spark_jars="$("$python" -c 'import pyspark, os; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')"
delta_jars="${FKJOIN_DELTA_JARS:-$root/.jars}"
jar_file="${FKJOIN_ENGINE_JAR:-airflow_provider_fkjoin/engine/runtime/jars/fkjoin-engine.jar}"
out_dir="$(dirname "$jar_file")"
stamp="$out_dir/.stamp"
want="$( (find jvm/src/main -type f -name '*.java' | sort | xargs cat; ls "$spark_jars" "$delta_jars") | sha256sum | cut -d' ' -f1)"
if [ -f "$jar_file" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  exit 0
fi
command -v javac >/dev/null 2>&1 || { echo "setup: a JDK (javac, 17+) is needed to build the engine jar" >&2; exit 1; }
echo "setup: building the engine jar ($jar_file)" >&2
classes="$(mktemp -d)"
trap 'rm -rf "$classes"' EXIT
find jvm/src/main -type f -name '*.java' -print0 \
  | xargs -0 javac --release 17 -Xlint:all,-path,-serial,-deprecation,-options -XDsuppressNotes -encoding UTF-8 -cp "$spark_jars/*:$delta_jars/*" -d "$classes"
mkdir -p "$out_dir"
jar --create --file "$jar_file.tmp" -C "$classes" .
mv "$jar_file.tmp" "$jar_file"
echo "$want" > "$stamp"

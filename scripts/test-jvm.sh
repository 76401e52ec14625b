#!/usr/bin/env bash
# Test the engine's JVM side: compile jvm/src/main/java and jvm/src/test/java with javac (warnings are
# errors) against the pinned Spark jars (pyspark's) and Delta's (.jars/), and run the JUnit tests in one JVM
# with Spark's module flags (jvm/test-jvm.args). No Maven resolution of Spark's dependency tree (what
# `mvn -f jvm/pom.xml test` does, too slow for CI): JUnit's console launcher, one jar, is fetched from Maven
# Central once into .jars/junit/ at the version jvm/pom.xml names; later runs are offline. Exits non-zero
# on a compile error or warning, a failed test, or no test found.
#
#   scripts/test-jvm.sh                                                        every test
#   scripts/test-jvm.sh --select-class io.github.fkjoin.engine.TableFilesTest  JUnit's selectors instead
#
# PYTHON names the interpreter with pyspark (default .venv/bin/python), FKJOIN_DELTA_JARS Delta's jars.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
python="${PYTHON:-.venv/bin/python}"
spark_jars="$("$python" -c 'import pyspark, os; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')"
delta_jars="${FKJOIN_DELTA_JARS:-$root/.jars}"
version="$(sed -n 's:.*<junit-platform.version>\(.*\)</junit-platform.version>.*:\1:p' jvm/pom.xml)"
junit_dir="$root/.jars/junit"
junit="$junit_dir/junit-platform-console-standalone-$version.jar"
if [ ! -f "$junit" ] || [ "$(cat "$junit_dir/.stamp" 2>/dev/null)" != "$version" ]; then
  echo "test-jvm: fetching JUnit's console launcher $version from Maven Central into .jars/junit/" >&2
  command -v mvn >/dev/null 2>&1 || { echo "test-jvm: Maven (mvn) is needed once to fetch JUnit" >&2; exit 1; }
  rm -rf "$junit_dir"
  mvn -B -q org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy \
    -Dartifact="org.junit.platform:junit-platform-console-standalone:$version" \
    -DoutputDirectory="$junit_dir" >&2
  echo "$version" > "$junit_dir/.stamp"
fi

build="$(mktemp -d)"
trap 'rm -rf "$build"' EXIT
classpath="$spark_jars/*:$delta_jars/*"
javac=(javac --release 17 -Xlint:all,-path,-serial,-deprecation,-options -Werror -proc:none -XDsuppressNotes -encoding UTF-8)
find jvm/src/main/java -type f -name '*.java' -print0 | xargs -0 "${javac[@]}" -cp "$classpath" -d "$build/main"
find jvm/src/test/java -type f -name '*.java' -print0 \
  | xargs -0 "${javac[@]}" -cp "$build/main:$classpath:$junit" -d "$build/test"
cp -R jvm/src/test/resources/. "$build/test/"
mkdir -p "$build/tmp"
selected=(--scan-class-path "$build/test")
if [ "$#" -gt 0 ]; then
  selected=("$@")
fi
# basedir: the jvm folder, as Maven's surefire sets it (a test reads the sources); temporary files (the
# tests' tables, RocksDB's) under the build folder, removed on exit; C1 alone: a short run, half the time
java @jvm/test-jvm.args -Xmx1g -XX:TieredStopAtLevel=1 -Dbasedir="$root/jvm" -Djava.io.tmpdir="$build/tmp" \
  -cp "$build/test:$build/main:$classpath:$junit" org.junit.platform.console.ConsoleLauncher execute \
  --disable-banner --disable-ansi-colors --fail-if-no-tests --details=tree "${selected[@]}"

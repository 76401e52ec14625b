#!/usr/bin/env bash
# System packages the end-to-end tests need (tests/e2e/), installed once; a no-op when already present.
#   - Java 17, to run a Spark standalone master and worker from pyspark's jars (usually already there)
#   - Debian's chromium, for the headless screenshot of Airflow's grid view
# Called by scripts/setup.sh. Needs root (or passwordless sudo) and Debian's apt the first time only.
set -euo pipefail

missing=()
command -v java >/dev/null 2>&1 || missing+=(openjdk-17-jre-headless)
[ -x /usr/bin/chromium ] || missing+=(chromium)
# fonts so the screenshot shows text, not boxes (chromium pulls fonts-liberation only as a recommendation)
[ -d /usr/share/fonts/truetype/dejavu ] || missing+=(fonts-dejavu-core)

if [ "${#missing[@]}" -eq 0 ]; then
  exit 0
fi

sudo=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    sudo=(sudo -n)
  else
    echo "setup-e2e: warning: need root to install ${missing[*]} (apt-get); tests/e2e will fail without them" >&2
    exit 0
  fi
fi

echo "setup-e2e: installing ${missing[*]} with apt-get" >&2
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq >&2
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2

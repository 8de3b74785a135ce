#!/usr/bin/env bash
# The demo on the embedded default. It grows with fluffy: today it shows
# what the machine offers and the effective configuration.
set -euo pipefail
cd "$(dirname "$0")/.."
fluffy=bin/fluffy
export FLUFFY_HOME="${FLUFFY_HOME:-$PWD/.fluffy-dev/home}"
echo "== fluffy version"; $fluffy version
echo; echo "== fluffy config show"; $fluffy config show

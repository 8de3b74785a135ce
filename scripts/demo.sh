#!/usr/bin/env bash
# make demo: `fluffy demo` with the binary just built. It copies a bundled
# example (Go, or Python without a Go toolchain) to a temporary place, runs
# the test-first flow on it with the scripted replay model (no API key, no
# network), explains each step, and cleans up after itself; it keeps only
# the example's Go build cache and says where. Arguments go to fluffy demo
# (--lang python, --keep).
set -euo pipefail
cd "$(dirname "$0")/.."
exec "$PWD/bin/fluffy" demo "$@"

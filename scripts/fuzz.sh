#!/usr/bin/env bash
# Runs every fuzz target in the module for FUZZTIME (default 10s) each.
set -euo pipefail
t=${FUZZTIME:-10s}
for pkg in $(go list ./...); do
	for f in $(go test -list '^Fuzz' "$pkg" 2>/dev/null | grep '^Fuzz' || true); do
		echo "== $pkg $f"
		go test -run '^$' -fuzz "^$f\$" -fuzztime "$t" "$pkg"
	done
done

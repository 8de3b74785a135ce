#!/usr/bin/env bash
# Runs the tests repeatedly under CPU load, to find the ones that fail only
# sometimes (timing assumptions, shared files, leaked processes), before a
# release. Every package's tests run COUNT times (default 5) beside BUSY
# busy loops (default: one per core); the end lists each failing test with
# the number of runs it failed, and each package that failed without a
# failing test (a build failure, a panic, a timeout).
#
#   COUNT=5 BUSY=2 PKGS='./internal/sandboxd/...' RUN='TestStop' scripts/stress.sh
#   COUNT=2 PKGS=./cmd/fluffy GOTESTFLAGS='-skip TestScripts' scripts/stress.sh
#
# The busy loops end with the script, on Ctrl-C too. Exit status 1 when
# anything failed; the full output is then kept in the log the first line
# names.
set -uo pipefail

count=${COUNT:-5}
busy=${BUSY:-$(nproc)}
pkgs=${PKGS:-./...}
# A package's tests run COUNT times in one test binary, under one -timeout.
timeout=${TIMEOUT:-$((count * 10))m}
log=$(mktemp "${TMPDIR:-/tmp}/fluffy-stress.XXXXXX")

loops=()
stop_loops() {
	if [ ${#loops[@]} -gt 0 ]; then
		kill "${loops[@]}" 2>/dev/null
		wait "${loops[@]}" 2>/dev/null
		loops=()
	fi
}
# Background jobs of a script ignore SIGINT: the loops end only if killed.
trap stop_loops EXIT
trap 'stop_loops; exit 130' INT
trap 'stop_loops; exit 143' TERM
trap 'stop_loops; exit 129' HUP

for ((i = 0; i < busy; i++)); do
	(while :; do :; done) &
	loops+=($!)
done

echo "== go test -count=$count ${RUN:+-run '$RUN' }${GOTESTFLAGS:+$GOTESTFLAGS }$pkgs beside $busy busy loops (log: $log)"
args=(-count="$count" -timeout="$timeout")
[ -n "${RUN:-}" ] && args+=(-run "$RUN")
# shellcheck disable=SC2206 # GOTESTFLAGS holds several flags
args+=(${GOTESTFLAGS:-})
# shellcheck disable=SC2086 # PKGS may name several patterns
go test "${args[@]}" $pkgs 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
stop_loops

# Non-verbose go test prints a package's failures, then its result line
# ("ok  pkg", "FAIL pkg ...", "FAIL pkg [build failed]").
mod=$(go list -m 2>/dev/null)
awk -v count="$count" -v status="$status" -v logfile="$log" -v mod="${mod:+$mod/}" '
	/^[ \t]*--- FAIL: / { name = $3; fails[name]++; names[name] = 1; any = 1; next }
	/^(panic: |fatal error: )/ && !why { why = $0 }
	/^(ok|FAIL|\?)[ \t]/ {
		pkg = $2
		if (mod != "" && index(pkg, mod) == 1) pkg = substr(pkg, length(mod) + 1)
		if (any) {
			for (n in names) out[pkg "\t" n] += fails[n]
		} else if ($1 == "FAIL") {
			bad[pkg] = why ? why : $0
		}
		delete fails; delete names; any = 0; why = ""
	}
	END {
		n = 0
		for (k in out) n++
		if (n) {
			printf "\nfailing tests (failed runs of %d):\n", count
			for (k in out) { split(k, p, "\t"); printf "  %3d  %s  %s\n", out[k], p[1], p[2] | "sort -k2,2 -k1,1nr" }
			close("sort -k2,2 -k1,1nr")
		}
		m = 0
		for (k in bad) m++
		if (m) {
			printf "\npackages that failed without a failing test:\n"
			for (k in bad) printf "  %s  %s\n", k, bad[k]
		}
		if (!n && !m && status) printf "\ngo test failed (exit status %d) before any test: see %s\n", status, logfile
		else if (!n && !m) printf "\nno failures in %d runs of each test\n", count
		exit (n || m || status) ? 1 : 0
	}
' "$log" && rm -f "$log"

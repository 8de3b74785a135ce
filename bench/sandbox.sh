#!/usr/bin/env bash
# Side-by-side start-up cost of the native sandbox and bubblewrap, in one
# hyperfine session: `fluffy sandbox run -- /bin/true` against bwrap with
# every namespace unshared running the same command. See docs/benchmarks.md.
#
#   RUNS=300 bash bench/sandbox.sh            # the default comparison
#   BASELINE=/path/to/old/fluffy bash bench/sandbox.sh   # add an older build
#   CPU_RUNS=0 bash bench/sandbox.sh          # skip the perf stat pass
#
# `fluffy` forwards the command to the per-user sandbox server, which the
# first run (a warm-up run) starts; the script gives fluffy a private
# XDG_RUNTIME_DIR so the server is its own, and stops it at the end. Also
# measured: fluffy-core running the same command in its own process (what
# FLUFFY_SANDBOX_SERVER=off does, and what every run cost before the
# server), and `fluffy version` (the cost of starting the client at all).
#
# Two reference rows say where the rest goes: a Go hello-world (the start
# and exit of any Go process, the floor of the `fluffy` client), and
# `fluffy --home /dev/shm/… sandbox run`, whose audit log is in memory, so
# that its two durable commits per run (exec.start before the command,
# exec.end before the reply) cost no disk flush: the difference to
# `fluffy sandbox run` is what durability costs on this disk.
#
# After hyperfine (wall time), `perf stat` runs each command CPU_RUNS times
# (default 50) and reports task-clock (CPU time of the command and all its
# children), context switches and page faults. A forwarded command's work
# is done in the server, not in the client's process tree, so the server's
# CPU time (its own and its reaped children's, from /proc) over those runs
# is reported beside it, per run.
#
# fluffy records every run in its audit log; the script gives it a fresh
# data directory (FLUFFY_HOME) so runs do not wait for another fluffy's
# writer lock and every session starts from the same, empty log.
set -euo pipefail
cd "$(dirname "$0")/.."
make -s build
BIN=$PWD/bin/fluffy
WS=$(mktemp -d /var/tmp/fluffy-bench-XXXXXX)
CS=$(mktemp -d /var/tmp/fluffy-bench-cs-XXXXXX)
export FLUFFY_HOME=$(mktemp -d /var/tmp/fluffy-bench-home-XXXXXX)
export XDG_RUNTIME_DIR=$(mktemp -d /tmp/fluffy-bench-run-XXXXXX)
MEMHOME=$(mktemp -d /dev/shm/fluffy-bench-home-XXXXXX)
HELLO=$(mktemp -d /var/tmp/fluffy-bench-hello-XXXXXX)
server_pid() {
	pgrep -o -f "sandbox serve --socket $XDG_RUNTIME_DIR/"
}
cleanup() {
	local pid
	pid=$(server_pid || true)
	[ -n "$pid" ] && kill "$pid" 2>/dev/null && sleep 0.5
	rm -rf "$WS" "$CS" "$FLUFFY_HOME" "$XDG_RUNTIME_DIR" "$MEMHOME" "$HELLO"
}
trap cleanup EXIT
printf 'module hello\n\ngo 1.21\n' >"$HELLO/go.mod"
printf 'package main\n\nfunc main() {}\n' >"$HELLO/main.go"
(cd "$HELLO" && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o hello .)
BWRAP='bwrap --unshare-all --die-with-parent --new-session --ro-bind /usr /usr --symlink usr/bin /bin --symlink usr/lib /lib --symlink usr/lib64 /lib64 --proc /proc --dev /dev --tmpfs /tmp /bin/true'
# 'fluffy sandbox run' is the issue's command as a user types it in a
# workspace: a throw-away change set in $TMPDIR, removed after the run.
names=(bare bwrap 'fluffy sandbox run' 'fluffy sandbox run --changeset DIR' 'fluffy sandbox run --no-workspace'
	'fluffy sandbox run, audit log in memory' 'fluffy-core sandbox run (no server)' 'fluffy version' 'go hello-world')
cmds=('/bin/true' "$BWRAP" "$BIN sandbox run -- /bin/true" "$BIN sandbox run --changeset $CS/upper -- /bin/true" "$BIN sandbox run --no-workspace -- /bin/true"
	"$BIN --home $MEMHOME sandbox run -- /bin/true" "$BIN-core sandbox run -- /bin/true" "$BIN version" "$HELLO/hello")
if [ -n "${BASELINE:-}" ]; then
	names+=('baseline: fluffy sandbox run')
	cmds+=("$BASELINE sandbox run -- /bin/true")
fi
args=()
for i in "${!names[@]}"; do
	args+=(-n "${names[$i]}" "${cmds[$i]}")
done
cd "$WS"
JSON_OUT=${JSON:-$FLUFFY_HOME/hyperfine.json}
hyperfine -N --warmup 20 --runs "${RUNS:-300}" --export-markdown "${OUT:-/dev/stdout}" --export-json "$JSON_OUT" "${args[@]}"
# The target is on the median (issue #3); hyperfine's table gives the mean.
echo
python3 - "$JSON_OUT" <<'PY'
import json, statistics, sys
rows = json.load(open(sys.argv[1]))["results"]
print("| command | median (ms) | p10 | p90 |")
print("|---|---:|---:|---:|")
for r in rows:
    t = sorted(r["times"])
    q = lambda f: t[min(len(t) - 1, int(f * len(t)))] * 1000
    print(f"| {r['command']} | {statistics.median(t) * 1000:.1f} | {q(0.1):.1f} | {q(0.9):.1f} |")
PY
# CPU seconds of a process and its reaped children, from /proc/PID/stat.
proc_cpu_ms() {
	awk -v hz="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); print ($12 + $13 + $14 + $15) * 1000 / hz }' "/proc/$1/stat"
}
if [ "${CPU_RUNS:-50}" -gt 0 ] && command -v perf >/dev/null; then
	echo
	echo "| command | task-clock (ms CPU) | server CPU per run (ms) | context switches | page faults |"
	echo "|---|---:|---:|---:|---:|"
	for i in "${!names[@]}"; do
		spid=$(server_pid || true)
		before=0
		[ -n "$spid" ] && before=$(proc_cpu_ms "$spid")
		# shellcheck disable=SC2086
		line=$(perf stat -x, -r "${CPU_RUNS:-50}" -e task-clock,context-switches,page-faults ${cmds[$i]} 2>&1 >/dev/null |
			awk -F, '$3 == "task-clock" { cpu = $1 } $3 == "context-switches" { cs = $1 } $3 == "page-faults" { pf = $1 }
				END { printf "%.2f %d %d", cpu, cs, pf }')
		server="—"
		if [ -n "$spid" ] && [ -e "/proc/$spid" ]; then
			after=$(proc_cpu_ms "$spid")
			server=$(awk -v a="$after" -v b="$before" -v n="${CPU_RUNS:-50}" 'BEGIN { printf "%.2f", (a - b) / n }')
		fi
		read -r cpu cs pf <<<"$line"
		echo "| ${names[$i]} | $cpu | $server | $cs | $pf |"
	done
	echo
	echo "(server CPU is counted in 10 ms clock ticks over all runs of a row: rows that do not use the server show the server's idle work, about 0)"
fi

#!/usr/bin/env bash
# Side-by-side start-up cost of the native sandbox and bubblewrap, in one
# hyperfine session: `fluffy sandbox run -- /bin/true` against bwrap with
# every namespace unshared running the same command. See docs/benchmarks.md.
#
#   RUNS=300 bash bench/sandbox.sh            # the default comparison
#   BASELINE=/path/to/old/fluffy bash bench/sandbox.sh   # add an older build
#   CPU_RUNS=0 bash bench/sandbox.sh          # skip the perf stat pass
#
# Also measured: fluffy without its small init binary (it then re-executes
# itself as the init), to show what the small binary saves; fluffy-core,
# the full build, running the same command (what the small front build
# saves); and `fluffy version` (the cost of starting the fluffy binary at
# all).
#
# After hyperfine (wall time), `perf stat` runs each command CPU_RUNS times
# (default 50) and reports task-clock (CPU time of the command and all its
# children), context switches and page faults: on a shared, busy machine
# CPU time moves far less than wall time.
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
SOLO=$(mktemp -d /var/tmp/fluffy-bench-solo-XXXXXX)
export FLUFFY_HOME=$(mktemp -d /var/tmp/fluffy-bench-home-XXXXXX)
trap 'rm -rf "$WS" "$CS" "$SOLO" "$FLUFFY_HOME"' EXIT
cp "$BIN" "$SOLO/fluffy"
BWRAP='bwrap --unshare-all --die-with-parent --new-session --ro-bind /usr /usr --symlink usr/bin /bin --symlink usr/lib /lib --symlink usr/lib64 /lib64 --proc /proc --dev /dev --tmpfs /tmp /bin/true'
names=(bare bwrap 'fluffy sandbox run' 'fluffy sandbox run --no-workspace' 'fluffy sandbox run, no small init'
	'fluffy-core sandbox run (full build)' 'fluffy version')
cmds=('/bin/true' "$BWRAP" "$BIN sandbox run --changeset $CS/upper -- /bin/true" "$BIN sandbox run --no-workspace -- /bin/true"
	"$SOLO/fluffy sandbox run --changeset $CS/solo -- /bin/true" "$BIN-core sandbox run --changeset $CS/core -- /bin/true" "$BIN version")
if [ -n "${BASELINE:-}" ]; then
	names+=('baseline: fluffy sandbox run')
	cmds+=("$BASELINE sandbox run --changeset $CS/base -- /bin/true")
fi
args=()
for i in "${!names[@]}"; do
	args+=(-n "${names[$i]}" "${cmds[$i]}")
done
cd "$WS"
hyperfine -N --warmup 20 --runs "${RUNS:-300}" --export-markdown "${OUT:-/dev/stdout}" ${JSON:+--export-json "$JSON"} "${args[@]}"
if [ "${CPU_RUNS:-50}" -gt 0 ] && command -v perf >/dev/null; then
	echo
	echo "| command | task-clock (ms CPU) | context switches | page faults |"
	echo "|---|---:|---:|---:|"
	for i in "${!names[@]}"; do
		# shellcheck disable=SC2086
		perf stat -x, -r "${CPU_RUNS:-50}" -e task-clock,context-switches,page-faults ${cmds[$i]} 2>&1 >/dev/null |
			awk -F, -v name="${names[$i]}" '
				$3 == "task-clock" { cpu = $1 }
				$3 == "context-switches" { cs = $1 }
				$3 == "page-faults" { pf = $1 }
				END { printf "| %s | %.2f | %d | %d |\n", name, cpu, cs, pf }'
	done
fi

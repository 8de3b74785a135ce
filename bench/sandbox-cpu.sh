#!/usr/bin/env bash
# Where the CPU of one `fluffy sandbox run -- /bin/true` goes, by process:
# the client, the sandbox server, the sandbox init, the command and the
# kernel's workers, in ms of CPU per run. hyperfine (bench/sandbox.sh)
# runs commands back to back, so on a machine with few cores the CPU a
# run costs in all processes together bounds its wall time: this is the
# account to cut from. See docs/benchmarks.md.
#
#   RUNS=300 bash bench/sandbox-cpu.sh
#   ARGS='--no-workspace' bash bench/sandbox-cpu.sh
#   BWRAP=1 bash bench/sandbox-cpu.sh       # the same account for bwrap
#
# It samples every CPU (perf record -a) while the runs go, so anything
# else running on the machine shows up too (under its own name).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v perf >/dev/null || { echo "needs perf (apt-get install linux-perf)" >&2; exit 1; }
make -s build
BIN=$PWD/bin/fluffy
RUNS=${RUNS:-300}
FREQ=${FREQ:-4000}
WS=$(mktemp -d /var/tmp/fluffy-cpu-XXXXXX)
export FLUFFY_HOME=$(mktemp -d /var/tmp/fluffy-cpu-home-XXXXXX)
export XDG_RUNTIME_DIR=$(mktemp -d /tmp/fluffy-cpu-run-XXXXXX)
DATA=$(mktemp /tmp/fluffy-cpu-XXXXXX.data)
cleanup() {
	"$BIN" sandbox server stop >/dev/null 2>&1 || true
	pkill -f "sandbox serve --socket $XDG_RUNTIME_DIR/" 2>/dev/null || true
	rm -rf "$WS" "$FLUFFY_HOME" "$XDG_RUNTIME_DIR" "$DATA"
}
trap cleanup EXIT
cd "$WS"
# bench/sandbox.sh's bwrap command: every namespace unshared, /bin/true.
BWRAP_ARGS='--unshare-all --die-with-parent --new-session --ro-bind /usr /usr --symlink usr/bin /bin --symlink usr/lib /lib --symlink usr/lib64 /lib64 --proc /proc --dev /dev --tmpfs /tmp /bin/true'
# shellcheck disable=SC2086
if [ -n "${BWRAP:-}" ]; then
	loop() { for _ in $(seq "$1"); do bwrap $BWRAP_ARGS; done; }
else
	loop() { for _ in $(seq "$1"); do "$BIN" sandbox run ${ARGS:-} -- /bin/true; done; }
fi
loop 20 # starts the server, warms it up
perf record -q -a -F "$FREQ" -o "$DATA" -- bash -c "$(declare -f loop); BIN=$BIN ARGS='${ARGS:-}' BWRAP_ARGS='$BWRAP_ARGS' loop $RUNS" 2>/dev/null
# The init is exec'd from a memfd: its name is the descriptor's number.
perf report -i "$DATA" --sort comm --stdio -F sample,comm 2>/dev/null | awk -v f="$FREQ" -v n="$RUNS" '
	/^#/ || NF < 2 { next }
	{
		name = $2; for (i = 3; i <= NF; i++) name = name " " $i
		if (name == "swapper") { idle += $1; next }
		if (name ~ /^[0-9]+$/) name = "sandbox init (" name ")"
		if (name ~ /^(kworker|ksoftirqd|rcu_|migration|kcompactd|kdamond|khugepaged)/) name = "kernel threads (kworker, softirq, rcu)"
		if (name == "bash" || name == "seq") name = "the loop (bash)"
		ms[name] += $1 * 1000 / f / n; total += $1 * 1000 / f / n
	}
	END {
		printf "| process | CPU per run (ms) |\n|---|---:|\n"
		for (k in ms) if (ms[k] >= 0.05) printf "| %s | %.2f |\n", k, ms[k] | "sort -t\"|\" -k3 -nr"
		close("sort -t\"|\" -k3 -nr")
		printf "| **all** | **%.2f** |\n", total
		printf "\n(idle: %.2f ms per run over all CPUs; %d runs, %d Hz sampling)\n", idle * 1000 / f / n, n, f
	}'

#!/usr/bin/env bash
# Kernel cold start and idle memory, as a distribution: runs `fluffy status`
# N times, each against a fresh data directory (so each run starts a
# kernel), and reads the idle kernel's RSS from /proc. Figures go to
# docs/benchmarks.md (the kernel start and idle memory rows).
#   scripts/bench-kernel.sh [BIN] [N]      default: bin/fluffy 40
set -euo pipefail
bin=${1:-bin/fluffy}
n=${2:-40}
times=() rss=()
for _ in $(seq "$n"); do
	h=$(mktemp -d)
	s=$(date +%s%N)
	FLUFFY_HOME=$h XDG_RUNTIME_DIR='' FLUFFY_KERNEL_IDLE_TIMEOUT=5s "$bin" status --json >"$h/out"
	e=$(date +%s%N)
	times+=($(((e - s) / 1000)))
	pid=$(sed -n 's/.*"pid": \([0-9]*\).*/\1/p' "$h/out")
	sleep 0.1
	rss+=($(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status"))
	kill "$pid"
	while kill -0 "$pid" 2>/dev/null; do sleep 0.01; done
	rm -rf "$h"
done
stats() { sort -n | awk -v unit="$1" -v div="$2" '{a[NR]=$1} END {printf "min %.1f %s, median %.1f %s, p90 %.1f %s, max %.1f %s (n=%d)\n", a[1]/div, unit, a[int((NR+1)/2)]/div, unit, a[int(NR*0.9)]/div, unit, a[NR]/div, unit, NR}'; }
echo "fluffy status, cold (kernel start to status answer): $(printf '%s\n' "${times[@]}" | stats ms 1000)"
echo "idle kernel RSS: $(printf '%s\n' "${rss[@]}" | stats MiB 1024)"

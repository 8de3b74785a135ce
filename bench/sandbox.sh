#!/usr/bin/env bash
# Side-by-side start-up cost of the native sandbox and bubblewrap, in one
# hyperfine session: `fluffy sandbox run -- /bin/true` against bwrap with
# every namespace unshared running the same command. See docs/benchmarks.md.
#
#   RUNS=300 bash bench/sandbox.sh            # the default comparison
#   BASELINE=/path/to/old/fluffy bash bench/sandbox.sh   # add an older build
#
# Also measured: fluffy without its small init binary (it then re-executes
# itself as the init), to show what the small binary saves.
set -euo pipefail
cd "$(dirname "$0")/.."
make -s build
BIN=$PWD/bin/fluffy
WS=$(mktemp -d /var/tmp/fluffy-bench-XXXXXX)
CS=$(mktemp -d /var/tmp/fluffy-bench-cs-XXXXXX)
SOLO=$(mktemp -d /var/tmp/fluffy-bench-solo-XXXXXX)
trap 'rm -rf "$WS" "$CS" "$SOLO"' EXIT
cp "$BIN" "$SOLO/fluffy"
extra=()
if [ -n "${BASELINE:-}" ]; then
	extra+=(-n 'baseline: fluffy sandbox run' "$BASELINE sandbox run --changeset $CS/base -- /bin/true")
fi
cd "$WS"
hyperfine -N --warmup 20 --runs "${RUNS:-300}" --export-markdown "${OUT:-/dev/stdout}" ${JSON:+--export-json "$JSON"} \
	-n bare '/bin/true' \
	-n bwrap 'bwrap --unshare-all --die-with-parent --new-session --ro-bind /usr /usr --symlink usr/bin /bin --symlink usr/lib /lib --symlink usr/lib64 /lib64 --proc /proc --dev /dev --tmpfs /tmp /bin/true' \
	-n 'fluffy sandbox run' "$BIN sandbox run --changeset $CS/upper -- /bin/true" \
	-n 'fluffy sandbox run --no-workspace' "$BIN sandbox run --no-workspace -- /bin/true" \
	-n 'fluffy sandbox run, no small init' "$SOLO/fluffy sandbox run --changeset $CS/solo -- /bin/true" \
	"${extra[@]}"
